"""Logic whose LUT structure synthesis must keep: any function of four bits in one ECP5 LUT4,
an AND-OR in two levels of them, and an increment of a choice in one carry chain.

yosys's LUT mappers take a design's logic apart and map it again, and where a cone is not on
the design's deepest path they trade its depth for area: abc maps the one-hot shift of the
epilogue's SOFTMAX sum by p (eight terms a bit) as a chain of three or four LUTs before an adder
(docs/fpga.md, Timing choices in the RTL). With ``platform`` an ECP5
(:func:`~.dsp.uses_ecp5_dsp`) :func:`and_or` instantiates the LUT4s itself, which the mapper
leaves as they are: two terms a LUT, then ORs of up to four, so eight terms are two levels.
:func:`shifted` is a shift by a one-hot amount built of them. :func:`lut` holds any function
of up to four bits as one LUT4.
:func:`choice_plus_one` makes the choice in the carry chain's own LUT4s (CCU2C), where yosys
maps a multiplexer in front of an adder as a LUT and a route before the chain. Otherwise
(simulation, lint, the portable Verilog) each is the same function as an expression.
"""

from amaranth import Cat, Const, Instance, Mux, Signal

from .dsp import uses_ecp5_dsp

__all__ = ["and_or", "choice_plus_one", "lut", "shifted"]

#: LUT4 truth tables (bit ``A + 2B + 4C + 8D``): ``A & B | C & D`` and ``A | B | C | D``.
_AND_OR_INIT = sum(1 << i for i in range(16) if (i & 3) == 3 or (i & 12) == 12)
_OR_INIT = 0xFFFE

#: CCU2C half truth tables. A chosen bit's propagate is ``C if A else D`` and its generate (the
#: table's low four bits, ``C = D = 0``) is 0; the carry-in half generates 1 from ``D = 1``
#: (propagate ``INIT[8]`` is 0, generate ``INIT[0]`` is 1).
_CHOICE_INIT = sum(1 << i for i in range(16) if (i >> (2 if i & 1 else 3)) & 1)
_CARRY_IN_INIT = 0x0001


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
    pairs = [[*terms[k], *(terms[k + 1] if k + 1 < len(terms) else (0, 0))]
             for k in range(0, len(terms), 2)]
    level = [_lut(m, _AND_OR_INIT, pair, f"{name}_and{k}") for k, pair in enumerate(pairs)]
    depth = 0
    while len(level) > 1:
        level = [_lut(m, _OR_INIT, (level[k:k + 4] + [0, 0, 0])[:4], f"{name}_or{depth}_{k // 4}")
                 for k in range(0, len(level), 4)]
        depth += 1
    return level[0]


def shifted(m, value, hot, *, right=False, width=None, platform, name):
    """``value << j`` (or, with ``right``, ``value >> j``, arithmetic for a signed ``value``)
    for the one bit ``j`` set in ``hot``: an AND-OR of the shifted copies a bit
    (:func:`and_or`, two LUT levels for up to eight shifts on an ECP5). Its low ``width``
    bits: all of a left shift's by default, as many as ``value`` has for a right shift."""
    n, shifts = len(value), range(len(hot))
    if width is None:
        width = n if right else n + len(hot) - 1
    bits = [[(hot[j], value[k]) for j in shifts
             if (k := _source(i, j, n, right, value.shape().signed)) is not None]
            for i in range(width)]
    return Cat(and_or(m, terms, platform=platform, name=f"{name}_{i}")
               for i, terms in enumerate(bits))


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
    # One half a bit behind a first half that makes the carry-in from constants (the chain's
    # CIN is 0 and read by no half: the first half's propagate is 0).
    halves = [(_CARRY_IN_INIT, (0, 0, 0, 1))]
    halves += [(_CHOICE_INIT, (select, 0, when_set[k], when_clear[k])) for k in range(width)]
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


def _lut(m, init, inputs, name):
    """An ECP5 LUT4 of truth table ``init`` on ``inputs`` (A, B, C, D); its output."""
    out = Signal(name=name)
    m.submodules[name] = Instance("LUT4", p_INIT=Const(init, 16),
                                  **{f"i_{port}": value for port, value in zip("ABCD", inputs)},
                                  o_Z=out)
    return out
