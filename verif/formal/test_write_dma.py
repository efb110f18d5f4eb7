"""Formal proofs of the shell's write DMA engine, :class:`~bertaccel.hw.axi.dma.WriteEngine`.

With any ``base``, ``flush``, ``stop``, input beats, AW and W backpressure, B responses and
reset in any cycle (``start`` only while ``idle``, as documented), ``WriteEngineProperties``
asserts the burst rules: every burst asked for on AW starts at a bus word, is at most
``max_burst`` words long and ends at or before the next 4 KiB boundary, and an AW request
and a W beat on offer stay up, unchanged, until taken. Proven by k-induction (the engine's
address stays word aligned: its invariant, under ``FORMAL``).

With ``sequence`` it also asserts, against a model in registers: the bursts start at ``base``
(to its bus word) and follow each other with no gap and no overlap; the W beats of each burst
are as many as its AWLEN + 1, in the order of the AW requests, with WLAST on the last and on no
other; no W beat comes before its burst's request, and the engine is ``quiet`` only with every
requested burst's beats sent; and the W words carry the input beats in order, each byte strobed
that holds a beat and no other. Bounded: 10 cycles from reset, in which a start, a full burst
of ``max_burst`` words, a burst cut short at 4 KiB, a partial burst and a partial word written
out by ``flush``, a beat held on W and a burst's last beat sent with the next burst's request
already made (each a cover) are all reached by cycle 7, with W checked for the cycles after
(with beats of half a word a full burst takes 8 beats: its cover is reached within 14 cycles,
and its W words are those the checks of whole-word beats reach). Run for beats as wide as the
bus and for beats of half a word (byte strobes on a last, partial word).

``test_a_burst_across_4k_fails_the_proof`` makes a mutant that forgets the 4 KiB rule; the
rules proof must then fail, with a counterexample trace from reset.
"""

from pathlib import Path

import pytest
from amaranth import Array, Elaboratable, Module, Mux, Signal
from amaranth.asserts import AnyConst, AnySeq
from amaranth.hdl import Assert, Assume, Const, Cover

from bertaccel.hw.axi import dma as dma_module
from bertaccel.hw.axi.dma import WriteEngine
from bertaccel.hw.formal import FORMAL

from verif.tb.formal import check

BUS_BYTES, MAX_BURST = 4, 4


