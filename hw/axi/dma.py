"""The AXI4 DMA engines of the shell: memory to a beat stream, and a beat stream to memory.

Why nothing can deadlock: a read engine issues a burst only when its FIFO has room for all of
that burst's words (space is reserved when the burst is issued), so the shared R channel is
always accepted whichever stream the core is waiting for; and a write burst is issued only when
all of its words are already in the FIFO, so W never waits for the core.
"""

from amaranth import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.hdl import Assert
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from ..formal import is_formal
from .signature import MAX_BURST, log2, min_of
from .width import Downsizer, Upsizer

__all__ = ["ReadEngine", "WriteEngine", "request_layout", "words_of"]


def request_layout(addr_width):
    """A burst request: its first address and AxLEN."""
    return data.StructLayout({"addr": addr_width, "len": 8})


def words_of(count, *, beat_width, bus_width):
    """Bus words that ``count`` beats of ``beat_width`` bits take in memory (a value): beats
    wider than a word take several, narrower ones share one (the last word may be partial)."""
    if beat_width >= bus_width:
        return count << log2(beat_width // bus_width)
    per_word = bus_width // beat_width
    return (count + per_word - 1) >> log2(per_word)


def _engine_params(engine, addr_width, bus_width, beat_width, max_burst, fifo_depth):
    """Check an engine's burst and FIFO sizes (``fifo_depth`` None: two bursts) and keep them
    and its widths as its attributes."""
    fifo_depth = 2 * max_burst if fifo_depth is None else fifo_depth
    if not (1 <= max_burst <= 256 and max_burst & (max_burst - 1) == 0):
        raise ValueError(f"max_burst must be a power of two from 1 to 256, not {max_burst!r}")
    if fifo_depth < max_burst:
        raise ValueError(f"fifo_depth must be at least max_burst ({max_burst}), "
                         f"not {fifo_depth!r}")
    engine.addr_width, engine.bus_width, engine.beat_width = addr_width, bus_width, beat_width
    engine.max_burst, engine.fifo_depth = max_burst, fifo_depth


def _to_4k(addr, bus_bytes):
    """Bus words from ``addr`` (word aligned) to the next 4 KiB boundary."""
    return (Const(0x1000, 13) - addr[:12]) >> log2(bus_bytes)


class ReadEngine(wiring.Component):
    """Reads ``count`` beats from consecutive memory at ``base`` and streams them out.

    Beats are ``beat_width`` bits, packed in memory at their natural width; the engine reads
    whole bus words in INCR bursts of up to ``max_burst`` words that never cross a 4 KiB
    boundary, and drops the padding beats of the last word. It reserves FIFO space for every
    word of a burst before issuing it, so it always accepts read data.

    Parameters
    ----------
    addr_width, bus_width : int
        Of the AXI4 master.
    beat_width : int
        Bits of one output beat; a power of two.
    max_burst : int
        Longest burst in words, a power of two from 1 to 256.
    fifo_depth : int
        Words of buffering; at least ``max_burst``.
    count_width : int
        Width of ``count``.

    Members
    -------
    start : In(1)
        Pulse: latch ``base`` and ``count``, empty the FIFO and begin. Only while ``idle``.
    base : In(addr_width)
        Byte address of beat 0; the bits below the bus word are ignored.
    count : In(count_width)
        Beats to read.
    stop : In(1)
        Issue no new bursts (those issued still complete).
    ar : Out(stream.Signature(StructLayout({"addr", "len"})))
        Burst requests (``len`` is AxLEN: words - 1).
    r : In(stream.Signature(StructLayout({"data": bus_width})))
        The read data of this engine's bursts, in order.
    o : Out(stream.Signature(beat_width))
    idle : Out(1)
        No burst is waiting to be issued or has words still to arrive.
    at : Out(addr_width)
        Byte address of the word ``r`` delivers next (words arrive in the order of their
        addresses): where an error response was for.
    """

    def __init__(self, *, addr_width, bus_width, beat_width, max_burst=MAX_BURST,
                 fifo_depth=None, count_width=32):
        _engine_params(self, addr_width, bus_width, beat_width, max_burst, fifo_depth)
        self.count_width = count_width
        super().__init__({
            "start": In(1),
            "base":  In(addr_width),
            "count": In(count_width),
            "stop":  In(1),
            "ar":    Out(stream.Signature(request_layout(addr_width))),
            "r":     In(stream.Signature(data.StructLayout({"data": bus_width}))),
            "o":     Out(stream.Signature(beat_width)),
            "idle":  Out(1),
            "at":    Out(addr_width),
        })

    def elaborate(self, platform):
        m = Module()
        bus_bytes = self.bus_width // 8
        shift = log2(bus_bytes)
        depth = self.fifo_depth

        addr = Signal(self.addr_width)
        left = Signal(self.count_width + 5)  # words not yet requested
        free = Signal(range(depth + 1))      # FIFO words not reserved by a burst
        pending = Signal(range(depth + 1))   # words requested and not yet arrived
        limit = Signal(self.count_width)
        sent = Signal(self.count_width)
        ar_valid = Signal()
        ar_payload = Signal(request_layout(self.addr_width))

        # The FIFO, gearbox and limiter are emptied by ``start``.
        buffer = fifo.SyncFIFOBuffered(width=self.bus_width, depth=depth)
        if self.beat_width > self.bus_width:
            gearbox = Upsizer(i_width=self.bus_width, o_width=self.beat_width)
            gear_payload = gearbox.o.payload.data
        else:
            gearbox = Downsizer(i_width=self.bus_width, o_width=self.beat_width)
            gear_payload = gearbox.o.payload
        m.submodules.buffer = ResetInserter(self.start)(buffer)
        m.submodules.gearbox = ResetInserter(self.start)(gearbox)

        burst = Signal(range(self.max_burst + 1))
        m.d.comb += burst.eq(min_of(min_of(Const(self.max_burst), left), _to_4k(addr, bus_bytes)))
        issue = Signal()
        m.d.comb += issue.eq((left != 0) & ~self.stop & (free >= burst)
                             & (~ar_valid | self.ar.ready))
        r_take = self.r.valid & self.r.ready
        pop = buffer.r_en & buffer.r_rdy

        m.d.comb += [
            self.ar.valid.eq(ar_valid),
            self.ar.payload.eq(ar_payload),
            self.idle.eq(~ar_valid & (pending == 0)),

            buffer.w_data.eq(self.r.payload.data),
            buffer.w_en.eq(self.r.valid),
            self.r.ready.eq(buffer.w_rdy),  # always 1: the burst's space was reserved

            gearbox.i.valid.eq(buffer.r_rdy),
            gearbox.i.payload.eq(buffer.r_data),
            buffer.r_en.eq(gearbox.i.ready),

            # Beats past ``count`` (the padding of the last word) are taken and dropped.
            self.o.valid.eq(gearbox.o.valid & (sent != limit)),
            self.o.payload.eq(gear_payload),
            gearbox.o.ready.eq(self.o.ready | (sent == limit)),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += sent.eq(sent + 1)
        with m.If(r_take):
            m.d.sync += self.at.eq(self.at + bus_bytes)

        with m.If(issue):
            m.d.sync += [
                ar_valid.eq(1),
                ar_payload.addr.eq(addr),
                ar_payload.len.eq(burst - 1),
                addr.eq(addr + (burst << shift)),
                left.eq(left - burst),
            ]
        with m.Elif(self.ar.ready):
            m.d.sync += ar_valid.eq(0)
        m.d.sync += [
            free.eq(free - Mux(issue, burst, 0) + pop),
            pending.eq(pending + Mux(issue, burst, 0) - r_take),
        ]

        with m.If(self.start):
            m.d.sync += [
                addr.eq(Cat(Const(0, shift), self.base[shift:])),
                self.at.eq(Cat(Const(0, shift), self.base[shift:])),
                left.eq(words_of(self.count, beat_width=self.beat_width,
                                 bus_width=self.bus_width)),
                free.eq(depth),
                pending.eq(0),
                ar_valid.eq(0),
                limit.eq(self.count),
                sent.eq(0),
            ]
        if is_formal(platform):
            m.d.comb += Assert(addr[:shift] == 0)
        return m


class WriteEngine(wiring.Component):
    """Writes a stream of beats to consecutive memory from ``base``.

    Beats are ``beat_width`` bits, packed at their natural width. A gearbox turns them into bus
    words (a beat narrower than a word shares it; the last, partial word of a run is written
    with byte strobes for its beats only), and INCR bursts of up to ``max_burst`` words, never
    crossing 4 KiB, are issued once all their words are in the FIFO: full bursts as the data
    comes, and what is left when ``flush`` is raised.

    Parameters
    ----------
    addr_width, bus_width, beat_width, max_burst, fifo_depth
        As for :class:`ReadEngine`.

    Members
    -------
    start : In(1)
        Pulse: latch ``base`` and begin. Only while ``idle``.
    base : In(addr_width)
    flush : In(1)
        No more beats will come: write out partial words and bursts.
    stop : In(1)
        Issue no new bursts (those issued still complete).
    i : In(stream.Signature(beat_width))
    aw : Out(stream.Signature(StructLayout({"addr", "len"})))
    w : Out(stream.Signature(StructLayout({"data", "strb", "last"})))
    b : In(stream.Signature(StructLayout({"resp": 2})))
    quiet : Out(1)
        No burst is waiting to be issued, sending data, or waiting for its response.
    idle : Out(1)
        ``quiet``, and no beat is held.
    at : Out(addr_width)
        Byte address of the first word of the oldest burst without its response (responses
        come in the order of the bursts): where an error response was for.
    """

    def __init__(self, *, addr_width, bus_width, beat_width, max_burst=MAX_BURST,
                 fifo_depth=None, max_outstanding=16):
        _engine_params(self, addr_width, bus_width, beat_width, max_burst, fifo_depth)
        self.max_outstanding = max_outstanding
        self.word_layout = data.StructLayout({"data": bus_width, "strb": bus_width // 8})
        super().__init__({
            "start": In(1),
            "base":  In(addr_width),
            "flush": In(1),
            "stop":  In(1),
            "i":     In(stream.Signature(beat_width)),
            "aw":    Out(stream.Signature(request_layout(addr_width))),
            "w":     Out(stream.Signature(data.StructLayout({
                "data": bus_width, "strb": bus_width // 8, "last": 1}))),
            "b":     In(stream.Signature(data.StructLayout({"resp": 2}))),
            "quiet": Out(1),
            "idle":  Out(1),
            "at":    Out(addr_width),
        })

    def elaborate(self, platform):
        m = Module()
        bus_bytes = self.bus_width // 8
        shift = log2(bus_bytes)
        gearbox, buffer, lengths = self._fill(m, bus_bytes)
        w_take = self.w.valid & self.w.ready
        addr, claimed, outstanding, aw_valid = self._issue(m, buffer, lengths, w_take,
                                                           bus_bytes, shift)
        w_active = self._send(m, buffer, lengths, w_take)

        m.d.comb += [
            self.quiet.eq(~aw_valid & ~w_active & ~lengths.r_rdy & (outstanding == 0)),
            self.idle.eq(self.quiet & ~gearbox.busy & (buffer.level == 0)),
        ]

        with m.If(self.start):
            m.d.sync += [
                addr.eq(Cat(Const(0, shift), self.base[shift:])),
                self.at.eq(Cat(Const(0, shift), self.base[shift:])),
                claimed.eq(0),
                outstanding.eq(0),
                aw_valid.eq(0),
                w_active.eq(0),
            ]
        if is_formal(platform):
            m.d.comb += Assert(addr[:shift] == 0)
        return m

    def _fill(self, m, bus_bytes):
        """The gearbox from beats to bus words and the FIFO of words, reset by ``start``, and
        the FIFO of the lengths of issued bursts; return the three."""
        buffer = fifo.SyncFIFOBuffered(width=self.word_layout.size, depth=self.fifo_depth)
        lengths = fifo.SyncFIFO(width=9, depth=4)  # lengths of issued bursts, for W
        word = Signal(self.word_layout)
        if self.beat_width >= self.bus_width:
            gearbox = Downsizer(i_width=self.beat_width, o_width=self.bus_width)
            m.d.comb += [word.data.eq(gearbox.o.payload), word.strb.eq((1 << bus_bytes) - 1)]
        else:
            gearbox = Upsizer(i_width=self.beat_width, o_width=self.bus_width)
            beat_bytes = self.beat_width // 8
            m.d.comb += [
                word.data.eq(gearbox.o.payload.data),
                word.strb.eq(Cat(bit.replicate(beat_bytes) for bit in gearbox.o.payload.mask)),
                gearbox.flush.eq(self.flush & ~self.i.valid),
            ]
        m.submodules.gearbox = ResetInserter(self.start)(gearbox)
        m.submodules.buffer = ResetInserter(self.start)(buffer)
        m.submodules.lengths = ResetInserter(self.start)(lengths)

        wiring.connect(m, wiring.flipped(self.i), gearbox.i)
        m.d.comb += [
            buffer.w_data.eq(word),
            buffer.w_en.eq(gearbox.o.valid),
            gearbox.o.ready.eq(buffer.w_rdy),
        ]
        return gearbox, buffer, lengths

    def _issue(self, m, buffer, lengths, w_take, bus_bytes, shift):
        """AW and B: issue a burst once its words are buffered and count the bursts without a
        response; return the next burst's address, the buffered words already in a burst, the
        bursts outstanding and AW's ``valid``."""
        # -- AW: decide a burst once its words are buffered -------------------------------------
        addr = Signal(self.addr_width)
        claimed = Signal(range(self.fifo_depth + 1))  # buffered words already in a burst
        outstanding = Signal(range(self.max_outstanding + 1))  # bursts without a response
        aw_valid = Signal()
        aw_payload = Signal(request_layout(self.addr_width))
        avail = Signal(range(self.fifo_depth + 1))
        want = Signal(range(self.max_burst + 1))
        burst = Signal(range(self.max_burst + 1))
        m.d.comb += [
            avail.eq(buffer.level - claimed),
            want.eq(min_of(Const(self.max_burst), _to_4k(addr, bus_bytes))),
            burst.eq(min_of(avail, want)),
        ]
        issue = Signal()
        m.d.comb += issue.eq(~self.stop & ((avail >= want) | (self.flush & (avail != 0)))
                             & (~aw_valid | self.aw.ready) & lengths.w_rdy
                             & (outstanding != self.max_outstanding))
        b_take = self.b.valid & self.b.ready
        m.d.comb += [
            self.aw.valid.eq(aw_valid),
            self.aw.payload.eq(aw_payload),
            lengths.w_en.eq(issue),
            lengths.w_data.eq(burst),
            self.b.ready.eq(1),
        ]
        with m.If(issue):
            m.d.sync += [
                aw_valid.eq(1),
                aw_payload.addr.eq(addr),
                aw_payload.len.eq(burst - 1),
                addr.eq(addr + (burst << shift)),
            ]
        with m.Elif(self.aw.ready):
            m.d.sync += aw_valid.eq(0)
        m.d.sync += [
            claimed.eq(claimed + Mux(issue, burst, 0) - w_take),
            outstanding.eq(outstanding + issue - b_take),
        ]
        self._responses(m, issue, burst, b_take, shift)
        return addr, claimed, outstanding, aw_valid

    def _responses(self, m, issue, burst, b_take, shift):
        """``at``: past the words of each burst as its response comes, their counts kept from
        issue to response (never more than ``max_outstanding`` bursts)."""
        awaiting = fifo.SyncFIFO(width=9, depth=self.max_outstanding)
        m.submodules.awaiting = ResetInserter(self.start)(awaiting)
        m.d.comb += [awaiting.w_en.eq(issue), awaiting.w_data.eq(burst),
                     awaiting.r_en.eq(b_take)]
        with m.If(b_take):
            m.d.sync += self.at.eq(self.at + (awaiting.r_data << shift))

    def _send(self, m, buffer, lengths, w_take):
        """W: the words of each issued burst, in order; return whether a burst is being sent."""
        # -- W: the words of each decided burst, in order ----------------------------------------
        w_left = Signal(9)
        w_active = Signal()
        out_word = Signal(self.word_layout)
        m.d.comb += [
            out_word.eq(buffer.r_data),
            self.w.valid.eq(w_active & buffer.r_rdy),
            self.w.payload.data.eq(out_word.data),
            self.w.payload.strb.eq(out_word.strb),
            self.w.payload.last.eq(w_left == 1),
            buffer.r_en.eq(w_active & self.w.ready),
        ]
        with m.If(w_take):
            m.d.sync += w_left.eq(w_left - 1)
            with m.If(w_left == 1):
                m.d.sync += w_active.eq(0)
        next_burst = (~w_active | (w_take & (w_left == 1))) & lengths.r_rdy
        m.d.comb += lengths.r_en.eq(next_burst)
        with m.If(next_burst):
            m.d.sync += [w_left.eq(lengths.r_data), w_active.eq(1)]
        return w_active
