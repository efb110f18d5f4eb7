"""The cycle model: how many clock cycles a program takes on the RTL, and where they go.

:class:`CycleModel` times a :class:`~bertaccel.sw.program.Program` the way the gateware runs it
in the simulation harness (:class:`bertaccel.hw.harness.SimHarness`) with free-running streams
(no idle cycles on the sources, no backpressure on the sink)::

    report = CycleModel(cfg).run(program)
    report.cycles                  # what SimHarness.cycles reads at ``done``
    report.breakdown               # {"compute": .., "preload": .., "load_wait": .., ...}
    report.start, report.end       # per instruction, in cycles after ``start``

:class:`CycleStepper` runs the same units on a program piece by piece and reads their state
between two pieces, normalised: what :mod:`bertaccel.sw.timing` builds its exact shortcuts on.

It works instruction by instruction, not cycle by cycle: every unit is in-order and every
constraint between units is "not before cycle X", so each time is a ``max`` of earlier times (a
max-plus recurrence evaluated in program order; a legal program never pops a token that a later
instruction in program order pushes). Each unit is a small class with a step per instruction
kind; the token channels between them are :class:`_Channel`. Only the store unit's beats need a
short loop, and only where they do not flow one a cycle (see :meth:`_StoreUnit._beats`): some
500 000 instructions a second.

The timing rules, with the gateware that makes them
----------------------------------------------------
Cycle 0 is the first cycle after the clock edge that samples ``start``.

* Harness (hw/harness.py): each source reads its file in cycle 0, so instruction word 0 (and data
  beat 0) is on offer from cycle 1, and the next word one cycle after a word is taken. ``cycles``
  counts every edge while running, including the one that raises ``done``; ``done`` rises at the
  first cycle where every instruction was taken and ``o_busy`` is low. So a run takes
  ``last busy cycle + 2`` cycles (:data:`DONE_CYCLES`).
* Dispatch (hw/controller.py): one instruction a cycle, in program order, into one queue of
  ``cfg.queue_depth`` per unit (``hw/queue.Queue``, which has the timing of
  ``amaranth.lib.fifo.SyncFIFOBuffered``). A queue shows an entry written in cycle W at its
  output in cycle W + 2 (:data:`QUEUE_LATENCY`; one cycle later than the head after a pop,
  which is there the next cycle), and takes a write in cycle W only while fewer than
  ``queue_depth - 1`` entries wait behind its head: the k-th entry of a queue waits until entry
  ``k - queue_depth + 1`` has reached the head. A stalled
  instruction stalls every instruction behind it.
* Tokens (TokenChannel): a counter, so the k-th pop of a channel waits until the cycle after the
  k-th push. A push that would take a channel past ``isa.TOKEN_MAX`` waits for a pop.
* LOAD (hw/load.py): accepted in cycle a, it takes beat j in cycle ``a + 1 + j`` (the source is
  always ready) and pushes with the last one; the next LOAD is accepted in
  ``a + count + 1``. A LOAD of count 0 pushes in cycle a.
* MATMUL (hw/execute.py): two stages. *Preload* accepts when it is empty (or hands over in
  that cycle) and the tokens are there. It reads ``rows`` weight rows in the ``rows`` cycles
  after the accept and may hand over to the *stream* stage in the cycle of the last read, when
  the stream stage is on its last row (or idle; the stage must be idle when the MATMUL's first
  row accumulates onto the row that last row writes). The stream stage reads one operand row a
  cycle (a MATMUL of m_len 0 takes one idle slot). Weight banks never wait to drain: the mesh
  writes each weight row right behind the last operand row that used the old one (the weight
  wave of hw/mesh.py), and a preload starts no earlier than the last operand row of the MATMUL
  two back, which used the same bank. So back-to-back MATMULs of ``m`` rows cost
  ``max(m, rows)`` cycles each in steady state. The execute->load push comes with the last row's
  issue, the execute->store push ``cfg.mesh_latency + ACC_WRITE_EXTRA`` cycles later and the
  last accumulator write a cycle after that (the operand's registered read address, the
  scratchpad read and its data registers, the mesh, then the sum's write-data registers).
* STORE and SET (hw/store.py, hw/epilogue/unit.py): a STORE is accepted when the unit is idle or on
  the last read of the STORE before it (an empty STORE: idle), and reads one beat a cycle from
  the next cycle on; a read is at the head of the epilogue's beat queue
  (``StoreUnit.FIFO_DEPTH`` deep) :data:`STORE_READ_TO_FIFO` cycles later and is only issued
  while the queue has room for it.
  The epilogue takes one beat a cycle from the queue, or one every ``cfg.ep_ratio`` cycles
  when it is narrower than a beat; a beat leaves on ``o_data`` ``Schedule.latency`` cycles
  after that. SOFTMAX and LAYERNORM read every row twice in the
  interleaved order, and the epilogue holds back a row's first second-pass beat until
  ``Schedule.gap[op]`` cycles after its last first-pass beat was taken. The store->execute
  push comes with the last read. A SET waits until the store unit and the epilogue are empty.

Latencies that the gateware defines are read from it: ``cfg.mesh_latency``,
``StoreUnit.FIFO_DEPTH``, ``Schedule.of(cfg)`` (``latency``, ``depth``, ``gap``),
``cfg.queue_depth``. The constants below are the register stages of the glue between them;
``verif/system/test_cycles.py`` checks the whole against the RTL.

Where the cycles go
-------------------
The execute unit's stream stage is the machine's critical resource, so the run is cut along its
timeline. Every cycle is in exactly one class of :attr:`CycleReport.breakdown`:

``compute``
    the stream stage feeds an operand row into the mesh (one cycle per row of every MATMUL);
``zero_slots``
    the one-cycle slot of a MATMUL with ``m_len == 0`` (program barriers);
``preload``
    the stream stage waits for the weight preload of the next MATMUL (``rows`` cycles a MATMUL
    in steady state, so only MATMULs of fewer than ``rows`` rows leave bubbles);
``load_wait``
    the next MATMUL waits for a load->execute token: loads not hidden behind compute (and, after
    the last MATMUL, a load unit that finishes last);
``store_wait``
    the next MATMUL waits for a store->execute token: the store unit (and its epilogue) has not
    yet drained the accumulator half it needs;
``dispatch``
    the next MATMUL has not reached the head of its queue: dispatch is in order and stalls
    behind a full queue (and the first instruction needs a few cycles to arrive);
``acc_hazard``
    the cycle a MATMUL waits when its first row accumulates onto the row the MATMUL before it
    streamed last, in the cycle before (back-to-back MATMULs of one row into one row: the
    execute unit does not forward a sum that close);
``mesh_drain``
    after the last operand row, until the execute unit's last accumulator write;
``store_drain``
    after that, until the store unit and the epilogue are empty, plus the cycle that raises
    ``done``: the drain of the last STOREs that compute does not hide.

A gap before a MATMUL is cut in layers: first the preload it cannot avoid, then each later
constraint (dispatch, load token, store token, token room) for the cycles by which it pushes the
hand-over further out. :attr:`CycleReport.overlap` adds how much of the load unit's and the store
unit's busy time overlapped operand streaming (hidden by double buffering), and
:attr:`CycleReport.by_class` gives the same cycles by :data:`bertaccel.analysis.profile.OP_CLASSES`
when the caller labels program regions.
"""

