"""The random legal programs of :mod:`bertaccel.sw.random_programs`: legal, self-contained (the
software device gives the same outputs whatever ran before), and spread over every field."""

import pytest
import torch

from bertaccel.hw import isa
from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice
from bertaccel.sw.random_programs import random_program

__all__ = []

SEEDS = range(40)


def _instrs(cfg):
    return [instr for seed in SEEDS for instr in random_program(cfg, seed).instrs]


@pytest.mark.parametrize("config", ["2x2", "4x8", "8x8"])
def test_every_field_is_drawn(config):
    cfg = PRESETS[config]
    instrs = _instrs(cfg)
    loads = [i for i in instrs if isinstance(i, isa.Load)]
    matmuls = [i for i in instrs if isinstance(i, isa.Matmul)]
    stores = [i for i in instrs if isinstance(i, isa.Store)]
    sets = [i for i in instrs if isinstance(i, isa.Set)]
    assert {i.target for i in loads} == set(isa.Target)
    assert any(i.addr + i.count == cfg.spad_depth for i in loads if i.target != isa.Target.PMEM)
    assert {(i.accumulate, i.shift) for i in matmuls} == {(a, s) for a in (0, 1) for s in (0, 1)}
    assert any(i.a_addr + i.m_len == cfg.spad_depth for i in matmuls)
    assert any(i.b_addr == cfg.spad_depth - cfg.rows for i in matmuls)
    assert {i.op for i in stores} == set(isa.EpOp)
    assert {i.strips for i in stores} >= {1, 2, 3} and any(i.stride > i.rows for i in stores)
    assert len({i.dest_addr for i in stores}) > len(stores) // 2
    assert {i.index for i in sets} == set(isa.Param)
    widest = {param: max(i.value for i in sets if i.index == param) for param in isa.Param}
    assert all(widest[p].bit_length() > isa.PARAM_WIDTHS[p] - 4 for p in isa.Param), widest


def _run(device, program, seed):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randint(-128, 128, program.inputs["x"], generator=gen, dtype=torch.int8)
    return device.run(program, x=x)


def test_outputs_do_not_depend_on_what_ran_before():
    """Each program writes every row and register it reads, so a device that ran another
    program first (its memories and registers keep that run's values, as the RTL's do) gives
    what a fresh one gives."""
    cfg = PRESETS["2x2"]
    used = SoftwareDevice(cfg)
    for seed in range(12):
        _run(used, random_program(cfg, 500 + seed), 500 + seed)
        program = random_program(cfg, seed)
        again, fresh = _run(used, program, seed), _run(SoftwareDevice(cfg), program, seed)
        assert torch.equal(again.outputs["y"], fresh.outputs["y"]), seed
        assert again.cycles == fresh.cycles
