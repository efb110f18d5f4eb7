"""The epilogue's output: the FIFO at the end of the pipeline, and the credits for its rows.

The pipeline never stalls: an output FIFO of :attr:`~.schedule.Schedule.fifo_depth` rows takes
whatever reaches its end, and a beat that will produce an output is only accepted while a
*credit* (a FIFO row not yet promised to a beat inside) is left. With several sub-beats a beat,
the outlet collects a beat's sub-beats and writes the FIFO row with the last.
"""

from amaranth import Cat, Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ..queue import Queue
from .schedule import Schedule, row_layout, stage_signature

__all__ = ["Outlet"]


class Outlet(wiring.Component):
    """The output FIFO and its credits.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    i_row : In(stage_signature(schedule, row_layout(cfg, lanes)))
        The pipeline's last stage: a second-pass or single-pass sub-beat's results go into
        the FIFO; first passes leave nothing.
    i_owe : In(1)
        A beat taken this cycle will produce an output beat.
    o_credit_next : Out(ArrayLayout(ArrayLayout(1, 2), 2))
        A FIFO row will not be promised next cycle, if the output's head does not leave
        ([0]) or leaves ([1]) this cycle, and ``i_owe`` is low ([.][0]) or high ([.][1]) (the
        intake decides its ``ready`` a cycle ahead).
    o_popped : Out(1)
        The output's head leaves this cycle. Timing: the intake decides its ``ready`` for
        both cases and picks with it, as the output's ``ready`` comes from outside the core.
    o_data : Out(stream.Signature(row_layout(cfg)))
    o_busy_next : Out(1)
        An output beat will be owed next cycle (taken, not yet sent).
    """

    def __init__(self, cfg):
        self._cfg = cfg
        self._sch = sch = Schedule.of(cfg)
        super().__init__({
            "i_row": In(stage_signature(sch, row_layout(cfg, sch.lanes))),
            "i_owe": In(1),
            "o_credit_next": Out(data.ArrayLayout(data.ArrayLayout(1, 2), 2)),
            "o_popped": Out(1),
            "o_data": Out(stream.Signature(row_layout(cfg))),
            "o_busy_next": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        sch = self._sch
        # Timing: the intake's decision reads the pop from a copy of the FIFO's control
        # registers of its own (`r_rdy_far`), which can sit beside the intake: the FIFO's
        # own sit by the output, across the chip.
        out_fifo = m.submodules.out_fifo = Queue(width=self.o_data.payload.shape().size,
                                                 depth=sch.fifo_depth, far_valid=True)
        popped = self.o_data.valid & self.o_data.ready
        m.d.comb += self.o_popped.eq(out_fifo.r_rdy_far & self.o_data.ready)
        self._credits(m, popped)
        row, ctl = self.i_row.payload.lanes, self.i_row.payload.ctl
        if sch.ratio == 1:
            m.d.comb += [out_fifo.w_data.eq(row),
                         out_fifo.w_en.eq(self.i_row.valid & ctl.second)]
        else:
            # A beat's sub-beats but the last wait in `done`; the last completes the FIFO row.
            done = Signal(data.ArrayLayout(row.shape(), sch.ratio - 1), reset_less=True)
            for j in range(sch.ratio - 1):
                with m.If(self.i_row.valid & (ctl.sub == j)):
                    m.d.sync += done[j].eq(row)
            m.d.comb += [
                out_fifo.w_data.eq(Cat(done, row)),
                out_fifo.w_en.eq(self.i_row.valid & ctl.second & (ctl.sub == sch.ratio - 1)),
            ]
        m.d.comb += [
            self.o_data.payload.eq(out_fifo.r_data),
            self.o_data.valid.eq(out_fifo.r_rdy),
            out_fifo.r_en.eq(self.o_data.ready),
        ]
        return m

    def _credits(self, m, popped):
        """The output beats owed (accepted, not yet sent), and whether a credit will be left."""
        depth = self._sch.fifo_depth
        # Output beats owed = `owed` + `owe_d`. `owe_d` is the accept of the cycle before, and
        # `owed` the beats owed before that, as a thermometer code (`owed[i]` is "more than i").
        # Timing choices: the thermometer's enable reads two registers and the output's pop, not
        # the intake's accept; the credits and `o_busy` read a few bits, and each bit's next
        # value is a LUT of its neighbours, with no counter's adder and compares between the
        # accept and the registers.
        owed = Signal(depth)
        owe_d = Signal()
        m.d.sync += owe_d.eq(self.i_owe)
        up, down = Cat(Const(1), owed[:-1]), Cat(owed[1:], Const(0))   # one more, one fewer
        def owed_next(popped):
            return Mux(owe_d & ~popped, up, Mux(popped & ~owe_d, down, owed))
        m.d.sync += owed.eq(owed_next(popped))
        # One owed or more, two or more; then owed next cycle: one accepted now, or two or
        # more now, or one not leaving now (a beat only leaves while one is owed).
        some = owed[0] | owe_d
        two = (owed[1] if depth > 1 else 0) | (owed[0] & owe_d)
        m.d.comb += self.o_busy_next.eq(self.i_owe | two | (some & ~popped))
        # `depth` or more owed next cycle (no credit): `owed` next cycle and `i_owe` as `owe_d`.
        for pop in (0, 1):
            after = owed_next(Const(pop))
            for owe in (0, 1):
                full = after[-1] | ((after[-2] if depth > 1 else 1) & owe)
                m.d.comb += self.o_credit_next[pop][owe].eq(~full)
