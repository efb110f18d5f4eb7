"""The cycle model: how many clock cycles a program takes on the RTL, and where they go.

:class:`CycleModel` times a :class:`~bertaccel.sw.program.Program` the way the gateware runs it
in the simulation harness (:class:`bertaccel.hw.harness.SimHarness`) with free-running streams
(no idle cycles on the sources, no backpressure on the sink)::

    report = CycleModel(cfg).run(program)
    report.cycles                  # what SimHarness.cycles reads at ``done``
    report.breakdown               # {"compute": .., "preload": .., "load_wait": .., ...}
    report.start, report.end       # per instruction, in cycles after ``start``

It works instruction by instruction, not cycle by cycle: every unit is in-order and every
constraint between units is "not before cycle X", so each time is a ``max`` of earlier times (a
max-plus recurrence evaluated in program order; a legal program never pops a token that a later
instruction in program order pushes). Only the store unit's beats need a short loop, and only
where they do not flow one a cycle (see :meth:`CycleModel._beats`): about 150 000 instructions
a second.

The timing rules, with the gateware that makes them
----------------------------------------------------
Cycle 0 is the first cycle after the clock edge that samples ``start``.

* Harness (hw/harness.py): each source reads its memory in cycle 0, so instruction word 0 (and data
  beat 0) is on offer from cycle 1, and the next word one cycle after a word is taken. ``cycles``
  counts every edge while running, including the one that raises ``done``; ``done`` rises at the
  first cycle where every instruction was taken and ``o_busy`` is low. So a run takes
  ``last busy cycle + 2`` cycles (:data:`DONE_CYCLES`).
* Dispatch (hw/controller.py): one instruction a cycle, in program order, into one
  ``amaranth.lib.fifo.SyncFIFOBuffered`` of ``cfg.queue_depth`` per unit. That FIFO shows an
  entry written in cycle W at its output in cycle W + 2 (:data:`QUEUE_LATENCY`; one cycle later
  than the head after a pop, which is there the next cycle), and takes a write in cycle W only
  while its inner memory (``queue_depth - 1`` entries) is not full: the k-th entry of a queue
  waits until entry ``k - queue_depth + 1`` has reached the output register. A stalled
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
  the next cycle on; a read is at the ``StoreUnit.FIFO_DEPTH``-deep beat FIFO's output
  :data:`STORE_READ_TO_FIFO` cycles later and is only issued while the FIFO has room for it.
  The epilogue takes one beat a cycle from the FIFO, or one every ``cfg.ep_ratio`` cycles
  when it is narrower than a beat; a beat leaves on ``o_data`` ``Schedule.latency`` cycles
  after that. SOFTMAX and LAYERNORM read every row twice in the
  interleaved order, and the epilogue holds back a row's first second-pass beat until
  ``Schedule.gap[op]`` cycles after its last first-pass beat was taken. The store->execute
  push comes with the last read. A SET waits until the store unit and the epilogue are empty.

Latencies that the gateware defines are read from it: ``cfg.mesh_latency``,
``StoreUnit.FIFO_DEPTH``, ``Schedule.of(cfg)`` (``latency``, ``depth``, ``gap``),
``cfg.queue_depth``. The constants below are the register stages of the glue between them;
``verif/test_cycles.py`` checks the whole against the RTL.

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

import numpy as np

from ..hw import isa
from ..hw.config import AccelConfig
from ..hw.epilogue import Schedule
from ..hw.harness import SimHarness, harness_chunks
from ..hw.store import StoreUnit

__all__ = ["CycleModel", "CycleReport", "BREAKDOWN", "OP_CLASSES", "EPILOGUE_CLASS",
           "STAGE_CLASSES", "rtl_chunks", "model_cycles", "FIRST_INSTRUCTION", "QUEUE_LATENCY",
           "TOKEN_DELAY", "DONE_CYCLES", "STORE_READ_TO_FIFO", "PRELOAD_EXTRA", "ACC_WRITE_EXTRA"]

#: The classes of :attr:`CycleReport.breakdown`, in report order.
BREAKDOWN = ("compute", "zero_slots", "preload", "load_wait", "store_wait", "dispatch",
             "acc_hazard", "mesh_drain", "store_drain")

#: The op classes of :mod:`bertaccel.analysis.profile` (restated: that module pulls in the profiler).
OP_CLASSES = ("gemm", "attn_matmul", "softmax", "layernorm", "gelu", "dropout", "other")

#: The op class of a STORE's epilogue: the cycles a STORE of these ops exposes are charged to
#: the nonlinear op, whatever region it is in (REQUANT and RAW belong to their GEMM).
EPILOGUE_CLASS = {isa.EpOp.SOFTMAX: "softmax", isa.EpOp.LAYERNORM: "layernorm",
                  isa.EpOp.GELU: "gelu"}

#: The op class of each stage of a BERT encoder layer (:data:`bertaccel.sw.bert.STAGES`), for
#: ``run(program, default_class=STAGE_CLASSES[stage])``.
STAGE_CLASSES = {"qkv": "gemm", "qk": "attn_matmul", "pv": "attn_matmul", "wo": "gemm",
                 "w1": "gemm", "w2": "gemm"}

#: The cycle in which instruction word 0 is first on offer (the harness's source reads its
#: memory in cycle 0; the read port has one cycle of latency).
FIRST_INSTRUCTION = 1
#: SyncFIFOBuffered: an entry written in cycle W is at the output in cycle W + 2.
QUEUE_LATENCY = 2
#: A token pushed in cycle t is counted from cycle t + 1.
TOKEN_DELAY = 1
#: ``done`` rises the cycle after the last busy cycle, and ``cycles`` counts that edge too.
DONE_CYCLES = 2
#: A store-unit read issued in cycle t is at the beat FIFO's output from cycle t + 5 (memory
#: read, the register after the memories and its copy, then SyncFIFOBuffered's two cycles).
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
_L2E, _E2L, _E2S, _S2E = 0, 1, 2, 3
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
        (the store unit's beat FIFO), ``ep_latency``, ``ep_depth``, ``ep_ratio`` (cycles
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
            Run the instructions ``[first, end)`` of each entry as a separate harness run (as
            :class:`~bertaccel.sw.devices.rtl.RtlDevice` does with programs larger than its memories;
            :func:`rtl_chunks` gives its boundaries): each starts with empty pipelines and queues
            and keeps the token counts the earlier ones left. The entries must cover the program
            in order. One run by default.
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

    @classmethod
    def _room(cls, pop_at, channel, j, number, instr):
        """The first cycle push ``j`` of ``channel`` finds room: the cycle after pop
        ``j - TOKEN_MAX``."""
        k = j - isa.TOKEN_MAX
        if k >= len(pop_at[channel]):
            raise cls._illegal(number, instr, channel, "pushes past isa.TOKEN_MAX into")
        return pop_at[channel][k] + TOKEN_DELAY

    @staticmethod
    def _illegal(number, instr, channel, what):
        from .program import ProgramError
        return ProgramError(f"instruction {number} ({instr.opcode.name}) {what} channel "
                            f"{_CHANNEL_NAMES[channel]}, which no earlier instruction makes "
                            f"possible: the program is not legal (see Program.validate)")

    def cycles(self, program, **options):
        """``run(program, **options).cycles``."""
        return self.run(program, **options).cycles

    # -- the model ---------------------------------------------------------------------------------

    def _simulate(self, instrs, chunks, regions, default_class):
        cfg = self.cfg
        timing = self.timing
        rows = cfg.rows
        depth = cfg.queue_depth
        lat_acc = timing["mesh_latency"] + ACC_WRITE_EXTRA
        acc_mask = (1 << cfg.acc_addr_width) - 1
        preload = rows + PRELOAD_EXTRA
        ep_latency = timing["ep_latency"]
        gaps = timing["gap"]
        token_max = isa.TOKEN_MAX
        n = len(instrs)

        Load, Matmul, Store = isa.Load, isa.Matmul, isa.Store
        two_pass_ops = (isa.EpOp.SOFTMAX, isa.EpOp.LAYERNORM)

        dispatch = [0] * n
        start = [0] * n
        end = [0] * n
        stream = [-1] * n
        charged = [0] * n
        totals = dict.fromkeys(BREAKDOWN, 0)

        # Plain ``if a > b: b = a`` rather than max() in this loop: it is the model's hot path.
        # Token channels: visible cycle and producer of every push; cycle of every pop.
        push_vis = [[], [], [], []]
        push_by = [[], [], [], []]
        pop_at = [[], [], [], []]

        # Queues: the cycle each entry reached the output register (a ring of depth entries),
        # the entries so far, and the cycle the last one was popped.
        q_avail = [[_FAR_PAST] * depth for _ in range(3)]
        q_count = [0, 0, 0]

        fifo_depth = timing["fifo_depth"]
        load_lo, load_hi, mm_lo, mm_hi, st_lo, st_hi = [], [], [], [], [], []
        stalls = {"dispatch_blocked": 0, "load_on_e2l": 0, "store_on_e2s": 0,
                  "exec_on_l2e": 0, "exec_on_s2e": 0, "set_on_drain": 0}
        chunk_cycles = []
        counts = {"instructions": n, "matmul_rows": 0, "load_beats": 0, "store_reads": 0,
                  "epilogue_beats": 0}
        origin = 0
        for first, stop in chunks:
            g = origin
            present = g + FIRST_INSTRUCTION
            q_last_pop = [g - 1, g - 1, g - 1]
            load_free = g
            p_free = g                     # the preload stage may accept from here
            s_end = g - 1                  # last stream cycle so far
            s_last_row = -1                # the accumulator row it wrote (-1: none)
            st_free = g                    # a nonempty STORE may be accepted from here
            st_idle = g                    # an empty STORE from here
            st_quiet = g                   # a SET from here (unit and epilogue empty)
            # The store unit's reads (shared by every STORE): the last read issued, and the
            # cycles the epilogue took the last FIFO_DEPTH beats, oldest first.
            beat_state = [g - 1, [_FAR_PAST] * fifo_depth]
            ld_end = ex_end = st_end = g - 1
            ld_last = ex_last = st_last = -1
            e_last_mm = -1
            for i in range(first, stop):
                ins = instrs[i]
                kind = type(ins)
                if kind is Load:
                    q = _LOAD
                elif kind is Matmul:
                    q = _EXEC
                else:
                    q = _STORE
                # -- dispatch into the unit's queue --------------------------------------------
                k = q_count[q]
                ring = q_avail[q]
                w = present
                if k >= depth - 1:
                    older = ring[(k - depth + 1) % depth]
                    if older > w:
                        stalls["dispatch_blocked"] += older - w
                        w = older
                present = w + 1
                avail = w + QUEUE_LATENCY
                if q_last_pop[q] + 1 > avail:
                    avail = q_last_pop[q] + 1
                ring[k % depth] = avail
                q_count[q] = k + 1
                dispatch[i] = w

                if q == _EXEC:
                    t = avail
                    if p_free > t:
                        t = p_free
                    l2e_at = s2e_at = _FAR_PAST
                    l2e_by = s2e_by = -1
                    if ins.pop_prev:
                        j = len(pop_at[_L2E])
                        if j >= len(push_vis[_L2E]):
                            raise self._illegal(i, ins, _L2E, "pops")
                        l2e_at, l2e_by = push_vis[_L2E][j], push_by[_L2E][j]
                        if l2e_at > t:
                            t = l2e_at
                    if ins.pop_next:
                        j = len(pop_at[_S2E])
                        if j >= len(push_vis[_S2E]):
                            raise self._illegal(i, ins, _S2E, "pops")
                        s2e_at, s2e_by = push_vis[_S2E][j], push_by[_S2E][j]
                        if s2e_at > t:
                            t = s2e_at
                    if ins.pop_prev:
                        pop_at[_L2E].append(t)
                        if l2e_at >= t and l2e_at > s2e_at:
                            stalls["exec_on_l2e"] += l2e_at - max(avail, p_free, s2e_at)
                    if ins.pop_next:
                        pop_at[_S2E].append(t)
                        if s2e_at >= t and s2e_at > l2e_at:
                            stalls["exec_on_s2e"] += s2e_at - max(avail, p_free, l2e_at)
                    h = t + preload
                    if s_end > h:
                        h = s_end
                    room_at = _FAR_PAST
                    if ins.push_prev:
                        j = len(push_vis[_E2L])
                        if j >= token_max:
                            room = self._room(pop_at, _E2L, j, i, ins)
                            if room > room_at:
                                room_at = room
                    if ins.push_next:
                        j = len(push_vis[_E2S])
                        if j >= token_max:
                            room = self._room(pop_at, _E2S, j, i, ins)
                            if room > room_at:
                                room_at = room
                    if room_at > h:
                        h = room_at
                    m_len = ins.m_len
                    length = m_len if m_len > 0 else 1
                    # The hand-over waits a cycle rather than stream a row right behind the row
                    # it accumulates onto (hw/execute.py `clash`).
                    hazard = (h == s_end and m_len > 0 and ins.accumulate
                              and ins.acc_addr & acc_mask == s_last_row)
                    # -- where the gap before this stream went ---------------------------------
                    gap = h - s_end
                    if gap > 0:
                        cursor = s_end
                        base = p_free + preload
                        if base > cursor:
                            step = min(base, h) - cursor
                            totals["preload"] += step
                            charged[i] += step
                            cursor += step
                        layers = [(avail + preload, "dispatch", i),
                                  (l2e_at + preload, "load_wait", l2e_by),
                                  (s2e_at + preload, "store_wait", s2e_by),
                                  (room_at, "store_wait", i)]
                        layers.sort(key=lambda item: item[0])
                        for when, what, who in layers:
                            if when > cursor:
                                step = min(when, h) - cursor
                                totals[what] += step
                                charged[who if who >= 0 else i] += step
                                cursor += step
                        if cursor < h:         # not reached: cannot happen; keep the sum exact
                            totals["preload"] += h - cursor
                            charged[i] += h - cursor
                    if hazard:                 # (then there was no gap above)
                        totals["acc_hazard"] += 1
                        charged[i] += 1
                        h += 1
                    e = h + length
                    if m_len > 0:
                        totals["compute"] += length
                        counts["matmul_rows"] += length
                    else:
                        totals["zero_slots"] += 1
                    charged[i] += length
                    start[i] = t
                    stream[i] = h + 1
                    p_free = h
                    s_end = e
                    s_last_row = (ins.acc_addr + m_len - 1) & acc_mask if m_len > 0 else -1
                    if ins.push_prev:
                        push_vis[_E2L].append(e + TOKEN_DELAY)
                        push_by[_E2L].append(i)
                    if ins.push_next:
                        push_vis[_E2S].append(e + lat_acc + TOKEN_DELAY)
                        push_by[_E2S].append(i)
                    busy = e + lat_acc if (m_len > 0 or ins.push_next) else e
                    end[i] = busy
                    if busy > ex_end:
                        ex_end = busy
                    ex_last = i
                    e_last_mm = i
                    if m_len > 0:
                        mm_lo.append(h + 1)
                        mm_hi.append(e)
                    q_last_pop[q] = t

                elif q == _LOAD:
                    a = avail if avail > load_free else load_free
                    if ins.pop_next:
                        j = len(pop_at[_E2L])
                        if j >= len(push_vis[_E2L]):
                            raise self._illegal(i, ins, _E2L, "pops")
                        stalls["load_on_e2l"] += max(0, push_vis[_E2L][j] - a)
                        if push_vis[_E2L][j] > a:
                            a = push_vis[_E2L][j]
                    if ins.push_next:
                        j = len(push_vis[_L2E])
                        if j >= token_max:
                            room = self._room(pop_at, _L2E, j, i, ins)
                            if room > a:
                                a = room
                    if ins.pop_next:
                        pop_at[_E2L].append(a)
                    count = ins.count
                    last = a + count
                    if ins.push_next:
                        push_vis[_L2E].append(last + TOKEN_DELAY)
                        push_by[_L2E].append(i)
                    load_free = last + 1
                    start[i] = a
                    end[i] = last
                    if count:
                        load_lo.append(a + 1)
                        load_hi.append(last)
                        counts["load_beats"] += count
                    if last > ld_end:
                        ld_end = last
                    ld_last = i
                    q_last_pop[q] = a

                elif kind is Store:
                    n_rows, strips = ins.rows, ins.strips
                    nonempty = n_rows > 0 and strips > 0
                    t = avail
                    free = st_free if nonempty else st_idle
                    if free > t:
                        t = free
                    if ins.pop_prev:
                        j = len(pop_at[_E2S])
                        if j >= len(push_vis[_E2S]):
                            raise self._illegal(i, ins, _E2S, "pops")
                        stalls["store_on_e2s"] += max(0, push_vis[_E2S][j] - t)
                        if push_vis[_E2S][j] > t:
                            t = push_vis[_E2S][j]
                    if ins.push_prev:
                        j = len(push_vis[_S2E])
                        if j >= token_max:
                            room = self._room(pop_at, _S2E, j, i, ins)
                            if room > t:
                                t = room
                    if ins.pop_prev:
                        pop_at[_E2S].append(t)
                    start[i] = t
                    if nonempty:
                        two_pass = ins.op in two_pass_ops
                        first_issue, last_issue, last_accept = self._store_beats(
                            beat_state, t + 1, n_rows, strips, two_pass,
                            gaps.get(ins.op, 1))
                        beats = (2 if two_pass else 1) * n_rows * strips
                        counts["store_reads"] += beats
                        if ins.op in EPILOGUE_CLASS:
                            counts["epilogue_beats"] += beats
                        busy = last_accept + ep_latency
                        st_free = last_issue
                        st_idle = last_issue + 1
                        if busy + 1 > st_quiet:
                            st_quiet = busy + 1
                        push_at = last_issue
                        st_lo.append(first_issue)
                        st_hi.append(last_issue)
                    else:
                        busy = t
                        push_at = t
                    if ins.push_prev:
                        push_vis[_S2E].append(push_at + TOKEN_DELAY)
                        push_by[_S2E].append(i)
                    end[i] = busy
                    if busy > st_end:
                        st_end = busy
                        st_last = i
                    q_last_pop[q] = t

                elif kind is isa.Set:
                    t = avail
                    if st_quiet > t:
                        stalls["set_on_drain"] += st_quiet - t
                        t = st_quiet
                    if st_idle > t:
                        t = st_idle
                    start[i] = end[i] = t
                    if t > st_end:
                        st_end = t
                        st_last = i
                    q_last_pop[q] = t
                else:
                    raise TypeError(f"instruction {i} is not an ISA instruction: {ins!r}")

            # -- the end of this run: drain, done ------------------------------------------------
            last_busy = max(ld_end, ex_end, st_end, g - 1)
            if stop > first:
                last_busy = max(last_busy, present)   # every instruction was taken
            chunk = last_busy + DONE_CYCLES - g
            done_cycle = g + chunk - 1
            cursor = s_end
            segments = sorted([(ex_end, "mesh_drain", ex_last), (st_end, "store_drain", st_last),
                               (ld_end, "load_wait", ld_last)], key=lambda item: item[0])
            who_last, what_last = (e_last_mm if e_last_mm >= 0 else first), "store_drain"
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
            chunk_cycles.append(chunk)
            origin = g + chunk

        cycles = origin
        assert sum(totals.values()) == cycles, (totals, cycles)

        charged_arr = np.asarray(charged, dtype=np.int64)
        by_class = self._by_class(instrs, charged_arr, regions, default_class, cycles)
        load_busy = counts["load_beats"]
        store_busy = int(np.sum(np.asarray(st_hi, dtype=np.int64) + 1
                                - np.asarray(st_lo, dtype=np.int64))) if st_lo else 0
        load_hidden = _interval_overlap(load_lo, load_hi, mm_lo, mm_hi)
        store_hidden = _interval_overlap(st_lo, st_hi, mm_lo, mm_hi)
        nonlinear = [i for i, ins in enumerate(instrs)
                     if type(ins) is Store and ins.op in EPILOGUE_CLASS]
        overlap = {
            "load_busy": load_busy,
            "load_hidden": load_hidden,
            "load_hidden_share": load_hidden / load_busy if load_busy else 1.0,
            "store_busy": store_busy,
            "store_hidden": store_hidden,
            "store_hidden_share": store_hidden / store_busy if store_busy else 1.0,
            "epilogue_beats": counts["epilogue_beats"],
            "epilogue_exposed": int(charged_arr[nonlinear].sum()) if nonlinear else 0,
        }
        return CycleReport(
            cycles=cycles, chunk_cycles=chunk_cycles, breakdown=totals, by_class=by_class,
            overlap=overlap, dispatch=np.asarray(dispatch, dtype=np.int64),
            start=np.asarray(start, dtype=np.int64), end=np.asarray(end, dtype=np.int64),
            stream=np.asarray(stream, dtype=np.int64), charged=charged_arr, stalls=stalls,
            counts=counts)

    def _store_beats(self, state, issue_min, n_rows, strips, two_pass, gap):
        """Issue the reads of one STORE and let the epilogue take them.

        ``state`` is ``[last_issue, accepts]``: the cycle of the last read issued and the cycles
        the epilogue took the last ``FIFO_DEPTH`` beats, oldest first; it is updated. Returns
        ``(first_issue, last_issue, last_accept)``.
        """
        run = self._beats
        if not two_pass:
            return run(state, n_rows * strips, issue_min, _FAR_PAST)
        if n_rows >= 2 and (strips + 1) * self.timing["ep_ratio"] >= gap:
            # In the interleaved order a row's second pass starts at least strips + 1 beats
            # after its first pass ended, and beats are taken no faster than one every ep_ratio
            # cycles: the statistics are always ready, so the reads flow like a single-pass
            # STORE's.
            return run(state, 2 * n_rows * strips, issue_min, _FAR_PAST)
        # P1(0), [P1(r), P2(r-1)] for r in 1..R-1, P2(R-1): each row pass is a run of strips
        # beats; a second pass waits for its row's statistics.
        p1_end = [0] * n_rows
        first_issue, _, p1_end[0] = run(state, strips, issue_min, _FAR_PAST)
        for r in range(1, n_rows):
            _, _, p1_end[r] = run(state, strips, _FAR_PAST, _FAR_PAST)
            run(state, strips, _FAR_PAST, p1_end[r - 1] + gap)
        _, last_issue, last_accept = run(state, strips, _FAR_PAST, p1_end[n_rows - 1] + gap)
        return first_issue, last_issue, last_accept

    def _beats(self, state, count, issue_min, accept_min):
        """``count`` beats through the beat FIFO into the epilogue: the first read no earlier
        than ``issue_min``, the first accept no earlier than ``accept_min``.

        A read issues one cycle after the one before, and only while fewer than ``FIFO_DEPTH``
        beats are read but not yet taken; the epilogue takes a beat ``STORE_READ_TO_FIFO``
        cycles after its read at the earliest and ``ep_ratio`` cycles after the one before.
        Once the last ``FIFO_DEPTH`` accepts are that far apart and the reads wait for room
        (or, at one beat a cycle, keep pace), both advance ``ep_ratio`` a beat, so the rest is
        jumped over.
        """
        last_issue, acc = state
        depth = len(acc)
        ratio = self.timing["ep_ratio"]
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

    @staticmethod
    def _by_class(instrs, charged, regions, default_class, cycles):
        n = len(instrs)
        index = {name: number for number, name in enumerate(OP_CLASSES)}
        labels = np.full(n, index[default_class], dtype=np.int64)
        for first, stop, cls in regions or ():
            if cls not in index:
                raise ValueError(f"region op class must be one of {OP_CLASSES}, not {cls!r}")
            labels[int(first):int(stop)] = index[cls]
        for number, ins in enumerate(instrs):
            if type(ins) is isa.Store and ins.op in EPILOGUE_CLASS:
                labels[number] = index[EPILOGUE_CLASS[ins.op]]
        sums = np.bincount(labels, weights=charged, minlength=len(OP_CLASSES)) if n else \
            np.zeros(len(OP_CLASSES))
        out = {name: round(float(sums[number])) for name, number in index.items()}
        if not n:
            out[default_class] = cycles
        return out


def rtl_chunks(program, depths=None):
    """The ``(first, end)`` instruction ranges that :class:`~bertaccel.sw.devices.rtl.RtlDevice` runs
    separately, for harness memories of ``depths`` (``(instr, data, out)``; the defaults of
    ``program.cfg`` when ``None``)."""
    instrs = program.instrs if hasattr(program, "instrs") else list(program)
    if depths is None:
        depths = SimHarness.default_depths(program.cfg)
    return [(first, end) for first, end, _, _ in harness_chunks(instrs, tuple(depths))]


def model_cycles(program, *, depths=None, chunked=True):
    """Cycles of ``program`` on the RTL device: the model run in the device's chunks."""
    model = CycleModel(program.cfg)
    chunks = rtl_chunks(program, depths) if chunked else None
    return model.run(program, chunks=chunks).cycles
