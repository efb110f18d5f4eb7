"""The store unit: drains accumulator rows through the epilogue to the output stream."""

from typing import NamedTuple

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from .controller import TokenConsumer, TokenProducer
from .dsp import KEEP
from .epilogue import Epilogue, beat_layout
from .epilogue.arith import at_least
from .epilogue.intake import Intake
from .queue import Queue
from .isa import FIELD_WIDTH, EpOp, Instr, Opcode, Param, ParamsLayout, PmemWord, StoreHead

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
    streams. Beats go into the :class:`Epilogue`'s queue; a read is only issued when the queue
    has room for it, so backpressure on ``o_data`` stalls the reads and nothing is lost.
    The store->execute token is pushed with the last read, and the next STORE is accepted in
    that cycle.

    Parameters
    ----------
    cfg : AccelConfig
    epilogue : callable
        Builds the epilogue from ``cfg``: :class:`~bertaccel.hw.epilogue.Epilogue`, or a
        stand-in with its ports (the FPGA flow's fast timing check places the store unit with
        the epilogue's handshakes and without its arithmetic, ``bertaccel.fpga.designs``).

    Members
    -------
    i_instr : In(stream.Signature(Instr))
    i_head : In(StoreHead)
        What the STORE at ``i_instr``'s head is, decoded by the controller
        (:class:`~bertaccel.hw.controller.Controller`, ``o_store_head``).
    acc, pmem, res : In(ReadPort.Signature)
        The accumulator's store port, the parameter memory, scratchpad B's auxiliary port.
    o_data : Out(stream.Signature(ArrayLayout(signed(acc_width), cols)))
    from_exec : Out(TokenConsumer())
    to_exec : Out(TokenProducer())
    o_busy : Out(1)
    """

    #: Beats read and not yet taken by the epilogue, at most: its queue's depth.
    FIFO_DEPTH = Intake.QUEUE_DEPTH
    #: Cycles from a beat's read issue to its write into the epilogue's queue: the memories'
    #: read, their data register and its copy (:meth:`_assemble`).
    READ_TO_QUEUE = 3
    #: Cycles from a beat's read issue to the head of the epilogue's queue.
    READ_TO_FIFO = READ_TO_QUEUE + Queue.LATENCY

    def __init__(self, cfg, *, epilogue=Epilogue):
        self._cfg = cfg
        self._epilogue = epilogue
        self._row = data.ArrayLayout(signed(cfg.acc_width), cfg.cols)
        super().__init__({
            "i_instr":   In(stream.Signature(Instr)),
            "i_head":    In(StoreHead),
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
        m = Module()
        m.submodules.epilogue = epilogue = self._epilogue(self._cfg)
        wiring.connect(m, epilogue.o_data, wiring.flipped(self.o_data))
        params = Signal(ParamsLayout)
        m.d.comb += epilogue.params.eq(params)

        drain = _Drain()
        issue, none_out = self._credit(m, epilogue.o_taken, drain)
        tags = self._assemble(m, epilogue.i_beat, issue["ctl"])
        last = self._walk(m, drain, issue, params, tags)
        # The STORE's registers load after the walk's updates, so an accept wins over them.
        self._accept(m, drain, last, none_out, epilogue.o_busy, params)
        m.d.comb += self.o_busy.eq(drain.active | ~none_out | epilogue.o_busy)
        return m

    def _credit(self, m, taken, s):
        """``(issue, none_out)``: whether a beat's reads are issued this cycle (a dict of
        copies, one for each group of registers the issue enables: :data:`_ISSUE_GROUPS`), and
        whether no beat is read and not yet taken by the epilogue.

        A read is issued only while fewer than FIFO_DEPTH beats are read and not yet taken
        (``taken``: the epilogue's ``o_taken``), so the epilogue's queue always has room for
        it. Timing: that count is kept in a register of its own, and beside it whether it is
        below FIFO_DEPTH (`room`) and zero (`none_out`); an issue or a take only selects their
        next values among compares of the count made beside it, so the issue is an AND of two
        registers and the take reaches these few flip-flops, not the walk's enables or the
        accept. `room` and `active` have a copy for each group, kept apart in the FPGA flows
        (:data:`~bertaccel.hw.dsp.KEEP`), so that no one net enables the hundreds of
        flip-flops that a read moves.
        """
        depth = self.FIFO_DEPTH
        outstanding = Signal(range(depth + 1))
        rooms = {g: Signal(init=1, name=f"room_{g}", attrs=KEEP) for g in _ISSUE_GROUPS}
        issue = {g: Signal(name=f"issue_{g}") for g in _ISSUE_GROUPS}
        none_out = Signal(init=1)
        m.d.comb += [issue[g].eq(s.actives[g] & rooms[g]) for g in _ISSUE_GROUPS]
        more, fewer = issue["ctl"] & ~taken, taken & ~issue["ctl"]
        with m.If(more):
            m.d.sync += [outstanding.eq(outstanding + 1), none_out.eq(0)]
            m.d.sync += [room.eq(outstanding != depth - 1) for room in rooms.values()]
        with m.Elif(fewer):
            m.d.sync += [outstanding.eq(outstanding - 1), none_out.eq(outstanding == 1)]
            m.d.sync += [room.eq(1) for room in rooms.values()]
        return issue, none_out

    def _assemble(self, m, into, issue):
        """Put each beat together from the three reads and its tags, into the epilogue's queue
        (``into``, its ``i_beat``); returns the tags register, which the walk sets with the
        reads' issue."""
        cfg = self._cfg
        reading = Signal()          # a beat's reads were issued last cycle
        copying = Signal()          # ... two cycles ago: `beat` is copied into `beat_copy`
        writing = Signal()          # ... three cycles ago: `beat_copy` goes into the queue
        tags = Signal(data.StructLayout({"op": EpOp, "second": 1, "last": 1,
                                         "lane_valid": cfg.cols}))
        # Timing: the memories' read data is registered before the epilogue's queue (whose
        # storage is LUT RAM): nextpnr puts an ECP5 block RAM's clock-to-output at 5.8 ns,
        # which leaves time for routing to a flip-flop and nothing more at 150 MHz; the
        # register is reset-less (`writing` says when it matters), so an ECP5 flow moves it
        # into the block RAMs as their output register (fpga/ramreg.py). It is copied once more
        # in the fabric before the queue: from the RAMs' output registers, which spread across
        # the chip, to one place was up to 5.9 ns of routing on the 8x8 array.
        Beat = beat_layout(cfg)
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
            reading.eq(issue),
            copying.eq(reading),
            writing.eq(copying),
        ]
        m.d.comb += [
            into.payload.eq(beat_copy),
            into.valid.eq(writing),
        ]
        return tags

    def _walk(self, m, s, issue, params, tags):
        """Issue the reads of the next beat and step ``s`` (the :class:`_Drain`) to the one
        after; returns ``last``, set with the STORE's last read. ``issue`` holds the issue's
        copies (:meth:`_credit`): the tags, the position and the pointers each take their own."""
        cfg = self._cfg
        row_end, next_second = s.at_row_end, s.next_second
        last = Signal()
        m.d.comb += last.eq(issue["ctl"] & s.final)

        # Timing: each lane's compare is unsigned (`at_least`), a carry chain's carry out.
        lane_valid = Signal(cfg.cols)
        for c in range(cfg.cols):
            m.d.comb += lane_valid[c].eq(~s.two_pass | at_least(s.lanes_left, c + 1))

        # Timing: the memories read every cycle, at addresses straight from registers: no
        # logic between the issue decision and the block RAMs (tens of them, across the chip).
        # A read that was not issued is never written to the queue (`writing`), so what it
        # returns does not matter.
        m.d.comb += [
            self.acc.addr.eq(s.acc_ptr), self.acc.en.eq(1),
            self.pmem.addr.eq(s.pm_ptr), self.pmem.en.eq(1),
            self.res.addr.eq(s.aux_ptr), self.res.en.eq(1),
        ]
        with m.If(issue["tags"]):
            m.d.sync += [
                tags.op.eq(s.op), tags.second.eq(s.second | ~s.two_pass), tags.last.eq(row_end),
                tags.lane_valid.eq(lane_valid),
            ]
        with m.If(issue["position"]):
            with m.If(row_end):
                m.d.sync += [
                    s.second.eq(next_second), s.strip.eq(0), s.at_row_end.eq(s.one_strip),
                    s.left.eq(s.left - 1), s.left_is_0.eq(s.left_is_1),
                    s.left_is_1.eq(s.left == 3), s.odd.eq(~s.odd),
                    s.lanes_left.eq(params.row_len),
                    s.final.eq(s.one_strip & s.left_is_1),
                    s.next_second.eq(s.two_pass & (~s.odd | (s.left == 3))),
                ]
            with m.Else():
                m.d.sync += [
                    s.strip.eq(s.strip + 1), s.at_row_end.eq(s.strip == s.strips_m2),
                    s.final.eq((s.strip == s.strips_m2) & s.left_is_0),
                    s.lanes_left.eq(s.lanes_left - cfg.cols),
                ]
        with m.If(issue["pointers"]):
            with m.If(row_end):
                m.d.sync += s.pm_ptr.eq(s.param_addr)
                with m.If(next_second):
                    m.d.sync += [s.acc_ptr.eq(s.acc2), s.aux_ptr.eq(s.aux2),
                                 s.acc2.eq(s.acc2 + 1), s.aux2.eq(s.aux2 + 1)]
                with m.Else():
                    m.d.sync += [s.acc_ptr.eq(s.acc1), s.aux_ptr.eq(s.aux1),
                                 s.acc1.eq(s.acc1 + 1), s.aux1.eq(s.aux1 + 1)]
            with m.Else():
                m.d.sync += [s.acc_ptr.eq(s.acc_ptr + s.stride), s.aux_ptr.eq(s.aux_ptr + s.rows),
                             s.pm_ptr.eq(s.pm_ptr + 1)]
        with m.If(last):
            m.d.comb += self.to_exec.push.eq(s.push)
            s.set_active(m, 0)
        return last

    def _accept(self, m, drain, last, none_out, epilogue_busy, params):
        """Take the next instruction: a STORE when the unit is free and its tokens allow, a SET
        when everything before it has left the epilogue."""
        instr = self.i_instr.payload
        pushing = Signal()
        m.d.comb += pushing.eq(last & drain.push)
        empty = self.i_head.empty
        drained = ~drain.active & none_out & ~epilogue_busy
        # An empty STORE pushes as it is accepted, so it waits for the unit to be idle and never
        # pushes in the same cycle as the last read of the STORE before it.
        free = Signal()
        m.d.comb += free.eq(~drain.active | (last & ~empty))
        staged = self._set(m, params)
        self._load(m, drain, free, _row_len(params, staged))

        with m.Switch(instr.opcode):
            with m.Case(Opcode.SET):
                with m.If(self.i_instr.valid & drained):
                    m.d.comb += self.i_instr.ready.eq(1)
                    m.d.sync += staged.setting.eq(1)
            with m.Default():
                can_pop = ~instr.deps.pop_prev | self.from_exec.avail
                # Timing: `count + pushing < TOKEN_MAX` from the channel's room registers.
                can_push = ~instr.deps.push_prev | Mux(pushing, self.to_exec.room2,
                                                       self.to_exec.room)
                with m.If(free & self.i_instr.valid & can_pop & can_push):
                    m.d.comb += [
                        self.i_instr.ready.eq(1),
                        self.from_exec.pop.eq(instr.deps.pop_prev),
                    ]
                    with m.If(empty):
                        m.d.comb += self.to_exec.push.eq(instr.deps.push_prev)
                        drain.set_active(m, 0)
                    with m.Else():
                        drain.set_active(m, 1)

    def _load(self, m, s, free, row_len):
        """Load the STORE at the head of the queue into ``s`` (the :class:`_Drain`) while free.

        Timing: whenever the unit is free, its registers take the STORE at the head of the
        queue (or whatever the head holds), accepted or not; only `active`, the pop and
        `ready` wait for the tokens. So the enable of these registers does not wait for the
        token checks, and a STORE that is not accepted leaves nothing that matters behind.
        """
        instr, head = self.i_instr.payload, self.i_head
        body, is_two_pass = instr.body.store, head.two_pass
        with m.If(free):
            m.d.sync += [
                s.rows.eq(body.rows), s.strips.eq(body.strips), s.stride.eq(body.stride),
                s.param_addr.eq(body.param_addr), s.op.eq(body.op),
                s.two_pass.eq(is_two_pass), s.push.eq(instr.deps.push_prev),
                s.second.eq(0), s.strip.eq(0), s.odd.eq(0),
                s.at_row_end.eq(head.one_strip), s.one_strip.eq(head.one_strip),
                s.strips_m2.eq(body.strips - 2),
                s.left.eq(Mux(is_two_pass, body.rows << 1, body.rows)),
                s.left_is_0.eq(~is_two_pass & head.one_row),
                s.left_is_1.eq(Mux(is_two_pass, head.one_row, head.two_rows)),
                s.final.eq(head.one_strip & ~is_two_pass & head.one_row),
                s.next_second.eq(is_two_pass & head.one_row),
                s.acc_ptr.eq(body.acc_addr), s.aux_ptr.eq(body.aux_addr),
                s.pm_ptr.eq(body.param_addr), s.lanes_left.eq(row_len),
                # The first pass is P1(0) (or row 0): the next first-pass row is 1, the next
                # second-pass row 0.
                s.acc1.eq(body.acc_addr + 1), s.aux1.eq(body.aux_addr + 1),
                s.acc2.eq(body.acc_addr), s.aux2.eq(body.aux_addr),
            ]

    def _set(self, m, params):
        """A SET, a cycle after its accept: its value goes into the parameter register it names.
        Returns the :class:`_Staged` SET, whose ``setting`` the accept raises for one cycle.

        Timing: the instruction's index and value are registered every cycle, and the accept
        only raises ``setting``, so the enables of the parameter registers (which the epilogue
        reads across the chip) are decoded from registers, not from the queue's head and the
        accept. Nothing reads a parameter in the cycle after its SET but a STORE's accept, which
        takes ``row_len`` through :func:`_row_len`.
        """
        body = self.i_instr.payload.body.set
        setting = Signal(name="setting")
        index = Signal.like(body.index, name="set_index", reset_less=True)
        value = Signal.like(body.value, name="set_value", reset_less=True)
        m.d.sync += [setting.eq(0), index.eq(body.index), value.eq(body.value)]
        with m.If(setting):
            with m.Switch(index):
                for param in Param:
                    with m.Case(param):
                        target = getattr(params, param.name.lower())
                        m.d.sync += target.eq(value[:len(target)])
        return _Staged(setting, index, value)


