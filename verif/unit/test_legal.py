"""The rules of hw/legal.py: one definition, evaluated three ways, that agree.

``first_fault`` evaluates every rule on whole programs at once (``numpy``, the program-order
state by prefix sums); here each instruction is checked alone, on Python ints, with the state
carried instruction by instruction, and both must name the same fault and index on random
illegal programs. The gateware's timing split (hw/checker.py) rests on which rules read the
state or the products: checked against the signals each rule's Amaranth expression reads.
(RTL against the software device: verif/system/test_illegal_rtl.py.)
"""

import random

import pytest
from amaranth import Signal

from bertaccel.hw import isa, legal
from bertaccel.hw.config import PRESETS
from bertaccel.sw.hand_programs import raw_program
from bertaccel.sw.illegal_programs import illegal_cases
from bertaccel.sw.program import ProgramError


def _scalar_first_fault(cfg, words):
    """Each word's rules on ints, the state carried along (the reference)."""
    state = legal.State()
    for index, word in enumerate(words):
        f = isa.raw_fields(word)
        st = f["store"]
        products = {pair: st[pair[0]] * st[pair[1]] for pair in legal.PRODUCTS}
        for fault, opcode, bad in legal.rules(cfg, f, state, products):
            if bad and (opcode is None or f["opcode"] == opcode.value):
                return fault, index
        changes = {}
        if f["opcode"] == isa.Opcode.SET.value:
            name = {isa.Param.ROW_LEN.value: "row_len", isa.Param.SHIFT1.value: "shift1"}
            if f["set"]["index"] in name:
                changes[name[f["set"]["index"]]] = f["set"]["value"]
        for flag, channel in legal.CHANNELS[isa.Opcode(f["opcode"])].items():
            if channel and f[flag]:
                step = 1 if flag.startswith("push") else -1
                changes[channel] = changes.get(channel, getattr(state, channel)) + step
        state = legal.State(**{**state.__dict__, **changes})
    return legal.Fault.NONE, None


def test_first_fault_is_each_instruction_checked_in_turn():
    for name in ("2x2", "4x8"):
        cfg = PRESETS[name]
        cases, bases = illegal_cases(cfg, 40, seed=11)
        for _, program, _ in cases:
            words = program.words()
            assert legal.first_fault(cfg, words)[:2] == _scalar_first_fault(cfg, words)
        for program, _ in bases:
            assert legal.first_fault(cfg, program.words()) == (legal.Fault.NONE, None, None)


def test_state_at_is_what_the_instructions_before_leave():
    rng = random.Random(3)
    cfg = PRESETS["2x2"]
    words = [isa.encode(isa.Set(index=isa.Param.ROW_LEN, value=rng.randrange(1 << 16))),
             isa.encode(isa.Load(target=isa.Target.SPAD_A, addr=0, count=0, push_next=True)),
             isa.encode(isa.Set(index=isa.Param.SHIFT1, value=9))]
    assert legal.state_at(words, 0) == legal.State()
    assert legal.state_at(words, 2).row_len == isa.decode(words[0]).value
    assert legal.state_at(words, 2).l2e == 1 and legal.state_at(words, 2).shift1 == 0


def test_the_timing_classes_are_what_each_rule_reads():
    cfg = PRESETS["4x8"]
    f = {"opcode": Signal(4)}
    f.update({name: Signal() for name, _ in isa.DepFlags})
    for body in ("load", "matmul", "store", "set"):
        f[body] = {name: Signal(field.width, name=f"{body}_{name}")
                   for name, field in isa.Body[body].shape}
    state = legal.State(**{name: Signal(16, name=name)
                           for name in legal.State.__dataclass_fields__})
    products = {pair: Signal(32, name="x".join(pair)) for pair in legal.PRODUCTS}
    state_signals = set(map(id, state.__dict__.values()))
    product_signals = set(map(id, products.values()))
    listed = legal.rules(cfg, f, state, products)
    for fault, _, cond in listed:
        read = set(map(id, cond._rhs_signals()))
        assert bool(read & product_signals) == (fault in legal.READ_PRODUCTS), fault
        assert bool(read & state_signals) == (fault in legal.READ_STATE), fault
    faults = [fault for fault, _, _ in listed]
    late = [fault in legal.READ_PRODUCTS for fault in faults]
    assert late == sorted(late), "the rules of the products come last"


@pytest.mark.parametrize("flag", ["pop_prev", "pop_next", "push_prev", "push_next"])
def test_a_set_takes_no_tokens(flag):
    """The store unit takes a SET once it and the epilogue are empty, whatever its flags: a
    flag on a SET is NO_UNIT, in words that say so."""
    cfg = PRESETS["2x2"]
    program = raw_program(cfg, [isa.Set(index=isa.Param.MUL0, value=1, **{flag: True})])
    assert legal.first_fault(cfg, program.words())[:2] == (legal.Fault.NO_UNIT, 0)
    with pytest.raises(ProgramError, match=f"{flag} is set, but a SET takes no tokens"):
        program.validate()
