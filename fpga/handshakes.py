"""The epilogue's handshakes without its arithmetic: a stand-in for the FPGA flow's fast check.

The store unit's timing is set by handshakes: the store queue's head into the unit's accept,
the epilogue's queue of beats into its ``ready``, the epilogue's credits and busy flag back
into the unit's decisions. Those live in the store unit and in the epilogue's
:class:`~bertaccel.hw.epilogue.intake.Intake` and :class:`~bertaccel.hw.epilogue.outlet.Outlet`;
the epilogue's arithmetic between them is a pipeline that never stalls, with no handshake.
:class:`EpilogueHandshakes` keeps the intake and the outlet and puts a plain delay line between
them, so ``SynthTop(cfg, "handshakes")`` places and routes in about a minute on the 2x2 preset
(``verif/block/test_timing.py``), where the store unit with its real epilogue takes several.
"""

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring

from ..hw.epilogue.intake import Intake
from ..hw.epilogue.outlet import Outlet
from ..hw.epilogue.schedule import Schedule, beat_layout, ctl_layout, row_layout
from ..hw.epilogue.unit import ports
from ..hw.pipeline import delay, delay_line

__all__ = ["EpilogueHandshakes"]


class EpilogueHandshakes(wiring.Component):
    """The ports of :class:`~bertaccel.hw.epilogue.Epilogue` with its intake and outlet, and
    a delay line of :attr:`Schedule.depth` registers for the pipeline between them.

    Only for measuring timing: the output is the accumulator values of each second-pass
    sub-beat, delayed, not the epilogue's results; the parameters are unused.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    i_beat : In(stream.Signature(beat_layout(cfg)))
    o_data : Out(stream.Signature(ArrayLayout(signed(acc_width), cols)))
    params : In(ParamsLayout)
    o_taken : Out(1)
    o_busy : Out(1)
    """

    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__(ports(cfg))

    def elaborate(self, platform):
        cfg = self._cfg
        sch = Schedule.of(cfg)
        m = Module()
        m.submodules.intake = intake = Intake(cfg)
        m.submodules.outlet = outlet = Outlet(cfg)
        wiring.connect(m, wiring.flipped(self.i_beat), intake.i_beat)
        wiring.connect(m, outlet.o_data, wiring.flipped(self.o_data))
        m.d.comb += [intake.i_credit_next.eq(outlet.o_credit_next), outlet.i_owe.eq(intake.o_owe),
                     intake.i_popped.eq(outlet.o_popped), self.o_taken.eq(intake.o_taken)]

        sub = intake.o_sub
        valid = delay_line(m, sub.valid, sch.depth, name="valid", reset_less=False)
        ctl = Signal(ctl_layout(sch), name="ctl")
        row = Signal(row_layout(cfg, sch.lanes), name="row")
        m.d.comb += [
            ctl.eq(sub.payload.ctl), row.eq(sub.payload.lanes.acc),
            outlet.i_row.valid.eq(valid[-1]),
            outlet.i_row.payload.ctl.eq(delay(m, ctl, sch.depth, name="ctl")),
            outlet.i_row.payload.lanes.eq(delay(m, row, sch.depth, name="row")),
        ]
        # Busy as the epilogue's: a register loaded with whether anything will be inside.
        busy = Signal()
        m.d.sync += busy.eq(intake.o_busy_next | outlet.o_busy_next
                            | Cat(valid[:-1]).any())
        m.d.comb += self.o_busy.eq(busy)
        return m