from dataclasses import dataclass, field
from functools import cache
from operator import itemgetter

import numpy as np

from ..hw import isa
from ..hw.config import AccelConfig
from ..hw.epilogue import Schedule
from ..hw.store import StoreUnit

__all__ = ["CycleModel", "CycleReport", "CycleStepper", "TIMED_FIELDS", "timing_view",
           "BREAKDOWN", "OP_CLASSES", "EPILOGUE_CLASS", "STAGE_CLASSES",
           "model_cycles", "FIRST_INSTRUCTION", "QUEUE_LATENCY", "TOKEN_DELAY", "DONE_CYCLES",
           "STORE_READ_TO_FIFO", "PRELOAD_EXTRA", "ACC_WRITE_EXTRA"]

#: The classes of :attr:`CycleReport.breakdown`, in report order.
BREAKDOWN = ("compute", "zero_slots", "preload", "load_wait", "store_wait", "dispatch",
             "acc_hazard", "mesh_drain", "store_drain")

#: The op classes of the cycle breakdown, which :mod:`bertaccel.analysis.profile` imports.
OP_CLASSES = ("gemm", "attn_matmul", "softmax", "layernorm", "gelu", "dropout", "other")

#: The op class of a STORE's epilogue: the cycles a STORE of these ops exposes are charged to
#: the nonlinear op, whatever region it is in (REQUANT and RAW belong to their GEMM).
EPILOGUE_CLASS = {isa.EpOp.SOFTMAX: "softmax", isa.EpOp.LAYERNORM: "layernorm",
                  isa.EpOp.GELU: "gelu"}

#: The op class of each stage of a BERT encoder layer (:data:`bertaccel.sw.bert.STAGES`), for
#: ``run(program, default_class=STAGE_CLASSES[stage])``.
STAGE_CLASSES = {"qkv": "gemm", "qk": "attn_matmul", "pv": "attn_matmul", "wo": "gemm",
                 "w1": "gemm", "w2": "gemm"}

#: The fields the model reads of each instruction kind, besides its kind and its four token
#: flags: every other field (the scratchpad, PMEM and host addresses, a STORE's stride and
#: accumulator base, a SET's index and value) leaves the whole report unchanged.
TIMED_FIELDS = {isa.Load: ("count",), isa.Matmul: ("m_len", "accumulate", "acc_addr"),
                isa.Store: ("rows", "strips", "op"), isa.Set: ()}

#: The cycle in which instruction word 0 is first on offer (the harness's source reads it
#: from its file in cycle 0, a clocked read with one cycle of latency).
FIRST_INSTRUCTION = 1
#: A queue (SyncFIFOBuffered's timing): an entry written in cycle W is at the output in W + 2.
QUEUE_LATENCY = 2
#: A token pushed in cycle t is counted from cycle t + 1.
TOKEN_DELAY = 1
#: ``done`` rises the cycle after the last busy cycle, and ``cycles`` counts that edge too.
DONE_CYCLES = 2
#: A store-unit read issued in cycle t is at the head of the epilogue's beat queue from cycle
#: t + 5 (memory read, the register after the memories and its copy, then the queue's two).
STORE_READ_TO_FIFO = 5
#: A MATMUL's weight preload: ``rows`` reads in the cycles after the accept, hand-over in the
#: cycle of the last (the first operand read comes after it), and the next accept in that cycle.
PRELOAD_EXTRA = 0
#: The operand row is issued five cycles before it enters the mesh (the execute unit's
#: ``OPERAND_DELAY``: a registered read address, the read, three registers of the data), and the
#: sums leave it into the adders' register and are written ``WRITE_DELAY`` (2) cycles later;
#: the unit is busy, and pushes its execute->store token, up to the cycle before the write:
#: last busy cycle = last row's issue + mesh_latency + 6.
ACC_WRITE_EXTRA = 6

_LOAD, _EXEC, _STORE = 0, 1, 2
_CHANNEL_NAMES = ("l2e", "e2l", "e2s", "s2e")
_FAR_PAST = -(1 << 40)


@dataclass
class CycleReport:
    """What :meth:`CycleModel.run` returns.

    Members
    -------
    cycles : int
        Cycles of the run (the sum over the chunks), as ``SimHarness.cycles`` counts them.
    chunk_cycles : list of int
        Cycles of each harness run (one entry unless the program ran in chunks).
    breakdown : dict of str to int
        Cycles by class (:data:`BREAKDOWN`); the values sum to :attr:`cycles`.
    by_class : dict of str to int
        The same cycles by op class (:data:`OP_CLASSES`); they sum to :attr:`cycles`.
    overlap : dict
        ``load_busy`` (cycles the load unit moves a beat), ``load_hidden`` (of those, cycles
        the execute unit streamed operands), ``load_hidden_share``; the same for the store
        unit (``store_busy``: its STOREs from first to last read, ``store_hidden``,
        ``store_hidden_share``); ``epilogue_beats`` (beats through a nonlinear epilogue) and
        ``epilogue_exposed`` (cycles charged to nonlinear STOREs).
    dispatch, start, end : numpy.ndarray
        Per instruction (int64, cycles from the start of the first run; a chunk starts where
        the one before ended): the cycle it was written into its queue, the cycle its unit
        took it (popped its tokens), and its last busy cycle (LOAD: last beat; MATMUL: last
        accumulator write, or its stream slot; STORE: the cycle its last beat leaves the
        epilogue; SET: ``start``).
    stream : numpy.ndarray
        Per instruction: the first stream cycle of a MATMUL, -1 for the others.
    charged : numpy.ndarray
        Per instruction: the cycles of :attr:`breakdown` charged to it (they sum to
        :attr:`cycles`).
    stalls : dict
        Cycles each unit waited, counted where it waited (they overlap one another and
        :attr:`breakdown`): ``dispatch_blocked`` (the instruction stream held by a full queue),
        ``load_on_e2l`` (LOADs waiting for a free operand buffer), ``exec_on_l2e`` and
        ``exec_on_s2e`` (MATMULs whose accept a load or store token decided), ``store_on_e2s``
        (STOREs waiting for their results), ``set_on_drain`` (SETs waiting for the epilogue to
        drain).
    counts : dict
        Instructions, MATMUL rows streamed, load beats, store reads, epilogue beats.
    """

    cycles: int
    chunk_cycles: list
    breakdown: dict
    by_class: dict
    overlap: dict
    dispatch: np.ndarray
    start: np.ndarray
    end: np.ndarray
    stream: np.ndarray
    charged: np.ndarray
    stalls: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)

    def summary(self):
        """A few lines: total, the breakdown and the overlap, for logs."""
        total = max(self.cycles, 1)
        parts = ", ".join(f"{name} {value} ({100 * value / total:.1f}%)"
                          for name, value in self.breakdown.items() if value)
        o = self.overlap
        return (f"{self.cycles} cycles in {len(self.chunk_cycles)} run(s): {parts}; loads "
                f"{o['load_hidden_share']:.0%} hidden, stores {o['store_hidden_share']:.0%} "
                f"hidden")


