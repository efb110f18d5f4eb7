"""Block test: the systolic mesh, every output row checked against ``a @ W[bank]``.

The schedule is the one the execute unit relies on: a bank is loaded (``rows`` shifts, last
weight row first) while the other bank serves operands, and a bank is only reloaded once its
last operand has drained (``rows + cols`` cycles). Operands arrive on random banks, with
extreme values mixed in, and each output is checked exactly ``cfg.mesh_latency`` cycles later.
"""

import os
import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

from bertaccel.hw.config import AccelConfig, PRESETS
from bertaccel.hw.mesh import SystolicMesh
from bertaccel.verif.build import build, run_cocotb

__all__ = []

MODULE = "bertaccel.verif.test_mesh"


def _pack(values, width):
    word = 0
    for i, value in enumerate(values):
        word |= (value & ((1 << width) - 1)) << (i * width)
    return word


def _unpack(word, width, count):
    out = []
    for i in range(count):
        value = (word >> (i * width)) & ((1 << width) - 1)
        out.append(value - (1 << width) if value >> (width - 1) else value)
    return out


@cocotb.test()
async def mesh_schedule(dut):
    cfg = AccelConfig.from_dict(__import__("json").loads(os.environ["BERTACCEL_CONFIG"]))
    seed = int(os.environ.get("BERTACCEL_SEED", "1"))
    log = dut._log.getChild("tb.mesh")
    log.info("config %s, seed %d", cfg.name, seed)
    rng = random.Random(seed)
    lo, hi = cfg.in_range

    def rand_val():
        return rng.choice([lo, hi, 0]) if rng.random() < 0.15 else rng.randint(lo, hi)

    def rand_block():
        return [[rand_val() for _ in range(cfg.cols)] for _ in range(cfg.rows)]

    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    dut.i_a.value = dut.i_bank.value = dut.i_w.value = dut.i_w_en.value = 0
    dut.i_w_bank.value = 0
    await FallingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0

    weights = [None, None]
    expected = {}          # cycle -> the sums that must appear then
    checked = 0
    cycle = 0

    async def step(a_row=None, bank=0, w_row=None, w_bank=0):
        nonlocal cycle, checked
        dut.i_a.value = _pack(a_row or [0] * cfg.rows, cfg.in_width)
        dut.i_bank.value = bank
        dut.i_w_en.value = int(w_row is not None)
        dut.i_w.value = _pack(w_row or [0] * cfg.cols, cfg.in_width)
        dut.i_w_bank.value = w_bank
        if a_row is not None:
            block = weights[bank]
            expected[cycle + cfg.mesh_latency] = [
                sum(a_row[r] * block[r][c] for r in range(cfg.rows)) for c in range(cfg.cols)]
        await ReadOnly()
        if cycle in expected:
            got = _unpack(int(dut.o_c.value), cfg.acc_width, cfg.cols)
            want = expected.pop(cycle)
            assert got == want, f"cycle {cycle}: got {got}, want {want}"
            checked += 1
        await FallingEdge(dut.clk)
        cycle += 1

    async def load(bank, block, operands_bank=None):
        # Shift the block in, last row first; optionally stream operands on the other bank.
        for s in range(cfg.rows):
            row = [rand_val() for _ in range(cfg.rows)] if operands_bank is not None else None
            await step(row, operands_bank or 0, block[cfg.rows - 1 - s], bank)
        weights[bank] = block

    # Phase 1: load bank 0 with nothing in flight.
    await load(0, rand_block())
    # Phase 2: load bank 1 while bank 0 serves operands, then a while longer on bank 0.
    await load(1, rand_block(), operands_bank=0)
    for _ in range(2 * cfg.rows):
        await step([rand_val() for _ in range(cfg.rows)], 0)
    # Phase 3: bank 1 serves while bank 0 drains, then bank 0 is reloaded under traffic.
    for _ in range(cfg.rows + cfg.cols):
        await step([rand_val() for _ in range(cfg.rows)], 1)
    await load(0, rand_block(), operands_bank=1)
    # Phase 4: both banks, in random order, with idle cycles.
    for _ in range(40 * (cfg.rows + cfg.cols)):
        if rng.random() < 0.2:
            await step()
        else:
            await step([rand_val() for _ in range(cfg.rows)], rng.randrange(2))
    for _ in range(cfg.mesh_latency + 1):
        await step()
    assert not expected, f"{len(expected)} outputs never checked"
    log.info("%d output rows checked", checked)
    assert checked > 40 * (cfg.rows + cfg.cols) // 2


@pytest.mark.parametrize("preset", ["2x2", "4x8", "8x8"])
def test_mesh(preset, tmp_path):
    cfg = PRESETS[preset]
    sim = build(lambda: SystolicMesh(cfg), name="mesh", build_dir=f"build/sim/mesh-{cfg.tag}")
    run_cocotb(sim, MODULE, "mesh_schedule", timeout=300,
               extra_env={"BERTACCEL_CONFIG": cfg.to_json(), "BERTACCEL_SEED": "11"},
               log_file=tmp_path / "sim.log")
