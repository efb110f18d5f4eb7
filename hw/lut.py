"""Logic whose LUT structure synthesis must keep: any function of four bits in one ECP5 LUT4,
an AND-OR in two levels of them, and adds whose operands' last level of logic is the carry
chain's own LUT4s.

yosys's LUT mappers take a design's logic apart and map it again, and where a cone is not on
the design's deepest path they trade its depth for area: abc maps the one-hot shift of the
epilogue's SOFTMAX sum by p (eight terms a bit) as a chain of three or four LUTs before an adder
(docs/fpga.md, Timing choices in the RTL). With ``platform`` an ECP5
(:func:`~.dsp.uses_ecp5_dsp`) :func:`and_or` instantiates the LUT4s itself, which the mapper
leaves as they are: two terms a LUT, then ORs of up to four, so eight terms are two levels.
:func:`shifted` is a shift by a one-hot amount built of them. :func:`lut` holds any function
of up to four bits as one LUT4, :func:`mux4` a choice of four bits in one slice (two LUT4s
and the PFUMX between them, no route), :func:`and_pairs` the first level of an AND-OR.
:func:`choice_plus_one` makes the choice in the carry chain's own LUT4s (CCU2C), where yosys
maps a multiplexer in front of an adder as a LUT and a route before the chain;
:func:`shifted_plus_one` the ORs of a shift's AND-OR, so that a shift and an increment are one
LUT level before the chain, :func:`sum_of_ors` the ORs of two such values that it adds, and
:func:`shifted_sum` two values shifted alike and added; :func:`cleared_sum` an accumulator's
add with its clear in the chain. Otherwise (simulation, lint, the portable Verilog) each is
the same function as an expression.
"""

from amaranth import Cat, Const, Instance, Mux, Signal

from .dsp import uses_ecp5_dsp

__all__ = ["and_or", "and_pairs", "choice_plus_one", "cleared_sum", "lut", "mux4", "shifted",
           "shifted_plus_one", "shifted_sum", "sum_of_ors"]

#: LUT4 truth tables (bit ``A + 2B + 4C + 8D``): ``A & B | C & D`` and ``A | B | C | D``.
_AND_OR_INIT = sum(1 << i for i in range(16) if (i & 3) == 3 or (i & 12) == 12)
_OR_INIT = 0xFFFE
#: ``C if A else B``.
_MUX2_INIT = sum(1 << i for i in range(16) if (i >> (2 if i & 1 else 1)) & 1)

#: CCU2C half truth tables. A chosen bit's propagate is ``C if A else D`` and its generate (the
#: table's low four bits, ``C = D = 0``) is 0; the carry-in half generates 1 from ``D = 1``
#: (propagate ``INIT[8]`` is 0, generate ``INIT[0]`` is 1).
_CHOICE_INIT = sum(1 << i for i in range(16) if (i >> (2 if i & 1 else 3)) & 1)
_CARRY_IN_INIT = 0x0001
#: A CCU2C half that adds ``A + (0 if C else B)`` (``D = 1``): the propagate is ``(B & ~C) ^ A``,
#: the generate ``A`` (the table at ``D = 0``), the carry whenever the propagate is 0.
_CLEARED_SUM_INIT = sum(1 << i for i in range(16)
                        if (((i >> 1) & ~(i >> 2) ^ i) & 1 if i & 8 else i & 1))
#: A CCU2C half that adds ``(A | B) + (C | D)``: the propagate is ``(A | B) ^ (C | D)``, the
#: generate ``A | B`` (the table at ``C = D = 0``), which is the carry whenever the propagate is 0.
_OR_SUM_INIT = sum(1 << i for i in range(16) if bool(i & 3) != bool(i & 12))


def and_or(m, terms, *, platform, name):
    """``OR(select & bit for select, bit in terms)``: a 1-bit signal.

    Parameters
    ----------
    m : Module
    terms : list of (Value, Value)
        1-bit pairs.
    platform
        The ``platform`` given to ``elaborate``.
    name : str
        The LUT instances are ``{name}_and{k}`` and ``{name}_or{level}_{k}``.
    """
    if not uses_ecp5_dsp(platform) or len(terms) < 2:
        return Cat(select & bit for select, bit in terms).any()
    level = _ands(m, terms, name)
    depth = 0
    while len(level) > 1:
        level = [_lut(m, _OR_INIT, (level[k:k + 4] + [0, 0, 0])[:4], f"{name}_or{depth}_{k // 4}")
                 for k in range(0, len(level), 4)]
        depth += 1
    return level[0]


def and_pairs(m, terms, *, platform, name):
    """``a & b | c & d`` of each two of ``terms`` ((select, bit) pairs), a list of 1-bit values:
    the first level of :func:`and_or`, one LUT4 each on an ECP5 (``{name}_and{k}``)."""
    if uses_ecp5_dsp(platform):
        return _ands(m, terms, name)
    return [Cat(select & bit for select, bit in terms[k:k + 2]).any()
            for k in range(0, len(terms), 2)]


