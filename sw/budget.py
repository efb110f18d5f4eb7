"""The memory a run needs, estimated before it starts and checked against what the machine has.

::

    need = gemm_memory(cfg, 2048, 2048, 2048)         # about 3.9 GiB on 8x8
    check_memory(need, limit=parse_size("4G"), what="this GEMM")   # BudgetError: ... 4.0 GiB

What a compiled program costs comes from its size (:func:`bertaccel.sw.tiler.program_size`, in
closed form: nothing is compiled to know it). The costs per unit were calibrated on the peak
resident set (``ru_maxrss``) of ``bertaccel gemm`` on the ref device, less the interpreter's and
the imports' (287 MiB): ``python bench/gemm_memory.py`` runs 16 shapes from 8 x 8 x 8 to
2048 x 2048 x 2048 and 8192 x 64 x 8192 on the 2x2 to 32x32 presets, with and without epilogues,
and writes ``bench/results/gemm_memory.json``. The estimate is 1.03x the measured peak for
2048 x 2048 x 2048 on 8x8 (where the pack index dominates), 1.1x to 1.7x for the others, and up
to 2.2x for small GEMMs, where the fixed part dominates: it errs on the side of refusing.
For BERT the same costs are summed over the stage programs of a batch: for 32 texts of 63 tokens
on 8x8 (ref device, no compile cache) the estimate is 3.8 GiB, and the whole process peaked at
3.1 GiB, model and imports included; for 8 texts of 38 tokens on the isa device, 0.8 GiB and
1.2 GiB.
"""

import re

__all__ = ["BudgetError", "parse_size", "format_size", "available_memory", "program_memory",
           "gemm_memory", "bert_memory", "check_memory"]


class BudgetError(ValueError):
    """A run that needs more memory than it may have; the message says how much."""


