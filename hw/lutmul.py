"""A signed multiply in FPGA logic: partial products summed by a registered adder tree.

An ECP5-85k has 156 MULT18X18D, and a core needs one for every PE besides the epilogue's and the
checker's (``fpga/targets.py``), so a PE array of more than about 100 MACs has PEs that must
multiply in the fabric (``AccelConfig.lut_pes``). :func:`tree_product` builds that multiply with
the latency of the DSP path of :class:`~bertaccel.hw.pe.ProcessingElement` (operand registers,
the product register, its fabric copy: three cycles from the operands to the register the adder
reads) out of nothing but ANDs and adds, so yosys finds no ``$mul`` to map to a DSP block.

For ``a`` and ``b`` of ``n`` bits, signed, ``a * b = sum(a * b[i] << i for i < n - 1) -
(a * b[n - 1] << (n - 1))``: each row ``a * b[i]`` is ``a`` or 0 (a LUT per bit, the AND of
two inputs), and the rows are summed in pairs, then pairs of pairs, one adder level a stage,
each a carry chain: for int8, four adds of two rows into registers, two adds of those into
registers, and the last add into the product register. Every stage is one LUT level (or none)
and one carry chain between registers; no stage routes through a multiplier.
"""

from amaranth import Mux, Signal

__all__ = ["tree_product", "TREE_LATENCY"]

#: Cycles from the operands to the product register of :func:`tree_product`.
TREE_LATENCY = 3


def _rows(a, b):
    """The partial-product rows of ``a * b`` (both signed): ``(row, shift, negate)``."""
    n = len(b)
    return [(Mux(b[i], a, 0), i, i == n - 1) for i in range(n)]


def _level(m, terms, *, name, stage):
    """Pairs of ``(value, shift, negate)`` terms added into registers, one carry chain each:
    ``(x << s) +/- (y << t)`` is ``((x +/- (y << (t - s))) << s)``, so each register holds the
    sum above its lowest shift, and the lower term's low bits pass through the add."""
    out = []
    for k in range(0, len(terms), 2):
        (x, sx, nx), (y, sy, ny) = terms[k], terms[k + 1]
        assert sy > sx and not nx
        shifted = y << (sy - sx)
        value = x - shifted if ny else x + shifted
        reg = Signal(value.shape(), name=f"{name}_s{stage}_{k // 2}")
        m.d.sync += reg.eq(value)
        out.append((reg, sx, False))
    return out


def tree_product(m, a, b, *, name):
    """A signal that holds ``a * b`` of :data:`TREE_LATENCY` cycles before, built of ANDs and
    adds (no multiplier), for a signed ``b`` of 2, 4 or 8 bits.

    Parameters
    ----------
    m : Module
    a, b : Value
        Signed operands; the rows of ``b`` are summed in ``log2(len(b))`` adder levels, and
        plain registers after them make up :data:`TREE_LATENCY`.
    name : str
        The stage registers are ``{name}_s{stage}_{k}``.

    Returns
    -------
    Signal
        Of the shape of ``a * b``: the last stage register's low bits. The registers clear
        with the ``sync`` domain's reset, as a DSP's do.
    """
    assert a.shape().signed and b.shape().signed and len(b) in (2, 4, 8)
    terms = _rows(a, b)
    stage = 0
    while len(terms) > 1:
        terms = _level(m, terms, name=name, stage=stage)
        stage += 1
    value = terms[0][0]
    for extra in range(stage, TREE_LATENCY):
        reg = Signal(value.shape(), name=f"{name}_s{extra}_0")
        m.d.sync += reg.eq(value)
        value = reg
    product = Signal((a * b).shape(), name=name)
    m.d.comb += product.eq(value[:len(product)])
    return product
