"""PyTorch references: the bit-exact integer reference operations (and, later, float BERT).

Never imports ``bertaccel.hw`` or ``bertaccel.sw``.
"""

from .ops import gemm

__all__ = ["gemm"]
