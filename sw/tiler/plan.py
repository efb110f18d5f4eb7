"""The blocking of a GEMM: :class:`TilePlan`, the checks a plan must pass, and the search
:func:`plan_gemm` runs (see "Choosing the blocking" in docs/tiler.md)."""

import dataclasses
import functools
import heapq
from dataclasses import dataclass

import numpy as np

from ...golden.intops import MAX_ROW
from ...hw import isa
from ...hw.config import AccelConfig
from ..cycles import CycleStepper
from ..epilogue import lower
from ..program import ProgramError
from .cost import _score, _score_epilogue, _timeline, program_size
from .groups import _Groups
from .layout import _Epilogue, _layout, _layout_of
from .steps import _MAX_TAPER, _MBlocks, _ends, k_tiles

__all__ = ["TilePlan", "plan_gemm"]


#: Candidates ranked by the closed-form score that are then timed step by step.
_TIMED_CANDIDATES = 6


#: Plans within this fraction of the fastest estimate count as equally fast.
_CYCLES_SLACK = 0.01


#: Above this many steps the step-by-step timeline is skipped (the closed form is used).
_TIMED_MAX_STEPS = 20000


#: Candidates whose programs hold this many instructions in all are run on the cycle model.
_EXACT_MAX_INSTRUCTIONS = 60_000


@dataclass(frozen=True)
class TilePlan:
    """How :func:`compile_gemm` cuts one GEMM.

    Members
    -------
    m, k, n : int
        The GEMM: ``(m x k) @ (k x n)``.
    mb : int
        Rows of ``A`` in one C tile (the ``m_len`` of its MATMULs; the edge tile may have fewer).
    kb : int
        K tiles (of ``rows``) in one step.
    nb : int
        N strips (of ``cols``) in one C tile.
    order : str
        ``"m"``: M blocks outermost (A reused across N blocks when ``kb`` covers K);
        ``"n"``: N blocks outermost (B reused across M blocks when ``kb`` covers K).
    n_steps : int
        Steps (one load of the operands that change, then the MATMULs).
    n_tiles : int
        C tiles (one STORE each).
    est_cycles : int
        Estimated cycles from the first data beat to the last output beat; the cycle model's
        count where the planner ran it (see "Choosing the blocking" in docs/tiler.md).
    macs_per_cycle : int
        ``rows * cols`` of the build, for :attr:`utilization`.
    tail : int
        Rows of the last M block when it is not cut like the others (0: every M block has
        ``mb`` rows but the edge one). Plans for SOFTMAX and LAYERNORM keep the last C tile
        small, because its two-pass drain is not hidden behind compute: ``m - tail`` rows are
        cut into blocks of ``mb``, then the last ``tail`` rows make one block.
    op : str
        The epilogue the plan was made for (an ``isa.EpOp`` name; ``"RAW"``: none).
    k_high : int
        The high rows of ``K`` (see "High rows" in docs/tiler.md).
    taper : int
        Blocks of ``tail * 2**taper`` down to ``2 * tail`` rows before the tail (0: none): the
        rows before them are cut into blocks of ``mb``.
    batch : int
        Independent GEMMs of this shape run as one (see "Batches" in docs/tiler.md):
        each is cut as above, one after the other; :attr:`n_steps`, :attr:`n_tiles` and
        :attr:`est_cycles` count them all.
    """

    m: int
    k: int
    n: int
    mb: int
    kb: int
    nb: int
    order: str
    n_steps: int
    n_tiles: int
    est_cycles: int
    macs_per_cycle: int
    tail: int = 0
    op: str = "RAW"
    k_high: int = 0
    taper: int = 0
    batch: int = 1

    @property
    def ends(self):
        """The sizes of the last M blocks, from the tail's taper to the tail."""
        return _ends(self.tail, self.taper)

    @property
    def utilization(self):
        """Useful MACs over the MACs the array could do in :attr:`est_cycles`."""
        return (self.batch * self.m * self.k * self.n
                / (self.macs_per_cycle * self.est_cycles))


