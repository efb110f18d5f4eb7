"""The front of the epilogue pipeline, stages ADD to PRE: every op's first pass through the
lanes, up to the values the row statistics and the second pass work on.

Per lane, stage by stage (the names are :class:`~.schedule.Schedule`'s)::

    IN      the beat, registered (by the intake)
    ADD     x' = acc + bias (sat32 for SOFTMAX); the operands of the front multipliers
    MULI    the operands in the multipliers' input registers (a timing choice: the route from
            ADD's add and saturation ends at a register, not at a DSP's multiply)
    MUL     x' * mul (REQUANT, GELU gmul, SOFTMAX, LAYERNORM xmul) | x' * omul (GELU),
            r * rmul (LAYERNORM): four tiles
    PSUM    the tiles added
    SUM     v, the field the op rounds: LAYERNORM x' * xmul + r * rmul, GELU x' * omul (z),
            the others the first product; its shift amount
    SHC SHF rounding shifts of v and of GELU's w (x' * gmul), coarse (multiples of 8) then fine
            (see :mod:`~.arith`); SHF compares w with the PHI index's limits
    RND     the rounding add, narrow, and the saturation limits compared beside it
    SAT     REQUANT done (sat8); GELU z = clamp24, PHI lookup at clamp(t + 257, 0, 513);
            SOFTMAX t = clamp24 (pads: -2**23); LAYERNORM v = sat16 (pads: 0)
    PRE     PHI registered; SOFTMAX ceil(t / 4096), and t compared with the next lane's;
            LAYERNORM v * v

Each lane has a PHI table (514 x 17: golden's table with its two saturations, 0 and 2**16, at
the ends).

Parameter ranges: every scale is a 16-bit multiplier (golden's convention) except LAYERNORM's
``rmul``, which is 32 bits: GELU's ``omul`` is the low 16 bits of ``mul1``. Shifts of 63 round as
the formula says (``2**63 >> 1`` is added); golden's int64 ``1 << 63`` overflows there.
"""

from functools import reduce

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from ...golden.intops import PHI_TABLE, SOFTMAX_FRAC
from ..isa import PMEM_SHIFT_BITS, EpOp, ParamsLayout
from .arith import (INT8, INT16, INT24, biased, coarse, fine, greater, no_borrow, pick, product,
                    round_limits, rounded)
from .lanes import Stages
from .schedule import PRE_LANE, Schedule, beat_layout, lane_layout, stage_signature

__all__ = ["Front", "PHI_ROM"]

#: golden's PHI lookup with its two saturations folded in: index clamp(t + 257, 0, 513) reads 0
#: (t < -256), PHI_TABLE[t + 256], or 2**16 (t >= 256).
PHI_ROM = [0, *PHI_TABLE, 1 << 16]


