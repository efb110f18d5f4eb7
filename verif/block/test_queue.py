"""Block test: :class:`~bertaccel.hw.queue.Queue` against ``SyncFIFOBuffered``, cycle by cycle.

Both FIFOs get the same writes and reads: random data, a writer that offers in random cycles,
a reader whose ``r_en`` is random (also while the FIFO is empty), and runs where the reader
stalls long enough to fill it. Every cycle their ``w_rdy``, ``r_rdy``, ``level`` and, while the
head is valid, ``r_data`` must be equal (and the fast bits must be what ``r_fast_next`` said
they would be a cycle before, for the ``r_en`` given, whether the head is valid or not, and
``r_rdy_far`` must be ``r_rdy``): the cycle model (``sw/cycles/``) counts on
``SyncFIFOBuffered``'s timing for the instruction queues, the epilogue's beat queue and its
output FIFO. Amaranth's simulator runs it; the random seed is logged (``BERTACCEL_SEED``
replays another).
"""

import gc
import logging
import os
import random
import warnings

import pytest
from amaranth import Module
from amaranth.hdl import UnusedElaboratable
from amaranth.lib import fifo
from amaranth.sim import Simulator

from bertaccel.hw.queue import CHUNK, Queue

__all__ = []

SEED = int(os.environ.get("BERTACCEL_SEED", "1"))
WIDTH = 2 * CHUNK + 6       # three chunks, each with its copy of the control registers
CYCLES = 1500


#: Fast bits: none, the lowest, a few inside a chunk, a few across two chunks.
FAST = [slice(0, 0), slice(0, 5), slice(10, 15), slice(CHUNK - 2, CHUNK + 3), slice(0, 1)]


@pytest.mark.parametrize("depth,fast,far", list(zip([2, 3, 4, 6, 8], FAST,
                                                    [False, True, False, True, True])))
def test_queue_equals_syncfifobuffered(depth, fast, far):
    logging.getLogger("tb.queue").info("depth %d, fast bits %s, seed %d", depth, fast, SEED)
    rng = random.Random(SEED * 100 + depth)
    m = Module()
    m.submodules.ref = ref = fifo.SyncFIFOBuffered(width=WIDTH, depth=depth)
    m.submodules.dut = dut = Queue(width=WIDTH, depth=depth, fast=fast, far_valid=far)
    compared = {"reads": 0, "full": 0}
    has_fast = fast.stop > fast.start
    said = [None]                    # r_fast_next[r_en] of the cycle before

    async def bench(ctx):
        for cycle in range(CYCLES):
            # Phases of 50 cycles: free, a stalling reader, a slow writer.
            phase = (cycle // 50) % 3
            w_en = rng.random() < (0.9, 0.9, 0.3)[phase]
            r_en = rng.random() < (0.9, 0.1, 0.9)[phase]
            word = rng.getrandbits(WIDTH)
            for q in (ref, dut):
                ctx.set(q.w_en, w_en)
                ctx.set(q.w_data, word)
                ctx.set(q.r_en, r_en)
            for port in ("w_rdy", "r_rdy", "level"):
                want, got = ctx.get(getattr(ref, port)), ctx.get(getattr(dut, port))
                assert got == want, f"cycle {cycle}: {port} {got}, SyncFIFOBuffered {want}"
            if far:
                assert ctx.get(dut.r_rdy_far) == ctx.get(ref.r_rdy), f"cycle {cycle}: r_rdy_far"
            if ctx.get(ref.r_rdy):
                assert ctx.get(dut.r_data) == ctx.get(ref.r_data), f"cycle {cycle}: r_data"
                compared["reads"] += r_en
            if has_fast:
                bits = (ctx.get(dut.r_data) >> fast.start) & ((1 << fast.stop - fast.start) - 1)
                assert said[0] in (None, bits), f"cycle {cycle}: r_fast_next"
                said[0] = ctx.get(dut.r_fast_next[int(r_en)])
            compared["full"] += not ctx.get(ref.w_rdy)
            await ctx.tick()

    sim = Simulator(m)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()
    assert compared["reads"] > CYCLES // 4 and compared["full"] > 20, compared


def test_queue_refuses_bad_sizes():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="at least 2 entries, not 1"):
            Queue(width=WIDTH, depth=1)
        with pytest.raises(ValueError, match=f"a slice within its width {WIDTH}, not"):
            Queue(width=WIDTH, depth=4, fast=slice(0, WIDTH + 1))
        gc.collect()
