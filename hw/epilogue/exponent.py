"""SOFTMAX's exponentials and their rescaled row sum, stages U to E (and the sum's tree and
loop beside the lanes, to SLOOP).

Per lane, stage by stage (``L = log2(lanes)``)::

    U       SOFTMAX u = 256 * M - t (first pass: M so far; second pass: the row's final M)
    EXP     EXP2 lookup
    EREG    ... registered (every table: block RAM has no logic after it)
    E       e = EXP2[u & 255] >> (u >> 8), 0 from a shift of 16 and in pad lanes
    L x     tree of sum e, then the loop S = (S >> dM) + sum e (SLOOP: shift, add)

Each lane has an EXP2 table (256 x 16 bits, :data:`bertaccel.golden.intops.EXP2_TABLE`). The
other ops' lanes pass through unchanged. The sum's tree and loop read the tags of the stages
after E, which they keep a copy of (the same registers as the back's, which synthesis merges).
"""

from amaranth import Module, Mux, Signal, signed, unsigned
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ...golden.intops import EXP2_TABLE
from ..isa import EpOp
from ..pipeline import delay
from .arith import tree
from .lanes import Stages
from .schedule import ACC_LANE, E_LANE, Schedule, SoftmaxSums, lane_layout, stage_signature

__all__ = ["Exponent"]


class Exponent(wiring.Component):
    """Stages U to E of every lane, and the rescaled-sum loop of SOFTMAX's first passes.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    i_lanes : In(stage_signature(schedule, lane_layout(schedule, ACC_LANE)))
        Stage ACC.
    i_dm : In(unsigned(17))
        How much M grew at the sub-beat in ACC.
    o_lanes : Out(stage_signature(schedule, lane_layout(schedule, E_LANE)))
        Stage E: SOFTMAX's e in ``a``.
    o_sums : Out(stream.Signature(SoftmaxSums, always_ready=True))
        A SOFTMAX row's sum S, for the one cycle it is final.
    o_busy_next : Out(1)
        A sub-beat will be in one of stages U to E next cycle.
    """

    def __init__(self, cfg):
        self._sch = sch = Schedule.of(cfg)
        super().__init__({
            "i_lanes": In(stage_signature(sch, lane_layout(sch, ACC_LANE))),
            "i_dm": In(unsigned(17)),
            "o_lanes": Out(stage_signature(sch, lane_layout(sch, E_LANE))),
            "o_sums": Out(stream.Signature(SoftmaxSums, always_ready=True)),
            "o_busy_next": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        st = Stages(m, self._sch, self.i_lanes, self._sch.U)
        dm5 = self._exponentials(m, st)
        self._sum(m, st, dm5)
        st.drive(self.o_lanes)
        m.d.comb += self.o_busy_next.eq(st.busy_next())
        return m

    def _exponentials(self, m, st):
        """U, EXP, EREG, E: e = EXP2[u & 255] >> (u >> 8), u = 256*M - t. Returns the growth
        of M, registered beside U and limited to 31."""
        sch, lanes = self._sch, range(self._sch.lanes)
        c, p = st.ctl[sch.U - 1], st.lanes[sch.U - 1]
        s = st(sch.U, a=signed(24), f=unsigned(8), q=unsigned(4), zero=1)
        dm5 = Signal(5, reset_less=True)
        m.d.sync += dm5.eq(Mux(self.i_dm > 31, 31, self.i_dm))   # S < 2**26: 31 empties it
        for i in lanes:
            u = Signal(signed(26), name=f"u{i}")
            m.d.comb += u.eq((p[i].m << 8) - p[i].a)
            m.d.sync += [s[i].f.eq(u[:8]), s[i].q.eq(u[8:12]),
                         s[i].zero.eq(~c.lane_valid[i] | u[12:].any())]
        p, s = s, st(sch.EXP, a=signed(24), q=unsigned(4), zero=1)
        exp2 = []
        for i in lanes:
            rom = m.submodules[f"exp2_{i}"] = memory.Memory(shape=unsigned(16), depth=256,
                                                            init=EXP2_TABLE)
            port = rom.read_port()
            m.d.comb += port.addr.eq(p[i].f)
            exp2.append(port.data)
        s = st(sch.EREG, a=signed(24), q=unsigned(4), zero=1, r=unsigned(16))
        for i in lanes:
            m.d.sync += s[i].r.eq(exp2[i])      # block RAM straight into a register
        c = st.ctl[sch.E - 1]
        p, s = s, st(sch.E, **E_LANE)
        for i in lanes:
            with m.If(c.op == EpOp.SOFTMAX):
                m.d.sync += s[i].a.eq(Mux(p[i].zero, 0, p[i].r >> p[i].q))
        return dm5

    def _sum(self, m, st, dm5):
        """The e tree and the rescaled-sum loop (first passes): S = (S >> dM) + sum e."""
        sch = self._sch
        e = st.lanes[sch.E]
        e_sum, _ = tree(m, [e[i].a[:16] for i in range(sch.lanes)],
                        lambda a, b: a + b, lambda n: unsigned(16 + n), name="esum")
        dm_at_sum = delay(m, dm5, sch.SLOOP - 1 - sch.U, name="dm")
        total = Signal(unsigned(26), reset_less=True)
        s_fresh = Signal(init=1)
        smx_fin = Signal()
        smx_fin_slot = Signal()
        m.d.sync += smx_fin.eq(0)
        _, c = st.tags(sch.SLOOP - 1)
        with m.If(st.first_pass(sch.SLOOP - 1, EpOp.SOFTMAX)):
            m.d.sync += [total.eq(Mux(s_fresh, 0, total >> dm_at_sum) + e_sum),
                         s_fresh.eq(c.last), smx_fin.eq(c.last), smx_fin_slot.eq(c.slot)]
        m.d.comb += [self.o_sums.valid.eq(smx_fin), self.o_sums.payload.total.eq(total),
                     self.o_sums.payload.slot.eq(smx_fin_slot)]
