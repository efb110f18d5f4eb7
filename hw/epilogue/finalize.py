"""The finalize pipeline: a row's first-pass sums made into what its second pass multiplies by.

Row statistics live in two *slots*, taken in turn by the rows' first passes and read in turn by
their second passes (:mod:`~.intake` holds a second pass back until its slot is final). At a
row's last first-pass beat this pipeline computes, for SOFTMAX, ``k`` (a priority encoder),
``mant`` and ``R = RECIP_TABLE[mant - 8192]``; for LAYERNORM, ``D = N*S2 - S1**2 + eps_n2``,
``j`` (a priority encoder), ``m`` and ``rsq = RSQRT_TABLE[m - 256]``, and then ``N * rsq`` and
``S1 * rsq``, so the per-lane work is one multiply and one subtract. The slot holds them
:attr:`~.schedule.Schedule.SMX_FINALIZE` or :attr:`~.schedule.Schedule.LN_FINALIZE` cycles
after the sums were final.

The tables, from :mod:`bertaccel.golden.intops`, are shared by the lanes: RECIP (8192 x 17) and
RSQRT (1024 x 19, its 768 entries and zeros for D = 0). ``row_len`` is at most
:data:`~bertaccel.golden.intops.MAX_ROW` (its low 11 bits are ``N``) and ``eps_n2`` below 2**62.
"""

from amaranth import Cat, Const, Module, Mux, Signal, signed, unsigned
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ...golden.intops import MAX_ROW, RECIP_BITS, RECIP_TABLE, RSQRT_TABLE
from ..isa import ParamsLayout
from ..lut import and_or, lut, shifted
from ..memory import rom
from ..pipeline import delay, delay_line
from .arith import msb, sum_shifted, tiles
from .schedule import LayerNormSums, Schedule, SlotStats, SoftmaxSums

__all__ = ["Finalize", "N_WIDTH", "recip_table"]

#: Width of ``N`` (row_len) in the LayerNorm statistics.
N_WIDTH = MAX_ROW.bit_length()


