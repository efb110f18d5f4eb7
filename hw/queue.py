"""A FIFO with ``SyncFIFOBuffered``'s timing whose reader's ``r_en`` reaches no wide register.

In ``amaranth.lib.fifo.SyncFIFOBuffered`` the output is the read register of the FIFO's memory,
enabled whenever the head is taken, so the reader's ``ready`` (its accept, the end of a unit's
decision) enables every bit of the head, its read pointer and its level: the path that limited
the cores (docs/fpga.md). :class:`Queue` shows the same entries in the same cycles, takes writes
in the same cycles and reports the same level, but the head is one of two registers (``slot0``,
``slot1``) picked by a pointer, and the register that is not the head is filled from the memory
ahead of time, with an enable decided from registers only. The price is one multiplexer between
the slots and ``r_data``; the head's ``fast`` bits are also kept in a register of their own
(``head_bits``) for a reader that decides from them, and shown a cycle ahead (``r_fast_next``)
for a reader whose decision is itself a register.

The entries are cut into chunks of at most :data:`CHUNK` bits, each with its own memory and
its own copy of the control registers (the head pointer, the valid flags, the memory's
pointers, ``w_rdy``), kept apart in the FPGA flows (:data:`~bertaccel.hw.dsp.KEEP`), so that no
net selects, enables or addresses a whole entry. The reader's ``r_en`` reaches those copies and
``head_bits``.

The memories are written at the write pointer whenever the queue has room, whether or not
``w_en`` is high: that row holds no entry until a write is taken, which moves the pointer on,
so the write enables are registers and the writer's decision reaches only the pointers and
flags (a timing choice).

The timing that stays the same (``sw/cycles`` reads it): an entry written in cycle W is at
the output in cycle W + 2 when the head is free, the next entry is there the cycle after a pop,
and a write is taken while fewer than ``depth - 1`` entries wait behind the head.
"""

from amaranth import Array, Cat, Module, Mux, Signal
from amaranth.hdl import Assert
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import In, Out

from .dsp import KEEP
from .formal import is_formal

__all__ = ["Queue", "CHUNK"]

#: Bits of an entry that one copy of the control registers serves, at most.
CHUNK = 32


