"""The tiler's cost model: the closed forms that score a blocking, the step-by-step timeline
of the three units, and the size of a plan's program (see "Choosing the blocking" in
docs/tiler.md)."""

import numpy as np

from ...hw.latencies import Latencies
from ..epilogue import lower
from .layout import _Epilogue, _aux_groups, _layout_of
from .steps import (_MAX_TAPER, _MBlocks, _blocks, _chunks, _m_blocks, _max, _min,
                    _split_chunks, _step_table, _tile_blocks, _where, k_tiles)

__all__ = ["program_size"]


#: Cycles of fixed cost assumed for every step (token hand-over between the units): a weight
#: of the closed-form estimate, not a latency of the hardware (the exact timing of a candidate
#: comes from the cycle model, see docs/tiler.md).
_STEP_OVERHEAD = 2
#: Cycles the estimate assumes between a beat entering the epilogue and its result leaving the
#: core: a weight of the ranking, like _STEP_OVERHEAD (Latencies.of(cfg).epilogue.latency is
#: the hardware's figure, 33 to 39 cycles by preset; the plans are ranked with this one).
_EPILOGUE_LATENCY = 16


def _store_cycles(cfg, passes, beats):
    """Cycles of a STORE of ``beats`` beats: the epilogue takes one every ``ratio`` cycles,
    each beat ``passes`` times."""
    return passes * Latencies.of(cfg).epilogue.ratio * beats


def _matmul_cycles(cfg, mlen):
    # The execute unit's steady-state cost (hw/execute/): the weight preload of the next
    # MATMUL (rows reads of scratchpad B) hides behind this one's stream when it has rows
    # operand rows; no weight bank waits to drain.
    return _max(mlen, Latencies.of(cfg).preload)


def _blocks_matmul_cycles(cfg, blocks):
    """The sum of :func:`_matmul_cycles` over the M blocks ``blocks`` (an
    :class:`~bertaccel.sw.tiler.steps._MBlocks`)."""
    tail, taper = blocks.tail, blocks.taper
    ends = sum((tail > 0) * (i <= taper) * _matmul_cycles(cfg, tail << i)
               for i in range(_MAX_TAPER + 1))
    return (blocks.full * _matmul_cycles(cfg, blocks.mb)
            + (blocks.rest > 0) * _matmul_cycles(cfg, blocks.rest) + ends)


def _operand_beats(m, kt_total, b_row_beats, n_mb, n_kb, n_nb, order):
    """The operand beats a blocking loads in ``order``: ``(a_beats, b_beats)``, each operand's
    beats (``b_row_beats`` per k tile of B) times the passes over it (one while its block stays
    resident)."""
    a_all = m * kt_total
    b_all = kt_total * b_row_beats
    once_k = n_kb == 1
    if order == "m":
        return (a_all * _where(once_k, 1, n_nb), b_all * _where(once_k & (n_nb == 1), 1, n_mb))
    return (a_all * _where(once_k & (n_mb == 1), 1, n_nb), b_all * _where(once_k, 1, n_mb))


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


