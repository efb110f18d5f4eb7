"""The program of a planned GEMM: :class:`GemmGroups` (its instructions, the plan checked or
chosen), :func:`compile_gemm` (the instructions with the pack and unpack indices of their
data) and :func:`rebind` (the same tiles with another epilogue's integers)."""

import dataclasses

import numpy as np
import torch

from ...golden.intops import MAX_ROW
from ...hw import isa
from ...hw.config import AccelConfig
from ..epilogue import lower, pmem_bytes
from ..program import Program, ProgramError
from .groups import _Groups
from .layout import _Epilogue
from .plan import _check_batch, _check_dim, _check_k_high, _check_plan, plan_gemm
from .steps import _chunks, _k_rows

__all__ = ["GemmGroups", "compile_gemm", "rebind"]


def compile_gemm(cfg, m, k, n, *, plan=None, epilogue=None, k_high=0, batch=1):
    """Compile ``C = A @ B`` for ``A`` of ``m x k`` and ``B`` of ``k x n`` int8, with an optional
    fused epilogue on the drain.

    Parameters
    ----------
    cfg : AccelConfig
        The build to compile for.
    m, k, n : int
        The GEMM dimensions, each at least 1.
    plan : TilePlan, optional
        A blocking to use instead of the one :func:`plan_gemm` chooses (its ``m, k, n`` must
        match). Its estimate fields are not used.
    epilogue : Requant or Gelu or Softmax or LayerNorm, optional
        The epilogue (:mod:`bertaccel.sw.epilogue`) every STORE applies. ``None``: the
        STOREs send the raw int32 accumulators.
    k_high : int
        The first ``k_high`` rows of ``K`` are high rows, whose products count ``2**6`` times
        (see "High rows" in docs/tiler.md).
    batch : int
        Compile ``batch`` independent GEMMs of this shape and epilogue as one program (see
        "Batches" in docs/tiler.md): the operands and results of member ``i`` are rows
        ``i * m ...`` of ``a``, ``r`` and ``c`` and ``i * k ...`` of ``b``.

    Returns
    -------
    Program
        Inputs ``{"a": (batch * m, k), "b": (batch * k, n)}`` plus, for LayerNorm, the
        residual ``"r": (batch * m, n)``; outputs ``{"c": (batch * m, n)}`` (int32 values;
        int8 values with an epilogue); constants ``{"params": ...}`` (the PMEM bytes) with an
        epilogue; ``meta["plan"]`` is the :class:`TilePlan`, ``meta["epilogue"]`` the
        :class:`~bertaccel.sw.epilogue.Lowered` integers and ``meta["layout"]`` where the
        epilogue data lives.

    Raises
    ------
    ValueError
        If a dimension is not an int of at least 1 (the message names it).
    ScaleError
        If an epilogue parameter cannot be represented (a ``ValueError``; it names it).
    ProgramError
        If ``cfg`` cannot hold one tile, ``plan`` does not fit ``cfg`` or the GEMM, or a row-wise
        epilogue's row is longer than the hardware supports.
    """
    writer = _GemmWriter(GemmGroups(cfg, m, k, n, plan=plan, epilogue=epilogue, k_high=k_high,
                                    batch=batch))
    writer.write()
    return writer.program()


class GemmGroups(_Groups):
    """The instructions of a compiled GEMM, group by group, without its data: what
    :func:`compile_gemm` writes into ``Program.instrs``, for callers that need only the
    instructions (:mod:`bertaccel.sw.timing`).

    The program is the groups in order (:meth:`instrs`). Group ``g`` (a :class:`_Group` in
    row ``g`` of :attr:`codes`) is made of *pieces*, in order: its LOADs (the head group's
    with the SETs before them), one *row* of ``ntlen`` MATMULs for each of its ``ktlen`` K
    tiles, and its STORE. Pieces differ only in *placement* (where data lives in scratchpads
    A and B and PMEM) and in the SETs' values when their keys (:meth:`loads_key`,
    :meth:`row_key`, :meth:`store_key`) are equal, and groups do when their codes differ only
    in the :data:`PLACEMENT` columns.

    Parameters
    ----------
    cfg, m, k, n, plan, epilogue, k_high, batch
        As for :func:`compile_gemm` (and checked the same way).
    lowered : Lowered, optional
        ``lower(epilogue, cfg, n=n, k=k)`` when the caller has it.

    Members
    -------
    plan : TilePlan
    codes : numpy.ndarray
        ``(groups, len(FIELDS))`` int64: one :class:`_Group` a row.
    sets : list of isa.Set
        The epilogue's SETs (none without an epilogue).
    """

    def __init__(self, cfg, m, k, n, *, plan=None, epilogue=None, lowered=None, k_high=0,
                 batch=1):
        if not isinstance(cfg, AccelConfig):
            raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
        m, k, n = _check_dim("m", m), _check_dim("k", k), _check_dim("n", n)
        k_high, batch = _check_k_high(k_high, k), _check_batch(batch)
        lowered = None if epilogue is None else lowered or lower(epilogue, cfg, n=n, k=k)
        ep = None if epilogue is None else _Epilogue.of(epilogue)
        if plan is None:
            plan = plan_gemm(cfg, m, k, n, epilogue=epilogue, k_high=k_high, batch=batch)
        elif (plan.m, plan.k, plan.n, plan.k_high, plan.batch) != (m, k, n, k_high, batch):
            def shape(m, k, n, batch):
                return (f"{batch} x " if batch != 1 else "") + f"{m}x{k}x{n}"

            def high(rows):
                return f" with {rows} high rows" if rows else ""
            raise ProgramError(f"plan is for a {shape(plan.m, plan.k, plan.n, plan.batch)} GEMM"
                               f"{high(plan.k_high)}, not {shape(m, k, n, batch)}"
                               f"{high(k_high)}")
        if ep is not None and ep.passes == 2 and n > MAX_ROW:
            raise ProgramError(f"a {ep.op.name} row of n = {n} columns is longer than the "
                               f"hardware supports ({MAX_ROW} columns)")
        _check_plan(cfg, plan, ep)
        super().__init__(cfg, plan, ep, lowered)


