"""SOFTMAX's exponentials and their rescaled row sum, stages U to E (and the sum's tree and
loop beside the lanes, to SLOOP).

Per lane, stage by stage (``L = log2(lanes)``)::

    U       SOFTMAX u = 4096 * M - t (first pass: M so far; second pass: the row's final M)
    EXP     EXP2 lookup at u & 4095; whether e is 0 (a pad lane, u >> 12 past the table)
    EREG    ... registered (every table: block RAM has no logic after it)
    ESH     2 * (EXP2 << 4) >> q, coarse (multiples of 8), for q = u >> 12; 0 for a shift of
            23 or more and in pad lanes
    E       ... fine, then the rounding add: e = rshift_round(EXP2 << 4, q) (see :mod:`~.arith`)
    L x     tree of sum e << p, then the loop S = (S >> dM) + sum e, kept as S = A >> p
            (SLOOP: one add)

Each lane has an EXP2 table (4096 x 18 bits, :data:`bertaccel.golden.intops.EXP2_TABLE`). The
other ops' lanes pass through unchanged. The sum's tree and loop read the tags of the stages
after E, which they keep a copy of (the same registers as the back's, which synthesis merges).

The rescaled sum
----------------
golden's ``S = (S >> dM) + sum e`` (floor shifts, one step a first-pass sub-beat) takes a
shifter and an adder in one cycle if done as written, and sub-beats come one a cycle. The loop
keeps ``S = A >> p`` instead, with ``p < 8`` bits of A below S. As ``(x >> a) >> b = x >> (a +
b)`` and ``(x >> c) + e = (x + (e << c)) >> c`` for floor shifts, a step is exactly::

    q = p + dM;  A' = (A >> 8 * (q >> 3)) + (sum e << (q & 7));  p' = q & 7

(a row's first sub-beat, or dM >= 32, which empties S < 2**32: A' = sum e, p' = 0). ``p`` and
the multiple of 8 that A drops depend only on the dM of earlier sub-beats, so they are decided
where the sub-beat is in stage E; the tree's sum of the lanes' e is shifted by ``p'``; and the
loop adds that to a choice of A, A >> 8, ..., A >> 32 (one-hot, from registers). Since ``S <
2**32``, ``A < 2**39``. The finalize reads S's bit length and mantissa from A and p.
"""

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from ...golden.intops import EXP2_CUTOFF, EXP2_GUARD, EXP2_TABLE, SOFTMAX_FRAC
from ..dsp import KEEP
from ..isa import EpOp
from ..lut import and_pairs, mux4, shifted_plus_one, shifted_sum, sum_of_ors
from ..memory import rom
from ..pipeline import delay
from .arith import coarse, tree
from .lanes import Stages
from .schedule import (ACC_LANE, E_LANE, BindSelect, Schedule, SoftmaxSums, lane_layout,
                       stage_signature)

__all__ = ["Exponent"]

