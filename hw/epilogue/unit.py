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
its statistics are final (the unit then holds ``i_beat.ready`` low). ``last`` marks the last
beat of a row in either pass. ``lane_valid`` marks the columns before ``row_len``.

The parameters (``params``) are written by SET instructions, which the store unit only lets
through when this unit is idle, so they are constant while beats flow.

Lanes
-----
The pipeline has ``cfg.ep_lanes`` lanes. When that is fewer than ``cols`` (``ratio =
cols / lanes`` > 1), an accepted beat enters as ``ratio`` sub-beats of ``lanes`` columns, one a
cycle, and the input is closed until the last has entered; only that sub-beat carries ``last``,
so the row statistics and the SOFTMAX running maximum advance a sub-beat at a time (golden's
``softmax(..., cols=lanes)``). The output collects a beat's sub-beats and writes the FIFO row
with the last. Each lane costs its registers, its two tables and nine MULT18X18D, which is why
an FPGA build may want fewer lanes than columns.

Implementation
--------------
One pipeline of :attr:`Schedule.depth` stages serves every op, with the same latency for all,
so beats leave in the order they came. The pipeline never stalls: an output FIFO of
:attr:`Schedule.fifo_depth` rows takes whatever reaches its end, and a beat that will produce an
output is only accepted while a *credit* (a FIFO row not yet promised to a beat inside) is left.
Every stage is about one multiply, or one add with a comparison or a mux beside it. Every
product is cut into *tiles* of at most 17 x 18 bits (one MULT18X18D each) with registered
operands and a registered product; adding the tiles takes the next stage. Operands and shift
amounts that are the same for the whole row are still copied into every lane's registers, so
no register drives the DSPs of all lanes, and every table's block RAM output goes straight into
a register (its clock-to-output is most of a 150 MHz cycle on ECP5).