#: Bytes of a run besides its programs and tensors (the devices' memories, the kernels torch
#: loads on first use: 19 MiB measured for an 8 x 8 x 8 GEMM), with room to spare.
_FIXED = 32 << 20
#: Bytes per element of the pack index (int64) and of the unpack index: the compiler holds each
#: index twice at its peak (its parts, then their concatenation).
_PACK_BYTES = 2 * 8
_UNPACK_BYTES = 2 * 8
#: Bytes per instruction: the instruction object (about 160) and its list entry, and the cycle
#: model's ledger of it (five lists of int, and the busy intervals).
_INSTRUCTION_BYTES = 800
#: Bytes per output element: the int32 beats as they leave, joined, unpacked, and the golden
#: product they are checked against.
_OUTPUT_BYTES = 12
#: Rows of a BERT stage's GEMM that :func:`bert_memory` plans; more are counted in proportion.
_PLANNED_ROWS = 256
_UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_size(text):
    """Bytes of a size such as ``"4G"``, ``"512M"``, ``"1.5GiB"`` or ``"1000000"`` (units are
    powers of 1024); :class:`BudgetError` if it is not one."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d*)?)\s*([KMGT]?)(?:i?B)?\s*", str(text), re.IGNORECASE)
    if not match or float(match[1]) <= 0:
        raise BudgetError(f"--max-memory must be a size such as 4G or 512M, not {text!r}")
    return int(float(match[1]) * _UNITS[match[2].upper()])


def format_size(size):
    """``size`` bytes for people: ``"3.8 GiB"``."""
    for unit in ("TiB", "GiB", "MiB", "KiB"):
        scale = 1 << (10 * ("KMGT".index(unit[0]) + 1))
        if size >= scale:
            return f"{size / scale:.1f} {unit}"
    return f"{size} bytes"


def _read(path):
    try:
        with open(path) as file:
            return file.read()
    except OSError:
        return None


def available_memory():
    """Bytes this process may still take: ``MemAvailable`` of ``/proc/meminfo``, or less when
    the cgroup (a container) has a lower limit; ``None`` when neither can be read."""
    found = []
    meminfo = _read("/proc/meminfo")
    match = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo or "", re.MULTILINE)
    if match:
        found.append(int(match[1]) << 10)
    limit, used = _read("/sys/fs/cgroup/memory.max"), _read("/sys/fs/cgroup/memory.current")
    if limit and used and limit.strip().isdigit() and used.strip().isdigit():
        found.append(max(0, int(limit) - int(used)))
    return min(found) if found else None


def program_memory(cfg, size, outputs):
    """Bytes that compiling and running a program of ``size`` (as
    :func:`~bertaccel.sw.tiler.program_size` gives it) with ``outputs`` output elements take at
    their peak."""
    return (_PACK_BYTES * size["data_beats"] * cfg.lanes
            + _UNPACK_BYTES * size["out_beats"] * cfg.cols
            + _INSTRUCTION_BYTES * size["instructions"] + _OUTPUT_BYTES * outputs)


def gemm_memory(cfg, m, k, n, *, epilogue=None):
    """Bytes that compiling ``(m x k) @ (k x n)`` for ``cfg`` (with ``epilogue``) and running it
    on the software device take at their peak: its operands, program and outputs.

    Raises
    ------
    ValueError, ProgramError
        As :func:`~bertaccel.sw.tiler.plan_gemm` (a bad dimension, a GEMM the config cannot
        hold).
    """
    from .tiler import plan_gemm, program_size

    plan = plan_gemm(cfg, m, k, n, epilogue=epilogue)
    size = program_size(cfg, plan, epilogue=epilogue)
    return _FIXED + m * k + k * n + program_memory(cfg, size, m * n)


def bert_memory(bert, batch, seq, *, layers=1):
    """Bytes that one batch of ``batch`` sequences of ``seq`` tokens takes through ``bert``'s
    stage programs, with the programs of ``layers`` layers held at once (1 to time a batch, as
    the ref device and ``bench bert`` do; every layer on the ``isa`` and ``rtl`` devices).

    Each layer's attention programs are joined per head and sequence (``batch * heads`` copies);
    the weight stages of every layer share their index tensors.
    """
    from .epilogue import Softmax
    from .tiler import plan_gemm, program_size

    spec, k, cfg = bert.spec, bert.k, bert.cfg
    q = bert.layers[0]
    tokens = batch * seq
    weights = [(tokens, k[stage], n, bert.epilogue(0, stage)) for stage, n in (
        ("qkv", 3 * spec.hidden), ("wo", spec.hidden), ("w1", spec.intermediate),
        ("w2", spec.hidden))]
    attention = [(seq, spec.head_dim, seq, Softmax(in_scale=q.qk_scale)),
                 (seq, seq, spec.head_dim, q.pv_ep)]

    def need(m, kk, n, epilogue):
        # A program's size grows in proportion to its rows: plan a few and scale (planning
        # thousands of rows takes seconds).
        rows = min(m, _PLANNED_ROWS)
        size = program_size(cfg, plan_gemm(cfg, rows, kk, n, epilogue=epilogue),
                            epilogue=epilogue)
        return program_memory(cfg, size, rows * n) * m // rows

    shared = sum(need(*gemm) for gemm in weights)
    per_layer = batch * spec.heads * sum(need(*gemm) for gemm in attention)
    return _FIXED + shared + layers * per_layer


def check_memory(need, *, limit=None, what="this run", hint=""):
    """Refuse a run that needs ``need`` bytes, more than ``limit`` (``--max-memory``) or, when
    no limit is given, than :func:`available_memory`: a :class:`BudgetError` naming both, and
    ending in ``hint`` (what would need less)."""
    if limit is not None:
        if need > limit:
            raise BudgetError(f"{what} needs about {format_size(need)} of memory, more than "
                              f"--max-memory {format_size(limit)}{hint}")
        return
    available = available_memory()
    if available is not None and need > available:
        raise BudgetError(f"{what} needs about {format_size(need)} of memory, more than this "
                          f"machine has available ({format_size(available)}; --max-memory "
                          f"sets another bound){hint}")
