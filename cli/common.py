"""What every command shares: the usage error, the one-line parser, and the checks of common
options (a config, a dimension, a probability, an output or build folder, a memory limit, the
Ray options)."""

import argparse
import sys

from ..sw.paths import check_folder

__all__ = ["Parser", "UsageError", "add_cache_options", "add_cluster_options", "build_root", "check_memory",
           "cluster_options", "config", "dimension", "log", "max_memory", "output_dir",
           "probability", "quiet_transformers", "stderr_log"]


class UsageError(Exception):
    """Bad command-line input: reported in one line, exit status 2."""


class Parser(argparse.ArgumentParser):
    # argparse prints the whole usage before its error; we promise one line.
    def error(self, message):
        raise UsageError(message)


def config(spec):
    """The config of ``--config``: a preset or a JSON file."""
    from ..hw.config import ConfigError, load_config
    try:
        return load_config(spec)
    except ConfigError as error:
        raise UsageError(str(error)) from None


def dimension(name, value):
    """``--name``'s value, at least 1."""
    if value < 1:
        raise UsageError(f"--{name} must be at least 1, not {value}")
    return value


def probability(name, value):
    """``--name``'s probability in [0, 1), 0 when not given."""
    if value is None:
        return 0.0
    if not (0.0 <= value < 1.0):
        raise UsageError(f"--{name.replace('_', '-')} must be a probability in [0, 1), "
                         f"not {value!r}")
    return value


def output_dir(spec):
    """``spec`` made ready for writing (a :class:`~bertaccel.sw.paths.PathError` if it cannot
    be: :func:`bertaccel.cli.main` reports it in one line)."""
    return check_folder(spec, what="output folder")


def build_root(spec):
    """The simulator's (or the synthesis') build folder, made ready for writing."""
    return check_folder(spec, what="build folder")


def log(text):
    """Say ``text`` on stderr, as ``bertaccel: text``."""
    print(f"bertaccel: {text}", file=sys.stderr, flush=True)


def max_memory(args):
    """``--max-memory`` in bytes, or ``None``."""
    from ..sw.budget import BudgetError, parse_size
    if args.max_memory is None:
        return None
    try:
        return parse_size(args.max_memory)
    except BudgetError as error:
        raise UsageError(str(error)) from None


def check_memory(need, args, what, hint=""):
    """Refuse work that needs ``need`` bytes, more than ``--max-memory`` or the machine has."""
    from ..sw.budget import BudgetError, check_memory as check_budget
    try:
        check_budget(need, limit=max_memory(args), what=what, hint=hint)
    except BudgetError as error:
        raise UsageError(str(error)) from None


def quiet_transformers():
    """No hub access and no progress bars from transformers."""
    import os
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()


def stderr_log(args):
    """:func:`log`, or None with ``--json``."""
    return None if args.json else (lambda text: print(f"bertaccel: {text}", file=sys.stderr))


def add_cache_options(parser):
    """``--no-cache`` and ``--cache-dir``, for the commands that compile a model."""
    parser.add_argument("--no-cache", action="store_true",
                        help="compile the model afresh and keep nothing on disk")
    parser.add_argument("--cache-dir", metavar="D",
                        help="compile cache folder ($BERTACCEL_CACHE or ~/.cache/bertaccel)")


def add_cluster_options(parser):
    """``--address``, ``--workers`` and ``--retries``, for the commands that run on Ray."""
    parser.add_argument("--address", metavar="HOST:PORT",
                        help="join the Ray cluster whose head is there (ray start --head); "
                             "$RAY_ADDRESS by default, and without either Ray starts embedded "
                             "on this machine's cores")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="embedded Ray: the CPUs it uses, so the tasks run at once (all)")
    parser.add_argument("--retries", type=int, metavar="N",
                        help="runs again of a task whose worker died (3)")


def cluster_options(args):
    """``(address, workers, retries)``, checked."""
    from ..cluster.connect import check_workers
    from ..cluster.tasks import DEFAULT_RETRIES
    try:
        check_workers(args.workers, args.address, name="--workers")
    except ValueError as error:
        raise UsageError(str(error)) from None
    if args.retries is not None and args.retries < 0:
        raise UsageError(f"--retries must be at least 0, not {args.retries}")
    return args.address, args.workers, DEFAULT_RETRIES if args.retries is None else args.retries
