"""A task's row delta from its fine-tuned float weights, against a compiled int8 base.

The task's weight on a kept K-row is quantised on the base's grid -- the base's weight scale
(per output channel for Q, K, V; per tensor for the others) and the input channel's factor --
and the delta is what it adds to the base's integer row::

    values = round(W_task[rows] * factor[rows] / s_w) - base_q[rows]

clipped to ``[-127, 127]`` (a clipped value is counted). The task's biases and LayerNorm
vectors become the base's epilogue fields with the task's numbers, at the base's scales, as
:func:`bertaccel.sw.bert.quant.quantize_layer` makes them. So base + delta on every row is the
task's own weights quantised at the base's scales, and on the rows left out, the base's.
"""

import numpy as np
import torch

from ..bert.load import BertError, BertSpec, bert_model
from .ondevice import base_ints
from .rowdelta import WEIGHT_STAGES, DeltaError, RowDelta, TaskDelta, base_fingerprint

__all__ = ["stage_weight", "weight_grid", "task_vectors", "delta_from_model"]


def stage_weight(layer, stage):
    """The real B operand ``(K, N)`` float64 of ``stage`` of a ``transformers`` BertLayer, and
    its bias ``(N,)``."""
    attn = layer.attention
    modules = {"qkv": (attn.self.query, attn.self.key, attn.self.value),
               "wo": (attn.output.dense,), "w1": (layer.intermediate.dense,),
               "w2": (layer.output.dense,)}[stage]
    weight = torch.cat([m.weight.detach().double().t() for m in modules], dim=1)
    bias = torch.cat([m.bias.detach().double() for m in modules])
    return weight, bias


def weight_grid(quant, stage):
    """``(factors (K,), s_w)`` of the base's integer weight of ``stage``: ``w * factor =
    base_q * s_w``; ``s_w`` is ``(N,)`` for ``qkv``, a float for the others."""
    if stage == "qkv":
        hidden = quant.x.scale.numel()
        s_out = torch.cat([torch.full((hidden,), s) for s in (quant.s_q, quant.s_k, quant.s_v)])
        scale = torch.as_tensor(np.asarray(quant.qkv_ep.per_channel_scale)) * s_out
        return quant.x.factors, scale
    factors = {"wo": torch.ones(quant.x.scale.numel(), dtype=torch.float64),
               "w1": quant.x1.factors, "w2": quant.h.factors}[stage]
    return factors, float(quant.info[stage]["w_scale"])


def task_vectors(quant, layer):
    """The epilogue fields of a ``transformers`` BertLayer ``layer`` at the scales of the
    base's quantised layer ``quant``: ``{stage: {field: (N,) float64}}``."""
    _, scale = weight_grid(quant, "qkv")
    _, b_qkv = stage_weight(layer, "qkv")
    out = {"qkv": {"bias": (b_qkv / (quant.x.base * scale)).numpy()},
           "w1": {"bias": stage_weight(layer, "w1")[1].numpy()}}
    for stage, ln, act in (("wo", layer.attention.output.LayerNorm, quant.x1),
                           ("w2", layer.output.LayerNorm, quant.x2)):
        unit = act.base / act.scale
        out[stage] = {"bias": stage_weight(layer, stage)[1].numpy(),
                      "gamma": (ln.weight.detach().double() * unit).numpy(),
                      "beta": (ln.bias.detach().double() * unit).numpy()}
    return out


def delta_from_model(bert, model, rows, *, name="task", vectors=True):
    """The :class:`~.rowdelta.TaskDelta` of a fine-tuned model against the compiled base.

    Parameters
    ----------
    bert : BertProgram
        The compiled base.
    model : transformers.BertModel
        The task's fine-tuned encoder (or a model whose ``.bert`` is one), of the base's shape.
    rows : dict
        ``{(layer, stage): (r,) int64}``: the K-rows (input features) to keep per weight
        matrix; one row of ``qkv`` covers Q, K and V (their union).
    name : str
    vectors : bool
        Take the task's biases and LayerNorm vectors too.

    Returns
    -------
    (TaskDelta, dict)
        The delta, and ``{"clipped": values beyond [-127, 127], cut}``.

    Raises
    ------
    BertError
        The model is not BERT, or not of the base's shape.
    DeltaError
        A layer or stage the model does not have, or rows beyond a matrix.
    """
    encoder = bert_model(model)
    if BertSpec.from_config(encoder.config) != bert.spec:
        raise BertError(f"the task model's shape {BertSpec.from_config(encoder.config)} is not "
                        f"the base's {bert.spec}")
    for layer, stage in rows:
        if stage not in WEIGHT_STAGES or not isinstance(layer, int) \
                or not 0 <= layer < bert.spec.layers:
            raise DeltaError(f"task {name!r}: no weight matrix {stage!r} in layer {layer!r} "
                             f"(layers 0 to {bert.spec.layers - 1}, stages "
                             f"{', '.join(WEIGHT_STAGES)})")
    parts, clipped = {}, 0
    for (layer, stage), picked in rows.items():
        picked = torch.as_tensor(picked, dtype=torch.int64)
        weight, _ = stage_weight(encoder.encoder.layer[layer], stage)
        if picked.dim() != 1 or (picked.numel() and not 0 <= int(picked.min())
                                 <= int(picked.max()) < weight.shape[0]):
            raise DeltaError(f"task {name!r} layer {layer} stage {stage}: rows must be "
                             f"indices from 0 to {weight.shape[0] - 1}")
        factors, scale = weight_grid(bert.layers[layer], stage)
        q = torch.round(weight[picked] * factors[picked].unsqueeze(1) / scale)
        values = q.long() - base_ints(bert, layer, stage)[picked]
        clipped += int((values.abs() > 127).sum())
        parts[(layer, stage)] = RowDelta(rows=picked.numpy().astype(np.int64),
                                         values=values.clamp(-127, 127).numpy().astype(np.int8))
    fields = {}
    if vectors:
        for number, quant in enumerate(bert.layers):
            for stage, value in task_vectors(quant, encoder.encoder.layer[number]).items():
                fields[(number, stage)] = value
    delta = TaskDelta(base=base_fingerprint(bert), config=bert.cfg.tag, rows=parts,
                      vectors=fields, name=name)
    return delta.check(bert), {"clipped": clipped}
