"""Gearboxes between stream widths: a word into narrow beats, and beats into a word."""

from amaranth import Const, Module, Mux, Signal
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Downsizer", "Upsizer"]


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