class Queue(wiring.Component):
    """A first-in first-out queue of ``depth`` entries of ``width`` bits.

    The ports are ``SyncFIFOBuffered``'s, and they behave the same cycle by cycle.

    Parameters
    ----------
    width : int
    depth : int
        At least 2.
    fast : slice
        Bits of ``r_data`` that come from a register with no multiplexer after it (none by
        default).
    far_valid : bool
        Also drive ``r_rdy_far``, ``r_rdy`` from a copy of the control registers of its own
        (for a reader's decision far from the queue: the copy can sit beside it).

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
    r_fast_next : Out(ArrayLayout(fast bits, 2))
        With ``fast`` bits only: what they will be next cycle if ``r_en`` is low ([0]) or
        high ([1]) this cycle.
    r_rdy_far : Out(1)
        With ``far_valid`` only: ``r_rdy``, another register.

    Under :data:`~bertaccel.hw.formal.FORMAL` the queue asserts its induction invariants
    and drives ``contents`` (``ArrayLayout(width, depth)``, not a port): the entries it holds
    in queue order, the head first, valid below ``level``.
    """

    #: An entry written in cycle W is at the output (``r_rdy``) in cycle W + LATENCY when the
    #: head is free: the memory's write, then the fill of a slot.
    LATENCY = 2

    def __init__(self, *, width, depth, fast=slice(0, 0), far_valid=False):
        if depth < 2:
            raise ValueError(f"a Queue holds at least 2 entries, not {depth}")
        if fast.step is not None or not 0 <= fast.start <= fast.stop <= width:
            raise ValueError(f"a Queue's fast bits are a slice within its width {width}, "
                             f"not {fast}")
        self.width, self.depth, self.fast, self.far_valid = width, depth, fast, far_valid
        members = {
            "w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
            "r_data": Out(width), "r_rdy": Out(1), "r_en": In(1),
            "level": Out(range(depth + 1)),
        }
        if fast.stop > fast.start:
            members["r_fast_next"] = Out(data.ArrayLayout(fast.stop - fast.start, 2))
        if far_valid:
            members["r_rdy_far"] = Out(1)
        super().__init__(members)
        self.contents = Signal(data.ArrayLayout(width, depth))

    def elaborate(self, platform):
        m = Module()
        behind = self.depth - 1              # entries behind the head: the spare slot and memory
        ctl = _Control(behind)
        m.d.comb += [
            self.w_rdy.eq(ctl.room),
            self.r_rdy.eq(ctl.head_valid),
            self.level.eq(ctl.waiting + ctl.head_valid),
        ]
        ctl.advance(m, w_en=self.w_en, r_en=self.r_en)

        slots = [Signal(self.width, name=f"slot{i}", reset_less=True) for i in range(2)]
        heads, copies, storages = [], [], []
        for n, start in enumerate(range(0, self.width, CHUNK)):
            part = slice(start, min(start + CHUNK, self.width))
            if n == 0:
                copy = ctl
            else:
                copy = _Control(behind, f"_{n}")    # the control registers, again
                copy.advance(m, w_en=self.w_en, r_en=self.r_en)
            m.submodules[f"storage_{n}"] = storage = memory.Memory(
                shape=part.stop - part.start, depth=behind, init=[])
            copies.append(copy)
            storages.append((part, storage))
            w_port = storage.write_port()
            r_port = storage.read_port(domain="comb")
            m.d.comb += [w_port.addr.eq(copy.produce), w_port.data.eq(self.w_data[part]),
                         w_port.en.eq(copy.room), r_port.addr.eq(copy.consume)]
            # A fill goes into the spare slot behind a valid head, else into the head's slot.
            target = copy.head ^ copy.head_valid
            for i, slot in enumerate(slots):
                with m.If(copy.fill & (target == i)):
                    m.d.sync += slot[part].eq(r_port.data)
            heads.append(Mux(copy.head, slots[1][part], slots[0][part]))
        m.d.comb += self.r_data.eq(Cat(*heads))
        fast = None
        if self.fast.stop > self.fast.start:
            fast = self._head_bits(m, ctl)
        if self.far_valid:
            far = _Control(behind, "_far")
            far.advance(m, w_en=self.w_en, r_en=self.r_en)
            m.d.comb += self.r_rdy_far.eq(far.head_valid)
            copies.append(far)
        if is_formal(platform):
            _Invariants(self, m, copies, slots).state(storages, fast)
        return m

    def _head_bits(self, m, ctl):
        """The head's ``fast`` bits in a register: after a pop, the spare slot's or the
        memory's; with no head, the memory's. Both next values (no pop, a pop) are outputs.

        Timing: the memory's oldest entry's fast bits are a register too (``oldest``), loaded
        from a copy of the memory read a pointer ahead (``consume_ahead``) or from the entry
        written when the memory holds none after this cycle's fill, and so are the spare
        slot's (``spare_bits``, loaded with ``oldest`` at a fill), so ``r_fast_next`` is a
        choice of registers by registers: no read of a LUT RAM and no pick by the head
        pointer lies in front of a reader's decision."""
        bits = self.fast
        width = bits.stop - bits.start
        behind = self.depth - 1
        head_bits = Signal(width, name="head_bits", reset_less=True)
        oldest = Signal(width, name="oldest", reset_less=True)
        ahead = Signal(range(behind), init=1 % behind, name="consume_ahead")
        m.submodules.storage_fast = storage = memory.Memory(shape=width, depth=behind, init=[])
        w_port = storage.write_port()
        r_port = storage.read_port(domain="comb")
        m.d.comb += [w_port.addr.eq(ctl.produce), w_port.data.eq(self.w_data[bits]),
                     w_port.en.eq(ctl.room), r_port.addr.eq(ahead)]
        with m.If(ctl.fill):
            m.d.sync += ahead.eq(_next(ahead, behind))
        # After a fill the oldest entry is the one behind it, or the one written now if the
        # fill took the last; without a fill it changes only when the memory held none.
        keeps = Mux(ctl.fill, ctl.count >= 2, ctl.stored)
        m.d.sync += oldest.eq(Mux(keeps, Mux(ctl.fill, r_port.data, oldest), self.w_data[bits]))
        # The spare slot's bits matter while it is valid: from the fill that made it valid
        # (behind a valid head, which stays) until the head is popped, and no fill comes
        # between.
        spare = Signal(width, name="spare_bits", reset_less=True)
        with m.If(ctl.fill):
            m.d.sync += spare.eq(oldest)
        for taken in (0, 1):
            pop = ctl.head_valid & taken
            m.d.comb += self.r_fast_next[taken].eq(
                Mux(pop & ctl.spare_valid, spare,
                    Mux(ctl.head_valid & ~pop, head_bits, oldest)))
        m.d.sync += head_bits.eq(self.r_fast_next[self.r_en])
        m.d.comb += self.r_data[bits].eq(head_bits)
        return {"head_bits": head_bits, "oldest": oldest, "ahead": ahead, "spare": spare,
                "storage": storage}


