"""A task's reference model, and random tasks to check the on-device path with.

:func:`merged_program` is what running a task from the base plus its row delta
(:func:`~bertaccel.sw.multitask.ondevice.apply_task`) must equal bit for bit: the base model
with the delta merged into its integer weights and the task's epilogue vectors in place, one
int8 model compiled the ordinary way. :func:`random_task_delta` makes a task of random rows and
vectors for a compiled base, so the tests and ``bench/multitask_accel.py`` measure the same
deltas.
"""

import dataclasses

import numpy as np
import torch

from ..bert.compile import BertProgram
from ..bert.quant import SplitB, split_rows
from .ondevice import base_ints, delta_columns, task_epilogues
from .rowdelta import WEIGHT_STAGES, RowDelta, TaskDelta, base_fingerprint, stage_shape

__all__ = ["random_task_delta", "merged_program"]


def _perturbed(gen, value, spread):
    value = np.asarray(value, dtype=np.float64)
    noise = torch.randn(value.shape, generator=gen, dtype=torch.float64).numpy()
    return value * (1 + spread * noise)


def _task_vectors(bert, gen, layer):
    """The base's epilogue vectors of ``layer``, each moved by a few per cent."""
    q = bert.layers[layer]
    w1_bias = np.zeros(bert.spec.intermediate)
    w1_bias[q.h_keep.numpy()] = q.w1_ep.bias
    if q.w1_out_ep is not None:
        w1_bias[q.h.outliers.numpy()] = q.w1_out_ep.bias
    return {
        (layer, "qkv"): {"bias": _perturbed(gen, q.qkv_ep.bias, 0.05)},
        (layer, "wo"): {name: _perturbed(gen, getattr(q.wo_ep, name), 0.05)
                        for name in ("bias", "gamma", "beta")},
        (layer, "w1"): {"bias": _perturbed(gen, w1_bias, 0.05)},
        (layer, "w2"): {name: _perturbed(gen, getattr(q.w2_ep, name), 0.05)
                        for name in ("bias", "gamma", "beta")},
    }


def random_task_delta(bert, gen, *, fraction=0.1, spread=20, fits=True, vectors=True,
                      uneven=False, name="random"):
    """A random task on the compiled ``bert``: ``fraction`` of the K-rows of every weight
    matrix (at least one) get int8 values of about ``spread``. With ``fits``, the values are
    cut so that every changed weight ``base_q + value`` stays in ``[-127, 127]`` where
    ``base_q`` does (the merged weight fits int8); without, some leave it. With ``uneven``,
    the layers' fractions rise from half of ``fraction`` in the first layer to one and a half
    times it in the last, so the layers' GEMM depths differ."""
    rows, vecs = {}, {}
    layers = bert.spec.layers
    for layer in range(layers):
        share = 0.5 + layer / max(1, layers - 1) if uneven else 1.0
        for stage in WEIGHT_STAGES:
            k, n = stage_shape(bert.spec, stage)
            r = max(1, round(fraction * share * k))
            picked = torch.randperm(k, generator=gen)[:r]
            values = torch.randint(-spread, spread + 1, (r, n), generator=gen)
            if fits:
                base = base_ints(bert, layer, stage)[picked]
                inside = base.abs() <= 127
                values = torch.where(inside, (base + values).clamp(-127, 127) - base, values)
            else:
                values[0, 0] = 127 if int(base_ints(bert, layer, stage)[picked[0], 0]) >= 0 \
                    else -127
            rows[(layer, stage)] = RowDelta(rows=picked.numpy().astype(np.int64),
                                            values=values.numpy().astype(np.int8))
        if vectors:
            vecs.update(_task_vectors(bert, gen, layer))
    return TaskDelta(base=base_fingerprint(bert), config=bert.cfg.tag, rows=rows, vectors=vecs,
                     name=name)


def _in_order(q, columns):
    """The rows of ``q`` (the float weight's order) in the order of the A columns."""
    out = torch.empty_like(q)
    out[columns] = q
    return out


def merged_program(bert, delta):
    """The reference for a task: the base with the delta added to its integer weights
    (``base_q + delta``, split into int8 rows as the compiler splits any weight) and the
    task's epilogue vectors. Returns ``(program, extra)``: ``extra`` counts the rows that
    splitting the merged weights added beyond the base's own split rows."""
    layers, extra = [], 0
    for layer in range(bert.spec.layers):
        quant = bert.layers[layer]
        changes = {}
        for stage in WEIGHT_STAGES:
            if delta.vectors.get((layer, stage)):
                changes.update(task_epilogues(quant, stage, delta.vectors[(layer, stage)]))
            part = delta.rows.get((layer, stage))
            if part is None:
                continue
            base = base_ints(bert, layer, stage)
            q = base.clone()
            q[torch.from_numpy(part.rows)] += torch.from_numpy(part.values).long()
            k = q.shape[0]
            columns = delta_columns(quant, stage, torch.arange(k))
            ours = split_rows(_in_order(q, columns), torch.arange(k))
            extra += ours.k - split_rows(_in_order(base, columns), torch.arange(k)).k
            split = getattr(quant, stage)
            high = torch.arange(split.k) < split.k_high
            other_high = (split.index >= k) & high          # rows of other A sources
            other_low = (split.index >= k) & ~high
            changes[stage] = SplitB(
                b=torch.cat([ours.b[:ours.k_high], split.b[other_high], ours.b[ours.k_high:],
                             split.b[other_low]]),
                index=torch.cat([ours.index[:ours.k_high], split.index[other_high],
                                 ours.index[ours.k_high:], split.index[other_low]]),
                k_high=ours.k_high + int(other_high.sum()))
        layers.append(dataclasses.replace(quant, **changes))
    program = BertProgram(bert.cfg, bert.spec, layers, x_embed=bert.x_embed,
                          calibration=bert.calibration, embeddings=bert.embeddings,
                          tokenizer=bert.tokenizer, name=f"{bert.name} merged {delta.name}")
    return program, extra
