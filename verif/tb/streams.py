"""Drivers and monitors of Amaranth streams for cocotb testbenches, with pause generators.

An :class:`amaranth.lib.stream.Signature` port ``name`` of the simulator's top module is three
signals, ``{name}__valid``, ``{name}__ready`` and ``{name}__payload``. :class:`StreamSource`
drives the first and last of an input port, :class:`StreamSink` takes an output port and
drives its ``ready``, :class:`StreamMonitor` only watches one. Each runs its own coroutine from
the moment it is made, in the sampling discipline of every cocotb test in ``verif/``: it drives
right after the falling edge of ``clock`` and samples at :class:`~cocotb.triggers.ReadOnly` of
the same half cycle, so a transfer it records is one that happens at the next rising edge.

Idle cycles and backpressure come from pause generators, in the shape of cocotbext-axi's
``set_pause_generator``: any iterator of bools, advanced once a cycle, where ``True`` means
"pause this cycle" (the source offers no new word, the sink holds ``ready`` low). ``None``
never pauses, and neither does an exhausted iterator. :func:`random_pause` and
:func:`cycle_pause` make the usual two::

    tb.source = StreamSource(dut, "i_beat", dut.clk)
    tb.sink = StreamSink(dut, "o_data", dut.clk)
    tb.source.set_pause_generator(random_pause(random.Random(seed), 0.3))
    tb.sink.set_pause_generator(cycle_pause([1, 1, 1, 0]))
    tb.source.send(words)
    await tb.sink.wait(len(expected))
    assert [t.payload for t in tb.sink.get_all()] == expected
    await drain(dut.clk, sources=[tb.source], sinks=[tb.sink], busy=dut.o_busy)

A source keeps ``valid`` high and its payload unchanged from the cycle it offers a word until
the cycle that word is taken (AXI-Stream rules, which the streams of the core follow), so its
pauses fall only between words. A monitor or sink checks the same rules of the stream it
watches: a producer that drops ``valid``, or changes its payload, before the transfer fails the
test with an :class:`AssertionError` naming the stream.

Every test ends with :func:`drain`: every source's words taken, the DUT no longer busy, no
sink offered anything more for a few cycles, and every transfer a sink recorded taken (and
checked) by the test.
"""

import itertools
from collections import deque
from dataclasses import dataclass, field

import cocotb
from cocotb.triggers import FallingEdge, ReadOnly
from cocotb.utils import get_sim_time

__all__ = ["Transfer", "StreamSource", "StreamSink", "StreamMonitor", "random_pause",
           "cycle_pause", "drain"]


def random_pause(rng, probability):
    """Pause each cycle with ``probability``, drawn from ``rng`` (a :class:`random.Random`).

    The draw is ``rng.random() < probability`` each cycle, so a seeded ``rng`` replays the same
    pauses."""
    while True:
        yield rng.random() < probability


def cycle_pause(pattern):
    """Pause by ``pattern`` (bools or 0/1) over and over: ``cycle_pause([1, 1, 1, 0])`` is
    ready one cycle in four, as in cocotbext-axi's tests."""
    return itertools.cycle([bool(p) for p in pattern])


@dataclass(frozen=True)
class Transfer:
    """One transfer on a stream.

    Members
    -------
    payload : int
    extra : dict of str to int
        The side signals the monitor was asked for, sampled in the same cycle.
    time : float
        Simulation time in ns of the half cycle it was sampled in (the falling edge before
        the rising edge of the transfer).
    """
    payload: int
    extra: dict = field(default_factory=dict)
    time: float = 0.0


class _Part:
    """What sources, sinks and monitors share: the port's signals, a logger, the pause."""

    def __init__(self, dut, name, clock):
        self.name = name
        self.clock = clock
        self.valid = getattr(dut, f"{name}__valid")
        self.ready = getattr(dut, f"{name}__ready")
        self.payload = getattr(dut, f"{name}__payload")
        self.log = dut._log.getChild(f"tb.{name}")
        self._pause_generator = None

    def set_pause_generator(self, generator=None):
        """Pause by ``generator`` from the next cycle on: an iterator of bools, ``True`` to
        pause; ``None`` never pauses."""
        self._pause_generator = None if generator is None else iter(generator)

    def clear_pause_generator(self):
        self.set_pause_generator(None)

    def _pause(self):
        """This cycle's pause, advancing the generator (once a cycle, paused or not)."""
        if self._pause_generator is None:
            return False
        try:
            return bool(next(self._pause_generator))
        except StopIteration:
            self._pause_generator = None
            return False

    async def _cycles(self, limit, busy, what):
        """Wait cycles (after each falling edge) while ``busy()``; after ``limit`` of them,
        fail with ``what()``."""
        for _ in range(limit):
            if not busy():
                return
            await FallingEdge(self.clock)
        if busy():
            raise AssertionError(f"{self.name}: {what()} after {limit} cycles")


