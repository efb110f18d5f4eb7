"""A weight-stationary processing element."""

from amaranth import Module, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

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

    Parameters
    ----------
    in_width : int
        Operand and weight width.
    acc_width : int
        Partial-sum width; sums wrap modulo ``2 ** acc_width``.

    Members
    -------
    i_a, i_bank : In
        Operand from the left and the weight bank it uses.
    o_a, o_bank : Out
        The same, registered, to the right.
    i_psum, o_psum : In, Out
        Partial sum from above; registered sum to below.
    i_w, o_w : In, Out
        Weight from above; the same, registered, to below.
    i_w_en, i_w_bank : In
        Weight write strobe and the bank it writes, from the left.
    o_w_en, o_w_bank : Out
        The same, registered, to the right.
    """

    def __init__(self, *, in_width=8, acc_width=32):
        self._in_width = in_width
        self._acc_width = acc_width
        super().__init__({
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
        })

    def elaborate(self, platform):
        m = Module()

        w0 = Signal(signed(self._in_width))
        w1 = Signal(signed(self._in_width))
        product = Signal(signed(2 * self._in_width))

        with m.If(self.i_w_en):
            with m.If(self.i_w_bank):
                m.d.sync += w1.eq(self.i_w)
            with m.Else():
                m.d.sync += w0.eq(self.i_w)

        weight = Signal(signed(self._in_width))
        with m.If(self.i_bank):
            m.d.comb += weight.eq(w1)
        with m.Else():
            m.d.comb += weight.eq(w0)

        m.d.sync += [
            self.o_a.eq(self.i_a),
            self.o_bank.eq(self.i_bank),
            self.o_w.eq(self.i_w),
            self.o_w_en.eq(self.i_w_en),
            self.o_w_bank.eq(self.i_w_bank),
            product.eq(self.i_a * weight),
            # Truncation to acc_width is the modular wrap the software device also does.
            self.o_psum.eq(self.i_psum + product),
        ]
        return m
