"""Formal proof of the instruction checker, :class:`~bertaccel.hw.checker.Checker`.

Any instruction word in any cycle, taken or not in any cycle, a program restart and reset in
any cycle (``restart`` never with a ``take``, as documented). The harness's model is written
here from the rules of ``hw/legal.py`` as their comments state them, one instruction at a time,
with exact arithmetic (every sum and product as wide as it needs: no clipping, no ``ahead``
registers, no sums of bounds): its own program-order state (``ROW_LEN`` and ``SHIFT1`` as the
SETs leave them, each token channel's count), the first illegal instruction since reset, its
first failing rule (in the order of :func:`~bertaccel.hw.legal.rules`, the rules of the
products last) and its index since the last restart. Asserted: ``error`` is never raised before
the model has seen an illegal instruction; whenever the checker is not ``busy`` its ``error``
is the model's (so every illegal instruction is flagged, and only those); once raised,
``fault`` and ``pc`` are the model's; before, both are 0. Each fault but TOKEN_FULL is covered.

Bounded: 6 cycles from reset, which check every rule on any first instruction (a verdict is out
within 4 cycles of the take: steps 0 to 4), a SET before a STORE (ROW_LEN, GSHIFT), a pop of an
empty channel and the first fault of several instructions in flight, the early verdict of one
meeting the product verdict of the one before (a cover: a fault at index 1). Each fault is
covered within 8 cycles (STORE_AUX, a LAYERNORM, needs two SETs before it). Not within them:
TOKEN_FULL (255 pushes first), and indices and state beyond a few instructions.
"""

import dataclasses

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Cover
from amaranth.lib import data

from bertaccel.golden.intops import MAX_ROW
from bertaccel.hw import isa
from bertaccel.hw.checker import Checker
from bertaccel.hw.config import PRESETS
from bertaccel.hw.legal import Fault

from verif.tb.formal import check

#: A 2x2 core with a PMEM deep enough that ROW_WIDTH (more than ``MAX_ROW // cols`` strips)
#: can be a STORE's first fault; with 256 rows STORE_PARAM always comes first.
CFG = dataclasses.replace(PRESETS["2x2"], pmem_depth=1024)
CHANNELS = ("l2e", "e2l", "e2s", "s2e")


def _one_of(value, members):
    out = 0
    for member in members:
        out = out | (value == member.value)
    return out


