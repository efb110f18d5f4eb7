"""Hand-written programs whose timing turns on one latency or limit of the core or another.

Each is a few instructions that exercise one mechanism: the instruction queues, the token
channels up to their limit of 255, the preload, the drain, two-pass stores. The cycle tests
assert the cycle model's count on every one of them (``verif/block/test_core_cycles.py``,
``verif/system/test_cycles.py``) and the mutation run (:mod:`bertaccel.cluster.mutation`)
compares a mutant's cycles, beats and error flag on a selection of them.
"""

import numpy as np

from ..hw import isa
from .program import Program

__all__ = ["load", "matmul", "store", "two_pass_sets", "raw_program", "hand_programs"]


def load(count, **flags):
    """A LOAD of ``count`` beats into scratchpad A at row 0."""
    return isa.Load(target=isa.Target.SPAD_A, addr=0, count=count, **flags)


def matmul(m_len, **flags):
    """A MATMUL of ``m_len`` operand rows from row 0 of both scratchpads into accumulator row 0."""
    return isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=m_len, accumulate=False, **flags)


def store(rows, strips=1, op=isa.EpOp.RAW, **flags):
    """A STORE of ``rows`` x ``strips`` accumulator rows from row 0 through the epilogue ``op``."""
    return isa.Store(acc_addr=0, rows=rows, strips=strips, stride=rows, op=op, **flags)


def two_pass_sets(cfg, strips):
    """SETs that make a SOFTMAX / LAYERNORM STORE of ``strips`` strips legal."""
    return [isa.Set(index=isa.Param.ROW_LEN, value=strips * cfg.cols),
            isa.Set(index=isa.Param.SHIFT1, value=8)]


def raw_program(cfg, instrs):
    """``instrs`` as a program with one flat input ``x`` (every LOAD beat) and output ``y``."""
    n_in = sum(i.count for i in instrs if isinstance(i, isa.Load))
    n_out = sum(i.count for i in instrs if isinstance(i, isa.Store))
    return Program(cfg, instrs, inputs={"x": (max(n_in, 1) * cfg.lanes,)},
                   outputs={"y": (n_out * cfg.cols,)},
                   pack_index=np.arange(n_in * cfg.lanes).reshape(n_in, cfg.lanes),
                   unpack_index=np.arange(n_out * cfg.cols).reshape(n_out, cfg.cols))


def hand_programs(cfg):
    """``{name: instructions}`` of ``cfg``: the programs above, in a fixed order."""
    r = cfg.rows
    soft, norm = isa.EpOp.SOFTMAX, isa.EpOp.LAYERNORM
    chain = [load(2 * r, push_next=True), matmul(3, pop_prev=True, push_next=True),
             store(3, pop_prev=True)]
    return {
        "load": [load(5)],
        "load0": [load(0)],
        "loads": [load(5), load(0), load(3)],
        "matmul": [matmul(10)],
        "matmul0": [matmul(0)],
        "matmuls_short": [matmul(3)] * 5,
        "matmuls_rows": [matmul(r)] * 6,
        "matmuls_long": [matmul(2 * r + 5)] * 4,
        "matmuls_mixed": [matmul(1), matmul(r + 3), matmul(0), matmul(r), matmul(2), matmul(0)],
        "store": [store(10)],
        "store0": [store(0)],
        "store_set_store": [store(4, 2), isa.Set(index=isa.Param.MUL0, value=3), store(4)],
        "chain": chain,
        "chain_x3": chain * 3,
        "dispatch_blocked": [load(40, push_next=True)] * (cfg.queue_depth + 3)
        + [matmul(2, pop_prev=True)] * (cfg.queue_depth + 3),
        "serial": [load(r, push_next=True), matmul(5, pop_prev=True, push_prev=True),
                   load(r, pop_next=True, push_next=True), matmul(5, pop_prev=True)],
        "softmax_1x1": two_pass_sets(cfg, 1) + [store(1, 1, soft)],
        "softmax_3x1": two_pass_sets(cfg, 1) + [store(3, 1, soft)],
        "softmax_5x2": two_pass_sets(cfg, 2) + [store(5, 2, soft), store(2, 2, soft)],
        "layernorm_4x3": two_pass_sets(cfg, 3) + [store(4, 3, norm)],
        "layernorm_2x9": two_pass_sets(cfg, 9) + [store(2, 9, norm), store(1, 1, isa.EpOp.GELU)],
        "barrier": [store(0, push_prev=True), matmul(0, pop_next=True, push_prev=True),
                    load(0, pop_next=True)],
        "tokens_full": [load(0, push_next=True)] * 255 + [matmul(0, pop_prev=True)] * 255,
        # The execute unit's pushes wait for room (its room checks are registers): a long LOAD
        # or STORE ahead keeps the unit that pops busy past the execute unit's 255th push.
        "exec_to_load_full": [load(300 * r)] + [matmul(0, push_prev=True)] * 255
        + [load(0, pop_next=True), matmul(1, push_prev=True)] * 3 + [load(0, pop_next=True)] * 255,
        "exec_to_store_full": [store(cfg.acc_depth)] * (300 * r // cfg.acc_depth + 1)
        + [matmul(0, push_next=True)] * 255
        + [store(0, pop_prev=True), matmul(1, push_next=True)] * 3
        + [store(0, pop_prev=True)] * 255,
        "store_to_exec_full": [matmul(cfg.acc_depth)] * (300 * r // cfg.acc_depth + 1)
        + [store(0, push_prev=True)] * 255
        + [matmul(0, pop_next=True), store(1, push_prev=True)] * 3
        + [matmul(0, pop_next=True)] * 255,
    }
