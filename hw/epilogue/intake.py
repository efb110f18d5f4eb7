"""The epilogue's input: its queue of beats, which beats it takes, and their sub-beats into
stage IN.

Beats wait in a queue (:attr:`Intake.QUEUE_DEPTH` entries) whose head is *taken* into the
pipeline when the checks allow. A beat that will produce an output is only taken while a
*credit* is left (a row of the output FIFO not yet promised to a beat inside,
:class:`~.outlet.Outlet`). Row statistics live in two *slots*, taken in turn by the rows' first
passes and read in turn by their second passes. The pipeline never stalls, so a slot is final a
fixed number of cycles after its row's last first-pass beat was taken, and the intake holds
back a second-pass beat of that slot until it would reach BIND no earlier
(:attr:`~.schedule.Schedule.gap` cycles). In the documented pass order a second pass follows at
least one other pass of its STORE, and beats enter ``ratio`` cycles apart, so rows of
``ceil(gap / ratio) - 1`` strips or more (at most 10 for every preset) never wait; only a STORE
of one row does.

With ``ratio = cols / lanes`` > 1, a taken beat enters as ``ratio`` sub-beats of ``lanes``
columns, one a cycle, and the input is closed until the last has entered; only that sub-beat
carries ``last``, so the row statistics and the SOFTMAX running maximum advance a sub-beat at a
time (golden's ``softmax(..., cols=lanes)``).
"""

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..dsp import KEEP
from ..isa import EpOp, PmemWord, is_two_pass, pack
from ..queue import Queue
from .schedule import Schedule, beat_layout, ctl_layout, stage_signature

__all__ = ["Intake"]


