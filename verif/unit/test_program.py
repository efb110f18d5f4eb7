"""Pure-Python tests of Program: validate() names every broken rule, pack/unpack check and move
tensors, and devices refuse invalid programs before running anything."""

import dataclasses

import numpy as np
import pytest
import torch

from bertaccel.hw import isa
from bertaccel.hw.config import PRESETS
from bertaccel.sw import OperandError, Program, ProgramError, SoftwareDevice
from bertaccel.sw.program import to_int8

CFG = dataclasses.replace(PRESETS["2x2"], spad_depth=64, acc_depth=64)
A, B = isa.Target.SPAD_A, isa.Target.SPAD_B


def good_instrs():
    """C (2x2) = A (2x2) @ B (2x2) in four instructions, with the tokens it needs."""
    return [
        isa.Load(target=A, addr=0, count=2),
        isa.Load(target=B, addr=0, count=2, push_next=True),
        isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=2, accumulate=False,
                   pop_prev=True, push_next=True),
        isa.Store(acc_addr=0, rows=2, pop_prev=True),
    ]


GOOD_PACK = [[0, 1], [2, 3], [4, 5], [6, 7]]   # a rows, then b rows; 8 is the zero
GOOD_UNPACK = [[0, 1], [2, 3]]


def make(instrs=None, pack=None, unpack=None):
    return Program(CFG, good_instrs() if instrs is None else instrs,
                   inputs={"a": (2, 2), "b": (2, 2)}, outputs={"c": (2, 2)},
                   pack_index=GOOD_PACK if pack is None else pack,
                   unpack_index=GOOD_UNPACK if unpack is None else unpack)


def replaced(index, instr):
    instrs = good_instrs()
    instrs[index] = instr
    return instrs


def test_good_program_validates_and_runs():
    program = make()
    program.validate()
    assert program.n_data_beats == 4 and program.n_out_beats == 2
    assert program.counts() == {"LOAD": 2, "MATMUL": 1, "STORE": 1}
    assert program.words() == [isa.encode(instr) for instr in program.instrs]
    assert [isa.decode(word) for word in program.words()] == program.instrs
    assert "MATMUL" in program.listing() and "push_next" in program.listing()
    a = torch.tensor([[1, -2], [127, -128]], dtype=torch.int8)
    b = torch.tensor([[3, 4], [-5, 6]], dtype=torch.int8)
    beats = program.pack(a=a, b=b)
    assert beats.dtype == torch.int8 and beats.shape == (4, CFG.lanes)
    result = SoftwareDevice(CFG).run(program, a=a, b=b)
    assert torch.equal(result.outputs["c"], (a.long() @ b.long()).int())


