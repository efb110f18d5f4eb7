"""The execute unit's accumulator path: read a row's old value early, add the sums, write."""

from amaranth import Cat, Module, Mux, Signal, Value, signed
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from ..dsp import KEEP
from ..pipeline import delay, delay_line
from .layout import row_layout
from .read import OPERAND_DELAY

__all__ = ["AccumulatePath"]


class AccumulatePath(wiring.Component):
    """Adds each row's sums from the mesh to its accumulator row, or writes them there.

    Follows the operand rows the stream stage issues (``i_row``, one a cycle): ``cfg.mesh_latency``
    cycles after a row enters the mesh its ``cols`` sums (``i_sums``) leave it, are added to the
    old row of ``acc[addr]`` when ``accumulate`` is set, and are written there
    :attr:`WRITE_DELAY` cycles later. The old row is read :attr:`READ_AHEAD` cycles before the
    sums arrive; the writes that read cannot see (the :attr:`FORWARDED` rows before it, of which
    the one right before never writes its row: the stream stage waits instead) are forwarded.
    The execute->store push a row carries is made a cycle before its write lands (the store
    unit cannot read that row sooner). The timing choices are explained where they are made.

    Members
    -------
    i_row : In(row_layout(cfg))
        The row the stream stage issues this cycle.
    i_sums : In(ArrayLayout(signed(acc_width), cols))
        The mesh's sums.
    acc_rd : In(ReadPort.Signature)
    acc_wr : In(WritePort.Signature)
        The accumulator's read-modify-write ports.
    o_push_store : Out(1)
        The execute->store push.
    o_busy : Out(1)
        A row between its issue and the cycle before its write (the write lands at the end of
        its cycle, before anything that waits for the unit to go idle can look).
    """

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
        acc_shape = data.ArrayLayout(signed(cfg.acc_width), cfg.cols)
        super().__init__({
            "i_row":        In(row_layout(cfg)),
            "i_sums":       In(acc_shape),
            "acc_rd":       In(memory.ReadPort.Signature(addr_width=cfg.acc_addr_width,
                                                         shape=acc_shape)),
            "acc_wr":       In(memory.WritePort.Signature(addr_width=cfg.acc_addr_width,
                                                          shape=acc_shape)),
            "o_push_store": Out(1),
            "o_busy":       Out(1),
        })
        # Bytes of an accumulator lane, (low, high) bit by bit.
        self._slices = [(low, min(low + 8, cfg.acc_width)) for low in range(0, cfg.acc_width, 8)]
        self._copies_per_row = cfg.cols * len(self._slices)

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
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
        #   row accumulates onto the row one ahead of it (the stream stage's `clash` stalls
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
        latency = cfg.mesh_latency + OPERAND_DELAY - 1
        meta = delay_line(m, self.i_row, latency + self.WRITE_DELAY + 1, name="meta",
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
            self.o_push_store.eq(push_meta.push),
        ]
        self._add(m, latency, meta, sums, acc_sum, acc_old)

        # The write stage does not count as busy: its write lands at the end of the cycle, before
        # anything that waits for the unit to go idle can look.
        in_flight = Cat(stage.valid | stage.push for stage in meta[1:-1]).any()
        m.d.comb += self.o_busy.eq(in_flight)
        return m

    def _add(self, m, latency, meta, sums, acc_sum, acc_old):
        """``sums``: the mesh's sums plus the addend, the old row or a forwarded one, per byte.

        `acc_sum` holds the sum of the row `ahead` rows ahead of this one at
        k == latency + 2 - ahead; each forwarded candidate is taken from it then and carried
        along beside the row (`fwd`, with its flag `fwd_hit`), the nearer replacing the
        farther. `back_row` is `acc_sum` a cycle ago: the farthest row's sum at the first
        choice.
        """
        cfg = self._cfg
        # The rows' addresses again, for the compares alone (kept apart from `meta`, whose
        # registers the placer stretches from the issue logic to the RAMs: a route of 5.6 ns
        # from one of them to a compare).
        tags = delay_line(m, Cat(self.i_row.valid, self.i_row.addr), self.FORWARDED + 1,
                          name="tag", reset_less=False, attrs=KEEP)
        back_row = Signal.like(self.acc_wr.data, reset_less=True)
        fwd, fwd_hit = back_row, self._writes(m, tags, self.FORWARDED,
                                              latency + 3 - self.FORWARDED)
        choices = []                      # (the row `ahead` ahead's flags, before, after)
        for ahead in range(self.FORWARDED - 1, 2, -1):
            hit = self._writes(m, tags, ahead, latency + 2 - ahead)
            nearer = Signal.like(back_row, name=f"fwd{ahead}_row")
            choices.append((hit, fwd, nearer))
            fwd = nearer
            fwd_hit = self._per_byte(m, f"fwd{ahead}_hit", [h | f for h, f in zip(hit, fwd_hit)])
        other = Signal.like(back_row)     # the addend
        hit2 = self._writes(m, tags, 2, latency)
        accumulate = self._fan_out(m, "accumulate", meta[latency - 2].accumulate)
        m.d.sync += back_row.eq(acc_sum)
        for c in range(cfg.cols):
            addend = []
            for j, (low, high) in enumerate(self._slices):
                i = c * len(self._slices) + j

                def byte(row, c=c, low=low, high=high):
                    return Value.cast(row[c])[low:high]
                s_sum, s_other = byte(acc_sum), byte(other)
                for hit, farther, nearer in choices:
                    m.d.sync += byte(nearer).eq(Mux(hit[i], s_sum, byte(farther)))
                m.d.sync += s_other.eq(Mux(accumulate[i], Mux(hit2[i], s_sum,
                                                              Mux(fwd_hit[i], byte(fwd),
                                                                  byte(acc_old))), 0))
                addend.append(s_other)
            m.d.comb += sums[c].eq(self.i_sums[c] + Cat(*addend).as_signed())

    def _per_byte(self, m, name, values):
        """Registered copies of `values`, one per byte.

        Timing: every flag that selects for a whole row is a register with one copy per byte
        of the row (kept apart in the FPGA flows, hw/dsp.py KEEP_REGISTERS), so none drives
        more than eight bits of the multiplexers and adders, which spread with the
        accumulator's block RAMs. A copy per column (32 bits) still left 4 ns of routing.
        """
        copies = [Signal(name=f"{name}_{i}", attrs=KEEP) for i in range(self._copies_per_row)]
        m.d.sync += [copy.eq(value) for copy, value in zip(copies, values, strict=True)]
        return copies

    def _fan_out(self, m, name, value):
        """A one-bit value of stage k - 2 as its copies per byte at stage k, through a copy
        per column: no flip-flop drives more than `cols` copies, and the route from one
        place to the bytes, which spread with the adders, has two cycles (one flip-flop to
        all the byte copies left up to 7.7 ns of routing)."""
        columns = [Signal(name=f"{name}_c{c}", attrs=KEEP) for c in range(self._cfg.cols)]
        m.d.sync += [column.eq(value) for column in columns]
        return self._per_byte(m, name, [columns[i // len(self._slices)]
                                        for i in range(self._copies_per_row)])

    def _writes(self, m, tags, ahead, k):
        """Registered, per byte: the row `ahead` rows ahead of the row at stage k writes its
        row.

        Both rows move down the line a stage a cycle, so the compare is made once, at stage 1
        into a flag for stage 2, and the flag follows the row down a shift register to
        stage k - 2, where `_fan_out` takes it. The compares stay beside the issue logic;
        made at stage k - 2 they sat between `meta`'s address registers and the copies
        spread along the adders, with 4.5 ns of routing into them.
        """
        flag = delay(m, tags[1 + ahead][0] & (tags[1 + ahead][1:] == tags[1][1:]),
                     k - 3, name=f"hit{ahead}", reset_less=False)
        return self._fan_out(m, f"hit{ahead}_k{k}", flag)
