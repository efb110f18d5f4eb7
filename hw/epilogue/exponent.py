"""SOFTMAX's exponentials and their rescaled row sum, stages U to E (and the sum's tree and
loop beside the lanes, to SLOOP).

Per lane, stage by stage (``L = log2(lanes)``)::

    U       SOFTMAX u = 4096 * M - t (first pass: M so far; second pass: the row's final M)
    EXP     EXP2 lookup at u & 4095
    EREG    ... registered (every table: block RAM has no logic after it)
    ESH     2 * (EXP2 << 4) >> q, coarse (multiples of 8), for q = u >> 12
    E       ... fine, then the rounding add: e = rshift_round(EXP2 << 4, q) (see :mod:`~.arith`),
            0 from a shift of 23 and in pad lanes
    L x     tree of sum e, then the loop S = (S >> dM) + sum e (SLOOP: shift, add)

Each lane has an EXP2 table (4096 x 18 bits, :data:`bertaccel.golden.intops.EXP2_TABLE`). The
other ops' lanes pass through unchanged. The sum's tree and loop read the tags of the stages
after E, which they keep a copy of (the same registers as the back's, which synthesis merges).
"""

from amaranth import Cat, Module, Mux, Signal, signed, unsigned
from amaranth.lib import memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ...golden.intops import EXP2_CUTOFF, EXP2_GUARD, EXP2_TABLE, SOFTMAX_FRAC
from ..dsp import KEEP
from ..isa import EpOp
from ..pipeline import delay
from .arith import coarse, fine, tree
from .lanes import Stages
from .schedule import ACC_LANE, E_LANE, Schedule, SoftmaxSums, lane_layout, stage_signature

__all__ = ["Exponent"]

