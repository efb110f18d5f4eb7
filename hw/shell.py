"""The AXI4 shell: the core behind an AXI4-Lite register slave and an AXI4 DMA master.

This is what an FPGA build instantiates. Software writes a program and its input data into
memory, sets the registers of :mod:`bertaccel.hw.csr` (addresses and lengths) and writes
``CTRL.START``; the shell fetches the instructions and the input beats over its AXI4 master,
streams them into the core, writes every output beat back to memory, and sets ``STATUS.DONE``
once the last write has its response. The layout of that memory is in ``docs/axi.md`` and is
built by :mod:`bertaccel.sw.axi_host`.

Blocks, from the bus inwards:

* :class:`CsrBank`: the AXI4-Lite slave, made from the register table :data:`csr.REGISTERS`;
* :class:`ReadEngine` (twice: instructions with ARID 0, input data with ARID 1): INCR bursts
  from a base address, a FIFO in bus words, a gearbox to the beat width, and a limiter that
  drops the padding beats of the last word; a simple round-robin arbiter shares the AR channel
  and RID routes the R channel;
* :class:`WriteEngine`: a gearbox from the output beat width to bus words (with byte strobes
  for a partial last word), a FIFO, and INCR bursts, each issued only once its data is in the
  FIFO;
* the core, :class:`~bertaccel.hw.core.BertAccelCore`, unchanged.

Why nothing can deadlock: a read engine issues a burst only when its FIFO has room for all of
that burst's words (space is reserved when the burst is issued), so the shared R channel is
always accepted whichever stream the core is waiting for; and a write burst is issued only when
all of its words are already in the FIFO, so W never waits for the core.
"""

from amaranth import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import data, fifo, stream, wiring
from amaranth.lib.wiring import In, Out

from . import csr
from .core import BertAccelCore

__all__ = [
    "Burst", "Resp", "AXI4LiteSignature", "AXI4Signature",
    "Downsizer", "Upsizer", "ReadEngine", "WriteEngine", "CsrBank", "AxiShell",
    "INSTR_ID", "DATA_ID", "MAX_BURST",
]

#: ARID of instruction fetches and of input-data fetches.
INSTR_ID, DATA_ID = 0, 1
#: Default longest burst, in bus words (AXI4 allows 256 for INCR; 16 is also legal AXI3).
MAX_BURST = 16
#: AxCACHE of every request: normal, non-cacheable, bufferable (what DMA engines use).
_CACHE = 0b0011


class Burst:
    """AxBURST values."""
    FIXED, INCR, WRAP = 0, 1, 2


class Resp:
    """xRESP values. ``SLVERR`` and ``DECERR`` (bit 1 set) are errors."""
    OKAY, EXOKAY, SLVERR, DECERR = 0, 1, 2, 3


def _log2(value):
    return value.bit_length() - 1


def _min(a, b):
    return Mux(a < b, a, b)