class WriteEngineProperties(Elaboratable):
    def __init__(self, *, beat_width=8 * BUS_BYTES, sequence=False):
        self.sequence = sequence
        self.engine = WriteEngine(addr_width=16, bus_width=8 * BUS_BYTES, beat_width=beat_width,
                                  max_burst=MAX_BURST)

    def elaborate(self, platform):
        m = Module()
        m.submodules.engine = engine = self.engine
        for port in (engine.start, engine.base, engine.flush, engine.stop, engine.i.valid,
                     engine.i.payload, engine.aw.ready, engine.w.ready, engine.b.valid,
                     engine.b.payload.resp):
            m.d.comb += port.eq(AnySeq(len(port)))
        m.d.comb += Assume(~engine.start | engine.idle)
        aw, w = engine.aw, engine.w
        words = aw.payload.len + 1
        aw_taken, w_taken = aw.valid & aw.ready, w.valid & w.ready
        # A request or a beat on offer and not taken is still there, unchanged, a cycle later.
        aw_waiting, aw_before = Signal(), Signal.like(aw.payload)
        w_waiting, w_before = Signal(), Signal.like(w.payload)
        m.d.sync += [aw_waiting.eq(aw.valid & ~aw.ready), aw_before.eq(aw.payload),
                     w_waiting.eq(w.valid & ~w.ready), w_before.eq(w.payload)]
        with m.If(aw.valid):
            m.d.comb += [Assert(aw.payload.addr[:2] == 0), Assert(words <= MAX_BURST),
                         Assert(aw.payload.addr[:12] + words * BUS_BYTES <= 0x1000)]
        m.d.comb += [
            Assert(~aw_waiting | (aw.valid & (aw.payload == aw_before))),
            Assert(~w_waiting | (w.valid & (w.payload == w_before))),
            Cover(aw_taken & (aw.payload.addr[:12] + words * BUS_BYTES == 0x1000)
                  & (words < MAX_BURST)),
            Cover(aw_taken & (words == MAX_BURST)),
            Cover(w_waiting & ~w.ready),
        ]
        if self.sequence:
            presented = aw.valid & ~aw_waiting   # each request once, in its first cycle
            self.bursts(m, engine, words, presented, aw_taken)
            self.beats(m, engine, words, presented, w_taken)
            self.data(m, engine, w_taken)
        return m

    def bursts(self, m, engine, words, presented, aw_taken):
        """The bursts start at ``base`` and follow each other."""
        expected = Signal(16)
        with m.If(engine.start):
            m.d.sync += expected.eq(engine.base & ~(BUS_BYTES - 1))
        with m.Elif(presented):
            m.d.sync += expected.eq(expected + words * BUS_BYTES)
        started = Signal()
        m.d.sync += started.eq(started | engine.start)
        with m.If(presented & started):
            m.d.comb += Assert(engine.aw.payload.addr == expected)
        m.d.comb += Cover(started & aw_taken & engine.flush & (words < MAX_BURST)
                          & (engine.aw.payload.addr[:12] + words * BUS_BYTES != 0x1000))

    def beats(self, m, engine, words, presented, w_taken):
        """W: AWLEN + 1 beats a burst, in the order of the requests, WLAST on the last.
        ``lens`` holds the words of each request presented whose beats are not all sent."""
        slots = 6
        lens = Array(Signal(range(MAX_BURST + 1), name=f"len{i}") for i in range(slots))
        pending = Signal(range(slots + 1))
        sent = Signal(range(MAX_BURST + 1))   # beats of the oldest burst already sent
        done = w_taken & (sent + 1 == lens[0])
        m.d.sync += pending.eq(pending + presented - done)
        for i in range(slots):
            after = lens[i + 1] if i + 1 < slots else 0
            with m.If(presented & (i == pending - done)):
                m.d.sync += lens[i].eq(words)
            with m.Elif(done):
                m.d.sync += lens[i].eq(after)
        with m.If(done):
            m.d.sync += sent.eq(0)
        with m.Elif(w_taken):
            m.d.sync += sent.eq(sent + 1)
        w = engine.w
        m.d.comb += [Assert(pending != slots),
                     Assert(~w.valid | (pending != 0)),
                     Assert(~w.valid | (w.payload.last == (sent + 1 == lens[0]))),
                     Assert(~engine.quiet | (pending == 0)),
                     Cover(w_taken & w.payload.last & (pending == 2))]

    def data(self, m, engine, w_taken):
        """The W words carry the beats taken, in order (one beat, any, is watched: the one
        numbered ``watch`` since the start); strobes mark the bytes of beats taken. After a
        ``flush`` with no beat offered no beat comes, as documented."""
        beat_width = len(engine.i.payload)
        per_word = max(1, 8 * BUS_BYTES // beat_width)
        taken = Signal(5)     # beats taken since the start
        written = Signal(5)   # words sent since the start
        flushed = Signal()
        watch, watched = AnyConst(4), Signal(beat_width)
        i_taken = engine.i.valid & engine.i.ready
        with m.If(engine.start):
            m.d.sync += [taken.eq(0), written.eq(0), flushed.eq(0)]
        with m.Else():
            with m.If(i_taken):
                m.d.sync += taken.eq(taken + 1)
                with m.If(taken == watch):
                    m.d.sync += watched.eq(engine.i.payload)
            with m.If(w_taken):
                m.d.sync += written.eq(written + 1)
            with m.If(engine.flush & ~engine.i.valid):
                m.d.sync += flushed.eq(1)
        m.d.comb += Assume(~(engine.i.valid & flushed))
        w = engine.w.payload
        first = written * per_word
        with m.If(engine.w.valid):
            m.d.comb += Assert(first < taken)
            for part in range(per_word):
                index = first + part
                span = slice(part * beat_width, (part + 1) * beat_width)
                strobed = w.strb[part * beat_width // 8:(part + 1) * beat_width // 8]
                m.d.comb += [
                    Assert(strobed == Mux(index < taken, (1 << len(strobed)) - 1, 0)),
                    Assert((index != watch) | (index >= taken) | (w.data[span] == watched)),
                ]
                if part:
                    m.d.comb += Assert((index < taken) | flushed)
        if per_word > 1:
            m.d.comb += Cover(w_taken & ~w.strb[-1])


def test_write_bursts_keep_the_rules(tmp_path):
    result = check(WriteEngineProperties(), name="write_rules", workdir=tmp_path,
                   depth=3, cover=12, platform=FORMAL)
    assert result.proven and result.covered, result.summary


@pytest.mark.parametrize("beat_width", [32, 16])
def test_write_bursts_are_as_requested(tmp_path, beat_width):
    result = check(WriteEngineProperties(beat_width=beat_width, sequence=True),
                   name="write_sequence", workdir=tmp_path, depth=10, mode="bmc", cover=14,
                   platform=FORMAL, map_memories=True)
    assert result.proven and result.covered, result.summary


def test_a_burst_across_4k_fails_the_proof(tmp_path, monkeypatch):
    """With the 4 KiB rule gone (every burst may be ``max_burst`` words wherever it starts),
    the rules proof must fail at a stated property, with a counterexample trace from reset
    (``trace.vcd``): it is not vacuous."""
    monkeypatch.setattr(dma_module, "_to_4k", lambda addr, bus_bytes: Const(MAX_BURST, 13))
    result = check(WriteEngineProperties(), name="write_across_4k", workdir=tmp_path,
                   depth=10, cover=0, platform=FORMAL)
    assert result.status["prove"] == "FAIL", result.summary
    assert result.failed.rpartition(":")[2].isdigit(), result.summary   # file:line
    assert Path(result.trace).name == "trace.vcd" and Path(result.trace).exists()