@cache
def _hardware_timing(cfg):
    """The latencies the gateware defines, read from its objects (cached per config)."""
    schedule = Schedule.of(cfg)
    gap = {op: max(1, int(schedule.gap[op])) for op in schedule.gap}
    return {
        "mesh_latency": cfg.mesh_latency,
        "fifo_depth": StoreUnit.FIFO_DEPTH,
        "ep_latency": schedule.latency,
        "ep_depth": schedule.depth,
        "ep_ratio": schedule.ratio,
        "gap": gap,
    }


def _interval_overlap(a_lo, a_hi, b_lo, b_hi):
    """Total length of the intersection of two unions of disjoint inclusive intervals, each
    sorted by start."""
    if not len(a_lo) or not len(b_lo):
        return 0
    # Cumulative covered length of b up to x, evaluated at every a bound.
    b_lo = np.asarray(b_lo, dtype=np.int64)
    b_hi = np.asarray(b_hi, dtype=np.int64) + 1          # half-open
    keep = b_hi > b_lo
    b_lo, b_hi = b_lo[keep], b_hi[keep]
    if not len(b_lo):
        return 0
    cum = np.concatenate([[0], np.cumsum(b_hi - b_lo)])

    def covered(x):                                        # |b ∩ (-inf, x)|
        i = np.searchsorted(b_lo, x, side="right")        # intervals starting before x
        full = cum[i]
        # The last of them may reach past x.
        last = np.maximum(i - 1, 0)
        excess = np.where(i > 0, np.maximum(b_hi[last] - x, 0), 0)
        return full - excess

    a_lo = np.asarray(a_lo, dtype=np.int64)
    a_hi = np.asarray(a_hi, dtype=np.int64) + 1
    keep = a_hi > a_lo
    return int(np.sum(covered(a_hi[keep]) - covered(a_lo[keep])))


class _Channel:
    """One token channel (hw/controller.py ``TokenChannel``) as the model sees it: the cycle
    from which each push is counted, the instruction that made it, and the cycle of each pop.
    The k-th pop takes the k-th push; the k-th push needs room, which pop ``k - TOKEN_MAX``
    makes."""

    __slots__ = ("name", "visible", "producer", "pops")

    def __init__(self, name):
        self.name = name
        self.visible = []
        self.producer = []
        self.pops = []

    def next_token(self, number, instr):
        """``(cycle, producer)`` of the push that the next pop takes: the pop waits until that
        cycle. :class:`~bertaccel.sw.program.ProgramError` if no earlier instruction pushed
        it."""
        j = len(self.pops)
        if j >= len(self.visible):
            raise _illegal(number, instr, self.name, "pops")
        return self.visible[j], self.producer[j]

    def room(self, number, instr):
        """The first cycle in which the next push finds room (``_FAR_PAST`` while the channel
        holds fewer than ``isa.TOKEN_MAX``): the cycle after pop ``j - TOKEN_MAX``."""
        k = len(self.visible) - isa.TOKEN_MAX
        if k < 0:
            return _FAR_PAST
        if k >= len(self.pops):
            raise _illegal(number, instr, self.name, "pushes past isa.TOKEN_MAX into")
        return self.pops[k] + TOKEN_DELAY

    def pop(self, cycle):
        self.pops.append(cycle)

    def push(self, cycle, number):
        """Instruction ``number`` pushes in ``cycle``."""
        self.visible.append(cycle + TOKEN_DELAY)
        self.producer.append(number)

    def snapshot(self, floor):
        """What later instructions can still see, in cycles after ``floor`` (see
        :meth:`CycleStepper.state`): the pending pushes, and the pops later than ``floor`` of
        those that the room of a later push reads (the last ``TOKEN_MAX`` but the pending)."""
        pops, visible = self.pops, self.visible
        j = len(pops)
        pending = tuple(t - floor if t > floor else 0 for t in visible[j:])
        lowest = max(len(visible) - isa.TOKEN_MAX, 0)
        while j > lowest and pops[j - 1] > floor:     # pops never go back in time
            j -= 1
        return pending, tuple(t - floor for t in pops[j:])

    def resume(self, state, floor):
        """Take the state :meth:`snapshot` gave, shifted to ``floor``: ``TOKEN_MAX`` pops
        ending with the recent ones (the others are no later than ``floor``), then the
        pending pushes, so that the next pop and the room of every later push read what they
        read before."""
        pending, recent = state
        keep = isa.TOKEN_MAX
        self.pops = [floor] * (keep - len(recent)) + [floor + t for t in recent]
        self.visible = [floor] * keep + [floor + t for t in pending]
        self.producer = [-1] * len(self.visible)


def _illegal(number, instr, channel, what):
    from .program import ProgramError
    return ProgramError(f"instruction {number} ({instr.opcode.name}) {what} channel {channel}, "
                        f"which no earlier instruction makes possible: the program is not legal "
                        f"(see Program.validate)")