def _check_dim(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"GEMM dimension {name} must be an int of at least 1, not {value!r}")
    return int(value)


def _check_batch(batch):
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ValueError(f"batch must be an int of at least 1, not {batch!r}")
    return int(batch)


def _check_k_high(k_high, k):
    if isinstance(k_high, bool) or not isinstance(k_high, (int, np.integer)) \
            or not 0 <= k_high <= k:
        raise ValueError(f"k_high must be an int from 0 to k = {k}, not {k_high!r}")
    return int(k_high)


def _check_plan(cfg, plan, ep=None):
    half_spad, half_acc, rows = cfg.spad_depth // 2, cfg.acc_depth // 2, cfg.rows
    if plan.order not in ("m", "n"):
        raise ProgramError(f"plan order must be 'm' or 'n', not {plan.order!r}")
    for name in ("mb", "kb", "nb"):
        value = getattr(plan, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProgramError(f"plan {name} must be an int of at least 1, not {value!r}")
    if isinstance(plan.k_high, bool) or not isinstance(plan.k_high, int) \
            or not 0 <= plan.k_high <= plan.k:
        raise ProgramError(f"plan k_high must be an int from 0 to k = {plan.k}, "
                           f"not {plan.k_high!r}")
    if isinstance(plan.batch, bool) or not isinstance(plan.batch, int) or plan.batch < 1:
        raise ProgramError(f"plan batch must be an int of at least 1, not {plan.batch!r}")
    if isinstance(plan.tail, bool) or not isinstance(plan.tail, int) \
            or not 0 <= plan.tail < plan.m:
        raise ProgramError(f"plan tail must be an int from 0 to m - 1 = {plan.m - 1}, "
                           f"not {plan.tail!r}")
    if isinstance(plan.taper, bool) or not isinstance(plan.taper, int) or plan.taper < 0 \
            or (plan.taper and sum(plan.ends) >= plan.m):
        raise ProgramError(f"plan taper must be an int of at least 0 whose blocks "
                           f"{plan.ends} leave rows before them, not {plan.taper!r}")
    layout = _layout(cfg, plan, ep)
    biggest = max([plan.mb] + plan.ends)
    if biggest * plan.kb > half_spad:
        raise ProgramError(f"plan mb * kb = {biggest * plan.kb} does not fit half of scratchpad "
                           f"A ({half_spad} rows)")
    if plan.kb * plan.nb * rows > layout.b_half:
        raise ProgramError(f"plan kb * nb * rows = {plan.kb * plan.nb * rows} does not fit half "
                           f"of scratchpad B ({layout.b_half} rows"
                           + (f" beside {layout.slots} residual buffers of {layout.res_rows} "
                              f"rows)" if layout.res_rows else ")"))
    if biggest * plan.nb > half_acc:
        raise ProgramError(f"plan mb * nb = {biggest * plan.nb} does not fit half of the "
                           f"accumulator ({half_acc} rows)")
    if biggest > isa.FIELD_MAX:
        raise ProgramError(f"plan mb = {biggest} exceeds m_len's maximum {isa.FIELD_MAX}")
    if ep is not None:
        nt_total = -(-plan.n // cfg.cols)
        if ep.passes == 2 and plan.nb != nt_total:
            raise ProgramError(f"a {ep.op.name} tile must hold whole rows: plan nb must be "
                               f"{nt_total} (every N strip), not {plan.nb}")
        if not layout.pmem_whole and layout.slots * plan.nb > cfg.pmem_depth:
            raise ProgramError(f"plan nb = {plan.nb}: {layout.slots} PMEM buffers of nb rows "
                               f"do not fit PMEM ({cfg.pmem_depth} rows)")


def plan_gemm(cfg, m, k, n, *, epilogue=None, k_high=0, batch=1):
    """Choose the blocking of ``(m x k) @ (k x n)`` for ``cfg``.

    Parameters
    ----------
    cfg : AccelConfig
        The build.
    m, k, n : int
        The GEMM dimensions, each at least 1.
    epilogue : Requant or Gelu or Softmax or LayerNorm, optional
        The epilogue fused on the drain (:mod:`bertaccel.sw.epilogue`). SOFTMAX and LAYERNORM
        need whole rows in a C tile, read each row twice and (LAYERNORM) a residual buffer in
        scratchpad B; the plan is chosen with those costs and limits.
    k_high : int
        The high rows of ``K`` (see "High rows" in docs/tiler.md).
    batch : int
        Independent GEMMs of this shape run as one (see "Batches" in docs/tiler.md).

    Returns
    -------
    TilePlan
        Of the plans estimated within 1% of the fewest cycles, the one with fewest steps.

    Raises
    ------
    ValueError
        If a dimension is not an int of at least 1 (the message names it).
    ProgramError
        If ``cfg`` cannot hold even one tile (for a row-wise epilogue: one row of ``n`` columns,
        its parameters and its residual), or a row-wise epilogue's row is longer than the
        hardware supports.
    """
    if not isinstance(cfg, AccelConfig):
        raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
    m, k, n = _check_dim("m", m), _check_dim("k", k), _check_dim("n", n)
    k_high, batch = _check_k_high(k_high, k), _check_batch(batch)
    if epilogue is None:
        return _plan_plain(cfg, m, k, n, k_high, batch)
    return _plan_epilogue(cfg, m, k, n, _Epilogue.of(epilogue), k_high, batch, epilogue)


def _plan_plain(cfg, m, k, n, k_high, batch):
    """The plain GEMM's plan (see :func:`plan_gemm`)."""
    rows = cfg.rows
    kt_total = k_tiles(rows, k, k_high)
    nt_total = -(-n // cfg.cols)
    half_spad = cfg.spad_depth // 2
    half_acc = cfg.acc_depth // 2
    mb_cap = min(half_spad, half_acc, isa.FIELD_MAX)
    nb_cap = min(half_acc, half_spad // rows)
    candidates = []
    if mb_cap >= 1 and nb_cap >= 1:
        for mb in _sizes(m, mb_cap):
            for nb in _sizes(nt_total, nb_cap):
                if mb * nb > half_acc:
                    continue
                kb_cap = min(kt_total, half_spad // mb, half_spad // (nb * rows))
                if kb_cap < 1:
                    continue
                for kb in _sizes(kt_total, kb_cap, extra=3):
                    for order in ("m", "n"):
                        cycles, n_steps, n_tiles = _score(cfg, m, kt_total, nt_total,
                                                          mb, kb, nb, order)
                        candidates.append((cycles, n_steps, -mb, -nb, -kb, order, n_tiles))
    if not candidates:
        raise ProgramError(f"config {cfg.tag} cannot hold one tile: a step needs "
                           f"{rows} scratchpad rows and one accumulator row in each half")
    # Time the best few by the closed form, and the fewest-step few of those nearly as good.
    best_score = min(candidates)[0]
    near = [c for c in candidates if c[0] <= best_score * (1 + _CYCLES_SLACK)]
    chosen = set(heapq.nsmallest(_TIMED_CANDIDATES, candidates))
    chosen.update(heapq.nsmallest(_TIMED_CANDIDATES, near, key=lambda c: (c[1], c[0])))
    return _pick(cfg, [TilePlan(m=m, k=k, n=n, mb=-mb, kb=-kb, nb=-nb, order=order,
                                n_steps=batch * n_steps, n_tiles=batch * n_tiles,
                                est_cycles=batch * cycles, macs_per_cycle=cfg.macs_per_cycle,
                                k_high=k_high, batch=batch)
                       for cycles, n_steps, mb, nb, kb, order, n_tiles in sorted(chosen)])


@functools.lru_cache(maxsize=4096)
def _sizes(total, cap, extra=10):
    """Block sizes worth trying for ``total`` items under ``cap``: the balanced splits
    ``ceil(total / j)`` from the largest that fits, plus the powers of two (a tuple: the
    planner asks for the same sizes many times)."""
    cap = min(cap, total)
    out = set()
    j = -(-total // cap)
    while len(out) < extra:
        size = -(-total // j)
        out.add(size)
        if size == 1:
            break
        j = -(-total // (size - 1))  # the next j that gives a smaller size
    power = 1
    while power <= cap:
        out.add(power)
        power *= 2
    return tuple(sorted(out))


def _pick(cfg, plans, ep=None, epilogue=None):
    """Of ``plans`` (sorted by their closed-form estimate), the one to use. Where their
    programs together hold at most :data:`_EXACT_MAX_INSTRUCTIONS`, each is run on the cycle
    model and the fastest taken (of equals, the one with fewest steps). Otherwise each is timed
    step by step (:func:`_timeline`; past ``_TIMED_MAX_STEPS`` steps its closed form stands),
    and of those within ``_CYCLES_SLACK`` of the fastest, the one with fewest steps (fewer
    instructions, and the estimate is not that precise)."""
    sizes = sum(program_size(cfg, plan, epilogue=epilogue)["instructions"] for plan in plans)
    if sizes <= _EXACT_MAX_INSTRUCTIONS:
        lowered = None if epilogue is None else lower(epilogue, cfg, n=plans[0].n,
                                                          k=plans[0].k)
        exact = [dataclasses.replace(plan, est_cycles=_model_cycles(cfg, plan, ep, lowered))
                 for plan in plans]
        return min(exact, key=lambda plan: (plan.est_cycles, plan.n_steps))
    timed = [dataclasses.replace(plan, est_cycles=_timeline(plan, cfg, ep))
             if plan.n_steps <= _TIMED_MAX_STEPS else plan for plan in plans]
    fastest = min(plan.est_cycles for plan in timed)
    return min((plan for plan in timed if plan.est_cycles <= fastest * (1 + _CYCLES_SLACK)),
               key=lambda plan: (plan.n_steps, plan.est_cycles))


def _model_cycles(cfg, plan, ep, lowered):
    """Cycles of ``plan``'s program on the cycle model (the instructions only, unwritten)."""
    _check_plan(cfg, plan, ep)
    groups = _Groups(cfg, plan, ep, lowered)
    stepper = CycleStepper(cfg)
    stepper.run(groups.instrs())
    return stepper.cycles()


def _tails(cfg, m, ep):
    """``(tail, taper)`` worth trying: last-tile sizes around the ``rows`` operand rows that
    hide a MATMUL's weight preload (a smaller last tile wastes compute, a larger one drains
    longer), with up to :data:`_MAX_TAPER` blocks growing by halves before it (see
    :attr:`TilePlan.taper`)."""
    if ep.passes == 1:
        return [(0, 0)]
    p = cfg.rows
    tails = sorted({t for t in (p // 2, (3 * p) // 4, p, (5 * p) // 4, (3 * p) // 2, 2 * p)
                    if 1 <= t < m})
    return [(0, 0)] + [(t, taper) for t in tails for taper in range(_MAX_TAPER + 1)
                       if (t << (taper + 1)) - t < m]


def _plan_epilogue(cfg, m, k, n, ep, k_high, batch, epilogue):
    """The plan for a GEMM with ``epilogue`` (``ep`` what the planner needs of it; see
    :func:`plan_gemm`)."""
    rows, cols = cfg.rows, cfg.cols
    kt_total = k_tiles(rows, k, k_high)
    nt_total = -(-n // cols)
    half_spad = cfg.spad_depth // 2
    half_acc = cfg.acc_depth // 2
    two_pass = ep.passes == 2
    name = ep.op.name
    if two_pass:
        if n > MAX_ROW:
            raise ProgramError(f"a {name} row of n = {n} columns is longer than the hardware "
                               f"supports ({MAX_ROW} columns)")
        if nt_total > cfg.pmem_depth:
            raise ProgramError(f"a {name} row of n = {n} columns needs {nt_total} parameter "
                               f"rows, more than PMEM holds ({cfg.pmem_depth})")
        if nt_total > half_acc:
            raise ProgramError(f"a {name} row of n = {n} columns needs {nt_total} accumulator "
                               f"rows, more than half of the accumulator ({half_acc} rows)")
    nb_options = [nt_total] if two_pass else _sizes(nt_total, min(half_acc, half_spad // rows))
    blockings = []                     # (tail, taper, nb, mb, kb)
    for tail, taper in _tails(cfg, m, ep):
        ends = _ends(tail, taper)
        rest = m - sum(ends)
        for nb in nb_options:
            mb_cap = min(half_spad, half_acc // nb, isa.FIELD_MAX)
            if mb_cap < 1 or max(ends, default=0) > mb_cap:
                continue
            if nt_total > cfg.pmem_depth and 2 * nb > cfg.pmem_depth:
                continue
            for mb in _sizes(rest, mb_cap, extra=6):
                kb_cap = min(kt_total, half_spad // max([mb] + ends))
                blockings.extend((tail, taper, nb, mb, kb)
                                 for kb in _sizes(kt_total, kb_cap, extra=3))
    candidates = _score_blockings(cfg, m, kt_total, n, ep, blockings, batch)
    if not candidates:
        raise ProgramError(f"config {cfg.tag} cannot hold one tile of a {m}x{k}x{n} GEMM with "
                           f"{name}: scratchpad B must hold two weight blocks"
                           + (f" and the residual of whole rows of {nt_total} strips"
                              if ep.residual else ""))
    best_score = min(candidates)[0]
    near = [c for c in candidates if c[0] <= best_score * (1 + _CYCLES_SLACK)]
    chosen = set(heapq.nsmallest(2 * _TIMED_CANDIDATES, candidates))
    chosen.update(heapq.nsmallest(_TIMED_CANDIDATES, near, key=lambda c: (c[1], c[0])))
    return _pick(cfg, [TilePlan(m=m, k=k, n=n, mb=-mb, kb=-kb, nb=-nb, order=order,
                                n_steps=batch * n_steps, n_tiles=batch * n_tiles,
                                est_cycles=cycles, macs_per_cycle=cfg.macs_per_cycle,
                                tail=tail, op=name, k_high=k_high, taper=taper, batch=batch)
                       for cycles, n_steps, mb, nb, kb, order, tail, taper, n_tiles
                       in sorted(chosen)], ep, epilogue)


def _score_blockings(cfg, m, kt_total, n, ep, blockings, batch):
    """The candidates of :func:`_plan_epilogue`, scored all at once: ``(cycles, n_steps, -mb,
    -nb, -kb, order, tail, taper, n_tiles)`` of each blocking ``(tail, taper, nb, mb, kb)``
    that fits a batch of ``batch`` (the figures are one member's), in each order it may
    take."""
    if not blockings:
        return []
    tail, taper, nb, mb, kb = np.array(blockings, dtype=np.int64).T
    nt_total = -(-n // cfg.cols)
    blocks = _MBlocks.of(m, mb, tail, taper)
    layout = _layout_of(cfg, kt_total, n, blocks, kb, nb, ep, batch)
    fits = kb * nb * cfg.rows <= layout.b_half
    if not layout.pmem_whole:
        fits &= layout.slots * nb <= cfg.pmem_depth
    candidates = []
    for order in ("m", "n"):
        keep = fits if order == "m" else fits & (nb != nt_total)
        cycles, n_steps, n_tiles = (np.broadcast_to(value, keep.shape)[keep].tolist() for value
                                    in _score_epilogue(cfg, blocks, kt_total, nt_total, kb,
                                                       nb, order, ep, batch))
        candidates.extend(zip(cycles, n_steps, (-mb[keep]).tolist(), (-nb[keep]).tolist(),
                              (-kb[keep]).tolist(), [order] * len(cycles), tail[keep].tolist(),
                              taper[keep].tolist(), n_tiles))
    return candidates
