"""Programs for the tests of the core: hand-written ones whose timing is known
(:mod:`bertaccel.sw.hand_programs`), and GEMMs."""

import torch

from bertaccel.sw import compile_gemm
from bertaccel.sw import epilogue as ep_mod
from bertaccel.sw.hand_programs import hand_programs, raw_program

__all__ = ["raw_program", "raw_inputs", "hand_programs", "gemm_case"]


def raw_inputs(program):
    cfg = program.cfg
    gen = torch.Generator().manual_seed(len(program.instrs))
    size = max(program.n_data_beats, 1) * cfg.lanes
    return {"x": torch.randint(-128, 128, (size,), generator=gen, dtype=torch.int8)}


def gemm_case(cfg, m, k, n, op, gen):
    """``(program, inputs)``: a GEMM of ``m x k x n`` with a random epilogue of ``op`` (``None``:
    raw) and random operands, all drawn from ``gen``."""
    inputs, epilogue = ep_mod.random_gemm(m, k, n, op, generator=gen)
    return compile_gemm(cfg, m, k, n, epilogue=epilogue), inputs
