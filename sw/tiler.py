"""The GEMM tiler: ``C = A @ B`` on the weight-stationary array, double buffered.

Shapes. ``A`` is ``m x k``, ``B`` is ``k x n``. The array holds one ``rows x cols`` weight block,
so ``k`` is cut into ``KT = ceil(k / rows)`` K tiles and ``n`` into ``NT = ceil(n / cols)`` N
strips; edge tiles are zero-padded by the pack index, never by the program.

Blocking. The work is cut into C tiles of ``Mb`` rows of ``A`` by ``Nb`` N strips, and the K tiles
into blocks of ``Kb``. One *step* handles one (C tile, K block): it loads the A tile
(``Mb * Kb`` spad-A rows: for K tile ``kt`` and row ``mi``, row ``kt * m_len + mi`` holds
``A[m0 + mi, kt*rows : (kt+1)*rows]``) and the B tile (``Kb * Nb`` weight blocks of ``rows``
spad-B rows: block ``kt * Nb + nt`` row ``r`` holds ``B[kt*rows + r, nt*cols : (nt+1)*cols]``),
one LOAD per operand, then issues one MATMUL per (K tile, N strip). The C tile lives in the
accumulator as ``Nb`` strips of ``m_len`` rows (strip ``nt`` row ``mi`` at ``nt * m_len + mi``),
so after its last K block it leaves with a single STORE.

Double buffering. Scratchpad A, scratchpad B and the accumulator are each split into two halves.
Each operand alternates halves every time it is (re)loaded; C tiles alternate accumulator halves.
When the whole K extent fits in one step (one K block), the operand that does not change between
consecutive steps stays resident and is not reloaded: with the M-outer loop order the A tile is
reused across N blocks, with the N-outer order the B tile across M blocks.

Tokens (all channels end at 0):

* step ``s``'s first LOAD pops ``e2l`` when ``s >= 2``; the last MATMUL of step ``s`` pushes
  ``e2l`` when ``s + 2`` exists. An operand half reloaded in step ``s`` was last read no later
  than step ``s - 2``, so this is sufficient for both operands.
* step ``s``'s last LOAD pushes ``l2e``; its first MATMUL pops it.
* the last MATMUL of a C tile pushes ``e2s``; the tile's STORE pops it.
* the first MATMUL of C tile ``t >= 2`` pops ``s2e``, pushed by the STORE of tile ``t - 2``
  (which used the same accumulator half).

Program order. The loads of step ``s + 1`` are placed before the MATMULs of step ``s`` so that a
dispatcher with small queues still hands the load unit its next work while the execute unit
runs; the STORE of a tile follows its last MATMUL. Executed sequentially this order is legal.

High rows. The first ``k_high`` rows of ``K`` may be *high* rows, whose products are worth
``2**MATMUL_SHIFT`` times the others' (``C = (A[:, :k_high] @ B[:k_high] << 6) + A[:, k_high:] @
B[k_high:]``): the high digits of 12-bit softmax probabilities (attention's P V takes ``A =
[P_high | P_low]`` and ``B = [V; V]``), or of weights too large for int8. The high rows and the
others are tiled into K tiles of their own (``ceil(k_high / rows) + ceil((k - k_high) / rows)``
of them), and the MATMULs of the high K tiles have ``shift`` set.

Epilogues. With an epilogue (:mod:`bertaccel.sw.epilogue`) every STORE applies its op, and the
program carries the op's integers: SETs of the store unit's registers at the start (the store
unit runs SETs and STOREs in program order, so they precede every STORE in any interleaving),
the parameter-memory rows (one per N strip, ``cfg.pmem_beats_per_row`` beats each, from the
program's constant ``"params"``) and, for LayerNorm, the residual ``r``. SOFTMAX and LAYERNORM
tiles hold whole rows (``Nb`` = every N strip) and their last M block is kept small
(:attr:`TilePlan.tail`), because its two-pass drain (each row read twice) is the one drain not
hidden behind compute. A tile's drain runs while the next tile computes, but a SOFTMAX drain
takes ``2 * ep_ratio`` cycles a beat, against ``ceil(k / rows)`` MATMUL rows a beat (attention's
``Q K^T`` on 8x8: 4 against 8), so a small last tile cannot hide the drain of a large one
before it: the blocks before the tail may grow by halves (:attr:`TilePlan.taper`: ``..., 4t,
2t, t``), each drain then hidden behind the next, smaller tile's compute.

Where the epilogue data lives, and why the tokens protect it. The store unit reads PMEM and the
residual but pushes nothing the load unit pops: the only way to hold back a LOAD is ``e2l``,
pushed by MATMULs. The chain that does it: STORE(t) pushes ``s2e`` after its last read; the first
MATMUL of tile ``t + 2`` pops it (its first step ``f``); the last MATMUL of step ``f`` pushes
``e2l``; the first LOAD of step ``f + 2``'s group pops it, and every later LOAD follows it in the
load unit. So a LOAD in group ``q >= first_step(t + 2) + 2`` cannot overwrite what STORE(t)
reads. A tile's data must also be visible to its STORE: it is, in any group
``q <= last_step(u)``, because that group's last LOAD pushes the ``l2e`` a MATMUL of tile ``u``
pops before the tile's last MATMUL pushes ``e2s``. So:

* the whole PMEM (all N strips, when they fit in ``pmem_depth``) is loaded once, in the group of
  the first tile's last step; nothing overwrites it;
* the per-tile data -- the residual tile (row ``mi`` of strip ``s`` at ``slot base + s * m_len +
  mi``, as the STORE's ``aux_addr`` reads it), and PMEM rows when the strips do not all fit --
  goes into slot ``u mod B`` in the group of tile ``u``'s last step. Slot ``u mod B`` was last
  read by STORE(``u - B``), so with ``n_kb`` steps per tile the rule above needs
  ``u*n_kb + n_kb - 1 >= (u - B + 2)*n_kb + 2``, that is ``(B - 1) * n_kb >= 3``: ``B = 4`` with
  one step a tile, 3 with two, 2 with three or more (never more than the tiles). The residual
  slots sit in scratchpad B above the two weight halves, which shrink to make room.

Choosing the blocking. :func:`plan_gemm` searches ``(Mb, Kb, Nb, order)`` under
``Mb*Kb <= spad_depth/2``, ``Kb*Nb*rows <= spad_depth/2``, ``Mb*Nb <= acc_depth/2`` and
``Mb <= isa.FIELD_MAX`` and keeps, of the plans within 1% of the fewest estimated cycles, the
one with fewest steps (so fewest instructions). The estimate: the data stream moves one
beat a cycle concurrently with compute, a MATMUL costs ``max(m_len, rows)`` cycles, the first
step's loads and the last tile's store are exposed. A closed-form score ranks all candidates and a
step-by-step timeline ranks the best few.
"""

