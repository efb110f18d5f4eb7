"""A task run from the shared int8 base plus its row delta, on the accelerator: the delta's rows
are extra K-rows of the same GEMM.

A weight stage computes ``C = A' @ B`` with ``A' = [sources][:, index]``: the compiler already
gathers the columns of A, because channel splitting repeats some (see
:mod:`bertaccel.sw.bert.quant`). A row delta ``(rows, values)`` of the stage's weight (see
:mod:`.rowdelta`) is appended to B as ``r`` more rows, each with the input column that row
``rows[i]`` of the weight multiplies::

    B_task = [B_base; values]      index_task = [index_base; column(rows)]
    A'_task @ B_task = A'_base @ B_base + A[:, column(rows)] @ values

Both sums add into the same int32 accumulator tile, so the result is the integer GEMM of the
task's weight ``base_q + delta`` exactly (integer addition does not care about the order), and
the epilogue that follows is unchanged. The host never adds the delta to a weight: the merged
matrix exists nowhere. One program a stage, as for the base; the GEMM is ``r`` rows deeper, ``r``
the rows of that layer's delta (each layer its own depth, not the deepest layer's). The delta's
rows are low rows after the base's, so the first of them fill the base's last K tile.

On the device the B operand of a stage is ``[base rows | delta rows]``: the base rows are the
same for every task, so switching tasks rewrites only the delta rows and the epilogue
parameters (PMEM words) of the stages whose vectors the task replaces.
:func:`switch_bytes` counts them against :func:`model_bytes`, the whole int8 model's operands
and parameters. (The devices of this project stream every operand with each program, so these
are the bytes a device that keeps its weights resident would move.)
"""

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

import torch

from ...hw.isa import MATMUL_SHIFT, PmemWord
from ..bert.compile import BertProgram
from ..bert.quant import SplitB
from .rowdelta import WEIGHT_STAGES, stage_shape

__all__ = ["apply_task", "TaskProgram", "StackedB", "TaskOperands", "task_layer",
           "task_epilogues", "base_ints", "delta_columns", "switch_bytes", "model_bytes",
           "PMEM_WORD_BYTES"]

#: Bytes of one column's epilogue parameters in the parameter memory.
PMEM_WORD_BYTES = PmemWord.size // 8


def delta_columns(quant, stage, rows):
    """The columns of the stage's concatenated A sources that weight rows ``rows`` multiply.

    ``qkv`` (``[X]``), ``wo`` (``[ctx | X]``) and ``w1`` (``[X1]``): row ``k`` is column ``k``.
    ``w2`` (``[H kept columns | H outlier columns | X1]``): row ``k`` is where ``k`` stands in
    ``[kept | outliers]``.
    """
    rows = torch.as_tensor(rows, dtype=torch.int64)
    if stage != "w2":
        return rows
    order = torch.cat([quant.h_keep, quant.h.outliers])
    position = torch.empty_like(order)
    position[order] = torch.arange(order.numel())
    return position[rows]


def base_ints(bert, layer, stage):
    """The base's integer weight ``base_q`` ``(K, N)`` int64 of ``stage`` of ``layer``, in the
    float weight's row order: the split rows of the compiled B operand added back together
    (high digit rows at their weight; the rows that carry a LayerNorm residual's outlier
    channels are not part of it)."""
    quant = bert.layers[layer]
    split = getattr(quant, stage)
    k, n = stage_shape(bert.spec, stage)
    own = split.index < k
    rows = split.b.long()
    rows[:split.k_high] <<= MATMUL_SHIFT              # high digit rows count 2**MATMUL_SHIFT
    summed = torch.zeros((k, n), dtype=torch.int64).index_add_(0, split.index[own], rows[own])
    if stage != "w2":
        return summed
    return summed[delta_columns(quant, stage, torch.arange(k))]


@dataclass
class StackedB:
    """A task's B operand of one stage: the base's (shared, never copied) with the delta's rows
    below it. It stands where the compiler puts a :class:`~bertaccel.sw.bert.quant.SplitB`.

    Members
    -------
    base : SplitB
        The base's operand (padded as the base program pads it).
    rows : torch.Tensor
        ``(r, n)`` int8: the delta's values.
    columns : torch.Tensor
        ``(r,)`` int64: the A column each of ``rows`` multiplies.
    index : torch.Tensor
        ``(k,)`` int64: the A column of every row, the base's then ``columns``.
    """

    base: SplitB
    rows: torch.Tensor
    columns: torch.Tensor
    index: torch.Tensor = field(init=False)

    def __post_init__(self):
        self.index = torch.cat([self.base.index, self.columns])

    @property
    def k(self):
        return self.base.k + self.rows.shape[0]

    @property
    def k_high(self):
        return self.base.k_high

    @property
    def b(self):
        """``(k, n)`` int8, stacked when read (for a device call, then dropped)."""
        return torch.cat([self.base.b, self.rows])


class TaskOperands(Mapping):
    """A task layer's B operands by name (as :class:`~bertaccel.sw.bert.compile.BertProgram`
    names them): the base's tensors with the delta's rows stacked below them when read."""

    def __init__(self, base, rows):
        self.base = base
        self.rows = rows

    def __getitem__(self, name):
        return torch.cat([self.base[name], self.rows[name]])

    def __iter__(self):
        return iter(self.base)

    def __len__(self):
        return len(self.base)


