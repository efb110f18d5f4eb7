"""A task as a row-sparse int8 delta on the shared int8 base model, and its file.

Each encoder weight matrix of the base (the B operand of stage ``qkv``, ``wo``, ``w1`` or
``w2`` of a layer) is an integer matrix ``base_q`` ``(K, N)`` at the base's scales
(:func:`bertaccel.sw.bert.quant.weight_ints`; :func:`bertaccel.sw.multitask.ondevice.base_ints`
reads it back from a compiled model). A task changes a few of its K-rows:

    task_q = base_q;   task_q[rows] += values

with ``rows`` int64 ``(r,)`` (distinct, in ``[0, K)``) and ``values`` int8 ``(r, N)``, in the
units of ``base_q`` (the base's per-output-channel or per-tensor weight scale, and the input
channel's factor where the input has an outlier scale). The K-rows and columns are the float
weight's own order: ``K`` is the ``torch`` Linear's input feature, ``N`` its output feature
(``qkv``: the columns of Q, then K, then V).

A task may also carry new epilogue vectors per stage (its fine-tuned biases and LayerNorm
scales, in the units of the base's epilogue: the fields of
:class:`~bertaccel.sw.epilogue.Requant`, :class:`~bertaccel.sw.epilogue.Gelu` or
:class:`~bertaccel.sw.epilogue.LayerNorm` that they replace). :data:`VECTOR_FIELDS` names
them.

A :class:`TaskDelta` names the base it was made for (:func:`base_fingerprint` of the compiled
base) and the config (its tag), and is kept in one ``.npz`` file (:meth:`TaskDelta.save`,
:func:`load_delta`). Everything wrong with one -- another base, another config, shapes that do
not fit, a damaged file -- is a :class:`DeltaError` with a one-line message.
"""

import hashlib
import json
import os
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..bert.compile import WEIGHT_STAGES

__all__ = ["WEIGHT_STAGES", "VECTOR_FIELDS", "FORMAT", "DeltaError", "RowDelta", "TaskDelta",
           "base_fingerprint", "stage_shape", "load_delta"]

#: The epilogue fields a task may replace, per stage.
VECTOR_FIELDS = {"qkv": ("bias",), "wo": ("bias", "gamma", "beta"), "w1": ("bias",),
                 "w2": ("bias", "gamma", "beta")}
#: The file format's name and version, in the file's metadata.
FORMAT = ("bertaccel-rowdelta", 1)


class DeltaError(ValueError):
    """A task delta that does not fit its base model or config, or a damaged delta file."""


def stage_shape(spec, stage):
    """``(K, N)`` of the base weight of ``stage`` for a model of ``spec``
    (:class:`~bertaccel.sw.bert.load.BertSpec`)."""
    hidden, inter = spec.hidden, spec.intermediate
    return {"qkv": (hidden, 3 * hidden), "wo": (hidden, hidden), "w1": (hidden, inter),
            "w2": (inter, hidden)}[stage]


def _vector_length(spec, stage):
    return stage_shape(spec, stage)[1]


@dataclass(frozen=True)
class RowDelta:
    """The delta of one weight matrix: ``values`` added to K-rows ``rows`` of ``base_q``.

    Members
    -------
    rows : numpy.ndarray
        ``(r,)`` int64, distinct, at least 0.
    values : numpy.ndarray
        ``(r, N)`` int8.
    """

    rows: np.ndarray
    values: np.ndarray

    def __post_init__(self):
        rows, values = np.asarray(self.rows), np.asarray(self.values)
        if rows.ndim != 1 or rows.dtype != np.int64:
            raise DeltaError(f"rows must be a 1-D int64 array, not {rows.dtype} {rows.shape}")
        if values.ndim != 2 or values.dtype != np.int8:
            raise DeltaError(f"values must be a 2-D int8 array, not {values.dtype} "
                             f"{values.shape}")
        if values.shape[0] != rows.shape[0]:
            raise DeltaError(f"values has {values.shape[0]} rows for {rows.shape[0]} row "
                             f"indices")
        if rows.size and int(rows.min()) < 0:
            raise DeltaError(f"row index {int(rows.min())} is negative")
        if np.unique(rows).size != rows.size:
            raise DeltaError("row indices repeat")
        object.__setattr__(self, "rows", rows)
        object.__setattr__(self, "values", values)

    @property
    def nbytes(self):
        """Bytes of the values (what the device holds)."""
        return self.values.nbytes


