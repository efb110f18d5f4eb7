"""Programs for the tests of the core: hand-written ones whose timing is known, and GEMMs."""

import numpy as np
import torch

from bertaccel.hw import isa
from bertaccel.sw import compile_gemm
from bertaccel.sw import epilogue as ep_mod
from bertaccel.sw.program import Program
from verif.helpers import load, matmul, store, two_pass_sets

__all__ = ["raw_program", "raw_inputs", "hand_programs", "gemm_case"]


def raw_program(cfg, instrs):
    """``instrs`` as a program with one flat input ``x`` (every LOAD beat) and output ``y``."""
    n_in = sum(i.count for i in instrs if isinstance(i, isa.Load))
    n_out = sum(i.count for i in instrs if isinstance(i, isa.Store))
    return Program(cfg, instrs, inputs={"x": (max(n_in, 1) * cfg.lanes,)},
                   outputs={"y": (n_out * cfg.cols,)},
                   pack_index=np.arange(n_in * cfg.lanes).reshape(n_in, cfg.lanes),
                   unpack_index=np.arange(n_out * cfg.cols).reshape(n_out, cfg.cols))


def raw_inputs(program):
    cfg = program.cfg
    gen = torch.Generator().manual_seed(len(program.instrs))
    size = max(program.n_data_beats, 1) * cfg.lanes
    return {"x": torch.randint(-128, 128, (size,), generator=gen, dtype=torch.int8)}


def hand_programs(cfg):
    """``{name: instructions}``: small programs whose timing the tests know exactly."""
    r = cfg.rows
    soft, norm = isa.EpOp.SOFTMAX, isa.EpOp.LAYERNORM
    chain = [load(2 * r, push_next=True), matmul(3, pop_prev=True, push_next=True),
             store(3, pop_prev=True)]
    progs = {
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
    }
    return progs


def gemm_case(cfg, m, k, n, op, gen):
    """``(program, inputs)``: a GEMM of ``m x k x n`` with a random epilogue of ``op`` (``None``:
    raw) and random operands, all drawn from ``gen``."""
    inputs, epilogue = ep_mod.random_gemm(m, k, n, op, generator=gen)
    return compile_gemm(cfg, m, k, n, epilogue=epilogue), inputs
