"""A task's delta file: row-sparse int8 K-rows against the shared int8 base, and its own params.

The form is the one the accelerator runs as extra K-rows of the base's GEMMs. For every encoder
weight matrix (a ``torch`` Linear weight ``W`` of shape ``(N, K)``, the GEMM's B operand
``W^T`` of shape ``(K, N)``) the base holds ``q_b = round(W_b / s)`` in ``[-127, 127]`` at the
base's per-output-channel scale ``s`` (:func:`~.deltas.int8_scale`, one per column ``n`` of B).
A task stores

* ``rows[name]``: the K-row indices it changes (sorted, int64 ``(r,)``), and
* ``values[name]``: an int8 ``(r, N)`` delta in units of that same ``s``,

so the task's B operand is ``q_b`` plus ``values`` on those rows. On the accelerator this is
``A' = [A | A[:, rows]]`` times ``B' = [q_b ; values]`` (the compiler's channel-split gather),
accumulating into the same int32 accumulator at the same scale: the host never builds a merged
copy, and ``q_b + values`` may leave the int8 range without harm. The embedding tables stay the
base's. The task's vectors (biases, LayerNorm) and head are stored whole, float32, in
``params``.

A file records the format, the task and its labels, the base model's architecture and a digest
of its weights, and a digest of its own content, so a file for another base model, another
architecture or a damaged file is refused with :class:`DeltaError` (one line). Files are
written atomically (a temporary file renamed into place)::

    delta = make_delta("stdlib-topic", labels, finetuned, base, config=model.config)
    save_delta(delta, path)
    delta = load_delta(path, base_digest=state_digest(base), config=model.config)
"""

import dataclasses
import hashlib
import json
import os
import pathlib
import tempfile

import torch

from . import deltas as D

__all__ = ["FORMAT", "ARCH_KEYS", "DeltaError", "TaskDelta", "state_digest", "arch",
           "make_delta", "delta_bytes", "save_delta", "load_delta", "task_state",
           "separate_int8_state", "atomic_write"]

#: The format tag of a delta file.
FORMAT = "bertaccel-multitask-delta/1"
#: The base model's config fields a delta depends on (its shapes).
ARCH_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
             "vocab_size", "max_position_embeddings", "type_vocab_size")


class DeltaError(ValueError):
    """A delta file that cannot be used: damaged, or for another base model or config."""


@dataclasses.dataclass(frozen=True, kw_only=True)
class TaskDelta:
    """One task's stored delta (see the module docstring).

    Members
    -------
    task : str
    labels : tuple of str
    arch : dict
        The base model's :data:`ARCH_KEYS`.
    base_digest : str
        :func:`state_digest` of the base model's weights.
    rows : dict
        ``{matrix name: int64 (r,)}``, sorted K-row indices.
    values : dict
        ``{matrix name: int8 (r, N)}``, in units of the base's per-output-channel scale.
    params : dict
        ``{name: float32}``, the task's vectors and head (``head.*``).
    clipped : int
        Delta values clipped to ``[-127, 127]`` when the delta was made.
    """

    task: str
    labels: tuple
    arch: dict
    base_digest: str
    rows: dict
    values: dict
    params: dict
    clipped: int = 0