class Finalize(wiring.Component):
    """The per-row statistics of both two-pass ops, into their slots.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    i_smx : In(stream.Signature(SoftmaxSums, always_ready=True))
    i_ln : In(stream.Signature(LayerNormSums, always_ready=True))
    params : In(ParamsLayout)
        ``row_len`` (N) and ``eps`` (eps_n2), settled from at least a cycle before a row's
        sums come until its statistics are in the slot.
    o_slots : Out(ArrayLayout(SlotStats, 2))
        The two slots; each field changes only when a row of its op is finalized into it.
    """

    def __init__(self, cfg):
        self._sch = Schedule.of(cfg)
        super().__init__({
            "i_smx": In(stream.Signature(SoftmaxSums, always_ready=True)),
            "i_ln": In(stream.Signature(LayerNormSums, always_ready=True)),
            "params": In(ParamsLayout),
            "o_slots": Out(data.ArrayLayout(SlotStats, 2)),
        })

    def elaborate(self, platform):
        m = Module()
        slots = Signal(data.ArrayLayout(SlotStats, 2), name="slots", reset_less=True)
        m.d.comb += self.o_slots.eq(slots)          # but SOFTMAX's r (see _softmax)
        self._softmax(m, slots, platform)
        self._layernorm(m, slots, platform)
        return m

    def _softmax(self, m, slots, platform):
        """k, mant, R = RECIP_TABLE[mant - 8192], into the slot."""
        # The row's sum is S = A >> p (the exponent's loop), so S's top bit is A's less p, and
        # its mantissa, S >> (k - 13), is A >> (top - 13) for A's top bit `top`: S holds the
        # row's largest exponential, at least 2**20, so 20 <= top <= 38 and the mantissa is
        # a right shift. Timing: `top` is found and the shift made in two steps, each a few
        # levels of LUT4s of their own (`hw/lut.py`): f1 the 4-bit chunk c of A[20:] that holds
        # it and the bits from 13 below the chunk to its top, f2 its place f in the chunk and
        # the mantissa (top = 20 + 4c + f); f3 k = top - p.
        a, p = self.i_smx.payload.a, self.i_smx.payload.p
        f1_w, f1_c = self._smx_chunk(m, a, platform)
        f1_q = Signal(range(21), reset_less=True)                      # 20 - p
        m.d.sync += f1_q.eq(20 - p)
        f2_mant, f2_f = self._smx_mantissa(m, f1_w, platform)
        f2_c, f2_q = delay(m, f1_c, 1, name="smx_c"), delay(m, f1_q, 1, name="smx_q")
        f3_k = Signal(SlotStats["k"].shape, reset_less=True)          # S = mant * 2**(k - 13)
        m.d.sync += f3_k.eq(Cat(f2_f, f2_c) + f2_q)
        f4_r = recip_table(m, f2_mant, platform)
        fin = delay_line(m, Cat(self.i_smx.valid, self.i_smx.payload.slot), 4, name="smx_fin")
        assert self._sch.SMX_FINALIZE == 4
        # R reaches its slot a cycle after k: until then the slot's r is R's register (the
        # block RAMs' own output register), so a second pass reads it from cycle 4 all the same.
        for n in range(2):
            r_now = fin[4][0] & (fin[4][1] == n)          # R of slot n is in its register
            with m.If(fin[3][0] & (fin[3][1] == n)):
                m.d.sync += slots[n].k.eq(f3_k)
            with m.If(r_now):
                m.d.sync += slots[n].r.eq(f4_r)
            m.d.comb += self.o_slots[n].r.eq(Mux(r_now, f4_r, slots[n].r))

    @staticmethod
    def _smx_chunk(m, a, platform):
        """f1: of A's top bit (at 20 to 38), the 4-bit chunk ``c`` of ``A[20:]`` that holds it,
        and ``w = A[4c + 7:4c + 24]``, the chunk and the 13 bits below it; registers."""
        chunks = range(-(-(len(a) - 20) // 4))
        padded = Cat(a, Const(0, 4 * len(chunks) + 24 - len(a)))
        anys = [lut(m, lambda *bits: any(bits), a[20 + 4 * c:24 + 4 * c], platform=platform,
                    name=f"smx_any{c}") for c in chunks]
        # The highest chunk with a one, one-hot: chunk 0 when none above has one (A >= 2**20).
        tops = [lut(m, lambda *higher: not any(higher), anys[1:], platform=platform,
                    name="smx_top0")]
        tops += [lut(m, lambda mine, *higher: mine and not any(higher), anys[c:],
                     platform=platform, name=f"smx_top{c}") for c in chunks[1:]]
        f1_w = Signal(17, reset_less=True)
        f1_c = Signal(range(len(chunks)), reset_less=True)
        m.d.sync += f1_w.eq(Cat(
            and_or(m, [(tops[c], padded[4 * c + 7 + j]) for c in chunks], platform=platform,
                   name=f"smx_w{j}") for j in range(len(f1_w))))
        m.d.sync += f1_c.eq(_index(tops, len(f1_c)))
        return f1_w, f1_c

    @staticmethod
    def _smx_mantissa(m, w, platform):
        """f2: the top bit's place ``f`` in ``w``'s chunk (``w[13:17]``, not zero) and the
        mantissa below it, ``w[f:f + 13]``; registers."""
        high = w[13:17]
        tops = [lut(m, lambda *bits, f=f: (f == 0 or bits[f]) and not any(bits[f + 1:]),
                    list(high), platform=platform, name=f"smx_f{f}") for f in range(4)]
        f2_mant = Signal(RECIP_BITS, reset_less=True)
        f2_f = Signal(2, reset_less=True)
        m.d.sync += [f2_mant.eq(shifted(m, w[:16], Cat(tops), right=True, width=RECIP_BITS,
                                        platform=platform, name="smx_mant")),
                     f2_f.eq(_index(tops, len(f2_f)))]
        return f2_mant, f2_f

    def _layernorm(self, m, slots, platform):
        """D, j, rsq, N*rsq, S1*rsq, into the slot."""
        # c0 is the cycle the row sums are final. Every product is cut into MULT18X18D tiles
        # whose sums take their own stages.
        s1, s2 = self.i_ln.payload.s1, self.i_ln.payload.s2
        # Timing: N is a copy of the store unit's `row_len` kept here, a cycle behind it, so the
        # route from the store unit ends at a register and not at the `N * S2` multipliers
        # (nextpnr times a MULT18X18D with one operand registered as one with none). A SET
        # waits for the epilogue to drain, so N is settled long before a row's sums are.
        n_len = Signal(N_WIDTH, name="ln_n", reset_less=True)
        m.d.sync += n_len.eq(self.params.row_len[:N_WIDTH])
        # Timing: every product's operands enter the DSPs' input registers (S1 and S2 at
        # c0 + 1, rsq at c0 + 12), so the routes from the row sums across the chip and from
        # the RSQRT table's output register end at registers, not at a multiplier's inputs.
        ns2 = tiles(m, n_len, s2, name="ln_ns2", platform=platform,
                    input_registers=True)                              # c0 + 2
        s1s1 = tiles(m, s1, s1, name="ln_s1s1", platform=platform, input_registers=True)
        big, lat_a = sum_shifted(m, ns2 + [(self.params.eps, 0)], name="ln_a")  # N*S2 + eps_n2
        sq, lat_b = sum_shifted(m, s1s1, name="ln_b")                  # S1**2
        assert lat_a == lat_b == 2
        ln_d = Signal(unsigned(64), reset_less=True)                   # c0 + 5
        m.d.sync += ln_d.eq(big - sq)
        rsq, j = self._rsqrt(m, ln_d)                                  # c0 + 11, c0 + 9
        ln_f11_s1 = delay(m, s1, 11, name="ln_s1")
        nr, lat_nr = sum_shifted(m, tiles(m, n_len, rsq, name="ln_nr", platform=platform,
                                          input_registers=True),
                                 name="ln_nr")                         # c0 + 13 (tiles)
        sr, lat_sr = sum_shifted(m, tiles(m, ln_f11_s1, rsq, name="ln_sr", platform=platform,
                                          input_registers=True),
                                 name="ln_sr")
        assert lat_sr == 2 and lat_nr <= lat_sr
        nr = delay(m, nr, lat_sr - lat_nr, name="ln_nr_wait")           # c0 + 15
        ln_slot_j = delay(m, j, 6, name="ln_j")
        fin = delay(m, Cat(self.i_ln.valid, self.i_ln.payload.slot), 15, name="ln_fin")
        assert self._sch.LN_FINALIZE == 16
        for n in range(2):
            with m.If(fin[0] & (fin[1] == n)):                         # slot: c0 + 16
                m.d.sync += [slots[n].nr.eq(nr), slots[n].sr.eq(sr), slots[n].j.eq(ln_slot_j)]

    def _rsqrt(self, m, ln_d):
        """``D = m * 4**j``: the RSQRT_TABLE read of ``m`` (6 cycles after ``D``) and ``j``
        (4 cycles after ``D``); both 0 for D = 0, as golden's."""
        # j = floor((bit_length(D) - 9) / 2) = floor((msb(D) - 8) / 2); for msb(D) = 16c + t,
        # t the top bit within 16-bit chunk c, that is 8c - 4 + (t >> 1). Timing: each chunk's
        # t and whether it holds a 1 in one stage, the highest such chunk's j in the next.
        tops, anys = _chunk_msbs(m, ln_d, name="ln_d")                 # c0 + 6
        ln_j = Signal(signed(6), reset_less=True)                      # D = m * 4**j, c0 + 7
        ln_pos = Signal(reset_less=True)
        pick = Const(-4, signed(6))
        for c, (top, any_) in enumerate(zip(tops, anys)):
            pick = Mux(any_, 8 * c - 4 + (top >> 1), pick)
        m.d.sync += [ln_j.eq(pick), ln_pos.eq(Cat(anys).any())]
        ln_f7_d = delay(m, ln_d, 2, name="ln_d")
        # m = D >> 2j (D << -2j for j < 0) in two stages: by 16 bits at a time, then the rest.
        ln_f8_v = Signal(24, reset_less=True)                          # c0 + 8
        ln_f8_j = Signal(signed(6), reset_less=True)
        ln_f8_pos = Signal(reset_less=True)
        coarse16 = (ln_f7_d >> Cat(Const(0, 4), ln_j[3:5]))[:24]
        m.d.sync += [ln_f8_v.eq(Mux(ln_j >= 0, coarse16, ln_f7_d[:8])), ln_f8_j.eq(ln_j),
                     ln_f8_pos.eq(ln_pos)]
        ln_mant = Signal(10)
        with m.If(ln_f8_j >= 0):
            m.d.comb += ln_mant.eq(ln_f8_v >> Cat(Const(0, 1), ln_f8_j[:3]))
        with m.Else():
            m.d.comb += ln_mant.eq(ln_f8_v[:8] << Cat(Const(0, 1), (-ln_f8_j)[:3]))
        # RSQRT_TABLE[m - 256]; D = 0 reads a zero past the table (golden: rsq = 0, j = 0).
        rsqrt = m.submodules.rsqrt = memory.Memory(
            shape=unsigned(19), depth=1024, init=list(RSQRT_TABLE) + [0] * (1024 - 768))
        rsqrt_port = rsqrt.read_port()
        ln_f9_addr = Signal(10, reset_less=True)                       # c0 + 9
        ln_f9_j = Signal(signed(6), reset_less=True)
        m.d.sync += [ln_f9_addr.eq(Mux(ln_f8_pos, ln_mant - 256, 1023)),
                     ln_f9_j.eq(Mux(ln_f8_pos, ln_f8_j, 0))]
        m.d.comb += rsqrt_port.addr.eq(ln_f9_addr)                     # c0 + 10
        return delay(m, rsqrt_port.data, 1, name="ln_rsq"), ln_f9_j    # c0 + 11, c0 + 9


def _index(hot, width):
    """The index of the one bit set in the list ``hot``, ``width`` bits."""
    return Cat(Cat(bit for j, bit in enumerate(hot) if j >> b & 1).any() for b in range(width))


def _chunk_msbs(m, value, *, name):
    """Registers of each 16-bit chunk of ``value``: its :func:`~.arith.msb` and whether it is
    not zero (a cycle later), as two lists, the lowest chunk first."""
    tops, anys = [], []
    for c, lo in enumerate(range(0, len(value), 16)):
        chunk = value[lo:lo + 16]
        top = Signal(4, name=f"{name}_top{c}", reset_less=True)
        any_ = Signal(name=f"{name}_any{c}", reset_less=True)
        m.d.sync += [top.eq(msb(chunk)), any_.eq(chunk.any())]
        tops.append(top)
        anys.append(any_)
    return tops, anys


def recip_table(m, addr, platform):
    """``RECIP_TABLE[addr]`` two cycles after ``addr``: the table (:func:`~..memory.rom`: for
    an ECP5, RAMs of 8192 x 2 bits side by side, one DP16KD each), then a register of its data
    alone, which synthesis moves into the block RAMs (:mod:`bertaccel.fpga.ramreg`)."""
    return delay(m, rom(m, RECIP_TABLE, addr, name="recip", platform=platform), 1, name="recip")
