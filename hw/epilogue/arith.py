"""Arithmetic building blocks of the epilogue datapath (:mod:`bertaccel.hw.epilogue`).

Every rounding shift of :mod:`bertaccel.golden.intops` is ``rshift_round(v, s) = (v + (2**s >> 1))
>> s``. The hardware never builds the 64-bit ``2**s >> 1`` addend: for every ``s >= 0``

    rshift_round(v, s) == (((v << 1) >> s) + 1) >> 1

(``s == 0`` gives ``(2v + 1) >> 1 == v``; for ``s >= 1``, ``floor((floor(v / 2**(s-1)) + 1) / 2)
== floor(v / 2**s + 1/2)``). So a rounding shift is a barrel shift of ``2v`` (split in a coarse
stage, multiples of 8, and a fine stage, 0..7) followed by a narrow ``+1`` that drops one bit,
and the saturation after it compares the shifted value itself, in parallel with that add
(:func:`round_parts`, :func:`round_limits`); a mux in the next stage picks the result
(:func:`pick`).
"""

from amaranth import Cat, Const, Mux, Signal, Value

from ..dsp import product_register

__all__ = [
    "INT8",
    "INT16",
    "INT24",
    "TILE",
    "at_least",
    "at_most",
    "biased",
    "clamp",
    "coarse",
    "fine",
    "greater",
    "msb",
    "no_borrow",
    "pick",
    "product",
    "round_limits",
    "round_parts",
    "rounded",
    "sum_shifted",
    "tiles",
    "tree",
]

#: Widest unsigned slice of a multiplier operand (ECP5 MULT18X18D: 18 bits signed).
TILE = 17

#: The saturation limits of golden's int24, int16 and int8 results.
INT24 = (-(1 << 23), (1 << 23) - 1)
INT16 = (-(1 << 15), (1 << 15) - 1)
INT8 = (-(1 << 7), (1 << 7) - 1)


def round_limits(lo, hi):
    """``(over, under)``: ``(w + 1) >> 1 > hi`` exactly when ``w >= over``, and ``< lo``
    exactly when ``w <= under``, so the compares do not wait for the rounding add."""
    return 2 * hi + 1, 2 * lo - 2


def rounded(w, lo, hi):
    """``(w + 1) >> 1`` in the bits of ``[lo, hi]`` and a sign: right whenever it is in range.
    A narrower range's result is the low bits of a wider one's."""
    bits = max(lo.bit_length(), hi.bit_length()) + 1
    return (w[:bits + 1] + 1)[1:bits + 1].as_signed()


def round_parts(w, lo, hi):
    """The parts of ``clamp((w + 1) >> 1, lo, hi)`` that need ``w``: ``(over, under, r)``, the
    compares beside the add (:func:`round_limits`), and the add only as wide as ``[lo, hi]``."""
    over, under = round_limits(lo, hi)
    return at_least(w, over), at_most(w, under), rounded(w, lo, hi)


def biased(value, width):
    """The signed ``value``, sign-extended to ``width`` bits, in offset binary (its top bit
    inverted), an unsigned value: ``a >= b`` exactly when ``biased(a, n) >= biased(b, n)``. An
    unsigned compare is a carry chain's carry out; a signed one also needs the top bits of the
    sum after it."""
    wide = Cat(value, value[-1].replicate(width - len(value)))
    return Cat(wide[:width - 1], ~wide[width - 1])


def no_borrow(a, b):
    """``a >= b`` for unsigned values or constants: ``a - b`` does not borrow, the top bit of
    a subtraction one bit wider than both. Timing: yosys maps a subtraction to one carry
    chain, whereas a compare whose operand has constant upper bits (a limit register's sign
    extension) can become LUT levels in front of a shorter chain."""
    a, b = Value.cast(a), Value.cast(b)
    width = max(len(a), len(b)) + 1
    return ~(Cat(a, Const(0, width - len(a))) - Cat(b, Const(0, width - len(b))))[width]


def at_least(value, bound):
    """``value >= bound`` for a signed ``value``, as an unsigned compare (:func:`biased`)."""
    n = len(value)
    limit = bound + (1 << (n - 1))
    return no_borrow(biased(value, n), limit) if limit > 0 else Const(1)


def at_most(value, bound):
    """``value <= bound`` for a signed ``value``, as an unsigned compare (:func:`biased`)."""
    n = len(value)
    limit = bound + (1 << (n - 1))
    return no_borrow(limit, biased(value, n)) if limit >= 0 else Const(0)


def greater(a, b):
    """``a > b`` for two signed values, as an unsigned compare (:func:`biased`)."""
    width = max(len(a), len(b))
    return ~no_borrow(biased(b, width), biased(a, width))


def pick(over, under, r, lo, hi):
    """The result of :func:`round_parts`, a stage later."""
    return Mux(over, hi, Mux(under, lo, r))


