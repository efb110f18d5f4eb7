"""Exact cycles of compiled GEMMs, and of programs joined from them, without writing them out.

::

    timer = GemmTimer(cfg)
    timer.gemm(m, k, n, epilogue=epilogue)      # == CycleModel(cfg).run(compile_gemm(...)).cycles
    timer.concat([(m, k, n, epilogue)] * 12)    # == ... .run(concat([...] * 12)).cycles

The cycle model (:class:`~bertaccel.sw.cycles.CycleModel`) runs some 500 000 instructions a
second, and a BERT layer's stage programs hold hundreds of thousands; writing them out
(:func:`~bertaccel.sw.tiler.compile_gemm`) costs more still. But they are regular: the tiler
repeats one step (LOADs, rows of MATMULs, a STORE) over the C tiles and K blocks, and a joined
stage repeats one GEMM per head. :class:`GemmTimer` times a program by remembering, not by
rerunning.

How
---
The model is a max-plus recurrence: every cycle is a ``max`` of earlier cycles plus constants.
:class:`~bertaccel.sw.cycles.CycleStepper` runs it piece by piece and reads its state between
two pieces normalised to a reference cycle, keeping only what a later instruction can read; in
equal normalised states, pieces whose instructions are equal in what the model reads
(:func:`~bertaccel.sw.cycles.timing_view`) take equal cycles. So the timer walks the program as
a tree -- *parts* (the GEMMs of a joined program), *groups* (:class:`~bertaccel.sw.tiler.
GemmGroups`: a step's LOADs, MATMULs and STORE) and *pieces* (a group's LOADs, each of its
rows of MATMULs, its STORE) -- and remembers, for every ``(state, key)`` it meets, the state
after the node and the cycles it moved the reference. A node met again in a state met before
is skipped: neither written nor run. Only the misses are written (by the tiler's own
:class:`~bertaccel.sw.tiler.GemmGroups`, without the pack indices) and run on the stepper.
Once a loop settles into a rhythm its states repeat, so a program costs about its distinct
groups, and a joined stage about one part, whatever their count; what is remembered carries
over from call to call (another batch shape meets the same groups again).

The keys are what makes this exact:

* a piece's key is the tiler's (:meth:`~bertaccel.sw.tiler.GemmGroups.loads_key`,
  :meth:`~bertaccel.sw.tiler.GemmGroups.row_key`, :meth:`~bertaccel.sw.tiler.GemmGroups.
  store_key`: what the piece is made from, but where it puts data), and whether
  :func:`~bertaccel.sw.sequence.concat` opens or closes it;
* a group's key is its row of :attr:`~bertaccel.sw.tiler.GemmGroups.codes` without the
  :attr:`~bertaccel.sw.tiler.GemmGroups.PLACEMENT` columns (addresses the model does not
  read), with the epilogue op and, for the head group, the SETs' indices;
* a part's key is the GEMM's shape, op and SETs (they decide its plan and so its groups), and
  whether :func:`~bertaccel.sw.sequence.concat` opens and closes it.

Every piece that is written is checked against the first piece written under its key: their
timing views must be equal, or the timer raises (a key that missed a field the model reads).
``verif/unit/test_stage_timing.py`` checks the timer against the model on whole programs.

Why this method
---------------
Extrapolating over repeated outer tiles would need a proof that the state repeats at tile
boundaries for every loop order, tail and epilogue layout, and would not see the repeats inside
a tile or across calls. A second, faster model would be a second thing to keep equal to the
RTL. The memo needs neither: it skips exactly the repeats that the model's own state shows.
"""

import numpy as np

from ..hw import isa
from .cycles import CycleStepper, timing_view
from .epilogue import lower
from .program import Program
from .sequence import close_part, open_part
from .tiler import GemmGroups, plan_gemm

__all__ = ["GemmTimer"]

#: The columns of GemmGroups.codes that a group's key keeps.
_TIMED = [number for number, name in enumerate(GemmGroups.FIELDS)
          if name not in GemmGroups.PLACEMENT]
