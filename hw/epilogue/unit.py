"""The epilogue: requantisation and the nonlinear ops on the accumulator drain.

The store unit reads accumulator rows (with their parameter-memory row and, for LayerNorm, the
residual row) and sends them here as *beats*, one strip of ``cols`` columns of one output row each.
The arithmetic of every op is defined by :mod:`bertaccel.golden.intops`; this unit must equal it
bit for bit.

Beats arrive in the order the store unit schedules them. Single-pass ops (RAW, REQUANT, GELU)
send each row once, with ``second`` set. Two-pass ops (SOFTMAX, LAYERNORM) send each row twice:
first with ``second`` clear (statistics only, no output), then with ``second`` set (output).
The passes of consecutive rows interleave as P1(0), P1(1), P2(0), P1(2), P2(1), ..., P2(R-1),
so at most two rows have statistics outstanding, and a row's second pass may have to wait until
its statistics are final (it then waits in the unit's queue, which ``i_beat`` fills, and
``o_taken`` says when a beat leaves it). ``last`` marks the last beat of a row in either pass.
``lane_valid`` marks the columns before ``row_len``.

The parameters (``params``) are written by SET instructions, which the store unit only lets
through when this unit is idle, so they are constant while beats flow.

Lanes
-----
The pipeline has ``cfg.ep_lanes`` lanes. When that is fewer than ``cols`` (``ratio =
cols / lanes`` > 1), an accepted beat enters as ``ratio`` sub-beats of ``lanes`` columns, one a
cycle (:mod:`~.intake`), and the output collects a beat's sub-beats (:mod:`~.outlet`). Each
lane costs its registers, its two tables (PHI, EXP2) and nine MULT18X18D, which is why an FPGA
build may want fewer lanes than columns.

Implementation
--------------
One pipeline of :attr:`Schedule.depth` stages serves every op, with the same latency for all,
so beats leave in the order they came, and it never stalls. Every stage is about one multiply,
or one add with a comparison or a mux beside it. Every product is cut into *tiles* of at most
17 x 18 bits (one MULT18X18D each) with registered operands and a registered product; adding
the tiles takes the next stage. Operands and shift amounts that are the same for the whole row
are still copied into every lane's registers, so no register drives the DSPs of all lanes, and
every table's block RAM output goes straight into a register (its clock-to-output is most of a
150 MHz cycle on ECP5).

The pipeline is built by these parts, in the order a sub-beat meets them (each module
describes its stages, :mod:`~.schedule` numbers them and :mod:`~.lanes` builds their
registers):

* :class:`~.intake.Intake`: the queue of beats, the credit check, the statistics gap, the
  slots, stage IN;
* :class:`~.front.Front`: stages ADD to PRE, every op up to its row statistics;
* :class:`~.stats.RowStats`: the trees over the lanes, SOFTMAX's running maximum and the
  LAYERNORM row sums (to ACC);
* :class:`~.exponent.Exponent`: SOFTMAX's exponentials (U to E) and their rescaled row sum;
* :class:`~.finalize.Finalize`: a row's sums into its statistics slot;
* :class:`~.back.Back`: the second passes' multiply and every op's last one (E + 1 to the end);
* :class:`~.outlet.Outlet`: the output FIFO and its credits.
"""

from amaranth import Module, Signal, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import ParamsLayout
from .back import Back
from .exponent import Exponent
from .finalize import Finalize
from .front import Front
from .intake import Intake
from .outlet import Outlet
from .schedule import Schedule, beat_layout
from .stats import RowStats

__all__ = ["Epilogue", "ports"]


def ports(cfg):
    """The epilogue's ports for ``cfg`` (its Members below): what the store unit connects to,
    and what a stand-in for the epilogue must have."""
    return {
        "i_beat": In(stream.Signature(beat_layout(cfg))),
        "o_data": Out(stream.Signature(data.ArrayLayout(signed(cfg.acc_width), cfg.cols))),
        "params": In(ParamsLayout),
        "o_taken": Out(1),
        "o_busy": Out(1),
    }


class Epilogue(wiring.Component):
    """Applies the op of each beat and sends output beats in order.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    i_beat : In(stream.Signature(beat_layout(cfg)))
        Into the intake's queue (``ready``: it has room for one more).
    o_data : Out(stream.Signature(ArrayLayout(signed(acc_width), cols)))
        RAW beats carry the accumulator values; the int8 ops carry int8 results sign-extended.
    params : In(ParamsLayout)
    o_taken : Out(1)
        A beat leaves the queue for the pipeline this cycle.
    o_busy : Out(1)
        A beat is inside the unit, its queue included.
    schedule : Schedule
        Stage numbers, depth, FIFO depth and the statistics gap (see the module docstring).
    """

    def __init__(self, cfg):
        self._cfg = cfg
        self.schedule = Schedule.of(cfg)
        super().__init__(ports(cfg))

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        m.submodules.intake = intake = Intake(cfg)
        m.submodules.front = front = Front(cfg)
        m.submodules.stats = stats = RowStats(cfg)
        m.submodules.exponent = exponent = Exponent(cfg)
        m.submodules.finalize = finalize = Finalize(cfg)
        m.submodules.back = back = Back(cfg)
        m.submodules.outlet = outlet = Outlet(cfg)

        wiring.connect(m, wiring.flipped(self.i_beat), intake.i_beat)
        wiring.connect(m, intake.o_sub, front.i_sub)
        wiring.connect(m, front.o_lanes, stats.i_lanes)
        wiring.connect(m, stats.o_lanes, exponent.i_lanes)
        wiring.connect(m, stats.o_sums, finalize.i_ln)
        wiring.connect(m, exponent.o_sums, finalize.i_smx)
        wiring.connect(m, exponent.o_lanes, back.i_lanes)
        wiring.connect(m, back.o_row, outlet.i_row)
        wiring.connect(m, outlet.o_data, wiring.flipped(self.o_data))
        m.d.comb += [
            exponent.i_dm.eq(stats.o_dm),
            back.i_slots.eq(finalize.o_slots),
            back.i_bind.eq(exponent.o_bind),
            intake.i_credit_next.eq(outlet.o_credit_next),
            intake.i_popped.eq(outlet.o_popped),
            front.i_sub_op.eq(intake.o_sub_op),
            outlet.i_owe.eq(intake.o_owe),
            self.o_taken.eq(intake.o_taken),
        ]
        for part in (front, finalize, back):
            m.d.comb += part.params.eq(self.params)

        # Timing: `o_busy` (a beat queued, any stage valid, a beat held or an output beat owed)
        # is a register, loaded with what the parts will hold next cycle, so the OR of the
        # stage valid bits does not reach the store unit's enables in the cycle it is formed.
        busy = Signal()
        m.d.sync += busy.eq(intake.o_busy_next | front.o_busy_next | stats.o_busy_next
                            | exponent.o_busy_next | back.o_busy_next | outlet.o_busy_next)
        m.d.comb += self.o_busy.eq(busy)
        return m
