"""Per-task deltas against the shared base model, their compression schemes, and their sizes.

A task model is the base model plus a delta. Its parameters fall into kinds
(:func:`param_kind`): the encoder's weight **matrices** (what the accelerator holds as GEMM B
operands), the embedding **tables** (looked up on the host), the **vectors** (biases and
LayerNorm scales and shifts), the task's **head**, and the **unused** pooler. A scheme
compresses the deltas of the matrices (and, when asked, the tables); the vectors and the head
are stored whole, in float32, with every task, and counted in its size.

Every scheme returns a :class:`Compressed`: the delta it reconstructs and the bits it stores,
per parameter. The schemes (``values`` is how each kept value is stored, :func:`quantize`):

* :func:`topk`: the ``k`` largest ``|delta|`` (over all compressed parameters, or per matrix),
  with their positions (a bitmap or explicit indices, whichever is smaller).
* :func:`rows`: whole K-rows of each B operand (``W[:, k]`` of a ``torch`` weight ``W``, one
  input channel; a table's row is one token), by score (energy per stored value, optionally
  weighted by the input channel's mean square activation). The accelerator runs a row-sparse
  delta as extra K-rows of the same GEMM, at a cost proportional to the rows kept.
* :func:`bitdelta`: the sign of every delta value and one scale per matrix (BitDelta).
* :func:`lowrank`: the rank-``r`` truncated SVD of each matrix's delta.
* :func:`rows_int8` quantises kept rows with the base weight's per-output-channel int8 scale
  (what the accelerator would hold); it works on the int8 model, not the float one.
"""

import math
from dataclasses import dataclass, field

import torch

__all__ = ["KINDS", "VALUE_BITS", "SCALE_BITS", "FLOAT_BITS", "param_kind", "deltas",
           "Compressed", "quantize", "index_bits", "topk", "pick_rows", "rows", "bitdelta",
           "lowrank", "as_rows", "row_mask", "int8_scale", "fake_int8", "rows_int8",
           "int8_model_bits", "task_bits", "storage_ratio", "changes", "apply"]

#: The kinds of parameter a task model has.
KINDS = ("matrix", "table", "vector", "head", "unused")
#: Bits per kept value of each value format (``sign`` stores one bit and a scale per matrix).
VALUE_BITS = {"fp32": 32, "fp16": 16, "int8": 8, "int4": 4, "sign": 1}
#: Bits of one scale (float32).
SCALE_BITS = 32
#: Bits of a parameter stored whole (vectors and head: float32).
FLOAT_BITS = 32


def param_kind(name, shape):
    """The kind (one of :data:`KINDS`) of the parameter ``name`` of a classifier's state dict
    (``bert.*`` and ``head.*``)."""
    if name.startswith("head."):
        return "head"
    if ".pooler." in name or name.startswith("bert.pooler"):
        return "unused"
    if len(shape) == 2:
        return "table" if ".embeddings." in name else "matrix"
    return "vector"


def deltas(finetuned, base, kinds=("matrix",)):
    """``{name: finetuned - base}`` (float32) of the ``bert.*`` parameters of the given
    ``kinds``; ``base`` holds the base model's keys with or without the ``bert.`` prefix."""
    out = {}
    for name, value in finetuned.items():
        if name.startswith("bert.") and param_kind(name, value.shape) in kinds:
            ref = base[name] if name in base else base[name[len("bert."):]]
            out[name] = value.float() - ref.float()
    return out


@dataclass
class Compressed:
    """What a scheme stores for one task.

    Members
    -------
    delta : dict
        ``{name: tensor}``, the delta each compressed parameter is reconstructed with.
    bits : dict
        ``{name: int}``, the bits stored for it (values, positions and scales).
    kept : dict
        ``{name: int}``, how many units it keeps (values, rows or rank, per the scheme).
    """

    delta: dict
    bits: dict
    kept: dict = field(default_factory=dict)

    @property
    def total_bits(self):
        """The bits of every compressed parameter together."""
        return sum(self.bits.values())