def clamp(v, lo, hi):
    """``v`` clamped to ``[lo, hi]``."""
    return Mux(v > hi, hi, Mux(v < lo, lo, v))


def coarse(value, amount):
    """``value >> (amount & ~7)``: the first stage of a barrel shifter (arithmetic if signed)."""
    return value >> Cat(Const(0, 3), amount[3:])


def fine(value, amount):
    """``value >> (amount & 7)``: the second stage."""
    return value >> amount[:3]


def msb(value):
    """Index of the highest set bit of the unsigned ``value`` (0 when ``value`` is 0 or 1).

    A tree of ``log2(len(value))`` levels, each an OR reduction beside a 2:1 mux, rather than a
    chain of ``len(value)`` priority muxes.
    """
    n = len(value)
    if n == 1:
        return Const(0, 1)
    half = 1 << ((n - 1).bit_length() - 1)     # the largest power of two below n
    width = half.bit_length() - 1              # msb of a half fits in these bits
    high, low = value[half:], value[:half]

    def widen(v):    # v < half: exactly ``width`` bits
        return Cat(v, Const(0, width - len(v))) if len(v) < width else v[:width]

    # high's msb is below ``half``, so adding ``half`` is setting the top bit.
    return Mux(high.any(), Cat(widen(msb(high)), Const(1, 1)), Cat(widen(msb(low)), Const(0, 1)))


def product(m, a, b, *, name, platform=None, input_registers=False):
    """``a * b`` a cycle later: a register that is the DSP's own on an ECP5 (operands of at
    most 18 bits each: one MULT18X18D). ``platform`` is the one ``elaborate`` got; with
    ``input_registers`` the operands are registered first, in the DSP, two cycles later."""
    return product_register(m, a, b, platform=platform, name=name, reset_less=True,
                            input_registers=input_registers)


def _slices(value):
    """``value`` as TILE-bit unsigned slices and their offsets; the top one keeps the sign."""
    n, signed = len(value), value.shape().signed
    out = []
    for lo in range(0, n, TILE):
        hi = min(lo + TILE, n)
        piece = value[lo:hi]
        out.append((piece.as_signed() if signed and hi == n else piece, lo))
    return out


def tiles(m, a, b, *, name, platform=None, input_registers=False):
    """``a * b`` as registered partial products, each one MULT18X18D: a list of (product, shift).

    Operands wider than :data:`TILE` bits are cut into slices; sum the list with
    :func:`sum_shifted`. ``platform`` is the one ``elaborate`` got (see
    :func:`bertaccel.hw.dsp.product_register`); ``input_registers`` as for :func:`product`.
    """
    return [(product(m, pa, pb, name=f"{name}_t{i}{j}", platform=platform,
                     input_registers=input_registers), sa + sb)
            for i, (pa, sa) in enumerate(_slices(a)) for j, (pb, sb) in enumerate(_slices(b))]


def sum_shifted(m, terms, *, name):
    """``sum(value << shift)`` over ``terms``, one level of adders a cycle.

    Returns
    -------
    (Value, int)
        The sum (a wiring shift of the root register) and the cycles it takes.
    """
    terms, levels = list(terms), 0
    while len(terms) > 1:
        levels += 1
        nodes = []
        for i in range(0, len(terms), 2):
            if i + 1 < len(terms):
                (a, sa), (b, sb) = terms[i], terms[i + 1]
                low = min(sa, sb)
                expr = (a << (sa - low)) + (b << (sb - low))
            else:                                  # an odd one out waits a cycle
                expr, low = terms[i]
            reg = Signal(expr.shape(), name=f"{name}_l{levels}_{i // 2}", reset_less=True)
            m.d.sync += reg.eq(expr)
            nodes.append((reg, low))
        terms = nodes
    value, shift = terms[0]
    return value << shift, levels


def tree(m, leaves, combine, shape_of, *, name, below=0):
    """A pipelined reduction tree: one level of ``combine`` per cycle.

    Parameters
    ----------
    leaves : list of Value
        A power of two of them.
    combine : callable(a, b) -> Value
    shape_of : callable(level) -> Shape
        Register shape of a node ``level`` levels above the leaves.
    below : int
        Levels the caller has built under ``leaves`` (they count in the levels returned and
        in the nodes' names).

    Returns
    -------
    (Signal, int)
        The root, and its levels (cycles after the leaves it is valid), ``below`` included.
    """
    level, depth = list(leaves), below
    assert len(level) & (len(level) - 1) == 0, "a tree needs a power of two of leaves"
    while len(level) > 1:
        depth += 1
        nodes = []
        for i in range(0, len(level), 2):
            node = Signal(shape_of(depth), name=f"{name}_l{depth}_{i // 2}", reset_less=True)
            m.d.sync += node.eq(combine(level[i], level[i + 1]))
            nodes.append(node)
        level = nodes
    return level[0], depth