class _Staged(NamedTuple):
    """A SET between its accept and its write: raised for that one cycle, its index and value."""
    setting: Signal
    index: Signal
    value: Signal


def _row_len(params, staged):
    """``params.row_len`` as it is after the :class:`_Staged` SET (if it writes it)."""
    writes = staged.setting & (staged.index == Param.ROW_LEN)
    return Mux(writes, staged.value[:len(params.row_len)], params.row_len)


#: The groups of the store unit's registers that a read's issue enables, each from its own copy
#: of `active` and `room`: the control (the count of beats in flight, the accept, the pushes),
#: the beat's tags, the walk's position and the memory pointers.
_ISSUE_GROUPS = ("ctl", "tags", "position", "pointers")


class _Drain:
    """The registers of the STORE being drained: its fields and where the walk is.

    The fields (``rows``, ``strips``, ``stride``, ``param_addr``, ``op``, ``two_pass``,
    ``push``) are constant while it runs. Position: the pass of the current row (``second``),
    its ``strip``, and the addresses of the next beat. Timing: nothing on the issue path does
    arithmetic; what it needs is kept in registers, updated a beat ahead:

    * ``at_row_end`` is strip == strips - 1;
    * the row passes left, this one among them, count down in ``left`` (loaded with the
      STORE's count of passes, with no subtraction after the queue's head), with
      ``left_is_0`` (this is the STORE's last row pass) and ``left_is_1`` (one more after
      this) kept beside it;
    * the interleaved order needs no row arithmetic: the next pass is a first pass of the next
      first-pass row or a second pass of the next second-pass row, whose pointers (``acc1``,
      ``aux1``; ``acc2``, ``aux2``) are kept ready; it is a second pass when this one's index
      in the order is odd (``odd``) or when it is the last pass;
    * ``lanes_left`` is row_len minus the column of this strip's lane 0;
    * ``final`` is ``at_row_end & left_is_0`` (this beat is the STORE's last) and
      ``next_second`` ``two_pass & (odd | left_is_1)`` (the next pass is a second pass), each
      loaded with what those will be, so the accept and the walk's enables read one register
      for each.
    """

    def __init__(self):
        # Copies of `active`, one for each group of registers that a read's issue enables; the
        # control's is the one the accept reads.
        self.actives = {g: Signal(name=f"active_{g}", attrs=KEEP) for g in _ISSUE_GROUPS}
        self.active = self.actives["ctl"]
        self.rows = Signal(FIELD_WIDTH, name="rows")
        self.strips = Signal(FIELD_WIDTH, name="strips")
        self.stride = Signal(FIELD_WIDTH, name="stride")
        self.param_addr = Signal(FIELD_WIDTH, name="param_addr")
        self.op = Signal(EpOp, name="op")
        self.two_pass = Signal(name="two_pass")
        self.push = Signal(name="push")

        self.second = Signal(name="second")
        self.strip = Signal(FIELD_WIDTH, name="strip")
        self.at_row_end = Signal(name="at_row_end")
        self.one_strip = Signal(name="one_strip")
        self.strips_m2 = Signal(FIELD_WIDTH, name="strips_m2")
        self.left = Signal(FIELD_WIDTH + 1, name="left")
        self.left_is_0 = Signal(name="left_is_0")
        self.left_is_1 = Signal(name="left_is_1")
        self.odd = Signal(name="odd")
        self.acc_ptr = Signal(FIELD_WIDTH, name="acc_ptr")
        self.aux_ptr = Signal(FIELD_WIDTH, name="aux_ptr")
        self.pm_ptr = Signal(FIELD_WIDTH, name="pm_ptr")
        self.acc1 = Signal(FIELD_WIDTH, name="acc1")
        self.aux1 = Signal(FIELD_WIDTH, name="aux1")
        self.acc2 = Signal(FIELD_WIDTH, name="acc2")
        self.aux2 = Signal(FIELD_WIDTH, name="aux2")
        self.lanes_left = Signal(signed(FIELD_WIDTH + 10), name="lanes_left")
        self.final = Signal(name="final")
        self.next_second = Signal(name="next_second")

    def set_active(self, m, value):
        """Set ``active`` and its copies to ``value`` in the next cycle."""
        m.d.sync += [reg.eq(value) for reg in self.actives.values()]
