"""Formal proof of the :class:`~bertaccel.hw.controller.Controller`'s dispatch.

With any instruction stream (any opcode, any fields, valid held until taken as a stream's
producer must), any unit readiness and any reset: every instruction taken before ``o_error``
goes to exactly one unit (LOAD to load, MATMUL to execute, SET and STORE to store), and each
unit sees its instructions unchanged, in program order (a model queue per unit); an illegal
opcode raises ``o_error`` three cycles after it is taken, and ``o_error`` stays; from then on
every instruction is taken and no unit is offered anything; ``o_busy`` is "a unit has an
instruction waiting, and no error, or an instruction was taken in the last two cycles" (it is
being checked). The controller checks the opcode alone here, so that any fields are
dispatched. Bounded, with two-entry queues, to 6 cycles: an instruction reaches its unit two
cycles after it is taken, so within 6 a queue is filled, popped while pushed and emptied, and an
error follows instructions in flight (the covers, searched to 8 cycles, show each).
"""

from dataclasses import replace

from amaranth import Array, Cat, Elaboratable, Module, Signal
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Cover

from bertaccel.hw.config import preset
from bertaccel.hw.controller import Controller
from bertaccel.hw.isa import Instr, Opcode
from bertaccel.hw.legal import Fault

from verif.tb.formal import check

ROUTE = {"load": (Opcode.LOAD,), "exec": (Opcode.MATMUL,), "store": (Opcode.STORE, Opcode.SET)}
DEPTH = 2


class ControllerProperties(Elaboratable):
    def __init__(self):
        self.controller = Controller(replace(preset("2x2"), queue_depth=DEPTH),
                                     checks={Fault.OPCODE})

    def elaborate(self, platform):
        m = Module()
        m.submodules.controller = ctl = self.controller
        i = ctl.i_instr
        m.d.comb += [i.valid.eq(AnySeq(1)), i.payload.eq(AnySeq(Instr.size))]
        for unit in ROUTE:
            m.d.comb += getattr(ctl, f"o_{unit}").ready.eq(AnySeq(1))
        waiting, before = Signal(), Signal(Instr.size)
        m.d.sync += [waiting.eq(i.valid & ~i.ready), before.eq(i.payload)]
        m.d.comb += Assume(~waiting | (i.valid & (i.payload.as_value() == before)))
        taken = i.valid & i.ready
        legal = Signal()
        m.d.comb += legal.eq(i.payload.opcode.as_value().matches(*Opcode))
        error, checking, checked, faulting = Signal(), Signal(), Signal(), Signal()
        m.d.sync += [error.eq(ctl.o_error), checking.eq(taken & ~legal & ~ctl.o_error),
                     checked.eq(checking), faulting.eq(checked)]
        m.d.comb += [Assert(~error | ctl.o_error), Assert(~faulting | ctl.o_error),
                     Assert(ctl.o_error == (error | faulting)), Cover(ctl.o_error & taken)]
        busy = [self.unit(m, unit, taken & legal & ~ctl.o_error) for unit in ROUTE]
        checks = Signal(2)
        m.d.sync += checks.eq(Cat(taken & ~ctl.o_error, checks[0]))
        m.d.comb += Assert(ctl.o_busy == (((busy[0] | busy[1] | busy[2]) & ~ctl.o_error)
                                          | checks.any()))
        return m

    def unit(self, m, unit, dispatched):
        """A model queue of ``unit``'s instructions: what its output must show, in order."""
        ctl, i = self.controller, self.controller.i_instr
        out = getattr(ctl, f"o_{unit}")
        model = Array(Signal(Instr.size, name=f"{unit}_model{k}") for k in range(DEPTH))
        count = Signal(range(DEPTH + 1), name=f"{unit}_count")
        push = dispatched & i.payload.opcode.as_value().matches(*ROUTE[unit])
        pop = out.valid & out.ready
        m.d.sync += count.eq(count + push - pop)
        for k in range(DEPTH):
            with m.If(push & (k == count - pop)):
                m.d.sync += model[k].eq(i.payload)
            with m.Elif(pop):
                m.d.sync += model[k].eq(model[k + 1] if k + 1 < DEPTH else 0)
        m.d.comb += [Assert(count <= DEPTH), Assert(~out.valid | (count != 0)),
                     Assert(~out.valid | ~ctl.o_error),
                     Assert(~out.valid | (out.payload.as_value() == model[0])),
                     Cover(count == DEPTH), Cover(push & pop)]
        return count != 0


def test_controller_dispatches_in_order_to_one_unit(tmp_path):
    result = check(ControllerProperties(), name="controller", workdir=tmp_path, depth=6,
                   mode="bmc", cover=8)
    assert result.proven and result.covered, result.summary
