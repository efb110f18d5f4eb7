"""Independent calls as Ray tasks: every result in input order, every failure a row, not a crash.

::

    results = run_tasks(time_point, [(bert_ref, cfg, 128, 1), ...], retries=3)
    [r for r in results if isinstance(r, Failure)]

A task whose worker dies (killed, out of memory, its node lost) is run again, up to ``retries``
more times, on whichever worker is free: the calls are deterministic, so a retried task returns
what an undisturbed one would. A task whose function raises is not run again (the same input
raises the same way). A task that does not finish either way gives a :class:`Failure` in its
place; the other results are all there.
"""

import dataclasses

__all__ = ["Failure", "DEFAULT_RETRIES", "submit", "gather", "run_tasks", "failure_of"]

#: How many times a task whose worker died is run again.
DEFAULT_RETRIES = 3


@dataclasses.dataclass(frozen=True)
class Failure:
    """A call that gave no result.

    Members
    -------
    kind : str
        The exception's class: the function's own (``DoesNotFit``, ``BertError``, ...) or
        Ray's when the worker died on every try (``WorkerCrashedError``, ...).
    reason : str
        Its message.
    """

    kind: str
    reason: str

    @property
    def line(self):
        """``kind: reason`` on one line (the message's first)."""
        first = self.reason.strip().splitlines()[0] if self.reason.strip() else ""
        return f"{self.kind}: {first}"


def failure_of(error, retries):
    """The :class:`Failure` of an exception that ``ray.get`` raised for a task."""
    import ray

    if isinstance(error, ray.exceptions.RayTaskError):
        cause = getattr(error, "cause", None)
        if cause is not None:
            return Failure(type(cause).__name__, str(cause))
        return Failure(error.function_name or "RayTaskError", str(error))
    tries = "1 try" if retries == 0 else f"{retries + 1} tries"
    message = str(error).strip().splitlines()[0] if str(error).strip() else "no message"
    return Failure(type(error).__name__, f"{message} (gave up after {tries})")


def submit(function, calls, *, retries=DEFAULT_RETRIES):
    """Start ``function(*args)`` for every ``args`` of ``calls`` as a Ray task (one CPU each);
    return their object refs, for :func:`gather`.

    Parameters
    ----------
    function : callable
        A module-level function (Ray imports it by name on the workers).
    calls : list of tuple
        The arguments of each call; an ``ObjectRef`` among them is passed as its value (put a
        large argument shared by many calls once, with ``ray.put``, or pass the ref that
        another task returns).
    retries : int
        Runs again of a task whose worker died.
    """
    import ray

    remote = ray.remote(function).options(num_cpus=1, max_retries=retries,
                                          retry_exceptions=False)
    return [remote.remote(*args) for args in calls]


def gather(refs, *, retries=DEFAULT_RETRIES, on_done=None):
    """The results of the tasks ``refs`` (from :func:`submit`), in their order: each task's
    return value, or a :class:`Failure`; ``on_done(index, result)`` is called as each task
    finishes, in the order they finish. ``retries`` is what they were submitted with (for the
    failures' messages)."""
    import ray

    where = {ref: index for index, ref in enumerate(refs)}
    results = [None] * len(refs)
    pending = list(refs)
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            try:
                result = ray.get(ref)
            except ray.exceptions.RayError as error:
                result = failure_of(error, retries)
            results[where[ref]] = result
            if on_done is not None:
                on_done(where[ref], result)
    return results


def run_tasks(function, calls, *, retries=DEFAULT_RETRIES, on_done=None):
    """:func:`submit` the calls, then :func:`gather` them: one result or :class:`Failure` per
    call, in the order of ``calls``."""
    return gather(submit(function, calls, retries=retries), retries=retries, on_done=on_done)
