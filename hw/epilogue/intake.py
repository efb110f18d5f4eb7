"""The epilogue's input: which beats it accepts, and their sub-beats into stage IN.

A beat that will produce an output is only accepted while a *credit* is left (a row of the
output FIFO not yet promised to a beat inside, :class:`~.outlet.Outlet`). Row statistics live
in two *slots*, taken in turn by the rows' first passes and read in turn by their second
passes. The pipeline never stalls, so a slot is final a fixed number of cycles after its row's
last first-pass beat was accepted, and the input holds back a second-pass beat of that slot
until it would reach BIND no earlier (:attr:`~.schedule.Schedule.gap` cycles). In the
documented pass order a second pass follows at least one other pass of its STORE, and beats
enter ``ratio`` cycles apart, so rows of ``ceil(gap / ratio) - 1`` strips or more (at most 7
for every preset) never wait; only a STORE of one row does.

With ``ratio = cols / lanes`` > 1, an accepted beat enters as ``ratio`` sub-beats of ``lanes``
columns, one a cycle, and the input is closed until the last has entered; only that sub-beat
carries ``last``, so the row statistics and the SOFTMAX running maximum advance a sub-beat at a
time (golden's ``softmax(..., cols=lanes)``).
"""

from amaranth import Cat, Const, Module, Mux, Signal, Value
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import EpOp, PmemWord
from .schedule import Schedule, beat_layout, ctl_layout, stage_signature

__all__ = ["Intake"]