class Front(wiring.Component):
    """Stages ADD to PRE of every lane.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    i_sub : In(stage_signature(schedule, beat_layout(cfg, lanes)))
        Stage IN.
    i_sub_op : In(ArrayLayout(len(EpOp), lanes))
        Stage IN's op, one-hot, a register per lane (:class:`~.intake.Intake`).
    params : In(ParamsLayout)
    o_lanes : Out(stage_signature(schedule, lane_layout(schedule, PRE_LANE)))
        Stage PRE. REQUANT's result is in ``carry.out`` (RAW's accumulator value too),
        LAYERNORM's gamma and beta + 128 in ``carry.coef``, GELU's phi in ``phi`` (for
        ``carry.coef.m`` a stage later: :class:`~.stats.RowStats`).
    o_busy_next : Out(1)
        A sub-beat will be in one of stages ADD to PRE next cycle.
    """

    def __init__(self, cfg):
        self._cfg = cfg
        self._sch = sch = Schedule.of(cfg)
        super().__init__({
            "i_sub": In(stage_signature(sch, beat_layout(cfg, sch.lanes))),
            "i_sub_op": In(data.ArrayLayout(len(EpOp), sch.lanes)),
            "params": In(ParamsLayout),
            "o_lanes": Out(stage_signature(sch, lane_layout(sch, PRE_LANE))),
            "o_busy_next": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        sch = self._sch
        st = Stages(m, sch, self.i_sub, sch.ADD, copy=False)
        self._add(m, st)
        self._multiply(m, st, platform)
        self._shift_round(m, st)
        phi, v = self._saturate(m, st)
        self._pre(m, st, phi, v, platform)
        st.drive(self.o_lanes)
        m.d.comb += self.o_busy_next.eq(st.busy_next())
        return m

    def _add(self, m, st):
        """ADD: x' = acc + bias; the operands of the front multipliers."""
        prm, k = self.params, self._sch.ADD
        inb = self.i_sub.payload.lanes
        # Every multiplier operand and shift amount is a register of its own lane, even where
        # the value is the same for all lanes: no register drives the whole row's DSPs.
        s = st(k, x=signed(33), mul=unsigned(16), m2lo=signed(17), m2hi=signed(17),
               b2lo=unsigned(16), b2hi=unsigned(16), sh=unsigned(6), sh1=unsigned(6))
        # The second front multiplier: GELU x' * omul (x' in 16-bit halves), LayerNorm r * rmul
        # (rmul in 16-bit halves).
        for i in range(self._sch.lanes):
            op = self.i_sub_op[i]
            per_column = op[EpOp.REQUANT.value] & prm.flags[0]
            xb = Signal(signed(33), name=f"xb{i}")
            pm = inb.pm[i]
            m.d.comb += xb.eq(inb.acc[i] + pm.bias.as_signed())
            # sat32: a 33-bit sum is out of range exactly when its top two bits differ
            sat32 = Mux(xb[32] != xb[31], Mux(xb[32], -(1 << 31), (1 << 31) - 1), xb)
            gelu = op[EpOp.GELU.value]
            m.d.sync += [
                s[i].x.eq(Mux(op[EpOp.SOFTMAX.value], sat32, xb)),
                s[i].mul.eq(Mux(per_column, pm.p1, prm.mul0)),
                s[i].sh.eq(Mux(per_column, pm.p2[:PMEM_SHIFT_BITS], prm.shift0)),
                s[i].m2lo.eq(Mux(gelu, xb[:16], inb.res[i])),
                s[i].m2hi.eq(Mux(gelu, xb[16:].as_signed(), inb.res[i])),
                s[i].b2lo.eq(prm.mul1[:16]),
                s[i].b2hi.eq(Mux(gelu, prm.mul1[:16], prm.mul1[16:])),
                s[i].sh1.eq(prm.shift1),
            ]
            with m.If(op[EpOp.LAYERNORM.value]):
                m.d.sync += [s[i].carry.coef.m.eq(pm.p1.as_signed()),
                             s[i].carry.coef.beta.eq(pm.p2.as_signed() + 128)]
            with m.Else():
                m.d.sync += s[i].carry.out.eq(inb.acc[i])

    def _multiply(self, m, st, platform):
        """MULI, MUL: four 17 x 16 products, the operands registered in the DSPs; PSUM: the
        products of the two multipliers; SUM: the field the op rounds (LayerNorm's with the
        residual term)."""
        sch = self._sch
        p = st.lanes[sch.MULI - 1]
        st(sch.MULI, sh=unsigned(6), sh1=unsigned(6))
        s = st(sch.MUL, p1lo=unsigned(32), p1hi=signed(33), p2lo=signed(33), p2hi=signed(33),
               sh=unsigned(6), sh1=unsigned(6))
        for i in range(sch.lanes):
            m.d.comb += [
                s[i].p1lo.eq(product(m, p[i].x[:16], p[i].mul, name=f"mul_p1lo{i}",
                                     platform=platform, input_registers=True)),
                s[i].p1hi.eq(product(m, p[i].x[16:].as_signed(), p[i].mul, name=f"mul_p1hi{i}",
                                     platform=platform, input_registers=True)),
                s[i].p2lo.eq(product(m, p[i].m2lo, p[i].b2lo, name=f"mul_p2lo{i}",
                                     platform=platform, input_registers=True)),
                s[i].p2hi.eq(product(m, p[i].m2hi, p[i].b2hi, name=f"mul_p2hi{i}",
                                     platform=platform, input_registers=True)),
            ]
        p, s = s, st(sch.PSUM, a=signed(49), b=signed(49), sh=unsigned(6), sh1=unsigned(6))
        for i in range(sch.lanes):
            m.d.sync += [s[i].a.eq(p[i].p1lo + (p[i].p1hi << 16)),
                         s[i].b.eq(p[i].p2lo + (p[i].p2hi << 16))]
        # The field each op rounds, picked here (GELU: z's product b; the others: a, which
        # LAYERNORM adds b to) with its shift amount, by a lane's own registers of the op.
        ops = st.decoded(sch.SUM - 1, lambda ctl: Cat(ctl.op == EpOp.GELU,
                                                      ctl.op == EpOp.LAYERNORM), 2, name="sum_op")
        p, s = s, st(sch.SUM, a=signed(49), v=signed(50), sh=unsigned(6), shv=unsigned(6))
        for i, op in enumerate(ops):
            gelu, ln = op[0], op[1]
            m.d.sync += [s[i].v.eq(Mux(gelu, 0, p[i].a) + Mux(gelu | ln, p[i].b, 0)),
                         s[i].shv.eq(Mux(gelu, p[i].sh1, p[i].sh))]

    def _shift_round(self, m, st):
        """SHC, SHF: 2v >> shv and 2a >> sh (GELU's w); RND: the rounding add, and the
        saturation limits compared beside it."""
        sch = self._sch
        p, s = st.lanes[sch.SHC - 1], st(sch.SHC, a=signed(50), v=signed(51), shf=unsigned(3),
                                         shfv=unsigned(3), hi_at=signed(18), lo_at=signed(18))
        for i in range(sch.lanes):
            f = p[i].sh[:3]
            m.d.sync += [s[i].a.eq(coarse(p[i].a << 1, p[i].sh)),
                         s[i].v.eq(coarse(p[i].v << 1, p[i].shv)),
                         s[i].shf.eq(f), s[i].shfv.eq(p[i].shv[:3]),
                         s[i].hi_at.eq(Const(511, 10) << f),
                         s[i].lo_at.eq((Const(-513, signed(11)) << f) - 1)]
        # v in offset binary, and the op's limits (round_limits of its range) in registers of
        # each lane's own, decoded a stage ahead: each flag is one unsigned compare of two
        # registers, a carry chain's carry out (a timing choice); one add at the widest range
        # serves every op (the narrower results are its low bits).
        width = len(s[0].v)
        # GELU's PHI index is clamp(t + 257, 0, 513) (see PHI_ROM): t = (w + 1) >> 1 for w =
        # 2a >> sh of SHF, so t + 257 = (w + 515) >> 1, and its limits are w >= 511 and w <=
        # -514. Timing: those are compared here, on SHC's a against the limits shifted left
        # by SHF's shift (a >> f >= 511 exactly when a >= 511 << f, a >> f <= -514 when
        # a <= (-513 << f) - 1), each a carry chain into a register.
        p, s = s, st(sch.SHF, a=signed(50), v=unsigned(width), ihi=1, ilo=1)
        for i in range(sch.lanes):
            m.d.sync += [s[i].a.eq(fine(p[i].a, p[i].shf)),
                         s[i].v.eq(biased(fine(p[i].v, p[i].shfv), width)),
                         s[i].ihi.eq(~greater(p[i].hi_at, p[i].a)),
                         s[i].ilo.eq(~greater(p[i].a, p[i].lo_at))]
        ranges = {EpOp.REQUANT: INT8, EpOp.GELU: INT24, EpOp.SOFTMAX: INT24,
                  EpOp.LAYERNORM: INT16}
        over_at, under_at = (
            st.decoded(sch.RND - 1, lambda ctl, j=j: reduce(
                lambda acc, op: Mux(ctl.op == op, round_limits(*ranges[op])[j], acc), ranges, 0),
                signed(26), name=name)
            for j, name in enumerate(("over_at", "under_at")))
        p, s = s, st(sch.RND, over=1, under=1, r=signed(25), ir=unsigned(10), ihi=1, ilo=1)
        for i in range(sch.lanes):
            v, w = p[i].v, p[i].a
            m.d.sync += [s[i].over.eq(no_borrow(v, biased(over_at[i], width))),
                         s[i].under.eq(no_borrow(biased(under_at[i], width), v)),
                         s[i].r.eq(rounded(v, *INT24))]
            m.d.sync += s[i].ir.eq((w[:11] + 515)[1:11])          # ihi, ilo: copied

    def _saturate(self, m, st):
        """SAT: the saturated results; the PHI lookup. Returns the PHI read ports' data, and
        per lane what ``a`` is loaded with for LAYERNORM (v)."""
        k = self._sch.SAT
        c, p, s = st.ctl[k - 1], st.lanes[k - 1], st(k, a=signed(24))
        phi, vs = [], []
        for i in range(self._sch.lanes):
            over, under, r, lane_valid = p[i].over, p[i].under, p[i].r, c.lane_valid[i]
            v = Signal(signed(16), name=f"sat_v{i}")
            m.d.comb += v.eq(Mux(lane_valid, pick(over, under, r[:16].as_signed(), *INT16), 0))
            vs.append(v)
            with m.Switch(c.op):
                with m.Case(EpOp.REQUANT):
                    m.d.sync += s[i].carry.out.eq(pick(over, under, r[:8].as_signed(), *INT8))
                with m.Case(EpOp.GELU):
                    m.d.sync += s[i].a.eq(pick(over, under, r, *INT24))                 # z
                with m.Case(EpOp.SOFTMAX):
                    m.d.sync += s[i].a.eq(Mux(lane_valid, pick(over, under, r, *INT24),
                                              INT24[0]))                                 # t
                with m.Case(EpOp.LAYERNORM):
                    m.d.sync += s[i].a.eq(v)                                             # v
            rom = m.submodules[f"phi{i}"] = memory.Memory(shape=unsigned(17), depth=len(PHI_ROM),
                                                          init=PHI_ROM)
            port = rom.read_port()
            m.d.comb += port.addr.eq(Mux(p[i].ihi, 513, Mux(p[i].ilo, 0, p[i].ir)))
            phi.append(port.data)
        return phi, vs

    def _pre(self, m, st, phi, v, platform):
        """PRE: PHI registered, ceil(t / 4096) and the compare of t by lane pairs, v * v.
        ``v``: per lane, what SAT's ``a`` is loaded with for LAYERNORM.

        Timing: the v * v DSPs take ``v`` into their own input registers in the cycle SAT
        does (only LAYERNORM reads ``v2``), so the route from a lane's logic to a DSP ends at
        a register, as MUL3's (:mod:`~.back`)."""
        k = self._sch.PRE
        c, p, s = st.ctl[k - 1], st.lanes[k - 1], st(k, **PRE_LANE)
        for i in range(self._sch.lanes):
            m.d.sync += s[i].c.eq((p[i].a + (1 << SOFTMAX_FRAC) - 1) >> SOFTMAX_FRAC)
            if i % 2 == 0:
                # the max tree's first level as a compare of registers, beside the ceiling
                # rather than after it (a timing choice)
                m.d.sync += s[i].gt.eq(greater(p[i].a, p[i + 1].a))
            m.d.comb += s[i].v2.eq(product(m, v[i], v[i], name=f"pre_v2{i}", platform=platform,
                                           input_registers=True))
            # Block RAM straight into a register of its own, loaded every cycle: an ECP5 flow
            # moves it into the RAM as its output register (fpga/ramreg.py), and the choice of
            # the carry waits a stage (RowStats), a timing choice.
            m.d.sync += [s[i].phi.eq(phi[i]), s[i].gelu.eq(c.op == EpOp.GELU)]