import dataclasses
import heapq
from dataclasses import dataclass

import numpy as np
import torch

from ..golden.intops import MAX_ROW
from ..hw import isa
from ..hw.config import AccelConfig
from .epilogue import lower, pmem_bytes
from .program import Program, ProgramError

__all__ = ["TilePlan", "plan_gemm", "compile_gemm", "rebind"]

#: Cycles of fixed cost assumed for every step (token hand-over between the units).
_STEP_OVERHEAD = 2
#: Candidates ranked by the closed-form score that are then timed step by step.
_TIMED_CANDIDATES = 6
#: Plans within this fraction of the fastest estimate count as equally fast.
_CYCLES_SLACK = 0.01
#: Above this many steps the step-by-step timeline is skipped (the closed form is used).
_TIMED_MAX_STEPS = 20000


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
        Estimated cycles from the first data beat to the last output beat.
    macs_per_cycle : int
        ``rows * cols`` of the build, for :attr:`utilization`.
    k_high : int
        The high rows of ``K`` (see "High rows" in the module docstring).
    tail : int
        Rows of the last M block when it is not cut like the others (0: every M block has
        ``mb`` rows but the edge one). Plans for SOFTMAX and LAYERNORM keep the last C tile
        small, because its two-pass drain is not hidden behind compute: ``m - tail`` rows are
        cut into blocks of ``mb``, then the last ``tail`` rows make one block.
    taper : int
        Blocks of ``tail * 2**taper`` down to ``2 * tail`` rows before the tail (0: none): the
        rows before them are cut into blocks of ``mb``.
    op : str
        The epilogue the plan was made for (an ``isa.EpOp`` name; ``"RAW"``: none).
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

    @property
    def ends(self):
        """The sizes of the last M blocks, from the tail's taper to the tail."""
        return [self.tail << i for i in range(self.taper, -1, -1)] if self.tail else []

    @property
    def utilization(self):
        """Useful MACs over the MACs the array could do in :attr:`est_cycles`."""
        return self.m * self.k * self.n / (self.macs_per_cycle * self.est_cycles)


@dataclass(frozen=True)
class _Step:
    index: int
    tile: int
    m0: int
    mlen: int
    kt0: int
    ktlen: int
    nt0: int
    ntlen: int
    load_a: bool
    a_half: int
    load_b: bool
    b_half: int
    first_k: bool
    last_k: bool


