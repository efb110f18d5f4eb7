"""The execute unit: weight preload, operand streaming and accumulation."""

from amaranth import Cat, Module, Mux, Signal, Value, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .controller import TokenConsumer, TokenProducer
from .dsp import KEEP
from .isa import FIELD_WIDTH, TOKEN_MAX, Instr
from .mesh import SystolicMesh
from .pipeline import delay, delay_line

__all__ = ["ExecuteUnit"]


class ExecuteUnit(wiring.Component):
    """Runs MATMUL instructions in order, two at a time in a two-stage pipeline.

    *Preload* stage: the instruction waits for its tokens, pops, then reads the ``rows`` weight
    rows ``spad_b[b_addr]`` .. ``spad_b[b_addr + rows - 1]``, one a cycle, and the mesh writes
    row *j* into row *j* of the instruction's weight bank (the weight wave of
    :class:`SystolicMesh`). The stage takes the next instruction in the cycle it hands this one
    over, so weight reads run back to back from one MATMUL to the next.

    *Stream* stage: one row ``spad_a[a_addr + m]`` a cycle is issued, read and registered, and
    enters the mesh :attr:`OPERAND_DELAY` cycles after its issue (weight rows likewise);
    ``cfg.mesh_latency`` cycles later its ``cols`` sums leave it, are added to the old row of
    ``acc[acc_addr + m]`` when ``accumulate`` is set, and are written there
    :attr:`WRITE_DELAY` cycles later. The old row is read :attr:`READ_AHEAD` cycles before the
    sums arrive; the writes that read cannot see (the :attr:`FORWARDED` rows before it, of
    which the one right before never writes its row) are forwarded. The execute->load token is pushed with the last operand row's issue (the load
    unit writes two cycles later at the earliest, after that row's read); the execute->store
    token a cycle before the last row's write lands (the store unit cannot read that row
    sooner). The timing choices are explained where they are made.

    MATMULs alternate between weight banks 0 and 1, so the preload of one overlaps the stream of
    the one before. A MATMUL is handed over in the cycle of its last weight read at the earliest,
    when the stream stage is idle or on its last row, and streams from the next cycle (a cycle
    later when its first row accumulates onto the row that last row writes: no sum is forwarded
    that close). The mesh keeps a weight row and an operand row in the order they were read,
    wherever they meet, so no bank has to drain: the first weight read of MATMUL *i* comes
    after the last operand read of MATMUL *i* - 2 (*i* is accepted no earlier than the
    hand-over of *i* - 1, which waits for the last row of *i* - 2), and its last weight read
    before its own first operand read. In steady state each MATMUL of ``m`` rows costs
    ``max(m, rows)`` cycles: the only limit is scratchpad B's one weight row a cycle.

    Members
    -------
    i_instr : In(stream.Signature(Instr))
    spad_a, spad_b : In(ReadPort.Signature)
    acc_rd : In(ReadPort.Signature)
    acc_wr : In(WritePort.Signature)
    from_load, from_store : Out(TokenConsumer())
    to_load, to_store : Out(TokenProducer())
    o_busy : Out(1)
    """

    #: Cycles from a row's issue (weight or operand) to its data at the mesh: the registered
    #: read address, the read port's one cycle, then three registers of the data.
    OPERAND_DELAY = 5
    #: Cycles from a row's sums (the adders' register) to its write into the accumulator: two
    #: registers of the write data, the second beside the RAMs.
    WRITE_DELAY = 2
    #: Cycles from a row's old-row read to its add (the read port, the RAMs' output register,
    #: three fabric registers, then the addend's register).
    READ_AHEAD = 6
    #: Rows ahead whose writes the old-row read cannot see, forwarded from the sums instead.
    FORWARDED = READ_AHEAD + WRITE_DELAY

    def __init__(self, cfg):
        self._cfg = cfg
        a_shape = data.ArrayLayout(signed(cfg.in_width), cfg.rows)
        b_shape = data.ArrayLayout(signed(cfg.in_width), cfg.cols)
        acc_shape = data.ArrayLayout(signed(cfg.acc_width), cfg.cols)
        super().__init__({
            "i_instr":    In(stream.Signature(Instr)),
            "spad_a":     In(memory.ReadPort.Signature(addr_width=cfg.spad_addr_width,
                                                       shape=a_shape)),
            "spad_b":     In(memory.ReadPort.Signature(addr_width=cfg.spad_addr_width,
                                                       shape=b_shape)),
            "acc_rd":     In(memory.ReadPort.Signature(addr_width=cfg.acc_addr_width,
                                                       shape=acc_shape)),
            "acc_wr":     In(memory.WritePort.Signature(addr_width=cfg.acc_addr_width,
                                                        shape=acc_shape)),
            "from_load":  Out(TokenConsumer()),
            "to_load":    Out(TokenProducer()),
            "to_store":   Out(TokenProducer()),
            "from_store": Out(TokenConsumer()),
            "o_busy":     Out(1),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        m.submodules.mesh = mesh = SystolicMesh(cfg)

        instr = self.i_instr.payload
        body = instr.body.matmul

        next_bank = Signal()        # the bank of the next MATMUL accepted: banks alternate

        # -- preload stage -----------------------------------------------------------------
        p_full = Signal()
        p_count = Signal(range(cfg.rows + 1))
        p_bank = Signal()
        p_b_addr = Signal(FIELD_WIDTH)     # the next weight row to read
        p_a_addr = Signal(FIELD_WIDTH)
        p_acc_addr = Signal(FIELD_WIDTH)
        p_remaining = Signal(FIELD_WIDTH)  # rows to stream: m_len, or 1 for m_len == 0
        p_zero = Signal()                  # m_len == 0
        p_final = Signal()                 # m_len <= 1
        p_accumulate = Signal()
        p_push_load = Signal()
        p_push_store = Signal()
        p_acc_prev = Signal(cfg.acc_addr_width)    # its first accumulator row minus one
        # Done from the cycle that reads the last weight row: the first operand row read after
        # it already meets the new weights. A register (a timing choice: it starts the hand-over
        # decision, which loads every stream-stage register), set by the read before that one.
        p_done = Signal()

        # -- stream stage ------------------------------------------------------------------
        s_active = Signal()
        s_zero = Signal()           # a MATMUL with m_len == 0: one idle slot for its tokens
        s_bank = Signal()
        s_a_addr = Signal(FIELD_WIDTH)
        s_acc_addr = Signal(FIELD_WIDTH)
        s_remaining = Signal(FIELD_WIDTH)
        s_accumulate = Signal()
        s_push_load = Signal()
        s_push_store = Signal()
        s_final = Signal()          # s_remaining == 1, kept in a register (a timing choice:
        s_last = Signal()           # the 16-bit compare was on the handoff's critical path)
        m.d.comb += s_last.eq(s_active & s_final)
        # ~s_active | s_final, the stream stage's half of the hand-over, in a register of its own
        # (a timing choice: the hand-over then is one LUT of registers, and so is `free`).
        s_open = Signal(init=1)

        # TOKEN_MAX minus the execute->store pushes still travelling down the delay line: the
        # room check compares the channel's count with it.
        store_limit = Signal(range(TOKEN_MAX + 1), init=TOKEN_MAX)

        # -- preload: read the weight rows, row j into row j of the bank ----------------------
        w_en = Signal()
        w_bank = Signal()
        w_row = Signal(range(cfg.rows))
        reading = Signal()
        m.d.comb += reading.eq(p_full & (p_count != cfg.rows))
        # Timing: each scratchpad's read address is registered once more, with nothing between
        # that register and the RAMs' pins: the ECP5 flow copies it beside each group of RAMs
        # (fpga/ramreg.py), and the route to the copies, which spread across the chip, has a
        # cycle of its own instead of following the hand-over decision. The read ports are
        # always enabled, so no enable has to reach the RAMs: a row read for nothing is never
        # used (the mesh takes weight rows by their tag, and sums by `meta`). A row
        # is read a cycle after it is issued here. Its data is registered three times before
        # the mesh, which registers it again at its edge: the ECP5 flow moves the first
        # register into the RAMs, and the route from them to the mesh's edge has three cycles
        # of its own (on the 8x8 array, whose scratchpads and multipliers spread across the
        # chip, it was 6.6 ns of routing alone with one fabric register, and 6.1 ns from the
        # RAM to the first of two). A row is at the mesh OPERAND_DELAY cycles after its issue.
        b_addr, a_addr = Signal.like(p_b_addr), Signal.like(s_a_addr)
        m.d.sync += [b_addr.eq(p_b_addr), a_addr.eq(s_a_addr)]
        m.d.comb += [self.spad_b.addr.eq(b_addr), self.spad_b.en.eq(1),
                     self.spad_a.addr.eq(a_addr), self.spad_a.en.eq(1)]
        w_data = delay(m, self.spad_b.data, self.OPERAND_DELAY - 2, name="w_data")
        a_data = delay(m, self.spad_a.data, self.OPERAND_DELAY - 2, name="a_data")
        with m.If(reading):
            m.d.sync += [p_count.eq(p_count + 1), p_b_addr.eq(p_b_addr + 1),
                         p_done.eq(p_count >= cfg.rows - 2 if cfg.rows > 2 else 1)]
        # The row tag follows the read through its OPERAND_DELAY cycles.
        m.d.comb += Cat(w_en, w_bank, w_row).eq(
            delay(m, Cat(reading, p_bank, p_count[:len(w_row)]), self.OPERAND_DELAY,
                  name="w_tag", reset_less=False))
        m.d.comb += [
            mesh.i_w.eq(w_data),
            mesh.i_w_en.eq(w_en),
            mesh.i_w_bank.eq(w_bank),
            mesh.i_w_row.eq(w_row),
        ]

        # -- hand the preloaded instruction to the stream stage ------------------------------
        load_pushing = Signal()
        m.d.comb += load_pushing.eq(s_last & s_push_load)
        # Timing: the room check is one register, computed from sums one cycle old: the tokens
        # in each channel plus the pushes this unit has handed over and not made yet (for
        # execute->load, the streaming MATMUL's at its last row; for execute->store, those
        # still travelling down the delay line), and from the preloaded MATMUL's push flags of
        # that cycle. That is safe: the sums only grow by this unit's handoffs, and a handoff
        # never follows another in the next cycle (a preload reads `rows` >= 2 weight rows), so
        # it is at most one cycle late to see room that a pop made; and a hand-over is never in
        # the cycle after the preload stage took a new MATMUL, whose push flags it would miss.
        load_owed = Signal()
        room = Signal()
        # No adders: `count + owed < TOKEN_MAX` is two compares with constants, and the pushes
        # owed to the store channel are kept as the limit its count must stay under.
        load_count, store_count = self.to_load.count, self.to_store.count
        m.d.sync += room.eq(
            (~p_push_load | Mux(load_owed, load_count < TOKEN_MAX - 1, load_count != TOKEN_MAX)) &
            (~p_push_store | (store_count < store_limit)))
        handoff = Signal()
        m.d.comb += handoff.eq(p_done & room & s_open)

        # -- stream: one operand row a cycle ------------------------------------------------
        Meta = data.StructLayout({
            "valid": 1, "addr": cfg.acc_addr_width, "accumulate": 1, "push": 1,
        })
        meta_in = Signal(Meta)
        with m.If(s_active):
            m.d.comb += [
                meta_in.valid.eq(~s_zero),
                meta_in.addr.eq(s_acc_addr),
                meta_in.accumulate.eq(s_accumulate),
                meta_in.push.eq(s_push_store & s_last),
                self.to_load.push.eq(load_pushing),
            ]
            m.d.sync += [
                s_a_addr.eq(s_a_addr + 1),
                s_acc_addr.eq(s_acc_addr + 1),
                s_remaining.eq(s_remaining - 1),
                s_final.eq(s_remaining == 2),
            ]
            with m.If(s_last):
                m.d.sync += s_active.eq(0)
        m.d.comb += [mesh.i_a.eq(a_data),
                     mesh.i_bank.eq(delay(m, s_bank, self.OPERAND_DELAY, name="bank",
                                          reset_less=False))]

        # The next ~s_active | s_final: from the hand-over, `p_final`; else 1 unless the stage
        # streams on (active, not on its last row), when it is the next `s_final`. But a row is
        # never streamed in the cycle right after a row that writes its accumulator row
        # (back-to-back accumulating MATMULs of one row into one row): the sum it needs would
        # have to go straight from the adders back into them, a loop that held the 8x8 datapath
        # under 150 MHz. The stage stays closed on that last row instead (`clash`: the row it
        # streams now is the one before its last), so the hand-over waits a cycle (the cycle
        # model's `acc_hazard`). The preload stage's registers do not change in the cycle
        # before a hand-over, which needs `p_done`.
        # (`~s_zero` is implied where `clash` counts, a MATMUL of m_len 0 never having two rows
        # left; the netlists placed in session 11 have it.)
        clash = (~s_zero & (s_acc_addr[:cfg.acc_addr_width] == p_acc_prev) &
                 p_accumulate & ~p_zero)
        m.d.sync += s_open.eq(Mux(handoff, p_final,
                                  ~s_active | s_final | ((s_remaining == 2) & ~clash)))
        with m.If(handoff):
            m.d.sync += [
                p_full.eq(0),
                s_active.eq(1),
                s_zero.eq(p_zero),
                s_bank.eq(p_bank),
                s_a_addr.eq(p_a_addr),
                s_acc_addr.eq(p_acc_addr),
                s_remaining.eq(p_remaining),
                s_final.eq(p_final),
                s_accumulate.eq(p_accumulate),
                s_push_load.eq(p_push_load),
                s_push_store.eq(p_push_store),
            ]

        # -- preload: accept, also in the cycle of a hand-over ----------------------------------
        # Its sync statements come after the hand-over's and the read's, so they win. The bank
        # it preloads was last used by the MATMUL two back, which has read its last operand row
        # by now (the hand-over waits for it): the mesh keeps that row on the old weights.
        # Timing: the stage's registers load whenever it is free, whether or not it accepts
        # (they mean nothing until `p_full` is set), so the wide registers' enable does not
        # wait for the valid and token checks.
        can_pop = ((~instr.deps.pop_prev | self.from_load.avail) &
                   (~instr.deps.pop_next | self.from_store.avail))
        free = Signal()
        accept = Signal()
        m.d.comb += [free.eq(~p_full | handoff),
                     accept.eq(free & self.i_instr.valid & can_pop)]
        with m.If(accept):
            m.d.comb += [
                self.i_instr.ready.eq(1),
                self.from_load.pop.eq(instr.deps.pop_prev),
                self.from_store.pop.eq(instr.deps.pop_next),
            ]
            m.d.sync += [p_full.eq(1), next_bank.eq(~next_bank)]
        with m.If(free):
            m.d.sync += [
                p_done.eq(0),
                p_count.eq(0),
                p_bank.eq(next_bank),
                p_b_addr.eq(body.b_addr),
                p_a_addr.eq(body.a_addr),
                p_acc_addr.eq(body.acc_addr),
                p_acc_prev.eq(body.acc_addr[:cfg.acc_addr_width] - 1),
                p_remaining.eq(Mux(body.m_len == 0, 1, body.m_len)),
                p_zero.eq(body.m_len == 0),
                p_final.eq(body.m_len <= 1),
                p_accumulate.eq(body.accumulate),
                p_push_load.eq(instr.deps.push_prev),
                p_push_store.eq(instr.deps.push_next),
            ]

        # -- accumulate: read the old row early, add, write later ---------------------------
        # meta[k] describes the row whose operand was issued k cycles ago. Its operand enters the
        # mesh at k == OPERAND_DELAY and its sums leave at k == latency + 1, where they are added
        # to the old row into `acc_sum`, the first of the WRITE_DELAY registers of the write
        # data, and written at k == latency + 1 + WRITE_DELAY.
        # Timing choices (nextpnr's ECP5 model puts a block RAM's clock-to-output at 5.8 ns,
        # and the accumulator's RAMs spread across the chip):
        # * The old row is read at k == latency + 1 - READ_AHEAD and lands two cycles later in
        #   the first register of the delay line `acc_old`, with nothing between the RAM and
        #   it, not even a reset: the ECP5 flow moves it into the block RAMs as their output
        #   register (fpga/ramreg.py). The read port is always enabled (no hold logic) and not
        #   transparent (hw/memory.py says why).
        # * The line's three further registers (the last at k == latency) are in the fabric,
        #   where the placer can spread them between the RAMs and the adders: the route from
        #   the RAMs has three cycles (on the 8x8 array it was 5.9 ns of routing alone with one
        #   such register, and 6.1 ns from the RAM to the first of two).
        # * The addend is decided a cycle ahead: `other` (k == latency + 1) is the old row or a
        #   row forwarded from two to FORWARDED rows ahead, or zero without `accumulate`, and
        #   the adder adds it to the mesh's sums with nothing between two registers and it. No
        #   row accumulates onto the row one ahead of it (the hand-over's `clash` stalls
        #   instead): forwarding that one put a multiplexer into a loop from the sum register
        #   back to the adder, and with the congestion among the adders that loop held the
        #   8x8 datapath under 150 MHz.
        # * The sum is copied twice before it is written (WRITE_DELAY): the first copy stays
        #   by the adders (the forwarding reads it), the second can sit beside the RAMs, so
        #   the write data crosses the chip on two paths of its own. The execute->store push
        #   is a cycle before the write (k == latency + WRITE_DELAY): the
        #   store unit reads a row two cycles after a push at the earliest (the token counts
        #   from the next cycle, and a STORE reads from the cycle after its accept), by when
        #   the write has landed.
        # That read misses the writes of the FORWARDED rows ahead of this one (on the FPGA the
        # accumulator's `no_rw_check` leaves a same-cycle collision undefined); they are
        # forwarded instead, the nearest first (the row one ahead never writes this row).
        latency = cfg.mesh_latency + self.OPERAND_DELAY - 1
        meta = delay_line(m, meta_in, latency + self.WRITE_DELAY + 1, name="meta",
                          reset_less=False)
        rd_meta = meta[latency + 1 - self.READ_AHEAD]
        push_meta, wr_meta = meta[latency + self.WRITE_DELAY], meta[latency + self.WRITE_DELAY + 1]
        acc_old = delay(m, self.acc_rd.data, self.READ_AHEAD - 2, name="acc_old")
        sums = Signal.like(self.acc_wr.data)
        # (The row registers have no reset: `meta` says which rows are real. A reset costs a
        # LUT before the sum registers.)
        wdata_line = delay_line(m, sums, self.WRITE_DELAY, name="acc_wdata", attrs=KEEP)
        acc_sum, acc_wdata = wdata_line[1], wdata_line[-1]
        m.d.comb += [
            self.acc_rd.addr.eq(rd_meta.addr),
            self.acc_rd.en.eq(1),
            self.acc_wr.addr.eq(wr_meta.addr),
            self.acc_wr.en.eq(wr_meta.valid),
            self.acc_wr.data.eq(acc_wdata),
            self.to_store.push.eq(push_meta.push),
        ]

        # Timing: every flag that selects for a whole row is a register with one copy per
        # byte of the row (kept apart in the FPGA flows, hw/dsp.py KEEP_REGISTERS), so none
        # drives more than eight bits of the multiplexers and adders, which spread with the
        # accumulator's block RAMs. A copy per column (32 bits) still left 4 ns of routing.
        slices = [(low, min(low + 8, cfg.acc_width)) for low in range(0, cfg.acc_width, 8)]
        copies_per_row = cfg.cols * len(slices)

        def per_byte(name, values):
            """Registered copies of `values`, one per byte."""
            copies = [Signal(name=f"{name}_{i}", attrs=KEEP) for i in range(copies_per_row)]
            m.d.sync += [copy.eq(value) for copy, value in zip(copies, values, strict=True)]
            return copies

        def fan_out(name, value):
            """A one-bit value of stage k - 2 as its copies per byte at stage k, through a copy
            per column: no flip-flop drives more than `cols` copies, and the route from one
            place to the bytes, which spread with the adders, has two cycles (one flip-flop to
            all the byte copies left up to 7.7 ns of routing)."""
            columns = [Signal(name=f"{name}_c{c}", attrs=KEEP) for c in range(cfg.cols)]
            m.d.sync += [column.eq(value) for column in columns]
            return per_byte(name, [columns[i // len(slices)] for i in range(copies_per_row)])

        # The rows' addresses again, for the compares alone (kept apart from `meta`, whose
        # registers the placer stretches from the issue logic to the RAMs: a route of 5.6 ns
        # from one of them to a compare).
        tags = delay_line(m, Cat(meta_in.valid, meta_in.addr), self.FORWARDED + 1, name="tag",
                          reset_less=False, attrs=KEEP)

        def writes(ahead, k):
            """Registered, per byte: the row `ahead` rows ahead of the row at stage k writes its
            row.

            Both rows move down the line a stage a cycle, so the compare is made once, at stage 1
            into a flag for stage 2, and the flag follows the row down a shift register to
            stage k - 2, where `fan_out` takes it. The compares stay beside the issue logic;
            made at stage k - 2 they sat between `meta`'s address registers and the copies
            spread along the adders, with 4.5 ns of routing into them.
            """
            flag = delay(m, tags[1 + ahead][0] & (tags[1 + ahead][1:] == tags[1][1:]),
                         k - 3, name=f"hit{ahead}", reset_less=False)
            return fan_out(f"hit{ahead}_k{k}", flag)

        # `acc_sum` holds the sum of the row `ahead` rows ahead of this one at
        # k == latency + 2 - ahead; each forwarded candidate is taken from it then and carried
        # along beside the row (`fwd`, with its flag `fwd_hit`), the nearer replacing the
        # farther. `back_row` is `acc_sum` a cycle ago: the farthest row's sum at the first
        # choice.
        back_row = Signal.like(self.acc_wr.data, reset_less=True)
        fwd, fwd_hit = back_row, writes(self.FORWARDED, latency + 3 - self.FORWARDED)
        choices = []                      # (the row `ahead` ahead's flags, before, after)
        for ahead in range(self.FORWARDED - 1, 2, -1):
            hit = writes(ahead, latency + 2 - ahead)
            nearer = Signal.like(back_row, name=f"fwd{ahead}_row")
            choices.append((hit, fwd, nearer))
            fwd = nearer
            fwd_hit = per_byte(f"fwd{ahead}_hit", [h | f for h, f in zip(hit, fwd_hit)])
        other = Signal.like(back_row)     # the addend
        hit2 = writes(2, latency)
        accumulate = fan_out("accumulate", meta[latency - 2].accumulate)
        m.d.sync += back_row.eq(acc_sum)
        for c in range(cfg.cols):
            addend = []
            for j, (low, high) in enumerate(slices):
                i = c * len(slices) + j

                def byte(row, c=c, low=low, high=high):
                    return Value.cast(row[c])[low:high]
                s_sum, s_other = byte(acc_sum), byte(other)
                for hit, farther, nearer in choices:
                    m.d.sync += byte(nearer).eq(Mux(hit[i], s_sum, byte(farther)))
                m.d.sync += s_other.eq(Mux(accumulate[i], Mux(hit2[i], s_sum,
                                                              Mux(fwd_hit[i], byte(fwd),
                                                                  byte(acc_old))), 0))
                addend.append(s_other)
            m.d.comb += sums[c].eq(mesh.o_c[c] + Cat(*addend).as_signed())

        m.d.sync += store_limit.eq(store_limit - (handoff & p_push_store) + push_meta.push)
        # A handoff and the push it owes are never in the same cycle: the push is at the last
        # row, from the cycle after the handoff at the earliest.
        with m.If(handoff & p_push_load):
            m.d.sync += load_owed.eq(1)
        with m.Elif(load_pushing):
            m.d.sync += load_owed.eq(0)

        # The write stage does not count as busy: its write lands at the end of the cycle, before
        # anything that waits for the unit to go idle can look.
        in_flight = Cat(stage.valid | stage.push for stage in meta[1:-1]).any()
        m.d.comb += self.o_busy.eq(p_full | s_active | in_flight)
        return m
