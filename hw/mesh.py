"""The systolic mesh: a grid of PEs with input skew and output deskew."""

from amaranth import Module, Signal, signed
from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

from .pe import ProcessingElement

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

    Inside, the PEs are built for FPGA timing (see :class:`ProcessingElement`): the bank travels
    one cycle ahead of its operand, so each PE registers the weight it will multiply by, and
    the top row, which has no partial sum to add, drops its sum register and spends that cycle
    on an input register. So every operand goes from the scratchpad's block RAM into a
    flip-flop first (nextpnr puts the ECP5 block RAM's clock-to-output at 5.8 ns, which leaves
    no time for anything but routing), every multiplier sees flip-flops only, and the latency
    stays ``cfg.mesh_latency``.

    Weights shift in from the top: while ``i_w_en`` is high, row vector ``i_w`` enters row 0 of
    bank ``i_w_bank`` and every row of that bank moves down one. After ``rows`` shifts, row *r*
    of the bank holds the vector shifted in ``rows - 1 - r`` cycles before the last one.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    i_a : In(ArrayLayout(signed(in_width), rows))
    i_bank : In(1)
    i_w : In(ArrayLayout(signed(in_width), cols))
    i_w_en, i_w_bank : In(1)
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
            "o_c":      Out(data.ArrayLayout(signed(cfg.acc_width), cfg.cols)),
        })

    @staticmethod
    def _delay(m, signal, cycles, name):
        for stage in range(cycles):
            delayed = Signal.like(signal, name=f"{name}_d{stage + 1}")
            m.d.sync += delayed.eq(signal)
            signal = delayed
        return signal

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()

        pes = [[ProcessingElement(in_width=cfg.in_width, acc_width=cfg.acc_width,
                                  bank_lookahead=True, top=r == 0)
                for _ in range(cfg.cols)] for r in range(cfg.rows)]
        for r, row in enumerate(pes):
            for c, pe in enumerate(row):
                m.submodules[f"pe_{r}_{c}"] = pe

        for r in range(cfg.rows):
            # Skew: row r meets the wavefront r cycles after row 0. Its bank is delayed one
            # cycle less (the PEs look ahead), and the top row's operand one cycle more (its
            # input register, paid for by its PEs having no sum register).
            a = self._delay(m, self.i_a[r], max(r, 1), f"skew_a{r}")
            bank = self._delay(m, self.i_bank, max(r, 1) - 1, f"skew_bank{r}")
            for c in range(cfg.cols):
                pe = pes[r][c]
                m.d.comb += [
                    pe.i_a.eq(a),
                    pe.i_bank.eq(bank),
                    pe.i_w_en.eq(self.i_w_en),
                    pe.i_w_bank.eq(self.i_w_bank),
                    pe.i_w.eq(self.i_w[c] if r == 0 else pes[r - 1][c].o_w),
                ]
                if r > 0:
                    m.d.comb += pe.i_psum.eq(pes[r - 1][c].o_psum)
                a, bank = pe.o_a, pe.o_bank

        for c in range(cfg.cols):
            # Deskew: column c leaves c cycles after column 0.
            out = self._delay(m, pes[cfg.rows - 1][c].o_psum, cfg.cols - 1 - c, f"deskew_c{c}")
            m.d.comb += self.o_c[c].eq(out)
        return m
