"""A weight-stationary processing element."""

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .dsp import KEEP, product_register
from .lutmul import TREE_LATENCY, tree_product

__all__ = ["ProcessingElement"]


class ProcessingElement(wiring.Component):
    """One multiply-accumulate cell of the systolic mesh.

    The PE holds two weights (banks 0 and 1). An operand enters from the left; the bank it must
    be multiplied by enters one cycle ahead of it (``i_bank`` names the bank of the operand
    that arrives in the next cycle, and ``o_bank`` leads ``o_a`` the same way). Both leave to
    the right one cycle later. The product is registered (so the multiplier and the adder are
    in separate stages, which an FPGA DSP absorbs), and the partial sum from above plus that
    product leaves downwards one cycle after the product. A PE therefore adds one cycle to the
    horizontal path, and a partial sum meets the product of the operand that entered the PE
    ``PRODUCT_LATENCY`` cycles before it.

    Weights travel like operands, in the other direction: a weight enters from above and leaves
    downwards one cycle later through a plain pipeline register (``o_w``), whatever the write
    strobe says. The strobe (``i_w_en``, with the bank ``i_w_bank`` to write) enters from the
    left and leaves to the right one cycle later, beside the operand. While it is high, bank
    ``i_w_bank`` takes ``i_w`` at the clock edge: an operand in the same cycle still multiplies
    the old weight, an operand in the next cycle the new one. The banks never shift, so writing
    one bank never disturbs the other, nor the other weights of the same bank.

    The product of the operand of cycle *t* reaches the adder in cycle *t* + 3: both multiplier
    operands are registered before the multiply, the product after it, and the product is
    copied into a fabric register before the adder. On an ECP5 the first three are the
    MULT18X18D's input and output registers (:func:`bertaccel.hw.dsp.product_register`, with
    ``input_registers``), so an FPGA DSP's combinational multiplier (3.5 ns of setup in
    nextpnr's model of the ECP5's speed grade 6) has no routing on either side of it; the
    route from the left neighbour's operand register, which crosses the gap between two DSP
    sites, ends at a DSP input register, and the route out of the DSP ends at the copy, not at
    the adder. The weight reaches its DSP input register from a fabric register of its own:
    the PE selects the next operand's bank one cycle early (a weight written in that cycle
    passes straight in, so the rule above holds), and that register feeds only the DSP, so no
    multiplexer sits in front of it. These registers cost two cycles of latency through the
    whole mesh, not per PE: the partial sums still move down one PE row per sum register, one
    cycle behind the operands. (On the 8x8 mesh they took nextpnr's Fmax from 107 to over
    150 MHz; docs/fpga.md.)

    A PE built with ``top`` heads its column: it has no ``i_psum`` and ``o_psum`` is its
    product (sign-extended) with no sum register. The mesh spends that saved cycle on an input
    register for the top row.

    A PE built with ``lut`` multiplies in the fabric on every target
    (:func:`bertaccel.hw.lutmul.tree_product`: partial products summed by an adder tree with a
    register after each of its three levels, the last being the copy the adder reads), with the
    same product in the same cycle, so no DSP block (``AccelConfig.lut_pes``).

    Parameters
    ----------
    in_width : int
        Operand and weight width.
    acc_width : int
        Partial-sum width; sums wrap modulo ``2 ** acc_width``.
    top : bool
        See above.
    lut : bool
        See above.

    Members
    -------
    i_a, i_bank : In
        Operand from the left, and the weight bank of the operand of the next cycle.
    o_a, o_bank : Out
        The same, registered, to the right.
    i_psum, o_psum : In, Out
        Partial sum from above (not with ``top``); registered sum to below (with ``top``: the
        registered product).
    i_w, o_w : In, Out
        Weight from above; the same, registered, to below.
    i_w_en, i_w_bank : In
        Weight write strobe and the bank it writes, from the left.
    o_w_en, o_w_bank : Out
        The same, registered, to the right.
    """

    #: Cycles from an operand at ``i_a`` to its product in the register the adder reads.
    PRODUCT_LATENCY = 3
    assert TREE_LATENCY == PRODUCT_LATENCY

    def __init__(self, *, in_width=8, acc_width=32, top=False, lut=False):
        self._in_width = in_width
        self._lut = lut
        self._acc_width = acc_width
        self._top = top
        members = {
            "i_a":      In(signed(in_width)),
            "i_bank":   In(1),
            "o_a":      Out(signed(in_width)),
            "o_bank":   Out(1),
            "i_psum":   In(signed(acc_width)),
            "o_psum":   Out(signed(acc_width)),
            "i_w":      In(signed(in_width)),
            "o_w":      Out(signed(in_width)),
            "i_w_en":   In(1),
            "i_w_bank": In(1),
            "o_w_en":   Out(1),
            "o_w_bank": Out(1),
        }
        if top:
            del members["i_psum"]
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()

        w0 = Signal(signed(self._in_width))
        w1 = Signal(signed(self._in_width))

        with m.If(self.i_w_en):
            with m.If(self.i_w_bank):
                m.d.sync += w1.eq(self.i_w)
            with m.Else():
                m.d.sync += w0.eq(self.i_w)

        # The weight the next operand multiplies, a weight written this cycle included.
        weight = Signal(signed(self._in_width))
        writes = self.i_w_en & (self.i_w_bank == self.i_bank)
        m.d.sync += weight.eq(Mux(writes, self.i_w, Mux(self.i_bank, w1, w0)))

        # The bank and write-bank registers of the whole mesh are delayed copies of two
        # signals, so synthesis would merge every PE's with those of the PEs on its
        # anti-diagonal and route one flip-flop across the array. Marked registers stay per PE
        # (hw/dsp.py: KEEP_REGISTERS).
        o_bank = Signal(name="o_bank_reg", attrs=KEEP)
        o_w_bank = Signal(name="o_w_bank_reg", attrs=KEEP)
        m.d.sync += [
            self.o_a.eq(self.i_a),
            o_bank.eq(self.i_bank),
            self.o_w.eq(self.i_w),
            self.o_w_en.eq(self.i_w_en),
            o_w_bank.eq(self.i_w_bank),
        ]
        m.d.comb += [self.o_bank.eq(o_bank), self.o_w_bank.eq(o_w_bank)]
        if self._lut:
            # Three adder levels with a register after each: the DSP path's latency.
            product = tree_product(m, self.i_a, weight, name="product_q")
        else:
            # On an ECP5 all three registers are the MULT18X18D's own.
            product_dsp = product_register(m, self.i_a, weight, platform=platform,
                                           name="product", input_registers=True)
            # A fabric copy of the product: the route out of a DSP site ends at a flip-flop,
            # and the adder takes the product from there.
            product = Signal.like(product_dsp, name="product_q")
            m.d.sync += product.eq(product_dsp)
        if self._top:
            m.d.comb += self.o_psum.eq(product)
        else:
            # Truncation to acc_width is the modular wrap the software device also does.
            m.d.sync += self.o_psum.eq(self.i_psum + product)
        return m