def task_epilogues(quant, stage, fields):
    """The stage's epilogues of the base layer ``quant`` with the task's ``fields`` in place of
    the base's: ``{QuantLayer field: epilogue}``."""
    fields = {name: torch.as_tensor(value, dtype=torch.float64).numpy()
              for name, value in fields.items()}
    if stage != "w1":
        name = f"{stage}_ep"
        return {name: dataclasses.replace(getattr(quant, name), **fields)}
    bias = fields["bias"]
    out = {"w1_ep": dataclasses.replace(quant.w1_ep, bias=bias[quant.h_keep.numpy()])}
    if quant.w1_out_ep is not None:
        out["w1_out_ep"] = dataclasses.replace(quant.w1_out_ep,
                                               bias=bias[quant.h.outliers.numpy()])
    return out


def task_layer(bert, layer, delta):
    """Layer ``layer`` of ``bert`` with the task ``delta``'s rows below its B operands
    (:class:`StackedB`, every weight stage, with no rows where the delta has none) and its
    epilogue vectors in place."""
    quant = bert.layers[layer]
    changes = {}
    for stage in WEIGHT_STAGES:
        part = delta.rows.get((layer, stage))
        n = stage_shape(bert.spec, stage)[1]
        rows = torch.zeros((0, n), dtype=torch.int8) if part is None \
            else torch.from_numpy(part.values)
        columns = torch.zeros(0, dtype=torch.int64) if part is None \
            else delta_columns(quant, stage, part.rows)
        changes[stage] = StackedB(getattr(quant, stage), rows, columns)
        fields = delta.vectors.get((layer, stage))
        if fields:
            changes.update(task_epilogues(quant, stage, fields))
    return dataclasses.replace(quant, **changes)


class TaskProgram(BertProgram):
    """A task on the compiled base: the base's program with the delta's rows below every B
    operand and the task's epilogue vectors. Every device, the fast path and the stage timer
    run it as they run the base. It holds the delta's rows and shares everything else with the
    base (the B operands are stacked only when a device call reads them).

    Parameters
    ----------
    base : BertProgram
    delta : TaskDelta

    Raises
    ------
    DeltaError
        The delta does not fit ``base`` (:meth:`~.rowdelta.TaskDelta.check`).
    BertError
        The deeper GEMMs do not fit the config.
    """

    # Each layer keeps its own depth: the base's rows and that layer's delta rows. Padding
    # every layer to the deepest would cost the deepest layer's delta in every layer.
    one_depth = False

    def __init__(self, base, delta):
        delta.check(base)
        self.base, self.delta = base, delta
        layers = [task_layer(base, layer, delta) for layer in range(base.spec.layers)]
        super().__init__(base.cfg, base.spec, layers, x_embed=base.x_embed,
                         calibration=base.calibration, embeddings=base.embeddings,
                         tokenizer=base.tokenizer, name=f"{base.name}+{delta.name}")
        self.check_fit()

    def _layer_operands(self, number, layer):
        w1 = layer.w1.rows
        return TaskOperands(self.base.operands[number], {
            "qkv": layer.qkv.rows, "wo": layer.wo.rows, "w2": layer.w2.rows,
            "w1": w1[:, layer.h_order].contiguous()})


def apply_task(bert, delta):
    """The task ``delta`` (a :class:`~.rowdelta.TaskDelta`) on the compiled base ``bert``: a
    :class:`TaskProgram`.

    Raises
    ------
    DeltaError
        The delta does not fit ``bert`` (:meth:`~.rowdelta.TaskDelta.check`).
    BertError
        The deeper GEMMs do not fit the config.
    """
    return TaskProgram(bert, delta)


def _pmem_bytes(cfg, n):
    """Bytes of the PMEM words of a GEMM of ``n`` columns (padded to whole strips)."""
    return -(-n // cfg.cols) * cfg.cols * PMEM_WORD_BYTES


def _stage_pmem_bytes(bert, layer, stage):
    quant, n = bert.layers[layer], stage_shape(bert.spec, stage)[1]
    if stage != "w1":
        return _pmem_bytes(bert.cfg, n)
    outliers = quant.h.outliers.numel()
    return _pmem_bytes(bert.cfg, n - outliers) + (_pmem_bytes(bert.cfg, outliers)
                                                  if outliers else 0)


def model_bytes(bert):
    """Bytes of the whole int8 model on the device: every layer's B operands (with the rows
    channel splitting adds) and the PMEM words of the weight stages' epilogues.
    ``{"weights", "vectors", "total"}``."""
    weights = sum(int(op.numel()) for ops in bert.operands for op in ops.values())
    vectors = sum(_stage_pmem_bytes(bert, layer, stage) for layer in range(bert.spec.layers)
                  for stage in WEIGHT_STAGES)
    return {"weights": weights, "vectors": vectors, "total": weights + vectors}


def switch_bytes(bert, delta):
    """Bytes a switch to task ``delta`` moves to the device: its delta rows and the PMEM words
    of the stages whose epilogue vectors it replaces. ``{"rows", "vectors", "total"}``."""
    rows = delta.nbytes
    vectors = sum(_stage_pmem_bytes(bert, layer, stage)
                  for (layer, stage), fields in delta.vectors.items() if fields)
    return {"rows": rows, "vectors": vectors, "total": rows + vectors}
