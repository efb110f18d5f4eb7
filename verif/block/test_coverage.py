"""Code coverage of the Verilator simulations (:mod:`bertaccel.sim.coverage`,
:mod:`bertaccel.analysis.coverage`) on a design small enough to build in seconds.

:class:`Toy` is a little state machine with a state that no stimulus here reaches (``Never``),
a ``Switch`` case that is never taken (``i_op == 3``) and a condition never true (``i_never``).
It is built with ``BERTACCEL_COVERAGE=1`` and run twice with different stimuli (the cocotb test
in this file); the report must add up both runs, find those lines uncovered and name the lines
of this file behind them, apply a waiver, and write its text, JSON and lcov files. The normal
conversion must stay without source locations.

The same module is the cocotb test module (``toy`` below, run inside the simulator).
"""

import inspect
import json
import os

import cocotb
from amaranth import Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge

from bertaccel.analysis import coverage as report_mod
from bertaccel.analysis.coverage_data import read_dat
from bertaccel.hw.verilog import convert, source_locations
from bertaccel.sim import coverage
from bertaccel.sim.build import build, run_cocotb

__all__ = []

MODULE = "verif.block.test_coverage"
#: The two runs' stimuli: (i_go, i_op) a cycle.
STIMULI = {"count-up": [(1, 0), (1, 0), (1, 0), (0, 0)],
           "count-down": [(1, 0), (1, 1), (1, 1), (0, 0), (1, 0)]}


class Toy(wiring.Component):
    """Idle -> Count (while ``i_go``), counting by ``i_op``; ``i_never`` leads to Never."""

    i_go: In(1)
    i_op: In(2)
    i_never: In(1)
    o_count: Out(4)
    o_flag: Out(1)

    def elaborate(self, platform):
        m = Module()
        count = Signal(4)
        m.d.comb += self.o_count.eq(count)
        with m.FSM():
            with m.State("Idle"):
                with m.If(self.i_go):
                    m.next = "Count"
            with m.State("Count"):
                with m.Switch(self.i_op):
                    with m.Case(0):
                        m.d.sync += count.eq(count + 1)
                    with m.Case(1):
                        m.d.sync += count.eq(count - 1)
                    with m.Case(3):
                        m.d.sync += count.eq(0)
                with m.If(self.i_never):
                    m.next = "Never"
                with m.Elif(~self.i_go):
                    m.next = "Idle"
            with m.State("Never"):
                m.d.sync += self.o_flag.eq(1)
        return m


# -- cocotb side (runs inside the simulator) ------------------------------------------------------

@cocotb.test()
async def toy(dut):
    """Reset, then the stimulus named by BERTACCEL_TOY_STIMULUS, one pair a cycle."""
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    dut.i_go.value = dut.i_op.value = dut.i_never.value = 0
    for _ in range(2):
        await FallingEdge(dut.clk)
    dut.rst.value = 0
    for go, op in STIMULI[os.environ["BERTACCEL_TOY_STIMULUS"]]:
        dut.i_go.value, dut.i_op.value = go, op
        await FallingEdge(dut.clk)


# -- pytest side ----------------------------------------------------------------------------------

def _line_of(text):
    """``verif/block/test_coverage.py:N`` of the line of :class:`Toy` holding ``text``."""
    lines, first = inspect.getsourcelines(Toy)
    number = next(first + i for i, line in enumerate(lines) if text in line)
    return f"verif/block/test_coverage.py:{number}"


def test_source_locations_only_when_asked():
    plain = convert(Toy(), name="toy")
    assert "src =" not in plain
    with source_locations():
        located = convert(Toy(), name="toy")
    assert f'(* src = "{_line_of("o_flag: Out(1)")}" *)' in located
    assert "/work" not in located and os.sep + "site-packages" not in located
    assert convert(Toy(), name="toy") == plain  # the switch ends with its block


def test_coverage_report(sim_root, tmp_path, monkeypatch):
    monkeypatch.setenv(coverage.ENV, "1")
    monkeypatch.setenv(coverage.DIR_ENV, str(tmp_path / "cov"))
    sim = build(Toy, name="toy", build_dir=sim_root / "coverage_toy", quick=True)
    assert sim.coverage and sim.build_dir.name == "coverage_toy-cov"
    stamp = json.loads((sim.build_dir / ".bertaccel-build.json").read_text())
    assert stamp["flags"]["coverage"] and "--coverage-toggle" in stamp["flags"]["args"]
    for name in STIMULI:
        run_cocotb(sim, MODULE, extra_env={"BERTACCEL_TOY_STIMULUS": name}, timeout=120,
                   log_file=tmp_path / f"{name}.log")
    assert len(list((tmp_path / "cov" / "dat" / "coverage_toy").glob("*.dat.gz"))) == 2

    waivers = tmp_path / "waivers.txt"
    flag = _line_of("o_flag: Out(1)")
    waivers.write_text(f"# test waivers\n{flag} -- the Never state is unreachable here\n"
                       "nothing/*/line/* -- matches nothing: reported as unused\n")
    (rep,), used = report_mod.report(tmp_path / "cov", waivers)
    assert rep.design == "coverage_toy" and rep.runs == 2 and rep.excluded > 0
    # The runs' counts add up, point by point (clk's rising edges: the longer run has more).
    runs = [read_dat(path) for path in sorted((tmp_path / "cov" / "dat").rglob("*.dat.gz"))]
    clk = next(p for p in rep.points if p.kind == "toggle" and p.comment == "clk:0->1")
    each = [count for run in runs for keys, (count, _) in run.items() if "clk:0->1" in keys]
    assert len(each) == 2 and each[0] != each[1] and clk.count == sum(each), (clk, each)
    # The lines never reached are uncovered, each under the line of this file behind it.
    uncovered = {rep.python_line(p) for p in rep.points
                 if p.kind in ("line", "branch") and not p.covered}
    assert {flag, _line_of("i_never: In(1)"), _line_of("count = Signal(4)")} <= uncovered
    counted = [p for p in rep.points if p.kind == "toggle" and p.signal == "$4"]
    assert counted and {rep.python_line(p) for p in counted} == {_line_of("count + 1")}
    # The waiver takes every uncovered point of o_flag's line, and only those.
    assert rep.waived and all(rep.python_line(rep.points[i]) == flag for i in rep.waived)
    assert [w.used > 0 for w in used] == [True, False]
    items = list(enumerate(rep.points))
    before, after = (report_mod.figure(items, "line", waived) for waived in ((), rep.waived))
    assert after[1] < before[1] and after[0] == before[0] and before[0] < before[1]

    text = report_mod.write_report([rep], used, tmp_path / "out", html=False)
    assert "coverage_toy" in text and "unused: waivers.txt:3" in text
    assert _line_of("i_never: In(1)") in text and flag not in text  # waived: not listed
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["designs"]["coverage_toy"]["runs"] == 2
    assert "DA:" in (tmp_path / "out" / "coverage_toy" / "coverage.info").read_text()
    python_info = (tmp_path / "out" / "coverage_toy" / "python.info").read_text()
    assert "verif/block/test_coverage.py" in python_info
    assert read_dat(tmp_path / "out" / "coverage_toy" / "merged.dat.gz") == rep.table
