"""Random legal programs: every field of every instruction drawn over its legal range.

The compiler's programs use a few addresses, strides and registers in fixed patterns; a program
of :func:`random_program` draws them all: LOAD targets, addresses up to the end of each memory
and counts (PMEM in whole rows), MATMUL addresses, lengths, ``accumulate`` and ``shift``,
STORE ops, strips, strides, ``dest_addr``, PMEM and residual addresses, and SETs of every
register with values of every width (``ROW_LEN`` and ``SHIFT1`` legal for the two-pass STOREs
that follow). Its steps are serialised by tokens, so no unit reads a memory that another is
still writing and the outputs are defined: each step's LOADs wait for the previous step's
barrier, its MATMULs for the LOADs, its STOREs for the MATMULs, and the barrier (a MATMUL of no
rows) for the STOREs; and nothing reads a row or a register the program has not written
(:class:`_Draw`). The RTL must give the instruction-level device's outputs and cycles on
every one (``verif/system/test_random_programs.py``, and every mutant of
:mod:`bertaccel.cluster.mutation`).
"""

import random

from ..golden.intops import MAX_ROW
from ..hw import isa, legal
from .hand_programs import raw_program

__all__ = ["random_instrs", "random_program"]

T, P, Op = isa.Target, isa.Param, isa.EpOp


def _up_to(rng, top):
    """An int from 0 to ``top``: either end a quarter of the time each, else uniform."""
    pick = rng.random()
    if pick < 0.25:
        return 0
    if pick < 0.5:
        return top
    return rng.randint(0, top)


def _set(rng, param, low=0):
    """A SET of ``param`` to a value of a random width (at least ``low``)."""
    width = isa.PARAM_WIDTHS[param]
    return isa.Set(index=param, value=max(low, rng.getrandbits(rng.randint(0, width))))


