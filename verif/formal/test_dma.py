"""Formal proof of the shell's read DMA engine, :class:`~bertaccel.hw.axi.dma.ReadEngine`.

With any ``base``, ``count``, ``stop``, AR backpressure and reset in any cycle (``start``
only while ``idle``, as documented; read data only for words requested), every burst the
engine asks for starts at a bus word, is at most ``max_burst`` words long, and ends at or
before the next 4 KiB boundary; an AR request stays up, unchanged, until taken; the bursts
start at ``base`` (to its bus word) and follow each other with no gap and no overlap; and they
never ask for more words than ``count`` beats fill. k-induction (the engine's address stays
word aligned: its invariant, under ``FORMAL``) for the burst rules; the address sequence and
word count bounded to 8 cycles, which reach a start and then bursts of every length, back
to back and across a boundary.
"""

import pytest
from amaranth import Elaboratable, Module, Signal
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Cover

from bertaccel.hw.axi.dma import ReadEngine
from bertaccel.hw.formal import FORMAL

from verif.tb.formal import check

BUS_BYTES, MAX_BURST = 4, 4


class ReadEngineProperties(Elaboratable):
    def __init__(self, *, sequence):
        self.sequence = sequence
        self.engine = ReadEngine(addr_width=16, bus_width=8 * BUS_BYTES,
                                 beat_width=8 * BUS_BYTES, max_burst=MAX_BURST, count_width=6)

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = engine = self.engine
        for port in (engine.start, engine.base, engine.count, engine.stop, engine.ar.ready,
                     engine.r.valid, engine.r.payload.data, engine.o.ready):
            m.d.comb += port.eq(AnySeq(len(port)))
        ar = engine.ar
        words = ar.payload.len + 1
        taken = ar.valid & ar.ready
        outstanding = Signal(8)
        m.d.sync += outstanding.eq(outstanding + (taken * words)
                                   - (engine.r.valid & engine.r.ready))
        m.d.comb += [Assume(~engine.start | engine.idle),
                     Assume(~engine.r.valid | (outstanding != 0))]
        waiting, before = Signal(), Signal.like(ar.payload)
        m.d.sync += [waiting.eq(ar.valid & ~ar.ready), before.eq(ar.payload)]
        with m.If(ar.valid):
            m.d.comb += [Assert(ar.payload.addr[:2] == 0), Assert(words <= MAX_BURST),
                         Assert(ar.payload.addr[:12] + words * BUS_BYTES <= 0x1000)]
        m.d.comb += [Assert(~waiting | (ar.valid & (ar.payload == before))),
                     Cover(taken & (ar.payload.addr[:12] + words * BUS_BYTES == 0x1000)
                           & (words < MAX_BURST)),
                     Cover(taken & (words == MAX_BURST))]
        if self.sequence:
            self.programmed(m, engine, words, taken)
        return m

    def programmed(self, m, engine, words, taken):
        """The bursts start at ``base``, follow each other, and ask for ``count`` words."""
        expected, asked, count = Signal(16), Signal(8), Signal(6)
        with m.If(engine.start):
            m.d.sync += [expected.eq(engine.base & ~(BUS_BYTES - 1)), asked.eq(0),
                         count.eq(engine.count)]
        with m.Elif(taken):
            m.d.sync += [expected.eq(expected + words * BUS_BYTES), asked.eq(asked + words)]
        started = Signal()
        m.d.sync += started.eq(started | engine.start)
        with m.If(taken & started):
            m.d.comb += [Assert(engine.ar.payload.addr == expected),
                         Assert(asked + words <= count)]
        m.d.comb += Cover(started & (asked == count) & (count > MAX_BURST))


def test_read_bursts_keep_the_rules(tmp_path):
    result = check(ReadEngineProperties(sequence=False), name="dma_rules", workdir=tmp_path,
                   depth=3, cover=10, platform=FORMAL)
    assert result.proven and result.covered, result.summary


def test_read_bursts_are_as_programmed(tmp_path):
    result = check(ReadEngineProperties(sequence=True), name="dma_sequence",
                   workdir=tmp_path, depth=8, mode="bmc", cover=8, platform=FORMAL)
    assert result.proven and result.covered, result.summary
