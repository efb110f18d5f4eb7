"""Exact int8 matrix products, by the kernel that this CPU runs fastest.

Every kernel here returns the same int32 matrix, bit for bit: the exact products of int8 operands
summed modulo 2**32, what the accelerator's int32 accumulator holds. They differ in speed, and the
fastest depends on the CPU:

``int_mm``
    ``torch._int_mm``. Fast where oneDNN has an int8 dot product (AVX-512 VNNI, AMX); on CPUs with
    AVX2 alone it runs at about 0.5 GOP/s, thousands of times slower than a float32 GEMM.
``float32``
    A float32 GEMM over chunks of at most :data:`F32_ROWS` rows of ``K``, the chunks' results added
    in int32. A product of two int8 values is at most ``2**14`` in magnitude, so every partial sum
    of a chunk is an integer of at most ``2**24``, which float32 holds exactly whatever the order
    of the additions.
``float64``
    The same with float64, whose chunks can be :data:`F64_ROWS` rows long.

The kernel is chosen once per process, on the first product: by the environment variable
:data:`ENV` when it names one, otherwise by timing each kernel on one small product
(:func:`probe`). :func:`describe` names the CPU and the choice, for reports.
"""

import os
import platform
import time

import torch

__all__ = ["ENV", "F32_ROWS", "F64_ROWS", "KERNELS", "KernelError", "describe", "int8_matmul",
           "cpu_model", "kernel", "probe", "requested", "select"]

#: The environment variable that names the kernel (``int_mm``, ``float32``, ``float64``);
#: unset, empty or ``auto``, the fastest one is measured.
ENV = "BERTACCEL_GEMM_KERNEL"
#: Rows of ``K`` a float32 chunk holds: ``F32_ROWS * 2**14 == 2**24``, float32's exact limit.
F32_ROWS = 1 << 10
#: Rows of ``K`` a float64 chunk holds: its sums stay within int32 (``2**16 * 2**14 < 2**31``).
F64_ROWS = 1 << 16

#: The product that :func:`probe` times, ``(m, k) @ (k, n)``: one attention-sized tile.
PROBE_SHAPE = (64, 256, 256)


class KernelError(ValueError):
    """:data:`ENV` names no kernel."""


def _int_mm(a, b):
    # Accumulates in int32 and so wraps exactly like the hardware.
    return torch._int_mm(a, b)


def _chunked(dtype, rows):
    def product(a, b):
        k = a.shape[-1]
        out = torch.matmul(a[..., :rows].to(dtype), b[..., :rows, :].to(dtype)).to(torch.int32)
        for start in range(rows, k, rows):
            part = torch.matmul(a[..., start:start + rows].to(dtype),
                                b[..., start:start + rows, :].to(dtype))
            out.add_(part.to(torch.int32))  # int32 addition wraps modulo 2**32
        return out
    return product


#: Every exact kernel by name, each ``(a, b) -> int32`` for contiguous int8 matrices.
KERNELS = {
    "int_mm": _int_mm,
    "float32": _chunked(torch.float32, F32_ROWS),
    "float64": _chunked(torch.float64, F64_ROWS),
}

_chosen = None


def probe(repeats=3):
    """Seconds each kernel takes for one :data:`PROBE_SHAPE` product (the fastest of
    ``repeats`` runs after a warm-up), by kernel name."""
    m, k, n = PROBE_SHAPE
    gen = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=gen)
    b = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=gen)
    seconds = {}
    for name, run in KERNELS.items():
        run(a, b)
        best = float("inf")
        for _ in range(repeats):
            begin = time.perf_counter()
            run(a, b)
            best = min(best, time.perf_counter() - begin)
        seconds[name] = best
    return seconds


def requested():
    """The kernel that :data:`ENV` names, or None for the fastest (unset, empty or ``auto``).

    Raises
    ------
    KernelError
        If :data:`ENV` names no kernel of :data:`KERNELS`.
    """
    wanted = os.environ.get(ENV, "").strip()
    if wanted in ("", "auto"):
        return None
    if wanted not in KERNELS:
        raise KernelError(f"{ENV} must be auto or one of {', '.join(KERNELS)}, not {wanted!r}")
    return wanted


def kernel():
    """The name of this process's kernel, chosen on the first call: :func:`requested`'s, or
    the fastest by :func:`probe`."""
    global _chosen
    if _chosen is None:
        _chosen = requested()
        if _chosen is None:
            seconds = probe()
            _chosen = min(seconds, key=seconds.get)
    return _chosen


def select(name):
    """Make ``name`` this process's kernel from now on (a bench comparing kernels); None chooses
    again on the next product, as at start-up.

    Raises
    ------
    KernelError
        If ``name`` is not a kernel of :data:`KERNELS`.
    """
    global _chosen
    if name is not None and name not in KERNELS:
        raise KernelError(f"the GEMM kernel must be one of {', '.join(KERNELS)}, not {name!r}")
    _chosen = name


def int8_matmul(a, b):
    """``a @ b`` of contiguous int8 CPU matrices ``(m, k) @ (k, n)`` as int32, exactly, by
    :func:`kernel`'s kernel."""
    return KERNELS[kernel()](a, b)


def cpu_model():
    """This CPU's model name (``/proc/cpuinfo``), or what :mod:`platform` says of it."""
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f
                        if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or platform.machine()


def describe():
    """The CPU and the kernel chosen on it, for a report: ``cpu`` (the model name),
    ``isa`` (torch's CPU capability: ``AVX2``, ``AVX512``, ...), ``cores``, ``threads``
    (torch's) and ``gemm_kernel``."""
    return {"cpu": cpu_model(), "isa": torch.backends.cpu.get_cpu_capability(),
            "cores": os.cpu_count(), "threads": torch.get_num_threads(),
            "gemm_kernel": kernel()}
