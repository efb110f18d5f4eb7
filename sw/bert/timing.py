"""Cycles of a compiled BERT model's stage programs, per batch shape, remembered.

The cycles a stage program takes depend only on its instructions, and those depend only on the
shapes: the batch size ``B`` and the padded sequence length ``L`` (the padding mask and the
weights change values that the programs carry, never their instructions). So
:class:`StageTimer` times the six stage programs of a layer once per ``(B, L)`` and remembers
them, in memory (by layer) and, given a :class:`~bertaccel.sw.bert.cache.CompileCache`, on
disk. The layers of a compiled model mostly share their stage shapes (the compiler pads each
weight stage to one depth), but not the columns the FFN's outlier GEMM takes, the SETs of the
epilogues, or a task's depths (:class:`~bertaccel.sw.multitask.ondevice.TaskProgram`: each
layer its own): the key holds every GEMM's timing key
(:meth:`bertaccel.sw.timing.GemmTimer.key`).

It times them with :class:`bertaccel.sw.timing.GemmTimer`: the cycles the cycle model
(:class:`bertaccel.sw.cycles.CycleModel`, equal to the RTL) counts on the stage programs that
:func:`~bertaccel.sw.bert.run.layer_programs` compiles, exactly, from the GEMMs the compiler
joins into each stage (:meth:`~bertaccel.sw.bert.compile.BertProgram.stage_gemms`), without
compiling them. What the timer learns on one shape carries over to the next.
"""

import hashlib
import threading

import torch

from ..timing import GemmTimer
from .compile import STAGES

__all__ = ["StageTimer"]


class StageTimer:
    """The cycles of ``bert``'s stage programs per batch shape.

    Parameters
    ----------
    bert : BertProgram
    store : dict-like, optional
        Where timings persist (``get`` and ``__setitem__`` with str keys and dict values), e.g.
        :meth:`CompileCache.timings`. In memory only by default.
    """

    def __init__(self, bert, store=None):
        self.bert = bert
        self.store = {} if store is None else store
        self._timer = GemmTimer(bert.cfg)
        self._lock = threading.Lock()
        self._layers = {}       # (layer, batch, seq) -> {stage: cycles}

    def layer(self, layer, batch, seq):
        """``{stage: cycles}`` of ``layer``'s six stage programs for ``batch`` sequences of
        ``seq`` tokens (padded), in :data:`~bertaccel.sw.bert.compile.STAGES` order."""
        with self._lock:
            known = self._layers.get((layer, batch, seq))
            if known is None:
                known = self._layers[(layer, batch, seq)] = self._time(layer, batch, seq)
        return dict(known)

    def _time(self, layer, batch, seq):
        """:meth:`layer`'s cycles, from :attr:`store` or timed (and stored)."""
        mask = torch.ones((batch, seq), dtype=torch.bool)
        parts = {stage: [gemm[1:] for gemm in self.bert.stage_gemms(layer, stage, mask)]
                 for stage in STAGES}
        # Layers whose GEMMs have equal timing keys share one entry.
        keys = repr([self._timer.key(parts[stage]) for stage in STAGES])
        key = f"b{batch}l{seq}-" + hashlib.sha256(keys.encode()).hexdigest()[:16]
        known = self.store.get(key)
        if known is None:
            known = {stage: self._timer.concat(parts[stage]) for stage in STAGES}
            self.store[key] = known
        return known

    def model(self, batch, seq):
        """Cycles of every layer for one batch: ``(total, {stage: cycles summed over the
        layers})``."""
        sums = dict.fromkeys(STAGES, 0)
        for layer in range(self.bert.spec.layers):
            for stage, cycles in self.layer(layer, batch, seq).items():
                sums[stage] += cycles
        return sum(sums.values()), sums