class _Ledger:
    """What a run records: per instruction (lists indexed by instruction number), the cycles by
    class, the stalls, the counts and the nonlinear STOREs, in program order."""

    __slots__ = ("dispatch", "start", "end", "stream", "charged", "totals", "stalls", "counts",
                 "nonlinear")

    def __init__(self, n):
        self.dispatch = [0] * n
        self.start = [0] * n
        self.end = [0] * n
        self.stream = [-1] * n
        self.charged = [0] * n
        self.totals = dict.fromkeys(BREAKDOWN, 0)
        self.stalls = {"dispatch_blocked": 0, "load_on_e2l": 0, "store_on_e2s": 0,
                       "exec_on_l2e": 0, "exec_on_s2e": 0, "set_on_drain": 0}
        self.counts = {"instructions": n, "matmul_rows": 0, "load_beats": 0, "store_reads": 0,
                       "epilogue_beats": 0}
        self.nonlinear = []


#: The sort key of (cycle, ...) tuples.
_WHEN = itemgetter(0)


class _Unit:
    """What the three units share: the ledger's lists and dicts (held directly: the steps are
    the model's hot path, so they also write ``if a > b: b = a`` rather than max()), and, for
    the harness run in progress, ``end`` (the unit's last busy cycle) and ``last`` (the
    instruction that had it); for the whole program, the busy intervals ``busy_lo`` and
    ``busy_hi`` (inclusive)."""

    __slots__ = ("starts", "ends", "charged", "totals", "stalls", "counts", "end", "last",
                 "busy_lo", "busy_hi")

    def __init__(self, ledger):
        self.starts, self.ends, self.charged = ledger.start, ledger.end, ledger.charged
        self.totals, self.stalls, self.counts = ledger.totals, ledger.stalls, ledger.counts
        self.busy_lo, self.busy_hi = [], []

    def begin(self, origin):
        """Start a harness run in cycle ``origin``: the unit is empty."""
        self.end = origin - 1
        self.last = -1

    def snapshot(self, floor):
        """The cycles that decide later instructions' times, after ``floor``, clamped at 0
        (see :meth:`CycleStepper.state`)."""
        return tuple(t - floor if t > floor else 0 for t in self._cycles())

    def resume(self, state, floor):
        """Take the state :meth:`snapshot` gave, shifted to ``floor``."""
        self._set_cycles([floor + t for t in state])
        self.last = -1
        self.busy_lo.clear()
        self.busy_hi.clear()


class _LoadUnit(_Unit):
    """The load unit (hw/load.py): one beat a cycle after the accept, the push with the last."""

    __slots__ = ("e2l", "l2e", "free")

    def __init__(self, ledger, channels):
        super().__init__(ledger)
        self.e2l, self.l2e = channels["e2l"], channels["l2e"]

    def begin(self, origin):
        super().begin(origin)
        self.free = origin

    def _cycles(self):
        return self.free, self.end

    def _set_cycles(self, cycles):
        self.free, self.end = cycles

    def step(self, i, ins, avail):
        """Run LOAD ``i``, at the head of its queue from cycle ``avail``; return its accept."""
        a = avail if avail > self.free else self.free
        pop, push = ins.pop_next, ins.push_next
        if pop:
            at, _ = self.e2l.next_token(i, ins)
            if at > a:
                self.stalls["load_on_e2l"] += at - a
                a = at
        if push:
            room = self.l2e.room(i, ins)
            if room > a:
                a = room
        if pop:
            self.e2l.pop(a)
        count = ins.count
        last = a + count
        if push:
            self.l2e.push(last, i)
        self.free = last + 1
        self.starts[i] = a
        self.ends[i] = last
        if count:
            self.busy_lo.append(a + 1)
            self.busy_hi.append(last)
            self.counts["load_beats"] += count
        if last > self.end:
            self.end = last
        self.last = i
        return a


