"""The back of the epilogue pipeline, stages E + 1 to the last: the second passes take their
row's statistics, and every op's last multiply.

Per lane, stage by stage (the names are :class:`~.schedule.Schedule`'s)::

    BIND    a second-pass beat takes its row's statistics from its slot
    (+1)    the operands in the multipliers' input registers (a timing choice: the route
            from BIND ends at a register, not at a DSP's multiply)
    MUL2    SOFTMAX R * e | LAYERNORM v * (N * rsq): two tiles
    PSUM2   the tiles added
    SUB     LAYERNORM: - S1 * rsq, making (N * v - S1) * rsq
    SHC2 SHF2  rounding shift by 5 + k | 11 + j
    RND2    SOFTMAX: rounding add, limits; LAYERNORM z
    MUL3    SOFTMAX done (clamp 0..4095) | GELU z * phi | LAYERNORM z * gamma: two tiles
    PSUM3   the tiles added
    SHC3    GELU: rshift_round by 24, limits; LAYERNORM >> (gshift - 8), coarse
    SHF3    GELU done (sat8); LAYERNORM ... fine, and (beta + 128) - 2**15, + 2**15
    ADD3    LAYERNORM y = h + beta + 128, compared with -2**15 and 2**15 beside the add
    (out)   LAYERNORM sat8(>> 8), pads 0; every lane to the outlet

LayerNorm's last rounding is rebuilt without golden's ``beta << (gshift - 8)``: with
``h = floor(z * gamma / 2**(gshift - 8))``, ``rshift_round(z * gamma + beta * 2**(gshift - 8),
gshift) == (h + beta + 128) >> 8`` exactly, since ``beta * 2**(gshift - 8)`` is a multiple of
the bits that the first shift drops. LAYERNORM's ``gshift`` is at least 8.
"""

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from ...golden.intops import PROB_SCALE, RECIP_SHIFT
from ..dsp import KEEP
from ..isa import EpOp, ParamsLayout
from ..lut import choice_plus_one
from ..pipeline import delay
from .arith import INT8, TILE, at_least, at_most, coarse, fine, pick, product, round_parts
from .lanes import Stages
from .schedule import (E_LANE, BindSelect, Schedule, SlotStats, lane_layout, row_layout,
                       stage_signature)

__all__ = ["Back"]

#: LAYERNORM's y at which sat8(y >> 8) saturates: 127 from 2**15 up, -128 below -2**15.
_Y_LIMIT = 1 << 15