def _ands(m, terms, name):
    """The first level of :func:`and_or`: ``a & b | c & d`` of each two terms, a LUT4 each."""
    pairs = [[*terms[k], *(terms[k + 1] if k + 1 < len(terms) else (0, 0))]
             for k in range(0, len(terms), 2)]
    return [_lut(m, _AND_OR_INIT, pair, f"{name}_and{k}") for k, pair in enumerate(pairs)]


def shifted(m, value, hot, *, right=False, width=None, platform, name):
    """``value << j`` (or, with ``right``, ``value >> j``, arithmetic for a signed ``value``)
    for the one bit ``j`` set in ``hot``: an AND-OR of the shifted copies a bit
    (:func:`and_or`, two LUT levels for up to eight shifts on an ECP5). Its low ``width``
    bits: all of a left shift's by default, as many as ``value`` has for a right shift."""
    return Cat(and_or(m, terms, platform=platform, name=f"{name}_{i}")
               for i, terms in enumerate(_shift_terms(value, hot, right, width)))


def shifted_plus_one(m, value, hot, *, right=False, platform, name):
    """``shifted(value, hot, right=right) + 1``, as wide as that shift (the carry out dropped):
    on an ECP5 the shift's first level of LUTs, and its ORs in the carry chain's own LUT4s, so
    that a shift by up to eight places is one LUT level before the chain. ``name``: the LUTs
    are ``{name}_{bit}_and{k}``, the carry cells ``{name}_ccu{k}``."""
    bits = _shift_terms(value, hot, right, None)
    if not uses_ecp5_dsp(platform):
        return (shifted(m, value, hot, right=right, platform=platform, name=name) + 1)[:len(bits)]
    ands = [_ands(m, terms, f"{name}_{i}") if terms else [] for i, terms in enumerate(bits)]
    assert all(len(level) <= 4 for level in ands), "more than eight shifts"
    # A bit's propagate is the OR of its four inputs and its generate (the table's low four
    # bits, the LUT2 of A and B) A | B: 0 whenever the propagate is, as an increment's must be.
    return _chain(m, [(_OR_INIT, (level + [0] * 4)[:4]) for level in ands], 1, name)


def shifted_sum(m, a, b, hot, *, width, platform, name):
    """``(a << j) + (b << j)`` for the one bit ``j`` set in ``hot`` (at most four shifts), its
    low ``width`` bits: each shift's ANDs one level of :func:`and_pairs`, their ORs and the
    add one carry chain (:func:`sum_of_ors`). ``name``: the LUTs are ``{name}_a{bit}_and{k}``
    and ``{name}_b{bit}_and{k}``, the carry cells ``{name}_ccu{k}``."""
    assert len(hot) <= 4, "more than four shifts"
    sides = [[and_pairs(m, terms, platform=platform, name=f"{name}_{side}{i}")
              for i, terms in enumerate(_shift_terms(value, hot, False, width))]
             for side, value in (("a", a), ("b", b))]
    return sum_of_ors(m, *sides, platform=platform, name=name)


def _shift_terms(value, hot, right, width):
    """Per bit of ``value`` shifted by the one-hot ``hot``, the (select, bit) pairs it ORs."""
    n, shifts = len(value), range(len(hot))
    if width is None:
        width = n if right else n + len(hot) - 1
    return [[(hot[j], value[k]) for j in shifts
             if (k := _source(i, j, n, right, value.shape().signed)) is not None]
            for i in range(width)]


def _source(i, j, n, right, signed):
    """The bit of an ``n``-bit value that bit ``i`` of it shifted by ``j`` takes (None: 0)."""
    if right:
        return i + j if i + j < n else (n - 1 if signed else None)
    return i - j if 0 <= i - j < n else None


def choice_plus_one(m, select, when_set, when_clear, *, platform, name):
    """``Mux(select, when_set, when_clear) + 1``, as wide as the operands (the carry out
    dropped). ``name``: the carry cells are ``{name}_ccu{k}``."""
    width = len(when_set)
    assert len(when_clear) == width, (len(when_clear), width)
    if not uses_ecp5_dsp(platform):
        return (Mux(select, when_set, when_clear) + 1)[:width]
    return _chain(m, [(_CHOICE_INIT, (select, 0, when_set[k], when_clear[k]))
                      for k in range(width)], 1, name)


def sum_of_ors(m, left, right, *, platform, name):
    """``OR(left[i]) + OR(right[i])`` over the bits ``i``, as wide as ``left`` (the carry out
    dropped); ``left[i]`` and ``right[i]`` are lists of at most two 1-bit values. On an ECP5
    the ORs are made in the carry chain's own LUT4s, so that values one LUT level deep (an
    :func:`and_pairs`, a :func:`mux4`) are added with no LUT and no route between.
    ``name``: the carry cells are ``{name}_ccu{k}``."""
    width = len(left)
    assert len(right) == width and all(len(bits) <= 2 for bits in left + right)
    zero = Const(0, 1)
    left, right = ([[*bits, zero, zero][:2] for bits in side] for side in (left, right))
    if not uses_ecp5_dsp(platform):
        ors = [Cat(Cat(*bits).any() for bits in side) for side in (left, right)]
        return (ors[0] + ors[1])[:width]
    return _chain(m, [(_OR_SUM_INIT, (*left[i], *right[i])) for i in range(width)], 0, name)