@pytest.mark.parametrize("instrs, message", [
    (replaced(0, isa.Load(target=A, addr=63, count=2)),
     r"instruction 0 \(LOAD\): addr \+ count = 65 runs past scratchpad A \(64 rows\)"),
    (replaced(1, isa.Load(target=B, addr=64, count=2, push_next=True)),
     r"instruction 1 \(LOAD\): addr \+ count = 66 runs past scratchpad B"),
    (replaced(2, isa.Matmul(a_addr=0, b_addr=63, acc_addr=0, m_len=2, accumulate=False,
                            pop_prev=True, push_next=True)),
     r"instruction 2 \(MATMUL\): b_addr \+ rows = 65 runs past scratchpad B"),
    (replaced(2, isa.Matmul(a_addr=63, b_addr=0, acc_addr=0, m_len=2, accumulate=False,
                            pop_prev=True, push_next=True)),
     r"instruction 2 \(MATMUL\): a_addr \+ m_len = 65 runs past scratchpad A"),
    (replaced(2, isa.Matmul(a_addr=0, b_addr=0, acc_addr=63, m_len=2, accumulate=False,
                            pop_prev=True, push_next=True)),
     r"instruction 2 \(MATMUL\): acc_addr \+ m_len = 65 runs past the accumulator"),
    (replaced(3, isa.Store(acc_addr=63, rows=2, pop_prev=True)),
     r"instruction 3 \(STORE\): acc_addr \+ \(strips-1\)\*stride \+ rows = 65 runs past the "
     r"accumulator"),
    (replaced(2, isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=isa.FIELD_MAX + 1,
                            accumulate=False, pop_prev=True, push_next=True)),
     r"instruction 2 \(MATMUL\): m_len must be an int from 0 to 65535, not 65536"),
    (replaced(0, isa.Load(target=A, addr=0, count=-1)),
     r"instruction 0 \(LOAD\): count must be an int from 0 to 65535, not -1"),
    (replaced(3, isa.Store(acc_addr=1.5, rows=2, pop_prev=True)),
     r"instruction 3 \(STORE\): acc_addr must be an int"),
    (replaced(0, isa.Load(target=0, addr=0, count=2)),
     r"instruction 0 \(LOAD\): target must be an isa.Target"),
    (replaced(1, isa.Load(target=B, addr=0, count=2)),
     r"instruction 2 \(MATMUL\): pop_prev pops channel l2e, which is empty"),
    (replaced(2, isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=2, accumulate=False,
                            pop_prev=True)),
     r"instruction 3 \(STORE\): pop_prev pops channel e2s, which is empty"),
    (replaced(2, isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=2, accumulate=False,
                            pop_prev=True, pop_next=True, push_next=True)),
     r"instruction 2 \(MATMUL\): pop_next pops channel s2e, which is empty"),
    (replaced(0, isa.Load(target=A, addr=0, count=2, pop_next=True)),
     r"instruction 0 \(LOAD\): pop_next pops channel e2l, which is empty"),
    (replaced(0, isa.Load(target=A, addr=0, count=2, pop_prev=True)),
     r"instruction 0 \(LOAD\): pop_prev is set, but the load unit has no prev unit"),
    (replaced(3, isa.Store(acc_addr=0, rows=2, pop_prev=True, push_next=True)),
     r"instruction 3 \(STORE\): push_next is set, but the store unit has no next unit"),
    (replaced(3, isa.Store(acc_addr=0, rows=2, pop_prev=True, push_prev=True)),
     r"token channel\(s\) do not end at 0: s2e holds 1"),
    (replaced(2, isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=2, accumulate=False,
                            pop_prev=True, push_prev=True, push_next=True)),
     r"do not end at 0: e2l holds 1"),
    (good_instrs()[:1] + [isa.Load(target=B, addr=0, count=0, push_next=True)] * 256
     + good_instrs()[1:],
     r"instruction 256 \(LOAD\): push_next pushes channel l2e past 255 tokens"),
    (replaced(1, "LOAD b"), r"instruction 1 is not an ISA instruction"),
])
def test_validate_names_the_broken_rule(instrs, message):
    program = make(instrs)
    with pytest.raises(ProgramError, match=message):
        program.validate()
    assert issubclass(ProgramError, ValueError)


@pytest.mark.parametrize("pack, unpack, message", [
    (GOOD_PACK[:3], None, r"pack index has shape \(3, 2\), but the sum of the LOAD counts "
                          r"needs \(4, 2\)"),
    ([row + [8] for row in GOOD_PACK], None, r"pack index has shape \(4, 3\)"),
    (None, GOOD_UNPACK + [[4, 4]], r"unpack index has shape \(3, 2\), but the sum of the STORE"),
    ([[0, 1], [2, 3], [4, 5], [6, 9]], None, r"pack index holds values in \[0, 9\], outside "
                                             r"\[0, 8\]"),
    (None, [[0, -1], [2, 3]], r"unpack index holds values in \[-1, 3\]"),
    (None, [[0, 1], [1, 3]], r"output element 1 is written 2 times"),
    (None, [[0, 1], [4, 3]], r"output element 2 is written 0 times"),
])
def test_validate_checks_the_indices(pack, unpack, message):
    with pytest.raises(ProgramError, match=message):
        make(pack=pack, unpack=unpack).validate()


def test_device_validates_before_running():
    bad = make(replaced(2, isa.Matmul(a_addr=0, b_addr=0, acc_addr=63, m_len=2,
                                      accumulate=False, pop_prev=True, push_next=True)))
    device = SoftwareDevice(CFG)
    ones = torch.ones((2, 2), dtype=torch.int8)
    with pytest.raises(ProgramError, match="instruction 2"):
        device.run(bad, a=ones, b=ones)
    # Nothing ran: the first LOAD would have written scratchpad A.
    assert not device.spad_a.any() and not device.spad_b.any() and not device.acc.any()


