"""Reference models of the blocks, for any test: each advances as the block's registers do.

:class:`PeModel` is a processing element (``hw/pe.py``) clock edge by clock edge;
:class:`IntakeModel` is what the epilogue's intake (``hw/epilogue/intake.py``) must do with its
queue, its takes and stage IN, and :func:`sub_beat` what stage IN holds of a beat.
"""

from bertaccel.hw.epilogue import Schedule
from bertaccel.hw.epilogue.intake import Intake
from bertaccel.hw.isa import TWO_PASS
from bertaccel.hw.queue import Queue

__all__ = ["PeModel", "IntakeModel", "sub_beat"]


def _wrap(value, width):
    value &= (1 << width) - 1
    return value - (1 << width) if value >> (width - 1) else value


class PeModel:
    """The PE's registers, advanced one clock edge at a time."""

    def __init__(self, acc_width, *, top=False):
        self.acc_width = acc_width
        self.top = top
        self.w = [0, 0]
        self.weight = 0             # the weight of the next operand's bank
        self.a = self.b = 0         # the multiplier's operand registers
        self.product_dsp = self.product = 0
        self.o_a = self.o_bank = self.psum = 0
        self.o_w = self.o_w_en = self.o_w_bank = 0

    @property
    def o_psum(self):
        return self.product if self.top else self.psum

    def clock(self, i_a, i_bank, i_psum, i_w, i_w_en, i_w_bank):
        # Every register takes its new value from the old state at the same edge.
        if not self.top:
            self.psum = _wrap(i_psum + self.product, self.acc_width)
        self.product = self.product_dsp
        self.product_dsp = self.a * self.b
        self.a, self.b = i_a, self.weight
        self.weight = i_w if i_w_en and i_w_bank == i_bank else self.w[i_bank]
        self.o_a, self.o_bank = i_a, i_bank
        self.o_w, self.o_w_en, self.o_w_bank = i_w, i_w_en, i_w_bank
        if i_w_en:
            self.w[i_w_bank] = i_w


def sub_beat(cfg, beat, j, slot):
    """Sub-beat ``j`` of ``beat`` as stage IN holds it: ``{"ctl": ..., "lanes": ...}``."""
    sch, lanes = Schedule.of(cfg), cfg.ep_lanes
    part = slice(j * lanes, (j + 1) * lanes)
    lane_valid = (beat["lane_valid"] >> (j * lanes)) & ((1 << lanes) - 1)
    ctl = {"op": beat["op"], "second": beat["second"],
           "last": beat["last"] & (j == sch.ratio - 1), "lane_valid": lane_valid, "slot": slot}
    if sch.ratio > 1:
        ctl["sub"] = j
    return {"ctl": ctl, "lanes": {**beat, "acc": beat["acc"][part], "pm": beat["pm"][part],
                                  "res": beat["res"][part], "lane_valid": lane_valid}}


class IntakeModel:
    """What the intake must do. Its queue shows a beat written in cycle W at the head from
    cycle W + ``Queue.LATENCY``, and the next one the cycle after a take at the earliest, and
    has room while fewer than ``QUEUE_DEPTH - 1`` beats wait behind the head. The head is
    taken while the input is open (``ratio`` cycles after the last take), a beat that will
    produce an output only on credit, and a second pass of a two-pass op no earlier than
    ``gap`` cycles after its slot's last first pass; slots are taken in turn by first passes
    and by second passes."""

    def __init__(self, cfg):
        self.cfg, self.sch = cfg, Schedule.of(cfg)
        self.queued = []                         # (beat, cycle written), oldest first
        self.last_take = -2                      # cycle of the last take
        self.slot = {False: 0, True: 0}          # next slot of first / second passes
        self.earliest = [0, 0]                   # first cycle a second pass may read a slot
        self.open = 0                            # first cycle the input is open
        self.stage_in = {}                       # cycle -> sub-beat in stage IN

    def head(self, t):
        """The beat at the queue's head in cycle ``t``, or None."""
        visible = self.queued and self.queued[0][1] + Queue.LATENCY
        if self.queued and max(visible, self.last_take + 1) <= t:
            return self.queued[0][0]
        return None

    def room(self, t):
        behind = len(self.queued) - (self.head(t) is not None)
        return behind < Intake.QUEUE_DEPTH - 1

    def waits(self, t, beat):
        """``beat`` is a second pass whose slot is not final yet."""
        return (beat["op"] in TWO_PASS and bool(beat["second"])
                and t < self.earliest[self.slot[True]])

    def takes(self, t, credit):
        """Whether the head (there is one) is taken in cycle ``t``."""
        beat = self.head(t)
        return t >= self.open and (not beat["second"] or credit) and not self.waits(t, beat)

    def take(self, t):
        beat, _ = self.queued.pop(0)
        second, two_pass = bool(beat["second"]), beat["op"] in TWO_PASS
        slot = self.slot[second]
        for j in range(self.sch.ratio):
            self.stage_in[t + 1 + j] = sub_beat(self.cfg, beat, j, slot)
        if two_pass and beat["last"]:
            if not second:
                self.earliest[slot] = t + self.sch.gap[beat["op"]]
            self.slot[second] ^= 1
        self.open = t + self.sch.ratio
        self.last_take = t
        return beat