def cleared_sum(m, clear, a, b, *, width, platform, name):
    """``(0 if clear else a) + b``, its low ``width`` bits (``a`` and ``b`` extended by their
    signedness): on an ECP5 one carry chain whose LUT4s make the choice, where yosys puts a
    LUT and a route in front of the chain. ``name``: the carry cells are ``{name}_ccu{k}``."""
    if not uses_ecp5_dsp(platform):
        return (Mux(clear, 0, a) + b)[:width]
    a, b = (_extended(value, width) for value in (a, b))
    return _chain(m, [(_CLEARED_SUM_INIT, (b[i], a[i], clear, 1)) for i in range(width)], 0,
                  name)


def _extended(value, width):
    """``value``'s low ``width`` bits, extended by its signedness."""
    fill = value[-1] if value.shape().signed else Const(0, 1)
    return Cat(value, fill.replicate(max(0, width - len(value))))[:width]


def _chain(m, bits, carry_in, name):
    """A sum of ``len(bits)`` bits in one carry chain of CCU2C cells, the carry out dropped;
    ``bits`` gives each bit's truth table and the four inputs of its LUT4 (``(init, (a, b, c,
    d))``): the propagate is the table, the generate its low four bits (the LUT2 of A and B),
    which must be the bit's carry wherever the propagate is 0."""
    width = len(bits)
    # One half a bit behind a first half that makes ``carry_in`` from constants (the chain's
    # CIN is 0 and read by no half: the first half's propagate is 0).
    halves = [(_CARRY_IN_INIT, (0, 0, 0, 1)) if carry_in else (0, (0, 0, 0, 0)), *bits]
    halves += [(0, (0, 0, 0, 0))] * (len(halves) % 2)
    total = Signal(width, name=f"{name}_s")
    carry = None
    for k in range(0, len(halves), 2):
        cout = Signal(name=f"{name}_co{k // 2}")
        # nextpnr's packer wants every port of a carry cell connected.
        ports = {"i_CIN": Const(0, 1) if carry is None else carry, "o_COUT": cout,
                 "o_S0": total[k - 1] if k else Signal(name=f"{name}_cin"),
                 "o_S1": total[k] if k < width else Signal(name=f"{name}_top")}
        for half in (0, 1):
            init, inputs = halves[k + half]
            ports[f"p_INIT{half}"] = Const(init, 16)
            ports[f"p_INJECT1_{half}"] = "NO"
            ports.update({f"i_{port}{half}": value for port, value in zip("ABCD", inputs)})
        m.submodules[f"{name}_ccu{k // 2}"] = Instance("CCU2C", **ports)
        carry = cout
    return total


def lut(m, function, inputs, *, platform, name):
    """``function`` of up to four 1-bit ``inputs`` (it is called with as many 0 or 1 ints): a
    LUT4 named ``name`` on an ECP5, elsewhere the same truth table indexed by the inputs."""
    inputs = list(inputs)
    assert 1 <= len(inputs) <= 4, len(inputs)
    init = sum(1 << i for i in range(1 << len(inputs))
               if function(*((i >> k) & 1 for k in range(len(inputs)))))
    if not uses_ecp5_dsp(platform):
        return Const(init, 1 << len(inputs)).bit_select(Cat(*inputs), 1)
    return _lut(m, init, inputs + [0] * (4 - len(inputs)), name)


def mux4(m, select, inputs, *, platform, name):
    """``inputs[select]``: one of four 1-bit values by a 2-bit ``select``. On an ECP5 two LUT4s
    (``{name}_lo``, ``{name}_hi``) and the slice's PFUMX that chooses between them
    (``{name}_mux``), no route between."""
    assert len(inputs) == 4 and len(select) == 2
    if not uses_ecp5_dsp(platform):
        return Cat(*inputs).bit_select(select, 1)
    low = _lut(m, _MUX2_INIT, [select[0], inputs[0], inputs[1], 0], f"{name}_lo")
    high = _lut(m, _MUX2_INIT, [select[0], inputs[2], inputs[3], 0], f"{name}_hi")
    out = Signal(name=name)
    m.submodules[f"{name}_mux"] = Instance("PFUMX", i_ALUT=high, i_BLUT=low, i_C0=select[1],
                                           o_Z=out)
    return out


def _lut(m, init, inputs, name):
    """An ECP5 LUT4 of truth table ``init`` on ``inputs`` (A, B, C, D); its output."""
    out = Signal(name=name)
    m.submodules[name] = Instance("LUT4", p_INIT=Const(init, 16),
                                  **{f"i_{port}": value for port, value in zip("ABCD", inputs)},
                                  o_Z=out)
    return out