#: Bits of an EXP2_TABLE entry (its largest, 2**17, needs 18).
_EXP2_WIDTH = max(EXP2_TABLE).bit_length()
#: Bits of q = u >> 12 that the shifter takes (q < EXP2_CUTOFF = 23).
_Q_WIDTH = (EXP2_CUTOFF - 1).bit_length()
#: Bits of an exponential e (at most 2**21) and of a row's sum of them (below 2**32).
E_WIDTH = _EXP2_WIDTH + EXP2_GUARD
SUM_WIDTH = SoftmaxSums["total"].shape.width


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
        dm = self._exponentials(m, st)
        self._sum(m, st, dm)
        st.drive(self.o_lanes)
        m.d.comb += self.o_busy_next.eq(st.busy_next())
        return m

    def _exponentials(self, m, st):
        """U, EXP, EREG, ESH, E: e = rshift_round(EXP2[u & 4095] << 4, u >> 12), u = 4096*M -
        t. Returns the growth of M, registered beside U and limited to 63."""
        sch, lanes, frac = self._sch, range(self._sch.lanes), SOFTMAX_FRAC
        c, p = st.ctl[sch.U - 1], st.lanes[sch.U - 1]
        s = st(sch.U, a=signed(24), f=unsigned(frac), q=unsigned(_Q_WIDTH), zero=1)
        dm = Signal(6, reset_less=True)
        m.d.sync += dm.eq(Mux(self.i_dm > 63, 63, self.i_dm))   # S < 2**32: 32 empties it
        for i in lanes:
            # u >= 0 in the valid lanes: M is at least ceil(t / 4096).
            u = Signal(signed(17 + frac + 1), name=f"u{i}")
            q = u[frac:frac + _Q_WIDTH]
            m.d.comb += u.eq((p[i].m << frac) - p[i].a)
            m.d.sync += [s[i].f.eq(u[:frac]), s[i].q.eq(q),
                         s[i].zero.eq(~c.lane_valid[i] | u[frac + _Q_WIDTH:].any()
                                      | (q >= EXP2_CUTOFF))]
        p, s = s, st(sch.EXP, a=signed(24), q=unsigned(_Q_WIDTH), zero=1)
        exp2 = []
        for i in lanes:
            rom = m.submodules[f"exp2_{i}"] = memory.Memory(
                shape=unsigned(_EXP2_WIDTH), depth=len(EXP2_TABLE), init=EXP2_TABLE)
            port = rom.read_port()
            m.d.comb += port.addr.eq(p[i].f)
            exp2.append(port.data)
        s = st(sch.EREG, a=signed(24), q=unsigned(_Q_WIDTH), zero=1, r=unsigned(_EXP2_WIDTH))
        for i in lanes:
            m.d.sync += s[i].r.eq(exp2[i])      # block RAM straight into a register
        # The rounding shift as arith's ((2v >> q) + 1) >> 1, with v = EXP2 << 4.
        p, s = s, st(sch.ESH, a=signed(24), q=unsigned(3), zero=1,
                     w=unsigned(_EXP2_WIDTH + EXP2_GUARD + 1))
        for i in lanes:
            m.d.sync += [s[i].w.eq(coarse(p[i].r << (EXP2_GUARD + 1), p[i].q)),
                         s[i].q.eq(p[i].q[:3])]
        c = st.ctl[sch.E - 1]
        p, s = s, st(sch.E, **E_LANE)
        for i in lanes:
            with m.If(c.op == EpOp.SOFTMAX):
                e = (fine(p[i].w, p[i].q) + 1)[1:E_WIDTH + 1]
                m.d.sync += s[i].a.eq(Mux(p[i].zero, 0, e))
        return dm

    def _sum(self, m, st, dm):
        """The e tree and the rescaled-sum loop (first passes): S = (S >> dM) + sum e."""
        sch = self._sch
        e = st.lanes[sch.E]
        e_sum, _ = tree(m, [e[i].a[:E_WIDTH] for i in range(sch.lanes)],
                        lambda a, b: a + b, lambda n: unsigned(E_WIDTH + n), name="esum")
        # Timing: the shift amount reaches the loop from registers of its own for each group of
        # 8 bits of S (copies kept apart, hw/dsp.py KEEP), and so does whether S starts from 0
        # (`zero`: dM of 32 or more, or the row's first sub-beat), decided a cycle ahead; so no
        # net selects the whole shifter, and each bit's multiplexer reads one flag.
        dm_before = delay(m, dm, sch.SLOOP - 2 - sch.U, name="dm")
        groups = range(-(-SUM_WIDTH // 8))
        shift = [Signal(5, name=f"dm_shift{g}", reset_less=True, attrs=KEEP) for g in groups]
        zero = [Signal(init=1, name=f"s_zero{g}", attrs=KEEP) for g in groups]
        s_fresh = Signal(init=1)          # the next first-pass sub-beat starts a row
        total = Signal(unsigned(SUM_WIDTH), reset_less=True)
        kept = Cat(Mux(zero[g], 0, (total >> shift[g])[8 * g:8 * g + 8])
                   for g in groups)[:SUM_WIDTH]
        smx_fin = Signal()
        smx_fin_slot = Signal()
        _, c = st.tags(sch.SLOOP - 1)
        looping = st.first_pass(sch.SLOOP - 1, EpOp.SOFTMAX)
        fresh_next = Mux(looping, c.last, s_fresh)
        m.d.sync += [reg.eq(dm_before[:5]) for reg in shift]
        m.d.sync += [reg.eq(dm_before[5] | fresh_next) for reg in zero]
        m.d.sync += [s_fresh.eq(fresh_next), smx_fin.eq(0)]
        with m.If(looping):
            m.d.sync += [total.eq(kept + e_sum), smx_fin.eq(c.last), smx_fin_slot.eq(c.slot)]
        m.d.comb += [self.o_sums.valid.eq(smx_fin), self.o_sums.payload.total.eq(total),
                     self.o_sums.payload.slot.eq(smx_fin_slot)]
