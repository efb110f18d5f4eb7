"""What the ISA allows, written once.

:func:`rules` states every check an instruction must pass, as expressions that evaluate the same
on Python ints, on ``numpy`` arrays (one element an instruction) and on Amaranth values: the
controller's gateware checks each instruction it dispatches with them
(:mod:`bertaccel.hw.checker`), the software device checks a whole program at once with
:func:`first_fault` before it runs it, and ``Program.validate`` turns the same fault into a
message (:mod:`bertaccel.sw.illegal`). So the RTL and the software device name the same
:class:`Fault` and the same instruction for every illegal program.

The checks read an instruction's raw fields (:func:`bertaccel.hw.isa.raw_columns`) and a
:class:`State` kept in program order: the ``ROW_LEN`` and ``SHIFT1`` registers as the SETs
before it leave them, and each token channel's count had every instruction before it run in
program order (a pop of an empty channel or a push past ``isa.TOKEN_MAX`` is illegal, which
makes every legal program deadlock-free). The two products a STORE's ranges need are
:data:`PRODUCTS`, computed by each side its own way (the gateware in a DSP a cycle ahead).
"""

import enum
import functools
import operator
from dataclasses import dataclass

import numpy as np

from ..golden.intops import MAX_ROW
from . import isa

__all__ = ["Fault", "FAULT_WIDTH", "CHANNELS", "PRODUCTS", "READ_STATE", "READ_PRODUCTS",
           "State", "rules", "product_rules", "token_steps", "first_fault", "state_at",
           "tokens_after"]


class Fault(enum.IntEnum):
    """Why an instruction is illegal; the value is what the hardware reports (0: none)."""
    NONE = 0
    OPCODE = 1        # not an isa.Opcode
    TARGET = 2        # LOAD: target not an isa.Target
    PMEM_BEATS = 3    # LOAD into PMEM: count not whole rows of cfg.pmem_beats_per_row beats
    LOAD_RANGE = 4    # LOAD: addr + count (PMEM: rows) past the memory
    MATMUL_B = 5      # MATMUL: b_addr + rows past scratchpad B
    MATMUL_A = 6      # MATMUL: a_addr + m_len past scratchpad A
    MATMUL_ACC = 7    # MATMUL: acc_addr + m_len past the accumulator
    STORE_OP = 8      # STORE: op not an isa.EpOp
    STORE_DEST = 9    # STORE: dest not isa.Dest.HOST
    STORE_ACC = 10    # STORE: acc_addr + (strips-1)*stride + rows past the accumulator
    STORE_PARAM = 11  # STORE with an epilogue: param_addr + strips past PMEM
    STORE_AUX = 12    # LAYERNORM: aux_addr + strips*rows past scratchpad B
    GSHIFT = 13       # LAYERNORM: SHIFT1 below 8
    ROW_WIDTH = 14    # SOFTMAX/LAYERNORM: strips * cols past golden.intops.MAX_ROW
    ROW_LEN = 15      # SOFTMAX/LAYERNORM: ROW_LEN not from 1 to strips * cols
    SET_INDEX = 16    # SET: index not an isa.Param
    SET_VALUE = 17    # SET: value wider than its register
    NO_UNIT = 18      # a dependency flag names a unit that does not exist (any flag of a SET)
    TOKEN_EMPTY = 19  # a pop of an empty channel, in program order
    TOKEN_FULL = 20   # a push past isa.TOKEN_MAX, in program order


#: Bits of a :class:`Fault` value.
FAULT_WIDTH = max(Fault).bit_length()

#: The token channel each dependency flag names, by opcode (``None``: no unit there).
CHANNELS = {
    isa.Opcode.LOAD:   {"pop_prev": None, "push_prev": None, "pop_next": "e2l",
                        "push_next": "l2e"},
    isa.Opcode.MATMUL: {"pop_prev": "l2e", "push_prev": "e2l", "pop_next": "s2e",
                        "push_next": "e2s"},
    isa.Opcode.STORE:  {"pop_prev": "e2s", "push_prev": "s2e", "pop_next": None,
                        "push_next": None},
    # A SET takes no tokens: it waits until the store unit and the epilogue are empty.
    isa.Opcode.SET:    {"pop_prev": None, "push_prev": None, "pop_next": None,
                        "push_next": None},
}

#: The STORE products the checks need, as pairs of STORE field names.
PRODUCTS = (("strips", "stride"), ("strips", "rows"))

#: The rules that read the :class:`State`; the others but :data:`READ_PRODUCTS` read the
#: instruction's fields alone (the gateware decides those from the instruction on offer).
READ_STATE = frozenset({Fault.GSHIFT, Fault.ROW_LEN, Fault.TOKEN_EMPTY, Fault.TOKEN_FULL})
#: The rules that read :data:`PRODUCTS` (the last of :func:`rules`).
READ_PRODUCTS = frozenset({Fault.STORE_ACC, Fault.STORE_AUX})