@dataclass
class TaskDelta:
    """A task: row deltas of the base's weight matrices and, optionally, new epilogue vectors.

    Members
    -------
    base : str
        :func:`base_fingerprint` of the compiled base model it was made for.
    config : str
        The tag of the accelerator config (:attr:`~bertaccel.hw.config.AccelConfig.tag`).
    rows : dict
        ``{(layer, stage): RowDelta}``; a matrix it leaves out is the base's.
    vectors : dict
        ``{(layer, stage): {field: (N,) float64}}``, fields from :data:`VECTOR_FIELDS`.
    name : str
        The task's name (for messages).
    """

    base: str
    config: str
    rows: dict
    vectors: dict = field(default_factory=dict)
    name: str = "task"

    def check(self, bert):
        """Raise :class:`DeltaError` unless this delta fits ``bert`` (a compiled
        :class:`~bertaccel.sw.bert.compile.BertProgram`): its base and config, every layer,
        stage, row index and shape."""
        # The config first: the base's split rows are packed for the config's K tile, so a
        # delta for another config has another base fingerprint too.
        if self.config != bert.cfg.tag:
            raise DeltaError(f"task {self.name!r} was made for config {self.config}, not "
                             f"{bert.cfg.tag}")
        if self.base != base_fingerprint(bert):
            raise DeltaError(f"task {self.name!r} was made for another base model (fingerprint "
                             f"{self.base[:12]}, not {base_fingerprint(bert)[:12]} of "
                             f"{bert.name})")
        spec = bert.spec
        for (layer, stage), delta in self.rows.items():
            where = _where(self.name, layer, stage, spec)
            k, n = stage_shape(spec, stage)
            if delta.values.shape[1] != n:
                raise DeltaError(f"{where}: values have {delta.values.shape[1]} columns, "
                                 f"not {n}")
            if delta.rows.size and int(delta.rows.max()) >= k:
                raise DeltaError(f"{where}: row index {int(delta.rows.max())} is beyond the "
                                 f"{k} rows of the weight")
        for (layer, stage), fields in self.vectors.items():
            where = _where(self.name, layer, stage, spec)
            n = _vector_length(spec, stage)
            for name, value in fields.items():
                if name not in VECTOR_FIELDS[stage]:
                    raise DeltaError(f"{where}: no epilogue vector {name!r} (stage {stage} "
                                     f"has {', '.join(VECTOR_FIELDS[stage])})")
                value = np.asarray(value)
                if value.shape != (n,) or not np.all(np.isfinite(value)):
                    raise DeltaError(f"{where}: {name} must be {n} finite numbers, not "
                                     f"{value.dtype} {value.shape}")
        return self

    @property
    def nbytes(self):
        """Bytes of every row delta's values (the row indices stay on the host)."""
        return sum(delta.nbytes for delta in self.rows.values())

    def save(self, path):
        """Write the delta to ``path`` (a ``.npz`` file) whole or not at all: into a temporary
        file beside it, then renamed over it."""
        path = Path(path)
        arrays = {"meta": np.frombuffer(json.dumps(
            {"format": FORMAT[0], "version": FORMAT[1], "base": self.base,
             "config": self.config, "name": self.name}).encode(), dtype=np.uint8)}
        for (layer, stage), delta in self.rows.items():
            arrays[f"rows/{layer}/{stage}/rows"] = delta.rows
            arrays[f"rows/{layer}/{stage}/values"] = delta.values
        for (layer, stage), fields in self.vectors.items():
            for name, value in fields.items():
                arrays[f"vectors/{layer}/{stage}/{name}"] = np.asarray(value, dtype=np.float64)
        handle, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.",
                                        suffix=".part")
        try:
            with os.fdopen(handle, "wb") as out:
                np.savez_compressed(out, **arrays)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise
        return path


