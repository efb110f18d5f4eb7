"""Pure-Python tests of the ISA: the host encoder agrees with the Amaranth layouts, decode
inverts encode, and bad words and fields are refused."""

import dataclasses
import random

import numpy as np
import pytest
from amaranth import Const, Signal

from bertaccel.hw import isa

SEED = 20240611
KINDS = [isa.Load, isa.Matmul, isa.Store]
FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


def random_instr(rng, kind):
    flags = {name: rng.random() < 0.5 for name in FLAGS}

    def field():
        return rng.choice([0, 1, isa.FIELD_MAX, rng.randrange(isa.FIELD_MAX + 1)])

    if kind is isa.Load:
        return isa.Load(target=rng.choice(list(isa.Target)), addr=field(), count=field(), **flags)
    if kind is isa.Matmul:
        return isa.Matmul(a_addr=field(), b_addr=field(), acc_addr=field(), m_len=field(),
                          accumulate=rng.random() < 0.5, shift=rng.random() < 0.5, **flags)
    return isa.Store(acc_addr=field(), rows=field(), strips=field(), stride=field(),
                     op=rng.choice(list(isa.EpOp)), dest=isa.Dest.HOST, dest_addr=field(),
                     param_addr=field(), aux_addr=field(), **flags)


def layout_value(instr):
    """The ``Instr.const`` initialiser of ``instr``, written against the layouts by name."""
    body = {name: getattr(instr, name) for name, _ in isa.Body[instr.body].shape}
    return {"opcode": instr.opcode, "deps": {name: int(getattr(instr, name)) for name in FLAGS},
            "body": {instr.body: body}}


def test_layout_sizes():
    assert isa.Instr.size == isa.INSTR_WIDTH == 128
    assert isa.FIELD_MAX == (1 << isa.FIELD_WIDTH) - 1
    assert isa.TOKEN_MAX == 255


@pytest.mark.parametrize("kind", KINDS)
def test_encode_matches_layout_const(kind):
    seed = SEED + KINDS.index(kind)
    print(f"seed {seed}")
    rng = random.Random(seed)
    for _ in range(200):
        instr = random_instr(rng, kind)
        assert isa.encode(instr) == isa.Instr.const(layout_value(instr)).as_bits(), instr


@pytest.mark.parametrize("kind", KINDS)
def test_decode_inverts_encode(kind):
    seed = SEED + KINDS.index(kind)
    print(f"seed {seed}")
    rng = random.Random(seed)
    for _ in range(200):
        instr = random_instr(rng, kind)
        word = isa.encode(instr)
        assert 0 <= word < 1 << isa.INSTR_WIDTH
        assert isa.decode(word) == instr
        # Decoding reads the layouts: the same word viewed through Instr.from_bits agrees.
        view = isa.Instr.from_bits(word)
        assert view.opcode == instr.opcode


@pytest.mark.parametrize("opcode", [0, 5, 9, 15])
def test_illegal_opcode(opcode):
    with pytest.raises(isa.IllegalInstruction, match=f"illegal opcode {opcode}"):
        isa.decode(opcode)
    assert issubclass(isa.IllegalInstruction, ValueError)


def test_all_zero_word_is_illegal():
    with pytest.raises(isa.IllegalInstruction):
        isa.decode(0)


@pytest.mark.parametrize("instr, field", [
    (isa.Load(target=isa.Target.SPAD_A, addr=isa.FIELD_MAX + 1, count=0), "addr"),
    (isa.Load(target=isa.Target.SPAD_B, addr=0, count=-1), "count"),
    (isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=1 << 20, accumulate=False), "m_len"),
    (isa.Matmul(a_addr=0, b_addr=-5, acc_addr=0, m_len=1, accumulate=True), "b_addr"),
    (isa.Store(acc_addr=1 << 16, rows=1), "acc_addr"),
])
def test_field_overflow(instr, field):
    with pytest.raises(ValueError, match=f"{type(instr).__name__}.{field}"):
        isa.encode(instr)


def test_unit_of_and_with_deps():
    load = isa.Load(target=isa.Target.SPAD_A, addr=1, count=2)
    assert isa.unit_of(load) == "load"
    assert isa.unit_of(isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=0,
                                  accumulate=False)) == "exec"
    assert isa.unit_of(isa.Store(acc_addr=0, rows=0)) == "store"
    flagged = load.with_deps(push_next=True)
    assert flagged.push_next and not load.push_next and flagged.addr == 1


BODIES = [(isa.Load, isa.LoadBody), (isa.Matmul, isa.MatmulBody), (isa.Store, isa.StoreBody),
          (isa.Set, isa.SetBody)]


@pytest.mark.parametrize("cls,layout", BODIES, ids=lambda x: getattr(x, "__name__", ""))
def test_host_classes_have_their_layouts_fields(cls, layout):
    """Every host instruction class holds the dependency flags and exactly its body's fields."""
    fields = [f.name for f in dataclasses.fields(cls)]
    flags = [name for name, _ in isa.DepFlags]
    assert fields[:len(flags)] == flags
    assert set(fields[len(flags):]) == {name for name, _ in layout}
    assert isa.Body[cls.body].shape is layout


def test_two_pass():
    assert [op for op in isa.EpOp if isa.is_two_pass(op)] == list(isa.TWO_PASS)
    assert isa.Store(acc_addr=0, rows=1, op=isa.EpOp.SOFTMAX).two_pass
    op = Signal(isa.EpOp)
    assert len(isa.is_two_pass(op)) == 1


def test_pack_follows_the_layout():
    value = isa.pack(isa.LoadHead, one=Const(1, 1), empty=Const(0, 1))
    assert Const.cast(value).value == isa.LoadHead.const({"empty": 0, "one": 1}).as_value().value
    with pytest.raises(ValueError, match="fields \\['empty'\\] are not the layout's"):
        isa.pack(isa.LoadHead, empty=Const(0, 1))
    with pytest.raises(ValueError, match="field 'one' is 1 bits wide, not 2"):
        isa.pack(isa.LoadHead, empty=Const(0, 1), one=Const(0, 2))


def test_pmem_pack_and_unpack():
    """The host's PMEM words equal the layout's constants, and unpack inverts pack."""
    rng = random.Random(5)
    bias = [rng.randrange(-(1 << 31), 1 << 31) for _ in range(50)] + [-(1 << 31), (1 << 31) - 1]
    p1 = [rng.randrange(1 << 16) for _ in bias]
    p2 = [rng.randrange(1 << 16) for _ in bias]
    words = isa.pmem_pack(bias=np.array(bias), p1=np.array(p1), p2=np.array(p2))
    assert words.dtype == np.uint64
    for word, b, x, y in zip(words, bias, p1, p2):
        const = isa.PmemWord.const({"bias": b & 0xFFFFFFFF, "p1": x, "p2": y})
        assert int(word) == const.as_value().value
    fields = isa.pmem_unpack(words.astype(np.int64))
    assert fields["bias"].tolist() == bias
    assert fields["p1"].tolist() == p1 and fields["p2"].tolist() == p2
    assert isa.PMEM_WORD_BITS == 64 and isa.PMEM_SHIFT_BITS == isa.ParamsLayout["shift0"].width
