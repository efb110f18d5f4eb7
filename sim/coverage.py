"""Code coverage of the Verilator simulations: the build and run side.

With ``BERTACCEL_COVERAGE=1`` in the environment, :func:`bertaccel.sim.build.build` builds
every Verilator simulator with line (block and branch), expression and toggle coverage, and
:func:`bertaccel.sim.build.run_cocotb` has each run write its counts to a file of its own::

    BERTACCEL_COVERAGE=1 pytest -q verif/block/test_axi_shell.py   # or: make coverage
    python -m bertaccel.analysis.coverage                          # the report

A coverage build is a different simulator from the normal one, and never taken for it: its
folder is the normal one with ``-cov`` added (:func:`build_dir`), its flags (and so the hash
kept in the folder) hold :data:`BUILD_ARGS`, its source key has ``+coverage`` added, and its
Verilog keeps Amaranth's source locations, relative to the repository
(:func:`bertaccel.hw.verilog.source_locations`), for the report to map each Verilog line back to
the ``hw/*.py`` line that made it. Without the variable nothing here is used: normal builds,
their hashes and their Verilog are exactly what they were. Icarus builds have no coverage.

Each run's counts go to ``<data root>/dat/<design>/<verilog hash>-<pid>-<n>-<time>.dat``
(cocotb's Verilator main writes them at the end of the simulation, to the file named by
``+verilator+coverage+file+``; :func:`finish_run` then compresses them to ``.dat.gz``: a run of
the 2x2 harness writes 70 MB that gzip makes a few), so that parallel pytest workers, an
:class:`~bertaccel.sw.devices.rtl.RtlDevice` that serves many runs from one simulator, and
successive sessions never overwrite each other. The design is the build folder's name without
``-cov`` (``bertaccel_harness-r2c2_...``, ``axi_shell-r8c8_...``); the Verilog that was
simulated is kept beside the counts as ``<verilog hash>.v``, so the report reads the Verilog the
counts were made on even after the build folder has been rebuilt. The data root is
``build/coverage`` under the working directory, or ``BERTACCEL_COVERAGE_DIR``.
"""

import gzip
import hashlib
import itertools
import os
import shutil
import threading
import time
from pathlib import Path

__all__ = ["ENV", "DIR_ENV", "BUILD_ARGS", "SUFFIX", "enabled", "data_root", "build_dir",
           "design_name", "run_plusargs", "finish_run", "verilog_hash"]

#: The switch: ``1`` builds and runs every Verilator simulation with coverage.
ENV = "BERTACCEL_COVERAGE"
#: Where the counts and the report go; ``build/coverage`` under the working directory if unset.
DIR_ENV = "BERTACCEL_COVERAGE_DIR"
#: Verilator flags of a coverage build: block and branch points (``--coverage-line``), the
#: outcomes of each boolean expression (``--coverage-expr``) and a 0->1 and a 1->0 point for
#: every bit of every signal (``--coverage-toggle``). ``--coverage-user`` would count SVA cover
#: properties, of which Amaranth's Verilog has none.
BUILD_ARGS = ("--coverage-line", "--coverage-expr", "--coverage-toggle")
#: Added to the name of a coverage build's folder.
SUFFIX = "-cov"

_runs = itertools.count()
_lock = threading.Lock()


def enabled(environ=None):
    """Whether ``BERTACCEL_COVERAGE`` asks for coverage builds (``1``, ``yes``, ``true``)."""
    value = (os.environ if environ is None else environ).get(ENV, "")
    return value.strip().lower() in ("1", "yes", "true", "on")


def data_root():
    """The folder of the counts (``dat/``) and of the report: absolute."""
    return Path(os.environ.get(DIR_ENV) or Path.cwd() / "build" / "coverage").resolve()


def build_dir(folder):
    """The coverage build's folder for the normal build folder ``folder``."""
    folder = Path(folder)
    return folder if folder.name.endswith(SUFFIX) else folder.with_name(folder.name + SUFFIX)


def design_name(folder):
    """The design a build folder's runs are counted under: its name without ``-cov``."""
    name = Path(folder).name
    return name[:-len(SUFFIX)] if name.endswith(SUFFIX) else name


def verilog_hash(text):
    """The name of a version of a design's Verilog: 16 hex digits of its SHA-256."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def run_plusargs(sim):
    """The simulator arguments that send a run's counts to a new file of the design's folder.

    The Verilog of ``sim`` is copied there first (once a version), as ``<verilog hash>.v``.
    """
    text = Path(sim.verilog).read_text()
    digest = verilog_hash(text)
    folder = data_root() / "dat" / design_name(sim.build_dir)
    folder.mkdir(parents=True, exist_ok=True)
    copy = folder / f"{digest}.v"
    if not copy.is_file():
        tmp = folder / f".{digest}.v.tmp-{os.getpid()}-{threading.get_ident()}"
        tmp.write_text(text)
        tmp.replace(copy)
    with _lock:
        number = next(_runs)
    path = folder / f"{digest}-{os.getpid()}-{number}-{time.time_ns()}.dat"
    return [f"+verilator+coverage+file+{path}"]


def finish_run(plusargs):
    """Compress the counts of a finished run (:func:`run_plusargs`) to ``.dat.gz``; nothing
    happens when the run wrote none (it was killed, or did not start)."""
    for arg in plusargs:
        path = Path(arg.removeprefix("+verilator+coverage+file+"))
        if not path.is_file():
            continue
        packed = path.with_name(path.name + ".gz")
        tmp = path.with_name(f".{packed.name}.tmp")
        with open(path, "rb") as source, gzip.open(tmp, "wb", compresslevel=1) as target:
            shutil.copyfileobj(source, target, 1 << 20)
        tmp.replace(packed)
        path.unlink()