class Intake(wiring.Component):
    """Queues beats, takes them, and registers their sub-beats into stage IN, with their tags.

    Beats wait in a :class:`~bertaccel.hw.queue.Queue` of :data:`QUEUE_DEPTH` entries; the head
    is *taken* when the module's checks allow. Timing: whether the head may be taken (``ready``)
    is a register, decided a cycle ahead from what the queue, the slots, the gap timers and
    the credits will hold next cycle (each entry's :data:`Flags` kept in registers), once for
    a take this cycle and once for none, so the take is an AND of two registers where it
    reaches the queue's and the store unit's control registers.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    i_beat : In(stream.Signature(beat_layout(cfg)))
        Into the queue: ``ready`` while it has room for one more.
    i_credit_next : In(ArrayLayout(ArrayLayout(1, 2), 2))
        An output FIFO row will not be promised next cycle, if the output's head does not
        leave this cycle ([0]) or leaves ([1]), and no beat that produces an output is taken
        this cycle ([.][0]) or one is ([.][1]) (:class:`~.outlet.Outlet`).
    i_popped : In(1)
        The output's head leaves this cycle.
    o_sub : Out(stage_signature(schedule, beat_layout(cfg, lanes)))
        Stage IN: the sub-beat, its valid bit and its tags.
    o_sub_op : Out(ArrayLayout(len(EpOp), lanes))
        Stage IN's op, one-hot (bit ``op``), in registers of each lane's own (a timing
        choice: the front's first stage chooses by op after its adds with no decode between).
    o_taken : Out(1)
        A beat leaves the queue this cycle.
    o_owe : Out(1)
        A beat is taken this cycle that will produce an output beat.
    o_busy_next : Out(1)
        The queue or stage IN will hold a beat next cycle, or a beat will be held for its
        sub-beats.
    """

    #: Beats the queue holds: the store unit's reads reach it five cycles after they are
    #: issued, so six keep them flowing one a cycle (``StoreUnit.FIFO_DEPTH``).
    QUEUE_DEPTH = 6

    def __init__(self, cfg):
        self._cfg = cfg
        self._sch = sch = Schedule.of(cfg)
        super().__init__({
            "i_beat": In(stream.Signature(beat_layout(cfg))),
            "i_credit_next": In(data.ArrayLayout(data.ArrayLayout(1, 2), 2)),
            "i_popped": In(1),
            "o_sub": Out(stage_signature(sch, beat_layout(cfg, sch.lanes))),
            "o_sub_op": Out(data.ArrayLayout(len(EpOp), sch.lanes)),
            "o_taken": Out(1),
            "o_owe": Out(1),
            "o_busy_next": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        Beat = beat_layout(self._cfg)
        # Timing: each entry carries what `ready` and the state registers decode from its tags
        # (`Flags`), decided as it is queued; they are the queue's fast bits, registers.
        m.submodules.queue = queue = Queue(width=Beat.size + Flags.size, depth=self.QUEUE_DEPTH,
                                           fast=slice(Beat.size, Beat.size + Flags.size))
        write = self.i_beat.valid & queue.w_rdy
        m.d.comb += [queue.w_data.eq(Cat(self.i_beat.payload, _flags(self.i_beat.payload))),
                     queue.w_en.eq(self.i_beat.valid), self.i_beat.ready.eq(queue.w_rdy)]
        beat = Signal(Beat)
        flags = Signal(Flags)
        m.d.comb += [beat.eq(queue.r_data[:Beat.size]), flags.eq(queue.r_data[Beat.size:])]
        ready = Signal(init=1)
        accept = Signal()
        m.d.comb += [accept.eq(queue.r_rdy & ready), queue.r_en.eq(ready),
                     self.o_taken.eq(accept), self.o_owe.eq(accept & flags.second)]

        state = self._state()
        for name, value in self._next(state, flags, accept).items():
            m.d.sync += state[name].eq(value)
        # `ready` next cycle, for each of a take now or none and a pop of the output or none:
        # the state's next values, the flags of the queue's next head and the credit left.
        # Timing: the output's pop picks between two decisions (`ready_after`), as it comes
        # from outside the core.
        ready_after = []
        for popped in (0, 1):
            ready_next = []
            for taken in (0, 1):
                after = self._next(state, flags, Const(taken))
                waited = self._waited(state, flags, Const(taken))
                head = data.View(Flags, queue.r_fast_next[taken])
                credit = self.i_credit_next[popped][flags.second & taken]
                ready_next.append(self._ready(after, waited, head, credit))
            ready_after.append(Mux(accept, ready_next[1], ready_next[0]))
        m.d.sync += ready.eq(Mux(self.i_popped, ready_after[1], ready_after[0]))

        slot = Mux(flags.second, state["p2_slot"], state["p1_slot"])
        busy_next = self._sequence(m, beat, accept, state["phase"], slot)
        m.d.comb += self.o_busy_next.eq(busy_next | write | (queue.level != 0))
        return m

    def _state(self):
        """The registers ``ready`` is decided from, by name: the slot of the next first pass
        and of the next second pass; per slot, the cycles its second pass must still wait
        (``wait``) and whether that is at most one (``soon``, a register of its own, a timing
        choice as the outlet's ``owed``); with ``ratio > 1``, ``phase``: the sub-beat entering
        next (0: none held, the input is open)."""
        sch = self._sch
        wait_shape = range(max(sch.gap.values()) + 1)
        state = {"p1_slot": Signal(name="p1_slot"), "p2_slot": Signal(name="p2_slot")}
        for s in range(2):
            state[f"wait{s}"] = Signal(wait_shape, name=f"wait{s}")
            state[f"soon{s}"] = Signal(init=1, name=f"soon{s}")
        state["phase"] = Signal(range(sch.ratio), name="phase") if sch.ratio > 1 else Const(0, 1)
        return state

    def _gap(self, flags):
        """The cycles a second pass waits after its row's last first-pass beat, less one."""
        gap = self._sch.gap
        return Mux(flags.softmax, gap[EpOp.SOFTMAX] - 1, gap[EpOp.LAYERNORM] - 1)

    def _starts(self, state, flags, taken, s):
        """Slot ``s`` starts its count: the beat with ``flags``, ``taken``, ends its row's
        first pass in that slot."""
        return taken & flags.row_done & (state["p1_slot"] == s)

    def _next(self, state, flags, taken):
        """The next values of ``state``'s registers when the beat with ``flags`` is ``taken``
        (a value) or not.

        A row's last first-pass beat starts its slot's count of the cycles its second pass
        must wait; a row's last beat of either pass moves that pass on to the other slot. With
        ``ratio > 1`` a taken beat enters as sub-beats, one a cycle, while ``phase`` counts."""
        sch = self._sch
        gap = self._gap(flags)
        after = {"p1_slot": state["p1_slot"] ^ (taken & flags.row_done),
                 "p2_slot": state["p2_slot"] ^ (taken & flags.row_end2)}
        for s in range(2):
            wait = state[f"wait{s}"]
            starts = self._starts(state, flags, taken, s)
            after[f"wait{s}"] = Mux(starts, gap, Mux(wait != 0, wait - 1, wait))
            after[f"soon{s}"] = Mux(starts, gap <= 1, wait <= 2)
        if sch.ratio > 1:
            phase = state["phase"]
            # phase + 1 wraps to 0 after ratio - 1 (a power of two)
            after["phase"] = Mux(phase == 0, taken, (phase + 1)[:len(phase)])
        return after

    def _waited(self, state, flags, taken):
        """Per slot, whether its second pass waits no more next cycle when the beat with
        ``flags`` is ``taken`` or not: ``wait`` will be 0."""
        return [Mux(self._starts(state, flags, taken, s), self._gap(flags) == 0,
                    state[f"soon{s}"]) for s in range(2)]

    def _ready(self, after, waited, head, credit):
        """Whether a beat with ``head``'s flags may be taken, given the state's next values
        ``after``, ``waited`` (:meth:`_waited`) and ``credit``: the input is open, a beat that
        produces an output has a credit, and a second pass of a two-pass op finds its slot's
        statistics final."""
        stats_ok = ~head.stats | Mux(after["p2_slot"], waited[1], waited[0])
        credit_ok = ~head.second | credit
        phase_ok = after["phase"] == 0 if "phase" in after else 1
        return stats_ok & credit_ok & phase_ok

    def _sequence(self, m, beat, accept, phase, slot):
        """Stage IN, and with ``ratio > 1`` the held beat and its sub-beats (``phase`` is
        :meth:`_state`'s). Returns whether stage IN will be valid next cycle or a beat held."""
        cfg, sch = self._cfg, self._sch
        # Stage IN: the registers behind `o_sub`.
        stage_in = (Signal(name="s0_valid"),
                    Signal(ctl_layout(sch), name="s0_ctl", reset_less=True),
                    Signal(beat_layout(cfg, sch.lanes), name="inb", reset_less=True))
        ops = [Signal(len(EpOp), name=f"s0_op{i}", reset_less=True, attrs=KEEP)
               for i in range(sch.lanes)]
        stage_in += (ops,)
        m.d.comb += [self.o_sub.valid.eq(stage_in[0]), self.o_sub.payload.ctl.eq(stage_in[1]),
                     self.o_sub.payload.lanes.eq(stage_in[2])]
        m.d.comb += [self.o_sub_op[i].eq(op) for i, op in enumerate(ops)]
        # Timing: the beat and its tags are registered every cycle, whether taken or not
        # (`valid` says which): `accept` drives no enable of these hundreds of flip-flops.
        ratio = sch.ratio
        if ratio == 1:
            self._enter(m, stage_in, beat, 0, is_valid=accept, last=beat.last, slot=slot)
            return accept
        # Sub-beat 0 enters from the queue's head as a whole beat would; the beat is copied
        # into `hold` whenever the input is open (not on `accept`, for the same reason), and
        # sub-beats 1 .. ratio - 1 enter from there in the next cycles.
        hold = Signal(beat_layout(cfg), reset_less=True)
        hold_slot = Signal(reset_less=True)
        with m.If(phase == 0):
            m.d.sync += [hold.eq(beat), hold_slot.eq(slot)]
            self._enter(m, stage_in, beat, 0, is_valid=accept, last=0, slot=slot)
        with m.Else():
            self._enter(m, stage_in, hold, phase, is_valid=1,
                        last=hold.last & (phase == ratio - 1), slot=hold_slot)
        return accept | (phase != 0)

    def _enter(self, m, stage_in, src, j, *, is_valid, last, slot):
        """Register sub-beat ``j`` (lanes ``j * lanes`` on) of the full beat ``src`` into
        ``stage_in`` (valid, tags, lanes, the op one-hot per lane)."""
        cfg, lanes = self._cfg, self._sch.lanes
        valid, ctl, inb, ops = stage_in
        m.d.sync += [op.eq(Cat(src.op == value for value in EpOp)) for op in ops]

        def part(array, width):
            return Value.cast(array).word_select(j, lanes * width)
        m.d.sync += [
            valid.eq(is_valid),
            inb.eq(pack(inb.shape(), acc=part(src.acc, cfg.acc_width),
                        pm=part(src.pm, PmemWord.size), res=part(src.res, cfg.in_width),
                        op=src.op, second=src.second, last=src.last,
                        lane_valid=part(src.lane_valid, 1))),
            ctl.op.eq(src.op), ctl.second.eq(src.second), ctl.last.eq(last),
            ctl.lane_valid.eq(part(src.lane_valid, 1)), ctl.slot.eq(slot),
        ]
        if self._sch.ratio > 1:
            m.d.sync += ctl.sub.eq(j)


#: What the intake decodes from a queued beat's tags: it produces an output beat (``second``),
#: is a second pass of a two-pass op (``stats``), the last beat of a two-pass row's first pass
#: (``row_done``) or second pass (``row_end2``), a SOFTMAX beat (``softmax``).
Flags = data.StructLayout({"second": 1, "stats": 1, "row_done": 1, "row_end2": 1, "softmax": 1})


def _flags(beat):
    """The :data:`Flags` of ``beat``."""
    two_pass = is_two_pass(beat.op)
    return pack(Flags, second=beat.second, stats=two_pass & beat.second,
                row_done=two_pass & beat.last & ~beat.second,
                row_end2=two_pass & beat.last & beat.second, softmax=beat.op == EpOp.SOFTMAX)
