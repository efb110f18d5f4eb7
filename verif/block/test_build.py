"""Smoke test of the simulation flow: Amaranth -> Verilog -> Verilator -> cocotb.

A tiny stream component (a running sum with valid/ready) is built with
:func:`bertaccel.sim.build.build` and driven by the cocotb test in this same file, with idle
cycles on the source and backpressure on the sink. If this fails, every RTL test will; it is the
first thing to look at. The pure-Python tests of the build layer (Verilog rewriting and
reproducibility) are here too; the RTL device built on this layer is tested end to end in
``verif/system/test_rtl_device.py``.

The same module is both the pytest file (``test_*`` functions) and the cocotb test module
(``@cocotb.test`` coroutines, imported inside the simulator as ``verif.block.test_build``).
"""

import os
import random
import time

import cocotb
import pytest
from amaranth import Module, Signal, unsigned
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

from bertaccel.hw.verilog import compact_zero_init, trigger_comb_at_start
from bertaccel.hw.verilog import convert
from bertaccel.sim.build import (SimulationError, SimulationTimeout,
                                   build, last_build_seconds, run_cocotb)

__all__ = []

WIDTH = 8  # the smoke DUT's input width; the testbench reads it from BERTACCEL_SMOKE_WIDTH


class RunningSum(wiring.Component):
    """Adds every accepted input to a 32-bit sum and offers the new sum on its output.

    A one-deep pipeline: the input is ready when the output register is empty or being taken.
    It also holds a 1024-word memory (unused, but it exercises the zero-init rewrite).
    """

    i_data: In(WIDTH)
    i_valid: In(1)
    i_ready: Out(1)
    o_data: Out(32)
    o_valid: Out(1)
    o_ready: In(1)

    def elaborate(self, platform):
        m = Module()
        m.submodules.scratch = scratch = Memory(shape=unsigned(32), depth=1024, init=[])
        port = scratch.read_port()
        m.d.comb += port.addr.eq(self.i_data)
        total = Signal(32)
        m.d.comb += self.i_ready.eq(~self.o_valid | self.o_ready)
        with m.If(self.o_valid & self.o_ready):
            m.d.sync += self.o_valid.eq(0)
        with m.If(self.i_valid & self.i_ready):
            m.d.sync += [
                total.eq(total + self.i_data + port.data),  # port.data is always 0
                self.o_data.eq(total + self.i_data),
                self.o_valid.eq(1),
            ]
        return m


# -- cocotb side (runs inside the simulator) ------------------------------------------------------

@cocotb.test()
async def running_sum(dut):
    """Random inputs with idle cycles on the source and backpressure on the sink; every sum
    checked.

    Inputs are driven just after the falling edge; ``ReadOnly`` then shows the settled handshake
    that the next rising edge will act on.
    """
    width = int(os.environ["BERTACCEL_SMOKE_WIDTH"])
    seed = int(os.environ.get("BERTACCEL_SMOKE_SEED", "1"))
    log = dut._log.getChild("tb")
    log.info("seed %d (replay with BERTACCEL_SMOKE_SEED=%d)", seed, seed)
    if os.environ.get("BERTACCEL_SMOKE_HANG"):
        time.sleep(600)  # for the timeout test: a simulator that never finishes
    rng = random.Random(seed)
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    dut.i_valid.value = 0
    dut.o_ready.value = 0
    for _ in range(3):
        await FallingEdge(dut.clk)
    dut.rst.value = 0

    values = [rng.randrange(1 << width) for _ in range(300)]
    expected, total = [], 0
    for value in values:
        total = (total + value) & 0xFFFF_FFFF
        expected.append(total)
    sent, got = 0, []
    for _ in range(20 * len(values)):
        if len(got) == len(values):
            break
        await FallingEdge(dut.clk)
        offer = sent < len(values) and rng.random() < 0.7  # 30 % idle cycles
        dut.i_valid.value = int(offer)
        dut.i_data.value = values[sent] if offer else 0
        dut.o_ready.value = int(rng.random() < 0.6)       # 40 % backpressure
        await ReadOnly()
        if offer and dut.i_ready.value:
            sent += 1
        if dut.o_valid.value and dut.o_ready.value:
            got.append(int(dut.o_data.value))
    first_bad = next((i for i, (a, b) in enumerate(zip(got, expected)) if a != b), len(got))
    assert got == expected, (f"{len(got)} of {len(values)} sums received; the first wrong or "
                             f"missing one is number {first_bad} (seed {seed})")
    if os.environ.get("BERTACCEL_SMOKE_FAIL"):
        assert False, "failing on purpose (BERTACCEL_SMOKE_FAIL is set)"


# -- pytest side ----------------------------------------------------------------------------------

MODULE = "verif.block.test_build"


@pytest.fixture(scope="module")
def smoke_build(tmp_path_factory):
    # A fresh folder per session, so that test_build_and_run sees a real build.
    build_dir = tmp_path_factory.mktemp("sim") / f"running_sum-w{WIDTH}"
    return build(RunningSum, name="running_sum", build_dir=build_dir)


def _env(**extra):
    return {"BERTACCEL_SMOKE_WIDTH": str(WIDTH), **extra}


