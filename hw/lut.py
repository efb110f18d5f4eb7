"""Logic whose LUT structure synthesis must keep: an AND-OR in two levels of ECP5 LUT4s.

yosys's LUT mappers take a design's logic apart and map it again, and where a cone is not on
the design's deepest path they trade its depth for area: abc maps the one-hot shift of the
epilogue's sum tree (eight terms a bit) as a chain of three or four LUTs in front of an adder
(docs/fpga.md, Timing choices in the RTL). With ``platform`` an ECP5
(:func:`~.dsp.uses_ecp5_dsp`) :func:`and_or` instantiates the LUT4s itself, which the mapper
leaves as they are: two terms a LUT, then ORs of up to four, so eight terms are two levels.
Otherwise (simulation, lint, the portable Verilog) it is the same function as an expression.
"""

from amaranth import Cat, Const, Instance, Signal

from .dsp import uses_ecp5_dsp

__all__ = ["and_or"]

#: LUT4 truth tables (bit ``A + 2B + 4C + 8D``): ``A & B | C & D`` and ``A | B | C | D``.
_AND_OR_INIT = sum(1 << i for i in range(16) if (i & 3) == 3 or (i & 12) == 12)
_OR_INIT = 0xFFFE


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


def _lut(m, init, inputs, name):
    """An ECP5 LUT4 of truth table ``init`` on ``inputs`` (A, B, C, D); its output."""
    out = Signal(name=name)
    m.submodules[name] = Instance("LUT4", p_INIT=Const(init, 16),
                                  **{f"i_{port}": value for port, value in zip("ABCD", inputs)},
                                  o_Z=out)
    return out