@dataclass(frozen=True)
class State:
    """What the checks of an instruction read of the program before it (ints in Python,
    registers in the gateware): ``row_len`` and ``shift1`` as the SETs leave them, and the
    program-order count of each token channel."""
    row_len: object = 0
    shift1: object = 0
    l2e: object = 0
    e2l: object = 0
    e2s: object = 0
    s2e: object = 0


def _any(terms):
    return functools.reduce(operator.or_, terms, False)


def _in(value, members):
    """Whether ``value`` (raw bits) is the value of one of ``members``."""
    return _any(value == member.value for member in members)


def _store_flags(st):
    """What a STORE (fields ``st``) does: ``(moves, epilogue, two_pass, layernorm)``."""
    moves = (st["rows"] != 0) & (st["strips"] != 0)
    return (moves, moves & (st["op"] != isa.EpOp.RAW.value), moves & _in(st["op"], isa.TWO_PASS),
            moves & (st["op"] == isa.EpOp.LAYERNORM.value))


def rules(cfg, f, state, products, ahead=None):
    """Every check, in the order they are made: a list of ``(Fault, opcode, bad)``, where
    ``bad`` is true when an instruction of ``opcode`` (``None``: any) fails it.

    Parameters
    ----------
    f : dict
        The instruction's raw fields (:func:`bertaccel.hw.isa.raw_fields`): ``"opcode"``, the
        four dependency flags and a dict of fields for each body, all unsigned.
    state : State
    products : dict or None
        ``products[(a, b)]``: STORE field ``a`` times STORE field ``b``, for each of
        :data:`PRODUCTS`; ``None`` leaves the rules of the products out (the gateware makes
        those from :func:`product_rules`, a stage later).
    ahead : callable, optional
        ``ahead(term)`` is ``term(f)``, a sum of fields the rules compare (the default); the
        gateware computes it a cycle ahead, from the instruction as it is taken, so that a
        rule is one comparison of registers.
    """
    if ahead is None:
        def ahead(term):
            return term(f)
    op = isa.Opcode
    ld, mm, st, st_set = f["load"], f["matmul"], f["store"], f["set"]
    pmem_rows = cfg.pmem_beats_per_row
    spad_depth = ahead(lambda g: g["load"]["addr"] + g["load"]["count"]) > cfg.spad_depth
    pmem_depth = (ahead(lambda g: g["load"]["addr"] + g["load"]["count"] // pmem_rows)
                  > cfg.pmem_depth)
    to_pmem = ld["target"] == isa.Target.PMEM.value
    _, epilogue, two_pass, layernorm = _store_flags(st)
    width = ahead(lambda g: g["store"]["strips"] * cfg.cols)
    value_bits = _any((st_set["index"] == param.value) & (st_set["value"] >> width_ != 0)
                      for param, width_ in isa.PARAM_WIDTHS.items()
                      if width_ < isa.SET_VALUE_WIDTH)   # a 64-bit register takes any value
    out = [
        (Fault.OPCODE, None, _in(f["opcode"], op) == 0),
        (Fault.TARGET, op.LOAD, _in(ld["target"], isa.Target) == 0),
        (Fault.PMEM_BEATS, op.LOAD, to_pmem & (ld["count"] % pmem_rows != 0)),
        (Fault.LOAD_RANGE, op.LOAD, (to_pmem & pmem_depth) | ((to_pmem == 0) & spad_depth)),
        (Fault.MATMUL_B, op.MATMUL, mm["b_addr"] > cfg.spad_depth - cfg.rows),
        (Fault.MATMUL_A, op.MATMUL,
         ahead(lambda g: g["matmul"]["a_addr"] + g["matmul"]["m_len"]) > cfg.spad_depth),
        (Fault.MATMUL_ACC, op.MATMUL,
         ahead(lambda g: g["matmul"]["acc_addr"] + g["matmul"]["m_len"]) > cfg.acc_depth),
        (Fault.STORE_OP, op.STORE, _in(st["op"], isa.EpOp) == 0),
        (Fault.STORE_DEST, op.STORE, st["dest"] != isa.Dest.HOST.value),
        (Fault.STORE_PARAM, op.STORE, epilogue & (
            ahead(lambda g: g["store"]["param_addr"] + g["store"]["strips"]) > cfg.pmem_depth)),
        (Fault.GSHIFT, op.STORE, layernorm & (state.shift1 < 8)),
        (Fault.ROW_WIDTH, op.STORE, two_pass & (st["strips"] > MAX_ROW // cfg.cols)),
        (Fault.ROW_LEN, op.STORE, two_pass & ((state.row_len == 0) | (state.row_len > width))),
        (Fault.SET_INDEX, op.SET, _in(st_set["index"], isa.Param) == 0),
        (Fault.SET_VALUE, op.SET, value_bits),
    ]
    out += _token_rules(f, state)
    if products is not None:   # the rules of the products come last (see product_rules)
        out += [(fault, opcode, gate & (products[pair] > bound))
                for fault, opcode, gate, pair, bound in product_rules(cfg, f, ahead)]
    return out


def product_rules(cfg, f, ahead=None):
    """The rules of :data:`PRODUCTS`, in parts: a list of ``(Fault, opcode, gate, pair,
    bound)``; an instruction of ``opcode`` fails one when ``gate`` and ``products[pair] >
    bound`` (``gate`` and ``bound`` of the fields alone, so the gateware computes them while
    the DSP multiplies, and then makes one comparison). ``ahead`` as for :func:`rules`."""
    if ahead is None:
        def ahead(term):
            return term(f)
    st = f["store"]
    moves, _, _, layernorm = _store_flags(st)
    return [
        # acc_addr + (strips-1)*stride + rows > acc_depth
        (Fault.STORE_ACC, isa.Opcode.STORE, moves, ("strips", "stride"),
         ahead(lambda g: g["store"]["stride"] + cfg.acc_depth)
         - ahead(lambda g: g["store"]["acc_addr"] + g["store"]["rows"])),
        # aux_addr + strips*rows > spad_depth
        (Fault.STORE_AUX, isa.Opcode.STORE, layernorm, ("strips", "rows"),
         cfg.spad_depth - st["aux_addr"]),
    ]


def _token_rules(f, state):
    """NO_UNIT, TOKEN_EMPTY and TOKEN_FULL of each opcode, from :data:`CHANNELS`."""
    out = []
    for fault in (Fault.NO_UNIT, Fault.TOKEN_EMPTY, Fault.TOKEN_FULL):
        for opcode, channels in CHANNELS.items():
            terms = []
            for flag, channel in channels.items():
                if fault is Fault.NO_UNIT and channel is None:
                    terms.append(f[flag] != 0)
                elif fault is Fault.TOKEN_EMPTY and channel and flag.startswith("pop"):
                    terms.append((f[flag] != 0) & (getattr(state, channel) == 0))
                elif fault is Fault.TOKEN_FULL and channel and flag.startswith("push"):
                    terms.append((f[flag] != 0) & (getattr(state, channel) == isa.TOKEN_MAX))
            if terms:
                out.append((fault, opcode, _any(terms)))
    return out


def first_fault(cfg, words):
    """The first illegal instruction of the 128-bit ``words`` in program order, the rules
    evaluated on every word at once (``numpy``): ``(Fault, index, State)``, the
    :class:`State` that instruction found (ints), or ``(Fault.NONE, None, None)``."""
    if not len(words):
        return Fault.NONE, None, None
    f = isa.raw_columns(words)
    st = f["store"]
    products = {pair: st[pair[0]] * st[pair[1]] for pair in PRODUCTS}
    state = _states(f)
    listed = rules(cfg, f, state, products)
    shape = f["opcode"].shape
    bad = np.stack([np.broadcast_to(cond if opcode is None
                                    else cond & (f["opcode"] == opcode.value), shape)
                    for _, opcode, cond in listed])
    hits = bad.any(axis=0)
    if not hits.any():
        return Fault.NONE, None, None
    index = int(np.argmax(hits))
    fault = listed[int(np.argmax(bad[:, index]))][0]
    return fault, index, State(**{name: int(getattr(state, name)[index])
                                  for name in State.__dataclass_fields__})


def state_at(words, index):
    """The :class:`State` (ints) that instruction ``index`` of ``words`` finds, had every one
    before it run."""
    state = _states(isa.raw_columns(words[:index + 1]))
    return State(**{name: int(getattr(state, name)[index]) for name in State.__dataclass_fields__})


def _states(f):
    """The :class:`State` each instruction of the columns ``f`` finds, had every one before it
    run (arrays): the last SET of each register before it, the token counts before it."""
    opcode, n = f["opcode"], len(f["opcode"])
    regs = {}
    for name, param in (("row_len", isa.Param.ROW_LEN), ("shift1", isa.Param.SHIFT1)):
        sets = (opcode == isa.Opcode.SET.value) & (f["set"]["index"] == param.value)
        last = np.maximum.accumulate(np.where(sets, np.arange(n), -1))   # the last SET so far
        last = np.concatenate(([-1], last[:-1]))                          # ... before each
        value = f["set"]["value"].astype(np.int64) & ((1 << isa.PARAM_WIDTHS[param]) - 1)
        regs[name] = np.where(last >= 0, value[np.maximum(last, 0)], 0)
    tokens = {channel: np.concatenate(([0], np.cumsum(step)[:-1]))
              for channel, step in token_steps(f).items()}
    return State(**regs, **tokens)


def token_steps(f):
    """How an instruction with raw fields ``f`` changes each token channel's count: its
    pushes less its pops (expressions, as :func:`rules` makes them)."""
    steps = {}
    for code, flags in CHANNELS.items():
        mine = f["opcode"] == code.value
        for flag, channel in flags.items():
            if channel:
                hit = mine & (f[flag] != 0)
                step = steps.get(channel, 0)
                steps[channel] = step + hit if flag.startswith("push") else step - hit
    return steps


def tokens_after(words):
    """What each token channel holds after ``words`` ran, in program order (ints)."""
    if not len(words):
        return dict.fromkeys(("l2e", "e2l", "e2s", "s2e"), 0)
    return {channel: int(step.sum()) for channel, step in
            token_steps(isa.raw_columns(words)).items()}