def _where(name, layer, stage, spec):
    if not isinstance(layer, int) or not 0 <= layer < spec.layers:
        raise DeltaError(f"task {name!r}: layer {layer!r} is not one of the model's "
                         f"{spec.layers} layers")
    if stage not in WEIGHT_STAGES:
        raise DeltaError(f"task {name!r}: stage {stage!r} is not one of "
                         f"{', '.join(WEIGHT_STAGES)}")
    return f"task {name!r} layer {layer} stage {stage}"


def base_fingerprint(bert):
    """A SHA-256 hex digest of what a delta is relative to in the compiled ``bert``: its shape,
    every layer's B operands (int8 rows and their input columns) and activation scales."""
    digest = hashlib.sha256(repr(bert.spec).encode())
    for q in bert.layers:
        for stage in WEIGHT_STAGES:
            split = getattr(q, stage)
            digest.update(stage.encode())
            digest.update(split.b.numpy().tobytes())
            digest.update(split.index.numpy().tobytes())
        for act in (q.x, q.x1, q.h, q.x2):
            digest.update(act.scale.numpy().tobytes())
        digest.update(np.array([q.s_q, q.s_k, q.s_v, q.s_ctx]).tobytes())
    return digest.hexdigest()


def _key(name, top):
    parts = name.split("/")
    if len(parts) != 4 or parts[0] != top or not parts[1].isdigit():
        raise DeltaError(f"unexpected entry {name!r}")
    return (int(parts[1]), parts[2]), parts[3]


def load_delta(path):
    """Read a :class:`TaskDelta` written by :meth:`TaskDelta.save`.

    Raises
    ------
    DeltaError
        A missing, damaged or foreign file, or arrays of the wrong kind (the message names the
        file and what is wrong). :meth:`TaskDelta.check` then checks it against a base.
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            arrays = {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        raise DeltaError(f"{path}: no such delta file") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError, KeyError) as error:
        raise DeltaError(f"{path}: not a readable delta file ({error})") from None
    try:
        return _from_arrays(arrays)
    except DeltaError as error:
        raise DeltaError(f"{path}: {error}") from None


def _from_arrays(arrays):
    try:
        meta = json.loads(bytes(arrays.pop("meta")).decode())
        kind, version = meta["format"], meta["version"]
        base, config, name = str(meta["base"]), str(meta["config"]), str(meta["name"])
    except (KeyError, ValueError, TypeError, UnicodeDecodeError):
        raise DeltaError("no readable metadata") from None
    if (kind, version) != FORMAT:
        raise DeltaError(f"format {kind!r} version {version!r}, not {FORMAT[0]} {FORMAT[1]}")
    parts, vectors = {}, {}
    for entry, value in arrays.items():
        if entry.startswith("rows/"):
            key, what = _key(entry, "rows")
            if what not in ("rows", "values"):
                raise DeltaError(f"unexpected entry {entry!r}")
            parts.setdefault(key, {})[what] = value
        else:
            key, what = _key(entry, "vectors")
            vectors.setdefault(key, {})[what] = value
    rows = {}
    for key, both in parts.items():
        if set(both) != {"rows", "values"}:
            raise DeltaError(f"layer {key[0]} stage {key[1]} lacks its rows or values")
        rows[key] = RowDelta(rows=both["rows"], values=both["values"])
    return TaskDelta(base=base, config=config, rows=rows, vectors=vectors, name=name)