class _Control:
    """The queue's control registers: ``head`` (which slot is the head), ``head_valid``,
    ``spare_valid`` (the other slot holds the next entry), ``count`` (the entries in the
    memory), ``stored`` (the memory holds an entry), ``room`` (``w_rdy``), the memory's write
    pointer and the one after it, its read pointer; ``waiting``, the entries behind the head;
    and ``fill``: the memory's oldest entry moves into a slot this cycle.

    Timing: each register's next value is a LUT or two of registers and the late ``w_en`` and
    ``r_en`` (the writer's and the reader's decisions), with no adder or compare after them:
    the write pointer's next value is kept in a register of its own (``produce_ahead``), so
    a write only picks it.
    """

    def __init__(self, behind, suffix=""):
        self._behind = behind
        self.head = Signal(name=f"head{suffix}", attrs=KEEP)
        self.head_valid = Signal(name=f"head_valid{suffix}", attrs=KEEP)
        self.spare_valid = Signal(name=f"spare_valid{suffix}", attrs=KEEP)
        self.count = Signal(range(behind + 1), name=f"stored{suffix}", attrs=KEEP)
        self.stored = Signal(name=f"stored_any{suffix}", attrs=KEEP)
        self.room = Signal(init=1, name=f"room{suffix}", attrs=KEEP)
        self.produce = Signal(range(behind), name=f"produce{suffix}", attrs=KEEP)
        self.produce_ahead = Signal(range(behind), init=1 % behind,
                                    name=f"produce_ahead{suffix}", attrs=KEEP)
        self.consume = Signal(range(behind), name=f"consume{suffix}", attrs=KEEP)
        self.fill = self.stored & ~self.spare_valid
        self.waiting = self.count + self.spare_valid

    #: The registers, by attribute name.
    REGISTERS = ("head", "head_valid", "spare_valid", "count", "stored", "room", "produce",
                 "produce_ahead", "consume")

    def next_values(self, *, write, pop, move):
        """The registers' values in the next cycle, by name, from this cycle's ``write``,
        ``pop`` and ``move`` (an entry reaches the head)."""
        behind = self._behind
        return {
            # A choice of the count and its neighbours: the writer's decision picks, and
            # enters no adder.
            "count": Mux(write, Mux(self.fill, self.count, self.count + 1),
                         Mux(self.fill, self.count - 1, self.count)),
            "head": self.head ^ pop,
            "head_valid": Mux(pop, self.spare_valid | self.fill, self.head_valid | self.fill),
            "spare_valid": ~pop & self.head_valid & (self.spare_valid | self.fill),
            "stored": write | Mux(self.fill, self.count >= 2, self.stored),
            # `waiting != behind - 1` as two compares of the count, picked by `spare_valid`,
            # with no adder in front of them.
            "room": Mux(write & ~move,
                        Mux(self.spare_valid, self.count != behind - 2, self.count != behind - 1),
                        (move & ~write) | self.room),
            "produce": Mux(write, self.produce_ahead, self.produce),
            "produce_ahead": Mux(write, _next(self.produce_ahead, behind), self.produce_ahead),
            "consume": Mux(self.fill, _next(self.consume, behind), self.consume),
        }

    def advance(self, m, *, w_en, r_en):
        """Load the registers with their :meth:`next_values` for the writer's ``w_en`` and the
        reader's ``r_en``, from these registers.

        Timing: each copy makes its next values from its own registers (its own count of the
        entries in the memory too), so the logic in front of a register drives that register
        alone, and yosys turns its choices into the flip-flop's clock enable and its reset into
        the flip-flop's synchronous reset (it does neither for logic shared by several
        registers, which then costs a LUT level)."""
        pop = r_en & self.head_valid
        move = (self.spare_valid | self.stored) & (~self.head_valid | pop)
        values = self.next_values(write=w_en & self.room, pop=pop, move=move)
        m.d.sync += [getattr(self, name).eq(value) for name, value in values.items()]


