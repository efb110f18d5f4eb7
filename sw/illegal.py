"""An illegal instruction's fault in words: what ``Program.validate`` and the devices say.

Which instruction is illegal, and why, is decided once, by the rules of
:mod:`bertaccel.hw.legal` (the same the controller's gateware checks); this module only
writes the sentence, from the instruction and the :class:`~bertaccel.hw.legal.State` it found.
"""

from ..golden.intops import MAX_ROW
from ..hw import isa
from ..hw.legal import CHANNELS, Fault

__all__ = ["explain"]


def _name(value, kind):
    """``value`` (an enum member or its raw int) as the member's name where it has one."""
    try:
        return kind(getattr(value, "value", value)).name
    except ValueError:
        return repr(value)


def _past(field, end, limit, memory):
    return f"{field} = {end} runs past {memory} ({limit} rows)"


def _load(cfg, fault, instr):
    if fault is Fault.TARGET:
        return f"target must be an isa.Target, not {instr.target!r}"
    per_row = cfg.pmem_beats_per_row
    if fault is Fault.PMEM_BEATS:
        return (f"a LOAD into PMEM must move whole rows of {per_row} beats, but count = "
                f"{instr.count} is not a multiple of {per_row}")
    if _name(instr.target, isa.Target) == "PMEM":
        return _past("addr + count / beats_per_row", instr.addr + instr.count // per_row,
                     cfg.pmem_depth, "the parameter memory (PMEM)")
    spad = "A" if _name(instr.target, isa.Target) == "SPAD_A" else "B"
    return _past("addr + count", instr.addr + instr.count, cfg.spad_depth, f"scratchpad {spad}")


def _matmul(cfg, fault, instr):
    if fault is Fault.MATMUL_B:
        return _past("b_addr + rows", instr.b_addr + cfg.rows, cfg.spad_depth, "scratchpad B")
    if fault is Fault.MATMUL_A:
        return _past("a_addr + m_len", instr.a_addr + instr.m_len, cfg.spad_depth,
                     "scratchpad A")
    return _past("acc_addr + m_len", instr.acc_addr + instr.m_len, cfg.acc_depth,
                 "the accumulator")


def _store(cfg, fault, instr, state):
    op = _name(instr.op, isa.EpOp)
    width = instr.strips * cfg.cols if cfg else None
    text = {
        Fault.STORE_OP: lambda: f"op must be an isa.EpOp, not {instr.op!r}",
        Fault.STORE_DEST: lambda: (f"dest must be isa.Dest.HOST (the only destination "
                                   f"built), not {instr.dest!r}"),
        Fault.STORE_ACC: lambda: _past(
            "acc_addr + (strips-1)*stride + rows",
            instr.acc_addr + (instr.strips - 1) * instr.stride + instr.rows, cfg.acc_depth,
            "the accumulator"),
        Fault.STORE_PARAM: lambda: _past("param_addr + strips", instr.param_addr + instr.strips,
                                         cfg.pmem_depth, "the parameter memory (PMEM)"),
        Fault.STORE_AUX: lambda: _past("aux_addr + strips*rows",
                                       instr.aux_addr + instr.strips * instr.rows,
                                       cfg.spad_depth, "scratchpad B (the residual)"),
        Fault.GSHIFT: lambda: (f"LAYERNORM needs SHIFT1 (gshift) from 8 to 63, but the SETs "
                               f"before it leave {state.shift1}"),
        Fault.ROW_WIDTH: lambda: (f"a {op} row of strips * cols = {instr.strips} * {cfg.cols} "
                                  f"= {width} columns is longer than the hardware supports "
                                  f"({MAX_ROW} columns)"),
        Fault.ROW_LEN: lambda: (f"{op} needs ROW_LEN from 1 to strips * cols = {width}, but "
                                f"the SETs before it leave {state.row_len}"
                                + (" (no SET of ROW_LEN)" if not state.row_len else "")),
    }
    return text[fault]()


def _set(fault, instr):
    if fault is Fault.SET_INDEX:
        return f"index must be an isa.Param, not {instr.index!r}"
    param = isa.Param(getattr(instr.index, "value", instr.index))
    width = isa.PARAM_WIDTHS[param]
    return (f"{param.name} is a {width}-bit register, so its value must be below 2**{width}, "
            f"not {instr.value}")


def _tokens(fault, instr, state):
    channels = CHANNELS[instr.opcode]
    for flag, channel in channels.items():
        if not getattr(instr, flag):
            continue
        if fault is Fault.NO_UNIT and channel is None:
            if isinstance(instr, isa.Set):
                return (f"{flag} is set, but a SET takes no tokens (it waits until the store "
                        f"unit and the epilogue are empty)")
            return (f"{flag} is set, but the {isa.unit_of(instr)} unit has no "
                    f"{flag.split('_')[1]} unit")
        count = getattr(state, channel) if channel else None
        if fault is Fault.TOKEN_EMPTY and flag.startswith("pop") and count == 0:
            return f"{flag} pops channel {channel}, which is empty at this point"
        if fault is Fault.TOKEN_FULL and flag.startswith("push") and count == isa.TOKEN_MAX:
            return f"{flag} pushes channel {channel} past {isa.TOKEN_MAX} tokens"
    return f"its dependency flags break a token rule ({fault.name})"


def explain(cfg, fault, number, instr, state):
    """The sentence for ``fault`` (a :class:`~bertaccel.hw.legal.Fault`) of instruction
    ``number``, ``instr`` (an isa instruction, or ``None`` for a word with no opcode), which
    found ``state``: ``"instruction 3 (STORE): ..."``."""
    if fault is Fault.OPCODE or instr is None:
        return f"instruction {number} is not an ISA instruction: its opcode is not an isa.Opcode"
    if fault in (Fault.NO_UNIT, Fault.TOKEN_EMPTY, Fault.TOKEN_FULL):
        why = _tokens(fault, instr, state)
    elif isinstance(instr, isa.Load):
        why = _load(cfg, fault, instr)
    elif isinstance(instr, isa.Matmul):
        why = _matmul(cfg, fault, instr)
    elif isinstance(instr, isa.Store):
        why = _store(cfg, fault, instr, state)
    else:
        why = _set(fault, instr)
    return f"instruction {number} ({instr.opcode.name}): {why}"
