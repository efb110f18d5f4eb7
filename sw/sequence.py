"""Joining independent programs into one, so that many small GEMMs are one device call.

:func:`concat` puts programs one after the other with a *full barrier* between each two. The
three units run concurrently, so program order alone does not keep the next program's LOADs from
overwriting scratchpad rows, PMEM rows or residuals that the previous program's MATMULs and STOREs
still read, nor the next program's MATMULs from writing accumulator rows the previous one still
drains. The barrier is a chain of tokens through all three units:

1. the previous program's last store-unit instruction pushes ``s2e`` (``push_prev``): it runs
   after every earlier STORE, so the token says the accumulator, PMEM and the residuals are
   free;
2. a zero-length MATMUL, ``Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=0, accumulate=False,
   pop_next=True, push_prev=True)``, pops it and pushes ``e2l``; the execute unit runs it after
   every earlier MATMUL, so scratchpads A and B are free too;
3. the next program's first LOAD pops ``e2l`` (``pop_next``); every later LOAD follows it in the
   load unit, and every later MATMUL waits for the LOADs' ``l2e`` tokens.

The next program's SETs need no token: the store unit runs SETs and STOREs in program order, and
a SET waits until the earlier STOREs have left the epilogue. When the previous program's last
store-unit instruction already pushes ``s2e``, or the next program's first LOAD already pops
``e2l``, a zero-count STORE or LOAD carries the token instead (a zero count moves nothing but
still pops and pushes). Every token channel of a legal program ends at 0, so when a unit reaches
the barrier no token of the previous program is left in the channel it pops: the one it finds is
the barrier's.

Names. Input, output and constant ``x`` of program ``i`` becomes ``f"{prefix_i}{x}"`` (the
prefix is ``f"{i}."`` unless given), and the pack and unpack indices are offset into the
concatenated inputs, constants and outputs.
"""

import numpy as np

from ..hw import isa
from .program import Program, ProgramError

__all__ = ["concat", "barrier", "open_part", "close_part", "split_outputs"]


def barrier():
    """The zero-length MATMUL of the barrier: pops ``s2e``, pushes ``e2l``."""
    return isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=0, accumulate=False,
                      pop_next=True, push_prev=True)


def close_part(instrs):
    """Make the last store-unit instruction of ``instrs`` push ``s2e``, then add the barrier
    MATMUL: what :func:`concat` does to every program but the last. ``instrs`` is a list,
    changed in place."""
    for number in range(len(instrs) - 1, -1, -1):
        instr = instrs[number]
        if isa.unit_of(instr) == "store":
            if isinstance(instr, isa.Store) and not instr.push_prev:
                instrs[number] = instr.with_deps(push_prev=True)
            else:
                instrs.append(isa.Store(acc_addr=0, rows=0, strips=1, push_prev=True))
            break
    else:
        instrs.append(isa.Store(acc_addr=0, rows=0, strips=1, push_prev=True))
    instrs.append(barrier())


def open_part(instrs):
    """``instrs`` with its first LOAD popping ``e2l`` (a new list): what :func:`concat` does to
    every program but the first."""
    out = list(instrs)
    for number, instr in enumerate(out):
        if isinstance(instr, isa.Load):
            if not instr.pop_next:
                out[number] = instr.with_deps(pop_next=True)
                return out
            break
    # No LOAD, or the first already pops: a zero-count LOAD carries the token, ahead of
    # every LOAD and (so that a MATMUL-only program waits too) of every instruction.
    return [isa.Load(target=isa.Target.SPAD_A, addr=0, count=0, pop_next=True)] + out