def quantize(values, fmt):
    """``(reconstructed, bits)`` of a 1-D or 2-D tensor of kept values stored as ``fmt`` (a
    key of :data:`VALUE_BITS`). ``int8``/``int4`` are symmetric with one scale (the largest
    ``|v|`` over 127 or 7); ``sign`` is ``mean |v|`` times the sign (BitDelta's scale, the one
    that minimises the squared error)."""
    n = values.numel()
    if fmt not in VALUE_BITS:
        raise ValueError(f"value format must be one of {', '.join(VALUE_BITS)}, not {fmt!r}")
    if n == 0:
        return values.clone(), 0
    if fmt in ("fp32", "fp16"):
        dtype = torch.float32 if fmt == "fp32" else torch.float16
        return values.to(dtype).float(), n * VALUE_BITS[fmt]
    if fmt == "sign":
        return torch.sign(values) * values.abs().mean(), n + SCALE_BITS
    top = 127 if fmt == "int8" else 7
    scale = float(values.abs().max()) / top
    if scale == 0:
        return torch.zeros_like(values), n * VALUE_BITS[fmt] + SCALE_BITS
    return torch.round(values / scale).clamp(-top, top) * scale, \
        n * VALUE_BITS[fmt] + SCALE_BITS


def index_bits(size, kept):
    """Bits that say which ``kept`` of ``size`` positions are kept: a bitmap or a list of
    ``ceil(log2(size))``-bit indices, whichever is smaller."""
    if kept == 0:
        return 0
    return min(size, kept * max(1, math.ceil(math.log2(size))))


def _sparse(delta, mask, fmt):
    """``(reconstructed, bits)`` of ``delta`` kept at ``mask``."""
    values, bits = quantize(delta[mask], fmt)
    out = torch.zeros_like(delta)
    out[mask] = values
    return out, bits + index_bits(delta.numel(), int(mask.sum()))


def topk(deltas, fraction, *, values="fp16", scope="global"):
    """Keep the ``round(fraction * n)`` largest ``|delta|`` of all ``n`` values (``scope``
    ``"global"``) or of each matrix (``"matrix"``)."""
    if scope not in ("global", "matrix"):
        raise ValueError(f"scope must be 'global' or 'matrix', not {scope!r}")
    masks = {}
    if scope == "global":
        flat = torch.cat([d.abs().reshape(-1) for d in deltas.values()])
        keep = torch.zeros(flat.numel(), dtype=torch.bool)
        keep[torch.topk(flat, round(fraction * flat.numel()), sorted=False).indices] = True
        for name, d in deltas.items():
            masks[name], keep = keep[:d.numel()].reshape(d.shape), keep[d.numel():]
    else:
        for name, d in deltas.items():
            keep = torch.zeros(d.numel(), dtype=torch.bool)
            keep[torch.topk(d.abs().reshape(-1), round(fraction * d.numel()),
                            sorted=False).indices] = True
            masks[name] = keep.reshape(d.shape)
    out = Compressed({}, {})
    for name, d in deltas.items():
        out.delta[name], out.bits[name] = _sparse(d, masks[name], values)
        out.kept[name] = int(masks[name].sum())
    return out


def row_mask(name, shape, keep):
    """A float mask of a parameter's ``shape`` that is 1 on the K-rows ``keep`` (bool) holds."""
    view = as_rows(name, torch.zeros(shape))
    view[keep] = 1.0
    return as_rows(name, view).contiguous()


def as_rows(name, tensor):
    """The K-rows of a parameter as the rows of a 2-D view: a ``torch`` Linear weight
    ``(out, in)`` is the B operand ``(in, out)`` transposed; a table's rows are its tokens."""
    return tensor if ".embeddings." in name else tensor.t()


def _row_scores(deltas, activations):
    """Per parameter, each K-row's squared delta per stored value, times the input channel's
    mean square activation when ``activations`` has it."""
    scores = {}
    for name, d in deltas.items():
        r = as_rows(name, d)
        score = r.double().square().sum(dim=1) / r.shape[1]
        if activations is not None and name in activations:
            score = score * activations[name].double()
        scores[name] = score
    return scores