def test_compact_zero_init():
    text = ("module m;\n  reg [7:0] mem [2:0];\n  initial begin\n    mem[0] = 8'd0;\n"
            "    mem[1] = 8'd0;\n    mem[2] = 8'd0;\n  end\n"
            "  reg [7:0] rom [1:0];\n  initial begin\n    rom[0] = 8'd0;\n    rom[1] = 8'd5;\n"
            "  end\nendmodule\n")
    out = compact_zero_init(text)
    assert "mem[0] = 8'd0" not in out and "< 3;" in out and "mem[bertaccel_zero_init_0] = 0" in out
    assert "rom[1] = 8'd5;" in out  # non-zero initialisers are left alone


def test_trigger_comb_at_start():
    trigger = r"\$auto$verilog_backend.cc:2355:dump_module$1 "
    text = (f"module m(o);\n  reg {trigger} = 0;\n  reg keep = 0;\n  output reg o;\n"
            f"  always @* begin\n    if ({trigger}) begin end\n    o = 1'h1;\n  end\n"
            "endmodule\n")
    out = trigger_comb_at_start(text)
    assert f"reg {trigger} = 0;" not in out and f"  reg {trigger};\n" in out
    assert f"initial {trigger} <= 1'h0;" in out      # a non-blocking update: after every start
    assert "reg keep = 0;" in out                     # a register, not a trigger: left alone
    assert out.count("lint_off INITIALDLY") == out.count("lint_on INITIALDLY") == 1
    assert trigger_comb_at_start(out) == out


def test_verilog_is_reproducible():
    first = convert(RunningSum(), name="running_sum")
    assert first == convert(RunningSum(), name="running_sum")
    assert "/work" not in first and "test_build.py" not in first  # no source paths
    assert "scratch[1023] = " not in first  # the 1024 zero initialisers became a loop


def test_build_and_run(smoke_build, tmp_path):
    assert smoke_build.rebuilt and smoke_build.binary.is_file()
    results = run_cocotb(smoke_build, MODULE, "running_sum", extra_env=_env(), timeout=120,
                         log_file=tmp_path / "sim.log")
    assert results.is_file()


def test_build_is_cached(smoke_build):
    again = build(RunningSum, name="running_sum", build_dir=smoke_build.build_dir)
    assert not again.rebuilt
    # The stamp keeps how long the build took: the estimate of the next one.
    assert 0 < last_build_seconds(smoke_build.build_dir) <= smoke_build.seconds + 0.1
    assert last_build_seconds(smoke_build.build_dir / "none") is None
    keyed = build(RunningSum, name="running_sum", build_dir=smoke_build.build_dir,
                  source_key="k1")
    assert not keyed.rebuilt
    # With a matching source key the design factory is not even called.
    skipped = build(lambda: pytest.fail("converted although the source key matched"),
                    name="running_sum", build_dir=smoke_build.build_dir, source_key="k1")
    assert not skipped.rebuilt


def test_damaged_binary_is_rebuilt(smoke_build, tmp_path):
    """A simulator binary that is not the file the build made (cut short, or one byte changed)
    is rebuilt, not run: the stamp holds its size and checksum."""
    binary = smoke_build.binary
    whole = binary.read_bytes()
    for damaged in (whole[:len(whole) // 2], whole[:-1] + bytes([whole[-1] ^ 1])):
        binary.write_bytes(damaged)
        again = build(RunningSum, name="running_sum", build_dir=smoke_build.build_dir,
                      source_key="k1")
        assert again.rebuilt and binary.read_bytes() != damaged
    assert run_cocotb(again, MODULE, "running_sum", extra_env=_env(), timeout=120,
                      log_file=tmp_path / "sim.log").is_file()


def test_failure_is_reported(smoke_build, tmp_path):
    with pytest.raises(SimulationError, match="1 of 1 test"):
        run_cocotb(smoke_build, MODULE, "running_sum", timeout=120,
                   extra_env=_env(BERTACCEL_SMOKE_FAIL="1"), log_file=tmp_path / "sim.log")


def test_timeout_is_reported(smoke_build, tmp_path):
    """A simulator that never finishes is killed at ``timeout`` and reported as such (it would
    otherwise sleep for 10 minutes and then pass)."""
    with pytest.raises(SimulationTimeout, match="killed after 3 s"):
        run_cocotb(smoke_build, MODULE, "running_sum", timeout=3,
                   extra_env=_env(BERTACCEL_SMOKE_HANG="1"), log_file=tmp_path / "sim.log")


def test_simulator_choices_are_checked(tmp_path, capsys):
    from bertaccel.hw.config import PRESETS
    from bertaccel import cli
    from bertaccel.sw.devices.rtl import RtlDevice

    with pytest.raises(ValueError, match="simulator must be one of verilator, icarus, not 'vcs'"):
        build("module m; endmodule\n", name="m", build_dir=tmp_path, simulator="vcs")
    with pytest.raises(ValueError, match="icarus_std must be one of 2005, 2012, not '2017'"):
        build("module m; endmodule\n", name="m", build_dir=tmp_path, simulator="icarus",
              icarus_std="2017")
    with pytest.raises(ValueError, match="simulator must be"):
        RtlDevice(PRESETS["2x2"], simulator="vcs")
    with pytest.raises(ValueError, match="icarus_std must be"):
        RtlDevice(PRESETS["2x2"], simulator="icarus", icarus_std=2012)
    gemm_args = ["gemm", "--config", "2x2", "--m", "2", "--k", "2", "--n", "2"]
    for extra, message in ((["--simulator", "icarus"], "apply to --device rtl only"),
                           (["--device", "rtl", "--icarus-std", "2005"],
                            "applies to --simulator icarus only"),
                           (["--device", "rtl", "--simulator", "vcs"], "invalid choice")):
        assert cli.main(gemm_args + extra) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, err