class _ExecuteUnit(_Unit):
    """The execute unit (hw/execute.py): the preload stage, then the stream stage, whose
    timeline :attr:`CycleReport.breakdown` cuts. ``last`` is also the last MATMUL."""

    __slots__ = ("streams", "l2e", "e2l", "e2s", "s2e", "preload", "lat_acc", "acc_mask",
                 "p_free", "s_end", "s_last_row", "rows", "slots")

    def __init__(self, ledger, channels, cfg, timing):
        super().__init__(ledger)
        self.streams = ledger.stream
        self.l2e, self.e2l = channels["l2e"], channels["e2l"]
        self.e2s, self.s2e = channels["e2s"], channels["s2e"]
        self.preload = cfg.rows + PRELOAD_EXTRA
        self.lat_acc = timing["mesh_latency"] + ACC_WRITE_EXTRA
        self.acc_mask = (1 << cfg.acc_addr_width) - 1
        # Operand rows streamed and zero-length slots, over the program: the ledger's
        # "compute", "matmul_rows" and "zero_slots" (see close()).
        self.rows = self.slots = 0

    def close(self):
        """Enter the rows and slots counted in the ledger, after the last run."""
        self.totals["compute"] += self.rows
        self.totals["zero_slots"] += self.slots
        self.counts["matmul_rows"] += self.rows

    def begin(self, origin):
        super().begin(origin)
        self.p_free = origin             # the preload stage may accept from here
        self.s_end = origin - 1          # last stream cycle so far
        self.s_last_row = -1             # the accumulator row it wrote (-1: none)

    def _cycles(self):
        return self.p_free, self.s_end, self.end

    def _set_cycles(self, cycles):
        self.p_free, self.s_end, self.end = cycles

    def snapshot(self, floor):
        # A later MATMUL hands over no earlier than floor + QUEUE_LATENCY + preload; only a
        # hand-over in cycle s_end reads the row that the last one wrote (acc_hazard).
        close = self.s_end >= floor + QUEUE_LATENCY + self.preload
        return super().snapshot(floor) + (self.s_last_row if close else -1,)

    def resume(self, state, floor):
        super().resume(state[:-1], floor)
        self.s_last_row = state[-1]

    def step(self, i, ins, avail):
        """Run MATMUL ``i``, at the head of its queue from cycle ``avail``; return its accept."""
        p_free = self.p_free
        t = avail if avail > p_free else p_free
        l2e_at = s2e_at = _FAR_PAST
        l2e_by = s2e_by = -1
        pop_prev, pop_next = ins.pop_prev, ins.pop_next
        if pop_prev:
            l2e_at, l2e_by = self.l2e.next_token(i, ins)
            if l2e_at > t:
                t = l2e_at
        if pop_next:
            s2e_at, s2e_by = self.s2e.next_token(i, ins)
            if s2e_at > t:
                t = s2e_at
        if pop_prev:
            self.l2e.pop(t)
            if l2e_at >= t and l2e_at > s2e_at:
                self.stalls["exec_on_l2e"] += l2e_at - max(avail, p_free, s2e_at)
        if pop_next:
            self.s2e.pop(t)
            if s2e_at >= t and s2e_at > l2e_at:
                self.stalls["exec_on_s2e"] += s2e_at - max(avail, p_free, l2e_at)
        # The hand-over to the stream stage: after the preload, after the last stream cycle,
        # and once the pushes find room.
        h = t + self.preload
        s_end = self.s_end
        if s_end > h:
            h = s_end
        push_prev, push_next = ins.push_prev, ins.push_next
        room_at = _FAR_PAST
        if push_prev:
            room_at = self.e2l.room(i, ins)
        if push_next:
            room = self.e2s.room(i, ins)
            if room > room_at:
                room_at = room
        if room_at > h:
            h = room_at
        if h > s_end:
            self._charge_gap(i, h, avail, l2e_at, l2e_by, s2e_at, s2e_by, room_at)
        m_len = ins.m_len
        acc_mask = self.acc_mask
        # The hand-over waits a cycle rather than stream a row right behind the row it
        # accumulates onto (hw/execute.py `clash`); then there was no gap.
        if (h == s_end and m_len > 0 and ins.accumulate
                and ins.acc_addr & acc_mask == self.s_last_row):
            self.totals["acc_hazard"] += 1
            self.charged[i] += 1
            h += 1
        if m_len > 0:
            length = m_len
            self.rows += length
        else:
            length = 1
            self.slots += 1
        e = h + length
        self.charged[i] += length
        self.starts[i] = t
        self.streams[i] = h + 1
        self.p_free = h
        self.s_end = e
        self.s_last_row = (ins.acc_addr + m_len - 1) & acc_mask if m_len > 0 else -1
        lat_acc = self.lat_acc
        if push_prev:
            self.e2l.push(e, i)
        if push_next:
            self.e2s.push(e + lat_acc, i)
        busy = e + lat_acc if (m_len > 0 or push_next) else e
        self.ends[i] = busy
        if busy > self.end:
            self.end = busy
        self.last = i
        if m_len > 0:
            self.busy_lo.append(h + 1)
            self.busy_hi.append(e)
        return t

    def _charge_gap(self, i, h, avail, l2e_at, l2e_by, s2e_at, s2e_by, room_at):
        """Cut the gap before MATMUL ``i``'s hand-over in cycle ``h`` into layers: first the
        preload it cannot avoid, then each later constraint for the cycles by which it pushes
        the hand-over further out."""
        totals, charged = self.totals, self.charged
        preload = self.preload
        cursor = self.s_end
        base = self.p_free + preload
        if base > cursor:
            step = min(base, h) - cursor
            totals["preload"] += step
            charged[i] += step
            cursor += step
        layers = [(avail + preload, "dispatch", i),
                  (l2e_at + preload, "load_wait", l2e_by),
                  (s2e_at + preload, "store_wait", s2e_by),
                  (room_at, "store_wait", i)]
        layers.sort(key=_WHEN)
        for when, what, who in layers:
            if when > cursor:
                step = min(when, h) - cursor
                totals[what] += step
                charged[who if who >= 0 else i] += step
                cursor += step
        if cursor < h:                   # not reached: cannot happen; keep the sum exact
            totals["preload"] += h - cursor
            charged[i] += h - cursor


