"""The store unit: drains accumulator rows through the epilogue to the output stream."""

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .controller import TokenConsumer, TokenProducer
from .epilogue import Epilogue, beat_layout
from .isa import FIELD_WIDTH, TOKEN_MAX, EpOp, Instr, Opcode, Param, ParamsLayout, PmemWord

__all__ = ["StoreUnit"]


class StoreUnit(wiring.Component):
    """Runs SET and STORE instructions in order.

    SET writes one of the epilogue's parameter registers; it waits until every beat of earlier
    STOREs has left the epilogue, so parameters never change under a beat.

    STORE waits for its execute->store token, then reads one *beat* a cycle: accumulator row
    ``acc_addr + s*stride + m``, parameter-memory row ``param_addr + s`` and scratchpad-B row
    ``aux_addr + s*rows + m`` for strip *s* of output row *m*. Single-pass ops visit rows in order;
    SOFTMAX and LAYERNORM visit each row twice, interleaved as P1(0), P1(1), P2(0), P1(2), P2(1),
    ..., P2(R-1), so the epilogue finishes a row's statistics while the next row's first pass
    streams. Beats go through a small FIFO into the :class:`Epilogue`; a read is only issued when
    the FIFO has room for it, so backpressure on ``o_data`` stalls the reads and nothing is lost.
    The store->execute token is pushed with the last read, and the next STORE is accepted in
    that cycle.

    Members
    -------
    i_instr : In(stream.Signature(Instr))
    i_empty : In(1)
        Whether the STORE at ``i_instr``'s head is empty (``rows`` or ``strips`` zero), from
        the controller (:class:`~bertaccel.hw.controller.Controller`, ``o_store_empty``).
    acc, pmem, res : In(ReadPort.Signature)
        The accumulator's store port, the parameter memory, scratchpad B's auxiliary port.
    o_data : Out(stream.Signature(ArrayLayout(signed(acc_width), cols)))
    from_exec : Out(TokenConsumer())
    to_exec : Out(TokenProducer())
    o_busy : Out(1)
    """

    #: Beats read and not yet taken by the epilogue, at most: a read reaches the epilogue five
    #: cycles after it is issued, so six keep the reads flowing one a cycle.
    FIFO_DEPTH = 6

    def __init__(self, cfg):
        self._cfg = cfg
        self._row = data.ArrayLayout(signed(cfg.acc_width), cfg.cols)
        super().__init__({
            "i_instr":   In(stream.Signature(Instr)),
            "i_empty":   In(1),
            "acc":       In(memory.ReadPort.Signature(addr_width=cfg.acc_addr_width,
                                                      shape=self._row)),
            "pmem":      In(memory.ReadPort.Signature(
                addr_width=cfg.pmem_addr_width, shape=data.ArrayLayout(PmemWord, cfg.cols))),
            "res":       In(memory.ReadPort.Signature(
                addr_width=cfg.spad_addr_width,
                shape=data.ArrayLayout(signed(cfg.in_width), cfg.cols))),
            "o_data":    Out(stream.Signature(self._row)),
            "from_exec": Out(TokenConsumer()),
            "to_exec":   Out(TokenProducer()),
            "o_busy":    Out(1),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        m.submodules.epilogue = epilogue = Epilogue(cfg)
        Beat = beat_layout(cfg)
        # Timing: SyncFIFOBuffered registers its output; the epilogue's input logic (ready, the
        # statistics gap, slots) decodes the beat's tags straight from it.
        m.submodules.fifo = beats = fifo.SyncFIFOBuffered(width=Beat.size, depth=self.FIFO_DEPTH)
        m.d.comb += [
            epilogue.i_beat.payload.eq(beats.r_data),
            epilogue.i_beat.valid.eq(beats.r_rdy),
            beats.r_en.eq(epilogue.i_beat.ready),
        ]
        wiring.connect(m, epilogue.o_data, wiring.flipped(self.o_data))

        params = Signal(ParamsLayout)
        m.d.comb += epilogue.params.eq(params)

        # -- the STORE being drained ---------------------------------------------------------
        active = Signal()
        rows = Signal(FIELD_WIDTH)
        strips = Signal(FIELD_WIDTH)
        stride = Signal(FIELD_WIDTH)
        param_addr = Signal(FIELD_WIDTH)
        op = Signal(EpOp)
        two_pass = Signal()
        push = Signal()
        # Position: the pass of the current row (second), its strip, and the addresses of the
        # next beat. Timing: nothing on the issue path does arithmetic; what it needs is kept in
        # registers, updated a beat ahead (the STORE's fields are constant while it runs):
        # * `at_row_end` is strip == strips - 1;
        # * the row passes left after this one count down in `left`, with `left_is_0` (this
        #   is the STORE's last row pass) and `left_is_1` kept beside it;
        # * the interleaved order needs no row arithmetic: the next pass is a first pass of the
        #   next first-pass row or a second pass of the next second-pass row, whose pointers
        #   (`acc1`, `aux1`; `acc2`, `aux2`) are kept ready; it is a second pass when this one's
        #   index in the order is odd (`odd`) or when it is the last pass;
        # * `lanes_left` is row_len minus the column of this strip's lane 0.
        second = Signal()
        strip = Signal(FIELD_WIDTH)
        at_row_end = Signal()
        one_strip = Signal()
        strips_m2 = Signal(FIELD_WIDTH)
        left = Signal(FIELD_WIDTH + 1)
        left_is_0 = Signal()
        left_is_1 = Signal()
        odd = Signal()
        acc_ptr = Signal(FIELD_WIDTH)
        aux_ptr = Signal(FIELD_WIDTH)
        pm_ptr = Signal(FIELD_WIDTH)
        acc1 = Signal(FIELD_WIDTH)
        aux1 = Signal(FIELD_WIDTH)
        acc2 = Signal(FIELD_WIDTH)
        aux2 = Signal(FIELD_WIDTH)
        lanes_left = Signal(signed(FIELD_WIDTH + 10))

        reading = Signal()          # a beat's reads were issued last cycle
        copying = Signal()          # ... two cycles ago: `beat` is copied into `beat_copy`
        writing = Signal()          # ... three cycles ago: `beat_copy` goes into the FIFO
        tags = Signal(data.StructLayout({"op": EpOp, "second": 1, "last": 1,
                                         "lane_valid": cfg.cols}))
        # Timing: the memories' read data is registered before the FIFO (whose storage is LUT
        # RAM): nextpnr puts an ECP5 block RAM's clock-to-output at 5.8 ns, which leaves time
        # for routing to a flip-flop and nothing more at 150 MHz; the register is reset-less
        # (`writing` says when it matters), so an ECP5 flow moves it into the block RAMs as
        # their output register (fpga/ramreg.py). It is copied once more in the fabric before
        # the FIFO: from the RAMs' output registers, which spread across the chip, to one
        # place was up to 5.9 ns of routing on the 8x8 array.
        beat = Signal(Beat, reset_less=True)
        beat_copy = Signal(Beat, reset_less=True)
        m.d.sync += [
            beat.acc.eq(self.acc.data),
            beat.pm.eq(self.pmem.data),
            beat.res.eq(self.res.data),
            beat.op.eq(tags.op),
            beat.second.eq(tags.second),
            beat.last.eq(tags.last),
            beat.lane_valid.eq(tags.lane_valid),
            beat_copy.eq(beat),
            copying.eq(reading),
            writing.eq(copying),
        ]
        m.d.comb += [
            beats.w_data.eq(beat_copy),
            beats.w_en.eq(writing),
        ]

        # A read is issued only while fewer than FIFO_DEPTH beats are read and not yet taken
        # (beats.level + reading + copying + writing). Timing: that count is kept in a register
        # of its own, so the decision is one compare of a register with a constant.
        issue = Signal()
        outstanding = Signal(range(self.FIFO_DEPTH + 1))
        taken = Signal()
        m.d.comb += [
            taken.eq(beats.r_rdy & beats.r_en),
            issue.eq(active & (outstanding < self.FIFO_DEPTH)),
        ]
        m.d.sync += [reading.eq(issue), outstanding.eq(outstanding + issue - taken)]

        row_end = Signal()
        m.d.comb += row_end.eq(at_row_end)
        # The next pass: a second pass when this one's index in the interleaved order is odd or
        # the next is the last (see above); single-pass ops take the next row in order.
        next_second = Signal()
        m.d.comb += next_second.eq(two_pass & (odd | left_is_1))
        last = Signal()
        m.d.comb += last.eq(issue & row_end & left_is_0)

        lane_valid = Signal(cfg.cols)
        for c in range(cfg.cols):
            m.d.comb += lane_valid[c].eq(~two_pass | (lanes_left > c))

        # Timing: the memories read every cycle, at addresses straight from registers: no
        # logic between the issue decision and the block RAMs (tens of them, across the chip).
        # A read that was not issued is never written to the FIFO (`writing`), so what it
        # returns does not matter.
        m.d.comb += [
            self.acc.addr.eq(acc_ptr), self.acc.en.eq(1),
            self.pmem.addr.eq(pm_ptr), self.pmem.en.eq(1),
            self.res.addr.eq(aux_ptr), self.res.en.eq(1),
        ]
        with m.If(issue):
            m.d.sync += [
                tags.op.eq(op), tags.second.eq(second | ~two_pass), tags.last.eq(row_end),
                tags.lane_valid.eq(lane_valid),
            ]
            with m.If(row_end):
                m.d.sync += [
                    second.eq(next_second), strip.eq(0), at_row_end.eq(one_strip),
                    left.eq(left - 1), left_is_0.eq(left_is_1), left_is_1.eq(left == 2),
                    odd.eq(~odd), pm_ptr.eq(param_addr), lanes_left.eq(params.row_len),
                ]
                with m.If(next_second):
                    m.d.sync += [acc_ptr.eq(acc2), aux_ptr.eq(aux2),
                                 acc2.eq(acc2 + 1), aux2.eq(aux2 + 1)]
                with m.Else():
                    m.d.sync += [acc_ptr.eq(acc1), aux_ptr.eq(aux1),
                                 acc1.eq(acc1 + 1), aux1.eq(aux1 + 1)]
            with m.Else():
                m.d.sync += [
                    strip.eq(strip + 1), at_row_end.eq(strip == strips_m2),
                    acc_ptr.eq(acc_ptr + stride), aux_ptr.eq(aux_ptr + rows),
                    pm_ptr.eq(pm_ptr + 1), lanes_left.eq(lanes_left - cfg.cols),
                ]
            with m.If(last):
                m.d.comb += self.to_exec.push.eq(push)
                m.d.sync += active.eq(0)

        # -- accept the next instruction -------------------------------------------------------
        instr = self.i_instr.payload
        store = instr.body.store
        pushing = Signal()
        m.d.comb += pushing.eq(last & push)
        empty = self.i_empty
        drained = ~active & (outstanding == 0) & ~epilogue.o_busy
        # An empty STORE pushes as it is accepted, so it waits for the unit to be idle and never
        # pushes in the same cycle as the last read of the STORE before it.
        free = Signal()
        m.d.comb += free.eq(~active | (last & ~empty))

        # Timing: whenever the unit is free, its registers take the STORE at the head of the
        # queue (or whatever the head holds), accepted or not; only `active`, the pop and
        # `ready` wait for the tokens. So the enable of these registers does not wait for the
        # token checks, and a STORE that is not accepted leaves nothing that matters behind.
        is_two_pass = (store.op == EpOp.SOFTMAX) | (store.op == EpOp.LAYERNORM)
        with m.If(free):
            m.d.sync += [
                rows.eq(store.rows), strips.eq(store.strips), stride.eq(store.stride),
                param_addr.eq(store.param_addr), op.eq(store.op),
                two_pass.eq(is_two_pass), push.eq(instr.deps.push_prev),
                second.eq(0), strip.eq(0), odd.eq(0),
                at_row_end.eq(store.strips == 1), one_strip.eq(store.strips == 1),
                strips_m2.eq(store.strips - 2),
                left.eq(Mux(is_two_pass, (store.rows << 1) - 1, store.rows - 1)),
                left_is_0.eq(~is_two_pass & (store.rows == 1)),
                left_is_1.eq(Mux(is_two_pass, store.rows == 1, store.rows == 2)),
                acc_ptr.eq(store.acc_addr), aux_ptr.eq(store.aux_addr),
                pm_ptr.eq(store.param_addr), lanes_left.eq(params.row_len),
                # The first pass is P1(0) (or row 0): the next first-pass row is 1, the next
                # second-pass row 0.
                acc1.eq(store.acc_addr + 1), aux1.eq(store.aux_addr + 1),
                acc2.eq(store.acc_addr), aux2.eq(store.aux_addr),
            ]

        with m.Switch(instr.opcode):
            with m.Case(Opcode.SET):
                with m.If(self.i_instr.valid & drained):
                    m.d.comb += self.i_instr.ready.eq(1)
                    value = instr.body.set.value
                    with m.Switch(instr.body.set.index):
                        for index, field in ((Param.MUL0, "mul0"), (Param.SHIFT0, "shift0"),
                                             (Param.MUL1, "mul1"), (Param.SHIFT1, "shift1"),
                                             (Param.ROW_LEN, "row_len"), (Param.EPS, "eps"),
                                             (Param.FLAGS, "flags")):
                            with m.Case(index):
                                target = getattr(params, field)
                                m.d.sync += target.eq(value[:len(target)])
            with m.Default():
                can_pop = ~instr.deps.pop_prev | self.from_exec.avail
                # Timing: `count + pushing < TOKEN_MAX` as two compares with constants.
                can_push = ~instr.deps.push_prev | Mux(pushing,
                                                       self.to_exec.count < TOKEN_MAX - 1,
                                                       self.to_exec.count != TOKEN_MAX)
                with m.If(free & self.i_instr.valid & can_pop & can_push):
                    m.d.comb += [
                        self.i_instr.ready.eq(1),
                        self.from_exec.pop.eq(instr.deps.pop_prev),
                    ]
                    with m.If(empty):
                        m.d.comb += self.to_exec.push.eq(instr.deps.push_prev)
                        m.d.sync += active.eq(0)
                    with m.Else():
                        m.d.sync += active.eq(1)

        m.d.comb += self.o_busy.eq(active | (outstanding != 0) | epilogue.o_busy)
        return m
