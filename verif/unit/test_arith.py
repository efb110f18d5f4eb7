"""The epilogue's compare helpers (``bertaccel.hw.epilogue.arith``) against Python's integers:
every value of a narrow signed signal, against every bound in its range or every value of a
narrower one."""

import itertools

from amaranth import Module, Signal, signed
from amaranth.sim import Simulator

from bertaccel.hw.epilogue.arith import at_least, at_most, biased, greater, no_borrow

__all__ = []

WIDTH = 5


def span(width):
    """Every value of a ``width``-bit signed signal."""
    return range(-(1 << (width - 1)), 1 << (width - 1))


def evaluate(signals, exprs, cases):
    """The values of ``exprs`` (a dict of name: expression) with ``signals`` set to each of
    ``cases`` (tuples), as ``{case: {name: value}}``."""
    m = Module()
    outs = {name: Signal(len(expr), name=name) for name, expr in exprs.items()}
    m.d.comb += [outs[name].eq(expr) for name, expr in exprs.items()]
    seen = {}

    async def bench(ctx):
        for case in cases:
            for signal, value in zip(signals, case):
                ctx.set(signal, value)
            seen[case] = {name: ctx.get(out) for name, out in outs.items()}

    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()
    return seen


def test_at_least_at_most_every_bound():
    """Every bound in the value's range and two bits past it either way."""
    a = Signal(signed(WIDTH))
    bounds = list(enumerate(span(WIDTH + 2)))
    exprs = {}
    for key, bound in bounds:
        exprs[f"ge{key}"] = at_least(a, bound)
        exprs[f"le{key}"] = at_most(a, bound)
    seen = evaluate([a], exprs, [(value,) for value in span(WIDTH)])
    for (value,), flags in seen.items():
        for key, bound in bounds:
            assert flags[f"ge{key}"] == (value >= bound), (value, bound)
            assert flags[f"le{key}"] == (value <= bound), (value, bound)


def test_no_borrow_every_pair():
    """Two unsigned values of different widths, and each against constants."""
    a, b = Signal(WIDTH), Signal(WIDTH - 2)
    constants = range(0, 1 << (WIDTH + 1), 3)
    exprs = {"ab": no_borrow(a, b), "ba": no_borrow(b, a)}
    exprs.update({f"ac{c}": no_borrow(a, c) for c in constants})
    exprs.update({f"ca{c}": no_borrow(c, a) for c in constants})
    seen = evaluate([a, b], exprs, list(itertools.product(range(1 << WIDTH),
                                                          range(1 << (WIDTH - 2)))))
    for (x, y), flags in seen.items():
        assert flags["ab"] == (x >= y) and flags["ba"] == (y >= x), (x, y)
        for c in constants:
            assert flags[f"ac{c}"] == (x >= c) and flags[f"ca{c}"] == (c >= x), (x, c)


def test_biased_orders_two_widths_as_signed():
    """A wide value against a narrower register, both biased to one width wider than either
    (as the front's RND stage compares a lane's field with its limit registers); ``greater``
    of the two."""
    a, b = Signal(signed(WIDTH)), Signal(signed(WIDTH - 2))
    wide = WIDTH + 3
    exprs = {"ge": biased(a, wide) >= biased(b, wide), "le": biased(a, wide) <= biased(b, wide),
             "gt": greater(a, b), "lt": greater(b, a)}
    cases = list(itertools.product(span(WIDTH), span(WIDTH - 2)))
    for (x, y), flags in evaluate([a, b], exprs, cases).items():
        assert (flags["ge"], flags["le"]) == (x >= y, x <= y), (x, y)
        assert (flags["gt"], flags["lt"]) == (x > y, x < y), (x, y)