def concat(programs, *, prefixes=None, meta=None):
    """One program that runs ``programs`` in turn, with a full barrier between each two.

    Parameters
    ----------
    programs : sequence of Program
        Legal programs (each passes :meth:`Program.validate`) for one config, each independent
        of the others: none reads what another leaves in the machine.
    prefixes : sequence of str, optional
        Name prefix of each program's inputs, outputs and constants; ``"0."``, ``"1."``, ...
        by default. The renamed names must be distinct.
    meta : dict, optional
        Extra facts for the joined program's :attr:`Program.meta`.

    Returns
    -------
    Program
        Inputs, outputs and constants of every program, renamed, in program order.
        ``meta["parts"]`` lists, per program, ``(prefix, first_instruction, end_instruction)``.

    Raises
    ------
    ProgramError
        If ``programs`` is empty, the programs are for different configs, the prefixes are not
        one per program, or two renamed tensors have the same name.
    """
    programs = list(programs)
    if not programs:
        raise ProgramError("concat needs at least one program")
    for number, program in enumerate(programs):
        if not isinstance(program, Program):
            raise TypeError(f"programs[{number}] must be a Program, not "
                            f"{type(program).__name__}")
    cfg = programs[0].cfg
    for number, program in enumerate(programs):
        if program.cfg != cfg:
            raise ProgramError(f"programs[{number}] is compiled for {program.cfg.tag}, but "
                               f"programs[0] for {cfg.tag}")
    if prefixes is None:
        prefixes = [f"{number}." for number in range(len(programs))]
    prefixes = [str(prefix) for prefix in prefixes]
    if len(prefixes) != len(programs):
        raise ProgramError(f"concat needs one prefix per program: {len(programs)} programs, "
                           f"{len(prefixes)} prefixes")

    inputs, outputs, constants = {}, {}, {}

    def add(table, prefix, items, what):
        for name, value in items:
            full = f"{prefix}{name}"
            if full in table or full in inputs or full in constants:
                raise ProgramError(f"concat: two {what}s are both named {full!r}; give "
                                   f"distinct prefixes")
            table[full] = value

    for prefix, program in zip(prefixes, programs):
        add(inputs, prefix, program.inputs.items(), "input")
        add(outputs, prefix, program.outputs.items(), "output")
    for prefix, program in zip(prefixes, programs):
        add(constants, prefix, program.constants.items(), "constant")

    n_inputs = sum(p.n_input_elements for p in programs)
    n_constants = sum(p.n_pack_elements - p.n_input_elements for p in programs)
    pad = n_inputs + n_constants
    n_outputs = sum(p.n_output_elements for p in programs)

    instrs, packs, unpacks, parts = [], [], [], []
    in_base, const_base, out_base = 0, n_inputs, 0
    for number, program in enumerate(programs):
        body = program.instrs if number == 0 else open_part(program.instrs)
        first = len(instrs)
        instrs.extend(body)
        if number + 1 < len(programs):
            close_part(instrs)
        parts.append((prefixes[number], first, len(instrs)))

        own_in = program.n_input_elements
        own_pack = program.n_pack_elements
        index = program.pack_index.numpy()
        packs.append(np.where(index < own_in, index + in_base,
                              np.where(index < own_pack, index - own_in + const_base, pad)))
        own_out = program.n_output_elements
        index = program.unpack_index.numpy()
        unpacks.append(np.where(index < own_out, index + out_base, n_outputs))
        in_base += own_in
        const_base += own_pack - own_in
        out_base += own_out

    lanes, cols = cfg.lanes, cfg.cols
    pack_index = np.concatenate(packs) if packs else np.zeros((0, lanes), dtype=np.int64)
    unpack_index = np.concatenate(unpacks) if unpacks else np.zeros((0, cols), dtype=np.int64)
    info = dict(meta or {})
    info["parts"] = parts
    return Program(cfg, instrs, inputs=inputs, outputs=outputs,
                   pack_index=pack_index.reshape(-1, lanes),
                   unpack_index=unpack_index.reshape(-1, cols), constants=constants, meta=info)


def split_outputs(outputs, prefixes, name="c"):
    """``[outputs[prefix + name] for prefix in prefixes]``: one output of each joined program."""
    return [outputs[f"{prefix}{name}"] for prefix in prefixes]