def test_pack_checks_names():
    program = make()
    ones = torch.ones((2, 2), dtype=torch.int8)
    with pytest.raises(OperandError, match="missing 'b'"):
        program.pack(a=ones)
    with pytest.raises(OperandError, match="unknown 'x'"):
        program.pack(a=ones, b=ones, x=ones)


@pytest.mark.parametrize("value, message", [
    (torch.ones((2, 3), dtype=torch.int8), r"input 'b' must be .* of shape \(2, 2\), "
                                           r"not of shape \(2, 3\)"),
    (torch.ones((2, 2)), r"input 'b' .* not a tensor of dtype torch.float32"),
    (torch.ones((2, 2), dtype=torch.bool), r"input 'b' .* dtype torch.bool"),
    (torch.tensor([[0, 1], [128, 2]], dtype=torch.int32),
     r"input 'b' must be an int8-valued integer tensor of shape \(2, 2\), but its values "
     r"\(dtype torch.int32\) lie in \[0, 128\], outside int8 \[-128, 127\]"),
    (torch.tensor([[0, 1], [-129, 2]]), r"lie in \[-129, 2\]"),
    (np.array([[0, 1], [300, 2]]), r"input 'b' .* values lie in \[0, 300\]"),
    (np.ones((2, 2), dtype=np.float64), r"input 'b' .* array of dtype float64"),
    (np.ones((3, 2), dtype=np.int8), r"not of shape \(3, 2\)"),
])
def test_pack_refuses_bad_operands(value, message):
    with pytest.raises(OperandError, match=message):
        make().pack(a=torch.ones((2, 2), dtype=torch.int8), b=value)


def test_pack_accepts_int8_valued_integers():
    program = make()
    expected = program.pack(a=torch.tensor([[1, 2], [3, 4]], dtype=torch.int8),
                            b=torch.tensor([[-128, 127], [0, -1]], dtype=torch.int8))
    for a, b in [
        (np.array([[1, 2], [3, 4]]), np.array([[-128, 127], [0, -1]], dtype=np.int16)),
        (torch.tensor([[1, 2], [3, 4]], dtype=torch.uint8), torch.tensor([[-128, 127], [0, -1]])),
        ([[1, 2], [3, 4]], [[-128, 127], [0, -1]]),
    ]:
        assert torch.equal(program.pack(a=a, b=b), expected)
    assert to_int8("x", np.zeros((0, 3), dtype=np.int64)).shape == (0, 3)


def test_pack_pads_with_zero_and_unpack_scatters():
    cfg = dataclasses.replace(PRESETS["4x8"], spad_depth=64, acc_depth=64)  # lanes = 8
    program = Program(cfg, [isa.Load(target=A, addr=0, count=2), isa.Store(acc_addr=0, rows=1)],
                      inputs={"x": (3,)}, outputs={"y": (2,), "z": (1, 1)},
                      pack_index=[[2, 1, 0, 3, 3, 3, 3, 3], [3] * 8],
                      unpack_index=[[3, 3, 2, 0, 3, 1, 3, 3]])
    program.validate()
    beats = program.pack(x=torch.tensor([5, 6, 7]))
    assert beats.tolist() == [[7, 6, 5, 0, 0, 0, 0, 0], [0] * 8]
    outputs = program.unpack(torch.arange(8, dtype=torch.int32).view(1, 8))
    assert outputs["y"].tolist() == [3, 5] and outputs["z"].tolist() == [[2]]
    with pytest.raises(OperandError, match=r"out_beats must have shape \(1, 8\)"):
        program.unpack(torch.zeros((2, 8), dtype=torch.int32))
    with pytest.raises(OperandError, match="out_beats must be a torch.int32 tensor"):
        program.unpack(torch.zeros((1, 8), dtype=torch.int64))


def test_program_constructor_checks_types():
    with pytest.raises(TypeError, match="AccelConfig"):
        Program("8x8", [], inputs={}, outputs={}, pack_index=[], unpack_index=[])
    with pytest.raises(ProgramError, match="negative"):
        Program(CFG, [], inputs={"a": (-1, 2)}, outputs={}, pack_index=[], unpack_index=[])