class _GemmWriter:
    """Writes the program of one planned GEMM: the instructions of :class:`GemmGroups`, and for
    every LOAD its rows of the pack index and for every STORE its rows of the unpack index.

    The pack source is the flattened inputs ``a``, ``b``, the residual ``r`` (LayerNorm) and
    the PMEM bytes, in that order, then one zero (:attr:`pad`); the unpack destination is the
    flattened ``c`` then one discard slot.
    """

    def __init__(self, groups):
        self.groups = groups
        self.cfg, self.plan, self.ep = cfg, plan, ep = groups.cfg, groups.plan, groups.ep
        lowered = groups.lowered
        # (nt_total, cols * 8) uint8
        self.params = params = None if lowered is None else pmem_bytes(lowered, cfg.cols)
        m, k, n, batch = plan.m, plan.k, plan.n, plan.batch
        self.a_off, self.b_off = 0, batch * m * k
        self.r_off = batch * (m * k + k * n)
        self.p_off = self.r_off + (batch * m * n if ep is not None and ep.residual else 0)
        self.pad = self.p_off + (params.size if params is not None else 0)
        self.discard = batch * m * n
        self.tail_columns = 0 if lowered is None or lowered.tail is None else lowered.tail[0]
        self.lane = np.arange(cfg.lanes)
        self.beat_bytes = min(cfg.lanes, cfg.cols * 8)
        self.instrs, self.pack_parts, self.unpack_parts = [], [], []

    def write(self):
        """The groups in program order: the instructions, and the pack rows of every LOAD of
        group ``g`` (step ``g``'s) and the unpack rows of its STORE (step ``g - 1``'s)."""
        groups = self.groups
        steps = list(groups.table.steps())
        for g in range(len(groups)):
            group = groups.group(g)
            self.instrs.extend(groups.group_instrs(group))
            if g < len(steps):
                step = steps[g]
                if group.split_k:
                    for kt0, kt1, b0, b1 in _chunks(step.ktlen, step.ntlen, group.split):
                        if kt1 > kt0:
                            self.a_pack(step, kt0, kt1 - kt0)
                        self.b_pack(step, b0, b1 - b0)
                else:
                    if group.a_count:
                        self.a_pack(step, 0, step.ktlen)
                    if group.b_count:
                        self.b_pack(step, 0, step.ktlen * step.ntlen)
                if group.pmem_count:
                    self.pmem_pack(group.pmem_strip0,
                                   group.pmem_count // self.cfg.pmem_beats_per_row)
                if group.res_count:
                    self.residual_pack(step, group.res_strip0, group.res_count // step.mlen)
            if group.store:
                step = steps[g - 1]
                self.unpack(step, 0, step.ntlen)
                if group.tail_strips:
                    self.unpack(step, group.tail_strip0, group.tail_strips, tail=True)

    def program(self):
        """The :class:`~bertaccel.sw.program.Program` written."""
        plan, ep, params = self.plan, self.ep, self.params
        m, k, n = plan.batch * plan.m, plan.k, plan.n
        inputs = {"a": (m, k), "b": (plan.batch * k, n)}
        if ep is not None and ep.residual:
            inputs["r"] = (m, n)
        constants = {}
        if params is not None:
            constants["params"] = torch.from_numpy(params.reshape(-1).view(np.int8).copy())
        return Program(self.cfg, self.instrs, inputs=inputs, outputs={"c": (m, n)},
                       pack_index=np.concatenate(self.pack_parts),
                       unpack_index=np.concatenate(self.unpack_parts), constants=constants,
                       meta={"plan": plan, "epilogue": self.groups.lowered,
                             "layout": self.groups.layout})

    # -- the pack rows of the LOADs --------------------------------------------------------------

    def _pack(self, valid, index):
        """Pack-index rows: ``index`` where ``valid``, else the zero."""
        self.pack_parts.append(np.where(valid, index, self.pad).reshape(-1, self.cfg.lanes))

    def a_pack(self, step, kt0, kts):
        # Row kt * mlen + mi holds A[m0 + mi, K tile kt0 + kt]: K tiles kt0 .. of the step.
        rows, lane, plan = self.cfg.rows, self.lane, self.plan
        kt = kt0 + np.arange(kts)[:, None, None]
        mi = np.arange(step.mlen)[None, :, None]
        first, end, _ = _k_rows(rows, plan.k, plan.k_high, step.kt0 + kt)
        col = first + lane
        index = self.a_off + (step.member * plan.m + step.m0 + mi) * plan.k + col
        self._pack((lane < rows) & (col < end), index)

    def b_pack(self, step, block0, blocks):
        # Block kt * ntlen + nt, row r holds row r of K tile kt0 + kt of B, columns
        # (nt0 + nt) * cols ...: blocks block0 .. of the step.
        rows, cols, lane = self.cfg.rows, self.cfg.cols, self.lane
        k, n = self.plan.k, self.plan.n
        kt, nt = np.divmod(block0 + np.arange(blocks), step.ntlen)
        kt, nt = kt[:, None, None], nt[:, None, None]
        r = np.arange(rows)[None, :, None]
        first, end, _ = _k_rows(rows, k, self.plan.k_high, step.kt0 + kt)
        brow = first + r
        bcol = (step.nt0 + nt) * cols + lane
        index = self.b_off + (step.member * k + brow) * n + bcol
        self._pack((lane < cols) & (brow < end) & (bcol < n), index)

    def pmem_pack(self, strip0, n_strips):
        # Beat j of PMEM row i brings bytes j*beat_bytes.. of the row: the gearbox puts the
        # first beat in the lowest bits.
        lane, beat_bytes, per_row = self.lane, self.beat_bytes, self.cfg.pmem_beats_per_row
        row = np.arange(n_strips)[:, None, None]
        beat = np.arange(per_row)[None, :, None]
        byte = (strip0 + row) * self.cfg.cols * 8 + beat * beat_bytes + lane
        self._pack(lane < beat_bytes, self.p_off + byte)

    def residual_pack(self, step, strip0, strips):
        # Row mi of strip nt at the slot base + nt * mlen + mi, as the STORE's aux_addr reads
        # it: strips strip0 .. of the tile.
        cols, lane, n = self.cfg.cols, self.lane, self.plan.n
        nt = strip0 + np.arange(strips)[:, None, None]
        mi = np.arange(step.mlen)[None, :, None]
        col = (step.nt0 + nt) * cols + lane
        index = self.r_off + (step.member * self.plan.m + step.m0 + mi) * n + col
        self._pack((lane < cols) & (col < n), index)

    # -- the unpack rows of the STOREs -----------------------------------------------------------

    def unpack(self, step, strip0, strips, tail=False):
        """A STORE drains strips ``strip0 ..`` of the tile row by row: beat (mi, nt) is
        acc[base + nt*mlen + mi]. Its columns are the output's where its epilogue is theirs
        (a Tail's columns come from the tail's STORE)."""
        cols, n = self.cfg.cols, self.plan.n
        cut = n - self.tail_columns
        mi = np.arange(step.mlen)[:, None, None]
        nt = strip0 + np.arange(strips)[None, :, None]
        col = (step.nt0 + nt) * cols + np.arange(cols)
        index = (step.member * self.plan.m + step.m0 + mi) * n + col
        mine = (col >= cut) & (col < n) if tail else col < cut
        self.unpack_parts.append(np.where(mine, index, self.discard).reshape(-1, cols))


def rebind(base, epilogue, k, n):
    """``base`` (a compiled epilogue GEMM) with another epilogue of the same op: the same tiles,
    new SET values and PMEM bytes. The index tensors are shared, not copied. ``None`` when the
    epilogues do not lower to the same SETs."""
    cfg = base.cfg
    lowered = lower(epilogue, cfg, n=n, k=k)
    old = base.meta["epilogue"]
    sets = [number for number, instr in enumerate(base.instrs) if isinstance(instr, isa.Set)]
    values = _set_values(lowered, len(sets))
    if (lowered.op != old.op or (lowered.tail and lowered.tail[0]) != (old.tail and old.tail[0])
            or [index for index, _ in values] != [base.instrs[number].index
                                                   for number in sets]):
        return None
    instrs = list(base.instrs)
    for number, (_, value) in zip(sets, values):
        instrs[number] = dataclasses.replace(instrs[number], value=int(value))
    params = torch.from_numpy(pmem_bytes(lowered, cfg.cols).reshape(-1).view(np.int8).copy())
    if tuple(params.shape) != tuple(base.constants["params"].shape):
        return None
    return Program(cfg, instrs, inputs=base.inputs, outputs=base.outputs,
                   pack_index=base.pack_index, unpack_index=base.unpack_index,
                   constants={"params": params}, meta={**base.meta, "epilogue": lowered})


def _set_values(lowered, count):
    """The ``(Param, value)`` of the ``count`` SETs of a program of ``lowered``, in program
    order: its SETs, then by turns a Tail's and its own again (:meth:`GemmGroups.stores`)."""
    head = list(lowered.sets)
    out = list(head)
    if lowered.tail is not None and head:
        while len(out) < count:
            out += list(lowered.tail[1]) if (len(out) // len(head)) % 2 else head
    return out
