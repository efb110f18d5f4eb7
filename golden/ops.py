"""Bit-exact integer reference operations.

These are the references the bit-exact software device and the RTL are checked against. They use
only PyTorch: this package never imports ``hw`` or ``sw``.
"""

import torch

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


def gemm(a, b):
    """The int32 product of two int8 matrices, exactly as the accelerator computes it.

    Every product is exact and the sums wrap modulo 2**32, which is what an int32 accumulator
    does whatever order it adds the partial sums in.

    Parameters
    ----------
    a : torch.Tensor
        ``(m, k)`` matrix of dtype ``torch.int8``.
    b : torch.Tensor
        ``(k, n)`` matrix of dtype ``torch.int8``.

    Returns
    -------
    torch.Tensor
        ``(m, n)`` matrix of dtype ``torch.int32``, on the CPU.

    Raises
    ------
    TypeError
        If an operand is not a tensor or its dtype is not ``torch.int8``.
    ValueError
        If an operand is not 2-D or the inner dimensions differ.
    """
    _check_int8_matrix("a", a)
    _check_int8_matrix("b", b)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"cannot multiply a of shape {tuple(a.shape)} by b of shape "
                         f"{tuple(b.shape)}: the inner dimensions {a.shape[1]} and "
                         f"{b.shape[0]} differ")
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0 or k == 0:
        return torch.zeros((m, n), dtype=torch.int32)
    # torch._int_mm accumulates in int32 and so wraps exactly like the hardware.
    return torch._int_mm(a.cpu().contiguous(), b.cpu().contiguous())
