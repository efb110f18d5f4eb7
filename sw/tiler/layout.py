"""Where a plan puts the epilogue's data: the second weight half, the slots of the residual
and of PMEM rows, and the groups whose LOADs may fill a tile's slot (see "Where the epilogue
data lives, and why the tokens protect it" in docs/tiler.md)."""

from dataclasses import dataclass

import numpy as np

from ...hw import isa
from .steps import _MBlocks, _bounds, _max, _min, k_tiles

__all__ = []


@dataclass(frozen=True)
class _Epilogue:
    """What the planner needs to know of an epilogue."""
    op: isa.EpOp
    passes: int          # drain reads of each accumulator row: 2 for SOFTMAX and LAYERNORM
    residual: bool       # LAYERNORM: a residual tile loaded into scratchpad B

    @classmethod
    def of(cls, epilogue):
        op = getattr(epilogue, "op", None)
        if not isinstance(op, isa.EpOp) or op == isa.EpOp.RAW:
            raise TypeError(f"epilogue must be a Requant, Gelu, Softmax or LayerNorm "
                            f"(bertaccel.sw.epilogue), not {type(epilogue).__name__}")
        return cls(op=op, passes=2 if isa.is_two_pass(op) else 1, residual=op == isa.EpOp.LAYERNORM)


@dataclass(frozen=True)
class _Layout:
    """Where a plan puts the epilogue's data (see "Epilogues" in docs/tiler.md)."""
    b_half: int         # scratchpad-B offset of the second weight half
    slots: int          # buffers of the per-tile auxiliary data (residual, per-tile PMEM rows)
    res_base: int       # scratchpad-B row of residual slot 0
    res_rows: int       # rows of one residual slot (0: no residual)
    pmem_whole: bool    # every N strip's PMEM row is loaded once, at row = strip
    pmem_rows: int      # rows of one PMEM slot when not ``pmem_whole``


def _aux_slots(n_kb, n_tiles):
    """Buffers the per-tile auxiliary data needs when a tile has ``n_kb`` steps: the smallest
    ``B >= 2`` with ``(B - 1) * n_kb >= 3`` (see "Epilogues" in docs/tiler.md), and never more
    than the tiles."""
    return _min(1 + _max(1, -(-3 // n_kb)), n_tiles)


def _layout(cfg, plan, ep):
    """The :class:`_Layout` of ``plan`` for epilogue ``ep`` (``None``: plain GEMM)."""
    if ep is None:
        half_spad = cfg.spad_depth // 2
        return _Layout(b_half=half_spad, slots=0, res_base=0, res_rows=0, pmem_whole=True,
                       pmem_rows=0)
    return _layout_of(cfg, k_tiles(cfg.rows, plan.k, plan.k_high), plan.n,
                      _MBlocks.of(plan.m, plan.mb, plan.tail, plan.taper), plan.kb, plan.nb, ep,
                      plan.batch)


def _layout_of(cfg, kt_total, n, m_blocks, kb, nb, ep, batch=1):
    """The :class:`_Layout` of the blocking ``m_blocks`` (:class:`_MBlocks`), ``kb``, ``nb``
    of a B of ``kt_total`` K tiles and ``n`` columns for epilogue ``ep`` (ints, or arrays for
    many blockings), in a batch of ``batch``."""
    nt_total = -(-n // cfg.cols)
    n_kb = -(-kt_total // kb)
    n_tiles = batch * m_blocks.count * -(-nt_total // nb)
    slots = _aux_slots(n_kb, n_tiles)
    pmem_whole = nt_total <= cfg.pmem_depth
    res_rows = m_blocks.biggest * nb if ep.residual else 0
    b_half = (cfg.spad_depth - slots * res_rows) // 2
    return _Layout(b_half=b_half, slots=slots, res_base=2 * b_half, res_rows=res_rows,
                   pmem_whole=pmem_whole, pmem_rows=0 if pmem_whole else nb)


def _aux_groups(n_kb, n_tiles, slots):
    """``(lo, hi)``, int64 arrays over the tiles (each ``n_kb`` steps, in order): the groups
    whose LOADs may write tile ``u``'s slot of epilogue data: its own steps' from the first
    that the tokens keep behind STORE(``u - slots``), the slot's last reader
    (``first_step(u - slots + 2) + 2``, see "Epilogues" in docs/tiler.md), and past
    the head group where the tile has a step after it."""
    tile = np.arange(n_tiles, dtype=np.int64)
    lo, hi = tile * n_kb, tile * n_kb + n_kb - 1
    if slots >= 2:
        lo = np.where(tile >= slots, np.maximum(lo, (tile - slots + 2) * n_kb + 2), lo)
    else:
        lo = np.where(tile >= slots, hi, lo)
    return np.minimum(np.maximum(lo, np.minimum(1, hi)), hi), hi


def _spread(lo, hi, strips):
    """``(group, strip0, count)`` chunks of ``strips`` strips over the groups ``lo .. hi``, as
    even as they come (a group with no strip gets no chunk). The loads of a step are hidden
    behind the MATMULs of the step before, so data spread over them stays hidden where one
    large LOAD would stall the execute unit."""
    bounds = _bounds(strips, hi - lo + 1)
    return [(lo + j, b0, b1 - b0) for j, (b0, b1) in enumerate(zip(bounds, bounds[1:]))
            if b1 > b0]
