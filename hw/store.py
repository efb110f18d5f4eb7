"""The store unit: drains accumulator rows through the epilogue to the output stream."""

from amaranth import Module, Signal, signed
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .controller import TokenConsumer, TokenProducer
from .epilogue import Epilogue, ParamsLayout, beat_layout
from .isa import FIELD_WIDTH, TOKEN_MAX, EpOp, Instr, Opcode, Param, PmemWord

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
    acc, pmem, res : In(ReadPort.Signature)
        The accumulator's store port, the parameter memory, scratchpad B's auxiliary port.
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
        m.submodules.fifo = beats = fifo.SyncFIFO(width=Beat.size, depth=self.FIFO_DEPTH)
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
        acc_addr = Signal(FIELD_WIDTH)
        param_addr = Signal(FIELD_WIDTH)
        aux_addr = Signal(FIELD_WIDTH)
        op = Signal(EpOp)
        two_pass = Signal()
        push = Signal()
        # position: pass (second), row, strip, and the addresses of the next beat
        second = Signal()
        row = Signal(FIELD_WIDTH)
        strip = Signal(FIELD_WIDTH)
        acc_ptr = Signal(FIELD_WIDTH)
        aux_ptr = Signal(FIELD_WIDTH)
        pm_ptr = Signal(FIELD_WIDTH)
        col_base = Signal(FIELD_WIDTH + 8)

        reading = Signal()          # a beat's reads were issued last cycle
        tags = Signal(data.StructLayout({"op": EpOp, "second": 1, "last": 1,
                                         "lane_valid": cfg.cols}))
        beat = Signal(Beat)
        m.d.comb += [
            beat.acc.eq(self.acc.data),
            beat.pm.eq(self.pmem.data),
            beat.res.eq(self.res.data),
            beat.op.eq(tags.op),
            beat.second.eq(tags.second),
            beat.last.eq(tags.last),
            beat.lane_valid.eq(tags.lane_valid),
            beats.w_data.eq(beat),
            beats.w_en.eq(reading),
        ]

        issue = Signal()
        m.d.comb += issue.eq(active & (beats.level + reading < self.FIFO_DEPTH))
        m.d.sync += reading.eq(issue)

        row_end = Signal()
        m.d.comb += row_end.eq(strip == strips - 1)
        # The next (pass, row) after this one, and whether the STORE ends here.
        next_second = Signal()
        next_row = Signal(FIELD_WIDTH)
        done = Signal()
        with m.If(~two_pass):
            m.d.comb += [next_second.eq(1), next_row.eq(row + 1), done.eq(row + 1 == rows)]
        with m.Elif(~second):
            with m.If((row == 0) & (rows > 1)):
                m.d.comb += [next_second.eq(0), next_row.eq(1)]        # P1(0) -> P1(1)
            with m.Elif(row == 0):
                m.d.comb += [next_second.eq(1), next_row.eq(0)]        # one row: P1 -> P2
            with m.Else():
                m.d.comb += [next_second.eq(1), next_row.eq(row - 1)]  # P1(r) -> P2(r-1)
        with m.Else():
            with m.If(row + 2 < rows):
                m.d.comb += [next_second.eq(0), next_row.eq(row + 2)]  # P2(q) -> P1(q+2)
            with m.Elif(row + 1 < rows):
                m.d.comb += [next_second.eq(1), next_row.eq(row + 1)]  # P2(q) -> P2(q+1)
            with m.Else():
                m.d.comb += done.eq(1)
        last = Signal()
        m.d.comb += last.eq(issue & row_end & done)

        lane_valid = Signal(cfg.cols)
        for c in range(cfg.cols):
            m.d.comb += lane_valid[c].eq(~two_pass | (col_base + c < params.row_len))

        with m.If(issue):
            m.d.comb += [
                self.acc.addr.eq(acc_ptr), self.acc.en.eq(1),
                self.pmem.addr.eq(pm_ptr), self.pmem.en.eq(1),
                self.res.addr.eq(aux_ptr), self.res.en.eq(1),
            ]
            m.d.sync += [
                tags.op.eq(op), tags.second.eq(second | ~two_pass), tags.last.eq(row_end),
                tags.lane_valid.eq(lane_valid),
            ]
            with m.If(row_end):
                m.d.sync += [
                    second.eq(next_second), row.eq(next_row), strip.eq(0),
                    acc_ptr.eq(acc_addr + next_row), aux_ptr.eq(aux_addr + next_row),
                    pm_ptr.eq(param_addr), col_base.eq(0),
                ]
            with m.Else():
                m.d.sync += [
                    strip.eq(strip + 1), acc_ptr.eq(acc_ptr + stride), aux_ptr.eq(aux_ptr + rows),
                    pm_ptr.eq(pm_ptr + 1), col_base.eq(col_base + cfg.cols),
                ]
            with m.If(last):
                m.d.comb += self.to_exec.push.eq(push)
                m.d.sync += active.eq(0)
        with m.Else():
            m.d.comb += [self.acc.en.eq(0), self.pmem.en.eq(0), self.res.en.eq(0)]

        # -- accept the next instruction -------------------------------------------------------
        instr = self.i_instr.payload
        store = instr.body.store
        pushing = Signal()
        m.d.comb += pushing.eq(last & push)
        empty = (store.rows == 0) | (store.strips == 0)
        drained = ~active & ~reading & (beats.level == 0) & ~epilogue.o_busy
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
                can_pop = ~instr.deps.pop_prev | (self.from_exec.count != 0)
                can_push = ~instr.deps.push_prev | ((self.to_exec.count + pushing) < TOKEN_MAX)
                # An empty STORE pushes as it is accepted, so it waits for the unit to be idle
                # and never pushes in the same cycle as the last read of the STORE before it.
                free = ~active | (last & ~empty)
                with m.If(free & self.i_instr.valid & can_pop & can_push):
                    m.d.comb += [
                        self.i_instr.ready.eq(1),
                        self.from_exec.pop.eq(instr.deps.pop_prev),
                    ]
                    is_two_pass = (store.op == EpOp.SOFTMAX) | (store.op == EpOp.LAYERNORM)
                    m.d.sync += [
                        rows.eq(store.rows), strips.eq(store.strips), stride.eq(store.stride),
                        acc_addr.eq(store.acc_addr), param_addr.eq(store.param_addr),
                        aux_addr.eq(store.aux_addr), op.eq(store.op),
                        two_pass.eq(is_two_pass), push.eq(instr.deps.push_prev),
                        second.eq(0), row.eq(0), strip.eq(0), col_base.eq(0),
                        acc_ptr.eq(store.acc_addr), aux_ptr.eq(store.aux_addr),
                        pm_ptr.eq(store.param_addr),
                    ]
                    with m.If(empty):
                        m.d.comb += self.to_exec.push.eq(instr.deps.push_prev)
                        m.d.sync += active.eq(0)
                    with m.Else():
                        m.d.sync += active.eq(1)

        m.d.comb += self.o_busy.eq(active | reading | (beats.level != 0) | epilogue.o_busy)
        return m
