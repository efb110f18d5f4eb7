"""The instructions of a planned GEMM, group by group: the codes of each group (a row of
:class:`_Group`) and the LOADs, MATMULs and STOREs made from them (see "Tokens" and "Program
order" in docs/tiler.md)."""

from typing import NamedTuple

import numpy as np

from ...hw import isa
from ..program import ProgramError
from .layout import _aux_groups, _layout, _spread
from .steps import _chunks, _split_chunks, _step_table

__all__ = []


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
    1`` rows; see "Epilogues" in docs/tiler.md for where the epilogue data goes).
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


class _Groups:
    """The groups of ``plan``, a plan already checked against ``cfg`` (``ep``: the
    :class:`~bertaccel.sw.tiler.layout._Epilogue` of ``lowered``, both ``None`` for a plain
    GEMM): :class:`~bertaccel.sw.tiler.emit.GemmGroups` without the checks and the choice of a
    plan, for the planner, which times the plans it makes (:mod:`bertaccel.sw.tiler.plan`)."""

    #: The columns of :attr:`codes`.
    FIELDS = _Group._fields
    #: The columns that only say where data lives, in scratchpads A and B and PMEM: the
    #: LOADs' ``addr``, the MATMULs' ``a_addr`` and ``b_addr``, the STOREs' ``param_addr`` and
    #: ``aux_addr``.
    PLACEMENT = ("a_addr", "b_addr", "pmem_addr", "pmem_strip0", "res_addr", "res_strip0",
                 "a_base", "b_base", "param_addr", "aux_addr", "tail_param")

    def __init__(self, cfg, plan, ep, lowered):
        self.cfg, self.lowered = cfg, lowered
        self.plan, self.ep = plan, ep
        self.layout = _layout(cfg, plan, ep)
        self.table = _step_table(plan, cfg)
        tail = None if ep is None else lowered.tail
        if tail is not None and ep.passes != 1:
            raise ProgramError(f"a Tail takes a single-pass epilogue, not {ep.op.name}")
        n = plan.n
        self.codes = _group_codes(cfg, ep, self.layout, self.table, -(-n // cfg.cols),
                                  plan.k_high, None if tail is None else (n - tail[0]) // cfg.cols)
        self.sets = [] if ep is None else _sets(lowered.sets)
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