def _k_tiles(rows, k, k_high):
    """K tiles of a GEMM of depth ``k`` with ``k_high`` high rows: each part tiled alone."""
    return -(-k_high // rows) + -(-(k - k_high) // rows)


def _k_rows(rows, k, k_high, kt):
    """``(first, end)``: the rows of ``K`` that K tiles ``kt`` (an array) hold, from ``first``
    while below ``end``; and whether each is a high K tile."""
    kt_high = -(-k_high // rows)
    high = kt < kt_high
    first = np.where(high, kt * rows, k_high + (kt - kt_high) * rows)
    return first, np.where(high, k_high, k), high


def _check_dim(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"GEMM dimension {name} must be an int of at least 1, not {value!r}")
    return int(value)


def _blocks(total, size):
    """``(start, length)`` of the blocks of ``size`` covering ``range(total)``."""
    return [(start, min(size, total - start)) for start in range(0, total, size)]


def _m_blocks(m, mb, ends):
    """``(start, length)`` of the M blocks: the rows before the last blocks ``ends`` (the
    plan's :attr:`TilePlan.ends`) in blocks of ``mb``, then those."""
    start = m - sum(ends)
    out = _blocks(start, mb)
    for length in ends:
        out.append((start, length))
        start += length
    return out


def _steps(plan, cfg):
    """The steps of ``plan``, in program order."""
    rows, cols = cfg.rows, cfg.cols
    kt_total = _k_tiles(rows, plan.k, plan.k_high)
    nt_total = -(-plan.n // cols)
    m_blocks = _m_blocks(plan.m, plan.mb, plan.ends)
    k_blocks = _blocks(kt_total, plan.kb)
    n_blocks = _blocks(nt_total, plan.nb)
    if plan.order == "m":
        tiles = [(mi, ni) for mi in range(len(m_blocks)) for ni in range(len(n_blocks))]
    else:
        tiles = [(mi, ni) for ni in range(len(n_blocks)) for mi in range(len(m_blocks))]
    a_key = b_key = None
    a_version = b_version = -1
    index = 0
    for tile, (mi, ni) in enumerate(tiles):
        m0, mlen = m_blocks[mi]
        nt0, ntlen = n_blocks[ni]
        for ki, (kt0, ktlen) in enumerate(k_blocks):
            load_a = (mi, ki) != a_key
            load_b = (ki, ni) != b_key
            if load_a:
                a_key, a_version = (mi, ki), a_version + 1
            if load_b:
                b_key, b_version = (ki, ni), b_version + 1
            yield _Step(index, tile, m0, mlen, kt0, ktlen, nt0, ntlen, load_a, a_version % 2,
                        load_b, b_version % 2, ki == 0, ki == len(k_blocks) - 1)
            index += 1


def _store_cycles(cfg, passes, beats):
    """Cycles of a STORE of ``beats`` beats: the epilogue takes one every ``ep_ratio`` cycles,
    each beat ``passes`` times."""
    return passes * cfg.ep_ratio * beats


def _matmul_cycles(cfg, mlen):
    # The execute unit's steady-state cost (hw/execute/): the weight preload of the next
    # MATMUL (rows reads of scratchpad B) hides behind this one's stream when it has rows
    # operand rows; no weight bank waits to drain.
    return max(mlen, cfg.rows)


#: Cycles assumed between a beat entering the epilogue and its result leaving the core.
_EPILOGUE_LATENCY = 16


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
        two_pass = op in (isa.EpOp.SOFTMAX, isa.EpOp.LAYERNORM)
        return cls(op=op, passes=2 if two_pass else 1, residual=op == isa.EpOp.LAYERNORM)


@dataclass(frozen=True)
class _Layout:
    """Where a plan puts the epilogue's data (see "Epilogues" in the module docstring)."""
    b_half: int         # scratchpad-B offset of the second weight half
    slots: int          # buffers of the per-tile auxiliary data (residual, per-tile PMEM rows)
    res_base: int       # scratchpad-B row of residual slot 0
    res_rows: int       # rows of one residual slot (0: no residual)
    pmem_whole: bool    # every N strip's PMEM row is loaded once, at row = strip
    pmem_rows: int      # rows of one PMEM slot when not ``pmem_whole``


def _aux_slots(n_kb, n_tiles):
    """Buffers the per-tile auxiliary data needs when a tile has ``n_kb`` steps: the smallest
    ``B`` with ``(B - 1) * n_kb >= 3`` (see "Epilogues"), and never more than the tiles."""
    slots = 2
    while (slots - 1) * n_kb < 3:
        slots += 1
    return min(slots, n_tiles)


def _layout(cfg, plan, ep):
    """The :class:`_Layout` of ``plan`` for epilogue ``ep`` (``None``: plain GEMM)."""
    half_spad = cfg.spad_depth // 2
    if ep is None:
        return _Layout(b_half=half_spad, slots=0, res_base=0, res_rows=0, pmem_whole=True,
                       pmem_rows=0)
    kt_total = _k_tiles(cfg.rows, plan.k, plan.k_high)
    nt_total = -(-plan.n // cfg.cols)
    m_blocks = _m_blocks(plan.m, plan.mb, plan.ends)
    n_kb = -(-kt_total // plan.kb)
    n_tiles = len(m_blocks) * -(-nt_total // plan.nb)
    slots = _aux_slots(n_kb, n_tiles)
    pmem_whole = nt_total <= cfg.pmem_depth
    res_rows = max(length for _, length in m_blocks) * plan.nb if ep.residual else 0
    b_half = (cfg.spad_depth - slots * res_rows) // 2
    return _Layout(b_half=b_half, slots=slots, res_base=2 * b_half, res_rows=res_rows,
                   pmem_whole=pmem_whole, pmem_rows=0 if pmem_whole else plan.nb)


def _timeline(plan, cfg, ep=None):
    """Estimated cycles of ``plan``, from a step-by-step timeline of the three units."""
    rows = cfg.rows
    steps = list(_steps(plan, cfg))
    aux = [0] * len(steps)     # extra load beats of each step's group (epilogue data)
    passes, latency = 1, 0
    if ep is not None:
        passes, latency = ep.passes, _EPILOGUE_LATENCY
        per_row = cfg.pmem_beats_per_row
        whole = -(-plan.n // cfg.cols) <= cfg.pmem_depth
        for step in steps:
            if step.last_k:
                aux[step.index] += (ep.residual * step.mlen * step.ntlen
                                    + (not whole) * step.ntlen * per_row)
        first_store = next(step.index for step in steps if step.last_k)
        if whole:
            aux[first_store] += -(-plan.n // cfg.cols) * per_row
    load_free = exec_free = store_free = 0
    exec_end = []
    store_end = []
    for step in steps:
        beats = (step.load_a * step.ktlen * step.mlen
                 + step.load_b * step.ktlen * step.ntlen * rows + aux[step.index])
        start = max(load_free, exec_end[step.index - 2] if step.index >= 2 else 0)
        load_free = start + beats
        start = max(exec_free, load_free)
        if step.first_k and step.tile >= 2:
            start = max(start, store_end[step.tile - 2])
        exec_free = (start + _STEP_OVERHEAD
                     + step.ktlen * step.ntlen * _matmul_cycles(cfg, step.mlen))
        exec_end.append(exec_free)
        if step.last_k:
            start = max(store_free, exec_free + cfg.mesh_latency)
            store_free = start + _store_cycles(cfg, passes, step.ntlen * step.mlen)
            store_end.append(store_free)
    return store_free + latency


def _operand_beats(m, kt_total, b_row_beats, n_mb, n_kb, n_nb, order):
    """The operand beats a blocking loads in ``order``: ``(a_beats, b_beats)``, each operand's
    beats (``b_row_beats`` per k tile of B) times the passes over it (one while its block stays
    resident)."""
    a_all = m * kt_total
    b_all = kt_total * b_row_beats
    if order == "m":
        return (a_all * (1 if n_kb == 1 else n_nb),
                b_all * (1 if n_kb == 1 and n_nb == 1 else n_mb))
    return (a_all * (1 if n_kb == 1 and n_mb == 1 else n_nb),
            b_all * (1 if n_kb == 1 else n_mb))


def _score(cfg, m, kt_total, nt_total, mb, kb, nb, order):
    """Closed-form estimate of the cycles of a blocking: ``(cycles, n_steps, n_tiles)``."""
    rows = cfg.rows
    n_mb = -(-m // mb)
    n_kb = -(-kt_total // kb)
    n_nb = -(-nt_total // nb)
    n_steps = n_mb * n_kb * n_nb
    last_m = m - (n_mb - 1) * mb
    last_n = nt_total - (n_nb - 1) * nb
    compute = ((n_mb - 1) * _matmul_cycles(cfg, mb) + _matmul_cycles(cfg, last_m)) \
        * kt_total * nt_total + _STEP_OVERHEAD * n_steps
    a_beats, b_beats = _operand_beats(m, kt_total, nt_total * rows, n_mb, n_kb, n_nb, order)
    first = min(mb, m) * min(kb, kt_total) + min(kb, kt_total) * min(nb, nt_total) * rows
    stored = _store_cycles(cfg, 1, m * nt_total)
    cycles = (first + max(compute, a_beats + b_beats - first, stored)
              + _store_cycles(cfg, 1, last_m * last_n) + cfg.mesh_latency)
    return cycles, n_steps, n_mb * n_nb


def _sizes(total, cap, extra=10):
    """Block sizes worth trying for ``total`` items under ``cap``: the balanced splits
    ``ceil(total / j)`` from the largest that fits, plus the powers of two."""
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
    return sorted(out)


def _plan_plain(cfg, m, k, n, k_high):
    """The plain GEMM's plan (see :func:`plan_gemm`)."""
    rows = cfg.rows
    kt_total = _k_tiles(rows, k, k_high)
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
    timed = []
    for cycles, n_steps, mb, nb, kb, order, n_tiles in sorted(chosen):
        plan = TilePlan(m=m, k=k, n=n, mb=-mb, kb=-kb, nb=-nb, order=order, n_steps=n_steps,
                        n_tiles=n_tiles, est_cycles=cycles, macs_per_cycle=cfg.macs_per_cycle,
                        k_high=k_high)
        if n_steps <= _TIMED_MAX_STEPS:
            plan = dataclasses.replace(plan, est_cycles=_timeline(plan, cfg))
        timed.append(plan)
    # Within a hair of the fastest, prefer fewer steps: fewer instructions, and the estimate
    # is not that precise.
    fastest = min(plan.est_cycles for plan in timed)
    best = min((plan for plan in timed if plan.est_cycles <= fastest * (1 + _CYCLES_SLACK)),
               key=lambda plan: (plan.n_steps, plan.est_cycles))
    return best


def _check_k_high(k_high, k):
    if isinstance(k_high, bool) or not isinstance(k_high, (int, np.integer)) \
            or not 0 <= k_high <= k:
        raise ValueError(f"k_high must be an int from 0 to k = {k}, not {k_high!r}")
    return int(k_high)


def plan_gemm(cfg, m, k, n, *, epilogue=None, k_high=0):
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
        The high rows of ``K`` (see "High rows" in the module docstring).

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
    k_high = _check_k_high(k_high, k)
    if epilogue is None:
        return _plan_plain(cfg, m, k, n, k_high)
    return _plan_epilogue(cfg, m, k, n, _Epilogue.of(epilogue), k_high)


def _tails(cfg, m, ep):
    """``(tail, taper)`` worth trying: last-tile sizes around the ``rows`` operand rows that
    hide a MATMUL's weight preload (a smaller last tile wastes compute, a larger one drains
    longer), with up to 3 blocks growing by halves before it (see :attr:`TilePlan.taper`)."""
    if ep.passes == 1:
        return [(0, 0)]
    p = cfg.rows
    tails = sorted({t for t in (p // 2, (3 * p) // 4, p, (5 * p) // 4, (3 * p) // 2, 2 * p)
                    if 1 <= t < m})
    return [(0, 0)] + [(t, taper) for t in tails for taper in range(4)
                       if (t << (taper + 1)) - t < m]


def _plan_epilogue(cfg, m, k, n, ep, k_high):
    """The plan for a GEMM with epilogue ``ep`` (see :func:`plan_gemm`)."""
    rows, cols = cfg.rows, cfg.cols
    kt_total = _k_tiles(rows, k, k_high)
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
    candidates = []
    for tail, taper in _tails(cfg, m, ep):
        ends = [tail << i for i in range(taper, -1, -1)] if tail else []
        rest = m - sum(ends)
        for nb in nb_options:
            mb_cap = min(half_spad, half_acc // nb, isa.FIELD_MAX)
            if mb_cap < 1 or max(ends, default=0) > mb_cap:
                continue
            if nt_total > cfg.pmem_depth and 2 * nb > cfg.pmem_depth:
                continue
            for mb in _sizes(rest, mb_cap, extra=6):
                biggest = max([mb] + ends)
                lens = [length for _, length in _m_blocks(m, mb, ends)]
                kb_cap = min(kt_total, half_spad // biggest)
                for kb in _sizes(kt_total, kb_cap, extra=3):
                    plan = TilePlan(m=m, k=k, n=n, mb=mb, kb=kb, nb=nb, order="m", n_steps=0,
                                    n_tiles=0, est_cycles=0, macs_per_cycle=cfg.macs_per_cycle,
                                    tail=tail, op=name, k_high=k_high, taper=taper)
                    layout = _layout(cfg, plan, ep)
                    if kb * nb * rows > layout.b_half:
                        continue
                    if not layout.pmem_whole and layout.slots * nb > cfg.pmem_depth:
                        continue
                    for order in (("m",) if nb == nt_total else ("m", "n")):
                        score = _score_epilogue(cfg, lens, kt_total, nt_total, kb, nb, order, ep)
                        candidates.append((score[0], score[1], -mb, -nb, -kb, order, tail,
                                           taper, score[2]))
    if not candidates:
        raise ProgramError(f"config {cfg.tag} cannot hold one tile of a {m}x{k}x{n} GEMM with "
                           f"{name}: scratchpad B must hold two weight blocks"
                           + (f" and the residual of whole rows of {nt_total} strips"
                              if ep.residual else ""))
    best_score = min(candidates)[0]
    near = [c for c in candidates if c[0] <= best_score * (1 + _CYCLES_SLACK)]
    chosen = set(heapq.nsmallest(2 * _TIMED_CANDIDATES, candidates))
    chosen.update(heapq.nsmallest(_TIMED_CANDIDATES, near, key=lambda c: (c[1], c[0])))
    timed = []
    for cycles, n_steps, mb, nb, kb, order, tail, taper, n_tiles in sorted(chosen):
        plan = TilePlan(m=m, k=k, n=n, mb=-mb, kb=-kb, nb=-nb, order=order, n_steps=n_steps,
                        n_tiles=n_tiles, est_cycles=cycles, macs_per_cycle=cfg.macs_per_cycle,
                        tail=tail, op=name, k_high=k_high, taper=taper)
        if n_steps <= _TIMED_MAX_STEPS:
            plan = dataclasses.replace(plan, est_cycles=_timeline(plan, cfg, ep))
        timed.append(plan)
    fastest = min(plan.est_cycles for plan in timed)
    return min((plan for plan in timed if plan.est_cycles <= fastest * (1 + _CYCLES_SLACK)),
               key=lambda plan: (plan.n_steps, plan.est_cycles))


def _score_epilogue(cfg, lens, kt_total, nt_total, kb, nb, order, ep):
    """Closed-form estimate of a blocking with an epilogue: ``(cycles, n_steps, n_tiles)``."""
    rows = cfg.rows
    m = sum(lens)
    n_mb = len(lens)
    n_kb = -(-kt_total // kb)
    n_nb = -(-nt_total // nb)
    n_steps = n_mb * n_kb * n_nb
    last_n = nt_total - (n_nb - 1) * nb
    compute = sum(_matmul_cycles(cfg, length) for length in lens) * kt_total * nt_total \
        + _STEP_OVERHEAD * n_steps
    a_beats, b_beats = _operand_beats(m, kt_total, nt_total * rows, n_mb, n_kb, n_nb, order)
    per_row = cfg.pmem_beats_per_row
    aux = ep.residual * m * nt_total
    aux += nt_total * per_row * (1 if nt_total <= cfg.pmem_depth else n_mb)
    first = lens[0] * min(kb, kt_total) + min(kb, kt_total) * min(nb, nt_total) * rows
    if n_kb == 1:  # the first tile's parameters and residual come with the first step
        first += ep.residual * lens[0] * min(nb, nt_total) + min(nb, nt_total) * per_row
    stored = _store_cycles(cfg, ep.passes, m * nt_total)
    # The last drain, and what the drain before it leaves over the last tile's compute.
    last = _store_cycles(cfg, ep.passes, lens[-1] * last_n)
    if n_mb >= 2:
        before = _store_cycles(cfg, ep.passes, lens[-2] * last_n)
        last += max(0, before - _matmul_cycles(cfg, lens[-1]) * kt_total * last_n)
    cycles = (first + max(compute, a_beats + b_beats + aux - first, stored)
              + last + cfg.mesh_latency + _EPILOGUE_LATENCY)
    return cycles, n_steps, n_mb * n_nb


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


def compile_gemm(cfg, m, k, n, *, plan=None, epilogue=None, k_high=0):
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
        (see "High rows" in the module docstring).

    Returns
    -------
    Program
        Inputs ``{"a": (m, k), "b": (k, n)}`` plus, for LayerNorm, the residual
        ``"r": (m, n)``; outputs ``{"c": (m, n)}`` (int32 values; int8 values with an
        epilogue); constants ``{"params": ...}`` (the PMEM bytes) with an epilogue;
        ``meta["plan"]`` is the :class:`TilePlan`, ``meta["epilogue"]`` the
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
    if not isinstance(cfg, AccelConfig):
        raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
    m, k, n = _check_dim("m", m), _check_dim("k", k), _check_dim("n", n)
    k_high = _check_k_high(k_high, k)
    lowered = ep = None
    if epilogue is not None:
        lowered = lower(epilogue, cfg, n=n, k=k)
        ep = _Epilogue.of(epilogue)
    if plan is None:
        plan = plan_gemm(cfg, m, k, n, epilogue=epilogue, k_high=k_high)
    elif (plan.m, plan.k, plan.n, plan.k_high) != (m, k, n, k_high):
        def high(rows):
            return f" with {rows} high rows" if rows else ""
        raise ProgramError(f"plan is for a {plan.m}x{plan.k}x{plan.n} GEMM{high(plan.k_high)}, "
                           f"not {m}x{k}x{n}{high(k_high)}")
    if ep is not None and ep.passes == 2 and n > MAX_ROW:
        raise ProgramError(f"a {ep.op.name} row of n = {n} columns is longer than the hardware "
                           f"supports ({MAX_ROW} columns)")
    _check_plan(cfg, plan, ep)
    writer = _GemmWriter(cfg, plan, ep, lowered)
    writer.write()
    return writer.program()


def _aux_loads(steps, ep, layout, nt_total):
    """``(tile_steps, aux_loads)``: each C tile's last step, and for each step index (its
    group of LOADs) the epilogue data those LOADs bring, as ``("pmem", addr, first strip,
    strips)`` or ``("res", addr, tile, None)`` (see "Epilogues" in the module docstring)."""
    tile_steps = {}                                 # tile -> its last step
    for step in steps:
        if step.last_k:
            tile_steps[step.tile] = step
    aux_loads = {}
    if ep is None:
        return tile_steps, aux_loads
    if layout.pmem_whole:
        aux_loads.setdefault(tile_steps[0].index, []).append(("pmem", 0, 0, nt_total))
    for tile, step in tile_steps.items():
        slot = tile % layout.slots
        if not layout.pmem_whole:
            aux_loads.setdefault(step.index, []).append(
                ("pmem", slot * layout.pmem_rows, step.nt0, step.ntlen))
        if ep.residual:
            aux_loads.setdefault(step.index, []).append(
                ("res", layout.res_base + slot * layout.res_rows, tile, None))
    return tile_steps, aux_loads


class _GemmWriter:
    """Writes the program of one planned GEMM: the instructions in program order, and for
    every LOAD its rows of the pack index and for every STORE its rows of the unpack index.

    The pack source is the flattened inputs ``a``, ``b``, the residual ``r`` (LayerNorm) and
    the PMEM bytes, in that order, then one zero (:attr:`pad`); the unpack destination is the
    flattened ``c`` then one discard slot.
    """

    def __init__(self, cfg, plan, ep, lowered):
        self.cfg, self.plan, self.ep, self.lowered = cfg, plan, ep, lowered
        self.layout = layout = _layout(cfg, plan, ep)
        # (nt_total, cols * 8) uint8
        self.params = params = None if lowered is None else pmem_bytes(lowered, cfg.cols)
        m, k, n = plan.m, plan.k, plan.n
        self.a_off, self.b_off = 0, m * k
        self.r_off = m * k + k * n
        self.p_off = self.r_off + (m * n if ep is not None and ep.residual else 0)
        self.pad = self.p_off + (params.size if params is not None else 0)
        self.discard = m * n
        self.lane = np.arange(cfg.lanes)
        self.beat_bytes = min(cfg.lanes, cfg.cols * 8)
        self.steps = list(_steps(plan, cfg))
        self.n_tiles = self.steps[-1].tile + 1
        self.tile_steps, self.aux_loads = _aux_loads(self.steps, ep, layout, -(-n // cfg.cols))
        self.instrs, self.pack_parts, self.unpack_parts = [], [], []

    def write(self):
        """The epilogue's SETs, then the steps in program order: the loads of step ``s + 1``
        before the MATMULs of step ``s``, a tile's STORE after its last MATMUL."""
        if self.lowered is not None:
            self.instrs.extend(isa.Set(index=index, value=int(value))
                               for index, value in self.lowered.sets)
        steps = self.steps
        self.loads(steps[0])
        for step in steps:
            if step.index + 1 < len(steps):
                self.loads(steps[step.index + 1])
            self.matmuls(step)
            if step.last_k:
                self.store(step)

    def program(self):
        """The :class:`~bertaccel.sw.program.Program` written."""
        plan, ep, params = self.plan, self.ep, self.params
        m, k, n = plan.m, plan.k, plan.n
        inputs = {"a": (m, k), "b": (k, n)}
        if ep is not None and ep.residual:
            inputs["r"] = (m, n)
        constants = {}
        if params is not None:
            constants["params"] = torch.from_numpy(params.reshape(-1).view(np.int8).copy())
        return Program(self.cfg, self.instrs, inputs=inputs, outputs={"c": (m, n)},
                       pack_index=np.concatenate(self.pack_parts),
                       unpack_index=np.concatenate(self.unpack_parts), constants=constants,
                       meta={"plan": plan, "epilogue": self.lowered, "layout": self.layout})

    # -- LOADs -----------------------------------------------------------------------------------

    def _pack(self, valid, index):
        """Pack-index rows: ``index`` where ``valid``, else the zero."""
        self.pack_parts.append(np.where(valid, index, self.pad).reshape(-1, self.cfg.lanes))

    def loads(self, step):
        """The LOADs of ``step``'s group: the operands it changes, then its epilogue data; the
        first pops ``e2l`` (from step 2), the last pushes ``l2e``."""
        loads = []
        if step.load_a:
            loads.append(self.a_load(step))
        if step.load_b:
            loads.append(self.b_load(step))
        for kind, addr, first, count in self.aux_loads.get(step.index, ()):
            if kind == "pmem":
                loads.append(self.pmem_load(addr, first, count))
            else:
                loads.append(self.residual_load(addr, self.tile_steps[first]))
        loads[0] = loads[0].with_deps(pop_next=step.index >= 2)
        loads[-1] = loads[-1].with_deps(push_next=True)
        self.instrs.extend(loads)

    def a_load(self, step):
        # Row kt * mlen + mi holds A[m0 + mi, K tile kt0 + kt].
        rows, lane, plan = self.cfg.rows, self.lane, self.plan
        kt = np.arange(step.ktlen)[:, None, None]
        mi = np.arange(step.mlen)[None, :, None]
        first, end, _ = _k_rows(rows, plan.k, plan.k_high, step.kt0 + kt)
        col = first + lane
        index = self.a_off + (step.m0 + mi) * plan.k + col
        self._pack((lane < rows) & (col < end), index)
        return isa.Load(target=isa.Target.SPAD_A, addr=step.a_half * (self.cfg.spad_depth // 2),
                        count=step.ktlen * step.mlen)

    def b_load(self, step):
        # Block kt * ntlen + nt, row r holds B[(kt0 + kt) * rows + r, (nt0 + nt) * cols ...].
        rows, cols, lane = self.cfg.rows, self.cfg.cols, self.lane
        k, n = self.plan.k, self.plan.n
        kt = np.arange(step.ktlen)[:, None, None, None]
        nt = np.arange(step.ntlen)[None, :, None, None]
        r = np.arange(rows)[None, None, :, None]
        first, end, _ = _k_rows(rows, k, self.plan.k_high, step.kt0 + kt)
        brow = first + r
        bcol = (step.nt0 + nt) * cols + lane
        index = self.b_off + brow * n + bcol
        self._pack((lane < cols) & (brow < end) & (bcol < n), index)
        return isa.Load(target=isa.Target.SPAD_B, addr=step.b_half * self.layout.b_half,
                        count=step.ktlen * step.ntlen * rows)

    def pmem_load(self, addr, strip0, n_strips):
        # Beat j of PMEM row i brings bytes j*beat_bytes.. of the row: the gearbox puts the
        # first beat in the lowest bits.
        lane, beat_bytes, per_row = self.lane, self.beat_bytes, self.cfg.pmem_beats_per_row
        row = np.arange(n_strips)[:, None, None]
        beat = np.arange(per_row)[None, :, None]
        byte = (strip0 + row) * self.cfg.cols * 8 + beat * beat_bytes + lane
        self._pack(lane < beat_bytes, self.p_off + byte)
        return isa.Load(target=isa.Target.PMEM, addr=addr, count=n_strips * per_row)

    def residual_load(self, addr, step):
        # Row mi of strip nt at addr + nt * mlen + mi, as the STORE's aux_addr reads it.
        cols, lane, n = self.cfg.cols, self.lane, self.plan.n
        nt = np.arange(step.ntlen)[:, None, None]
        mi = np.arange(step.mlen)[None, :, None]
        col = (step.nt0 + nt) * cols + lane
        index = self.r_off + (step.m0 + mi) * n + col
        self._pack((lane < cols) & (col < n), index)
        return isa.Load(target=isa.Target.SPAD_B, addr=addr, count=step.ntlen * step.mlen)

    # -- MATMULs and STOREs ----------------------------------------------------------------------

    def matmuls(self, step):
        """One MATMUL per (K tile, N strip) of ``step``, shifted in the high K tiles; the first
        pops ``l2e`` (and ``s2e`` when it starts C tile 2 or later), the last pushes ``e2l``
        and, ending its tile, ``e2s``."""
        instrs, rows, plan = self.instrs, self.cfg.rows, self.plan
        a_base = step.a_half * (self.cfg.spad_depth // 2)
        b_base = step.b_half * self.layout.b_half
        c_base = (step.tile % 2) * (self.cfg.acc_depth // 2)
        high = _k_rows(rows, plan.k, plan.k_high, step.kt0 + np.arange(step.ktlen))[2]
        first = len(instrs)
        for kt in range(step.ktlen):
            for nt in range(step.ntlen):
                instrs.append(isa.Matmul(a_addr=a_base + kt * step.mlen,
                                         b_addr=b_base + (kt * step.ntlen + nt) * rows,
                                         acc_addr=c_base + nt * step.mlen, m_len=step.mlen,
                                         accumulate=not (step.first_k and kt == 0),
                                         shift=bool(high[kt])))
        instrs[first] = instrs[first].with_deps(
            pop_prev=True, pop_next=step.first_k and step.tile >= 2)
        instrs[-1] = instrs[-1].with_deps(push_prev=step.index + 2 < len(self.steps),
                                          push_next=step.last_k)

    def store(self, step):
        """One STORE drains the tile row by row: beat (mi, nt) is acc[base + nt*mlen + mi]."""
        ep, layout, cols, n = self.ep, self.layout, self.cfg.cols, self.plan.n
        fields = {}
        if ep is not None:
            slot = step.tile % layout.slots
            fields = {"op": ep.op,
                      "param_addr": step.nt0 if layout.pmem_whole else slot * layout.pmem_rows,
                      "aux_addr": layout.res_base + slot * layout.res_rows if ep.residual
                      else 0}
        self.instrs.append(isa.Store(acc_addr=(step.tile % 2) * (self.cfg.acc_depth // 2),
                                     rows=step.mlen, strips=step.ntlen, stride=step.mlen,
                                     pop_prev=True, push_prev=step.tile + 2 < self.n_tiles,
                                     **fields))
        mi = np.arange(step.mlen)[:, None, None]
        nt = np.arange(step.ntlen)[None, :, None]
        col = (step.nt0 + nt) * cols + np.arange(cols)
        index = (step.m0 + mi) * n + col
        self.unpack_parts.append(np.where(col < n, index, self.discard).reshape(-1, cols))


def rebind(base, epilogue, k, n):
    """``base`` (a compiled epilogue GEMM) with another epilogue of the same op: the same tiles,
    new SET values and PMEM bytes. The index tensors are shared, not copied. ``None`` when the
    epilogues do not lower to the same SETs."""
    cfg = base.cfg
    lowered = lower(epilogue, cfg, n=n, k=k)
    old = base.meta["epilogue"]
    sets = [number for number, instr in enumerate(base.instrs) if isinstance(instr, isa.Set)]
    if (lowered.op != old.op or [index for index, _ in lowered.sets]
            != [base.instrs[number].index for number in sets]):
        return None
    instrs = list(base.instrs)
    for number, (_, value) in zip(sets, lowered.sets):
        instrs[number] = dataclasses.replace(instrs[number], value=int(value))
    params = torch.from_numpy(pmem_bytes(lowered, cfg.cols).reshape(-1).view(np.int8).copy())
    if tuple(params.shape) != tuple(base.constants["params"].shape):
        return None
    return Program(cfg, instrs, inputs=base.inputs, outputs=base.outputs,
                   pack_index=base.pack_index, unpack_index=base.unpack_index,
                   constants={"params": params}, meta={**base.meta, "epilogue": lowered})
