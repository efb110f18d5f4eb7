"""A weight-stationary processing element."""

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .dsp import product_register

__all__ = ["ProcessingElement"]


class ProcessingElement(wiring.Component):
    """One multiply-accumulate cell of the systolic mesh.

    The PE holds two weights (banks 0 and 1). An operand enters from the left with the bank it
    must be multiplied by; it leaves to the right one cycle later. The product is registered
    (so the multiplier and the adder are in separate stages, which an FPGA DSP absorbs), and the
    partial sum from above plus that product leaves downwards one cycle after the product.
    A PE therefore adds two cycles to the vertical path and one to the horizontal path.

    Weights travel like operands, in the other direction: a weight enters from above and leaves
    downwards one cycle later through a plain pipeline register (``o_w``), whatever the write
    strobe says. The strobe (``i_w_en``, with the bank ``i_w_bank`` to write) enters from the
    left and leaves to the right one cycle later, beside the operand. While it is high, bank
    ``i_w_bank`` takes ``i_w`` at the clock edge: an operand in the same cycle still multiplies
    the old weight, an operand in the next cycle the new one. The banks never shift, so writing
    one bank never disturbs the other, nor the other weights of the same bank.

    The mesh builds its PEs with two options, both timing choices for FPGAs, where a DSP
    multiplier is combinational (an ECP5 MULT18X18D takes 3.9 ns in nextpnr's model, leaving
    about 2.5 ns of a 150 MHz cycle to reach it and leave it):

    * ``bank_lookahead``: ``i_bank`` names the bank of the operand that arrives one cycle later
      (and ``o_bank`` leads ``o_a`` the same way). The PE selects that bank's weight a cycle
      early and registers it, so no bank multiplexer sits in front of the multiplier. A weight
      written in that cycle goes straight into the register, so the rule above still holds.
    * ``top``: the PE heads its column, so it has no ``i_psum`` and ``o_psum`` is its product
      (sign-extended) with no sum register. The mesh spends that saved cycle on an input
      register for the top row.

    The product register is the multiplier's own output register on an ECP5
    (:func:`bertaccel.hw.dsp.product_register`).

    Parameters
    ----------
    in_width : int
        Operand and weight width.
    acc_width : int
        Partial-sum width; sums wrap modulo ``2 ** acc_width``.
    bank_lookahead, top : bool
        See above.

    Members
    -------
    i_a, i_bank : In
        Operand from the left and the weight bank it uses (with ``bank_lookahead``: the bank of
        the next operand).
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

    def __init__(self, *, in_width=8, acc_width=32, bank_lookahead=False, top=False):
        self._in_width = in_width
        self._acc_width = acc_width
        self._bank_lookahead = bank_lookahead
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

        weight = Signal(signed(self._in_width))
        selected = Mux(self.i_bank, w1, w0)
        if self._bank_lookahead:
            # The weight the next operand multiplies, including one written this cycle.
            writes = self.i_w_en & (self.i_w_bank == self.i_bank)
            m.d.sync += weight.eq(Mux(writes, self.i_w, selected))
        else:
            m.d.comb += weight.eq(selected)

        m.d.sync += [
            self.o_a.eq(self.i_a),
            self.o_bank.eq(self.i_bank),
            self.o_w.eq(self.i_w),
            self.o_w_en.eq(self.i_w_en),
            self.o_w_bank.eq(self.i_w_bank),
        ]
        # On an ECP5 the product register is the MULT18X18D's own output register.
        product = product_register(m, self.i_a, weight, platform=platform, name="product")
        if self._top:
            m.d.comb += self.o_psum.eq(product)
        else:
            # Truncation to acc_width is the modular wrap the software device also does.
            m.d.sync += self.o_psum.eq(self.i_psum + product)
        return m
