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
* step ``s``'s last LOAD pushes ``l2e``; its first MATMUL pops it. The first step's loads come
  in chunks (:func:`_chunks`): each chunk's LOAD of weight blocks pushes ``l2e``, and the
  MATMUL of the chunk's first block pops it.
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

Batches. ``batch`` independent GEMMs of one shape and epilogue (attention's heads) compile into
one program: member ``i``'s steps follow member ``i - 1``'s, numbered on (steps, C tiles and
operand halves count across members), so the tokens above overlap one member's drain with the
next one's loads and compute as they do a GEMM's own tiles; a barrier between them
(:func:`~bertaccel.sw.sequence.concat`) would leave each member's loads, compute and drain in
turn. The epilogue's SETs and PMEM are shared: they are loaded once. Member ``i``'s operands and
results are rows ``i * m ...`` of ``A`` and ``C`` (and the residual) and ``i * k ...`` of ``B``.

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

A :class:`~bertaccel.sw.epilogue.Tail` (two single-pass epilogues of one op, the second on the
last columns) keeps one PMEM row a strip, each column with its own parameters; a tile whose N
block holds tail columns is stored once with the head's registers, then, after SETs of the
tail's, its strips from the first tail column's on again (and the head's SETs follow where
another STORE does). That second STORE is the tile's last reader, so it pushes ``s2e``; each
column is unpacked from the STORE of its own epilogue.

Where the epilogue data lives, and why the tokens protect it. The store unit reads PMEM and the
residual but pushes nothing the load unit pops: the only way to hold back a LOAD is ``e2l``,
pushed by MATMULs. The chain that does it: STORE(t) pushes ``s2e`` after its last read; the first
MATMUL of tile ``t + 2`` pops it (its first step ``f``); the last MATMUL of step ``f`` pushes
``e2l``; the first LOAD of step ``f + 2``'s group pops it, and every later LOAD follows it in the
load unit. So a LOAD in group ``q >= first_step(t + 2) + 2`` cannot overwrite what STORE(t)
reads. A tile's data must also be visible to its STORE: it is, in any group
``q <= last_step(u)``, because that group's last LOAD pushes the ``l2e`` a MATMUL of tile ``u``
pops before the tile's last MATMUL pushes ``e2s``. So:

* the whole PMEM (all N strips, when they fit in ``pmem_depth``) is loaded once, in the groups
  of the first tile's steps; nothing overwrites it;
* the per-tile data -- the residual tile (row ``mi`` of strip ``s`` at ``slot base + s * m_len +
  mi``, as the STORE's ``aux_addr`` reads it), and PMEM rows when the strips do not all fit --
  goes into slot ``u mod B``. Slot ``u mod B`` was last read by STORE(``u - B``), so it may be
  written from group ``first_step(u - B + 2) + 2`` to tile ``u``'s last step, and the slots are
  enough when that range holds the last step: with ``n_kb`` steps per tile the rule above needs
  ``u*n_kb + n_kb - 1 >= (u - B + 2)*n_kb + 2``, that is ``(B - 1) * n_kb >= 3``: ``B = 4`` with
  one step a tile, 3 with two, 2 with three or more (never more than the tiles). The residual
  slots sit in scratchpad B above the two weight halves, which shrink to make room.

Both are cut into chunks of N strips spread over the groups of the tile's steps that may write
them (past the head group, whose loads nothing hides), one LOAD each: the loads of a step hide
behind the MATMULs of the step before, so a chunk per step stays hidden where one LOAD of a
whole residual tile and PMEM would hold the execute unit back (on 16x16, all-MiniLM-L6-v2's
LayerNorm GEMMs at 32 tokens: 960 beats against a step's 768 cycles of MATMULs).

Choosing the blocking. :func:`plan_gemm` searches ``(Mb, Kb, Nb, order)`` under
``Mb*Kb <= spad_depth/2``, ``Kb*Nb*rows <= spad_depth/2``, ``Mb*Nb <= acc_depth/2`` and
``Mb <= isa.FIELD_MAX``. A closed-form score ranks all candidates (the data stream moves one
beat a cycle concurrently with compute, a MATMUL costs ``max(m_len, rows)`` cycles, the first
step's loads and the last tile's store are exposed), and the best few are timed: where their
programs are small (:data:`_EXACT_MAX_INSTRUCTIONS` instructions in all) each is run on the cycle
model (:class:`~bertaccel.sw.cycles.CycleStepper`, the instructions only) and the fastest kept;
otherwise a step-by-step timeline estimates each, and of those within 1% of the fewest
estimated cycles the one with fewest steps (so fewest instructions) is kept. The exact run
matters most where the estimate is coarsest, on small GEMMs: the heads of attention and the
weight GEMMs of a short sequence, whose first loads and per-step hand-overs are a large share.
"""

import dataclasses
import functools
import heapq
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from ..golden.intops import MAX_ROW
from ..hw import isa
from ..hw.config import AccelConfig
from .cycles import CycleStepper
from .epilogue import lower, pmem_bytes
from .program import Program, ProgramError

__all__ = ["TilePlan", "plan_gemm", "compile_gemm", "program_size", "rebind", "GemmGroups",
           "k_tiles"]

#: Cycles of fixed cost assumed for every step (token hand-over between the units).
_STEP_OVERHEAD = 2
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
        count where the planner ran it (see "Choosing the blocking").
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
        The high rows of ``K`` (see "High rows" in the module docstring).
    taper : int
        Blocks of ``tail * 2**taper`` down to ``2 * tail`` rows before the tail (0: none): the
        rows before them are cut into blocks of ``mb``.
    batch : int
        Independent GEMMs of this shape run as one (see "Batches" in the module docstring):
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


@dataclass(frozen=True)
class _Step:
    index: int
    member: int
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


def _ends(tail, taper):
    """The last M blocks of a plan with ``tail`` and ``taper``: ``tail * 2**taper`` rows down
    to ``tail`` (none when ``tail`` is 0)."""
    return [tail << i for i in range(taper, -1, -1)] if tail else []


def k_tiles(rows, k, k_high):
    """K tiles of a GEMM of depth ``k`` with ``k_high`` high rows on an array of ``rows`` rows:
    each part tiled alone."""
    return -(-k_high // rows) + -(-(k - k_high) // rows)


def _k_rows(rows, k, k_high, kt):
    """``(first, end, high)``: the rows of ``K`` that K tiles ``kt`` (an array) hold, from
    ``first`` while below ``end``; and whether each is a high K tile."""
    kt_high = -(-k_high // rows)
    high = kt < kt_high
    first = np.where(high, kt * rows, k_high + (kt - kt_high) * rows)
    return first, np.where(high, k_high, k), high


def _check_dim(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"GEMM dimension {name} must be an int of at least 1, not {value!r}")
    return int(value)


def _blocks(total, size):
    """``(starts, lengths)`` (int64 arrays) of the blocks of ``size`` covering
    ``range(total)``."""
    starts = np.arange(0, total, size, dtype=np.int64)
    return starts, np.minimum(size, total - starts)


def _m_blocks(m, mb, ends):
    """``(starts, lengths)`` of the M blocks: the rows before the last blocks ``ends`` (the
    plan's :attr:`TilePlan.ends`) in blocks of ``mb``, then those."""
    start = m - sum(ends)
    starts, lengths = _blocks(start, mb)
    if ends:
        ends = np.array(ends, dtype=np.int64)
        starts = np.append(starts, start + np.cumsum(ends) - ends)
        lengths = np.append(lengths, ends)
    return starts, lengths


# The planner scores many blockings at once on numpy arrays with the same functions that work
# one plan out on ints; these three pick the numpy form only when they are given arrays.

def _where(cond, a, b):
    return np.where(cond, a, b) if isinstance(cond, np.ndarray) else (a if cond else b)


def _max(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.maximum(a, b)
    return max(a, b)


def _min(a, b):
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return np.minimum(a, b)
    return min(a, b)


#: The largest :attr:`TilePlan.taper` the planner tries.
_MAX_TAPER = 3


@dataclass(frozen=True)
class _MBlocks:
    """The lengths of the M blocks (:func:`_m_blocks`) in closed form: ``full`` blocks of
    ``mb`` rows, a ``rest`` block (0: none), then, when ``tail`` is not 0, blocks of ``tail *
    2**taper`` down to ``tail`` rows. The fields are ints, or arrays for many blockings at
    once."""
    mb: object
    full: object
    rest: object
    tail: object
    taper: object = 0

    @classmethod
    def of(cls, m, mb, tail, taper=0):
        full, rest = divmod(m - tail * ((2 << taper) - 1), mb)
        return cls(mb, full, rest, tail, taper)

    @property
    def count(self):
        return self.full + (self.rest > 0) + (self.tail > 0) * (self.taper + 1)

    @property
    def first(self):
        return _where(self.full > 0, self.mb,
                      _where(self.rest > 0, self.rest, self.tail << self.taper))

    @property
    def last(self):
        return _where(self.tail > 0, self.tail, _where(self.rest > 0, self.rest, self.mb))

    @property
    def before_last(self):
        """The block before the last (0: none)."""
        full = _where(self.full > 0, self.mb, 0)
        plain = _where(self.rest > 0, full, _where(self.full > 1, self.mb, 0))
        return _where(self.tail > 0, _where(self.taper > 0, 2 * self.tail,
                                            _where(self.rest > 0, self.rest, full)), plain)

    @property
    def biggest(self):
        return _max(_max(_where(self.full > 0, self.mb, 0), self.rest),
                    self.tail << self.taper)

    def matmul_cycles(self, cfg):
        """The sum of :func:`_matmul_cycles` over the blocks."""
        ends = sum((self.tail > 0) * (i <= self.taper) * _matmul_cycles(cfg, self.tail << i)
                   for i in range(_MAX_TAPER + 1))
        return (self.full * _matmul_cycles(cfg, self.mb)
                + (self.rest > 0) * _matmul_cycles(cfg, self.rest) + ends)


#: The columns of a :class:`_StepTable`, as the fields of :class:`_Step` name them.
_STEP_COLUMNS = ("member", "tile", "m0", "mlen", "kt0", "ktlen", "nt0", "ntlen", "load_a",
                 "a_half", "load_b", "b_half", "first_k", "last_k")


@dataclass(frozen=True, eq=False)
class _StepTable:
    """The steps of a plan in program order, one numpy int64 column per field of
    :class:`_Step` (``columns[name]``; the step's index is its position)."""
    columns: dict
    n_tiles: int

    def __len__(self):
        return len(self.columns["tile"])

    def steps(self):
        """The :class:`_Step` of every step, in program order."""
        lists = [self.columns[name].tolist() for name in _STEP_COLUMNS]
        flags = {_STEP_COLUMNS.index(name) for name in ("load_a", "load_b", "first_k",
                                                        "last_k")}
        for index, values in enumerate(zip(*lists)):
            yield _Step(index, *(bool(v) if n in flags else v for n, v in enumerate(values)))


def _tile_blocks(order, n_mb, n_nb):
    """``(mi, ni)``, int64 arrays: the M block and N block of each C tile of a member, in
    program order (``order`` ``"m"``: M blocks outermost)."""
    tiles = np.arange(n_mb * n_nb, dtype=np.int64)
    if order == "m":
        return np.divmod(tiles, n_nb)
    ni, mi = np.divmod(tiles, n_mb)
    return mi, ni


def _step_table(plan, cfg):
    """The steps of ``plan``: the members of a batch one after the other, in each C tiles in
    ``plan.order``, K blocks inside. An operand is loaded when its block (or member) differs
    from the one the step before used, into the other half."""
    kt_total = k_tiles(cfg.rows, plan.k, plan.k_high)
    nt_total = -(-plan.n // cfg.cols)
    m0, mlen = _m_blocks(plan.m, plan.mb, plan.ends)
    kt0, ktlen = _blocks(kt_total, plan.kb)
    nt0, ntlen = _blocks(nt_total, plan.nb)
    n_mb, n_kb, n_nb = len(m0), len(kt0), len(nt0)
    tiles = np.arange(n_mb * n_nb, dtype=np.int64)
    mi, ni = _tile_blocks(plan.order, n_mb, n_nb)
    batch = plan.batch
    mi, ni = np.tile(np.repeat(mi, n_kb), batch), np.tile(np.repeat(ni, n_kb), batch)
    ki = np.tile(np.arange(n_kb, dtype=np.int64), len(tiles) * batch)
    member = np.repeat(np.arange(batch, dtype=np.int64), len(tiles) * n_kb)

    def loads(first, second):
        changed = np.ones(len(first), dtype=bool)
        changed[1:] = ((first[1:] != first[:-1]) | (second[1:] != second[:-1])
                       | (member[1:] != member[:-1]))
        return changed, (np.cumsum(changed) - 1) % 2

    load_a, a_half = loads(mi, ki)
    load_b, b_half = loads(ki, ni)
    columns = {"member": member,
               "tile": member * len(tiles) + np.tile(np.repeat(tiles, n_kb), batch),
               "m0": m0[mi], "mlen": mlen[mi], "kt0": kt0[ki],
               "ktlen": ktlen[ki], "nt0": nt0[ni], "ntlen": ntlen[ni], "load_a": load_a,
               "a_half": a_half, "load_b": load_b, "b_half": b_half, "first_k": ki == 0,
               "last_k": ki == n_kb - 1}
    return _StepTable({name: np.asarray(value, dtype=np.int64)
                       for name, value in columns.items()}, len(tiles) * batch)


def _store_cycles(cfg, passes, beats):
    """Cycles of a STORE of ``beats`` beats: the epilogue takes one every ``ep_ratio`` cycles,
    each beat ``passes`` times."""
    return passes * cfg.ep_ratio * beats


def _matmul_cycles(cfg, mlen):
    # The execute unit's steady-state cost (hw/execute/): the weight preload of the next
    # MATMUL (rows reads of scratchpad B) hides behind this one's stream when it has rows
    # operand rows; no weight bank waits to drain.
    return _max(mlen, cfg.rows)


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
        return cls(op=op, passes=2 if isa.is_two_pass(op) else 1, residual=op == isa.EpOp.LAYERNORM)


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
    ``B >= 2`` with ``(B - 1) * n_kb >= 3`` (see "Epilogues"), and never more than the
    tiles."""
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
        exact = [dataclasses.replace(plan, est_cycles=_model_cycles(cfg, plan, epilogue,
                                                                    lowered))
                 for plan in plans]
        return min(exact, key=lambda plan: (plan.est_cycles, plan.n_steps))
    timed = [dataclasses.replace(plan, est_cycles=_timeline(plan, cfg, ep))
             if plan.n_steps <= _TIMED_MAX_STEPS else plan for plan in plans]
    fastest = min(plan.est_cycles for plan in timed)
    return min((plan for plan in timed if plan.est_cycles <= fastest * (1 + _CYCLES_SLACK)),
               key=lambda plan: (plan.n_steps, plan.est_cycles))


def _model_cycles(cfg, plan, epilogue, lowered):
    """Cycles of ``plan``'s program on the cycle model (the instructions only, unwritten)."""
    groups = GemmGroups(cfg, plan.m, plan.k, plan.n, plan=plan, epilogue=epilogue,
                        lowered=lowered, k_high=plan.k_high, batch=plan.batch)
    stepper = CycleStepper(cfg)
    stepper.run(groups.instrs())
    return stepper.cycles()


def _check_batch(batch):
    if isinstance(batch, bool) or not isinstance(batch, (int, np.integer)) or batch < 1:
        raise ValueError(f"batch must be an int of at least 1, not {batch!r}")
    return int(batch)


def _check_k_high(k_high, k):
    if isinstance(k_high, bool) or not isinstance(k_high, (int, np.integer)) \
            or not 0 <= k_high <= k:
        raise ValueError(f"k_high must be an int from 0 to k = {k}, not {k_high!r}")
    return int(k_high)


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
        The high rows of ``K`` (see "High rows" in the module docstring).
    batch : int
        Independent GEMMs of this shape run as one (see "Batches" in the module docstring).

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
    compute = blocks.matmul_cycles(cfg) * kt_total * nt_total + _STEP_OVERHEAD * n_steps
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
        (see "High rows" in the module docstring).
    batch : int
        Compile ``batch`` independent GEMMs of this shape and epilogue as one program (see
        "Batches" in the module docstring): the operands and results of member ``i`` are rows
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


class _Group(NamedTuple):
    """What the instructions of one group are made from (see :class:`GemmGroups`): group
    ``g`` holds the LOADs of step ``g`` (the head group, ``g = 0``, the epilogue's SETs
    first), then the MATMULs of step ``g - 1`` and, when that step ends its C tile, the
    tile's STORE. A count or length of 0: no such instruction."""
    sets: int           # 1: the head group, which starts with the epilogue's SETs
    a_addr: int         # the LOAD of the A tile
    a_count: int
    b_addr: int         # the LOAD of the B tile
    b_count: int
    pmem_addr: int      # the LOAD of PMEM rows
    pmem_count: int
    pmem_strip0: int    # ... of N strips from this one on
    res_addr: int       # the LOAD of a residual chunk
    res_count: int
    res_strip0: int     # ... of the tile's strips from this one on
    pop_e2l: int        # the first LOAD pops e2l
    ktlen: int          # the MATMULs: ktlen rows (K tiles) of ntlen (N strips)
    ntlen: int
    mlen: int
    a_base: int
    b_base: int
    c_base: int
    first_k: int        # the step is its tile's first: its first row does not accumulate
    high: int           # the step's first K tiles that are high: their MATMULs shift
    pop_s2e: int        # the first MATMUL pops s2e
    push_e2l: int       # the last MATMUL pushes e2l
    store: int          # the step is its tile's last: the last MATMUL pushes e2s, a STORE
    push_s2e: int       # the STORE pushes s2e
    param_addr: int
    aux_addr: int
    tail_strips: int    # a Tail's strips in the tile: stored again, after the tail's SETs
    tail_strip0: int    # ... from this strip of the tile on
    tail_param: int     # ... with their PMEM rows from this one on
    tail_restore: int   # the head epilogue's SETs follow (a STORE comes after)
    split: int          # the first step's loads in this many chunks, a token each (see
    split_k: int        # :func:`_chunks`): on the head group (with the step's K tiles and
    split_n: int        # N strips) and on the group of the step's MATMULs


def _group_codes(cfg, ep, layout, table, nt_total, k_high, tail_strip=None):
    """The :class:`_Group` of every group of a GEMM, as rows of an int64 array (``n_steps +
    1`` rows; see "Epilogues" in the module docstring for where the epilogue data goes).
    ``tail_strip``: the first N strip that holds a :class:`~bertaccel.sw.epilogue.Tail`'s
    columns."""
    c = table.columns
    count = len(table)
    half_spad, half_acc = cfg.spad_depth // 2, cfg.acc_depth // 2
    # One column at a time is written: column-major.
    codes = np.zeros((len(_Group._fields), count + 1), dtype=np.int64).T
    column = {name: number for number, name in enumerate(_Group._fields)}

    def put(name, rows, values):
        codes[rows, column[name]] = values

    put("sets", 0, 1)
    loads, steps = slice(0, count), slice(1, count + 1)        # group g loads step g
    index = np.arange(count)
    put("a_addr", loads, c["a_half"] * half_spad)
    put("a_count", loads, c["load_a"] * c["ktlen"] * c["mlen"])
    put("b_addr", loads, c["b_half"] * layout.b_half)
    put("b_count", loads, c["load_b"] * c["ktlen"] * c["ntlen"] * cfg.rows)
    put("pop_e2l", loads, index >= 2)
    for name in ("ktlen", "ntlen", "mlen", "first_k"):
        put(name, steps, c[name])
    kt_high = -(-k_high // cfg.rows)
    put("high", steps, np.clip(kt_high - c["kt0"], 0, c["ktlen"]))
    put("a_base", steps, c["a_half"] * half_spad)
    put("b_base", steps, c["b_half"] * layout.b_half)
    put("c_base", steps, c["tile"] % 2 * half_acc)
    put("pop_s2e", steps, c["first_k"] & (c["tile"] >= 2))
    put("push_e2l", steps, index + 2 < count)
    put("store", steps, c["last_k"])
    last = np.flatnonzero(c["last_k"])              # each tile's last step, in tile order
    put("push_s2e", last + 1, np.arange(len(last)) + 2 < table.n_tiles)
    if ep is not None:
        _epilogue_codes(cfg, ep, layout, c, put, codes[:, column["param_addr"]], last,
                        len(table), nt_total, tail_strip)
    if not (codes[0, column["pmem_count"]] or codes[0, column["res_count"]]):
        # The first step's loads in chunks: its MATMULs start behind the first one.
        blocks = int(c["ktlen"][0] * c["ntlen"][0])
        put("split", [0, 1], _split_chunks(cfg, blocks))
        put("split_k", 0, c["ktlen"][0])
        put("split_n", 0, c["ntlen"][0])
    return codes


def _epilogue_codes(cfg, ep, layout, c, put, param_addr, last, count, nt_total, tail_strip):
    """Fill in the codes of the epilogue's data and STOREs (see :func:`_group_codes`)."""
    # The per-tile data goes into slot tile % slots, in chunks of strips spread over the LOADs
    # of the tile's steps that may write the slot (:func:`_spread`).
    slot = np.arange(len(last)) % layout.slots
    per_row = cfg.pmem_beats_per_row
    spans = list(zip(*(ends.tolist() for ends in _aux_groups(count // len(last), len(last),
                                                            layout.slots))))
    for tile, (lo, hi) in enumerate(spans):
        ntlen, mlen = int(c["ntlen"][hi]), int(c["mlen"][hi])
        for group, strip0, strips in _spread(lo, hi, ntlen):
            if not layout.pmem_whole:
                put("pmem_addr", group, slot[tile] * layout.pmem_rows + strip0)
                put("pmem_count", group, strips * per_row)
                put("pmem_strip0", group, c["nt0"][hi] + strip0)
            if ep.residual:
                put("res_addr", group, layout.res_base + slot[tile] * layout.res_rows
                    + strip0 * mlen)
                put("res_count", group, strips * mlen)
                put("res_strip0", group, strip0)
    if layout.pmem_whole:
        lo, hi = spans[0]
        for group, strip0, strips in _spread(lo, hi, nt_total):
            put("pmem_addr", group, strip0)
            put("pmem_count", group, strips * per_row)
            put("pmem_strip0", group, strip0)
        put("param_addr", last + 1, c["nt0"][last])
    else:
        put("param_addr", last + 1, slot * layout.pmem_rows)
    if ep.residual:
        put("aux_addr", last + 1, layout.res_base + slot * layout.res_rows)
    if tail_strip is not None:
        # The tile's strips from tail_strip on are stored again; that STORE frees the tile.
        start = np.maximum(c["nt0"][last], tail_strip)
        strips = np.maximum(c["nt0"][last] + c["ntlen"][last] - start, 0)
        put("tail_strips", last + 1, strips)
        put("tail_strip0", last + 1, start - c["nt0"][last])
        put("tail_param", last + 1, param_addr[last + 1] + start - c["nt0"][last])
        put("tail_restore", last + 1, np.arange(len(last)) + 1 < len(last))


def _split_chunks(cfg, blocks):
    """The chunks the first step's ``blocks`` weight blocks are loaded in: as many as leave
    the load queue room for one LOAD of operand rows (more LOADs than the queue holds stall
    the in-order dispatch, and the MATMULs behind it)."""
    return _max(1, _min(blocks, cfg.queue_depth - 1))


def _bounds(total, parts):
    """The first item of each of ``parts`` runs of ``total`` items, as even as they come, and
    ``total`` at the end."""
    return [j * total // parts for j in range(parts + 1)]


def _chunks(ktlen, ntlen, chunks):
    """The first step's loads (``ktlen`` K tiles of ``ntlen`` weight blocks, in ``(kt, nt)``
    order) in ``chunks`` chunks: ``[(kt0, kt1, b0, b1), ...]``, each the operand rows of the K
    tiles ``kt0 .. kt1 - 1`` it is the first to need (none when ``kt0 == kt1``), then its weight
    blocks ``b0 .. b1 - 1``. Each chunk's weight blocks push a token that the MATMUL of its first
    block pops: the execute unit starts behind the first chunk instead of the whole step (the
    only loads that nothing hides)."""
    bounds, out, loaded = _bounds(ktlen * ntlen, chunks), [], 0
    for b0, b1 in zip(bounds, bounds[1:]):
        need = (b1 - 1) // ntlen + 1
        out.append((loaded, max(loaded, need), b0, b1))
        loaded = max(loaded, need)
    return out


def _aux_groups(n_kb, n_tiles, slots):
    """``(lo, hi)``, int64 arrays over the tiles (each ``n_kb`` steps, in order): the groups
    whose LOADs may write tile ``u``'s slot of epilogue data: its own steps' from the first
    that the tokens keep behind STORE(``u - slots``), the slot's last reader
    (``first_step(u - slots + 2) + 2``, see "Epilogues" in the module docstring), and past
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


class GemmGroups:
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

    #: The columns of :attr:`codes`.
    FIELDS = _Group._fields
    #: The columns that only say where data lives, in scratchpads A and B and PMEM: the
    #: LOADs' ``addr``, the MATMULs' ``a_addr`` and ``b_addr``, the STOREs' ``param_addr`` and
    #: ``aux_addr``.
    PLACEMENT = ("a_addr", "b_addr", "pmem_addr", "pmem_strip0", "res_addr", "res_strip0",
                 "a_base", "b_base", "param_addr", "aux_addr", "tail_param")

    def __init__(self, cfg, m, k, n, *, plan=None, epilogue=None, lowered=None, k_high=0,
                 batch=1):
        if not isinstance(cfg, AccelConfig):
            raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
        m, k, n = _check_dim("m", m), _check_dim("k", k), _check_dim("n", n)
        k_high, batch = _check_k_high(k_high, k), _check_batch(batch)
        self.cfg = cfg
        self.lowered = ep = None
        if epilogue is not None:
            self.lowered = lowered or lower(epilogue, cfg, n=n, k=k)
            ep = _Epilogue.of(epilogue)
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
        self.plan, self.ep = plan, ep
        self.layout = _layout(cfg, plan, ep)
        self.table = _step_table(plan, cfg)
        tail = None if ep is None else self.lowered.tail
        if tail is not None and ep.passes != 1:
            raise ProgramError(f"a Tail takes a single-pass epilogue, not {ep.op.name}")
        self.codes = _group_codes(cfg, ep, self.layout, self.table, -(-n // cfg.cols),
                                  plan.k_high, None if tail is None else (n - tail[0]) // cfg.cols)
        self.sets = [] if ep is None else _sets(self.lowered.sets)
        self.tail_sets = [] if tail is None else _sets(tail[1])

    def __len__(self):
        return len(self.codes)

    def group(self, g):
        """The :class:`_Group` of group ``g``."""
        return _Group(*self.codes[g].tolist())

    def loads(self, group):
        """The LOADs of ``group`` (the head group's after its SETs); the first pops ``e2l``
        (from step 2), the last pushes ``l2e``."""
        if group.split_k:
            loads = self._split_loads(group)
        else:
            loads = [(target, addr, count, False) for target, addr, count in (
                (isa.Target.SPAD_A, group.a_addr, group.a_count),
                (isa.Target.SPAD_B, group.b_addr, group.b_count),
                (isa.Target.PMEM, group.pmem_addr, group.pmem_count),
                (isa.Target.SPAD_B, group.res_addr, group.res_count)) if count]
        last = len(loads) - 1
        loads = [isa.Load(target=target, addr=addr, count=count,
                          pop_next=number == 0 and bool(group.pop_e2l),
                          push_next=push or number == last)
                 for number, (target, addr, count, push) in enumerate(loads)]
        return self.sets + loads if group.sets else loads

    def _split_loads(self, group):
        """``[(target, addr, count, push), ...]``: the head group's A and B in chunks
        (:func:`_chunks`), each chunk's B pushing."""
        rows, mlen = self.cfg.rows, group.a_count // group.split_k
        out = []
        for kt0, kt1, b0, b1 in _chunks(group.split_k, group.split_n, group.split):
            if kt1 > kt0:
                out.append((isa.Target.SPAD_A, group.a_addr + kt0 * mlen, (kt1 - kt0) * mlen,
                            False))
            out.append((isa.Target.SPAD_B, group.b_addr + b0 * rows, (b1 - b0) * rows, True))
        return out

    def row(self, group, kt):
        """The MATMULs of K tile ``kt`` of ``group``, one per N strip, shifted in a high K tile:
        the step's first pops ``l2e`` (the first step's: the first of each chunk's weight
        blocks) (and ``s2e`` when it starts C tile 2 or later), its last
        pushes ``e2l`` and, ending its tile, ``e2s``."""
        rows, mlen, ntlen = self.cfg.rows, group.mlen, group.ntlen
        first = kt == 0                           # the step's first MATMUL is this row's first
        last = kt == group.ktlen - 1              # ... and its last this row's last
        pops = {b0 for _, _, b0, _ in _chunks(group.ktlen, ntlen, group.split)} \
            if group.split else {0}
        return [isa.Matmul(a_addr=group.a_base + kt * mlen,
                           b_addr=group.b_base + (kt * ntlen + nt) * rows,
                           acc_addr=group.c_base + nt * mlen, m_len=mlen,
                           accumulate=not (group.first_k and first), shift=kt < group.high,
                           pop_prev=kt * ntlen + nt in pops,
                           pop_next=first and nt == 0 and bool(group.pop_s2e),
                           push_prev=last and nt == ntlen - 1 and bool(group.push_e2l),
                           push_next=last and nt == ntlen - 1 and bool(group.store))
                for nt in range(ntlen)]

    def loads_key(self, group):
        """What :meth:`loads` makes the LOADs of ``group`` from, but placement (their
        ``addr``) and the SETs' values: LOADs of equal keys differ only there."""
        return (group.sets and tuple(instr.index for instr in self.sets), group.a_count,
                group.b_count, group.pmem_count, group.res_count, group.pop_e2l, group.split,
                group.split_k, group.split_n)

    @staticmethod
    def row_key(group, kt):
        """What :meth:`row` makes row ``kt`` of ``group`` from, but placement (``a_addr`` and
        ``b_addr``): rows of equal keys differ only there."""
        first, last = kt == 0, kt == group.ktlen - 1
        return (group.mlen, group.ntlen, group.c_base, first, last, first and group.first_k,
                first and group.pop_s2e, last and group.push_e2l, last and group.store,
                kt < group.high, group.split and (group.ktlen, kt))

    def store_key(self, group):
        """What :meth:`stores` makes the store-unit instructions of ``group`` from, but
        placement (``param_addr``, ``aux_addr``, ``tail_param``) and the SETs' values: those
        of equal keys differ only there."""
        return group.store and (self.ep is not None and self.ep.op, group.mlen, group.ntlen,
                                group.c_base, group.push_s2e, group.tail_strips,
                                group.tail_strip0, group.tail_restore)

    def stores(self, group):
        """The store-unit instructions of ``group`` (none when it ends no tile): the STORE
        that drains its tile row by row, beat ``(mi, nt)`` from ``acc[c_base + nt * mlen +
        mi]``; with a Tail's strips in the tile, the tail's SETs, the STORE of those strips
        and the head's SETs back (where a STORE follows). The tile's last STORE frees it."""
        if not group.store:
            return []
        fields = {}
        if self.ep is not None:
            fields = {"op": self.ep.op, "param_addr": group.param_addr,
                      "aux_addr": group.aux_addr}
        tail = group.tail_strips > 0
        out = [isa.Store(acc_addr=group.c_base, rows=group.mlen, strips=group.ntlen,
                         stride=group.mlen, pop_prev=True,
                         push_prev=bool(group.push_s2e) and not tail, **fields)]
        if tail:
            out += self.tail_sets
            out.append(isa.Store(acc_addr=group.c_base + group.tail_strip0 * group.mlen,
                                 rows=group.mlen, strips=group.tail_strips, stride=group.mlen,
                                 push_prev=bool(group.push_s2e),
                                 **dict(fields, param_addr=group.tail_param)))
            if group.tail_restore:
                out += self.sets
        return out

    def group_instrs(self, group):
        """Every instruction of ``group``, in program order."""
        instrs = self.loads(group)
        for kt in range(group.ktlen):
            instrs.extend(self.row(group, kt))
        instrs.extend(self.stores(group))
        return instrs

    def instrs(self):
        """The program's instructions: every group in order."""
        instrs = []
        for g in range(len(self)):
            instrs.extend(self.group_instrs(self.group(g)))
        return instrs


def _sets(pairs):
    """SET instructions of ``(Param, value)`` pairs."""
    return [isa.Set(index=index, value=int(value)) for index, value in pairs]


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