class _Model:
    """The verdict on one instruction (a view of :data:`isa.Instr`) and the state it finds."""

    def __init__(self, instr, state):
        self.instr, self.state = instr, state

    def tokens(self):
        """``{channel: (pushed, popped)}`` of this instruction (1-bit values)."""
        op, deps = self.instr.opcode, self.instr.deps
        mine = {code: op == code for code in isa.Opcode}
        o = isa.Opcode
        return {
            "l2e": (mine[o.LOAD] & deps.push_next, mine[o.MATMUL] & deps.pop_prev),
            "e2l": (mine[o.MATMUL] & deps.push_prev, mine[o.LOAD] & deps.pop_next),
            "e2s": (mine[o.MATMUL] & deps.push_next, mine[o.STORE] & deps.pop_prev),
            "s2e": (mine[o.STORE] & deps.push_prev, mine[o.MATMUL] & deps.pop_next),
        }

    def faults(self):
        """``[(Fault, bad)]`` in the order the checker reports the first."""
        instr, state, cfg = self.instr, self.state, CFG
        op, deps = instr.opcode, instr.deps
        o = isa.Opcode
        ld, mm, st, st_set = instr.body.load, instr.body.matmul, instr.body.store, instr.body.set
        load, matmul, store = (op == o.LOAD), (op == o.MATMUL), (op == o.STORE)
        set_ = op == o.SET
        to_pmem = ld.target == isa.Target.PMEM
        per_row = cfg.pmem_beats_per_row
        moves = (st.rows != 0) & (st.strips != 0)
        epilogue = moves & (st.op != isa.EpOp.RAW)
        two_pass = moves & ((st.op == isa.EpOp.SOFTMAX) | (st.op == isa.EpOp.LAYERNORM))
        layernorm = moves & (st.op == isa.EpOp.LAYERNORM)
        index = st_set.index.as_value()
        too_wide = 0
        for param, width in isa.PARAM_WIDTHS.items():
            if width < isa.SET_VALUE_WIDTH:
                too_wide = too_wide | ((index == param.value) & (st_set.value[width:] != 0))
        tokens = self.tokens()
        empty = 0
        full = 0
        for channel, (pushed, popped) in tokens.items():
            count = getattr(state, channel)
            empty = empty | (popped & (count == 0))
            full = full | (pushed & (count == isa.TOKEN_MAX))
        no_unit = ((load & (deps.pop_prev | deps.push_prev))
                   | (store & (deps.pop_next | deps.push_next))
                   | (set_ & (deps.as_value() != 0)))
        return [
            (Fault.OPCODE, ~_one_of(op.as_value(), isa.Opcode)),
            (Fault.TARGET, load & ~_one_of(ld.target.as_value(), isa.Target)),
            (Fault.PMEM_BEATS, load & to_pmem & (ld.count % per_row != 0)),
            (Fault.LOAD_RANGE, load & (to_pmem & (ld.addr + ld.count // per_row > cfg.pmem_depth)
                                       | ~to_pmem & (ld.addr + ld.count > cfg.spad_depth))),
            (Fault.MATMUL_B, matmul & (mm.b_addr + cfg.rows > cfg.spad_depth)),
            (Fault.MATMUL_A, matmul & (mm.a_addr + mm.m_len > cfg.spad_depth)),
            (Fault.MATMUL_ACC, matmul & (mm.acc_addr + mm.m_len > cfg.acc_depth)),
            (Fault.STORE_OP, store & ~_one_of(st.op.as_value(), isa.EpOp)),
            (Fault.STORE_DEST, store & (st.dest != isa.Dest.HOST)),
            (Fault.STORE_PARAM, store & epilogue & (st.param_addr + st.strips > cfg.pmem_depth)),
            (Fault.GSHIFT, store & layernorm & (state.shift1 < 8)),
            (Fault.ROW_WIDTH, store & two_pass & (st.strips > MAX_ROW // cfg.cols)),
            (Fault.ROW_LEN, store & two_pass & ((state.row_len == 0)
                                                | (state.row_len > st.strips * cfg.cols))),
            (Fault.SET_INDEX, set_ & ~_one_of(index, isa.Param)),
            (Fault.SET_VALUE, set_ & too_wide),
            (Fault.NO_UNIT, no_unit),
            (Fault.TOKEN_EMPTY, empty),
            (Fault.TOKEN_FULL, full),
            # (strips - 1) * stride as strips * stride - stride: one product, as wide as it is.
            (Fault.STORE_ACC, store & moves & (st.acc_addr + st.strips * st.stride - st.stride
                                               + st.rows > cfg.acc_depth)),
            (Fault.STORE_AUX, store & layernorm & (st.aux_addr + st.strips * st.rows
                                                   > cfg.spad_depth)),
        ]


class _State:
    def __init__(self):
        self.row_len = Signal(isa.PARAM_WIDTHS[isa.Param.ROW_LEN], name="model_row_len")
        self.shift1 = Signal(isa.PARAM_WIDTHS[isa.Param.SHIFT1], name="model_shift1")
        for channel in CHANNELS:
            setattr(self, channel, Signal(isa.TOKEN_WIDTH, name=f"model_{channel}"))

    def fields(self):
        return [self.row_len, self.shift1] + [getattr(self, ch) for ch in CHANNELS]


class CheckerProperties(Elaboratable):
    def __init__(self):
        self.checker = Checker(CFG)

    def elaborate(self, platform):
        m = Module()
        m.submodules.checker = checker = self.checker
        word, take, restart = AnySeq(isa.INSTR_WIDTH), AnySeq(1), AnySeq(1)
        m.d.comb += [checker.instr.eq(word), checker.take.eq(take),
                     checker.restart.eq(restart), Assume(~(take & restart))]
        instr = data.View(isa.Instr, word)
        state = _State()
        model = _Model(instr, state)
        listed = model.faults()
        bad = 0
        for _, cond in listed:
            bad = bad | cond
        first = Signal(range(max(Fault) + 1))
        for fault, cond in reversed(listed):   # the first listed wins
            with m.If(cond):
                m.d.comb += first.eq(fault)
        # The model's program state and verdicts, in program order.
        count = Signal(32)
        error, fault, pc = Signal(), Signal.like(first), Signal(32)
        with m.If(take):
            m.d.sync += count.eq(count + 1)
            set_ = instr.opcode == isa.Opcode.SET
            for param, target in ((isa.Param.ROW_LEN, state.row_len),
                                  (isa.Param.SHIFT1, state.shift1)):
                with m.If(set_ & (instr.body.set.index == param)):
                    m.d.sync += target.eq(instr.body.set.value)
            for channel, (pushed, popped) in model.tokens().items():
                held = getattr(state, channel)
                m.d.sync += held.eq(held + pushed - popped)
            with m.If(~error & bad):
                m.d.sync += [error.eq(1), fault.eq(first), pc.eq(count)]
        with m.If(restart):
            m.d.sync += [count.eq(0)] + [field.eq(0) for field in state.fields()]
        m.d.comb += [
            Assert(~checker.error | error),
            Assert(checker.busy | (checker.error == error)),
            Assert(~checker.error | ((checker.fault == fault) & (checker.pc == pc))),
            Assert(checker.error | ((checker.fault == 0) & (checker.pc == 0))),
        ]
        for code in Fault:
            if code not in (Fault.NONE, Fault.TOKEN_FULL):
                m.d.comb += Cover(checker.error & (checker.fault == code))
        m.d.comb += Cover(checker.error & (checker.pc == 1))
        return m


@pytest.mark.slow
def test_checker_flags_exactly_the_illegal_instructions(tmp_path):
    result = check(CheckerProperties(), name="checker", workdir=tmp_path, depth=6,
                   mode="bmc", cover=8)
    assert result.proven and result.covered, result.summary
