"""Joining Ray: a cluster started with ``ray start``, or Ray embedded on this machine's cores.

::

    with connect() as where:                  # no address, no $RAY_ADDRESS: ray.init() here
        where["cpus"], where["nodes"]
    with connect("10.0.0.1:6379"):            # the head of a cluster (`ray start --head`)
    with connect(workers=2):                  # embedded, with two CPUs: two tasks at a time

The address is the argument, else ``$RAY_ADDRESS``. Without one, Ray starts embedded in this
process: its raylet and workers are child processes that end with the ``with``. A process that
has Ray initialised already (a test's cluster) keeps it, and the ``with`` leaves it running.

Every node of a cluster needs bertaccel installed at the same path as the driver's (``make
setup`` in a checkout at that path), because the tasks import it and read and write the build
folders (``build/sim``, ``build/synth``) by the driver's absolute paths, on their own disks.
"""

import contextlib
import logging
import os
import sys

__all__ = ["ClusterError", "connect", "check_workers", "resolve_address"]


class ClusterError(RuntimeError):
    """Ray could not be joined, or work on it could not be completed; the message says which."""


def resolve_address(address=None):
    """The cluster to join: ``address``, else ``$RAY_ADDRESS``, else None (embedded)."""
    return address or os.environ.get("RAY_ADDRESS") or None


def check_workers(workers, address=None, *, name="workers"):
    """Refuse a worker count below 1, or one given with a cluster to join (whose nodes have the
    CPUs they were started with); return it. ``name`` is how the messages call it."""
    if workers is None:
        return None
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise ValueError(f"{name} must be an int of at least 1, not {workers!r}")
    joined = resolve_address(address)
    if joined is not None:
        raise ValueError(f"{name} limits embedded Ray only; the cluster at {joined!r} runs as "
                         f"many tasks as its nodes have CPUs (ray start --num-cpus)")
    return workers


@contextlib.contextmanager
def connect(address=None, *, workers=None, runtime_env=None):
    """Join Ray for the duration of the ``with``; yield where it runs.

    Parameters
    ----------
    address : str, optional
        ``host:port`` of a cluster's head, or ``"auto"`` (a cluster on this machine); by
        default ``$RAY_ADDRESS``, and without that Ray starts embedded.
    workers : int, optional
        Embedded only: the CPUs Ray may use, so the tasks that run at once (every task takes
        one). All of this machine's by default.
    runtime_env : dict, optional
        Ray's runtime environment of this job (``env_vars``, a ``worker_process_setup_hook``).

    While joined, this process's standard output goes to standard error (where Ray's notices
    about its workers belong).

    Yields
    ------
    dict
        ``address`` (None when embedded), ``embedded``, ``cpus`` and ``nodes``.

    Raises
    ------
    ValueError
        A bad ``workers`` (see :func:`check_workers`).
    ClusterError
        The cluster cannot be joined.
    """
    import ray

    workers = check_workers(workers, address)
    joined = resolve_address(address)
    started = not ray.is_initialized()
    # Ray prints its notices about workers (one died, a task is retried) on standard output;
    # a command's output there (--json) must stay clean, so they go to standard error.
    with contextlib.redirect_stdout(sys.stderr):
        if started:
            _init(ray, joined, workers, runtime_env)
        try:
            resources = ray.cluster_resources()
            yield {"address": joined, "embedded": started and joined is None,
                   "cpus": int(resources.get("CPU", 0)),
                   "nodes": sum(1 for node in ray.nodes() if node.get("Alive"))}
        finally:
            if started:
                ray.shutdown()


def _init(ray, joined, workers, runtime_env):
    """``ray.init``: quiet, no dashboard, offline workers; a :class:`ClusterError` if it
    fails."""
    env = dict(runtime_env or {})
    env["env_vars"] = {"HF_HUB_OFFLINE": "1", **env.get("env_vars", {})}
    options = dict(logging_level=logging.ERROR, log_to_driver=False, include_dashboard=False,
                   runtime_env=env)
    try:
        if joined is None:
            ray.init(address="local", num_cpus=workers or os.cpu_count() or 1, **options)
        else:
            ray.init(address=joined, **options)
    except Exception as error:  # noqa: BLE001 - Ray's errors vary by what went wrong
        raise ClusterError(f"cannot join Ray at {joined!r}: {error}" if joined else
                           f"cannot start Ray on this machine: {error}") from None
