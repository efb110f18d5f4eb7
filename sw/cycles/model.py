"""The cycle model's two faces: :class:`CycleModel` times a whole program,
:class:`CycleStepper` runs one piece by piece and reads its state between pieces (see
:mod:`bertaccel.sw.cycles`)."""

import numpy as np

from ...hw import isa
from ...hw.config import AccelConfig
from ...hw.latencies import Latencies
from .report import OP_CLASSES, CycleReport, cycles_by_class, interval_overlap
from .units import FAR_PAST, WHEN, Channel, ExecuteUnit, Ledger, LoadUnit, StoreUnit

__all__ = ["CycleModel", "CycleStepper", "model_cycles"]

_LOAD, _EXEC, _STORE = 0, 1, 2
_CHANNEL_NAMES = ("l2e", "e2l", "e2s", "s2e")


class CycleModel:
    """The cycle model of one build.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    cfg : AccelConfig
    latencies : Latencies
        The build's latencies, read from the gateware
        (:class:`bertaccel.hw.latencies.Latencies`).
    """

    def __init__(self, cfg):
        if not isinstance(cfg, AccelConfig):
            raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
        self.cfg = cfg
        self.latencies = Latencies.of(cfg)

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
        ledger = Ledger(len(instrs))
        channels = {name: Channel(name, self.latencies.token) for name in _CHANNEL_NAMES}
        units = (LoadUnit(ledger, channels),
                 ExecuteUnit(ledger, channels, self.cfg, self.latencies),
                 StoreUnit(ledger, channels, self.latencies))
        load, execute, store = units
        steps = {isa.Load: (_LOAD, load.step), isa.Matmul: (_EXEC, execute.step),
                 isa.Store: (_STORE, store.store), isa.Set: (_STORE, store.set)}
        # The unit queues (kept from run to run, as their entries' cycles are in the past): the
        # cycle each entry reached the output register (a ring of queue_depth entries) and the
        # entries so far.
        depth = self.latencies.queue_depth
        queues = ([[FAR_PAST] * depth for _ in range(3)], [0, 0, 0])
        chunk_cycles = []
        origin = 0
        for first, stop in chunks:
            for unit in units:
                unit.begin(origin)
            clock = _clock(origin, self.latencies)
            present = self._dispatch(instrs, first, stop, ledger, steps, queues, clock)
            chunk = self._drain(ledger, units, origin, present, first, stop,
                                self.latencies.done)
            chunk_cycles.append(chunk)
            origin += chunk
        execute.close()
        assert sum(ledger.totals.values()) == origin, (ledger.totals, origin)
        return self._report(instrs, ledger, units, chunk_cycles, regions, default_class)

    def _dispatch(self, instrs, first, stop, ledger, steps, queues, clock):
        """Hand the instructions ``[first, stop)`` to their units, one a cycle in program
        order, from the cycle ``clock[0]`` (:func:`_clock`); return the cycle after the last
        was taken, which ``clock[0]`` then holds too."""
        depth, queue = self.latencies.queue_depth, self.latencies.queue
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
            avail = w + queue
            if last_pop[q] + 1 > avail:
                avail = last_pop[q] + 1
            ring[k % depth] = avail
            filled[q] = k + 1
            dispatch[i] = w
            last_pop[q] = step(i, ins, avail)
        clock[0] = present
        return present

    @staticmethod
    def _drain(ledger, units, origin, present, first, stop, done):
        """The end of the run of ``[first, stop)`` that started in cycle ``origin``: the
        cycles after the last stream cycle, to the unit that finished last, and the ``done``
        cycles of the harness. Returns the run's cycles."""
        load, execute, store = units
        totals, charged = ledger.totals, ledger.charged
        last_busy = max(load.end, execute.end, store.end, origin - 1)
        if stop > first:
            last_busy = max(last_busy, present)   # every instruction was taken
        chunk = last_busy + done - origin
        done_cycle = origin + chunk - 1
        cursor = execute.s_end
        segments = sorted([(execute.end, "mesh_drain", execute.last),
                           (store.end, "store_drain", store.last),
                           (load.end, "load_wait", load.last)], key=WHEN)
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
        by_class = cycles_by_class(instrs, charged, ledger.nonlinear, regions, default_class,
                                   cycles)
        load_busy = counts["load_beats"]
        store_busy = int(np.sum(np.asarray(store.busy_hi, dtype=np.int64) + 1
                                - np.asarray(store.busy_lo, dtype=np.int64))) \
            if store.busy_lo else 0
        load_hidden = interval_overlap(load.busy_lo, load.busy_hi,
                                        execute.busy_lo, execute.busy_hi)
        store_hidden = interval_overlap(store.busy_lo, store.busy_hi,
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
    a later instruction is on offer at its unit no earlier than ``ref + latencies.queue``, and
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
        self._ledger = ledger = Ledger(0)
        lat = model.latencies
        self._channels = channels = [Channel(name, lat.token) for name in _CHANNEL_NAMES]
        by_name = dict(zip(_CHANNEL_NAMES, channels))
        self._units = units = (LoadUnit(ledger, by_name), ExecuteUnit(ledger, by_name, cfg, lat),
                               StoreUnit(ledger, by_name, lat))
        load, execute, store = units
        self._steps = {isa.Load: (_LOAD, load.step), isa.Matmul: (_EXEC, execute.step),
                       isa.Store: (_STORE, store.store), isa.Set: (_STORE, store.set)}
        depth = lat.queue_depth
        self._queues = ([[FAR_PAST] * depth for _ in range(3)], [0, 0, 0])
        self._clock = _clock(0, lat)
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
        return last_busy + self._model.latencies.done


def _clock(origin, lat):
    """The dispatcher's clock at the start of a harness run in cycle ``origin``: the cycle the
    next instruction is on offer, and when each unit's queue was last popped."""
    return [origin + lat.first_word, [origin - 1, origin - 1, origin - 1]]


def model_cycles(program):
    """Cycles of ``program`` on the RTL device (one free-running run)."""
    return CycleModel(program.cfg).run(program).cycles
