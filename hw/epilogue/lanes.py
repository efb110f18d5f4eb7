"""The registers of a run of pipeline stages, as every part of the epilogue builds them.

Stage ``k`` holds the valid bit and the tags (:func:`~.schedule.ctl_layout`) of the sub-beat in
it, copied from stage ``k - 1`` every cycle, and a struct of registers per lane. A new stage
copies the lane fields it shares (by name) with the stage before; the op logic then overrides
what it computes. Every register is written every cycle, whether the stage is valid or not, so
no enable depends on ``valid``.
"""

from amaranth import Cat, Signal
from amaranth.lib import data

from ..dsp import KEEP
from .schedule import WAIT_LANE, Carry, ctl_layout

__all__ = ["Stages"]


class Stages:
    """Stages ``first`` on, built inside one part's ``elaborate``.

    Parameters
    ----------
    m : Module
    sch : Schedule
    src : stream.Interface
        The part's input (:func:`~.schedule.stage_signature`): stage ``first - 1``.
    first : int
    copy : bool
        Whether stage ``first`` copies the fields it shares with ``src``'s lanes (False when
        those are not lane structs, as for the sub-beat entering stage IN).

    Attributes
    ----------
    valid, ctl, lanes : dict
        By stage number, from ``first - 1``: the valid bit, the tags, the lane registers
        (an array of structs, one per lane).
    """

    def __init__(self, m, sch, src, first, *, copy=True):
        self._m, self._sch = m, sch
        self.valid = {first - 1: src.valid}
        self.ctl = {first - 1: src.payload.ctl}
        self.lanes = {first - 1: src.payload.lanes if copy else None}

    def __call__(self, k, **fields):
        """Stage ``k`` (the next one), with lane ``fields`` (name: shape) and ``carry``."""
        m, lanes = self._m, self._sch.lanes
        assert k - 1 in self.lanes and k not in self.lanes, k
        self.tags(k)
        fields.setdefault("carry", Carry)
        regs = Signal(data.ArrayLayout(data.StructLayout(fields), lanes), name=f"s{k}",
                      reset_less=True)
        prev = self.lanes[k - 1]
        if prev is not None:
            members = dict(prev.shape().elem_shape.members)
            shared = [name for name in fields if name in members]
            for i in range(lanes):
                for name in shared:
                    m.d.sync += getattr(regs[i], name).eq(getattr(prev[i], name))
        self.lanes[k] = regs
        return regs

    def tags(self, k):
        """The valid bit and tags of stages up to ``k`` (for logic beside the lanes that reads
        a stage the lanes of this part do not reach); ``(valid, ctl)`` of stage ``k``."""
        while k not in self.valid:
            j = max(self.valid) + 1
            self.valid[j] = Signal(name=f"s{j}_valid")
            self.ctl[j] = Signal(ctl_layout(self._sch), name=f"s{j}_ctl", reset_less=True)
            self._m.d.sync += [self.valid[j].eq(self.valid[j - 1]),
                               self.ctl[j].eq(self.ctl[j - 1])]
        return self.valid[k], self.ctl[k]

    def decoded(self, k, decode, shape=1, *, name):
        """Per lane, a register that holds ``decode(ctl)`` of the sub-beat in stage ``k``:
        loaded from stage ``k - 1``'s tags, a copy a lane kept apart (hw/dsp.py KEEP), so that
        no one net of the decode reaches every lane's registers (a timing choice)."""
        self.tags(k)
        value = decode(self.ctl[k - 1])
        regs = [Signal(shape, name=f"{name}{i}", reset_less=True, attrs=KEEP)
                for i in range(self._sch.lanes)]
        self._m.d.sync += [reg.eq(value) for reg in regs]
        return regs

    def wait(self, stop):
        """Stages from the next one to ``stop - 1``, where the lanes only wait."""
        for k in range(max(self.lanes) + 1, stop):
            self(k, **WAIT_LANE)

    def first_pass(self, k, op):
        """Stage ``k`` holds a first-pass sub-beat of ``op``."""
        return self.valid[k] & (self.ctl[k].op == op) & ~self.ctl[k].second

    def busy_next(self):
        """A sub-beat will be in one of these lane stages next cycle: one is in the input or in
        a stage before the last."""
        return Cat(*(self.valid[k] for k in sorted(self.lanes)[:-1])).any()

    def drive(self, o):
        """Drive the stream ``o`` from the last lane stage."""
        k = max(self.lanes)
        self._m.d.comb += [o.valid.eq(self.valid[k]), o.payload.ctl.eq(self.ctl[k]),
                           o.payload.lanes.eq(self.lanes[k])]
