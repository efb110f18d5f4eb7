"""The load unit: moves beats of the input data stream into the scratchpads."""

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .controller import TokenConsumer, TokenProducer
from .dsp import KEEP
from .isa import FIELD_WIDTH, Instr, LoadHead, PmemWord, Target

__all__ = ["LoadUnit"]


class LoadUnit(wiring.Component):
    """Runs LOAD instructions in order.

    A LOAD waits for its ``pop_next`` token (operand buffers are free), and for room in the
    load->execute channel if it pushes, then writes ``count`` beats of ``i_data`` to consecutive
    scratchpad rows at one beat a cycle (each a cycle after it comes), pushing with the last
    beat. A LOAD takes ``count + 1`` cycles when the data stream keeps up. A LOAD into the
    parameter memory packs ``cfg.pmem_beats_per_row`` beats into each row, the first beat in the
    lowest bits. Scratchpad A keeps the low ``rows`` lanes of a beat, scratchpad B the low
    ``cols`` lanes.

    Members
    -------
    i_instr : In(stream.Signature(Instr))
    i_head : In(LoadHead)
        What the LOAD at ``i_instr``'s head is, decoded by the controller
        (:class:`~bertaccel.hw.controller.Controller`, ``o_load_head``).
    i_data : In(stream.Signature(ArrayLayout(signed(8), cfg.lanes)))
    spad_a, spad_b, pmem : In(WritePort.Signature)
    to_exec : Out(TokenProducer())
    from_exec : Out(TokenConsumer())
    o_busy : Out(1)
    """

    def __init__(self, cfg):
        self._cfg = cfg
        a_shape = data.ArrayLayout(signed(cfg.in_width), cfg.rows)
        b_shape = data.ArrayLayout(signed(cfg.in_width), cfg.cols)
        super().__init__({
            "i_instr":   In(stream.Signature(Instr)),
            "i_head":    In(LoadHead),
            "i_data":    In(stream.Signature(data.ArrayLayout(signed(cfg.in_width), cfg.lanes))),
            "spad_a":    In(memory.WritePort.Signature(addr_width=cfg.spad_addr_width,
                                                        shape=a_shape)),
            "spad_b":    In(memory.WritePort.Signature(addr_width=cfg.spad_addr_width,
                                                        shape=b_shape)),
            "pmem":      In(memory.WritePort.Signature(addr_width=cfg.pmem_addr_width,
                                                        shape=data.ArrayLayout(PmemWord,
                                                                               cfg.cols))),
            "to_exec":   Out(TokenProducer()),
            "from_exec": Out(TokenConsumer()),
            "o_busy":    Out(1),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()

        instr = self.i_instr.payload
        target = Signal(Target)
        addr = Signal(FIELD_WIDTH)
        remaining = Signal(FIELD_WIDTH)
        # Timing: whether the LOAD's last beat is next, kept beside `remaining` (and, for the
        # LOAD at the head, decoded by the controller), so the push starts from registers, not
        # from compares of 16-bit counts behind the queue's slot multiplexer.
        last = Signal()
        push = Signal()

        # Timing: the incoming beat and `valid` are registered every cycle (`beat_in`,
        # `offered`), and the write ports are driven from registers loaded every cycle with
        # what the accept decided: a row is written a cycle after its beat came. So neither the
        # accept, a few LUTs deep, nor the incoming `valid`, which may come from across the chip,
        # reaches a RAM pin, the enable of an address copy beside the RAMs (fpga/ramreg.py) or
        # the parameter gearbox's enable. No unit can tell: the execute unit reads a row at the
        # earliest three cycles after the token that the last write pushes.
        beat_in = Signal(self.i_data.payload.shape(), name="beat_in", reset_less=True)
        offered = Signal(name="offered")
        m.d.sync += [beat_in.eq(self.i_data.payload), offered.eq(self.i_data.valid)]
        lanes = beat_in.as_value()

        write, waddr = self._write_ports(m, lanes, addr)

        per_row = cfg.pmem_beats_per_row
        pmem_addr, phase = self._gearbox(m, lanes, offered, waddr)

        # `loading`: a LOAD's beats are being taken. Timing: the accept decides from `loading`
        # and the registers are enabled from a copy of it (`loading_regs`), kept apart in the
        # FPGA flows (KEEP), so that the accept's input is not a net reaching every register.
        loading = Signal()
        loading_regs = Signal(name="loading_regs", attrs=KEEP)
        with m.If(~loading_regs):
            # Timing: while idle, the registers take the LOAD at the head of the queue (or
            # whatever the head holds), accepted or not; only the pop, `ready` and `loading`
            # wait for the tokens, so the accept enables none of them (as the store unit's
            # registers, hw/store.py).
            m.d.sync += [
                target.eq(instr.body.load.target),
                addr.eq(instr.body.load.addr),
                pmem_addr.eq(instr.body.load.addr),
                phase.eq(0),
                remaining.eq(instr.body.load.count),
                last.eq(self.i_head.one),
                push.eq(instr.deps.push_next),
            ]
        with m.Elif(self.i_data.valid):
            with m.Switch(target):
                with m.Case(Target.SPAD_A):
                    m.d.comb += write["spad_a"].eq(1)
                with m.Case(Target.SPAD_B):
                    m.d.comb += write["spad_b"].eq(1)
                with m.Case(Target.PMEM):
                    with m.If(phase == per_row - 1):
                        m.d.comb += write["pmem"].eq(1)
                        m.d.sync += [pmem_addr.eq(pmem_addr + 1), phase.eq(0)]
                    with m.Else():
                        m.d.sync += phase.eq(phase + 1)
            m.d.sync += [addr.eq(addr + 1), remaining.eq(remaining - 1),
                         last.eq(remaining == 2)]

        self._handshake(m, loading, loading_regs, last, push)
        return m

    def _write_ports(self, m, lanes, addr):
        """Drive the three write ports from registers; return, by memory, the signal the accept
        raises to write it this cycle and the register its address comes from next cycle."""
        cfg = self._cfg
        write = {}                        # the accept writes into this memory, this cycle
        waddr = {}                        # what its write port's address is next cycle
        for name in ("spad_a", "spad_b", "pmem"):
            port = getattr(self, name)
            write[name] = Signal(name=f"{name}_write")
            waddr[name] = Signal.like(port.addr, name=f"{name}_waddr", reset_less=True)
            wen = Signal(name=f"{name}_wen")
            m.d.sync += wen.eq(write[name])
            m.d.comb += [port.en.eq(wen), port.addr.eq(waddr[name])]
        m.d.sync += [waddr["spad_a"].eq(addr), waddr["spad_b"].eq(addr)]
        m.d.comb += [self.spad_a.data.eq(lanes[:cfg.rows * cfg.in_width]),
                     self.spad_b.data.eq(lanes[:cfg.cols * cfg.in_width])]
        return write, waddr

    def _gearbox(self, m, lanes, offered, waddr):
        """The PMEM write port's data and address; return the row address and the phase (the
        beats of the row taken so far) that the accept advances."""
        cfg = self._cfg
        # Parameter rows are wider than a beat: a gearbox shifts beats in from the top, so
        # after ``per_row`` beats the first one sits in the lowest bits.
        per_row = cfg.pmem_beats_per_row
        row_bits = cfg.cols * PmemWord.size
        beat_bits = min(cfg.lanes * cfg.in_width, row_bits)
        pmem_addr = Signal(FIELD_WIDTH)
        phase = Signal(range(per_row))
        m.d.sync += waddr["pmem"].eq(pmem_addr)
        if per_row == 1:
            m.d.comb += self.pmem.data.eq(lanes[:row_bits])
        else:
            # The gearbox holds the beats offered before `beat_in`: a beat shifts in the cycle
            # after it is offered, whether taken or not; only a PMEM load's taken beats make up
            # a row that is written (phase starts at 0 with every LOAD).
            gear = Signal(row_bits - beat_bits, name="gear", reset_less=True)
            row = Cat(gear, lanes[:beat_bits])
            m.d.comb += self.pmem.data.eq(row)
            with m.If(offered):
                m.d.sync += gear.eq(row[beat_bits:])
        return pmem_addr, phase

    def _handshake(self, m, loading, loading_regs, last, push):
        """Take a LOAD from the queue when its tokens allow, push its token when its last beat
        is taken (at once for an empty LOAD), and keep ``loading`` and its copy."""
        instr = self.i_instr.payload
        start, finish = Signal(), Signal()
        m.d.comb += [self.o_busy.eq(loading), self.i_data.ready.eq(loading),
                     finish.eq(loading & self.i_data.valid & last)]
        can_pop = ~instr.deps.pop_next | self.from_exec.avail
        can_push = ~instr.deps.push_next | self.to_exec.room
        with m.If(~loading & self.i_instr.valid & can_pop & can_push):
            m.d.comb += [
                self.i_instr.ready.eq(1),
                self.from_exec.pop.eq(instr.deps.pop_next),
            ]
            with m.If(self.i_head.empty):
                m.d.comb += self.to_exec.push.eq(instr.deps.push_next)
            with m.Else():
                m.d.comb += start.eq(1)
        with m.If(finish):
            # The last beat: its row is written at the next clock edge.
            m.d.comb += self.to_exec.push.eq(push)
        m.d.sync += [reg.eq(Mux(loading, ~finish, start)) for reg in (loading, loading_regs)]