Tables, from :mod:`bertaccel.golden.intops`: per lane, EXP2 (256 x 16 bits) and PHI (514 x 17:
golden's table with its two saturations, 0 and 2**16, at the ends); shared, RECIP (1024 x 23)
and RSQRT (1024 x 19, its 768 entries and zeros for D = 0).

Per lane, stage by stage (the names are :class:`Schedule`'s; ``L = log2(lanes)``)::

    IN      the beat, registered
    ADD     x' = acc + bias (sat32 for SOFTMAX); the operands of the front multipliers
    MUL     x' * mul (REQUANT, GELU gmul, SOFTMAX, LAYERNORM xmul) | x' * omul (GELU),
            r * rmul (LAYERNORM): four tiles
    PSUM    the tiles added
    SUM     LAYERNORM: x' * xmul + r * rmul
    SHC SHF rounding shift, coarse (multiples of 8) then fine (see epilogue_ops)
    RND     the rounding add, narrow, and the saturation limits compared beside it
    SAT     REQUANT done (sat8); GELU z = clamp24, PHI lookup at clamp(t + 257, 0, 513);
            SOFTMAX t = clamp24 (pads: -2**23); LAYERNORM v = sat16 (pads: 0)
    PRE     PHI registered; SOFTMAX ceil(t / 256); LAYERNORM v * v
    L x     trees over the lanes (first passes): SOFTMAX max, LAYERNORM sum v and sum v * v
    ACC     SOFTMAX running max M (a 1-cycle loop: subtract, mux); LAYERNORM row sums
    U       SOFTMAX u = 256 * M - t (first pass: M so far; second pass: the row's final M)
    EXP     EXP2 lookup
    EREG    ... registered (every table: block RAM has no logic after it)
    E       e = EXP2[u & 255] >> (u >> 8), 0 from a shift of 16 and in pad lanes
    L x     tree of sum e, then the loop S = (S >> dM) + sum e (SLOOP: shift, add)
    BIND    a second-pass beat takes its row's statistics from its slot
    MUL2    SOFTMAX e * R | LAYERNORM v * (N * rsq): two tiles
    PSUM2   the tiles added
    SUB     LAYERNORM: - S1 * rsq, making (N * v - S1) * rsq
    SHC2 SHF2  rounding shift by 16 + k | 11 + j
    RND2    SOFTMAX: rounding add, limits; LAYERNORM z
    MUL3    SOFTMAX done (clamp 0..127) | GELU z * phi | LAYERNORM z * gamma: two tiles
    PSUM3   the tiles added
    SHC3    GELU: rshift_round by 24, limits; LAYERNORM >> (gshift - 8), coarse
    SHF3    GELU done (sat8); LAYERNORM ... fine
    ADD3    LAYERNORM + beta + 128
    (out)   LAYERNORM sat8(>> 8), pads 0; every lane into the FIFO

LayerNorm's last rounding is rebuilt without golden's ``beta << (gshift - 8)``: with
``h = floor(z * gamma / 2**(gshift - 8))``, ``rshift_round(z * gamma + beta * 2**(gshift - 8),
gshift) == (h + beta + 128) >> 8`` exactly, since ``beta * 2**(gshift - 8)`` is a multiple of
the bits that the first shift drops.

Row statistics live in two *slots*, taken in turn by the rows' first passes and read in turn by
their second passes. At a row's last first-pass beat a finalize pipeline computes, for SOFTMAX,
``k`` (a priority encoder), ``mant`` and ``R = RECIP_TABLE[mant - 1024]``; for LAYERNORM,
``D = N*S2 - S1**2 + eps_n2``, ``j`` (a priority encoder), ``m`` and ``rsq = RSQRT_TABLE[m -
256]``, and then ``N * rsq`` and ``S1 * rsq``, so the per-lane work is one multiply and one
subtract. The pipeline never stalls, so a slot is final a fixed number of cycles after its row's
last first-pass beat was accepted, and the input holds back a second-pass beat of that slot
until it would reach BIND no earlier (:attr:`Schedule.gap` cycles). In the documented pass order
a second pass follows at least one other pass of its STORE, and beats enter ``ratio`` cycles
apart, so rows of ``ceil(gap / ratio) - 1`` strips or more (at most 7 for every preset) never
wait; only a STORE of one row does.

Parameter ranges: every scale is a 16-bit multiplier (golden's convention) except LAYERNORM's
``rmul``, which is 32 bits: GELU's ``omul`` is the low 16 bits of ``mul1``. ``row_len`` is at
most :data:`bertaccel.golden.intops.MAX_ROW` (its low 11 bits are ``N``), LAYERNORM's
``gshift`` is at least 8 and ``eps_n2`` below 2**62. Shifts of 63 round as the formula says
(``2**63 >> 1`` is added); golden's int64 ``1 << 63`` overflows there.
"""

from dataclasses import dataclass

from amaranth import Cat, Const, Module, Mux, Signal, Value, signed, unsigned
from amaranth.lib import data, fifo, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ...golden.intops import EXP2_TABLE, MAX_ROW, PHI_TABLE, RECIP_TABLE, RSQRT_TABLE
from ..dsp import product_register
from ..isa import EpOp, ParamsLayout, PmemWord
from ..pipeline import delay
from .arith import (
    TILE,
    clamp,
    coarse,
    fine,
    msb,
    pick,
    round_parts,
    sum_shifted,
    tiles,
    tree,
)

__all__ = ["Epilogue", "Schedule", "beat_layout"]


def beat_layout(cfg, lanes=None):
    """One strip of one output row, as the store unit sends it (``cols`` wide), or one
    sub-beat of it as it enters the pipeline (``lanes`` wide)."""
    lanes = cfg.cols if lanes is None else lanes
    return data.StructLayout({
        "acc":        data.ArrayLayout(signed(cfg.acc_width), lanes),
        "pm":         data.ArrayLayout(PmemWord, lanes),
        "res":        data.ArrayLayout(signed(cfg.in_width), lanes),
        "op":         EpOp,
        "second":     1,
        "last":       1,
        "lane_valid": lanes,
    })


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """Stage numbers of the epilogue pipeline for ``lanes`` lanes, taking each beat as
    ``ratio`` sub-beats of ``lanes`` columns.

    A beat accepted in cycle ``T`` has its sub-beat ``j`` in stage ``k`` during cycle
    ``T + 1 + j + k``; the logic of stage ``k`` reads stage ``k - 1``. The last stage is
    ``depth - 1``; what it computes is written into the output FIFO (with ``ratio > 1``, once
    the beat's last sub-beat is there).
    """
    lanes: int
    ratio: int = 1

    @classmethod
    def of(cls, cfg):
        """The schedule of ``cfg``'s epilogue."""
        return cls(lanes=cfg.ep_lanes, ratio=cfg.ep_ratio)

    @property
    def levels(self):
        """Levels of a reduction tree over the lanes."""
        return self.lanes.bit_length() - 1

    IN, ADD, MUL, PSUM, SUM, SHC, SHF, RND, SAT, PRE = range(10)

    @property
    def ACC(self):
        return self.PRE + self.levels + 1

    @property
    def U(self):
        return self.ACC + 1

    @property
    def EXP(self):
        return self.ACC + 2

    @property
    def EREG(self):
        return self.ACC + 3

    @property
    def E(self):
        return self.ACC + 4

    @property
    def SLOOP(self):
        """The rescaled-sum loop, after the tree over the e of stage E."""
        return self.E + self.levels + 1

    #: Cycles from the cycle a row's sums are final (in the ACC or SLOOP registers) to the
    #: first cycle its slot holds the statistics.
    SMX_FINALIZE = 4        # k, mant, RECIP, slot
    LN_FINALIZE = 12        # products, 2 sum levels, D, j, mant, RSQRT, its register, products,
                            # 2 sum levels, slot

    @property
    def BIND(self):
        # After E; and late enough that a row's statistics are final 8 cycles after its last
        # first-pass beat came in (see ``gap``), so rows of 8 strips never wait.
        return max(self.E + 1, self.SLOOP + 1 + self.SMX_FINALIZE - 8,
                   self.ACC + 1 + self.LN_FINALIZE - 8)

    @property
    def MUL2(self):
        return self.BIND + 1

    @property
    def MUL3(self):
        return self.BIND + 7

    @property
    def depth(self):
        """Register stages; a beat is in the FIFO ``depth + 1`` cycles after it was accepted."""
        return self.BIND + 12

    @property
    def gap(self):
        """Cycles from a row's last first-pass beat to the earliest accept of its second pass.

        A row's last sub-beat enters ``ratio - 1`` cycles after its beat's accept ``T``, so its
        sums are final from ``T + ratio - 1 + ACC + 1`` (LAYERNORM) or ``T + ratio - 1 + SLOOP
        + 1`` (SOFTMAX), its slot a finalize later, and the first sub-beat of a second-pass beat
        accepted in ``T'`` reads the slot in cycle ``T' + BIND``.
        """
        return {EpOp.SOFTMAX: max(1, self.ratio - 1 + self.SLOOP + 1 + self.SMX_FINALIZE
                                  - self.BIND),
                EpOp.LAYERNORM: max(1, self.ratio - 1 + self.ACC + 1 + self.LN_FINALIZE
                                    - self.BIND)}

    @property
    def latency(self):
        """Cycles from a beat's accept to its output on ``o_data`` (when the FIFO is empty)."""
        return self.depth + 2 + self.ratio - 1

    @property
    def fifo_depth(self):
        """Output FIFO rows, one credit each.

        A beat holds its credit from the cycle after its accept until the cycle its output
        leaves (``latency`` cycles; the count drops a cycle later), and beats are accepted at
        most one every ``ratio`` cycles, so ``ceil((latency + 1) / ratio)`` credits let a beat
        in whenever the input has room for one while the output is ready.
        """
        return -(-(self.latency + 1) // self.ratio)


#: Union of what a lane carries from ADD to the end: the output of an op that has finished
#: (RAW, REQUANT; GELU and SOFTMAX late), or the coefficients of the last multiply (GELU phi,
#: LAYERNORM gamma and beta + 128) -- never both at once.
_Carry = data.UnionLayout({
    "out":  signed(32),
    "coef": data.StructLayout({"m": signed(18), "beta": signed(17)}),
})

_INT24 = (-(1 << 23), (1 << 23) - 1)
_INT16 = (-(1 << 15), (1 << 15) - 1)
_INT8 = (-(1 << 7), (1 << 7) - 1)
#: golden's PHI lookup with its two saturations folded in: index clamp(t + 257, 0, 513) reads 0
#: (t < -256), PHI_TABLE[t + 256], or 2**16 (t >= 256).
_PHI_ROM = [0, *PHI_TABLE, 1 << 16]
#: Width of ``N`` (row_len) in the LayerNorm statistics.
_N_WIDTH = MAX_ROW.bit_length()


class Epilogue(wiring.Component):
    """Applies the op of each beat and sends output beats in order.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    i_beat : In(stream.Signature(beat_layout(cfg)))
    o_data : Out(stream.Signature(ArrayLayout(signed(acc_width), cols)))
        RAW beats carry the accumulator values; the int8 ops carry int8 results sign-extended.
    params : In(ParamsLayout)
    o_busy : Out(1)
        A beat is inside the unit.
    schedule : Schedule
        Stage numbers, depth, FIFO depth and the statistics gap (see the module docstring).
    """

    def __init__(self, cfg):
        self._cfg = cfg
        self.schedule = Schedule.of(cfg)
        super().__init__({
            "i_beat": In(stream.Signature(beat_layout(cfg))),
            "o_data": Out(stream.Signature(data.ArrayLayout(signed(cfg.acc_width), cfg.cols))),
            "params": In(ParamsLayout),
            "o_busy": Out(1),
        })

    def elaborate(self, platform):
        cfg, sch = self._cfg, self.schedule
        lanes, ratio, depth = sch.lanes, sch.ratio, sch.depth
        m = Module()
        prm = self.params
        beat = self.i_beat.payload

        def mul(a, b, name):
            """``a * b`` a cycle later: a register that is the DSP's own on an ECP5."""
            return product_register(m, a, b, platform=platform, name=name, reset_less=True)

        # -- control: valid and per-beat tags travel down the stages unchanged ------------------
        # `sub`: which sub-beat of its beat (only when there are several: no zero-width wires)
        Ctl = data.StructLayout({"op": EpOp, "second": 1, "last": 1, "lane_valid": lanes,
                                 "slot": 1, **({"sub": range(ratio)} if ratio > 1 else {})})
        valid = [Signal(name=f"s{k}_valid") for k in range(depth)]
        ctl = [Signal(Ctl, name=f"s{k}_ctl", reset_less=True) for k in range(depth)]
        for k in range(1, depth):
            m.d.sync += [valid[k].eq(valid[k - 1]), ctl[k].eq(ctl[k - 1])]

        def first_pass(k, op):
            return valid[k] & (ctl[k].op == op) & ~ctl[k].second

        # Per-lane registers of each stage: a struct per lane. A new stage copies the fields it
        # shares with the one before; the op logic then overrides what it computes.
        stages = [None] * depth

        def stage(k, **fields):
            fields.setdefault("carry", _Carry)
            stages[k] = Signal(data.ArrayLayout(data.StructLayout(fields), lanes),
                               name=f"s{k}", reset_less=True)
            if stages[k - 1] is not None:
                prev = stages[k - 1]
                shared = [name for name in fields
                          if name in dict(prev.shape().elem_shape.members)]
                for i in range(lanes):
                    for name in shared:
                        m.d.sync += getattr(stages[k][i], name).eq(getattr(prev[i], name))
            return stages[k]

        # -- input: credits, the statistics gap, slots ----------------------------------------
        out_fifo = m.submodules.out_fifo = fifo.SyncFIFOBuffered(
            width=self.o_data.payload.shape().size, depth=sch.fifo_depth)
        # Output beats accepted, not yet sent, as a thermometer code: `owed[i]` is "more than
        # i". A timing choice: the credit check and `o_busy` read one bit each, and each bit's
        # next value is a LUT of its neighbours, with no counter's adder and compares between
        # the accept and the registers (that path limited the 2x2 and 4x8 cores).
        owed = Signal(sch.fifo_depth)
        popped = self.o_data.valid & self.o_data.ready

        p1_slot = Signal()       # slot of the next first pass
        p2_slot = Signal()       # slot of the next second pass
        gap_max = max(sch.gap.values())
        wait = [Signal(range(gap_max + 1), name=f"wait{s}") for s in range(2)]
        # wait[s] == 0, in a register of its own (a timing choice, as `owed`)
        waited = [Signal(init=1, name=f"waited{s}") for s in range(2)]
        for counter, zero in zip(wait, waited):
            with m.If(counter != 0):
                m.d.sync += [counter.eq(counter - 1), zero.eq(counter == 1)]

        two_pass = (beat.op == EpOp.SOFTMAX) | (beat.op == EpOp.LAYERNORM)
        stats_ok = ~(two_pass & beat.second) | Mux(p2_slot, waited[1], waited[0])
        credit_ok = ~beat.second | ~owed[-1]
        # With ratio > 1 a beat is held while its sub-beats enter, one a cycle: `phase` is the
        # sub-beat entering next (0: none held, the input is open).
        phase = Signal(range(ratio)) if ratio > 1 else Const(0, 1)
        m.d.comb += self.i_beat.ready.eq(stats_ok & credit_ok & (phase == 0))
        accept = self.i_beat.valid & self.i_beat.ready

        owes = Signal()          # an accepted beat will produce an output beat
        m.d.comb += owes.eq(accept & beat.second)
        up, down = Cat(Const(1), owed[:-1]), Cat(owed[1:], Const(0))   # one more, one fewer
        with m.If(owes & ~popped):
            m.d.sync += owed.eq(up)
        with m.Elif(popped & ~owes):
            m.d.sync += owed.eq(down)

        inb = Signal(beat_layout(cfg, lanes), reset_less=True)
        slot = Mux(beat.second, p2_slot, p1_slot)

        def enter(src, j, *, is_valid, last, slot):
            """Register sub-beat ``j`` (lanes ``j * lanes`` on) of the full beat ``src`` into
            stage IN, with its tags."""
            def part(array, width):
                return Value.cast(array).word_select(j, lanes * width)
            m.d.sync += [
                valid[0].eq(is_valid),
                inb.eq(Cat(part(src.acc, cfg.acc_width), part(src.pm, PmemWord.size),
                           part(src.res, cfg.in_width), src.op, src.second, src.last,
                           part(src.lane_valid, 1))),
                ctl[0].op.eq(src.op), ctl[0].second.eq(src.second), ctl[0].last.eq(last),
                ctl[0].lane_valid.eq(part(src.lane_valid, 1)), ctl[0].slot.eq(slot),
            ]
            if ratio > 1:
                m.d.sync += ctl[0].sub.eq(j)

        # Timing: the beat and its tags are registered every cycle, whether accepted or not
        # (`valid` says which): `accept` drives no enable of these hundreds of flip-flops.
        if ratio == 1:
            enter(beat, 0, is_valid=accept, last=beat.last, slot=slot)
        else:
            # Sub-beat 0 enters from the input as a whole beat would; the beat is copied into
            # `hold` whenever the input is open (not on `accept`, for the same reason), and
            # sub-beats 1 .. ratio - 1 enter from there in the next cycles.
            hold = Signal(beat_layout(cfg), reset_less=True)
            hold_slot = Signal(reset_less=True)
            with m.If(phase == 0):
                m.d.sync += [hold.eq(beat), hold_slot.eq(slot)]
                enter(beat, 0, is_valid=accept, last=0, slot=slot)
                with m.If(accept):
                    m.d.sync += phase.eq(1)
            with m.Else():
                enter(hold, phase, is_valid=1, last=hold.last & (phase == ratio - 1),
                      slot=hold_slot)
                m.d.sync += phase.eq(phase + 1)   # wraps to 0 after ratio - 1 (a power of two)
        with m.If(accept):
            with m.If(two_pass & beat.last):
                with m.If(beat.second):
                    m.d.sync += p2_slot.eq(~p2_slot)
                with m.Else():
                    m.d.sync += p1_slot.eq(~p1_slot)
                    gap = Mux(beat.op == EpOp.SOFTMAX, sch.gap[EpOp.SOFTMAX] - 1,
                              sch.gap[EpOp.LAYERNORM] - 1)
                    with m.If(p1_slot):
                        m.d.sync += [wait[1].eq(gap), waited[1].eq(gap == 0)]
                    with m.Else():
                        m.d.sync += [wait[0].eq(gap), waited[0].eq(gap == 0)]

        # -- ADD: x' = acc + bias; the operands of the front multipliers -------------------------
        k = sch.ADD
        c = ctl[k - 1]
        # Every multiplier operand and shift amount is a register of its own lane, even where
        # the value is the same for all lanes: no register drives the whole row's DSPs.
        s = stage(k, x=signed(33), mul=unsigned(16), m2lo=signed(17), m2hi=signed(17),
                  b2lo=unsigned(16), b2hi=unsigned(16), sh=unsigned(6), sh1=unsigned(6))
        # The second front multiplier: GELU x' * omul (x' in 16-bit halves), LayerNorm r * rmul
        # (rmul in 16-bit halves).
        per_column = (c.op == EpOp.REQUANT) & prm.flags[0]
        for i in range(lanes):
            xb = Signal(signed(33), name=f"xb{i}")
            pm = inb.pm[i]
            m.d.comb += xb.eq(inb.acc[i] + pm.bias.as_signed())
            # sat32: a 33-bit sum is out of range exactly when its top two bits differ
            sat32 = Mux(xb[32] != xb[31], Mux(xb[32], -(1 << 31), (1 << 31) - 1), xb)
            m.d.sync += [
                s[i].x.eq(Mux(c.op == EpOp.SOFTMAX, sat32, xb)),
                s[i].mul.eq(Mux(per_column, pm.p1, prm.mul0)),
                s[i].sh.eq(Mux(per_column, pm.p2[:6], prm.shift0)),
                s[i].m2lo.eq(Mux(c.op == EpOp.GELU, xb[:16], inb.res[i])),
                s[i].m2hi.eq(Mux(c.op == EpOp.GELU, xb[16:].as_signed(), inb.res[i])),
                s[i].b2lo.eq(prm.mul1[:16]),
                s[i].b2hi.eq(Mux(c.op == EpOp.GELU, prm.mul1[:16], prm.mul1[16:])),
                s[i].sh1.eq(prm.shift1),
            ]
            with m.If(c.op == EpOp.LAYERNORM):
                m.d.sync += [s[i].carry.coef.m.eq(pm.p1.as_signed()),
                             s[i].carry.coef.beta.eq(pm.p2.as_signed() + 128)]
            with m.Else():
                m.d.sync += s[i].carry.out.eq(inb.acc[i])

        # -- MUL: four 17 x 16 products ---------------------------------------------------------
        k = sch.MUL
        p, s = stages[k - 1], stage(k, p1lo=unsigned(32), p1hi=signed(33), p2lo=signed(33),
                                   p2hi=signed(33), sh=unsigned(6), sh1=unsigned(6))
        for i in range(lanes):
            m.d.comb += [
                s[i].p1lo.eq(mul(p[i].x[:16], p[i].mul, f"mul_p1lo{i}")),
                s[i].p1hi.eq(mul(p[i].x[16:].as_signed(), p[i].mul, f"mul_p1hi{i}")),
                s[i].p2lo.eq(mul(p[i].m2lo, p[i].b2lo, f"mul_p2lo{i}")),
                s[i].p2hi.eq(mul(p[i].m2hi, p[i].b2hi, f"mul_p2hi{i}")),
            ]

        # -- PSUM: the products of the two multipliers -------------------------------------------
        k = sch.PSUM
        p, s = stages[k - 1], stage(k, a=signed(49), b=signed(49), sh=unsigned(6),
                                   sh1=unsigned(6))
        for i in range(lanes):
            m.d.sync += [s[i].a.eq(p[i].p1lo + (p[i].p1hi << 16)),
                         s[i].b.eq(p[i].p2lo + (p[i].p2hi << 16))]

        # -- SUM: LayerNorm adds the residual term ----------------------------------------------
        k = sch.SUM
        c = ctl[k - 1]
        p, s = stages[k - 1], stage(k, a=signed(50), b=signed(49), sh=unsigned(6),
                                   sh1=unsigned(6))
        for i in range(lanes):
            m.d.sync += s[i].a.eq(p[i].a + Mux(c.op == EpOp.LAYERNORM, p[i].b, 0))

        # -- SHC, SHF: 2a >> shift (a: by the op's shift; b: GELU's oshift) ---------------------
        k = sch.SHC
        p, s = stages[k - 1], stage(k, a=signed(51), b=signed(50), shf=unsigned(3),
                                   shf1=unsigned(3))
        for i in range(lanes):
            m.d.sync += [s[i].a.eq(coarse(p[i].a << 1, p[i].sh)),
                         s[i].b.eq(coarse(p[i].b << 1, p[i].sh1)),
                         s[i].shf.eq(p[i].sh[:3]), s[i].shf1.eq(p[i].sh1[:3])]
        k = sch.SHF
        p, s = stages[k - 1], stage(k, a=signed(51), b=signed(50))
        for i in range(lanes):
            m.d.sync += [s[i].a.eq(fine(p[i].a, p[i].shf)), s[i].b.eq(fine(p[i].b, p[i].shf1))]

        # -- RND: the rounding add, and the saturation limits compared beside it ---------------
        k = sch.RND
        c = ctl[k - 1]
        p, s = stages[k - 1], stage(k, over=1, under=1, r=signed(25), ir=unsigned(10), ihi=1,
                                   ilo=1)
        for i in range(lanes):
            w, z = p[i].a, p[i].b
            over, under, r = s[i].over, s[i].under, s[i].r
            with m.Switch(c.op):
                with m.Case(EpOp.REQUANT):
                    m.d.sync += Cat(over, under, r).eq(Cat(*round_parts(w, *_INT8)))
                with m.Case(EpOp.GELU):
                    m.d.sync += Cat(over, under, r).eq(Cat(*round_parts(z, *_INT24)))
                with m.Case(EpOp.SOFTMAX):
                    m.d.sync += Cat(over, under, r).eq(Cat(*round_parts(w, *_INT24)))
                with m.Case(EpOp.LAYERNORM):
                    m.d.sync += Cat(over, under, r).eq(Cat(*round_parts(w, *_INT16)))
            # GELU's PHI index is clamp(t + 257, 0, 513) (see _PHI_ROM): t = (w + 1) >> 1, so
            # t + 257 = (w + 515) >> 1, and the limits are compared on w.
            m.d.sync += [s[i].ir.eq((w[:11] + 515)[1:11]), s[i].ihi.eq(w >= 511),
                         s[i].ilo.eq(w <= -514)]

        # -- SAT: the saturated results; the PHI lookup -----------------------------------------
        k = sch.SAT
        c = ctl[k - 1]
        p, s = stages[k - 1], stage(k, a=signed(24))
        phi = []
        for i in range(lanes):
            over, under, r, lane_valid = p[i].over, p[i].under, p[i].r, c.lane_valid[i]
            with m.Switch(c.op):
                with m.Case(EpOp.REQUANT):
                    m.d.sync += s[i].carry.out.eq(pick(over, under, r[:8].as_signed(), *_INT8))
                with m.Case(EpOp.GELU):
                    m.d.sync += s[i].a.eq(pick(over, under, r, *_INT24))                # z
                with m.Case(EpOp.SOFTMAX):
                    m.d.sync += s[i].a.eq(Mux(lane_valid, pick(over, under, r, *_INT24),
                                              _INT24[0]))                                # t
                with m.Case(EpOp.LAYERNORM):
                    m.d.sync += s[i].a.eq(Mux(lane_valid,
                                              pick(over, under, r[:16].as_signed(), *_INT16),
                                              0))                                        # v
            rom = m.submodules[f"phi{i}"] = memory.Memory(shape=unsigned(17), depth=len(_PHI_ROM),
                                                          init=_PHI_ROM)
            port = rom.read_port()
            m.d.comb += port.addr.eq(Mux(p[i].ihi, 513, Mux(p[i].ilo, 0, p[i].ir)))
            phi.append(port.data)

        # -- PRE: PHI registered, ceil(t / 256), v*v ---------------------------------------------
        k = sch.PRE
        c = ctl[k - 1]
        p, s = stages[k - 1], stage(k, a=signed(24), c=signed(17), v2=unsigned(31))
        for i in range(lanes):
            v = p[i].a[:16].as_signed()
            m.d.sync += s[i].c.eq((p[i].a + 255) >> 8)
            m.d.comb += s[i].v2.eq(mul(v, v, f"pre_v2{i}"))
            # block RAM straight into a register: no logic after its slow clk-to-q
            with m.If(c.op == EpOp.GELU):
                m.d.sync += s[i].carry.coef.m.eq(phi[i])

        # -- the lane trees (first passes), while the lanes wait ---------------------------------
        pre = stages[sch.PRE]
        c_max, levels = tree(m, [pre[i].c for i in range(lanes)],
                             lambda a, b: Mux(a > b, a, b), lambda _: signed(17), name="cmax")
        v_sum, _ = tree(m, [pre[i].a[:16].as_signed() for i in range(lanes)],
                        lambda a, b: a + b, lambda n: signed(16 + n), name="vsum")
        v2_sum, _ = tree(m, [pre[i].v2 for i in range(lanes)],
                         lambda a, b: a + b, lambda n: unsigned(31 + n), name="v2sum")
        assert levels == sch.levels
        for k in range(sch.PRE + 1, sch.ACC):
            stage(k, a=signed(24))

        # -- ACC: SOFTMAX running max; LAYERNORM row sums ----------------------------------------
        k = sch.ACC
        c, before = ctl[k - 1], k - 1
        acc_lanes = stage(k, a=signed(24), m=signed(17))     # M, a copy in every lane
        row_dm = Signal(unsigned(17), reset_less=True)      # how much M grew at that beat
        m_run = Signal(signed(17), reset_less=True)
        m_fresh = Signal(init=1)
        smx_m = [Signal(signed(17), name=f"smx_m{n}", reset_less=True) for n in range(2)]
        prev = Mux(m_fresh, -(1 << 15), m_run)
        grow = Signal(signed(18))
        m.d.comb += grow.eq(c_max - prev)
        with m.If(first_pass(before, EpOp.SOFTMAX)):
            new = Mux(grow > 0, c_max, prev)
            m.d.sync += [m_run.eq(new), m_fresh.eq(c.last), row_dm.eq(Mux(grow > 0, grow, 0))]
            m.d.sync += [acc_lanes[i].m.eq(new) for i in range(lanes)]
            with m.If(c.last):
                with m.If(c.slot):
                    m.d.sync += smx_m[1].eq(new)
                with m.Else():
                    m.d.sync += smx_m[0].eq(new)
        with m.Else():
            m.d.sync += [acc_lanes[i].m.eq(Mux(c.slot, smx_m[1], smx_m[0])) for i in range(lanes)]

        s1 = Signal(signed(26), reset_less=True)
        s2 = Signal(unsigned(41), reset_less=True)
        ln_fresh = Signal(init=1)
        ln_fin = Signal()                 # the row sums are final (one cycle)
        ln_fin_slot = Signal()
        m.d.sync += ln_fin.eq(0)
        with m.If(first_pass(before, EpOp.LAYERNORM)):
            m.d.sync += [s1.eq(Mux(ln_fresh, 0, s1) + v_sum), s2.eq(Mux(ln_fresh, 0, s2) + v2_sum),
                         ln_fresh.eq(c.last), ln_fin.eq(c.last), ln_fin_slot.eq(c.slot)]

        # -- U, EXP, E: e = EXP2[u & 255] >> (u >> 8), u = 256*M - t -----------------------------
        k = sch.U
        c = ctl[k - 1]
        p, s = stages[k - 1], stage(k, a=signed(24), f=unsigned(8), q=unsigned(4), zero=1)
        dm5 = Signal(5, reset_less=True)
        m.d.sync += dm5.eq(Mux(row_dm > 31, 31, row_dm))   # S < 2**26: 31 empties it
        for i in range(lanes):
            u = Signal(signed(26), name=f"u{i}")
            m.d.comb += u.eq((p[i].m << 8) - p[i].a)
            m.d.sync += [s[i].f.eq(u[:8]), s[i].q.eq(u[8:12]),
                         s[i].zero.eq(~c.lane_valid[i] | u[12:].any())]
        k = sch.EXP
        p, s = stages[k - 1], stage(k, a=signed(24), q=unsigned(4), zero=1)
        exp2 = []
        for i in range(lanes):
            rom = m.submodules[f"exp2_{i}"] = memory.Memory(shape=unsigned(16), depth=256,
                                                            init=EXP2_TABLE)
            port = rom.read_port()
            m.d.comb += port.addr.eq(p[i].f)
            exp2.append(port.data)
        k = sch.EREG            # block RAM straight into a register
        p, s = stages[k - 1], stage(k, a=signed(24), q=unsigned(4), zero=1, r=unsigned(16))
        for i in range(lanes):
            m.d.sync += s[i].r.eq(exp2[i])
        k = sch.E
        c = ctl[k - 1]
        p, s = stages[k - 1], stage(k, a=signed(24))
        for i in range(lanes):
            with m.If(c.op == EpOp.SOFTMAX):
                m.d.sync += s[i].a.eq(Mux(p[i].zero, 0, p[i].r >> p[i].q))

        # -- the e tree and the rescaled-sum loop (first passes) ----------------------------------
        e_sum, _ = tree(m, [stages[sch.E][i].a[:16] for i in range(lanes)],
                        lambda a, b: a + b, lambda n: unsigned(16 + n), name="esum")
        dm_at_sum = delay(m, dm5, sch.SLOOP - 1 - sch.U, name="dm")
        total = Signal(unsigned(26), reset_less=True)
        s_fresh = Signal(init=1)
        smx_fin = Signal()
        smx_fin_slot = Signal()
        m.d.sync += smx_fin.eq(0)
        with m.If(first_pass(sch.SLOOP - 1, EpOp.SOFTMAX)):
            c = ctl[sch.SLOOP - 1]
            m.d.sync += [total.eq(Mux(s_fresh, 0, total >> dm_at_sum) + e_sum),
                         s_fresh.eq(c.last), smx_fin.eq(c.last), smx_fin_slot.eq(c.slot)]

        # -- SOFTMAX finalize: k, mant, R = RECIP_TABLE[mant - 1024], into the slot --------------
        f1_k = Signal(5, reset_less=True)                  # S = mant * 2**(k - 10)
        f1_total = Signal.like(total, reset_less=True)
        m.d.sync += [f1_k.eq(msb(total)), f1_total.eq(total)]
        f2_mant = Signal(11, reset_less=True)
        with m.If(f1_k >= 10):
            m.d.sync += f2_mant.eq(f1_total >> (f1_k - 10)[:4])
        with m.Else():
            m.d.sync += f2_mant.eq(f1_total << (10 - f1_k)[:4])
        recip = m.submodules.recip = memory.Memory(shape=unsigned(23), depth=1024,
                                                   init=RECIP_TABLE)
        recip_port = recip.read_port()
        m.d.comb += recip_port.addr.eq(f2_mant[:10])
        f3_k = delay(m, f1_k, 2, name="smx_k")
        fin_at = delay(m, Cat(smx_fin, smx_fin_slot), 3, name="smx_fin")
        smx_r = [Signal(unsigned(23), name=f"smx_r{n}", reset_less=True) for n in range(2)]
        smx_k = [Signal(5, name=f"smx_k{n}", reset_less=True) for n in range(2)]
        for n in range(2):
            with m.If(fin_at[0] & (fin_at[1] == n)):
                m.d.sync += [smx_r[n].eq(recip_port.data), smx_k[n].eq(f3_k)]

        # -- LAYERNORM finalize: D, j, rsq, N*rsq, S1*rsq, into the slot ------------------------
        # c0 is the cycle the row sums are final. Every product is cut into MULT18X18D tiles
        # whose sums take their own stages.
        n_len = prm.row_len[:_N_WIDTH]
        ns2 = tiles(m, n_len, s2, name="ln_ns2", platform=platform)   # c0 + 1
        s1s1 = tiles(m, s1, s1, name="ln_s1s1", platform=platform)
        big, lat_a = sum_shifted(m, ns2 + [(prm.eps, 0)], name="ln_a")  # N*S2 + eps_n2
        sq, lat_b = sum_shifted(m, s1s1, name="ln_b")                  # S1**2
        assert lat_a == lat_b == 2
        ln_d = Signal(unsigned(64), reset_less=True)                   # c0 + 4
        m.d.sync += ln_d.eq(big - sq)
        ln_j = Signal(signed(6), reset_less=True)                      # D = m * 4**j, c0 + 5
        ln_pos = Signal(reset_less=True)
        ln_f5_d = Signal.like(ln_d, reset_less=True)
        # j = floor((bit_length(D) - 9) / 2) = floor((msb(D) - 8) / 2)
        m.d.sync += [ln_j.eq((Cat(msb(ln_d), Const(0, 1)).as_signed() - 8) >> 1),
                     ln_pos.eq(ln_d != 0), ln_f5_d.eq(ln_d)]
        ln_mant = Signal(10)
        with m.If(ln_j >= 0):
            m.d.comb += ln_mant.eq(ln_f5_d >> Cat(Const(0, 1), ln_j[:5]))
        with m.Else():
            m.d.comb += ln_mant.eq(ln_f5_d[:8] << Cat(Const(0, 1), (-ln_j)[:3]))
        # RSQRT_TABLE[m - 256]; D = 0 reads a zero past the table (golden: rsq = 0, j = 0).
        rsqrt = m.submodules.rsqrt = memory.Memory(
            shape=unsigned(19), depth=1024, init=list(RSQRT_TABLE) + [0] * (1024 - 768))
        rsqrt_port = rsqrt.read_port()
        ln_f6_addr = Signal(10, reset_less=True)                       # c0 + 6
        ln_f6_j = Signal(signed(6), reset_less=True)
        m.d.sync += [ln_f6_addr.eq(Mux(ln_pos, ln_mant - 256, 1023)),
                     ln_f6_j.eq(Mux(ln_pos, ln_j, 0))]
        m.d.comb += rsqrt_port.addr.eq(ln_f6_addr)                     # c0 + 7
        rsq = delay(m, rsqrt_port.data, 1, name="ln_rsq")              # c0 + 8
        ln_f8_s1 = delay(m, s1, 8, name="ln_s1")
        nr, lat_nr = sum_shifted(m, tiles(m, n_len, rsq, name="ln_nr", platform=platform),
                                 name="ln_nr")                         # c0 + 9 (tiles)
        sr, lat_sr = sum_shifted(m, tiles(m, ln_f8_s1, rsq, name="ln_sr", platform=platform),
                                 name="ln_sr")
        assert lat_sr == 2 and lat_nr <= lat_sr
        nr = delay(m, nr, lat_sr - lat_nr, name="ln_nr_wait")           # c0 + 11
        ln_slot_j = delay(m, ln_f6_j, 5, name="ln_j")
        fin = delay(m, Cat(ln_fin, ln_fin_slot), 11, name="ln_fin")
        assert sch.LN_FINALIZE == 12
        ln_nr = [Signal(unsigned(30), name=f"ln_nr{n}", reset_less=True) for n in range(2)]
        ln_sr = [Signal(signed(46), name=f"ln_sr{n}", reset_less=True) for n in range(2)]
        ln_jj = [Signal(signed(6), name=f"ln_j{n}", reset_less=True) for n in range(2)]
        for n in range(2):
            with m.If(fin[0] & (fin[1] == n)):                         # slot: c0 + 12
                m.d.sync += [ln_nr[n].eq(nr), ln_sr[n].eq(sr), ln_jj[n].eq(ln_slot_j)]

        # -- the lanes wait for BIND ------------------------------------------------------------
        for k in range(sch.E + 1, sch.BIND):
            stage(k, a=signed(24))

        # -- BIND: a second pass takes its row's statistics, into every lane --------------------
        k = sch.BIND
        c = ctl[k - 1]
        s = stage(k, a=signed(24),
                  mb=unsigned(30),           # R | N*rsq
                  sb=signed(46),             # 0 | S1*rsq
                  lsh=unsigned(6))           # 16 + k | 11 + j
        for i in range(lanes):
            with m.If(c.op == EpOp.SOFTMAX):
                m.d.sync += [s[i].mb.eq(Mux(c.slot, smx_r[1], smx_r[0])), s[i].sb.eq(0),
                             s[i].lsh.eq(16 + Mux(c.slot, smx_k[1], smx_k[0]))]
            with m.Else():
                m.d.sync += [s[i].mb.eq(Mux(c.slot, ln_nr[1], ln_nr[0])),
                             s[i].sb.eq(Mux(c.slot, ln_sr[1], ln_sr[0])),
                             s[i].lsh.eq(11 + Mux(c.slot, ln_jj[1], ln_jj[0]))]

        # -- MUL2, PSUM2, SUB, SHC2, SHF2, RND2 ------------------------------------------------
        k = sch.MUL2
        p, s = stages[k - 1], stage(k, a=signed(24), t0=signed(35), t1=signed(31),
                                   sb=signed(46), lsh=unsigned(6))
        for i in range(lanes):
            e_or_v, mb = p[i].a[:17].as_signed(), p[i].mb
            m.d.comb += [s[i].t0.eq(mul(e_or_v, mb[:TILE], f"mul2_t0{i}")),
                         s[i].t1.eq(mul(e_or_v, mb[TILE:], f"mul2_t1{i}"))]
        k += 1
        p, s = stages[k - 1], stage(k, a=signed(24), d=signed(47), sb=signed(46), lsh=unsigned(6))
        for i in range(lanes):
            m.d.sync += s[i].d.eq(p[i].t0 + (p[i].t1 << TILE))
        k += 1
        p, s = stages[k - 1], stage(k, a=signed(24), d=signed(48), lsh=unsigned(6))
        for i in range(lanes):
            m.d.sync += s[i].d.eq(p[i].d - p[i].sb)
        k += 1
        p, s = stages[k - 1], stage(k, a=signed(24), d=signed(49), lshf=unsigned(3))
        for i in range(lanes):
            m.d.sync += [s[i].d.eq(coarse(p[i].d << 1, p[i].lsh)), s[i].lshf.eq(p[i].lsh[:3])]
        k += 1
        p, s = stages[k - 1], stage(k, a=signed(24), d=signed(49))
        for i in range(lanes):
            m.d.sync += s[i].d.eq(fine(p[i].d, p[i].lshf))
        k += 1
        c = ctl[k - 1]
        p, s = stages[k - 1], stage(k, a=signed(24), over=1, under=1, r=signed(8))
        for i in range(lanes):
            d = p[i].d
            m.d.sync += Cat(s[i].over, s[i].under, s[i].r).eq(Cat(*round_parts(d, 0, 127)))
            with m.If(c.op == EpOp.LAYERNORM):
                m.d.sync += s[i].a.eq((d[:25] + 1)[1:25])            # z, |z| < 2**18

        # -- MUL3, PSUM3, SHC3, SHF3, ADD3, out ------------------------------------------------
        k += 1
        assert k == sch.MUL3
        c = ctl[k - 1]
        p, s = stages[k - 1], stage(k, t0=signed(36), t1=signed(25))
        for i in range(lanes):
            z, coef = p[i].a, p[i].carry.coef.m
            m.d.comb += [s[i].t0.eq(mul(z[:TILE], coef, f"mul3_t0{i}")),
                         s[i].t1.eq(mul(z[TILE:].as_signed(), coef, f"mul3_t1{i}"))]
            with m.If(c.op == EpOp.SOFTMAX):                          # SOFTMAX done
                m.d.sync += s[i].carry.out.eq(
                    Mux(c.lane_valid[i], pick(p[i].over, p[i].under, p[i].r, 0, 127), 0))
        k += 1
        p, s = stages[k - 1], stage(k, q=signed(42), gs=unsigned(6))
        for i in range(lanes):
            m.d.sync += [s[i].q.eq(p[i].t0 + (p[i].t1 << TILE)),
                         s[i].gs.eq(Mux(prm.shift1 >= 8, prm.shift1 - 8, 0))]  # LN gshift - 8
        k += 1
        p, s = stages[k - 1], stage(k, q=signed(42), over=1, under=1, r=signed(8),
                                   gsf=unsigned(3))
        for i in range(lanes):
            q = p[i].q
            # GELU: sat8(rshift_round(q, 24)); the limits compared on q beside a narrow add
            m.d.sync += [
                s[i].q.eq(coarse(q, p[i].gs)), s[i].gsf.eq(p[i].gs[:3]),
                s[i].over.eq(q >= (1 << 31) - (1 << 23)),
                s[i].under.eq(q < -(1 << 31) - (1 << 23)),
                s[i].r.eq((q[:32] + (1 << 23))[24:32]),
            ]
        k += 1
        c = ctl[k - 1]
        p, s = stages[k - 1], stage(k, q=signed(42))
        for i in range(lanes):
            m.d.sync += s[i].q.eq(fine(p[i].q, p[i].gsf))
            with m.If(c.op == EpOp.GELU):                             # GELU done
                m.d.sync += s[i].carry.out.eq(pick(p[i].over, p[i].under, p[i].r, *_INT8))
        k += 1
        p, s = stages[k - 1], stage(k, y=signed(43))
        for i in range(lanes):
            m.d.sync += s[i].y.eq(p[i].q + p[i].carry.coef.beta)
        k += 1
        assert k == depth, (k, depth)
        c, last = ctl[depth - 1], stages[depth - 1]
        row = Signal(data.ArrayLayout(signed(cfg.acc_width), lanes))
        # Timing: `o_busy` (any stage valid, a beat held or an output beat owed) is a register,
        # loaded with what those registers will hold next cycle, so the OR of the stage valid
        # bits does not reach the store unit's enables in the cycle it is formed.
        busy = Signal()
        if ratio == 1:
            valid0_next = accept
            phase_next_held = Const(0)
        else:
            valid0_next = accept | (phase != 0)
            phase_next_held = Mux(phase == 0, accept, phase != ratio - 1)
        # Output beats owed next cycle: one accepted now, or two or more now, or one not
        # leaving now (a beat only leaves while one is owed).
        two_or_more = owed[1] if sch.fifo_depth > 1 else 0
        owed_next = owes | two_or_more | (owed[0] & ~popped)
        m.d.sync += busy.eq(valid0_next | Cat(*valid[:depth - 1]).any() | owed_next
                            | phase_next_held)

        for i in range(lanes):
            ln = Mux(c.lane_valid[i], clamp(last[i].y >> 8, *_INT8), 0)
            m.d.comb += row[i].eq(Mux(c.op == EpOp.LAYERNORM, ln, last[i].carry.out))
        if ratio == 1:
            m.d.comb += [out_fifo.w_data.eq(row), out_fifo.w_en.eq(valid[depth - 1] & c.second)]
        else:
            # A beat's sub-beats but the last wait in `done`; the last completes the FIFO row.
            done = Signal(data.ArrayLayout(row.shape(), ratio - 1), reset_less=True)
            for j in range(ratio - 1):
                with m.If(valid[depth - 1] & (c.sub == j)):
                    m.d.sync += done[j].eq(row)
            m.d.comb += [
                out_fifo.w_data.eq(Cat(done, row)),
                out_fifo.w_en.eq(valid[depth - 1] & c.second & (c.sub == ratio - 1)),
            ]

        m.d.comb += [
            self.o_data.payload.eq(out_fifo.r_data),
            self.o_data.valid.eq(out_fifo.r_rdy),
            out_fifo.r_en.eq(self.o_data.ready),
            self.o_busy.eq(busy),
        ]
        return m