class Intake(wiring.Component):
    """Accepts beats and registers their sub-beats into stage IN, with their tags.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    i_beat : In(stream.Signature(beat_layout(cfg)))
    i_credit : In(1)
        An output FIFO row is not yet promised (a second-pass or single-pass beat may enter).
    o_sub : Out(stage_signature(schedule, beat_layout(cfg, lanes)))
        Stage IN: the sub-beat, its valid bit and its tags.
    o_owe : Out(1)
        A beat is accepted this cycle that will produce an output beat.
    o_busy_next : Out(1)
        Stage IN will hold a sub-beat next cycle, or a beat will be held for its sub-beats.
    """

    def __init__(self, cfg):
        self._cfg = cfg
        self._sch = sch = Schedule.of(cfg)
        super().__init__({
            "i_beat": In(stream.Signature(beat_layout(cfg))),
            "i_credit": In(1),
            "o_sub": Out(stage_signature(sch, beat_layout(cfg, sch.lanes))),
            "o_owe": Out(1),
            "o_busy_next": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        beat = self.i_beat.payload
        accept = self.i_beat.valid & self.i_beat.ready
        two_pass = (beat.op == EpOp.SOFTMAX) | (beat.op == EpOp.LAYERNORM)
        p1_slot = Signal()       # slot of the next first pass
        p2_slot = Signal()       # slot of the next second pass
        waited = self._gap_timers(m, p1_slot, accept & two_pass & beat.last & ~beat.second)
        stats_ok = ~(two_pass & beat.second) | Mux(p2_slot, waited[1], waited[0])
        credit_ok = ~beat.second | self.i_credit
        # With ratio > 1 a beat is held while its sub-beats enter, one a cycle: `phase` is the
        # sub-beat entering next (0: none held, the input is open).
        ratio = self._sch.ratio
        phase = Signal(range(ratio)) if ratio > 1 else Const(0, 1)
        m.d.comb += [self.i_beat.ready.eq(stats_ok & credit_ok & (phase == 0)),
                     self.o_owe.eq(accept & beat.second)]
        with m.If(accept & two_pass & beat.last):
            with m.If(beat.second):
                m.d.sync += p2_slot.eq(~p2_slot)
            with m.Else():
                m.d.sync += p1_slot.eq(~p1_slot)
        self._sequence(m, accept, phase, Mux(beat.second, p2_slot, p1_slot))
        return m

    def _gap_timers(self, m, p1_slot, row_done):
        """Per slot, a count of the cycles its second pass must still wait, started when a
        row's last first-pass beat is accepted (``row_done``); returns the ``waited`` flags
        (the count is zero)."""
        sch, op = self._sch, self.i_beat.payload.op
        wait = [Signal(range(max(sch.gap.values()) + 1), name=f"wait{s}") for s in range(2)]
        # wait[s] == 0, in a register of its own (a timing choice, as the outlet's `owed`)
        waited = [Signal(init=1, name=f"waited{s}") for s in range(2)]
        for counter, zero in zip(wait, waited):
            with m.If(counter != 0):
                m.d.sync += [counter.eq(counter - 1), zero.eq(counter == 1)]
        with m.If(row_done):
            gap = Mux(op == EpOp.SOFTMAX, sch.gap[EpOp.SOFTMAX] - 1, sch.gap[EpOp.LAYERNORM] - 1)
            with m.If(p1_slot):
                m.d.sync += [wait[1].eq(gap), waited[1].eq(gap == 0)]
            with m.Else():
                m.d.sync += [wait[0].eq(gap), waited[0].eq(gap == 0)]
        return waited

    def _sequence(self, m, accept, phase, slot):
        """Stage IN, and with ``ratio > 1`` the held beat and its sub-beats."""
        cfg, sch, beat = self._cfg, self._sch, self.i_beat.payload
        # Stage IN: the registers behind `o_sub`.
        stage_in = (Signal(name="s0_valid"),
                    Signal(ctl_layout(sch), name="s0_ctl", reset_less=True),
                    Signal(beat_layout(cfg, sch.lanes), name="inb", reset_less=True))
        m.d.comb += [self.o_sub.valid.eq(stage_in[0]), self.o_sub.payload.ctl.eq(stage_in[1]),
                     self.o_sub.payload.lanes.eq(stage_in[2])]
        # Timing: the beat and its tags are registered every cycle, whether accepted or not
        # (`valid` says which): `accept` drives no enable of these hundreds of flip-flops.
        ratio = sch.ratio
        if ratio == 1:
            self._enter(m, stage_in, beat, 0, is_valid=accept, last=beat.last, slot=slot)
            m.d.comb += self.o_busy_next.eq(accept)
            return
        # Sub-beat 0 enters from the input as a whole beat would; the beat is copied into
        # `hold` whenever the input is open (not on `accept`, for the same reason), and
        # sub-beats 1 .. ratio - 1 enter from there in the next cycles.
        hold = Signal(beat_layout(cfg), reset_less=True)
        hold_slot = Signal(reset_less=True)
        with m.If(phase == 0):
            m.d.sync += [hold.eq(beat), hold_slot.eq(slot)]
            self._enter(m, stage_in, beat, 0, is_valid=accept, last=0, slot=slot)
            with m.If(accept):
                m.d.sync += phase.eq(1)
        with m.Else():
            self._enter(m, stage_in, hold, phase, is_valid=1,
                        last=hold.last & (phase == ratio - 1), slot=hold_slot)
            m.d.sync += phase.eq(phase + 1)   # wraps to 0 after ratio - 1 (a power of two)
        # Stage IN will be valid next cycle, or a beat will be held.
        m.d.comb += self.o_busy_next.eq(accept | (phase != 0)
                                        | Mux(phase == 0, accept, phase != ratio - 1))

    def _enter(self, m, stage_in, src, j, *, is_valid, last, slot):
        """Register sub-beat ``j`` (lanes ``j * lanes`` on) of the full beat ``src`` into
        ``stage_in`` (valid, tags, lanes)."""
        cfg, lanes = self._cfg, self._sch.lanes
        valid, ctl, inb = stage_in

        def part(array, width):
            return Value.cast(array).word_select(j, lanes * width)
        m.d.sync += [
            valid.eq(is_valid),
            inb.eq(Cat(part(src.acc, cfg.acc_width), part(src.pm, PmemWord.size),
                       part(src.res, cfg.in_width), src.op, src.second, src.last,
                       part(src.lane_valid, 1))),
            ctl.op.eq(src.op), ctl.second.eq(src.second), ctl.last.eq(last),
            ctl.lane_valid.eq(part(src.lane_valid, 1)), ctl.slot.eq(slot),
        ]
        if self._sch.ratio > 1:
            m.d.sync += ctl.sub.eq(j)
