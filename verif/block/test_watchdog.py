"""The watchdog (:mod:`bertaccel.hw.watchdog`) under the Amaranth simulator, and its default
against the longest instruction of every preset."""

import pytest
from amaranth.sim import Simulator

from bertaccel.hw.config import PRESETS, preset
from bertaccel.hw.watchdog import DEFAULT_LIMIT, Wait, Watchdog, wait_text

__all__ = []


def _fires_after(limit, progress_at=(), cycles=64):
    """Cycles from the start until ``fired`` is seen, with progress in the cycles given; None
    if it never fires within ``cycles``."""
    dut = Watchdog()
    seen = []

    async def bench(ctx):
        ctx.set(dut.limit, limit)
        ctx.set(dut.start, 1)
        await ctx.tick()
        ctx.set(dut.start, 0)
        ctx.set(dut.running, 1)
        for cycle in range(cycles):
            ctx.set(dut.progress, cycle in progress_at)
            if ctx.get(dut.fired):
                seen.append(cycle)
                return
            await ctx.tick()

    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    return seen[0] if seen else None


@pytest.mark.parametrize("limit", [1, 2, 9])
def test_fires_after_limit_idle_cycles(limit):
    # `limit` idle cycles pass, the next edge sets `fired`: it is seen in cycle limit + 1.
    assert _fires_after(limit) == limit + 1


def test_progress_starts_the_count_over():
    assert _fires_after(5, progress_at={3}) == 3 + 1 + 5 + 1


def test_zero_is_off():
    assert _fires_after(0) is None


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_default_is_far_above_the_longest_instruction(name):
    """The longest instruction moves 2 * max(spad_depth, acc_depth) rows (a two-pass STORE)
    with no handshake outside its unit; the default leaves a factor of 16 over it."""
    cfg = preset(name)
    assert 16 * 2 * max(cfg.spad_depth, cfg.acc_depth) <= DEFAULT_LIMIT


def test_wait_text_names_each_field():
    names = [name for name, _ in Wait]
    assert wait_text(0) == "nothing"
    assert wait_text(1 << names.index("data")) == "the load unit waits for input data"
    assert wait_text((1 << len(names)) - 1).count(";") == len(names) - 1