class StreamSource(_Part):
    """Drives an input stream ``name`` of ``dut`` with queued words.

    Parameters
    ----------
    dut : cocotb handle
        The simulator's top module.
    name : str
        The stream port, e.g. ``"i_instr"``.
    clock : cocotb handle
        The clock of the port's domain.

    Members
    -------
    count : int
        Words taken so far.
    sent : int
        Words queued so far (:meth:`send`).
    """

    def __init__(self, dut, name, clock):
        super().__init__(dut, name, clock)
        self.queue = deque()
        self.count = 0
        self.sent = 0
        self._offered = None
        self.valid.value = 0
        self.payload.value = 0
        self._task = cocotb.start_soon(self._run())

    def send(self, words):
        """Queue ``words`` (ints, a payload each); they go out in order, one a transfer."""
        words = [int(w) for w in words]
        self.queue.extend(words)
        self.sent += len(words)

    def idle(self):
        """Whether every queued word has been taken."""
        return not self.queue and self._offered is None

    async def wait(self, limit=10_000):
        """Return once every queued word has been taken.

        Raises
        ------
        AssertionError
            If some are still waiting after ``limit`` cycles.
        """
        await self._cycles(limit, lambda: not self.idle(),
                           lambda: f"{self.count} of {self.sent} words taken")

    async def _run(self):
        while True:
            await FallingEdge(self.clock)
            pause = self._pause()
            if self._offered is None:
                if self.queue and not pause:
                    self._offered = self.queue.popleft()
                    self.payload.value = self._offered
                    self.valid.value = 1
                else:
                    self.valid.value = 0
                    self.payload.value = 0
            await ReadOnly()
            if self._offered is not None and self.ready.value:
                self.count += 1
                self._offered = None


class StreamMonitor(_Part):
    """Records the transfers of stream ``name`` of ``dut``, driving nothing.

    Parameters
    ----------
    dut, name, clock
        As for :class:`StreamSource`.
    extra : sequence of str
        Other signals of ``dut`` to sample with each transfer (``Transfer.extra``), e.g. the
        controller's ``o_load_head`` that comes with ``o_load``.
    check_rules : bool
        Fail on a producer that drops ``valid`` or changes the payload before its transfer.

    Members
    -------
    queue : deque of Transfer
        Transfers not yet taken by :meth:`get`.
    count : int
        Transfers recorded so far.
    """

    def __init__(self, dut, name, clock, extra=(), *, check_rules=True):
        super().__init__(dut, name, clock)
        self.extra = {sig: getattr(dut, sig) for sig in extra}
        self.check_rules = check_rules
        self.queue = deque()
        self.count = 0
        self._task = cocotb.start_soon(self._run())

    def empty(self):
        return not self.queue

    def get(self):
        """The oldest transfer not yet taken."""
        return self.queue.popleft()

    def get_all(self):
        """Every transfer not yet taken, oldest first."""
        got, self.queue = list(self.queue), deque()
        return got

    async def wait(self, count, limit=10_000):
        """Return once ``count`` transfers are waiting in :attr:`queue`.

        Raises
        ------
        AssertionError
            If fewer have come after ``limit`` cycles.
        """
        await self._cycles(limit, lambda: len(self.queue) < count,
                           lambda: f"{len(self.queue)} of {count} transfers received")

    def _drive(self):
        pass

    async def _run(self):
        pending = None          # the payload offered and not taken in the cycle before
        while True:
            await FallingEdge(self.clock)
            self._drive()
            await ReadOnly()
            valid = bool(self.valid.value)
            if pending is not None and self.check_rules:
                if not valid:
                    raise AssertionError(f"{self.name}: valid fell before its transfer "
                                         f"(payload {pending:#x})")
                if int(self.payload.value) != pending:
                    raise AssertionError(f"{self.name}: payload changed from {pending:#x} to "
                                         f"{int(self.payload.value):#x} before its transfer")
            pending = None
            if not valid:
                continue
            word = int(self.payload.value)
            if self.ready.value:
                self.queue.append(Transfer(
                    word, {sig: int(h.value) for sig, h in self.extra.items()},
                    get_sim_time("ns")))
                self.count += 1
            else:
                pending = word


class StreamSink(StreamMonitor):
    """Takes the output stream ``name`` of ``dut``: drives its ``ready`` high except in the
    cycles its pause generator pauses, and records each transfer as :class:`StreamMonitor`
    does (same parameters and members)."""

    def __init__(self, dut, name, clock, extra=(), *, check_rules=True):
        super().__init__(dut, name, clock, extra, check_rules=check_rules)
        self.ready.value = 0

    def _drive(self):
        self.ready.value = int(not self._pause())


async def drain(clock, *, sources=(), sinks=(), busy=None, quiet=8, limit=1000):
    """Wait until the DUT has drained, and check that nothing more comes out.

    First every source of ``sources`` is idle and ``busy`` (a signal, optional) is low, within
    ``limit`` cycles each; then for ``quiet`` cycles ``busy`` stays low and no stream of
    ``sinks`` (sinks or monitors) raises ``valid``, ready or not; and no sink holds a
    transfer the test has not taken with :meth:`StreamMonitor.get`. Returns after a falling
    edge of ``clock``, where a test may drive its inputs.

    Raises
    ------
    AssertionError
        Naming the source still sending, the busy signal, or the stream with more to give.
    """
    await FallingEdge(clock)
    for source in sources:
        await source.wait(limit)
    for _ in range(limit):
        await ReadOnly()
        if busy is None or not busy.value:
            break
        await FallingEdge(clock)
    else:
        raise AssertionError(f"{busy._name} still high after {limit} cycles")
    for _ in range(quiet):
        await FallingEdge(clock)
        await ReadOnly()
        if busy is not None and busy.value:
            raise AssertionError(f"{busy._name} rose again while drained")
        for sink in sinks:
            if sink.valid.value:
                raise AssertionError(f"{sink.name}: valid with payload "
                                     f"{int(sink.payload.value):#x} after the DUT drained")
    await FallingEdge(clock)
    for sink in sinks:
        if not sink.empty():
            raise AssertionError(f"{sink.name}: {len(sink.queue)} transfers more than the test "
                                 f"took, the first {sink.queue[0].payload:#x}")
