"""The latencies of a build, gathered from the units that make them.

Each unit says its own timing as named class attributes beside the gateware that has it
(``Queue.LATENCY``, ``TokenChannel.DELAY``, ``ExecuteUnit.DRAIN``, ``StoreUnit.READ_TO_FIFO``,
...), and the epilogue's schedule is :class:`~bertaccel.hw.epilogue.Schedule`. A frozen
:class:`Latencies` holds them for one config, the way Gemmini's config carries
``spad_read_delay``: the cycle model (:mod:`bertaccel.sw.cycles`) and the tiler's cost model
(:mod:`bertaccel.sw.tiler`) read it and restate none of them::

    lat = Latencies.of(cfg)
    lat.queue                  # 2: an entry written in cycle W is at a queue's head in W + 2
    lat.acc_drain              # cycles from a MATMUL's last row issue to its last busy cycle

``verif/block/test_core_cycles.py`` runs short programs on the core in the Amaranth simulator
and checks the cycle model's count against the RTL's, so a change to any of them that the
gateware does not make (or the other way round) fails in the quick tier.
"""

from dataclasses import dataclass
from functools import cache

from .controller import TokenChannel
from .epilogue import Schedule
from .execute import ExecuteUnit, PreloadStage
from .harness import SimHarness
from .queue import Queue
from .store import StoreUnit

__all__ = ["Latencies"]


@dataclass(frozen=True)
class Latencies:
    """The cycles one build's units take, each from the gateware that takes them.

    Members
    -------
    first_word : int
        The cycle in which instruction word 0 is first on offer (``SimHarness.FIRST_WORD``).
    done : int
        A run takes its last busy cycle + ``done`` cycles (``SimHarness.DONE_CYCLES``).
    queue : int
        An entry written into a queue in cycle W is at its head in W + ``queue``
        (``Queue.LATENCY``): the instruction queues and the epilogue's beat queue alike.
    queue_depth : int
        Entries of each unit's instruction queue (``cfg.queue_depth``).
    token : int
        A token pushed in cycle t is counted from t + ``token`` (``TokenChannel.DELAY``).
    preload : int
        Cycles a MATMUL holds the preload stage: ``cfg.rows`` weight reads and
        ``PreloadStage.HANDOVER_DELAY``.
    mesh : int
        ``cfg.mesh_latency``.
    acc_drain : int
        Cycles from a MATMUL's last operand row issue to the execute unit's last busy cycle,
        which pushes its execute->store token: ``mesh + ExecuteUnit.DRAIN``.
    store_read : int
        Cycles from a store-unit read's issue to its beat at the head of the epilogue's queue
        (``StoreUnit.READ_TO_FIFO``).
    fifo_depth : int
        Beats read and not yet taken by the epilogue, at most (``StoreUnit.FIFO_DEPTH``).
    epilogue : Schedule
        The epilogue's schedule: ``latency`` (a beat's cycles from take to ``o_data``),
        ``ratio`` (cycles between takes), ``gap`` (a two-pass op's hold between passes).
    """

    first_word: int
    done: int
    queue: int
    queue_depth: int
    token: int
    preload: int
    mesh: int
    acc_drain: int
    store_read: int
    fifo_depth: int
    epilogue: Schedule

    @classmethod
    @cache
    def of(cls, cfg):
        """The latencies of ``cfg``'s build (one object a config)."""
        return cls(first_word=SimHarness.FIRST_WORD, done=SimHarness.DONE_CYCLES,
                   queue=Queue.LATENCY, queue_depth=cfg.queue_depth, token=TokenChannel.DELAY,
                   preload=cfg.rows + PreloadStage.HANDOVER_DELAY, mesh=cfg.mesh_latency,
                   acc_drain=cfg.mesh_latency + ExecuteUnit.DRAIN,
                   store_read=StoreUnit.READ_TO_FIFO, fifo_depth=StoreUnit.FIFO_DEPTH,
                   epilogue=Schedule.of(cfg))

    @property
    def gaps(self):
        """``{op: cycles}``: each two-pass op's hold between a row's passes, at least 1."""
        return {op: max(1, int(gap)) for op, gap in self.epilogue.gap.items()}