class Back(wiring.Component):
    """Stages E + 1 to ``depth - 1`` of every lane, and the sub-beat's results.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    i_lanes : In(stage_signature(schedule, lane_layout(schedule, E_LANE)))
        Stage E.
    i_bind : In(ArrayLayout(BindSelect, lanes))
        Stage E's sub-beat's op and slot, a copy a lane (:class:`~.exponent.Exponent`).
    i_slots : In(ArrayLayout(SlotStats, 2))
        The row statistics (:class:`~.finalize.Finalize`).
    params : In(ParamsLayout)
        ``shift1`` (LAYERNORM's gshift).
    o_row : Out(stage_signature(schedule, row_layout(cfg, lanes)))
        The last stage's valid bit and tags, and the results of its sub-beat.
    o_busy_next : Out(1)
        A sub-beat will be in one of stages E + 1 to ``depth - 1`` next cycle.
    """

    def __init__(self, cfg):
        self._sch = sch = Schedule.of(cfg)
        super().__init__({
            "i_lanes": In(stage_signature(sch, lane_layout(sch, E_LANE))),
            "i_bind": In(data.ArrayLayout(BindSelect, sch.lanes)),
            "i_slots": In(data.ArrayLayout(SlotStats, 2)),
            "params": In(ParamsLayout),
            "o_row": Out(stage_signature(sch, row_layout(cfg, sch.lanes))),
            "o_busy_next": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        sch = self._sch
        st = Stages(m, sch, self.i_lanes, sch.E + 1)
        st.wait(sch.BIND)                  # the lanes wait for BIND
        self._bind(m, st)
        operands = self._normalize(m, st, platform)
        self._scale(m, st, operands, platform)
        self._row(m, st)
        m.d.comb += self.o_busy_next.eq(st.busy_next())
        return m

    def _bind(self, m, st):
        """BIND: a second pass takes its row's statistics, into every lane."""
        sch, slots = self._sch, self.i_slots
        k, p = sch.BIND, st.lanes[sch.BIND - 1]
        # Timing: each lane chooses by its own copy of the op and slot (`i_bind`, carried
        # through the stages where the lanes wait), so no one net reaches the statistics
        # registers of every lane.
        chosen = [delay(m, sel, k - 1 - sch.E, name=f"bind{i}", attrs=KEEP)
                  for i, sel in enumerate(self.i_bind)]
        # SOFTMAX's operands change places: R (17 bits) is the signed 18-bit operand of both
        # tiles and e (22 bits) is cut in two, as N * rsq is.
        s = st(k, a=signed(24),           # R | v
               mb=unsigned(30),           # e | N*rsq
               sb=signed(46),             # 0 | S1*rsq
               lsh=unsigned(6))           # 5 + k | 11 + j
        for i, sel in enumerate(chosen):
            with m.If(sel.softmax):
                m.d.sync += [s[i].a.eq(Mux(sel.slot, slots[1].r, slots[0].r)),
                             s[i].mb.eq(p[i].a), s[i].sb.eq(0),
                             s[i].lsh.eq(RECIP_SHIFT + Mux(sel.slot, slots[1].k, slots[0].k))]
            with m.Else():
                m.d.sync += [s[i].mb.eq(Mux(sel.slot, slots[1].nr, slots[0].nr)),
                             s[i].sb.eq(Mux(sel.slot, slots[1].sr, slots[0].sr)),
                             s[i].lsh.eq(11 + Mux(sel.slot, slots[1].j, slots[0].j))]

    def _normalize(self, m, st, platform):
        """MUL2 (and its input registers), PSUM2, SUB, SHC2, SHF2, RND2: R * e or (N * v - S1)
        * rsq, rounded. Returns, per lane, what RND2's ``a`` and ``carry.coef.m`` are loaded
        with (MUL3's operands)."""
        sch, lanes = self._sch, range(self._sch.lanes)
        k = sch.MUL2
        p = st.lanes[k - 2]
        st(k - 1, a=signed(24), sb=signed(46), lsh=unsigned(6))
        s = st(k, a=signed(24), t0=signed(35), t1=signed(31), sb=signed(46), lsh=unsigned(6))
        for i in lanes:
            r_or_v, mb = p[i].a[:TILE + 1].as_signed(), p[i].mb
            m.d.comb += [
                s[i].t0.eq(product(m, r_or_v, mb[:TILE], name=f"mul2_t0{i}", platform=platform,
                                   input_registers=True)),
                s[i].t1.eq(product(m, r_or_v, mb[TILE:], name=f"mul2_t1{i}", platform=platform,
                                   input_registers=True)),
            ]
        p, s = s, st(k + 1, a=signed(24), d=signed(47), sb=signed(46), lsh=unsigned(6))
        for i in lanes:
            m.d.sync += s[i].d.eq(p[i].t0 + (p[i].t1 << TILE))
        p, s = s, st(k + 2, a=signed(24), d=signed(48), lsh=unsigned(6))
        for i in lanes:
            m.d.sync += s[i].d.eq(p[i].d - p[i].sb)
        p, s = s, st(k + 3, a=signed(24), d=signed(49), lshf=unsigned(3))
        for i in lanes:
            m.d.sync += [s[i].d.eq(coarse(p[i].d << 1, p[i].lsh)), s[i].lshf.eq(p[i].lsh[:3])]
        p, s = s, st(k + 4, a=signed(24), d=signed(49))
        for i in lanes:
            m.d.sync += s[i].d.eq(fine(p[i].d, p[i].lshf))
        is_ln = st.decoded(k + 4, lambda ctl: ctl.op == EpOp.LAYERNORM, name="rnd2_ln")
        p, s = s, st(k + 5, a=signed(24), over=1, under=1, r=signed(PROB_SCALE.bit_length() + 1))
        operands = []
        for i in lanes:
            d = p[i].d
            m.d.sync += Cat(s[i].over, s[i].under, s[i].r).eq(
                Cat(*round_parts(d, 0, PROB_SCALE)))
            # LAYERNORM's z = (d + 1) >> 1 (|z| < 2**18), else a = (2a + 1) >> 1. Timing: the
            # choice made in the add's carry chain, so the route to MUL3's DSPs leaves the chain.
            z = Signal(signed(24), name=f"mul3_z{i}")
            m.d.comb += z.eq(choice_plus_one(m, is_ln[i], d[:25], Cat(Const(0, 1), p[i].a),
                                             platform=platform, name=f"mul3_z{i}")[1:])
            m.d.sync += s[i].a.eq(z)
            operands.append((z, p[i].carry.coef.m))                   # carry is copied
        return operands

    def _scale(self, m, st, operands, platform):
        """MUL3, PSUM3, SHC3, SHF3, ADD3: SOFTMAX and GELU done; LAYERNORM z * gamma + beta.
        ``operands``: per lane, what RND2's ``a`` and ``carry.coef.m`` are loaded with.

        Timing: MUL3's DSPs take those values into their own input registers in the cycle
        RND2 does, so the route from the lane's registers across the chip ends at a register
        and the product is a cycle after RND2 all the same."""
        sch, lanes, prm = self._sch, range(self._sch.lanes), self.params
        k = sch.MUL3
        # Whether a lane's result is final here (SOFTMAX after RND2, GELU after SHF3): a
        # register a lane, decoded a stage ahead (as the front's and the row's).
        sm_done = st.decoded(k - 1, lambda ctl: ctl.op == EpOp.SOFTMAX, name="sm_done")
        p, s = st.lanes[k - 1], st(k, t0=signed(36), t1=signed(25))
        for i in lanes:
            z, coef = operands[i]
            m.d.comb += [
                s[i].t0.eq(product(m, z[:TILE], coef, name=f"mul3_t0{i}", platform=platform,
                                   input_registers=True)),
                s[i].t1.eq(product(m, z[TILE:].as_signed(), coef, name=f"mul3_t1{i}",
                                   platform=platform, input_registers=True)),
            ]
            with m.If(sm_done[i]):                                    # SOFTMAX done
                m.d.sync += s[i].carry.out.eq(
                    Mux(st.ctl[k - 1].lane_valid[i],
                        pick(p[i].over, p[i].under, p[i].r, 0, PROB_SCALE), 0))
        p, s = s, st(k + 1, q=signed(42), gs=unsigned(6))
        for i in lanes:
            m.d.sync += [s[i].q.eq(p[i].t0 + (p[i].t1 << TILE)),
                         s[i].gs.eq(Mux(prm.shift1 >= 8, prm.shift1 - 8, 0))]  # LN gshift - 8
        p, s = s, st(k + 2, q=signed(42), over=1, under=1, r=signed(8), gsf=unsigned(3))
        for i in lanes:
            q = p[i].q
            # GELU: sat8(rshift_round(q, 24)); the limits compared on q beside a narrow add
            m.d.sync += [
                s[i].q.eq(coarse(q, p[i].gs)), s[i].gsf.eq(p[i].gs[:3]),
                s[i].over.eq(at_least(q, (1 << 31) - (1 << 23))),
                s[i].under.eq(at_most(q, -(1 << 31) - (1 << 23) - 1)),
                s[i].r.eq((q[:32] + (1 << 23))[24:32]),
            ]
        gelu_done = st.decoded(k + 2, lambda ctl: ctl.op == EpOp.GELU, name="gelu_done")
        p, s = s, st(k + 3, q=signed(42), bhi=signed(18), blo=signed(18))
        for i in lanes:
            beta = p[i].carry.coef.beta
            m.d.sync += [s[i].q.eq(fine(p[i].q, p[i].gsf)),
                         s[i].bhi.eq(beta - _Y_LIMIT), s[i].blo.eq(beta + _Y_LIMIT)]
            with m.If(gelu_done[i]):                                  # GELU done
                m.d.sync += s[i].carry.out.eq(pick(p[i].over, p[i].under, p[i].r, *INT8))
        # LAYERNORM's y = q + beta, and its saturation limits compared beside the add, each as
        # the sign of a sum of registers: sat8(y >> 8) is 127 when y >= 2**15 and -128 when
        # y < -2**15, so the output row is a choice of registers (a timing choice).
        p, s = s, st(k + 4, y=signed(43), over=1, under=1)
        for i in lanes:
            q = p[i].q
            m.d.sync += [s[i].y.eq(q + p[i].carry.coef.beta),
                         s[i].over.eq(~(q + p[i].bhi)[-1]), s[i].under.eq((q + p[i].blo)[-1])]
        assert k + 4 == sch.depth - 1, (k, sch.depth)

    def _row(self, m, st):
        """The results of the last stage: LAYERNORM sat8(y >> 8) (pads 0), else ``carry.out``."""
        k = self._sch.depth - 1
        c, last, row = st.ctl[k], st.lanes[k], self.o_row.payload.lanes
        # Whether a lane's row takes LAYERNORM's result, a register a lane, as the output
        # FIFO's data has no register before it.
        takes = st.decoded(k, lambda ctl: ctl.op == EpOp.LAYERNORM, name="row_ln")
        for i in range(self._sch.lanes):
            y = pick(last[i].over, last[i].under, last[i].y[8:16].as_signed(), *INT8)
            ln = Mux(c.lane_valid[i], y, 0)
            m.d.comb += row[i].eq(Mux(takes[i], ln, last[i].carry.out))
        m.d.comb += [self.o_row.valid.eq(st.valid[k]), self.o_row.payload.ctl.eq(c)]
