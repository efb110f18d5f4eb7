"""The store unit: drains accumulator rows to the output stream."""

from amaranth import Module, Signal, signed
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .controller import TokenConsumer, TokenProducer
from .isa import FIELD_WIDTH, TOKEN_MAX, Instr

__all__ = ["StoreUnit"]


class StoreUnit(wiring.Component):
    """Runs STORE instructions in order.

    A STORE waits for its execute->store token, reads ``count`` accumulator rows, one a cycle,
    into a small output FIFO, and pushes its store->execute token with the last read. A read is
    only issued when the FIFO has room for it, so backpressure on ``o_data`` stalls the reads
    and nothing is dropped. The next STORE is accepted in the cycle of the last read.

    Members
    -------
    i_instr : In(stream.Signature(Instr))
    acc : In(ReadPort.Signature)
    o_data : Out(stream.Signature(ArrayLayout(signed(acc_width), cols)))
    from_exec : Out(TokenConsumer())
    to_exec : Out(TokenProducer())
    o_busy : Out(1)
    """

    FIFO_DEPTH = 4

    def __init__(self, cfg):
        self._cfg = cfg
        self._row = data.ArrayLayout(signed(cfg.acc_width), cfg.cols)
        super().__init__({
            "i_instr":   In(stream.Signature(Instr)),
            "acc":       In(memory.ReadPort.Signature(addr_width=cfg.acc_addr_width,
                                                      shape=self._row)),
            "o_data":    Out(stream.Signature(self._row)),
            "from_exec": Out(TokenConsumer()),
            "to_exec":   Out(TokenProducer()),
            "o_busy":    Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = out_fifo = fifo.SyncFIFO(width=self._row.size, depth=self.FIFO_DEPTH)
        m.d.comb += [
            self.o_data.payload.eq(out_fifo.r_data),
            self.o_data.valid.eq(out_fifo.r_rdy),
            out_fifo.r_en.eq(self.o_data.ready),
        ]

        active = Signal()
        addr = Signal(FIELD_WIDTH)
        remaining = Signal(FIELD_WIDTH)
        push = Signal()
        reading = Signal()          # a read was issued last cycle; its row lands in the FIFO now
        m.d.comb += [out_fifo.w_data.eq(self.acc.data), out_fifo.w_en.eq(reading)]

        issue = Signal()
        m.d.comb += issue.eq(active & (out_fifo.level + reading < self.FIFO_DEPTH))
        last = Signal()
        m.d.comb += last.eq(issue & (remaining == 1))
        m.d.sync += reading.eq(issue)
        with m.If(issue):
            m.d.comb += [self.acc.addr.eq(addr), self.acc.en.eq(1)]
            m.d.sync += [addr.eq(addr + 1), remaining.eq(remaining - 1)]
            with m.If(last):
                m.d.comb += self.to_exec.push.eq(push)
                m.d.sync += active.eq(0)
        with m.Else():
            m.d.comb += self.acc.en.eq(0)

        instr = self.i_instr.payload
        pushing = Signal()
        m.d.comb += pushing.eq(last & push)
        can_pop = ~instr.deps.pop_prev | (self.from_exec.count != 0)
        can_push = ~instr.deps.push_prev | ((self.to_exec.count + pushing) < TOKEN_MAX)
        # A zero-count STORE pushes as it is accepted, so it waits for the unit to be idle and
        # never pushes in the same cycle as the last read of the STORE before it.
        free = ~active | (last & (instr.body.store.count != 0))
        with m.If(free & self.i_instr.valid & can_pop & can_push):
            m.d.comb += [
                self.i_instr.ready.eq(1),
                self.from_exec.pop.eq(instr.deps.pop_prev),
            ]
            m.d.sync += [
                addr.eq(instr.body.store.acc_addr),
                remaining.eq(instr.body.store.count),
                push.eq(instr.deps.push_prev),
            ]
            with m.If(instr.body.store.count == 0):
                m.d.comb += self.to_exec.push.eq(instr.deps.push_prev)
                m.d.sync += active.eq(0)
            with m.Else():
                m.d.sync += active.eq(1)

        m.d.comb += self.o_busy.eq(active | reading | (out_fifo.level != 0))
        return m