class _StoreUnit(_Unit):
    """The store unit and the epilogue (hw/store.py, hw/epilogue/unit.py): STOREs and SETs."""

    __slots__ = ("nonlinear", "e2s", "s2e", "ratio", "fifo_depth", "ep_latency", "gaps",
                 "free", "idle", "quiet", "beats")

    def __init__(self, ledger, channels, timing):
        super().__init__(ledger)
        self.nonlinear = ledger.nonlinear
        self.e2s, self.s2e = channels["e2s"], channels["s2e"]
        self.ratio = timing["ep_ratio"]
        self.fifo_depth = timing["fifo_depth"]
        self.ep_latency = timing["ep_latency"]
        self.gaps = timing["gap"]

    def begin(self, origin):
        super().begin(origin)
        self.free = origin               # a nonempty STORE may be accepted from here
        self.idle = origin               # an empty STORE from here
        self.quiet = origin              # a SET from here (unit and epilogue empty)
        # The reads (shared by every STORE): the last read issued, and the cycles the
        # epilogue took the last FIFO_DEPTH beats, oldest first.
        self.beats = [origin - 1, [_FAR_PAST] * self.fifo_depth]

    def _cycles(self):
        return (self.free, self.idle, self.quiet, self.end, self.beats[0], *self.beats[1])

    def _set_cycles(self, cycles):
        self.free, self.idle, self.quiet, self.end, last_issue = cycles[:5]
        self.beats = [last_issue, list(cycles[5:])]

    def store(self, i, ins, avail):
        """Run STORE ``i``, at the head of its queue from cycle ``avail``; return its accept."""
        n_rows, strips = ins.rows, ins.strips
        nonempty = n_rows > 0 and strips > 0
        pop, push = ins.pop_prev, ins.push_prev
        t = avail
        free = self.free if nonempty else self.idle
        if free > t:
            t = free
        if pop:
            at, _ = self.e2s.next_token(i, ins)
            if at > t:
                self.stalls["store_on_e2s"] += at - t
                t = at
        if push:
            room = self.s2e.room(i, ins)
            if room > t:
                t = room
        if pop:
            self.e2s.pop(t)
        self.starts[i] = t
        op = ins.op
        nonlinear = op in EPILOGUE_CLASS
        if nonlinear:
            self.nonlinear.append(i)
        if nonempty:
            two_pass = isa.is_two_pass(op)
            first_issue, last_issue, last_accept = self._reads(
                t + 1, n_rows, strips, two_pass, self.gaps.get(op, 1))
            beats = (2 if two_pass else 1) * n_rows * strips
            self.counts["store_reads"] += beats
            if nonlinear:
                self.counts["epilogue_beats"] += beats
            busy = last_accept + self.ep_latency
            self.free = last_issue
            self.idle = last_issue + 1
            if busy + 1 > self.quiet:
                self.quiet = busy + 1
            push_at = last_issue
            self.busy_lo.append(first_issue)
            self.busy_hi.append(last_issue)
        else:
            busy = t
            push_at = t
        if push:
            self.s2e.push(push_at, i)
        self.ends[i] = busy
        if busy > self.end:
            self.end = busy
            self.last = i
        return t

    def set(self, i, ins, avail):
        """Run SET ``i``: once the unit and the epilogue are empty. Returns its accept."""
        t = avail
        if self.quiet > t:
            self.stalls["set_on_drain"] += self.quiet - t
            t = self.quiet
        if self.idle > t:
            t = self.idle
        self.starts[i] = self.ends[i] = t
        if t > self.end:
            self.end = t
            self.last = i
        return t

    def _reads(self, issue_min, n_rows, strips, two_pass, gap):
        """Issue the reads of one STORE and let the epilogue take them; returns
        ``(first_issue, last_issue, last_accept)``."""
        run = self._beats
        if not two_pass:
            return run(n_rows * strips, issue_min, _FAR_PAST)
        if n_rows >= 2 and (strips + 1) * self.ratio >= gap:
            # In the interleaved order a row's second pass starts at least strips + 1 beats
            # after its first pass ended, and beats are taken no faster than one every ep_ratio
            # cycles: the statistics are always ready, so the reads flow like a single-pass
            # STORE's.
            return run(2 * n_rows * strips, issue_min, _FAR_PAST)
        # P1(0), [P1(r), P2(r-1)] for r in 1..R-1, P2(R-1): each row pass is a run of strips
        # beats; a second pass waits for its row's statistics.
        p1_end = [0] * n_rows
        first_issue, _, p1_end[0] = run(strips, issue_min, _FAR_PAST)
        for r in range(1, n_rows):
            _, _, p1_end[r] = run(strips, _FAR_PAST, _FAR_PAST)
            run(strips, _FAR_PAST, p1_end[r - 1] + gap)
        _, last_issue, last_accept = run(strips, _FAR_PAST, p1_end[n_rows - 1] + gap)
        return first_issue, last_issue, last_accept

    def _beats(self, count, issue_min, accept_min):
        """``count`` beats through the beat queue into the epilogue: the first read no earlier
        than ``issue_min``, the first accept no earlier than ``accept_min``. Returns
        ``(first_issue, last_issue, last_accept)`` and advances :attr:`beats`.

        A read issues one cycle after the one before, and only while fewer than ``FIFO_DEPTH``
        beats are read but not yet taken; the epilogue takes a beat ``STORE_READ_TO_FIFO``
        cycles after its read at the earliest and ``ep_ratio`` cycles after the one before.
        Once the last ``FIFO_DEPTH`` accepts are that far apart and the reads wait for room
        (or, at one beat a cycle, keep pace), both advance ``ep_ratio`` a beat, so the rest is
        jumped over.
        """
        state = self.beats
        last_issue, acc = state
        depth = len(acc)
        ratio = self.ratio
        first_issue = None
        done = 0
        while done < count:
            issue = last_issue + 1
            if acc[0] + 1 > issue:
                issue = acc[0] + 1
            accept = issue + STORE_READ_TO_FIFO
            if acc[-1] + ratio > accept:
                accept = acc[-1] + ratio
            if done == 0:
                if issue < issue_min:
                    issue = issue_min
                    if issue + STORE_READ_TO_FIFO > accept:
                        accept = issue + STORE_READ_TO_FIFO
                if accept < accept_min:
                    accept = accept_min
                first_issue = issue
            acc = acc[1:] + [accept]
            last_issue = issue
            done += 1
            if ratio == 1:
                lag = accept - issue
                steady = acc[-1] - acc[0] == depth - 1 and STORE_READ_TO_FIFO <= lag <= depth - 1
            else:
                # The next read waits for room (acc[0] >= issue), the next accept for the one
                # before (not for its read): from here every beat is ratio cycles after the last.
                steady = (acc[-1] - acc[0] == (depth - 1) * ratio and acc[0] >= issue
                          and acc[-1] + ratio >= acc[0] + 1 + STORE_READ_TO_FIFO)
            if steady:
                left = count - done
                if left and ratio == 1:
                    last_issue += left
                elif left:
                    # beat t after this one is read a cycle after the accept depth beats
                    # before it
                    last_issue = acc[left - 1] + 1 if left <= depth else \
                        acc[-1] + (left - depth) * ratio + 1
                if left:
                    acc = [x + left * ratio for x in acc]
                break
        state[0], state[1] = last_issue, acc
        return first_issue, last_issue, acc[-1]