def pick_rows(deltas, fraction, scope="global", activations=None):
    """``{name: bool mask of K-rows}`` (see :func:`as_rows`): the best-scoring rows (score: the
    row's squared delta per value, times its input energy when ``activations`` has it),
    ``fraction`` of each matrix's rows (``scope="matrix"``) or, globally, until ``fraction`` of
    all values are covered."""
    scores = _row_scores(deltas, activations)
    if scope == "matrix":
        out = {}
        for name, score in scores.items():
            keep = torch.zeros(score.numel(), dtype=torch.bool)
            keep[torch.topk(score, round(fraction * score.numel())).indices] = True
            out[name] = keep
        return out
    if scope != "global":
        raise ValueError(f"scope must be 'global' or 'matrix', not {scope!r}")
    names = list(deltas)
    owner = torch.cat([torch.full((scores[n].numel(),), i) for i, n in enumerate(names)])
    width = torch.tensor([as_rows(n, deltas[n]).shape[1] for n in names])[owner]
    order = torch.argsort(torch.cat([scores[n] for n in names]), descending=True, stable=True)
    budget = fraction * sum(d.numel() for d in deltas.values())
    taken = order[:int((torch.cumsum(width[order], 0) <= budget).sum())]
    flat = torch.zeros(owner.numel(), dtype=torch.bool)
    flat[taken] = True
    out = {}
    for name in names:
        out[name], flat = flat[:scores[name].numel()], flat[scores[name].numel():]
    return out


def rows(deltas, fraction, *, values="fp16", scope="global", activations=None, masks=None):
    """Keep whole K-rows (see :func:`as_rows`): ``fraction`` of the values, in rows.

    ``activations`` (``{name: (in,) mean square input}``, optional) weights each row's score
    by its input channel's energy, so rows that meet large activations are kept first;
    ``masks`` (``{name: bool (K,)}``) gives the rows instead. Stored per matrix: the kept rows'
    values (``values``; an integer format has one scale per matrix) and their row indices.
    """
    out = Compressed({}, {})
    picks = masks if masks is not None else pick_rows(deltas, fraction, scope, activations)
    for name, keep in picks.items():
        view = as_rows(name, deltas[name])
        values_, bits = quantize(view[keep], values)
        rebuilt = torch.zeros_like(view)
        rebuilt[keep] = values_
        out.delta[name] = as_rows(name, rebuilt).contiguous()
        out.bits[name] = bits + index_bits(view.shape[0], int(keep.sum()))
        out.kept[name] = int(keep.sum())
    return out


def bitdelta(deltas):
    """The sign of every delta value and one scale per matrix (``mean |delta|``)."""
    out = Compressed({}, {})
    for name, d in deltas.items():
        out.delta[name], out.bits[name] = quantize(d, "sign")
        out.kept[name] = d.numel()
    return out


def lowrank(deltas, rank, *, values="fp16"):
    """The rank-``rank`` truncated SVD of each delta, stored as ``U S`` ``(m, r)`` and ``V``
    ``(r, n)`` in ``values`` (an integer format has one scale per factor)."""
    out = Compressed({}, {})
    for name, d in deltas.items():
        r = min(rank, *d.shape)
        u, s, vh = torch.linalg.svd(d.double(), full_matrices=False)
        left, lbits = quantize((u[:, :r] * s[:r]).float(), values)
        right, rbits = quantize(vh[:r].float(), values)
        out.delta[name], out.bits[name], out.kept[name] = left @ right, lbits + rbits, r
    return out


def int8_scale(weight):
    """The per-output-channel int8 scale of a ``torch`` Linear weight ``(out, in)``: the
    largest ``|w|`` of each output channel over 127, ``(out, 1)``."""
    top = weight.double().abs().amax(dim=1, keepdim=True)
    return torch.where(top > 0, top / 127, torch.ones_like(top))


def fake_int8(weight, scale=None):
    """``weight`` rounded to the int8 grid of ``scale`` (its own :func:`int8_scale` by
    default) and back to float32."""
    scale = int8_scale(weight) if scale is None else scale
    return (torch.round(weight.double() / scale).clamp(-127, 127) * scale).float()


