"""Random illegal programs: a legal program with one instruction broken, for each rule.

:func:`break_program` takes a compiled program and breaks one instruction (of a kind picked at
random) so that it fails the rule of one :class:`~bertaccel.hw.legal.Fault`, or inserts one
that does; :func:`illegal_cases` aims at each rule in turn. The RTL and the software device
must then name the same fault at the same index (``verif/system/test_illegal_rtl.py``,
``bench/illegal.py``, and every mutant of :mod:`bertaccel.cluster.mutation`).
"""

import dataclasses
import random

import torch

from ..hw import isa, legal
from ..hw.legal import Fault
from . import epilogue as ep_mod
from .program import Program
from .tiler.emit import compile_gemm

__all__ = ["break_program", "BREAKERS", "bases", "illegal_cases"]

T, P = isa.Target, isa.Param


def _past(rng, limit, used):
    """A start address from which ``used`` rows run past ``limit`` (at most FIELD_MAX)."""
    return min(isa.FIELD_MAX, limit - used + rng.randint(1, 64))


def _load(rng, cfg, instr):
    kind = rng.choice(["target", "pmem_beats", "range"])
    if kind == "target":
        return Fault.TARGET, dataclasses.replace(instr, target=3)
    if kind == "pmem_beats" and cfg.pmem_beats_per_row > 1:
        count = cfg.pmem_beats_per_row * rng.randint(0, 3) + rng.randint(
            1, cfg.pmem_beats_per_row - 1)
        return Fault.PMEM_BEATS, dataclasses.replace(instr, target=T.PMEM, addr=0, count=count)
    pmem = instr.target == T.PMEM
    per_row, depth = (cfg.pmem_beats_per_row, cfg.pmem_depth) if pmem else (1, cfg.spad_depth)
    count = max(instr.count, per_row)
    return Fault.LOAD_RANGE, dataclasses.replace(
        instr, addr=_past(rng, depth, count // per_row), count=count)


def _matmul(rng, cfg, instr):
    kind = rng.choice(["a", "b", "acc"])
    m_len = max(instr.m_len, 1)
    if kind == "b":
        return Fault.MATMUL_B, dataclasses.replace(
            instr, b_addr=_past(rng, cfg.spad_depth, cfg.rows))
    if kind == "a":
        return Fault.MATMUL_A, dataclasses.replace(
            instr, m_len=m_len, a_addr=_past(rng, cfg.spad_depth, m_len))
    return Fault.MATMUL_ACC, dataclasses.replace(
        instr, m_len=m_len, acc_addr=_past(rng, cfg.acc_depth, m_len))


def _store(rng, cfg, instr):
    kind = rng.choice(["op", "dest", "acc", "param", "aux", "row_len", "row_width", "gshift"])
    rows = max(instr.rows, 1)
    if kind == "op":
        return Fault.STORE_OP, dataclasses.replace(instr, op=rng.randint(5, 7))
    if kind == "dest":
        return Fault.STORE_DEST, dataclasses.replace(instr, dest=rng.randint(1, 3))
    if kind == "acc":
        strips = rng.randint(2, 4)
        stride = (cfg.acc_depth - instr.acc_addr - rows) // (strips - 1) + rng.randint(1, 9)
        return Fault.STORE_ACC, dataclasses.replace(instr, rows=rows, strips=strips,
                                                    stride=min(stride, isa.FIELD_MAX))
    if kind == "param":
        return Fault.STORE_PARAM, dataclasses.replace(
            instr, rows=rows, strips=1, op=isa.EpOp.REQUANT,
            param_addr=_past(rng, cfg.pmem_depth, 1))
    if kind == "aux":       # GSHIFT and ROW_LEN come first but in a LayerNorm program
        return Fault.STORE_AUX, dataclasses.replace(
            instr, rows=rows, op=isa.EpOp.LAYERNORM,
            aux_addr=_past(rng, cfg.spad_depth, max(instr.strips, 1) * rows))
    if kind == "gshift":
        return Fault.GSHIFT, dataclasses.replace(instr, rows=rows, strips=1, stride=0,
                                                 acc_addr=0, op=isa.EpOp.LAYERNORM)
    op = rng.choice([isa.EpOp.SOFTMAX, isa.EpOp.LAYERNORM])
    if kind == "row_width":
        return Fault.ROW_WIDTH, dataclasses.replace(instr, rows=1, strips=1025 // cfg.cols + 1,
                                                    stride=0, acc_addr=0, op=isa.EpOp.SOFTMAX)
    return Fault.ROW_LEN, dataclasses.replace(instr, rows=rows, strips=1, stride=0,
                                              acc_addr=0, op=op)


def _set(rng, cfg, instr):
    if rng.random() < 0.5:
        return Fault.SET_INDEX, isa.Set(index=7, value=rng.getrandbits(16))
    param = rng.choice([p for p in P if isa.PARAM_WIDTHS[p] < isa.SET_VALUE_WIDTH])
    width = isa.PARAM_WIDTHS[param]
    return Fault.SET_VALUE, isa.Set(index=param, value=rng.randrange(1 << width, 1 << 64))


def _flags(rng, cfg, instr):
    unit = isa.unit_of(instr)
    if isinstance(instr, isa.Set):       # a SET takes no tokens at all
        flag = rng.choice(["pop_prev", "pop_next", "push_prev", "push_next"])
        return Fault.NO_UNIT, dataclasses.replace(instr, **{flag: True})
    if unit == "load" or (unit == "store" and rng.random() < 0.5):
        flag = "pop_prev" if unit == "load" else "push_next"
        return Fault.NO_UNIT, dataclasses.replace(instr, **{flag: True})
    flags = ["pop_prev"] if unit == "store" else ["pop_prev", "pop_next"]
    flag = rng.choice([name for name in flags if not getattr(instr, name)] or flags)
    return Fault.TOKEN_EMPTY, dataclasses.replace(instr, **{flag: True})


#: How to break an instruction of each kind: ``breaker(rng, cfg, instr) -> (Fault, instr)``.
BREAKERS = {isa.Load: _load, isa.Matmul: _matmul, isa.Store: _store}


def break_program(rng, program):
    """``(intended Fault, index, Program)``: ``program`` with one instruction broken or one
    illegal instruction inserted (a SET, or a run of 256 token pushes), chosen with ``rng``.
    The fault named first may still be another, earlier rule the change breaks; the
    caller's reference is :func:`bertaccel.hw.legal.first_fault`."""
    cfg, instrs = program.cfg, list(program.instrs)
    kind = rng.choice(sorted({type(instr) for instr in instrs}, key=lambda k: k.__name__))
    index = rng.choice([i for i, instr in enumerate(instrs) if type(instr) is kind])
    how = rng.random()
    if how < 0.15:
        fault, new = _set(rng, cfg, None)
        instrs.insert(index, new)
    elif how < 0.2:
        fault = Fault.TOKEN_FULL
        push = isa.Load(target=T.SPAD_A, addr=0, count=0, push_next=True)
        instrs[index:index] = [push] * (isa.TOKEN_MAX + 1)
        index += isa.TOKEN_MAX
    elif how < 0.4:
        fault, instrs[index] = _flags(rng, cfg, instrs[index])
    else:
        fault, instrs[index] = BREAKERS[type(instrs[index])](rng, cfg, instrs[index]) \
            if type(instrs[index]) in BREAKERS else _set(rng, cfg, instrs[index])
    return fault, index, Program(cfg, instrs, inputs=program.inputs, outputs=program.outputs,
                                 pack_index=program.pack_index,
                                 unpack_index=program.unpack_index)


def bases(cfg, gen):
    """Legal programs and their packed data streams: a plain GEMM and one per epilogue."""
    out = []
    for op in (None, "requant", "gelu", "softmax", "layernorm"):
        m, k, n = 3, 2 * cfg.rows + 1, 2 * cfg.cols + 1
        epilogue = ep_mod.random_epilogue(op, k=k, n=n, generator=gen) if op else None
        program = compile_gemm(cfg, m, k, n, epilogue=epilogue)
        inputs = {name: torch.randint(-128, 128, shape, generator=gen, dtype=torch.int8)
                  for name, shape in program.inputs.items()}
        out.append((program, inputs))
    return out


def illegal_cases(cfg, count, seed, *, tries=300):
    """``count`` (fault, broken program, data stream) triples, and the bases: the faults
    taken in turn (every rule but OPCODE's), each from up to ``tries`` random breaks until
    one's first fault is it (else the last illegal one)."""
    rng, gen = random.Random(seed), torch.Generator().manual_seed(seed)
    legal_ones = bases(cfg, gen)
    aims = [fault for fault in legal.Fault if fault not in (Fault.NONE, Fault.OPCODE)]
    cases = []
    while len(cases) < count:
        aim, found = aims[len(cases) % len(aims)], None
        for _ in range(tries):
            program, inputs = rng.choice(legal_ones)
            _, _, broken = break_program(rng, program)
            fault = legal.first_fault(cfg, broken.words())[0]
            if fault is not Fault.NONE:
                found = (fault, broken, program.pack(**inputs))
                if fault is aim:
                    break
        if found:
            cases.append(found)
    return cases, legal_ones
