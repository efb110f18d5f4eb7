"""The GEMM tiler: ``C = A @ B`` on the weight-stationary array, double buffered.

Shapes. ``A`` is ``m x k``, ``B`` is ``k x n``. The array holds one ``rows x cols`` weight block, so
``k`` is cut into ``KT = ceil(k / rows)`` K tiles and ``n`` into ``NT = ceil(n / cols)`` N strips;
edge tiles are zero-padded by the pack index, never by the program.

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

Choosing the blocking. :func:`plan_gemm` searches ``(Mb, Kb, Nb, order)`` under
``Mb*Kb <= spad_depth/2``, ``Kb*Nb*rows <= spad_depth/2``, ``Mb*Nb <= acc_depth/2`` and
``Mb <= isa.FIELD_MAX`` and keeps, of the plans within 1% of the fewest estimated cycles, the
one with fewest steps (so fewest instructions). The estimate: the data stream moves one
beat a cycle concurrently with compute, a MATMUL costs ``max(m_len, rows + 2)`` cycles, the first
step's loads and the last tile's store are exposed. A closed-form score ranks all candidates and a
step-by-step timeline ranks the best few.
"""

import dataclasses
import heapq
from dataclasses import dataclass

import numpy as np

from ..hw import isa
from ..hw.config import AccelConfig
from .program import Program, ProgramError

__all__ = ["TilePlan", "plan_gemm", "compile_gemm"]

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


def _check_dim(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"GEMM dimension {name} must be an int of at least 1, not {value!r}")
    return int(value)


def _blocks(total, size):
    """``(start, length)`` of the blocks of ``size`` covering ``range(total)``."""
    return [(start, min(size, total - start)) for start in range(0, total, size)]


