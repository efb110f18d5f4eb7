"""The controller's instruction checker: every rule of :mod:`bertaccel.hw.legal`, in gateware."""

from amaranth import Cat, Module, Mux, Signal, Value
from amaranth.lib import enum, wiring
from amaranth.lib.wiring import In, Out

from . import isa
from .dsp import product_register
from .legal import FAULT_WIDTH, PRODUCTS, State, product_rules, rules, token_steps

__all__ = ["Checker", "PC_WIDTH"]

#: Width of the program counter: the instruction count of a run, as the harness counts it.
PC_WIDTH = 32


class Checker(wiring.Component):
    """Checks each instruction the controller takes, in the cycles after it took it.

    ``instr`` is registered every cycle and ``take`` marks the cycles in which the controller
    took it; the rules of :func:`~bertaccel.hw.legal.rules` run on it and on the
    :class:`~bertaccel.hw.legal.State` the instructions before it left, and the first
    instruction that fails one sets ``error`` (sticky until reset), ``fault`` (the first
    failing rule's :class:`~bertaccel.hw.legal.Fault`) and ``pc`` (its index in the program).

    When: the verdict on an instruction taken in cycle W is known at the end of W + 2 (for
    the rules of the STORE products, W + 3), and a controller that stops its queues on
    ``error`` offers nothing from the next cycle on. An instruction is at its queue's head from
    W + 2, so only a faulting instruction that its unit takes that soon (the unit idle, its
    tokens there) begins: it runs to its end (its addresses wrap within the core's memories;
    the shell's ``OUT_LEN`` bounds what leaves), and nothing after it starts. The run still
    ends with the fault, and a product verdict, being of an earlier instruction, comes before
    the verdicts it meets.

    Parameters
    ----------
    cfg : AccelConfig
    faults : set of Fault, optional
        The rules to check (those of these faults); every rule by default. The dispatch's own
        tests check the opcode alone, to study the dispatch of any fields.

    Members
    -------
    instr : In(isa.Instr)
    take : In(1)
    restart : In(1)
        A program begins: the index and the state start over (as ``Program.validate`` reads
        each program from its start), from the next cycle. Not while an instruction is taken.
    busy : Out(1)
        An instruction taken is still being checked (two cycles, and a third for a product
        fault); a legal instruction is in its queue as long, so this never lengthens a legal
        run.
    error : Out(1)
    fault : Out(FAULT_WIDTH)
        0 until ``error``.
    pc : Out(PC_WIDTH)
        0 until ``error``.
    """

    def __init__(self, cfg, *, faults=None):
        self._cfg = cfg
        self._faults = faults
        super().__init__({"instr": In(isa.Instr), "take": In(1), "restart": In(1),
                          "busy": Out(1), "error": Out(1),
                          "fault": Out(FAULT_WIDTH), "pc": Out(PC_WIDTH)})

    def elaborate(self, platform):
        m = Module()
        # Stages. 1, as the controller takes an instruction: its copy, the sums the rules
        # compare (`ahead`) and the two products, registered. 2: each rule's verdict from
        # registers, registered (and the state advanced); the products' gates and bounds.
        # 3: any verdict raises `error`; the products' verdicts. 4: those raise it.
        # Timing: every stage is one comparison or one sum, or a few LUTs, from registers.
        held = Signal(isa.Instr)
        checking = [Signal(name=f"checking{stage}") for stage in (1, 2)]
        count = Signal(PC_WIDTH)        # instructions taken so far
        index = [Signal(PC_WIDTH, name=f"index{stage}") for stage in (1, 2)]
        m.d.sync += [held.eq(self.instr), checking[0].eq(self.take), checking[1].eq(checking[0]),
                     index[0].eq(count), index[1].eq(index[0])]
        with m.If(self.take):
            m.d.sync += count.eq(count + 1)
        offered, f = _fields(self.instr), _fields(held)

        def ahead(term):
            value = term(offered)
            ahead_reg = Signal(value.shape(), name="check_sum")
            m.d.sync += ahead_reg.eq(value)
            return ahead_reg

        products = {}
        store = self.instr.body.store
        for a, b in PRODUCTS:
            products[(a, b)] = product_register(m, Value.cast(getattr(store, a)),
                                                Value.cast(getattr(store, b)),
                                                platform=platform, name=f"check_{a}_{b}")
        state = State(row_len=Signal(isa.PARAM_WIDTHS[isa.Param.ROW_LEN], name="check_row_len"),
                      shift1=Signal(isa.PARAM_WIDTHS[isa.Param.SHIFT1], name="check_shift1"),
                      **{ch: Signal(isa.TOKEN_WIDTH, name=f"check_{ch}")
                         for ch in ("l2e", "e2l", "e2s", "s2e")})
        now = self._conds(f, rules(self._cfg, f, state, None, ahead))
        verdicts = Signal(len(now))
        m.d.sync += verdicts.eq(Cat(cond for _, cond in now))
        # A product rule: its gate and bound in stage 2, the comparison in stage 3.
        late, order = [], [fault for fault, _ in now]
        for fault, opcode, gate, pair, bound in product_rules(self._cfg, f, ahead):
            if self._faults is not None and fault not in self._faults:
                continue
            name = fault.name.lower()
            gate_reg = Signal(name=f"check_{name}_gate")
            # Timing: the product clipped to just above any bound, so the comparison is as
            # narrow as the bound (a bound is below 2**top: the rules' sums of 16-bit fields),
            # and unsigned: a negative bound (its sign bit, kept apart) fails any product.
            top = bound.shape().width - bound.shape().signed
            bound_reg = Signal(top, name=f"check_{name}_bound")
            negative = Signal(name=f"check_{name}_negative")
            full = products[pair]
            product = Signal(top + 1, name=f"check_{name}_product")
            m.d.sync += [gate_reg.eq(gate & (f["opcode"] == opcode.value) & checking[0]),
                         bound_reg.eq(bound[:top]),
                         negative.eq(bound < 0 if bound.shape().signed else 0),
                         product.eq(Mux(full[top:].any(), 1 << top, full[:top]))]
            late.append(gate_reg & (negative | (product > bound_reg)))
            order.append(fault)
        with m.If(checking[0]):
            self._advance(m, f, state)
        with m.If(self.restart):
            m.d.sync += [count.eq(0)] + [getattr(state, name).eq(0)
                                         for name in State.__dataclass_fields__]

        # The products' verdicts: registered in stage 3, raising `error` in stage 4, beside the
        # other verdicts of the next instruction, which they come before.
        late_bits = Signal(len(late))
        late_pc = Signal(PC_WIDTH)
        m.d.sync += [late_bits.eq(Cat(*late)), late_pc.eq(index[1])]
        late_fire = late_bits.any()
        error = Signal()
        early_bits, late_frozen = Signal(len(verdicts)), Signal(len(late))
        pc = Signal(PC_WIDTH)
        m.d.comb += [self.error.eq(error), self.pc.eq(Mux(error, pc, 0)),
                     self.busy.eq(checking[0] | checking[1] | late_fire)]
        with m.If(~error):
            m.d.sync += [error.eq(late_fire | (checking[1] & verdicts.any())),
                         early_bits.eq(Mux(late_fire | ~checking[1], 0, verdicts)),
                         late_frozen.eq(late_bits),
                         pc.eq(Mux(late_fire, late_pc, index[1]))]
        frozen = Cat(early_bits, late_frozen)
        for position, code in reversed(list(enumerate(order))):   # the first rule wins
            with m.If(error & frozen[position]):
                m.d.comb += self.fault.eq(code)
        return m

    def _conds(self, f, listed):
        """``(Fault, bad)`` of the rules this checker checks, each gated by its opcode (that
        of ``f``)."""
        out = []
        for fault, opcode, cond in listed:
            if self._faults is not None and fault not in self._faults:
                continue
            out.append((fault, cond if opcode is None else cond & (f["opcode"] == opcode.value)))
        return out

    @staticmethod
    def _advance(m, f, state):
        """The state after ``f`` (what :func:`~bertaccel.hw.legal.first_fault` assumes of the
        instructions before a fault), in gateware."""
        is_set = f["opcode"] == isa.Opcode.SET.value
        for param, field in ((isa.Param.ROW_LEN, state.row_len), (isa.Param.SHIFT1, state.shift1)):
            with m.If(is_set & (f["set"]["index"] == param.value)):
                m.d.sync += field.eq(f["set"]["value"])
        for channel, step in token_steps(f).items():
            count = getattr(state, channel)
            m.d.sync += count.eq(count + step)


def _fields(view):
    """The raw fields of an :data:`~bertaccel.hw.isa.Instr` view, shaped as
    :func:`bertaccel.hw.isa.raw_fields` shapes a word's: unsigned values."""
    def raw(value):
        return value.as_value() if isinstance(value, enum.EnumView) else Value.cast(value)

    out = {"opcode": raw(view.opcode)}
    out.update({name: raw(view.deps[name]) for name, _ in isa.DepFlags})
    for body in ("load", "matmul", "store", "set"):
        part = view.body[body]
        out[body] = {name: raw(part[name]) for name, _ in isa.Body[body].shape}
    return out