_SETS_COLUMN = _TIMED.index(GemmGroups.FIELDS.index("sets"))
#: Pieces of a group.
_LOADS, _ROW, _STORE = 0, 1, 2
#: Entries remembered before a timer starts afresh (some 200 bytes each).
_MEMO_LIMIT = 2_000_000
#: Epilogue lowerings :meth:`GemmTimer.lowered` keeps.
_KEPT_LOWERINGS = 256
#: A fixed odd multiplier a column, to hash code rows (collisions are checked, not assumed).
_HASH = np.random.default_rng(0x5EED).integers(1, 1 << 62, size=64, dtype=np.int64) * 2 + 1


def _unique_rows(table):
    """``(distinct rows, index of each row's distinct row)`` of an int64 table: hashed, then
    checked row by row (``np.unique(axis=0)``, much slower, if two rows share a hash)."""
    if not len(table):
        return table, np.zeros(0, dtype=np.int64)
    with np.errstate(over="ignore"):
        hashes = (table.astype(np.uint64) * _HASH[:table.shape[1]].astype(np.uint64)).sum(
            axis=1)
    _, first, inverse = np.unique(hashes, return_index=True, return_inverse=True)
    distinct = table[first]
    if not np.array_equal(distinct[inverse], table):
        distinct, inverse = np.unique(table, axis=0, return_inverse=True)
    return distinct, inverse.reshape(-1)


class _Walk:
    """Where a walk is: the state (its id and reference cycle), and whether the stepper holds
    it (after a miss) or must be set to it before the next miss."""

    __slots__ = ("sid", "ref", "live")

    def __init__(self, sid, ref):
        self.sid, self.ref, self.live = sid, ref, False


class _Part:
    """One part of a program, as the walk needs it: a GEMM (its key, and its groups and their
    keys, made on the part's first miss) or a given :class:`~bertaccel.sw.program.Program`."""

    def __init__(self, timer, m=None, k=None, n=None, epilogue=None, k_high=0, batch=1, *,
                 part=None):
        self.timer, self.program = timer, part
        if part is not None:
            self.key = ("program", tuple(timing_view(instr) for instr in part.instrs))
            return
        self.shape = (m, k, n, epilogue, k_high, batch)
        # The shape and op decide the plan, and with the SETs every instruction's timing view.
        self.lowered = None if epilogue is None else timer.lowered(epilogue, n, k)
        self.key = ("gemm", m, k, n, k_high, batch, None) if epilogue is None else \
            ("gemm", m, k, n, k_high, batch, self.lowered.op,
             tuple(index for index, _ in self.lowered.sets), _tail(self.lowered))
        self._groups = None

    def groups(self):
        """``(GemmGroups, [group key id of each group])``."""
        if self._groups is None:
            m, k, n, epilogue, k_high, batch = self.shape
            timer = self.timer
            groups = GemmGroups(timer.cfg, m, k, n,
                                plan=timer.plan(m, k, n, epilogue, k_high, batch),
                                epilogue=epilogue, lowered=self.lowered, k_high=k_high,
                                batch=batch)
            distinct, inverse = _unique_rows(np.ascontiguousarray(groups.codes[:, _TIMED]))
            op = groups.ep.op if groups.ep is not None else isa.EpOp.RAW
            sets = tuple(instr.index for instr in groups.sets)
            ids = np.array([timer.group_id((op, row[_SETS_COLUMN] and sets,
                                            _tail(groups.lowered), *row))
                            for row in distinct.tolist()], dtype=np.int64)
            self._groups = groups, ids[inverse].tolist()
        return self._groups