#: Bits of an EXP2_TABLE entry (its largest, 2**17, needs 18).
_EXP2_WIDTH = max(EXP2_TABLE).bit_length()
#: Bits of q = u >> 12 that the shifter takes (q < EXP2_CUTOFF = 23).
_Q_WIDTH = (EXP2_CUTOFF - 1).bit_length()
#: Bits of an exponential e (at most 2**21).
E_WIDTH = _EXP2_WIDTH + EXP2_GUARD
#: The rescaled sum A (S = A >> p, S < 2**32, p < 8) and the bits of p.
A_WIDTH = SoftmaxSums["a"].shape.width
P_WIDTH = SoftmaxSums["p"].shape.width
#: The shifts A can take in one step: 0, 8, ..., 32 (dM < 32, p < 8).
_A_STEPS = range(0, (1 << P_WIDTH) + 32, 1 << P_WIDTH)


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
    o_bind : Out(ArrayLayout(BindSelect, lanes))
        Stage E's sub-beat's :data:`~.schedule.BindSelect`, a register a lane.
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
            "o_bind": Out(data.ArrayLayout(BindSelect, sch.lanes)),
            "o_sums": Out(stream.Signature(SoftmaxSums, always_ready=True)),
            "o_busy_next": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        st = Stages(m, self._sch, self.i_lanes, self._sch.U)
        dm = self._exponentials(m, st, platform)
        self._sum(m, st, dm, platform)
        st.drive(self.o_lanes)
        m.d.comb += self.o_busy_next.eq(st.busy_next())
        return m

    def _exponentials(self, m, st, platform):
        """U, EXP, EREG, ESH, E: e = rshift_round(EXP2[u & 4095] << 4, u >> 12), u = 4096*M -
        t. Returns the growth of M, registered beside U and limited to 63."""
        sch, lanes, frac = self._sch, range(self._sch.lanes), SOFTMAX_FRAC
        c, p = st.ctl[sch.U - 1], st.lanes[sch.U - 1]
        u_width = 17 + frac + 1
        s = st(sch.U, a=signed(24), f=unsigned(frac), q=unsigned(_Q_WIDTH),
               high=unsigned(u_width - frac - _Q_WIDTH))
        dm = Signal(6, reset_less=True)
        m.d.sync += dm.eq(Mux(self.i_dm > 63, 63, self.i_dm))   # S < 2**32: 32 empties it
        for i in lanes:
            # u >= 0 in the valid lanes: M is at least ceil(t / 4096).
            u = Signal(signed(u_width), name=f"u{i}")
            m.d.comb += u.eq((p[i].m << frac) - p[i].a)
            m.d.sync += [s[i].f.eq(u[:frac]), s[i].q.eq(u[frac:frac + _Q_WIDTH]),
                         s[i].high.eq(u[frac + _Q_WIDTH:])]
        # Timing: whether e is zero (a pad lane, or u above the table's reach) is decided in
        # stage EXP from U's registers, not after U's subtraction.
        c = st.ctl[sch.U]
        p, s = s, st(sch.EXP, a=signed(24), q=unsigned(_Q_WIDTH), zero=1)
        for i in lanes:
            m.d.sync += s[i].zero.eq(~c.lane_valid[i] | p[i].high.any()
                                     | (p[i].q >= EXP2_CUTOFF))
        exp2 = [rom(m, EXP2_TABLE, p[i].f, name=f"exp2_{i}_", platform=platform) for i in lanes]
        s = st(sch.EREG, a=signed(24), q=unsigned(_Q_WIDTH), zero=1, r=unsigned(_EXP2_WIDTH))
        for i in lanes:
            m.d.sync += s[i].r.eq(exp2[i])      # block RAM straight into a register
        # The rounding shift as arith's ((2v >> q) + 1) >> 1, with v = EXP2 << 4; a zero e is
        # a zero w, which rounds to 0 (so stage E is a shift and an add). A lane of another op
        # goes through the same shift and add as 2a >> 0, which rounds to a: the choice of the
        # op is made here, by a register a lane, and stage E has no multiplexer after its add
        # (a timing choice).
        takes = st.decoded(sch.ESH - 1, lambda ctl: ctl.op == EpOp.SOFTMAX, name="e_takes")
        width = len(s[0].a) + 1                  # 2a, a of stage EREG
        # Timing: the fine shift's amount is one-hot (`qh`), so stage E's shift is an AND-OR
        # of eight terms a bit, its ANDs one LUT level on an ECP5 and its ORs in the rounding
        # add's carry chain (`shifted_plus_one`).
        p, s = s, st(sch.ESH, qh=unsigned(8), w=signed(width))
        for i in lanes:
            e = Mux(p[i].zero, 0, coarse(p[i].r << (EXP2_GUARD + 1), p[i].q))
            m.d.sync += [s[i].w.eq(Mux(takes[i], e, p[i].a << 1)),
                         s[i].qh.eq(Mux(takes[i], 1 << p[i].q[:3], 1))]
        p, s = s, st(sch.E, **E_LANE)
        for i in lanes:
            w = shifted_plus_one(m, p[i].w, p[i].qh, right=True, platform=platform,
                                 name=f"e_fine{i}")
            m.d.sync += s[i].a.eq(w[1:])
        # Timing: the back's BIND stage chooses by these (a copy a lane), not by a decode of
        # the tags that reaches every lane's statistics registers across the chip.
        bind = st.decoded(sch.E, lambda ctl: Cat(ctl.op == EpOp.SOFTMAX, ctl.slot),
                          BindSelect.size, name="e_bind")
        m.d.comb += [self.o_bind[i].eq(reg) for i, reg in enumerate(bind)]
        return dm

    def _sum(self, m, st, dm, platform):
        """The e tree and the rescaled-sum loop of first passes, as A and p (module docstring).

        Every lane's e is shifted by the same ``p``, so the tree adds the e and the loop adds
        ``sum e << p``. Timing: the shift is cut in two, ``p & 3`` in the tree's last level
        and ``p & 4`` in the loop, so that each add's operands are one LUT level deep and
        their ORs are made in the carry chain's own LUTs (hw/lut.py)."""
        sch = self._sch
        p, hot_lo, hot_hi, step = self._sum_shifts(m, st, dm)
        e = [st.lanes[sch.E][i].a[:E_WIDTH] for i in range(sch.lanes)]
        half = sch.lanes // 2
        halves = [tree(m, e[k * half:(k + 1) * half], lambda a, b: a + b,
                       lambda n: unsigned(E_WIDTH + n), name=f"esum{k}")[0] for k in range(2)]
        e_sum = Signal(unsigned(E_WIDTH + sch.levels + len(hot_lo)), name="esum",
                       reset_less=True)
        m.d.sync += e_sum.eq(shifted_sum(
            m, *halves, delay(m, hot_lo, sch.levels - 1, name="a_hot_lo"), width=len(e_sum),
            platform=platform, name="esum_shift"))
        hi = delay(m, hot_hi, sch.levels, name="a_hot_hi")
        e_side = [and_pairs(m, [(hi[j], e_sum[i - 4 * j]) for j in range(2)
                                if 0 <= i - 4 * j < len(e_sum)], platform=platform,
                            name=f"e_shift{i}")
                  for i in range(A_WIDTH)]
        total = Signal(unsigned(A_WIDTH), reset_less=True)
        kept = self._kept(m, total, delay(m, step, sch.levels - 1, name="a_step"), platform)
        smx_fin = Signal()
        smx_fin_slot = Signal()
        _, c = st.tags(sch.SLOOP - 1)
        m.d.sync += smx_fin.eq(0)
        with m.If(st.first_pass(sch.SLOOP - 1, EpOp.SOFTMAX)):
            m.d.sync += [total.eq(sum_of_ors(m, kept, e_side, platform=platform, name="a_sum")),
                         smx_fin.eq(c.last), smx_fin_slot.eq(c.slot)]
        m.d.comb += [self.o_sums.valid.eq(smx_fin), self.o_sums.payload.a.eq(total),
                     self.o_sums.payload.p.eq(delay(m, p, sch.levels + 1, name="a_p")),
                     self.o_sums.payload.slot.eq(smx_fin_slot)]

    @staticmethod
    def _kept(m, total, step_before, platform):
        """Per bit of A, the values (one LUT level each, at most two) whose OR is the bit of
        ``A >> 8j`` that the loop keeps, for the one-hot ``step`` a cycle after
        ``step_before``.

        Timing: the step reaches the loop from registers of its own for each group of 8 bits
        of A (copies kept apart, hw/dsp.py KEEP), so no net selects the whole loop. A bit with
        at most four shifts is two AND pairs (:func:`~..lut.and_pairs`); the low bits of A,
        which take five (A >> 32 too), are a pair and a :func:`~..lut.mux4` of the other
        three by a code of the step (``a_code``: 1, 2, 3 for A >> 16, 24, 32; 0 none)."""
        groups = range(-(-A_WIDTH // 8))
        picks = [Signal(len(_A_STEPS), name=f"a_pick{g}", reset_less=True, attrs=KEEP)
                 for g in groups]
        code = Signal(2, name="a_code", reset_less=True, attrs=KEEP)
        m.d.sync += [reg.eq(step_before) for reg in picks]
        m.d.sync += code.eq(Cat(step_before[2] | step_before[4], step_before[3] | step_before[4]))
        kept = []
        for i in range(A_WIDTH):
            terms = [(picks[i // 8][j], total[i + shift])
                     for j, shift in enumerate(_A_STEPS) if i + shift < A_WIDTH]
            if len(terms) <= 4:
                kept.append(and_pairs(m, terms, platform=platform, name=f"a_kept{i}"))
                continue
            three = [Const(0, 1), *(bit for _, bit in terms[2:])]
            kept.append([*and_pairs(m, terms[:2], platform=platform, name=f"a_kept{i}"),
                         mux4(m, code, three, platform=platform, name=f"a_kept{i}_far")])
        return kept

    def _sum_shifts(self, m, st, dm):
        """Beside stage E, for a first-pass sub-beat: ``p`` after its step, the same as one-hot
        ``p & 3`` (``hot_lo``) and one-hot ``p >> 2`` (``hot_hi``), and its ``step`` (one-hot:
        A >> 8j is kept; all 0 when S starts afresh). A loop of 3 bits."""
        sch = self._sch
        c = st.ctl[sch.E - 1]
        d = delay(m, dm, sch.E - 1 - sch.U, name="dm")
        fresh = Signal(init=1)            # the next first-pass sub-beat starts a row
        p = Signal(P_WIDTH, reset_less=True)
        hot_lo = Signal(4, init=1, name="p_hot_lo", reset_less=True)
        hot_hi = Signal(2, init=1, name="p_hot_hi", reset_less=True)
        step = Signal(len(_A_STEPS), reset_less=True)
        q = Signal(P_WIDTH + 3)
        start = fresh | d[5]              # dM >= 32 empties S < 2**32
        m.d.comb += q.eq(p + d[:5])
        p_next = Mux(start, 0, q[:P_WIDTH])
        # Timing: whether stage E - 1 holds a first pass is a register decoded a stage ahead,
        # so these registers' enable is a register.
        first = Signal(name="sum_fp")
        m.d.sync += first.eq(st.first_pass(sch.E - 2, EpOp.SOFTMAX))
        with m.If(first):
            m.d.sync += [fresh.eq(c.last), p.eq(p_next),
                         step.eq(Mux(start, 0, Cat(q[P_WIDTH:] == j
                                                    for j in range(len(_A_STEPS))))),
                         hot_lo.eq(Cat(p_next[:2] == j for j in range(4))),
                         hot_hi.eq(Cat(~p_next[2], p_next[2]))]
        return p, hot_lo, hot_hi, step
