"""The row statistics of the first passes: trees over the lanes, then SOFTMAX's running
maximum and LAYERNORM's row sums, stages PRE + 1 to ACC.

Per lane, stage by stage (``L = log2(lanes)``)::

    L x     trees over the lanes (first passes): SOFTMAX max, LAYERNORM sum v and sum v * v
    ACC     SOFTMAX running max M (a 1-cycle loop: compare, mux); LAYERNORM row sums

The running maximum is golden's integer one: ``M = max(M, ceil(max(t) / 4096))`` over the
sub-beats of a row, from ``-2**15``. At a row's last first-pass sub-beat M goes into the row's
slot, and second-pass sub-beats take M from their slot instead. The LAYERNORM sums leave on
``o_sums`` for the finalize pipeline (:class:`~.finalize.Finalize`).
"""

from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import EpOp
from ..lut import cleared_sum
from .arith import greater, tree
from .lanes import Stages
from .schedule import (
    ACC_LANE,
    PRE_LANE,
    LayerNormSums,
    Schedule,
    lane_layout,
    stage_signature,
)

__all__ = ["RowStats"]


class RowStats(wiring.Component):
    """Stages PRE + 1 to ACC: the lanes wait while the trees reduce them, and the row
    statistics accumulate; GELU's phi joins its lane's carry in stage PRE + 1.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    i_lanes : In(stage_signature(schedule, lane_layout(schedule, PRE_LANE)))
        Stage PRE.
    o_lanes : Out(stage_signature(schedule, lane_layout(schedule, ACC_LANE)))
        Stage ACC: SOFTMAX's M so far (first pass) or the row's M (second pass) in every lane.
    o_dm : Out(unsigned(17))
        How much M grew at the sub-beat in ACC (first pass of SOFTMAX).
    o_sums : Out(stream.Signature(LayerNormSums, always_ready=True))
        A LAYERNORM row's sums, for the one cycle they are final.
    o_busy_next : Out(1)
        A sub-beat will be in one of stages PRE + 1 to ACC next cycle.
    """

    def __init__(self, cfg):
        self._sch = sch = Schedule.of(cfg)
        super().__init__({
            "i_lanes": In(stage_signature(sch, lane_layout(sch, PRE_LANE))),
            "o_lanes": Out(stage_signature(sch, lane_layout(sch, ACC_LANE))),
            "o_dm": Out(unsigned(17)),
            "o_sums": Out(stream.Signature(LayerNormSums, always_ready=True)),
            "o_busy_next": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        sch = self._sch
        st = Stages(m, sch, self.i_lanes, sch.PRE + 1)
        pre = self.i_lanes.payload.lanes
        c_max, levels = self._max_tree(m, pre)
        v_sum, _ = tree(m, [pre[i].a[:16].as_signed() for i in range(sch.lanes)],
                        lambda a, b: a + b, lambda n: signed(16 + n), name="vsum")
        v2_sum, _ = tree(m, [pre[i].v2 for i in range(sch.lanes)],
                         lambda a, b: a + b, lambda n: unsigned(31 + n), name="v2sum")
        assert levels == sch.levels
        st.wait(sch.ACC)
        self._running_max(m, st, c_max)
        self._sums(m, st, v_sum, v2_sum, platform)
        for i in range(sch.lanes):                  # GELU's phi, from the PHI table's register
            with m.If(pre[i].gelu):
                m.d.sync += st.lanes[sch.PRE + 1][i].carry.coef.m.eq(pre[i].phi)
        st.drive(self.o_lanes)
        m.d.comb += self.o_busy_next.eq(st.busy_next())
        return m

    def _max_tree(self, m, pre):
        """SOFTMAX's max over the lanes of ceil(t / 4096): the first level picks by the compare
        of t made in stage PRE, the levels above compare and pick."""
        pairs = range(0, self._sch.lanes, 2)
        first = [Signal(signed(17), name=f"cmax_l1_{i // 2}", reset_less=True) for i in pairs]
        m.d.sync += [node.eq(Mux(pre[i].gt, pre[i].c, pre[i + 1].c))
                     for node, i in zip(first, pairs)]
        return tree(m, first, lambda a, b: Mux(greater(a, b), a, b),
                    lambda _: signed(17), name="cmax", below=1)

    def _running_max(self, m, st, c_max):
        """ACC, SOFTMAX: the running maximum M, into every lane and at a row's end its slot."""
        k = self._sch.ACC
        c = st.ctl[k - 1]
        acc_lanes = st(k, **ACC_LANE)                      # M, a copy in every lane
        row_dm = Signal(unsigned(17), reset_less=True)      # how much M grew at that beat
        # M so far in this row, -2**15 before its first sub-beat: a row's last sub-beat sets it
        # back, so no multiplexer for a row's start sits in front of the compare.
        m_run = Signal(signed(17), init=-(1 << 15))
        smx_m = [Signal(signed(17), name=f"smx_m{n}", reset_less=True) for n in range(2)]
        # Whether stage k - 1 holds a first pass, and the M of its slot, are registers decided
        # from stage k - 2, and a row's M reaches its slot a cycle after the row's last
        # sub-beat: the loop is a compare of two registers and one LUT, and nothing follows it
        # but registers (a timing choice). A row's second pass reads the slot a cycle ahead,
        # which Schedule.gap leaves at least a cycle after the write.
        sch = self._sch
        assert sch.gap[EpOp.SOFTMAX] - (sch.ratio - 1) >= 3, "a second pass reads M too early"
        fp = Signal()
        slot_m = Signal(signed(17), reset_less=True)
        ahead = st.ctl[k - 2]
        m.d.sync += [fp.eq(st.first_pass(k - 2, EpOp.SOFTMAX)),
                     slot_m.eq(Mux(ahead.slot, smx_m[1], smx_m[0]))]
        row_m = Signal(signed(17), reset_less=True)         # the row's M, a cycle late
        row_end = Signal(2)                                 # ... and its slot, one-hot
        # M takes c_max where c_max >= m_run (where they are equal either is M, and the growth
        # 0): the sign of the subtraction, the top sum bit of its carry chain, rather than a
        # compare's carry out or a test of the difference's 18 bits (a timing choice)
        grow = Signal(signed(18))
        takes = ~grow[-1]
        new = Mux(takes, c_max, m_run)
        m.d.comb += [grow.eq(c_max - m_run), self.o_dm.eq(row_dm)]
        m.d.sync += [row_m.eq(new), row_end.eq(0)]
        lanes = range(sch.lanes)
        with m.If(fp):
            m.d.sync += [m_run.eq(Mux(c.last, -(1 << 15), new)),
                         row_dm.eq(Mux(takes, grow, 0)),
                         row_end.eq(Mux(c.last, 1 << c.slot, 0))]
            m.d.sync += [acc_lanes[i].m.eq(new) for i in lanes]
        with m.Else():
            m.d.sync += [acc_lanes[i].m.eq(slot_m) for i in lanes]
        for n in range(2):
            with m.If(row_end[n]):
                m.d.sync += smx_m[n].eq(row_m)

    def _sums(self, m, st, v_sum, v2_sum, platform):
        """ACC, LAYERNORM: the row sums of v and v * v. Timing: a row's first sub-beat clears
        each sum in its add's carry chain (:func:`~..lut.cleared_sum`)."""
        k = self._sch.ACC
        c = st.ctl[k - 1]
        s1 = Signal(signed(26), reset_less=True)
        s2 = Signal(unsigned(41), reset_less=True)
        ln_fresh = Signal(init=1)
        ln_fin = Signal()                 # the row sums are final (one cycle)
        ln_fin_slot = Signal()
        # Timing: whether stage k - 1 holds a first-pass LAYERNORM sub-beat, and its row's last,
        # are registers decoded a stage ahead, so `ln_fin` (which the finalize's stages read
        # across the chip) is loaded from a register alone.
        fp = Signal(name="ln_fp")
        ends = Signal(name="ln_ends")
        _, c_before = st.tags(k - 2)
        first = st.first_pass(k - 2, EpOp.LAYERNORM)
        m.d.sync += [fp.eq(first), ends.eq(first & c_before.last), ln_fin.eq(ends)]
        with m.If(fp):
            m.d.sync += [s1.eq(cleared_sum(m, ln_fresh, s1, v_sum, width=len(s1),
                                           platform=platform, name="ln_s1_add")),
                         s2.eq(cleared_sum(m, ln_fresh, s2, v2_sum, width=len(s2),
                                           platform=platform, name="ln_s2_add")),
                         ln_fresh.eq(c.last), ln_fin_slot.eq(c.slot)]
        m.d.comb += [self.o_sums.valid.eq(ln_fin), self.o_sums.payload.s1.eq(s1),
                     self.o_sums.payload.s2.eq(s2), self.o_sums.payload.slot.eq(ln_fin_slot)]
