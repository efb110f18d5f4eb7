"""Block tests: the scratchpad and the accumulator memories.

Random writes and reads every cycle against a Python model: reads return the row written at an
earlier edge one cycle after the address; neither of the accumulator's read ports sees a write
in the same cycle (no transparency: the execute unit forwards its own writes).
"""

import json
import os
import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

from bertaccel.hw.config import AccelConfig, PRESETS
from bertaccel.hw.memory import Accumulator, Scratchpad
from bertaccel.sim.build import build, run_cocotb

__all__ = []

MODULE = "verif.block.test_memories"


async def _reset(dut, inputs):
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    for name in inputs:
        getattr(dut, name).value = 0
    await FallingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0


@cocotb.test()
async def scratchpad_random(dut):
    params = json.loads(os.environ["BERTACCEL_MEM"])
    depth, bits = params["depth"], params["lanes"] * params["width"]
    rng = random.Random(int(os.environ.get("BERTACCEL_SEED", "1")))
    await _reset(dut, ["wr__addr", "wr__data", "wr__en", "rd__addr", "rd__en"])
    model = [0] * depth
    pending = None
    for cycle in range(3000):
        wr_addr, rd_addr = rng.randrange(depth), rng.randrange(depth)
        if rng.random() < 0.3:
            rd_addr = wr_addr  # a read and a write of one row at one edge
        word, wr_en, rd_en = rng.getrandbits(bits), rng.random() < 0.5, rng.random() < 0.8
        dut.wr__addr.value, dut.wr__data.value, dut.wr__en.value = wr_addr, word, int(wr_en)
        dut.rd__addr.value, dut.rd__en.value = rd_addr, int(rd_en)
        await ReadOnly()
        if pending is not None:
            got = int(dut.rd__data.value)
            assert got == pending, f"cycle {cycle}: read {got:#x}, want {pending:#x}"
        # Not transparent: the read at this edge returns the row before this edge's write.
        pending = model[rd_addr] if rd_en else pending
        if wr_en:
            model[wr_addr] = word
        await FallingEdge(dut.clk)


@cocotb.test()
async def accumulator_random(dut):
    cfg = AccelConfig.from_dict(json.loads(os.environ["BERTACCEL_CONFIG"]))
    bits = cfg.cols * cfg.acc_width
    rng = random.Random(int(os.environ.get("BERTACCEL_SEED", "1")))
    await _reset(dut, ["wr__addr", "wr__data", "wr__en", "rmw_rd__addr", "rmw_rd__en",
                       "st_rd__addr", "st_rd__en"])
    model = [0] * cfg.acc_depth
    rmw_pending = st_pending = None
    for cycle in range(3000):
        wr_addr = rng.randrange(cfg.acc_depth)
        rmw_addr = wr_addr if rng.random() < 0.4 else rng.randrange(cfg.acc_depth)
        st_addr = wr_addr if rng.random() < 0.4 else rng.randrange(cfg.acc_depth)
        word, wr_en = rng.getrandbits(bits), rng.random() < 0.6
        dut.wr__addr.value, dut.wr__data.value, dut.wr__en.value = wr_addr, word, int(wr_en)
        dut.rmw_rd__addr.value, dut.rmw_rd__en.value = rmw_addr, 1
        dut.st_rd__addr.value, dut.st_rd__en.value = st_addr, 1
        await ReadOnly()
        if rmw_pending is not None:
            assert int(dut.rmw_rd__data.value) == rmw_pending, f"cycle {cycle}: rmw port"
            assert int(dut.st_rd__data.value) == st_pending, f"cycle {cycle}: store port"
        st_pending, rmw_pending = model[st_addr], model[rmw_addr]   # before this edge's write
        if wr_en:
            model[wr_addr] = word
        await FallingEdge(dut.clk)


def test_scratchpad(tmp_path):
    params = {"lanes": 4, "width": 8, "depth": 64}
    sim = build(lambda: Scratchpad(**params), name="scratchpad",
                build_dir="build/sim/scratchpad-l4w8d64")
    run_cocotb(sim, MODULE, "scratchpad_random", timeout=300,
               extra_env={"BERTACCEL_MEM": json.dumps(params), "BERTACCEL_SEED": "3"},
               log_file=tmp_path / "sim.log")


@pytest.mark.parametrize("preset", ["4x8"])
def test_accumulator(preset, tmp_path):
    import dataclasses
    cfg = dataclasses.replace(PRESETS[preset], acc_depth=64)
    sim = build(lambda: Accumulator(cfg), name="accumulator",
                build_dir=f"build/sim/accumulator-{cfg.tag}")
    run_cocotb(sim, MODULE, "accumulator_random", timeout=300,
               extra_env={"BERTACCEL_CONFIG": cfg.to_json(), "BERTACCEL_SEED": "5"},
               log_file=tmp_path / "sim.log")