class CycleModel:
    """The cycle model of one build.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    cfg : AccelConfig
    timing : dict
        The latencies read from the gateware: ``mesh_latency``, ``fifo_depth``
        (the epilogue's beat queue), ``ep_latency``, ``ep_depth``, ``ep_ratio`` (cycles
        between the epilogue's accepts) and ``gap`` (the epilogue schedule).
    """

    def __init__(self, cfg):
        if not isinstance(cfg, AccelConfig):
            raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
        self.cfg = cfg
        self.timing = dict(_hardware_timing(cfg))

    # -- the public calls ------------------------------------------------------------------------

    def run(self, program, *, chunks=None, regions=None, default_class="gemm"):
        """Time ``program`` (a :class:`~bertaccel.sw.program.Program` or a list of
        instructions).

        Parameters
        ----------
        program : Program or sequence of instructions
        chunks : sequence of (first, end), optional
            Run the instructions ``[first, end)`` of each entry as a separate harness run (a
            program run piecewise, one ``start`` each): each starts with empty pipelines and
            queues and keeps the token counts the earlier ones left. The entries must cover
            the program in order. One run by default, as
            :class:`~bertaccel.sw.devices.rtl.RtlDevice` runs every program.
        regions : sequence of (first, end, op_class), optional
            Op class (:data:`OP_CLASSES`) of the instructions ``[first, end)``, for
            :attr:`CycleReport.by_class`; instructions in no region are ``default_class``.
            Cycles that a SOFTMAX, LAYERNORM or GELU STORE exposes go to that op's class.
        default_class : str

        Returns
        -------
        CycleReport
        """
        instrs = program.instrs if hasattr(program, "instrs") else list(program)
        n = len(instrs)
        if chunks is None:
            chunks = [(0, n)]
        chunks = [(int(first), int(end)) for first, end in chunks]
        expect = 0
        for first, end in chunks:
            if first != expect or end < first:
                raise ValueError(f"chunks must cover the program in order without gaps: "
                                 f"{chunks[:4]}...")
            expect = end
        if expect != n:
            raise ValueError(f"chunks end at instruction {expect}, but the program has {n}")
        if default_class not in OP_CLASSES:
            raise ValueError(f"default_class must be one of {OP_CLASSES}, not {default_class!r}")
        return self._simulate(instrs, chunks, regions, default_class)

    def cycles(self, program, **options):
        """``run(program, **options).cycles``."""
        return self.run(program, **options).cycles

    # -- the model -------------------------------------------------------------------------------

    def _simulate(self, instrs, chunks, regions, default_class):
        ledger = _Ledger(len(instrs))
        channels = {name: _Channel(name) for name in _CHANNEL_NAMES}
        units = (_LoadUnit(ledger, channels),
                 _ExecuteUnit(ledger, channels, self.cfg, self.timing),
                 _StoreUnit(ledger, channels, self.timing))
        load, execute, store = units
        steps = {isa.Load: (_LOAD, load.step), isa.Matmul: (_EXEC, execute.step),
                 isa.Store: (_STORE, store.store), isa.Set: (_STORE, store.set)}
        # The unit queues (kept from run to run, as their entries' cycles are in the past): the
        # cycle each entry reached the output register (a ring of queue_depth entries) and the
        # entries so far.
        depth = self.cfg.queue_depth
        queues = ([[_FAR_PAST] * depth for _ in range(3)], [0, 0, 0])
        chunk_cycles = []
        origin = 0
        for first, stop in chunks:
            for unit in units:
                unit.begin(origin)
            clock = _clock(origin)
            present = self._dispatch(instrs, first, stop, ledger, steps, queues, clock)
            chunk = self._drain(ledger, units, origin, present, first, stop)
            chunk_cycles.append(chunk)
            origin += chunk
        execute.close()
        assert sum(ledger.totals.values()) == origin, (ledger.totals, origin)
        return self._report(instrs, ledger, units, chunk_cycles, regions, default_class)

    def _dispatch(self, instrs, first, stop, ledger, steps, queues, clock):
        """Hand the instructions ``[first, stop)`` to their units, one a cycle in program
        order, from the cycle ``clock[0]`` (:func:`_clock`); return the cycle after the last
        was taken, which ``clock[0]`` then holds too."""
        depth = self.cfg.queue_depth
        rings, filled = queues
        dispatch = ledger.dispatch
        stalls = ledger.stalls
        present, last_pop = clock
        for i in range(first, stop):
            ins = instrs[i]
            unit = steps.get(type(ins))
            if unit is None:
                raise TypeError(f"instruction {i} is not an ISA instruction: {ins!r}")
            q, step = unit
            k = filled[q]
            ring = rings[q]
            w = present
            if k >= depth - 1:
                older = ring[(k - depth + 1) % depth]
                if older > w:
                    stalls["dispatch_blocked"] += older - w
                    w = older
            present = w + 1
            avail = w + QUEUE_LATENCY
            if last_pop[q] + 1 > avail:
                avail = last_pop[q] + 1
            ring[k % depth] = avail
            filled[q] = k + 1
            dispatch[i] = w
            last_pop[q] = step(i, ins, avail)
        clock[0] = present
        return present

    @staticmethod
    def _drain(ledger, units, origin, present, first, stop):
        """The end of the run of ``[first, stop)`` that started in cycle ``origin``: the
        cycles after the last stream cycle, to the unit that finished last, and ``done``.
        Returns the run's cycles."""
        load, execute, store = units
        totals, charged = ledger.totals, ledger.charged
        last_busy = max(load.end, execute.end, store.end, origin - 1)
        if stop > first:
            last_busy = max(last_busy, present)   # every instruction was taken
        chunk = last_busy + DONE_CYCLES - origin
        done_cycle = origin + chunk - 1
        cursor = execute.s_end
        segments = sorted([(execute.end, "mesh_drain", execute.last),
                           (store.end, "store_drain", store.last),
                           (load.end, "load_wait", load.last)], key=_WHEN)
        who_last, what_last = (execute.last if execute.last >= 0 else first), "store_drain"
        for until, what, who in segments:
            if until > cursor and who >= 0:
                step = until - cursor
                totals[what] += step
                charged[who] += step
                cursor = until
                who_last, what_last = who, what
        if stop == first:                  # an empty run: done in cycle 0
            totals["store_drain"] += chunk
        elif done_cycle > cursor:
            # The done cycle (and the start-up of a run with nothing to wait for) goes to
            # the unit that finished last.
            step = done_cycle - cursor
            totals[what_last] += step
            charged[who_last] += step
        return chunk

    @staticmethod
    def _report(instrs, ledger, units, chunk_cycles, regions, default_class):
        load, execute, store = units
        cycles = sum(chunk_cycles)
        counts = ledger.counts
        charged = np.asarray(ledger.charged, dtype=np.int64)
        by_class = _by_class(instrs, charged, ledger.nonlinear, regions, default_class, cycles)
        load_busy = counts["load_beats"]
        store_busy = int(np.sum(np.asarray(store.busy_hi, dtype=np.int64) + 1
                                - np.asarray(store.busy_lo, dtype=np.int64))) \
            if store.busy_lo else 0
        load_hidden = _interval_overlap(load.busy_lo, load.busy_hi,
                                        execute.busy_lo, execute.busy_hi)
        store_hidden = _interval_overlap(store.busy_lo, store.busy_hi,
                                         execute.busy_lo, execute.busy_hi)
        nonlinear = ledger.nonlinear
        overlap = {
            "load_busy": load_busy,
            "load_hidden": load_hidden,
            "load_hidden_share": load_hidden / load_busy if load_busy else 1.0,
            "store_busy": store_busy,
            "store_hidden": store_hidden,
            "store_hidden_share": store_hidden / store_busy if store_busy else 1.0,
            "epilogue_beats": counts["epilogue_beats"],
            "epilogue_exposed": int(charged[nonlinear].sum()) if nonlinear else 0,
        }
        return CycleReport(
            cycles=cycles, chunk_cycles=chunk_cycles, breakdown=ledger.totals, by_class=by_class,
            overlap=overlap, dispatch=np.asarray(ledger.dispatch, dtype=np.int64),
            start=np.asarray(ledger.start, dtype=np.int64),
            end=np.asarray(ledger.end, dtype=np.int64),
            stream=np.asarray(ledger.stream, dtype=np.int64), charged=charged,
            stalls=ledger.stalls, counts=counts)


