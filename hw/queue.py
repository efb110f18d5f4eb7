"""A FIFO with ``SyncFIFOBuffered``'s timing whose reader's ``r_en`` reaches no wide register.

In ``amaranth.lib.fifo.SyncFIFOBuffered`` the output is the read register of the FIFO's memory,
enabled whenever the head is taken, so the reader's ``ready`` (its accept, the end of a unit's
decision) enables every bit of the head, its read pointer and its level: the path that limits
the cores (docs/fpga.md). :class:`Queue` shows the same entries in the same cycles, takes writes
in the same cycles and reports the same level, but the head is one of two registers (``slot0``,
``slot1``) picked by a pointer, and the register that is not the head is filled from the memory
ahead of time, with an enable decided from registers only. The reader's ``r_en`` reaches the
pointer, two valid flags and the level's low logic, five flip-flops; the price is one
multiplexer between the slots and ``r_data``.

The timing that stays the same (``sw/cycles.py`` reads it): an entry written in cycle W is at
the output in cycle W + 2 when the head is free, the next entry is there the cycle after a pop,
and a write is taken while fewer than ``depth - 1`` entries wait behind the head.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Queue"]


class Queue(wiring.Component):
    """A first-in first-out queue of ``depth`` entries of ``width`` bits.

    The ports are ``SyncFIFOBuffered``'s, and they behave the same cycle by cycle.

    Parameters
    ----------
    width : int
    depth : int
        At least 2.

    Members
    -------
    w_data : In(width)
    w_en : In(1)
    w_rdy : Out(1)
        A write is taken this cycle (fewer than ``depth - 1`` entries behind the head).
    r_data : Out(width)
    r_rdy : Out(1)
    r_en : In(1)
    level : Out(range(depth + 1))
    """

    def __init__(self, *, width, depth):
        if depth < 2:
            raise ValueError(f"a Queue holds at least 2 entries, not {depth}")
        self.width = width
        self.depth = depth
        super().__init__({
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_rdy": Out(1), "r_en": In(1),
            "level": Out(range(depth + 1)),
        })

    def elaborate(self, platform):
        m = Module()
        behind = self.depth - 1              # entries behind the head: the spare slot and memory
        m.submodules.storage = storage = memory.Memory(shape=self.width, depth=behind, init=[])
        w_port = storage.write_port()
        r_port = storage.read_port(domain="comb")
        produce = Signal(range(behind), name="produce")
        consume = Signal(range(behind), name="consume")
        stored = Signal(range(behind + 1), name="stored")      # entries in the memory

        slots = [Signal(self.width, name=f"slot{i}", reset_less=True) for i in range(2)]
        head = Signal(name="head")           # which slot is the head
        head_valid = Signal(name="head_valid")
        spare_valid = Signal(name="spare_valid")   # the other slot holds the next entry

        write = Signal()
        fill = Signal()                      # the memory's oldest entry moves into a slot
        pop = Signal()
        m.d.comb += [
            self.w_rdy.eq(stored + spare_valid != behind),
            write.eq(self.w_en & self.w_rdy),
            fill.eq((stored != 0) & ~spare_valid),
            pop.eq(self.r_en & head_valid),
            self.r_rdy.eq(head_valid),
            self.r_data.eq(Mux(head, slots[1], slots[0])),
            self.level.eq(stored + spare_valid + head_valid),
            w_port.addr.eq(produce), w_port.data.eq(self.w_data), w_port.en.eq(write),
            r_port.addr.eq(consume),
        ]
        with m.If(write):
            m.d.sync += produce.eq(_next(produce, behind))
        with m.If(fill):
            m.d.sync += consume.eq(_next(consume, behind))
        m.d.sync += stored.eq(stored + write - fill)
        # A fill goes into the spare slot behind a valid head, else into the head's slot: its
        # enable reads registers only.
        target = head ^ head_valid
        for i, slot in enumerate(slots):
            with m.If(fill & (target == i)):
                m.d.sync += slot.eq(r_port.data)
        with m.If(pop):
            m.d.sync += [head.eq(~head), head_valid.eq(spare_valid | fill), spare_valid.eq(0)]
        with m.Elif(head_valid):
            m.d.sync += spare_valid.eq(spare_valid | fill)
        with m.Else():
            m.d.sync += head_valid.eq(fill)
        return m


def _next(pointer, size):
    """``pointer + 1`` modulo ``size``."""
    if size & (size - 1) == 0:
        return pointer + 1
    return Mux(pointer == size - 1, 0, pointer + 1)
