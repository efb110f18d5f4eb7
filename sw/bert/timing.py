"""Cycles of a compiled BERT model's stage programs, per batch shape, remembered.

The cycles a stage program takes depend only on its instructions, and those depend only on the
shapes: the batch size ``B`` and the padded sequence length ``L`` (the padding mask and the
weights change values that the programs carry, never their instructions). So
:class:`StageTimer` times the six stage programs of a layer once per ``(B, L)`` with the cycle
model (:class:`bertaccel.sw.cycles.CycleModel`, equal to the RTL) and remembers them, in memory
and, given a :class:`~bertaccel.sw.bert.cache.CompileCache`, on disk. Every layer of a compiled
model has the same stage shapes (the compiler pads each weight stage to one depth), except the
columns the FFN's outlier GEMM takes, which are part of the key.
"""

import threading

import torch

from ..cycles import CycleModel
from ..epilogue import lower
from .compile import STAGES
from .run import layer_programs

__all__ = ["StageTimer"]


def _layer_shape(bert, layer):
    """What distinguishes one layer's stage programs from another's: the FFN's outlier
    columns, and how many SETs each weight stage's epilogue lowers to."""
    q, spec, k = bert.layers[layer], bert.spec, bert.k
    n_out = q.h.outliers.numel()
    stages = [(q.qkv_ep, 3 * spec.hidden, k["qkv"]), (q.wo_ep, spec.hidden, k["wo"]),
              (q.w1_ep, spec.intermediate - n_out, k["w1"]), (q.w2_ep, spec.hidden, k["w2"])]
    if n_out:
        stages.append((q.w1_out_ep, n_out, k["w1"]))
    sets = "".join(f"s{len(lower(ep, bert.cfg, n=n, k=kk).sets)}" for ep, n, kk in stages)
    return f"o{n_out}{sets}"


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
        self._model = CycleModel(bert.cfg)
        self._lock = threading.Lock()
        self._shape = [_layer_shape(bert, layer) for layer in range(bert.spec.layers)]

    def _key(self, layer, batch, seq):
        return f"b{batch}l{seq}" + self._shape[layer]

    def layer(self, layer, batch, seq):
        """``{stage: cycles}`` of ``layer``'s six stage programs for ``batch`` sequences of
        ``seq`` tokens (padded), in :data:`~bertaccel.sw.bert.compile.STAGES` order."""
        key = self._key(layer, batch, seq)
        with self._lock:
            known = self.store.get(key)
            if known is None:
                mask = torch.ones((batch, seq), dtype=torch.bool)
                programs = layer_programs(self.bert, layer, mask)
                known = {stage: self._model.run(programs[stage]).cycles for stage in STAGES}
                self.store[key] = known
        return dict(known)

    def model(self, batch, seq):
        """Cycles of every layer for one batch: ``(total, {stage: cycles summed over the
        layers})``."""
        sums = dict.fromkeys(STAGES, 0)
        for layer in range(self.bert.spec.layers):
            for stage, cycles in self.layer(layer, batch, seq).items():
                sums[stage] += cycles
        return sum(sums.values()), sums