class CycleStepper:
    """The cycle model run on a program piece by piece, whose state can be read and set.

    ``run(piece)`` for consecutive pieces of a program, then ``cycles()``, gives what
    ``CycleModel(cfg).run(program).cycles`` gives for the whole program (one harness run).
    :meth:`state` is the state between two pieces normalised to a reference cycle: in a
    state ``(key, ref)`` the same pieces take the same cycles, shifted by ``ref``, as the
    model is a max-plus recurrence in which every cycle is a ``max`` of earlier ones plus
    constants. The key holds only what a later instruction can still read: every cycle is
    counted from ``ref``, the dispatch cycle of the next instruction, and clamped at 0, since
    a later instruction is on offer at its unit no earlier than ``ref + QUEUE_LATENCY``, and
    each cycle in the state is a "not before" bound that a ``max`` with that cycle (or a later
    one) reads; the token channels keep the pending pushes and the pops the room of a later
    push reads; the execute unit's last accumulator row only while a later MATMUL can hand
    over right behind it. So a run that repeats its work in a steady rhythm reaches the same
    key again: :mod:`bertaccel.sw.timing` uses that to skip the repeats.

    Parameters
    ----------
    cfg : AccelConfig
    """

    def __init__(self, cfg):
        self._model = model = CycleModel(cfg)
        self._ledger = ledger = _Ledger(0)
        self._channels = channels = [_Channel(name) for name in _CHANNEL_NAMES]
        by_name = dict(zip(_CHANNEL_NAMES, channels))
        self._units = units = (_LoadUnit(ledger, by_name),
                               _ExecuteUnit(ledger, by_name, cfg, model.timing),
                               _StoreUnit(ledger, by_name, model.timing))
        load, execute, store = units
        self._steps = {isa.Load: (_LOAD, load.step), isa.Matmul: (_EXEC, execute.step),
                       isa.Store: (_STORE, store.store), isa.Set: (_STORE, store.set)}
        depth = cfg.queue_depth
        self._queues = ([[_FAR_PAST] * depth for _ in range(3)], [0, 0, 0])
        self._clock = _clock(0)
        for unit in units:
            unit.begin(0)
        self._ran = False                # any instruction yet (done waits for the last)

    def run(self, instrs):
        """Run the next piece of the program: a sequence of instructions."""
        instrs = instrs if isinstance(instrs, list) else list(instrs)
        n = len(instrs)
        ledger = self._ledger
        grow = n - len(ledger.start)
        if grow > 0:           # in place: the units hold these lists
            for name in ("dispatch", "start", "end", "charged"):
                getattr(ledger, name).extend([0] * grow)
            ledger.stream.extend([-1] * grow)
        self._model._dispatch(instrs, 0, n, ledger, self._steps, self._queues, self._clock)
        for unit in self._units:
            unit.busy_lo.clear()
            unit.busy_hi.clear()
        ledger.nonlinear.clear()
        self._ran = self._ran or n > 0

    def state(self):
        """``(key, ref)``: the normalised state (a hashable tuple) and its reference
        cycle."""
        floor, last_pop = self._clock
        rings, filled = self._queues
        depth = len(rings[0])
        waits = []
        for ring, k in zip(rings, filled):
            # the cycles the next depth - 1 entries of this queue wait for
            for j in range(k - depth + 1, k):
                t = ring[j % depth] if j >= 0 else floor
                waits.append(t - floor if t > floor else 0)
        waits.extend(t - floor if t > floor else 0 for t in last_pop)
        key = (tuple(waits), self._ran,
               *(unit.snapshot(floor) for unit in self._units),
               *(channel.snapshot(floor) for channel in self._channels))
        return key, floor

    def resume(self, key, ref):
        """Set the state to ``(key, ref)``, as :meth:`state` gave it (with ``ref`` shifted)."""
        waits, ran, *rest = key
        rings, filled = self._queues
        depth = len(rings[0])
        for q, ring in enumerate(rings):
            # The queue as if it held depth - 1 entries: the next one (entry depth - 1) and
            # those after it wait for entries 0, 1, ... to reach the output.
            part = waits[q * (depth - 1):(q + 1) * (depth - 1)]
            ring[:depth - 1] = [ref + t for t in part]
            filled[q] = depth - 1
        self._clock[0] = ref
        self._clock[1][:] = [ref + t for t in waits[3 * (depth - 1):]]
        for unit, state in zip(self._units, rest[:3]):
            unit.resume(state, ref)
        for channel, state in zip(self._channels, rest[3:]):
            channel.resume(state, ref)
        self._ran = ran

    def cycles(self):
        """Cycles of the program run so far, as :meth:`CycleModel.run` counts them (the
        harness is done after the last busy cycle and once every instruction was taken)."""
        last_busy = max(max(unit.end for unit in self._units), -1)
        if self._ran:
            last_busy = max(last_busy, self._clock[0])
        return last_busy + DONE_CYCLES


def timing_view(instr):
    """What the model reads of ``instr``: a tuple of its kind, its token flags and its
    :data:`TIMED_FIELDS`. Programs whose instructions have equal views take equal cycles."""
    kind = type(instr)
    return (kind, instr.pop_prev, instr.pop_next, instr.push_prev, instr.push_next,
            *(getattr(instr, name) for name in TIMED_FIELDS[kind]))


def _clock(origin):
    """The dispatcher's clock at the start of a harness run in cycle ``origin``: the cycle the
    next instruction is on offer, and when each unit's queue was last popped."""
    return [origin + FIRST_INSTRUCTION, [origin - 1, origin - 1, origin - 1]]


def _by_class(instrs, charged, nonlinear, regions, default_class, cycles):
    """Cycles by op class: ``charged`` summed by the class of each instruction (its region's,
    or the op's for the ``nonlinear`` STOREs)."""
    n = len(instrs)
    index = {name: number for number, name in enumerate(OP_CLASSES)}
    labels = np.full(n, index[default_class], dtype=np.int64)
    for first, stop, cls in regions or ():
        if cls not in index:
            raise ValueError(f"region op class must be one of {OP_CLASSES}, not {cls!r}")
        labels[int(first):int(stop)] = index[cls]
    for number in nonlinear:
        labels[number] = index[EPILOGUE_CLASS[instrs[number].op]]
    sums = np.bincount(labels, weights=charged, minlength=len(OP_CLASSES)) if n else \
        np.zeros(len(OP_CLASSES))
    out = {name: round(float(sums[number])) for name, number in index.items()}
    if not n:
        out[default_class] = cycles
    return out


def model_cycles(program):
    """Cycles of ``program`` on the RTL device (one free-running run)."""
    return CycleModel(program.cfg).run(program).cycles
