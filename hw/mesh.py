"""The systolic mesh: a grid of PEs with input skew and output deskew."""

from amaranth import Module, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .dsp import KEEP
from .pe import ProcessingElement
from .pipeline import delay

__all__ = ["SystolicMesh"]


class SystolicMesh(wiring.Component):
    """A ``rows`` x ``cols`` weight-stationary mesh.

    An operand row ``i_a`` (``rows`` values, one per PE row) presented in cycle *t* yields the
    ``cols`` sums ``o_c[c] = sum_r i_a[r] * W[r][c]`` in cycle *t* + ``cfg.mesh_latency``, where
    ``W`` is the weight bank named by ``i_bank`` in that cycle. A new row may enter every cycle;
    the mesh has no valid signals, because the execute unit tracks which outputs are real.

    Row *r* of the operand is delayed *r* cycles before it enters the mesh (skew), and column *c*
    of the result is delayed ``cols - 1 - c`` cycles after it leaves (deskew), so callers see
    whole vectors.

    Weights travel the way operands do (a "weight wave"): while ``i_w_en`` is high in cycle *t*,
    the row vector ``i_w`` is written into row ``i_w_row`` of bank ``i_w_bank``. Column *c* of
    the vector is delayed *c* cycles before it enters the top row (skew) and then moves down one
    PE row a cycle; the write strobe, decoded for row ``i_w_row``, is delayed that many cycles
    at the left edge and then moves right one PE a cycle. Both meet at PE(*r*, *c*) in cycle
    *t* + *r* + *c*, which writes at the end of that cycle. An operand row presented in cycle
    *s* is at PE(*r*, *c*) in cycle *s* + *r* + *c*, so wherever they meet the two keep their
    order: every operand row presented after cycle *t* multiplies the new weights, every one
    presented in cycle *t* or before the old ones. A bank can therefore be rewritten right
    behind its last operand row, while the other bank serves operands.

    Inside, the PEs are built for FPGA timing (see :class:`ProcessingElement`): the bank
    travels one cycle ahead of its operand, so each PE registers the weight it will multiply by;
    the multipliers' operands and products are registered; and the top row, which has no
    partial sum to add, drops its sum register and spends that cycle on an input register. The
    top row's weights and write strobes get the same input register (and the second row takes
    the top row's weights from it, not from the top PEs' pipeline registers), so the timing
    above holds in every row with the top row one cycle later throughout. Every operand and
    weight thus goes from the scratchpads' block RAM into a flip-flop first (nextpnr puts the
    ECP5 block RAM's clock-to-output at 5.8 ns, which leaves no time for anything but
    routing), and every multiplier sees its own input registers only. The latency is
    ``cfg.mesh_latency``. The PEs of ``cfg.is_lut_pe`` (``cfg.lut_pes`` of them, the last
    columns) multiply in the fabric instead of a DSP block, with the same latency.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    i_a : In(ArrayLayout(signed(in_width), rows))
    i_bank : In(1)
    i_w : In(ArrayLayout(signed(in_width), cols))
    i_w_en, i_w_bank : In(1)
    i_w_row : In(range(rows))
    o_c : Out(ArrayLayout(signed(acc_width), cols))
    """

    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({
            "i_a":      In(data.ArrayLayout(signed(cfg.in_width), cfg.rows)),
            "i_bank":   In(1),
            "i_w":      In(data.ArrayLayout(signed(cfg.in_width), cfg.cols)),
            "i_w_en":   In(1),
            "i_w_bank": In(1),
            "i_w_row":  In(range(cfg.rows)),
            "o_c":      Out(data.ArrayLayout(signed(cfg.acc_width), cfg.cols)),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()

        pes = [[ProcessingElement(in_width=cfg.in_width, acc_width=cfg.acc_width, top=r == 0,
                                  lut=cfg.is_lut_pe(r, c))
                for c in range(cfg.cols)] for r in range(cfg.rows)]
        for r, row in enumerate(pes):
            for c, pe in enumerate(row):
                m.submodules[f"pe_{r}_{c}"] = pe

        # Row r of the mesh works `skew[r]` cycles behind the inputs: r, except the top row,
        # which is one cycle late (its input register, paid for by its PEs having no sum
        # register, so row 1 is still one cycle behind it).
        skew = [max(r, 1) for r in range(cfg.rows)]
        for c in range(cfg.cols):
            # Weight skew: column c of a weight row enters c cycles after column 0, and after
            # the top row's input register. Rows 0 and 1 take it from there; each row below
            # from the pipeline register of the PE above.
            # (Operand and weight skew registers are reset-less: the first takes a scratchpad
            # read, and an ECP5 flow moves it into the block RAM, fpga/ramreg.py.)
            top = delay(m, self.i_w[c], c + 1, name=f"skew_w{c}")
            for r in range(cfg.rows):
                m.d.comb += pes[r][c].i_w.eq(top if r <= 1 else pes[r - 1][c].o_w)

        for r in range(cfg.rows):
            # Skew: row r meets the wavefront skew[r] cycles after the inputs; so do the
            # weights, so the write strobe of row r is skewed the same way and meets its weight
            # row in every column. The bank is delayed one cycle less (the PEs look ahead).
            a = delay(m, self.i_a[r], skew[r], name=f"skew_a{r}")
            # (Every row's bank and write-bank skew is a copy of the same signal: the
            # registers are kept apart, as in the PEs.)
            bank = delay(m, self.i_bank, skew[r] - 1, name=f"skew_bank{r}", reset_less=False,
                         attrs=KEEP)
            w_en = delay(m, self.i_w_en & (self.i_w_row == r), skew[r], name=f"skew_w_en{r}",
                         reset_less=False)
            w_bank = delay(m, self.i_w_bank, skew[r], name=f"skew_w_bank{r}", reset_less=False,
                           attrs=KEEP)
            for c in range(cfg.cols):
                pe = pes[r][c]
                m.d.comb += [
                    pe.i_a.eq(a),
                    pe.i_bank.eq(bank),
                    pe.i_w_en.eq(w_en),
                    pe.i_w_bank.eq(w_bank),
                ]
                if r > 0:
                    m.d.comb += pe.i_psum.eq(pes[r - 1][c].o_psum)
                a, bank, w_en, w_bank = pe.o_a, pe.o_bank, pe.o_w_en, pe.o_w_bank

        for c in range(cfg.cols):
            # Deskew: column c leaves c cycles after column 0.
            out = delay(m, pes[cfg.rows - 1][c].o_psum, cfg.cols - 1 - c, name=f"deskew_c{c}",
                        reset_less=False)
            m.d.comb += self.o_c[c].eq(out)
        return m