class _Invariants:
    """A queue's induction invariants, stated under ``FORMAL`` (``hw/formal.py``): every
    copy of the control registers equals the first; the first's registers agree with each
    other (the slots fill in order, the memory's pointers are its count apart, ``room`` is
    "fewer than ``depth - 1`` waiting"); the fast-bit registers hold the bits of the slot or
    row they stand for; and ``contents`` shows the slots and the memory's rows in order."""

    def __init__(self, queue, m, copies, slots):
        self.queue, self.m, self.copies, self.slots = queue, m, copies, slots
        self.behind = queue.depth - 1

    def state(self, storages, fast):
        m, ctl, behind = self.m, self.copies[0], self.behind
        for copy in self.copies[1:]:
            m.d.comb += [Assert(getattr(copy, name) == getattr(ctl, name))
                         for name in _Control.REGISTERS]
        m.d.comb += [
            Assert(ctl.head_valid | ~ctl.spare_valid),
            Assert(ctl.count <= behind),
            Assert((ctl.consume < behind) & (ctl.produce < behind)),
            Assert(ctl.stored == (ctl.count != 0)),
            Assert(ctl.waiting <= behind),
            Assert(ctl.room == (ctl.waiting != behind)),
            Assert(ctl.produce == self.wrap(ctl.consume + ctl.count)),
            Assert(ctl.produce_ahead == self.wrap(ctl.produce + 1)),
        ]
        rows = Array(Signal(self.queue.width, name=f"row{i}") for i in range(behind))
        for part, storage in storages:
            for i, row in enumerate(rows):
                port = storage.read_port(domain="comb")
                m.d.comb += [port.addr.eq(i), row[part].eq(port.data)]
        self.contents(rows)
        if fast is not None:
            self.fast_bits(rows, fast)

    def wrap(self, value):
        """``value`` modulo the memory's rows, for a value below twice that."""
        return Mux(value >= self.behind, value - self.behind, value)

    def head_and_spare(self):
        ctl, slots = self.copies[0], self.slots
        return Mux(ctl.head, slots[1], slots[0]), Mux(ctl.head, slots[0], slots[1])

    def contents(self, rows):
        """Entry j: the head slot, the spare slot, then the memory's rows from ``consume``."""
        ctl, queue = self.copies[0], self.queue
        head, spare = self.head_and_spare()
        in_slots = ctl.head_valid + ctl.spare_valid
        for j in range(queue.depth):
            from_rows = Array(rows[self.wrap(ctl.consume + j - k)] if j >= k else 0
                              for k in range(3))
            self.m.d.comb += queue.contents[j].eq(
                Mux(j < ctl.head_valid, head,
                    Mux(j < in_slots, spare, from_rows[in_slots])))

    def fast_bits(self, rows, fast):
        """``head_bits``, ``spare_bits`` and ``oldest`` hold the fast bits of the head, the
        spare slot and the memory's oldest row; the fast copy of the memory holds every
        stored row's; ``consume_ahead`` is one past ``consume``."""
        m, ctl, bits = self.m, self.copies[0], self.queue.fast
        head, spare = self.head_and_spare()
        m.d.comb += [
            Assert(~ctl.head_valid | (fast["head_bits"] == head[bits])),
            Assert(~ctl.spare_valid | (fast["spare"] == spare[bits])),
            Assert(~ctl.stored | (fast["oldest"] == rows[ctl.consume][bits])),
        ]
        if self.behind > 1:
            m.d.comb += Assert(fast["ahead"] == self.wrap(ctl.consume + 1))
        for i in range(self.behind):
            port = fast["storage"].read_port(domain="comb")
            at = self.wrap(ctl.consume + i)
            m.d.comb += [port.addr.eq(at),
                         Assert((i >= ctl.count) | (port.data == rows[at][bits]))]


def _next(pointer, size):
    """``pointer + 1`` modulo ``size``."""
    if size & (size - 1) == 0:
        return pointer + 1
    return Mux(pointer == size - 1, 0, pointer + 1)
