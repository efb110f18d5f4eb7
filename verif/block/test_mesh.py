"""Block test: the systolic mesh, every output row checked against ``a @ W[bank]``.

The mesh promises that a weight row written in cycle *t* (``i_w_en``, row ``i_w_row`` of bank
``i_w_bank``) is multiplied by every operand row presented on that bank after cycle *t*, and by
none presented in cycle *t* or before, whatever else is in flight. The model keeps the two
banks as the operands must see them and checks each output exactly ``cfg.mesh_latency`` cycles
after its operand row. Phases: a bank loaded with nothing in flight, its rows read back one by
one with one-hot operands (each weight is in the right PE and bank); the other bank loaded
while the first serves operands; a bank rewritten right behind its last operand row (the first
write in that row's own cycle) and used right behind its last write; then random operands,
banks, idle cycles and writes of random rows, in random order, every cycle. Operand and weight
values mix in the extremes.
"""

import json
import os
import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

from bertaccel.hw.config import AccelConfig, PRESETS
from bertaccel.hw.mesh import SystolicMesh
from bertaccel.sim.build import build, run_cocotb

__all__ = []

MODULE = "verif.block.test_mesh"


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
    cfg = AccelConfig.from_dict(json.loads(os.environ["BERTACCEL_CONFIG"]))
    seed = int(os.environ.get("BERTACCEL_SEED", "1"))
    log = dut._log.getChild("tb.mesh")
    log.info("config %s, seed %d", cfg.name, seed)
    rng = random.Random(seed)
    lo, hi = cfg.in_range

    def rand_val():
        return rng.choice([lo, hi, 0]) if rng.random() < 0.15 else rng.randint(lo, hi)

    def rand_a():
        return [rand_val() for _ in range(cfg.rows)]

    def rand_block():
        return [[rand_val() for _ in range(cfg.cols)] for _ in range(cfg.rows)]

    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    dut.i_a.value = dut.i_bank.value = dut.i_w.value = dut.i_w_en.value = 0
    dut.i_w_bank.value = dut.i_w_row.value = 0
    await FallingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0

    weights = [[[0] * cfg.cols for _ in range(cfg.rows)] for _ in range(2)]
    expected = {}          # cycle -> the sums that must appear then
    checked = 0
    cycle = 0

    async def step(a_row=None, bank=0, write=None):
        """One cycle: an operand row on ``bank`` (or none), and ``write`` = (bank, row, vector)
        (or none)."""
        nonlocal cycle, checked
        dut.i_a.value = _pack(a_row or [0] * cfg.rows, cfg.in_width)
        dut.i_bank.value = bank
        w_bank, w_row, w_vec = write or (0, 0, [0] * cfg.cols)
        dut.i_w_en.value = int(write is not None)
        dut.i_w_bank.value = w_bank
        dut.i_w_row.value = w_row
        dut.i_w.value = _pack(w_vec, cfg.in_width)
        if a_row is not None:
            block = weights[bank]
            expected[cycle + cfg.mesh_latency] = [
                sum(a_row[r] * block[r][c] for r in range(cfg.rows)) for c in range(cfg.cols)]
        if write is not None:          # seen by the operand rows after this one
            weights[w_bank][w_row] = list(w_vec)
        await ReadOnly()
        if cycle in expected:
            got = _unpack(int(dut.o_c.value), cfg.acc_width, cfg.cols)
            want = expected.pop(cycle)
            assert got == want, f"cycle {cycle}: got {got}, want {want}"
            checked += 1
        await FallingEdge(dut.clk)
        cycle += 1

    async def load(bank, block, operands_bank=None):
        # Write the block's rows in a random order; optionally stream operands on a bank.
        order = rng.sample(range(cfg.rows), cfg.rows)
        for row in order:
            a_row = rand_a() if operands_bank is not None else None
            await step(a_row, operands_bank or 0, (bank, row, block[row]))

    async def read_back(bank):
        # One-hot operands: output row r is row r of the bank, column by column.
        for r in range(cfg.rows):
            await step([int(i == r) for i in range(cfg.rows)], bank)

    # Phase 1: load bank 0 with nothing in flight, read it back.
    await load(0, rand_block())
    await read_back(0)
    # Phase 2: load bank 1 while bank 0 serves operands; read both back.
    await load(1, rand_block(), operands_bank=0)
    await read_back(1)
    await read_back(0)
    # Phase 3: bank 0's last operand row, then bank 0 rewritten right behind it (its first row
    # in that very cycle) while bank 1 serves, then bank 0 used right behind its last write.
    for _ in range(cfg.rows):
        await step(rand_a(), 0)
    block = rand_block()
    order = rng.sample(range(cfg.rows), cfg.rows)
    await step(rand_a(), 0, (0, order[0], block[order[0]]))
    for row in order[1:]:
        await step(rand_a(), 1, (0, row, block[row]))
    await read_back(0)
    for _ in range(cfg.rows):
        await step(rand_a(), 0)
    # Phase 4: everything random, every cycle.
    for _ in range(40 * (cfg.rows + cfg.cols)):
        a_row = None if rng.random() < 0.2 else rand_a()
        write = None
        if rng.random() < 0.4:
            write = (rng.randrange(2), rng.randrange(cfg.rows),
                     [rand_val() for _ in range(cfg.cols)])
        await step(a_row, rng.randrange(2), write)
    for _ in range(cfg.mesh_latency + 1):
        await step()
    assert not expected, f"{len(expected)} outputs never checked"
    log.info("%d output rows checked", checked)
    assert checked > 40 * (cfg.rows + cfg.cols) // 2


@pytest.mark.parametrize("preset", ["2x2", "4x8", "8x8"])
def test_mesh(preset, tmp_path):
    cfg = PRESETS[preset]
    sim = build(lambda: SystolicMesh(cfg), name="mesh", build_dir=f"build/sim/mesh-{cfg.tag}",
                quick=True)
    run_cocotb(sim, MODULE, "mesh_schedule", timeout=300,
               extra_env={"BERTACCEL_CONFIG": cfg.to_json(), "BERTACCEL_SEED": "11"},
               log_file=tmp_path / "sim.log")
