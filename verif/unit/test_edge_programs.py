"""The edge programs of :mod:`bertaccel.sw.edge_programs`: the legal ones are legal and the
exact ones self-contained; each checker program sits at its rule's bound, so that one bit of
the field it aims at decides its fault."""

import dataclasses

import pytest
import torch

from bertaccel.hw import isa, legal
from bertaccel.hw.config import PRESETS
from bertaccel.hw.legal import Fault
from bertaccel.sw import SoftwareDevice
from bertaccel.sw import edge_programs as edges
from bertaccel.sw.hand_programs import raw_program

__all__ = []

CFG = PRESETS["2x2"]


def _fault(instrs):
    fault, index, _ = legal.first_fault(CFG, raw_program(CFG, instrs).words())
    return fault, index


def _changed(instrs, index, **fields):
    out = list(instrs)
    out[index] = dataclasses.replace(out[index], **fields)
    return out


@pytest.mark.parametrize("config", ["2x2", "4x8"])
def test_exact_and_timed_programs_are_legal(config):
    cfg = PRESETS[config]
    for instrs in {**edges.exact_programs(cfg), **edges.timed_programs(cfg)}.values():
        program = raw_program(cfg, instrs)
        assert legal.first_fault(cfg, program.words())[0] is Fault.NONE
        program.validate()


def test_exact_programs_read_only_what_they_write():
    gen = torch.Generator().manual_seed(3)
    for name, instrs in edges.exact_programs(CFG).items():
        program = raw_program(CFG, instrs)
        x = torch.randint(-128, 128, program.inputs["x"], generator=gen, dtype=torch.int8)
        fresh = SoftwareDevice(CFG).run(program, x=x).outputs["y"]
        used = SoftwareDevice(CFG)
        other = raw_program(CFG, [isa.Load(target=isa.Target.SPAD_A, addr=0, count=64),
                                  isa.Load(target=isa.Target.SPAD_B, addr=0, count=64)])
        used.run(other, x=torch.full(other.inputs["x"], 77, dtype=torch.int8))
        assert torch.equal(used.run(program, x=x).outputs["y"], fresh), name
        assert fresh.abs().sum() > 0, name


def test_accumulate_forward_pairs_rows_one_bit_apart():
    (instrs,) = edges.exact_programs(CFG).values()
    rows = {i.acc_addr for i in instrs if isinstance(i, isa.Matmul)}
    near, far = sorted(rows)
    assert near & 4 and far & 4 and near ^ far == 64     # bit 2 set in both, bit 6 apart
    assert sum(i.accumulate for i in instrs if isinstance(i, isa.Matmul)) >= 10


def test_timed_programs_reach_the_high_bits():
    timed = edges.timed_programs(CFG)
    (store,) = timed["store_strips_max"]
    assert store.strips - 2 >= 1 << 14 and store.strips > 1 << 11 and store.stride == 0
    pushes = [i for i in timed["exec_to_store_owed"]
              if isinstance(i, isa.Matmul) and i.push_next]
    assert len(pushes) == 12


def test_checker_programs_fault_where_named():
    programs = edges.checker_programs(CFG)
    for channel in ("l2e", "e2l", "e2s", "s2e"):
        assert _fault(programs[f"full_{channel}"]) == (Fault.TOKEN_FULL, isa.TOKEN_MAX)
    for name in ("acc_odd_past", "acc_rows_past", "rows_high"):
        assert _fault(programs[name]) == (Fault.STORE_ACC, 0), name
    assert _fault(programs["acc_late"]) == (Fault.STORE_ACC, 100)
    assert _fault(programs["aux_past"]) == (Fault.STORE_AUX, 2)
    assert _fault(programs["param_high"]) == (Fault.NONE, None)
    assert _fault(programs["matmul_long"]) == (Fault.MATMUL_A, 0)
    assert programs["matmul_long"][0].m_len & 1 << 13


def test_one_bit_moves_each_checker_program_across_its_bound():
    programs = edges.checker_programs(CFG)
    odd = programs["acc_odd_past"]
    assert _fault(_changed(odd, 0, acc_addr=odd[0].acc_addr & ~1))[0] is Fault.NONE
    aux = programs["aux_past"]
    assert aux[2].aux_addr & 256
    assert _fault(_changed(aux, 2, aux_addr=aux[2].aux_addr ^ 256))[0] is Fault.NONE
    high = programs["rows_high"]
    assert high[0].param_addr & 256 and _fault(_changed(high, 0, rows=0))[0] is Fault.NONE
    param = programs["param_high"]
    assert param[0].param_addr & 1 << 11
    assert _fault(_changed(param, 0, stride=param[0].stride ^ 64))[0] is Fault.STORE_ACC


@pytest.mark.parametrize("op", ["requant", "gelu", "softmax", "layernorm"])
def test_flat_gemms_have_nearly_constant_rows(op):
    from bertaccel.sw.epilogue import random_gemm

    gen = torch.Generator().manual_seed(7)
    inputs, epilogue = random_gemm(5, 9, 12, op, generator=gen, operands="flat")
    b = inputs["b"].to(torch.int16)
    steps = b - b.min(dim=1, keepdim=True).values       # each row of b: one value, or +1
    assert set(steps.unique().tolist()) <= {0, 1} and steps.any()
    if op == "layernorm":
        assert not inputs["r"].any() and epilogue.bias is None
