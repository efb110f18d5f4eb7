"""How a plan cuts its GEMM: K tiles, M blocks and N strips, the steps in program order, and
the chunks of the first step's loads (see "Shapes", "Blocking" and "High rows" in
docs/tiler.md)."""

from dataclasses import dataclass

import numpy as np

__all__ = ["k_tiles"]

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