def rows_int8(finetuned, base, fraction, *, scope="global", activations=None, masks=None):
    """The int8 row-sparse delta the accelerator would hold, on the int8 base model.

    Each encoder matrix is the base's int8 integers ``q_b = round(W_b / s)`` at the base's
    per-output-channel scale ``s`` (:func:`int8_scale`); on the kept K-rows (chosen as in
    :func:`rows` from the float delta) the task adds ``dq = round(W_t / s) - q_b``, so those
    rows hold the task's own weight on the base's grid. ``dq`` is stored as int8 (int4 when
    every kept value fits; no scale: the base's is shared); ``masks`` gives the rows instead
    (matrices only). A ``q_b + dq`` beyond ``[-127,
    127]`` is split into extra K-rows on the accelerator (counted in ``kept["overflow"]``).

    Returns a :class:`Compressed` whose ``delta`` is the reconstructed int8-grid weight minus
    the *float* base weight, so :func:`apply` on the float base gives the int8 task model.
    """
    float_deltas = deltas(finetuned, base)
    picks = masks if masks is not None else pick_rows(float_deltas, fraction, scope,
                                                       activations)
    out, overflow = Compressed({}, {}), 0
    for name, keep in picks.items():
        w_base = finetuned[name] - float_deltas[name]
        s = int8_scale(w_base)
        q_b = torch.round(w_base.double() / s).clamp(-127, 127)
        dq = (torch.round(finetuned[name].double() / s) - q_b) * keep.double().unsqueeze(0)
        kept_values = dq[:, keep]
        fits4 = kept_values.numel() == 0 or float(kept_values.abs().max()) <= 7
        overflow += int(((q_b + dq).abs() > 127).any(dim=0).sum())
        out.delta[name] = ((q_b + dq) * s - w_base.double()).float()
        out.bits[name] = kept_values.numel() * (4 if fits4 else 8) \
            + index_bits(keep.numel(), int(keep.sum()))
        out.kept[name] = int(keep.sum())
    out.kept["overflow"] = overflow
    return out


def int8_model_bits(state):
    """Bits of one task model stored as the accelerator and host would hold it in int8: every
    matrix and table int8 with a float32 scale per output channel (per token for a table),
    the vectors and the head float32; the unused pooler not at all."""
    bits = 0
    for name, value in state.items():
        kind = param_kind(name, value.shape)
        if kind in ("matrix", "table"):
            bits += value.numel() * 8 + value.shape[0] * SCALE_BITS
        elif kind in ("vector", "head"):
            bits += value.numel() * FLOAT_BITS
    return bits


def task_bits(state, compressed):
    """Bits one task stores besides the shared base: its compressed deltas plus its vectors
    and head whole (float32)."""
    whole = sum(v.numel() for n, v in state.items()
                if param_kind(n, v.shape) in ("vector", "head"))
    return compressed.total_bits + whole * FLOAT_BITS


def storage_ratio(base_bits, task_bits, model_bits):
    """One shared base plus each task's own bits, over a separate model per task:
    ``(base_bits + sum(task_bits)) / sum(model_bits)`` (one entry per task in each list)."""
    if len(task_bits) != len(model_bits) or not task_bits:
        raise ValueError(f"need one task and one model size per task, not {len(task_bits)} "
                         f"and {len(model_bits)}")
    return (base_bits + sum(task_bits)) / sum(model_bits)


def changes(finetuned, base):
    """What fine-tuning changed, per kind of ``bert.*`` parameter: ``{kind: {"values",
    "changed", "relative_norm"}}`` (how many values, how many differ from the base, and
    ``|delta| / |base|``), and for the tables how many rows (tokens) changed."""
    out = {}
    for name, value in finetuned.items():
        if not name.startswith("bert."):
            continue
        kind = param_kind(name, value.shape)
        d = value.double() - base[name].double()
        entry = out.setdefault(kind, {"values": 0, "changed": 0, "delta_sq": 0.0, "base_sq": 0.0})
        entry["values"] += d.numel()
        entry["changed"] += int((d != 0).sum())
        entry["delta_sq"] += float(d.square().sum())
        entry["base_sq"] += float(base[name].double().square().sum())
        if kind == "table":
            entry.setdefault("rows", 0)
            entry.setdefault("rows_changed", 0)
            entry["rows"] += d.shape[0]
            entry["rows_changed"] += int((d != 0).any(dim=1).sum())
    for entry in out.values():
        entry["relative_norm"] = math.sqrt(entry.pop("delta_sq") / max(entry.pop("base_sq"),
                                                                        1e-300))
    return out


def apply(base, finetuned, compressed):
    """The state dict of a task model rebuilt from the shared base: ``base`` (``bert.*``
    keys) plus the compressed deltas, the task's own vectors and head from ``finetuned``;
    every other parameter is the base's."""
    out = {}
    for name, value in finetuned.items():
        kind = param_kind(name, value.shape)
        if kind in ("vector", "head"):
            out[name] = value
        elif name in compressed.delta:
            out[name] = base[name] + compressed.delta[name]
        else:
            out[name] = base[name]
    return out