class GemmTimer:
    """Exact cycles of compiled GEMMs and of programs joined from them, on one config (see the
    module docstring). What it learns is kept for its later calls (up to
    :data:`_MEMO_LIMIT` entries, then it starts afresh). Not for concurrent use.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    stats : dict
        ``pieces_run`` (pieces written and run on the stepper) and ``instructions_run`` (their
        instructions), over the timer's life; :attr:`counts` adds the sizes of what it
        remembers.
    """

    def __init__(self, cfg):
        self.cfg = cfg
        self._stepper = CycleStepper(cfg)
        self._plans = {}            # (m, k, n, op, k_high) -> TilePlan
        self._lowered = {}          # (id(epilogue), n, k) -> (epilogue, Lowered)
        self.stats = {"pieces_run": 0, "instructions_run": 0}
        self._forget()

    def _forget(self):
        """Start what is remembered afresh."""
        self._states, self._state_ids = [], {}
        state, ref = CycleStepper(self.cfg).state()
        self._start = (self._intern(state), ref)   # the empty machine
        self._memo = {}             # (state id, key) -> (state id after, reference shift)
        self._written = {}          # piece key -> the first instructions written under it
        self._group_ids = {}        # group key -> id
        self._plans.clear()

    # -- the public calls ------------------------------------------------------------------------

    def gemm(self, m, k, n, *, epilogue=None, k_high=0):
        """Cycles of ``compile_gemm(cfg, m, k, n, epilogue=epilogue, k_high=k_high)`` on the
        cycle model."""
        return self.concat([(m, k, n, epilogue, k_high)])

    def concat(self, parts):
        """Cycles of :func:`~bertaccel.sw.sequence.concat` of ``parts`` on the cycle model.

        Parameters
        ----------
        parts : sequence
            Each a GEMM ``(m, k, n, epilogue)``, ``(m, k, n, epilogue, k_high)`` or ``(m, k,
            n, epilogue, k_high, batch)`` (compiled with
            :func:`~bertaccel.sw.tiler.compile_gemm`; ``epilogue`` may be ``None``) or a
            :class:`~bertaccel.sw.program.Program`.

        Returns
        -------
        int
        """
        if len(self._memo) > _MEMO_LIMIT:
            self._forget()
        parts = self._parts(parts)
        walk = _Walk(*self._start)
        last = len(parts) - 1
        for number, part in enumerate(parts):
            self._walk_part(walk, part, number > 0, number < last)
        stepper = self._stepper
        stepper.resume(self._states[walk.sid], walk.ref)
        return stepper.cycles()

    def key(self, parts):
        """What decides the cycles of :meth:`concat` of ``parts``, as a tuple: equal keys,
        equal cycles."""
        return tuple(part.key for part in self._parts(parts))

    def plan(self, m, k, n, epilogue, k_high=0, batch=1):
        """:func:`~bertaccel.sw.tiler.plan_gemm`'s plan (kept: it depends on the op only)."""
        lowered = None if epilogue is None else self.lowered(epilogue, n, k)
        key = (m, k, n, None if epilogue is None else epilogue.op, k_high, batch,
               _tail(lowered))
        plan = self._plans.get(key)
        if plan is None:
            plan = self._plans[key] = plan_gemm(self.cfg, m, k, n, epilogue=epilogue,
                                                k_high=k_high, batch=batch)
        return plan

    def lowered(self, epilogue, n, k):
        """``lower(epilogue, cfg, n=n, k=k)``, kept for the last :data:`_KEPT_LOWERINGS`
        epilogue objects (a per-channel REQUANT takes milliseconds to lower); an entry holds
        its object, so that the ``id`` it is found by is not reused while it is kept."""
        key = (id(epilogue), n, k)
        kept = self._lowered.pop(key, None)
        if kept is None:
            kept = (epilogue, lower(epilogue, self.cfg, n=n, k=k))
        self._lowered[key] = kept                 # the newest last
        if len(self._lowered) > _KEPT_LOWERINGS:
            del self._lowered[next(iter(self._lowered))]
        return kept[1]

    def group_id(self, key):
        """A small int for a group key."""
        number = self._group_ids.get(key)
        if number is None:
            number = self._group_ids[key] = len(self._group_ids)
        return number

    # -- the walk --------------------------------------------------------------------------------

    def _intern(self, state):
        number = self._state_ids.get(state)
        if number is None:
            number = self._state_ids[state] = len(self._states)
            self._states.append(state)
        return number

    def _parts(self, parts):
        """The :class:`_Part` of each of ``parts`` (a GEMM given twice with one epilogue object
        is made once)."""
        made, out = {}, []
        for part in parts:
            if isinstance(part, Program):
                if part.cfg != self.cfg:
                    raise ValueError(f"a part is compiled for {part.cfg.tag}, not "
                                     f"{self.cfg.tag}")
                out.append(_Part(self, part=part))
                continue
            m, k, n, epilogue, k_high, batch = (*part, 0, 1)[:6] if len(part) == 4 else \
                (*part, 1)[:6]
            identity = (m, k, n, id(epilogue), k_high, batch)
            if identity not in made:
                made[identity] = _Part(self, m, k, n, epilogue, k_high, batch)
            out.append(made[identity])
        if not out:
            raise ValueError("concat needs at least one part")
        return out

    def _walk_part(self, walk, part, opened, closed):
        key = (part.key, opened, closed)
        if part.program is not None:
            self._piece(walk, key, lambda: _joined(list(part.program.instrs), opened, closed))
            return
        memo = self._memo
        hit = memo.get((walk.sid, key))
        if hit is not None:
            walk.sid, shift = hit
            walk.ref += shift
            walk.live = False
            return
        sid, ref = walk.sid, walk.ref
        groups, ids = part.groups()
        last = len(ids) - 1
        for g, gid in enumerate(ids):
            ends = (opened and g == 0, closed and g == last)
            if ends[0] or ends[1]:
                gid = self.group_id(("ends", gid, ends))
            hit = memo.get((walk.sid, gid))
            if hit is None:
                self._walk_group(walk, groups, g, gid, *ends)
            else:
                walk.sid, shift = hit
                walk.ref += shift
                walk.live = False
        memo[(sid, key)] = (walk.sid, walk.ref - ref)

    def _walk_group(self, walk, groups, g, gid, opened, closed):
        """Walk group ``g`` of ``groups`` (key ``gid``) piece by piece, and remember it."""
        sid, ref = walk.sid, walk.ref
        group = groups.group(g)
        self._piece(walk, (_LOADS, groups.loads_key(group), opened),
                    lambda: _joined(groups.loads(group), opened, False))
        for kt in range(group.ktlen):
            self._piece(walk, (_ROW, groups.row_key(group, kt)), lambda: groups.row(group, kt))
        stores = groups.stores(group)
        if stores:
            self._piece(walk, (_STORE, groups.store_key(group), closed),
                        lambda: _joined(list(stores), False, closed))
        elif closed:        # a GEMM ends with its last tile's STORE
            raise AssertionError(f"the last group of {groups.plan} has no STORE")
        self._memo[(sid, gid)] = (walk.sid, walk.ref - ref)

    def _piece(self, walk, key, write):
        """Advance ``walk`` over the piece ``key``: remembered, or written (``write()``) and
        run."""
        hit = self._memo.get((walk.sid, key))
        if hit is not None:
            walk.sid, shift = hit
            walk.ref += shift
            walk.live = False
            return
        stepper = self._stepper
        if not walk.live:
            stepper.resume(self._states[walk.sid], walk.ref)
        instrs = write()
        self._check(key, instrs)
        stepper.run(instrs)
        self.stats["pieces_run"] += 1
        self.stats["instructions_run"] += len(instrs)
        state, ref = stepper.state()
        sid = self._intern(state)
        self._memo[(walk.sid, key)] = (sid, ref - walk.ref)
        walk.sid, walk.ref, walk.live = sid, ref, True

    def _check(self, key, instrs):
        """Raise unless ``instrs`` read as the first piece written under ``key`` does."""
        known = self._written.setdefault(key, instrs)
        if known is instrs or known == instrs:
            return
        if [timing_view(instr) for instr in known] != [timing_view(instr) for instr in instrs]:
            raise RuntimeError(f"two pieces under the timing key {key!r} differ in what the "
                               f"cycle model reads: the key misses a field")

    @property
    def counts(self):
        """:attr:`stats` with ``states`` (distinct states met) and ``memo`` (entries
        remembered)."""
        return dict(self.stats, states=len(self._states), memo=len(self._memo))


def _tail(lowered):
    """What a Tail adds to the timing of a GEMM with ``lowered``: its columns and its SETs'
    registers (``None`` without one)."""
    if lowered is None or lowered.tail is None:
        return None
    columns, sets = lowered.tail
    return columns, tuple(index for index, _ in sets)


def _joined(instrs, opened, closed):
    """``instrs`` as :func:`~bertaccel.sw.sequence.concat` puts them in a joined program:
    opened (its first LOAD pops the barrier's token) and closed (the barrier after it)."""
    if opened:
        # A GEMM's head group holds its first LOAD; concat opens the whole part at that LOAD.
        assert any(isinstance(instr, isa.Load) for instr in instrs), "no LOAD to open"
        instrs = open_part(instrs)
    if closed:
        close_part(instrs)
    return instrs