def _steps(plan, cfg):
    """The steps of ``plan``, in program order."""
    rows, cols = cfg.rows, cfg.cols
    kt_total = -(-plan.k // rows)
    nt_total = -(-plan.n // cols)
    m_blocks = _blocks(plan.m, plan.mb)
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


def _matmul_cycles(cfg, mlen):
    return max(mlen, cfg.rows + 2)


def _timeline(plan, cfg):
    """Estimated cycles of ``plan``, from a step-by-step timeline of the three units."""
    rows = cfg.rows
    load_free = exec_free = store_free = 0
    exec_end = []
    store_end = []
    for step in _steps(plan, cfg):
        beats = (step.load_a * step.ktlen * step.mlen
                 + step.load_b * step.ktlen * step.ntlen * rows)
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
            store_free = start + step.ntlen * step.mlen
            store_end.append(store_free)
    return store_free


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
    a_all = m * kt_total
    b_all = kt_total * nt_total * rows
    if order == "m":
        a_beats = a_all * (1 if n_kb == 1 else n_nb)
        b_beats = b_all * (1 if n_kb == 1 and n_nb == 1 else n_mb)
    else:
        b_beats = b_all * (1 if n_kb == 1 else n_mb)
        a_beats = a_all * (1 if n_kb == 1 and n_mb == 1 else n_nb)
    first = min(mb, m) * min(kb, kt_total) + min(kb, kt_total) * min(nb, nt_total) * rows
    stored = m * nt_total
    cycles = (first + max(compute, a_beats + b_beats - first, stored)
              + last_m * last_n + cfg.mesh_latency)
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


def plan_gemm(cfg, m, k, n):
    """Choose the blocking of ``(m x k) @ (k x n)`` for ``cfg``.

    Parameters
    ----------
    cfg : AccelConfig
        The build.
    m, k, n : int
        The GEMM dimensions, each at least 1.

    Returns
    -------
    TilePlan
        Of the plans estimated within 1% of the fewest cycles, the one with fewest steps.

    Raises
    ------
    ValueError
        If a dimension is not an int of at least 1 (the message names it).
    ProgramError
        If ``cfg`` cannot hold even one tile.
    """
    if not isinstance(cfg, AccelConfig):
        raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
    m, k, n = _check_dim("m", m), _check_dim("k", k), _check_dim("n", n)
    rows = cfg.rows
    kt_total = -(-k // rows)
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
                        n_tiles=n_tiles, est_cycles=cycles, macs_per_cycle=cfg.macs_per_cycle)
        if n_steps <= _TIMED_MAX_STEPS:
            plan = dataclasses.replace(plan, est_cycles=_timeline(plan, cfg))
        timed.append(plan)
    # Within a hair of the fastest, prefer fewer steps: fewer instructions, and the estimate
    # is not that precise.
    fastest = min(plan.est_cycles for plan in timed)
    best = min((plan for plan in timed if plan.est_cycles <= fastest * (1 + _CYCLES_SLACK)),
               key=lambda plan: (plan.n_steps, plan.est_cycles))
    return best


def _check_plan(cfg, plan):
    half_spad, half_acc, rows = cfg.spad_depth // 2, cfg.acc_depth // 2, cfg.rows
    if plan.order not in ("m", "n"):
        raise ProgramError(f"plan order must be 'm' or 'n', not {plan.order!r}")
    for name in ("mb", "kb", "nb"):
        value = getattr(plan, name)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ProgramError(f"plan {name} must be an int of at least 1, not {value!r}")
    if plan.mb * plan.kb > half_spad:
        raise ProgramError(f"plan mb * kb = {plan.mb * plan.kb} does not fit half of scratchpad "
                           f"A ({half_spad} rows)")
    if plan.kb * plan.nb * rows > half_spad:
        raise ProgramError(f"plan kb * nb * rows = {plan.kb * plan.nb * rows} does not fit half "
                           f"of scratchpad B ({half_spad} rows)")
    if plan.mb * plan.nb > half_acc:
        raise ProgramError(f"plan mb * nb = {plan.mb * plan.nb} does not fit half of the "
                           f"accumulator ({half_acc} rows)")
    if plan.mb > isa.FIELD_MAX:
        raise ProgramError(f"plan mb = {plan.mb} exceeds m_len's maximum {isa.FIELD_MAX}")


def compile_gemm(cfg, m, k, n, *, plan=None):
    """Compile ``C = A @ B`` for ``A`` of ``m x k`` and ``B`` of ``k x n`` int8.

    Parameters
    ----------
    cfg : AccelConfig
        The build to compile for.
    m, k, n : int
        The GEMM dimensions, each at least 1.
    plan : TilePlan, optional
        A blocking to use instead of the one :func:`plan_gemm` chooses (its ``m, k, n`` must
        match). Its estimate fields are not used.

    Returns
    -------
    Program
        Inputs ``{"a": (m, k), "b": (k, n)}``, outputs ``{"c": (m, n)}``; ``meta["plan"]`` is
        the :class:`TilePlan`.

    Raises
    ------
    ValueError
        If a dimension is not an int of at least 1 (the message names it).
    ProgramError
        If ``cfg`` cannot hold one tile, or ``plan`` does not fit ``cfg`` or the GEMM.
    """
    if not isinstance(cfg, AccelConfig):
        raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
    m, k, n = _check_dim("m", m), _check_dim("k", k), _check_dim("n", n)
    if plan is None:
        plan = plan_gemm(cfg, m, k, n)
    elif (plan.m, plan.k, plan.n) != (m, k, n):
        raise ProgramError(f"plan is for a {plan.m}x{plan.k}x{plan.n} GEMM, not {m}x{k}x{n}")
    _check_plan(cfg, plan)

    rows, cols, lanes = cfg.rows, cfg.cols, cfg.lanes
    half_spad, half_acc = cfg.spad_depth // 2, cfg.acc_depth // 2
    a_off, b_off = 0, m * k
    pad = m * k + k * n  # the zero element of the pack source
    discard = m * n      # the discard slot of the unpack destination

    steps = list(_steps(plan, cfg))
    n_steps = len(steps)
    n_tiles = steps[-1].tile + 1
    instrs, pack_parts, unpack_parts = [], [], []
    lane = np.arange(lanes)

    def emit_loads(step):
        loads = []
        if step.load_a:
            loads.append(isa.Load(target=isa.Target.SPAD_A, addr=step.a_half * half_spad,
                                  count=step.ktlen * step.mlen))
            kt = np.arange(step.ktlen)[:, None, None]
            mi = np.arange(step.mlen)[None, :, None]
            col = (step.kt0 + kt) * rows + lane
            index = a_off + (step.m0 + mi) * k + col
            pack_parts.append(np.where((lane < rows) & (col < k), index, pad).reshape(-1, lanes))
        if step.load_b:
            loads.append(isa.Load(target=isa.Target.SPAD_B, addr=step.b_half * half_spad,
                                  count=step.ktlen * step.ntlen * rows))
            kt = np.arange(step.ktlen)[:, None, None, None]
            nt = np.arange(step.ntlen)[None, :, None, None]
            r = np.arange(rows)[None, None, :, None]
            brow = (step.kt0 + kt) * rows + r
            bcol = (step.nt0 + nt) * cols + lane
            index = b_off + brow * n + bcol
            valid = (lane < cols) & (brow < k) & (bcol < n)
            pack_parts.append(np.where(valid, index, pad).reshape(-1, lanes))
        loads[0] = loads[0].with_deps(pop_next=step.index >= 2)
        loads[-1] = loads[-1].with_deps(push_next=True)
        instrs.extend(loads)

    def emit_matmuls(step):
        a_base = step.a_half * half_spad
        b_base = step.b_half * half_spad
        c_base = (step.tile % 2) * half_acc
        first = len(instrs)
        for kt in range(step.ktlen):
            for nt in range(step.ntlen):
                instrs.append(isa.Matmul(a_addr=a_base + kt * step.mlen,
                                         b_addr=b_base + (kt * step.ntlen + nt) * rows,
                                         acc_addr=c_base + nt * step.mlen, m_len=step.mlen,
                                         accumulate=not (step.first_k and kt == 0)))
        instrs[first] = instrs[first].with_deps(
            pop_prev=True, pop_next=step.first_k and step.tile >= 2)
        instrs[-1] = instrs[-1].with_deps(push_prev=step.index + 2 < n_steps,
                                          push_next=step.last_k)

    def emit_store(step):
        # One STORE drains the tile row by row: beat (mi, nt) is acc[base + nt*mlen + mi].
        instrs.append(isa.Store(acc_addr=(step.tile % 2) * half_acc, rows=step.mlen,
                                strips=step.ntlen, stride=step.mlen, pop_prev=True,
                                push_prev=step.tile + 2 < n_tiles))
        mi = np.arange(step.mlen)[:, None, None]
        nt = np.arange(step.ntlen)[None, :, None]
        col = (step.nt0 + nt) * cols + np.arange(cols)
        index = (step.m0 + mi) * n + col
        unpack_parts.append(np.where(col < n, index, discard).reshape(-1, cols))

    emit_loads(steps[0])
    for step in steps:
        if step.index + 1 < n_steps:
            emit_loads(steps[step.index + 1])
        emit_matmuls(step)
        if step.last_k:
            emit_store(step)

    return Program(cfg, instrs, inputs={"a": (m, k), "b": (k, n)}, outputs={"c": (m, n)},
                   pack_index=np.concatenate(pack_parts), unpack_index=np.concatenate(unpack_parts),
                   meta={"plan": plan})