def _score_epilogue(cfg, blocks, kt_total, nt_total, kb, nb, order, ep, batch=1):
    """Closed-form estimate of a blocking with an epilogue, for M blocks ``blocks``
    (:class:`_MBlocks`), in a batch of ``batch``: ``(cycles, n_steps, n_tiles)`` (the cycles
    the whole batch's, the counts one member's). Only the first loads and the last drains are
    exposed, once a batch."""
    rows = cfg.rows
    m = blocks.full * blocks.mb + blocks.rest + blocks.tail
    n_mb = blocks.count
    n_kb = -(-kt_total // kb)
    n_nb = -(-nt_total // nb)
    n_steps = n_mb * n_kb * n_nb
    last_n = nt_total - (n_nb - 1) * nb
    compute = (_blocks_matmul_cycles(cfg, blocks) * kt_total * nt_total
               + _STEP_OVERHEAD * n_steps)
    a_beats, b_beats = _operand_beats(m, kt_total, nt_total * rows, n_mb, n_kb, n_nb, order)
    per_row = cfg.pmem_beats_per_row
    aux = ep.residual * m * nt_total
    aux = aux + nt_total * per_row * (1 if nt_total <= cfg.pmem_depth else n_mb)
    k_first, n_first = _min(kb, kt_total), _min(nb, nt_total)
    first = blocks.first * k_first + k_first * n_first * rows
    # With one K block, the first tile's parameters and residual come with the first step.
    first = first + (n_kb == 1) * (ep.residual * blocks.first * n_first + n_first * per_row)
    stored = _store_cycles(cfg, ep.passes, m * nt_total)
    # The last drain, and what the drain before it leaves over the last tile's compute.
    last = _store_cycles(cfg, ep.passes, blocks.last * last_n)
    before = _store_cycles(cfg, ep.passes, blocks.before_last * last_n)
    last = last + _max(0, before - _matmul_cycles(cfg, blocks.last) * kt_total * last_n)
    cycles = (first + _max(_max(batch * compute, batch * (a_beats + b_beats + aux) - first),
                           batch * stored)
              + last + cfg.mesh_latency + _EPILOGUE_LATENCY)
    return cycles, n_steps, n_mb * n_nb


def _timeline(plan, cfg, ep=None):
    """Estimated cycles of ``plan``, from a step-by-step timeline of the three units."""
    rows = cfg.rows
    table = _step_table(plan, cfg)
    c = table.columns
    mlen, ktlen, ntlen, last_k = c["mlen"], c["ktlen"], c["ntlen"], c["last_k"]
    # The load beats of each step's group, and the MATMUL cycles of each step.
    beats = c["load_a"] * ktlen * mlen + c["load_b"] * ktlen * ntlen * rows
    passes, latency = 1, 0
    if ep is not None:
        passes, latency = ep.passes, _EPILOGUE_LATENCY
        per_row = cfg.pmem_beats_per_row
        nt_total = -(-plan.n // cfg.cols)
        whole = nt_total <= cfg.pmem_depth
        beats = beats + last_k * (ep.residual * mlen * ntlen + (not whole) * ntlen * per_row)
        if whole:
            beats[int(np.argmax(last_k))] += nt_total * per_row    # with the first store
    compute = _STEP_OVERHEAD + ktlen * ntlen * _matmul_cycles(cfg, mlen)
    waits = (c["first_k"] * (c["tile"] >= 2)).astype(bool)
    drains = _store_cycles(cfg, passes, ntlen * mlen)
    # A step that neither waits for a store nor ends a tile moves only the load and execute
    # timelines, and a run of equal ones settles: once a step moved both by the same cycles as
    # the one before it, every later step of the run does too, and the rest of the run is
    # jumped over. The loop runs over runs of equal steps (all other runs are one step long).
    plain = ~(waits | last_k.astype(bool))
    alike = np.zeros(len(plain), dtype=bool)        # step i repeats step i - 1
    alike[1:] = (plain[1:] & plain[:-1] & (beats[1:] == beats[:-1])
                 & (compute[1:] == compute[:-1]))
    heads = np.flatnonzero(~alike)
    runs = zip(*(column[heads].tolist() for column in (beats, compute, waits, c["tile"],
                                                       last_k, drains)),
               np.diff(np.append(heads, len(plain))).tolist())
    load_free = exec_free = store_free = 0
    before = 0                          # exec_free of the step before the last
    store_end = [0, 0]                  # the tiles before tile 0 end at 0
    mesh_latency = cfg.mesh_latency
    # max() written out: this loop is most of the planner's time.
    for beat, cost, wait, tile, last, drain, count in runs:
        gap = None                      # the timelines' distances after the step before
        for done in range(1, count + 1):
            start = before if before > load_free else load_free
            load_free = start + beat
            start = exec_free if exec_free > load_free else load_free
            if wait and store_end[tile] > start:
                start = store_end[tile]
            before, exec_free = exec_free, start + cost
            if last:
                start = exec_free + mesh_latency
                if store_free > start:
                    start = store_free
                store_free = start + drain
                store_end.append(store_free)
            if done < count:
                now = (load_free - exec_free, before - exec_free)
                if now == gap:
                    jump = (count - done) * (exec_free - before)
                    load_free, exec_free, before = (load_free + jump, exec_free + jump,
                                                     before + jump)
                    break
                gap = now
    return store_free + latency


def program_size(cfg, plan, *, epilogue=None):
    """The size of the program :func:`compile_gemm` writes for ``plan``, in closed form (without
    writing it: a bound on memory and time before any work).

    Returns
    -------
    dict
        ``instructions`` (``len(program.instrs)``), ``matmuls``, ``data_beats``
        (``program.n_data_beats``) and ``out_beats`` (``program.n_out_beats``).
    """
    rows, cols = cfg.rows, cfg.cols
    m, k, n = plan.m, plan.k, plan.n
    kt_total = k_tiles(rows, k, plan.k_high)
    nt_total = -(-n // cols)
    n_mb = len(_m_blocks(m, plan.mb, plan.ends)[0])
    n_kb = -(-kt_total // plan.kb)
    n_nb = -(-nt_total // plan.nb)
    batch = plan.batch
    n_tiles = batch * n_mb * n_nb
    a_beats, b_beats = _operand_beats(m, kt_total, nt_total * rows, n_mb, n_kb, n_nb,
                                      plan.order)
    loads = _operand_loads(n_mb, n_kb, n_nb, plan.order)
    matmuls = batch * n_mb * kt_total * nt_total
    instructions = matmuls + batch * sum(loads) + n_tiles + _split_loads(
        cfg, min(plan.kb, kt_total), min(plan.nb, nt_total), epilogue is None or n_kb > 1)
    data_beats = batch * (a_beats + b_beats)
    out_beats = batch * m * nt_total
    if epilogue is not None:
        ep, lowered = _Epilogue.of(epilogue), lower(epilogue, cfg, n=n, k=k)
        per_row = cfg.pmem_beats_per_row
        whole = nt_total <= cfg.pmem_depth
        data_beats += nt_total * per_row * (1 if whole else batch * n_mb)
        # The per-tile data's LOADs: a chunk of strips in each group it spreads over.
        m_blocks = _MBlocks.of(m, plan.mb, plan.tail, plan.taper)
        lo, hi = _aux_groups(n_kb, n_tiles, _layout_of(cfg, kt_total, n, m_blocks, plan.kb,
                                                       plan.nb, ep, batch).slots)
        mlen, nt0, ntlen = _tiles(plan, nt_total)
        chunks = int(np.minimum(ntlen, hi - lo + 1).sum())     # chunks of strips, a LOAD each
        instructions += len(lowered.sets) + (min(nt_total, int(hi[0] - lo[0]) + 1) if whole
                                             else chunks)
        if ep.residual:
            data_beats += batch * m * nt_total
            instructions += chunks
        if lowered.tail is not None:
            # A tile with tail strips stores them again after the tail's SETs, and the head's
            # SETs follow unless it is the last tile.
            tail = np.maximum(nt0 + ntlen - np.maximum(nt0, (n - lowered.tail[0]) // cols), 0)
            tails, sets = int((tail > 0).sum()), len(lowered.tail[1])
            instructions += tails * (1 + 2 * sets) - sets * int(tail[-1] > 0)
            out_beats += int((tail * mlen).sum())
    return {"instructions": instructions, "matmuls": matmuls, "data_beats": data_beats,
            "out_beats": out_beats}


def _split_loads(cfg, ktlen, ntlen, split):
    """The LOADs that cutting the first step's (``ktlen`` K tiles of ``ntlen`` strips) into
    chunks adds (0 unless ``split``; see :func:`_chunks`)."""
    if not split:
        return 0
    chunks = _chunks(ktlen, ntlen, _split_chunks(cfg, ktlen * ntlen))
    return sum(1 + (kt1 > kt0) for kt0, kt1, _, _ in chunks) - 2


def _tiles(plan, nt_total):
    """``(mlen, nt0, ntlen)``, int64 arrays over the C tiles in program order: their rows,
    first N strip and strips."""
    _, mlen = _m_blocks(plan.m, plan.mb, plan.ends)
    nt0, ntlen = _blocks(nt_total, plan.nb)
    mi, ni = _tile_blocks(plan.order, len(mlen), len(nt0))
    return tuple(np.tile(values, plan.batch) for values in (mlen[mi], nt0[ni], ntlen[ni]))


def _operand_loads(n_mb, n_kb, n_nb, order):
    """``(a_loads, b_loads)``: the LOADs of each operand (see :func:`_steps`: an operand is
    reloaded at every step unless its block stays the same from one step to the next)."""
    n_steps = n_mb * n_kb * n_nb
    if order == "m":
        return (n_mb if n_kb == 1 else n_steps,
                1 if n_kb == 1 and n_nb == 1 else n_steps)
    return (1 if n_kb == 1 and n_mb == 1 else n_steps,
            n_nb if n_kb == 1 else n_steps)