def state_digest(state):
    """A 16-digit hash of a state dict's ``bert.*``-or-bare names and values (float32)."""
    h = hashlib.sha256()
    for name in sorted(state):
        key = name[len("bert."):] if name.startswith("bert.") else name
        h.update(key.encode())
        h.update(state[name].detach().float().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def arch(config):
    """``{key: value}`` of :data:`ARCH_KEYS` from a ``transformers`` config."""
    return {k: int(getattr(config, k)) for k in ARCH_KEYS}


def _base(base, name):
    return base[name] if name in base else base[name[len("bert."):]]


def make_delta(task, labels, finetuned, base, *, config, masks=None):
    """The :class:`TaskDelta` of a task model ``finetuned`` (a classifier state dict) against
    ``base`` (the base model's state dict, keys with or without ``bert.``).

    Each encoder matrix's task weight is put on the base's int8 grid, ``round(W_t / s)``; the
    delta is its difference from ``q_b`` on the K-rows of ``masks`` (``{name: bool (K,)}``;
    by default every K-row where ``W_t`` differs from the base), keeping only rows with a
    nonzero integer (a matrix with none has no entry). Embedding tables must equal the base's
    (a row-sparse model's do).
    """
    rows, values, params, clipped = {}, {}, {}, 0
    for name, w_t in finetuned.items():
        kind = D.param_kind(name, w_t.shape)
        if kind in ("vector", "head"):
            params[name] = w_t.detach().float().clone()
        elif kind == "table" and not torch.equal(w_t, _base(base, name)):
            raise DeltaError(f"{task}: embedding table {name} differs from the base's; only "
                             f"a model with the base's tables has a row-sparse delta")
        elif kind == "matrix":
            w_b = _base(base, name)
            keep = (w_t != w_b).any(dim=0) if masks is None else masks[name]
            s = D.int8_scale(w_b)
            q_b = torch.round(w_b.double() / s).clamp(-127, 127)
            dq = (torch.round(w_t.double() / s) - q_b)[:, keep].t()        # (r, N)
            clipped += int((dq.abs() > 127).sum())
            dq = dq.clamp(-127, 127)
            index = keep.nonzero().flatten()
            nonzero = dq.ne(0).any(dim=1)
            if bool(nonzero.any()):
                rows[name], values[name] = index[nonzero].long(), dq[nonzero].to(torch.int8)
    return TaskDelta(task=task, labels=tuple(labels), arch=arch(config),
                     base_digest=state_digest(base), rows=rows, values=values, params=params,
                     clipped=clipped)


def delta_bytes(delta):
    """Bytes a task stores: int8 values, row indices of ``ceil(log2 K)`` bits
    (:func:`~.deltas.index_bits`), float32 params."""
    bits = 0
    for name, v in delta.values.items():
        k = delta.arch["intermediate_size"] if name.endswith("output.dense.weight") \
            and ".attention." not in name else delta.arch["hidden_size"]
        bits += v.numel() * 8 + D.index_bits(k, v.shape[0])
    bits += sum(p.numel() for p in delta.params.values()) * D.FLOAT_BITS
    return bits / 8


def _content_digest(payload):
    """sha256 of a payload's metadata and tensors, in name order."""
    h = hashlib.sha256(json.dumps({k: payload[k] for k in ("format", "task", "labels", "arch",
                                                          "base_digest", "clipped")},
                                  sort_keys=True).encode())
    for group in ("rows", "values", "params"):
        for name in sorted(payload[group]):
            h.update(f"{group}/{name}".encode())
            h.update(payload[group][name].contiguous().numpy().tobytes())
    return h.hexdigest()


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path, write):
    """Call ``write(tmp)`` on a temporary file beside ``path`` and rename it to ``path``: an
    error or Ctrl-C leaves no file, or the old one, never half of one."""
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        write(pathlib.Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())          # mkstemp makes it 0600
        os.replace(tmp, path)
    except BaseException:
        pathlib.Path(tmp).unlink(missing_ok=True)
        raise


def save_delta(delta, path):
    """Write ``delta`` to ``path`` atomically (:func:`atomic_write`)."""
    payload = {"format": FORMAT, **dataclasses.asdict(delta)}
    payload["labels"] = list(delta.labels)
    payload["digest"] = _content_digest(payload)
    atomic_write(path, lambda tmp: torch.save(payload, tmp))


def _check_payload(payload, path):
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise DeltaError(f"{path}: not a delta file of format {FORMAT}")
    try:
        digest = _content_digest(payload)
    except (KeyError, TypeError, AttributeError, RuntimeError) as error:
        raise DeltaError(f"{path}: damaged delta file ({error})") from None
    if digest != payload.get("digest"):
        raise DeltaError(f"{path}: damaged delta file (its content digest does not match)")


def load_delta(path, *, base_digest=None, config=None):
    """The :class:`TaskDelta` in ``path``, checked against the base model when ``base_digest``
    (:func:`state_digest`) and ``config`` are given.

    Raises
    ------
    DeltaError
        If the file is missing, damaged, or made for another architecture or base model.
    """
    path = pathlib.Path(path)
    if not path.is_file():
        raise DeltaError(f"no delta file {path}")
    try:
        payload = torch.load(path, weights_only=True)
    except Exception as error:  # noqa: BLE001 - any unpickling failure is a damaged file
        raise DeltaError(f"{path}: damaged delta file ({type(error).__name__})") from None
    _check_payload(payload, path)
    if config is not None and payload["arch"] != arch(config):
        diff = ", ".join(f"{k} {payload['arch'].get(k)} (base {v})"
                         for k, v in arch(config).items() if payload["arch"].get(k) != v)
        raise DeltaError(f"{path}: delta for another model config: {diff}")
    if base_digest is not None and payload["base_digest"] != base_digest:
        raise DeltaError(f"{path}: delta for another base model (weights digest "
                         f"{payload['base_digest']}, this base {base_digest})")
    fields = {f.name for f in dataclasses.fields(TaskDelta)}
    return TaskDelta(**{k: v for k, v in payload.items() if k in fields}
                     | {"labels": tuple(payload["labels"])})


def task_state(base, delta):
    """The classifier state dict the int8 task model computes with, for evaluation in PyTorch:
    every encoder matrix ``(q_b + values on its rows) * s`` (the sum the accelerator's extra
    K-rows accumulate), the task's params, and the rest (tables) the base's."""
    out = {}
    for name, value in base.items():
        key = name if name.startswith("bert.") else f"bert.{name}"
        if D.param_kind(key, value.shape) == "matrix":
            s = D.int8_scale(value)
            q = torch.round(value.double() / s).clamp(-127, 127)
            if key in delta.rows:
                q[:, delta.rows[key]] += delta.values[key].double().t()
            out[key] = (q * s).float()
        else:
            out[key] = value
    out.update(delta.params)
    return out


def separate_int8_state(finetuned):
    """A separately fine-tuned task model with every encoder matrix on its own
    per-output-channel int8 grid (the rest as it is)."""
    return {n: D.fake_int8(v) if D.param_kind(n, v.shape) == "matrix" else v
            for n, v in finetuned.items()}