class _Draw:
    """Draws one program's instructions; ``acc`` holds the accumulator rows written so far.

    A device keeps its memories and registers from one run to the next, so a program that read
    what it had not written would give what the run before it left. Nothing here does: the
    program begins by setting every register, the LOADs of a step are drawn after its MATMULs
    and STOREs to write what they read, and an accumulator row is read (by a STORE, or by a
    MATMUL that accumulates) only once a MATMUL has written it."""

    def __init__(self, cfg, rng):
        self.cfg, self.rng, self.acc = cfg, rng, set()

    def matmul(self):
        cfg, rng = self.cfg, self.rng
        m_len = rng.randint(0, 3 * cfg.rows)
        acc_addr = _up_to(rng, cfg.acc_depth - m_len)
        rows = set(range(acc_addr, acc_addr + m_len))
        accumulate = rng.random() < 0.5 and rows <= self.acc
        self.acc |= rows
        return isa.Matmul(a_addr=_up_to(rng, cfg.spad_depth - m_len),
                          b_addr=_up_to(rng, cfg.spad_depth - cfg.rows), acc_addr=acc_addr,
                          m_len=m_len, accumulate=accumulate, shift=rng.random() < 0.3)

    def _reads(self, acc_addr, rows, strips, stride):
        return {acc_addr + s * stride + m for s in range(strips) for m in range(rows)}

    def _store_fields(self, op):
        """``(acc_addr, rows, strips, stride)`` of a STORE that reads written rows only."""
        cfg, rng = self.cfg, self.rng
        two_pass = op in isa.TWO_PASS
        for _ in range(50):
            strips = rng.randint(1, min(3, MAX_ROW // cfg.cols) if two_pass else 3)
            rows = rng.randint(1, 2 * cfg.rows + 1)
            stride = rng.randint(0, rows + 2)
            acc_addr = rng.choice(sorted(self.acc)) if self.acc else 0
            span = (strips - 1) * stride + rows
            if (acc_addr + span <= cfg.acc_depth
                    and self._reads(acc_addr, rows, strips, stride) <= self.acc):
                return acc_addr, rows, strips, stride
        return None

    def store(self):
        """A STORE and the SETs before it that make it legal: ``[Set..., Store]``."""
        cfg, rng = self.cfg, self.rng
        op = rng.choice(list(Op))
        fields = self._store_fields(op)
        if fields is None:   # nothing written to read: a STORE of no rows
            op, fields = Op.RAW, (_up_to(rng, cfg.acc_depth), 0, rng.randint(1, 3), 0)
        acc_addr, rows, strips, stride = fields
        sets = [_set(rng, rng.choice(list(P))) for _ in range(rng.randint(0, 2))]
        if op in isa.TWO_PASS:
            sets.append(isa.Set(index=P.ROW_LEN, value=rng.randint(1, strips * cfg.cols)))
        if op is Op.LAYERNORM:
            sets.append(_set(rng, P.SHIFT1, low=8))
        return sets + [isa.Store(
            acc_addr=acc_addr, rows=rows, strips=strips, stride=stride, op=op,
            dest_addr=rng.getrandbits(isa.FIELD_WIDTH),
            param_addr=_up_to(rng, cfg.pmem_depth - strips),
            aux_addr=_up_to(rng, cfg.spad_depth - strips * rows))]

    def loads(self, matmuls, stores):
        """LOADs that write every row ``matmuls`` and ``stores`` read, and one at random,
        shuffled (at least one)."""
        cfg, rng = self.cfg, self.rng
        out = []
        for mm in matmuls:
            out += [isa.Load(target=T.SPAD_A, addr=mm.a_addr, count=mm.m_len),
                    isa.Load(target=T.SPAD_B, addr=mm.b_addr, count=cfg.rows)]
        for st in stores:
            if st.op is not Op.RAW and st.count:
                out.append(isa.Load(target=T.PMEM, addr=st.param_addr,
                                    count=st.strips * cfg.pmem_beats_per_row))
            if st.op is Op.LAYERNORM:
                out.append(isa.Load(target=T.SPAD_B, addr=st.aux_addr,
                                    count=st.strips * st.rows))
        count = rng.randint(0, 3 * cfg.rows)
        out.append(isa.Load(target=rng.choice([T.SPAD_A, T.SPAD_B]),
                            addr=_up_to(rng, cfg.spad_depth - count), count=count))
        rng.shuffle(out)
        return out

    def step(self, first, last):
        """One step: LOADs, MATMULs, STOREs (with their SETs) and the barrier."""
        matmuls = [self.matmul() for _ in range(self.rng.randint(1, 3))]
        stores = [self.store() for _ in range(self.rng.randint(1, 2))]
        loads = self.loads(matmuls, [store[-1] for store in stores])
        loads[0] = loads[0].with_deps(pop_next=not first)
        loads[-1] = loads[-1].with_deps(push_next=True)
        matmuls[0] = matmuls[0].with_deps(pop_prev=True)
        matmuls[-1] = matmuls[-1].with_deps(push_next=True)
        stores[0][-1] = stores[0][-1].with_deps(pop_prev=True)
        stores[-1][-1] = stores[-1][-1].with_deps(push_prev=not last)
        out = loads + matmuls + [instr for store in stores for instr in store]
        if not last:
            out.append(isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=0, accumulate=False,
                                  pop_next=True, push_prev=True))
        return out


def random_instrs(cfg, rng, steps):
    """The instructions of a random legal program of ``steps`` steps, drawn with ``rng``."""
    draw = _Draw(cfg, rng)
    instrs = [_set(rng, param) for param in P]
    for step in range(steps):
        instrs += draw.step(step == 0, step == steps - 1)
    return instrs


def random_program(cfg, seed, *, steps=None):
    """A random legal :class:`~bertaccel.sw.program.Program` (:func:`raw_program`: one flat
    input ``x`` of every LOAD beat, one flat output ``y``) of 1 to 4 steps."""
    rng = random.Random(seed)
    instrs = random_instrs(cfg, rng, steps or rng.randint(1, 4))
    program = raw_program(cfg, instrs)
    fault, index, _ = legal.first_fault(cfg, program.words())
    assert fault is legal.Fault.NONE, (seed, fault, index, instrs[index])
    return program