class AXI4LiteSignature(wiring.Signature):
    """An AXI4-Lite interface, seen from the master (a slave takes ``In(...)`` of it).

    Parameters
    ----------
    addr_width : int
    data_width : int
        32 or 64.
    """

    def __init__(self, *, addr_width, data_width=32):
        self.addr_width = addr_width
        self.data_width = data_width
        super().__init__({
            "awaddr":  Out(addr_width), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
            "wdata":   Out(data_width), "wstrb": Out(data_width // 8),
            "wvalid":  Out(1), "wready": In(1),
            "bresp":   In(2), "bvalid": In(1), "bready": Out(1),
            "araddr":  Out(addr_width), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
            "rdata":   In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })


class AXI4Signature(wiring.Signature):
    """A full AXI4 interface (no user signals, no region), seen from the master.

    Parameters
    ----------
    addr_width, data_width, id_width : int
    """

    def __init__(self, *, addr_width, data_width, id_width):
        self.addr_width = addr_width
        self.data_width = data_width
        self.id_width = id_width
        members = {}
        for ch in ("aw", "ar"):
            members.update({
                f"{ch}id": Out(id_width), f"{ch}addr": Out(addr_width), f"{ch}len": Out(8),
                f"{ch}size": Out(3), f"{ch}burst": Out(2), f"{ch}lock": Out(1),
                f"{ch}cache": Out(4), f"{ch}prot": Out(3), f"{ch}qos": Out(4),
                f"{ch}valid": Out(1), f"{ch}ready": In(1),
            })
            if ch == "aw":
                members.update({
                    "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
                    "wvalid": Out(1), "wready": In(1),
                    "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
                })
        members.update({
            "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
            "rvalid": In(1), "rready": Out(1),
        })
        super().__init__(members)


# -- gearboxes ----------------------------------------------------------------------------------

class Downsizer(wiring.Component):
    """Splits each wide word into ``i_width // o_width`` narrow beats, lowest bits first.

    One beat leaves every cycle the sink is ready; a new word is taken in the cycle its last
    beat leaves, so a steady stream has no bubbles. ``i_width == o_width`` is a register stage.

    Parameters
    ----------
    i_width, o_width : int
        Powers of two, ``i_width >= o_width``.

    Members
    -------
    i : In(stream.Signature(i_width))
    o : Out(stream.Signature(o_width))
    busy : Out(1)
        A word (or part of one) is held.
    """

    def __init__(self, *, i_width, o_width):
        if i_width % o_width:
            raise ValueError(f"i_width must be a multiple of o_width, not {i_width} and {o_width}")
        self.ratio = i_width // o_width
        self.o_width = o_width
        super().__init__({
            "i":    In(stream.Signature(i_width)),
            "o":    Out(stream.Signature(o_width)),
            "busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        buf = Signal(len(self.i.payload))
        full = Signal()
        if self.ratio == 1:
            last = Const(1)
            m.d.comb += self.o.payload.eq(buf)
        else:
            index = Signal(range(self.ratio))
            last = index == self.ratio - 1
            m.d.comb += self.o.payload.eq(buf.word_select(index, self.o_width))
            with m.If(self.o.valid & self.o.ready):
                m.d.sync += index.eq(Mux(last, 0, index + 1))
        m.d.comb += [
            self.o.valid.eq(full),
            self.i.ready.eq(~full | (self.o.ready & last)),
            self.busy.eq(full),
        ]
        with m.If(self.o.valid & self.o.ready & last):
            m.d.sync += full.eq(0)
        with m.If(self.i.valid & self.i.ready):
            m.d.sync += [buf.eq(self.i.payload), full.eq(1)]
        return m


class Upsizer(wiring.Component):
    """Packs ``o_width // i_width`` narrow beats into one wide word, the first in the lowest bits.

    With ``flush`` high and no input offered, a partly filled word leaves with ``mask`` showing
    which of its ``ratio`` parts hold beats (a full word has every bit of ``mask`` set).

    Parameters
    ----------
    i_width, o_width : int
        Powers of two, ``o_width > i_width``.

    Members
    -------
    i : In(stream.Signature(i_width))
    o : Out(stream.Signature(StructLayout({"data": o_width, "mask": ratio})))
    flush : In(1)
    busy : Out(1)
        Beats are held (in a partial or a finished word).
    """

    def __init__(self, *, i_width, o_width):
        if o_width % i_width or o_width == i_width:
            raise ValueError(f"o_width must be a multiple of i_width larger than it, not "
                             f"{o_width} and {i_width}")
        self.ratio = o_width // i_width
        self.i_width = i_width
        super().__init__({
            "i":     In(stream.Signature(i_width)),
            "o":     Out(stream.Signature(data.StructLayout({"data": o_width,
                                                             "mask": self.ratio}))),
            "flush": In(1),
            "busy":  Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        ratio = self.ratio
        buf = Signal(self.i_width * ratio)
        mask = Signal(ratio)
        index = Signal(range(ratio))
        full = Signal()
        m.d.comb += [
            self.o.valid.eq(full),
            self.o.payload.data.eq(buf),
            self.o.payload.mask.eq(mask),
            self.i.ready.eq(~full | self.o.ready),
            self.busy.eq(full | (index != 0)),
        ]
        with m.If(self.o.valid & self.o.ready):
            m.d.sync += full.eq(0)
        with m.If(self.i.valid & self.i.ready):
            # Parts above ``index`` still hold the previous word's beats while this one fills;
            # they are overwritten before it leaves.
            m.d.sync += [buf.word_select(index, self.i_width).eq(self.i.payload),
                         index.eq(Mux(index == ratio - 1, 0, index + 1))]
            with m.If(index == ratio - 1):
                m.d.sync += [full.eq(1), mask.eq((1 << ratio) - 1)]
        with m.Elif(self.flush & (index != 0) & (~full | self.o.ready)):
            m.d.sync += [full.eq(1), index.eq(0), mask.eq((Const(1, ratio + 1) << index) - 1)]
        return m


# -- DMA engines --------------------------------------------------------------------------------

def _request_layout(addr_width):
    return data.StructLayout({"addr": addr_width, "len": 8})


def _to_4k(addr, bus_bytes):
    """Bus words from ``addr`` (word aligned) to the next 4 KiB boundary."""
    return (Const(0x1000, 13) - addr[:12]) >> _log2(bus_bytes)


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
    """

    def __init__(self, *, addr_width, bus_width, beat_width, max_burst=MAX_BURST,
                 fifo_depth=None, count_width=32):
        fifo_depth = 2 * max_burst if fifo_depth is None else fifo_depth
        if not (1 <= max_burst <= 256 and max_burst & (max_burst - 1) == 0):
            raise ValueError(f"max_burst must be a power of two from 1 to 256, not {max_burst!r}")
        if fifo_depth < max_burst:
            raise ValueError(f"fifo_depth must be at least max_burst ({max_burst}), "
                             f"not {fifo_depth!r}")
        self.addr_width = addr_width
        self.bus_width = bus_width
        self.beat_width = beat_width
        self.max_burst = max_burst
        self.fifo_depth = fifo_depth
        self.count_width = count_width
        super().__init__({
            "start": In(1),
            "base":  In(addr_width),
            "count": In(count_width),
            "stop":  In(1),
            "ar":    Out(stream.Signature(_request_layout(addr_width))),
            "r":     In(stream.Signature(data.StructLayout({"data": bus_width}))),
            "o":     Out(stream.Signature(beat_width)),
            "idle":  Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        bus_bytes = self.bus_width // 8
        shift = _log2(bus_bytes)
        depth = self.fifo_depth

        # Words to read: beats wider than a word take several; narrower share one.
        if self.beat_width >= self.bus_width:
            words_of = self.count << _log2(self.beat_width // self.bus_width)
        else:
            per_word = self.bus_width // self.beat_width
            words_of = (self.count + per_word - 1) >> _log2(per_word)

        addr = Signal(self.addr_width)
        left = Signal(self.count_width + 5)  # words not yet requested
        free = Signal(range(depth + 1))      # FIFO words not reserved by a burst
        pending = Signal(range(depth + 1))   # words requested and not yet arrived
        limit = Signal(self.count_width)
        sent = Signal(self.count_width)
        ar_valid = Signal()
        ar_payload = Signal(_request_layout(self.addr_width))

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
        m.d.comb += burst.eq(_min(_min(Const(self.max_burst), left), _to_4k(addr, bus_bytes)))
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
                left.eq(words_of),
                free.eq(depth),
                pending.eq(0),
                ar_valid.eq(0),
                limit.eq(self.count),
                sent.eq(0),
            ]
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
    """

    def __init__(self, *, addr_width, bus_width, beat_width, max_burst=MAX_BURST,
                 fifo_depth=None, max_outstanding=16):
        fifo_depth = 2 * max_burst if fifo_depth is None else fifo_depth
        if not (1 <= max_burst <= 256 and max_burst & (max_burst - 1) == 0):
            raise ValueError(f"max_burst must be a power of two from 1 to 256, not {max_burst!r}")
        if fifo_depth < max_burst:
            raise ValueError(f"fifo_depth must be at least max_burst ({max_burst}), "
                             f"not {fifo_depth!r}")
        self.addr_width = addr_width
        self.bus_width = bus_width
        self.beat_width = beat_width
        self.max_burst = max_burst
        self.fifo_depth = fifo_depth
        self.max_outstanding = max_outstanding
        self.word_layout = data.StructLayout({"data": bus_width, "strb": bus_width // 8})
        super().__init__({
            "start": In(1),
            "base":  In(addr_width),
            "flush": In(1),
            "stop":  In(1),
            "i":     In(stream.Signature(beat_width)),
            "aw":    Out(stream.Signature(_request_layout(addr_width))),
            "w":     Out(stream.Signature(data.StructLayout({
                "data": bus_width, "strb": bus_width // 8, "last": 1}))),
            "b":     In(stream.Signature(data.StructLayout({"resp": 2}))),
            "quiet": Out(1),
            "idle":  Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        bus_bytes = self.bus_width // 8
        shift = _log2(bus_bytes)

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

        # -- AW: decide a burst once its words are buffered -------------------------------------
        addr = Signal(self.addr_width)
        claimed = Signal(range(self.fifo_depth + 1))  # buffered words already in a burst
        outstanding = Signal(range(self.max_outstanding + 1))  # bursts without a response
        aw_valid = Signal()
        aw_payload = Signal(_request_layout(self.addr_width))
        avail = Signal(range(self.fifo_depth + 1))
        want = Signal(range(self.max_burst + 1))
        burst = Signal(range(self.max_burst + 1))
        m.d.comb += [
            avail.eq(buffer.level - claimed),
            want.eq(_min(Const(self.max_burst), _to_4k(addr, bus_bytes))),
            burst.eq(_min(avail, want)),
        ]
        issue = Signal()
        m.d.comb += issue.eq(~self.stop & ((avail >= want) | (self.flush & (avail != 0)))
                             & (~aw_valid | self.aw.ready) & lengths.w_rdy
                             & (outstanding != self.max_outstanding))
        w_take = self.w.valid & self.w.ready
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

        m.d.comb += [
            self.quiet.eq(~aw_valid & ~w_active & ~lengths.r_rdy & (outstanding == 0)),
            self.idle.eq(self.quiet & ~gearbox.busy & (buffer.level == 0)),
        ]

        with m.If(self.start):
            m.d.sync += [
                addr.eq(Cat(Const(0, shift), self.base[shift:])),
                claimed.eq(0),
                outstanding.eq(0),
                aw_valid.eq(0),
                w_active.eq(0),
            ]
        return m


# -- registers ------------------------------------------------------------------------------------

class CsrBank(wiring.Component):
    """The AXI4-Lite slave and the registers of :data:`bertaccel.hw.csr.REGISTERS`.

    Every field of the table becomes a port named by :func:`csr.port_name`: an ``RW`` field an
    output holding the value written (from its reset value), a ``W1P`` field a one-cycle output
    pulse, an ``RO`` field an input that reads return; ``CONST`` fields read their value for
    ``cfg``. Writes take the AW and W beats together; a read returns the next cycle.

    Parameters
    ----------
    cfg : AccelConfig
    registers : sequence of csr.Register
        The map; :data:`csr.REGISTERS` by default.

    Members
    -------
    bus : In(AXI4LiteSignature(addr_width=csr.ADDR_WIDTH, data_width=csr.DATA_WIDTH))
    <field ports>
        As described above.
    """

    def __init__(self, cfg, registers=csr.REGISTERS):
        self.cfg = cfg
        self.registers = tuple(registers)
        members = {"bus": In(AXI4LiteSignature(addr_width=csr.ADDR_WIDTH,
                                               data_width=csr.DATA_WIDTH))}
        for reg in self.registers:
            for field in reg.fields:
                name = csr.port_name(reg, field)
                if field.access == csr.Access.RW:
                    members[name] = Out(field.width, init=field.reset)
                elif field.access == csr.Access.W1P:
                    members[name] = Out(1)
                elif field.access == csr.Access.RO:
                    members[name] = In(field.width)
        super().__init__(members)

    def port(self, register, field=None):
        """The port of ``register.field`` (or of the register's only field)."""
        reg = csr.register(register)
        return getattr(self, csr.port_name(reg, reg.field(field or register)))

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        by_name = {reg.name: reg for reg in self.registers}
        snapshotted = {reg.snapshot for reg in self.registers if reg.snapshot}

        # -- write: AW and W together, then B ------------------------------------------------------
        b_valid = Signal()
        w_take = Signal()
        m.d.comb += [
            w_take.eq(bus.awvalid & bus.wvalid & ~b_valid),
            bus.awready.eq(w_take),
            bus.wready.eq(w_take),
            bus.bvalid.eq(b_valid),
            bus.bresp.eq(Resp.OKAY),
        ]
        with m.If(w_take):
            m.d.sync += b_valid.eq(1)
        with m.Elif(bus.bready):
            m.d.sync += b_valid.eq(0)
        byte_mask = Cat(bit.replicate(8) for bit in bus.wstrb)
        w_word = bus.awaddr[2:]
        for reg in self.registers:
            hit = w_take & (w_word == reg.offset >> 2)
            for field in reg.fields:
                port = getattr(self, csr.port_name(reg, field), None)
                span = slice(field.lsb, field.lsb + field.width)
                if field.access == csr.Access.RW:
                    mask = byte_mask[span]
                    with m.If(hit):
                        m.d.sync += port.eq((port & ~mask) | (bus.wdata[span] & mask))
                elif field.access == csr.Access.W1P:
                    # Registered, so the pulse does not depend combinationally on the bus.
                    m.d.sync += port.eq(hit & bus.wdata[field.lsb]
                                        & bus.wstrb[field.lsb // 8])

        # -- read: the addressed register one cycle after AR -------------------------------------
        r_valid = Signal()
        r_data = Signal(csr.DATA_WIDTH)
        r_take = Signal()
        m.d.comb += [
            r_take.eq(bus.arvalid & ~r_valid),
            bus.arready.eq(~r_valid),
            bus.rvalid.eq(r_valid),
            bus.rdata.eq(r_data),
            bus.rresp.eq(Resp.OKAY),
        ]
        r_word = bus.araddr[2:]
        shadows = {}
        for name in snapshotted:
            for field in by_name[name].fields:
                if field.access == csr.Access.RO:
                    shadows[name, field.name] = Signal(
                        field.width, name=f"{csr.port_name(by_name[name], field)}_shadow")

        def value(reg):
            word = Signal(csr.DATA_WIDTH, name=f"{reg.name.lower()}_value")
            for field in reg.fields:
                span = slice(field.lsb, field.lsb + field.width)
                if field.access == csr.Access.CONST:
                    m.d.comb += word[span].eq(field.value(self.cfg))
                elif (reg.name, field.name) in shadows:
                    m.d.comb += word[span].eq(shadows[reg.name, field.name])
                elif field.access in (csr.Access.RO, csr.Access.RW):
                    m.d.comb += word[span].eq(getattr(self, csr.port_name(reg, field)))
            return word

        values = {reg.name: value(reg) for reg in self.registers}
        with m.If(r_take):
            m.d.sync += r_valid.eq(1)
            with m.Switch(r_word):
                for reg in self.registers:
                    with m.Case(reg.offset >> 2):
                        m.d.sync += r_data.eq(values[reg.name])
                        if reg.snapshot:
                            target = by_name[reg.snapshot]
                            for field in target.fields:
                                if (target.name, field.name) in shadows:
                                    m.d.sync += shadows[target.name, field.name].eq(
                                        getattr(self, csr.port_name(target, field)))
                with m.Default():
                    m.d.sync += r_data.eq(0)
        with m.Elif(bus.rready):
            m.d.sync += r_valid.eq(0)
        return m


# -- the shell ------------------------------------------------------------------------------------

def _flat(prefix, signature, *, flip=False):
    """Members of ``signature`` named ``<prefix>_<name>``, for flat top-level ports."""
    return {f"{prefix}_{name}": member.flip() if flip else member
            for name, member in signature.members.items()}


class AxiShell(wiring.Component):
    """The core with an AXI4-Lite register slave and an AXI4 master: an FPGA top level.

    Ports are flat and named the way vendor tools and cocotbext-axi find AXI interfaces by
    prefix: ``s_axil_awaddr`` ... for the slave, ``m_axi_awaddr`` ... for the master.

    Parameters
    ----------
    cfg : AccelConfig
        The build; ``cfg.axi_data_width`` and ``cfg.axi_addr_width`` size the master.
    max_burst : int
        Longest AXI burst in bus words (power of two, at most 256).
    fifo_depth : int, optional
        Words of buffering in each DMA engine; ``2 * max_burst`` by default.

    Members
    -------
    s_axil_* : the AXI4-Lite slave (see :class:`AXI4LiteSignature`, flipped)
    m_axi_* : the AXI4 master (see :class:`AXI4Signature`; ID width 1)
    irq : Out(1)
        ``STATUS.DONE``: high from the end of a run to the next ``CTRL.START`` or
        ``CTRL.SOFT_RESET``.
    """

    def __init__(self, cfg, *, max_burst=MAX_BURST, fifo_depth=None):
        self.cfg = cfg
        self.max_burst = max_burst
        self.fifo_depth = fifo_depth
        self.axil_signature = AXI4LiteSignature(addr_width=csr.ADDR_WIDTH,
                                                data_width=csr.DATA_WIDTH)
        self.axi_signature = AXI4Signature(addr_width=cfg.axi_addr_width,
                                           data_width=cfg.axi_data_width, id_width=1)
        super().__init__({
            **_flat("s_axil", self.axil_signature, flip=True),
            **_flat("m_axi", self.axi_signature),
            "irq": Out(1),
        })

    def elaborate(self, platform):
        cfg = self.cfg
        m = Module()
        addr_width, bus_width = cfg.axi_addr_width, cfg.axi_data_width
        engine = {"addr_width": addr_width, "bus_width": bus_width,
                  "max_burst": self.max_burst, "fifo_depth": self.fifo_depth}

        def axi(name):
            return getattr(self, f"m_axi_{name}")

        # -- registers ---------------------------------------------------------------------------
        m.submodules.csr = bank = CsrBank(cfg)
        for name, member in self.axil_signature.members.items():
            outer, inner = getattr(self, f"s_axil_{name}"), getattr(bank.bus, name)
            m.d.comb += inner.eq(outer) if member.flow == Out else outer.eq(inner)

        # -- the core and the engines, all reset by CTRL.SOFT_RESET ------------------------------
        soft_reset = Signal()
        core = BertAccelCore(cfg)
        # Beats lie in memory at their width rounded up to a power of two bytes (csr.py); the
        # core's payloads are their low bits.
        instr_rd = ReadEngine(beat_width=8 * csr.INSTR_BYTES, **engine)
        data_rd = ReadEngine(beat_width=8 * csr.data_beat_bytes(cfg), **engine)
        out_wr = WriteEngine(beat_width=8 * csr.out_beat_bytes(cfg), **engine)
        m.submodules.core = ResetInserter(soft_reset)(core)
        m.submodules.instr_dma = ResetInserter(soft_reset)(instr_rd)
        m.submodules.data_dma = ResetInserter(soft_reset)(data_rd)
        m.submodules.out_dma = ResetInserter(soft_reset)(out_wr)

        running = Signal()
        done = Signal()
        resetting = Signal()
        bus_error = Signal()
        prog_len = Signal(32)
        prog_count = Signal(32)
        data_count = Signal(32)
        out_count = Signal(32)
        cycles = Signal(64)

        start = Signal()
        m.d.comb += start.eq(bank.port("CTRL", "START") & ~bank.port("CTRL", "SOFT_RESET")
                             & ~running & ~resetting)
        for dma, base in ((instr_rd, "PROG_ADDR"), (data_rd, "DATA_ADDR"), (out_wr, "OUT_ADDR")):
            m.d.comb += [
                dma.start.eq(start),
                dma.base.eq(Cat(bank.port(f"{base}_LO"), bank.port(f"{base}_HI"))),
            ]
        m.d.comb += [
            instr_rd.count.eq(bank.port("PROG_LEN")),
            data_rd.count.eq(bank.port("DATA_LEN")),
        ]

        # -- streams into and out of the core ---------------------------------------------------
        m.d.comb += [
            core.i_instr.valid.eq(instr_rd.o.valid),
            core.i_instr.payload.eq(instr_rd.o.payload),
            instr_rd.o.ready.eq(core.i_instr.ready),
            core.i_data.valid.eq(data_rd.o.valid),
            core.i_data.payload.eq(data_rd.o.payload),
            data_rd.o.ready.eq(core.i_data.ready),
            # Results are taken only during a run: after an error the core may still hold some.
            out_wr.i.valid.eq(core.o_data.valid & running),
            out_wr.i.payload.eq(core.o_data.payload),
            core.o_data.ready.eq(out_wr.i.ready & running),
        ]
        with m.If(core.i_instr.valid & core.i_instr.ready):
            m.d.sync += prog_count.eq(prog_count + 1)
        with m.If(core.i_data.valid & core.i_data.ready):
            m.d.sync += data_count.eq(data_count + 1)
        with m.If(core.o_data.valid & core.o_data.ready):
            m.d.sync += out_count.eq(out_count + 1)

        # -- AR: round robin between the two read engines; R: routed by RID ---------------------
        readers = (instr_rd, data_rd)  # index = ARID
        grant = Signal()
        ar = Signal(_request_layout(addr_width))
        m.d.comb += [
            axi("arvalid").eq(Mux(grant, data_rd.ar.valid, instr_rd.ar.valid)),
            ar.eq(Mux(grant, data_rd.ar.payload, instr_rd.ar.payload)),
            axi("arid").eq(grant),
            axi("araddr").eq(ar.addr),
            axi("arlen").eq(ar.len),
        ]
        for index, reader in enumerate(readers):
            m.d.comb += reader.ar.ready.eq(axi("arready") & (grant == index))
        # A request on offer is held until taken (AXI rule); the grant moves only between them.
        other_wants = Mux(grant, instr_rd.ar.valid, data_rd.ar.valid)
        with m.If((~axi("arvalid") | axi("arready")) & other_wants):
            m.d.sync += grant.eq(~grant)
        for index, reader in enumerate(readers):
            m.d.comb += [
                reader.r.valid.eq(axi("rvalid") & (axi("rid") == index)),
                reader.r.payload.data.eq(axi("rdata")),
            ]
        m.d.comb += axi("rready").eq(Mux(axi("rid"), data_rd.r.ready, instr_rd.r.ready))

        # -- AW, W, B: the write engine -----------------------------------------------------------
        m.d.comb += [
            axi("awvalid").eq(out_wr.aw.valid),
            axi("awid").eq(0),
            axi("awaddr").eq(out_wr.aw.payload.addr),
            axi("awlen").eq(out_wr.aw.payload.len),
            out_wr.aw.ready.eq(axi("awready")),
            axi("wvalid").eq(out_wr.w.valid),
            axi("wdata").eq(out_wr.w.payload.data),
            axi("wstrb").eq(out_wr.w.payload.strb),
            axi("wlast").eq(out_wr.w.payload.last),
            out_wr.w.ready.eq(axi("wready")),
            out_wr.b.valid.eq(axi("bvalid")),
            out_wr.b.payload.resp.eq(axi("bresp")),
            axi("bready").eq(out_wr.b.ready),
        ]
        for ch in ("aw", "ar"):
            m.d.comb += [
                axi(f"{ch}size").eq(_log2(bus_width // 8)),
                axi(f"{ch}burst").eq(Burst.INCR),
                axi(f"{ch}lock").eq(0),
                axi(f"{ch}cache").eq(_CACHE),
                axi(f"{ch}prot").eq(0),
                axi(f"{ch}qos").eq(0),
            ]
        with m.If((axi("rvalid") & axi("rready") & axi("rresp")[1])
                  | (axi("bvalid") & axi("bready") & axi("bresp")[1])):
            m.d.sync += bus_error.eq(1)

        # -- run control --------------------------------------------------------------------------
        # The run ends when the core has taken every instruction and gone idle (or flagged an
        # error, after which it drops instructions and may never go idle), nothing is in flight
        # on the bus and every result has its write response.
        finishing = Signal()
        m.d.comb += [
            finishing.eq(running & (prog_count == prog_len) & (~core.o_busy | core.o_error)),
            out_wr.flush.eq(finishing),
            instr_rd.stop.eq(finishing | resetting),
            data_rd.stop.eq(finishing | resetting),
            out_wr.stop.eq(resetting),
        ]
        with m.If(running):
            m.d.sync += cycles.eq(cycles + 1)
            with m.If(finishing & instr_rd.idle & data_rd.idle & out_wr.idle):
                m.d.sync += [running.eq(0), done.eq(1)]
        with m.If(start):
            m.d.sync += [
                running.eq(1), done.eq(0), cycles.eq(0), prog_len.eq(bank.port("PROG_LEN")),
                prog_count.eq(0), data_count.eq(0), out_count.eq(0),
            ]

        # A soft reset waits until the bus is quiet (no request may be cut short), then resets
        # the core and the engines in one cycle.
        with m.If(bank.port("CTRL", "SOFT_RESET")):
            m.d.sync += resetting.eq(1)
        m.d.comb += soft_reset.eq(resetting & instr_rd.idle & data_rd.idle & out_wr.quiet)
        with m.If(soft_reset):
            m.d.sync += [resetting.eq(0), running.eq(0), done.eq(0), bus_error.eq(0)]

        # -- status -------------------------------------------------------------------------------
        m.d.comb += [
            bank.port("STATUS", "BUSY").eq(running | resetting),
            bank.port("STATUS", "DONE").eq(done),
            bank.port("STATUS", "ERROR").eq(core.o_error),
            bank.port("STATUS", "BUS_ERROR").eq(bus_error),
            bank.port("STATUS", "CORE_BUSY").eq(core.o_busy),
            bank.port("OUT_COUNT").eq(out_count),
            bank.port("CYCLES_LO").eq(cycles[:32]),
            bank.port("CYCLES_HI").eq(cycles[32:]),
            bank.port("PROG_COUNT").eq(prog_count),
            bank.port("DATA_COUNT").eq(data_count),
            self.irq.eq(done),
        ]
        return m
