"""Formal proofs of :class:`~bertaccel.hw.queue.Queue`.

``QueueProperties`` drives the queue with free inputs (``AnySeq``: any write, any read, any
reset, any cycle) beside a reference model in registers (the entries in order and their
count), and asserts: ``level`` is the count (no overflow: never above ``depth``; no
underflow: ``r_rdy`` only with an entry), the entries are those written in the order written
(``contents`` and ``r_data`` against the model), ``w_rdy`` is "fewer than ``depth - 1``
entries behind the head", and ``r_rdy_far`` is ``r_rdy``. Proven by k-induction with the
queue's own invariants (``hw/queue.py``, under ``FORMAL``).

``SyncFifoEquivalence`` runs the queue beside ``SyncFIFOBuffered`` on the same inputs and
asserts every output equal, cycle by cycle: bounded, to a depth that reaches every state of
both. Every pointer and occupancy of a queue of ``depth`` entries is reached from reset within
``2 * depth + 2`` cycles (fill to a level, then one write and one pop a cycle walk the pointers
round), so ``3 * depth + 4`` cycles cover each state and the cycles after it.
"""

from pathlib import Path

import pytest
from amaranth import Array, Elaboratable, Module, Signal
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Cover
from amaranth.lib.fifo import SyncFIFOBuffered

from bertaccel.hw.formal import FORMAL
from bertaccel.hw import queue as queue_module
from bertaccel.hw.queue import Queue

from verif.tb.formal import check

#: (width, depth, fast bits, far_valid): one and two chunks, a power-of-two memory and not.
SHAPES = [(3, 2, slice(0, 0), False), (4, 4, slice(1, 3), True),
          (36, 3, slice(31, 34), False), (3, 5, slice(0, 2), False)]


class _Inputs:
    def __init__(self, m, queue):
        self.w_data, self.w_en, self.r_en = AnySeq(queue.width), AnySeq(1), AnySeq(1)
        m.d.comb += [queue.w_data.eq(self.w_data), queue.w_en.eq(self.w_en),
                     queue.r_en.eq(self.r_en)]


class QueueProperties(Elaboratable):
    def __init__(self, width, depth, fast, far_valid):
        self.queue = Queue(width=width, depth=depth, fast=fast, far_valid=far_valid)

    def elaborate(self, platform):
        m = Module()
        m.submodules.queue = queue = self.queue
        depth = queue.depth
        take = _Inputs(m, queue)
        model = Array(Signal(queue.width, name=f"model{i}") for i in range(depth))
        count = Signal(range(depth + 1))
        pop = take.r_en & queue.r_rdy
        push = take.w_en & queue.w_rdy
        m.d.sync += count.eq(count + push - pop)
        for i in range(depth):
            kept = model[i + 1] if i + 1 < depth else model[i]
            after_pop = kept if i + 1 < depth else 0
            with m.If(push & (i == count - pop)):
                m.d.sync += model[i].eq(take.w_data)
            with m.Elif(pop):
                m.d.sync += model[i].eq(after_pop)
        behind = queue.level - queue.r_rdy
        m.d.comb += [
            Assert(queue.level == count),
            Assert(count <= depth),
            Assert(~queue.r_rdy | (count != 0)),
            Assert(~queue.r_rdy | (queue.r_data == model[0])),
            Assert(queue.w_rdy == (behind < depth - 1)),
        ]
        m.d.comb += [Assert((j >= count) | (queue.contents[j] == model[j]))
                     for j in range(depth)]
        if queue.far_valid:
            m.d.comb += Assert(queue.r_rdy_far == queue.r_rdy)
        m.d.comb += [Cover(queue.level == depth), Cover(~queue.w_rdy & queue.r_rdy),
                     Cover(push & pop & (count == depth - 1)), Cover(pop & (count == 1))]
        return m


class SyncFifoEquivalence(Elaboratable):
    def __init__(self, width, depth):
        self.queue = Queue(width=width, depth=depth)
        self.fifo = SyncFIFOBuffered(width=width, depth=depth)

    def elaborate(self, platform):
        m = Module()
        m.submodules.queue, m.submodules.fifo = queue, fifo = self.queue, self.fifo
        take = _Inputs(m, queue)
        m.d.comb += [fifo.w_data.eq(take.w_data), fifo.w_en.eq(take.w_en),
                     fifo.r_en.eq(take.r_en)]
        m.d.comb += [Assert(queue.w_rdy == fifo.w_rdy), Assert(queue.r_rdy == fifo.r_rdy),
                     Assert(queue.level == fifo.level),
                     Assert(~fifo.r_rdy | (queue.r_data == fifo.r_data))]
        m.d.comb += [Cover(fifo.level == fifo.depth), Cover(fifo.r_rdy & fifo.r_en & fifo.w_en)]
        return m


@pytest.mark.parametrize("width,depth,fast,far_valid", SHAPES)
def test_queue_is_a_fifo(tmp_path, width, depth, fast, far_valid):
    harness = QueueProperties(width, depth, fast, far_valid)
    result = check(harness, name="queue", workdir=tmp_path, depth=4, cover=2 * depth + 4,
                   platform=FORMAL)
    assert result.proven and result.covered, result.summary


@pytest.mark.parametrize("depth", [2, 3])
def test_queue_equals_sync_fifo_buffered(tmp_path, depth):
    result = check(SyncFifoEquivalence(4, depth), name="queue_fifo", workdir=tmp_path,
                   depth=3 * depth + 4, mode="bmc", cover=2 * depth + 4)
    assert result.proven and result.covered, result.summary


def test_a_broken_room_rule_fails_the_proof(tmp_path, monkeypatch):
    """With ``room`` never falling (a write taken into a full queue), the proof must fail
    at a stated property, with a counterexample trace from reset: it is not vacuous."""
    next_values = queue_module._Control.next_values

    def always_room(self, **kwargs):
        return dict(next_values(self, **kwargs), room=1)

    monkeypatch.setattr(queue_module._Control, "next_values", always_room)
    result = check(QueueProperties(3, 3, slice(0, 0), False), name="broken_queue",
                   workdir=tmp_path, depth=8, cover=0, platform=FORMAL)
    assert result.status["prove"] == "FAIL", result.summary
    assert result.failed.rpartition(":")[2].isdigit(), result.summary   # file:line
    assert result.trace.endswith(".vcd") and Path(result.trace).exists()
