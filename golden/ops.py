"""Bit-exact integer reference operations.

These are the references the bit-exact software device and the RTL are checked against. They use
only PyTorch: this package never imports ``hw`` or ``sw``.
"""

import torch

from .intops import PROB_DIGIT_BITS
from .kernels import int8_matmul

__all__ = ["gemm"]


def _check_int8_matrix(name, value):
    if not isinstance(value, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor of dtype torch.int8, "
                        f"not {type(value).__name__}")
    if value.dtype != torch.int8:
        raise TypeError(f"{name} must have dtype torch.int8, not {value.dtype}")
    if value.dim() != 2:
        raise ValueError(f"{name} must be a 2-D matrix, not a {value.dim()}-D tensor of shape "
                         f"{tuple(value.shape)}")


def gemm(a, b, *, k_high=0):
    """The int32 product of two int8 matrices, exactly as the accelerator computes it.

    Every product is exact and the sums wrap modulo 2**32, which is what an int32 accumulator
    does whatever order it adds the partial sums in (by the CPU's fastest exact kernel,
    :func:`~bertaccel.golden.kernels.int8_matmul`). The first ``k_high`` rows of ``K`` are
    *high* rows, whose products are shifted left by :data:`~bertaccel.golden.intops.
    PROB_DIGIT_BITS` (the high digit plane of 12-bit probabilities, see
    :func:`~bertaccel.golden.intops.prob_digits`).

    Parameters
    ----------
    a : torch.Tensor
        ``(m, k)`` matrix of dtype ``torch.int8``.
    b : torch.Tensor
        ``(k, n)`` matrix of dtype ``torch.int8``.
    k_high : int
        High rows of ``K``, from 0 (none) to ``k``.

    Returns
    -------
    torch.Tensor
        ``(m, n)`` matrix of dtype ``torch.int32``, on the CPU.

    Raises
    ------
    TypeError
        If an operand is not a tensor or its dtype is not ``torch.int8``.
    ValueError
        If an operand is not 2-D, the inner dimensions differ or ``k_high`` is out of range.
    """
    _check_int8_matrix("a", a)
    _check_int8_matrix("b", b)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"cannot multiply a of shape {tuple(a.shape)} by b of shape "
                         f"{tuple(b.shape)}: the inner dimensions {a.shape[1]} and "
                         f"{b.shape[0]} differ")
    m, k = a.shape
    n = b.shape[1]
    if isinstance(k_high, bool) or not isinstance(k_high, int) or not 0 <= k_high <= k:
        raise ValueError(f"k_high must be an int from 0 to k = {k}, not {k_high!r}")
    if k_high:
        high = gemm(a[:, :k_high], b[:k_high])
        return high.bitwise_left_shift_(PROB_DIGIT_BITS).add_(gemm(a[:, k_high:], b[k_high:]))
    if m == 0 or n == 0 or k == 0:
        return torch.zeros((m, n), dtype=torch.int32)
    return int8_matmul(a.cpu().contiguous(), b.cpu().contiguous())
