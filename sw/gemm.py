"""One GEMM on a device: check the operands, compile, run."""

import numpy as np

from ..hw import isa
from .program import OperandError, to_int8
from .tiler import compile_gemm

__all__ = ["gemm"]


def gemm(device, a, b, *, epilogue=None, r=None):
    """``a @ b`` on ``device``, with an optional fused epilogue: check the operands, compile with
    :func:`compile_gemm`, run.

    Parameters
    ----------
    device : Device
        The device to run on; the program is compiled for ``device.cfg``.
    a : torch.Tensor or numpy.ndarray
        ``(m, k)`` int8-valued matrix.
    b : torch.Tensor or numpy.ndarray
        ``(k, n)`` int8-valued matrix.
    epilogue : Requant or Gelu or Softmax or LayerNorm, optional
        Applied to the product on its way out (:mod:`bertaccel.sw.epilogue`).
    r : torch.Tensor or numpy.ndarray, optional
        ``(m, n)`` int8-valued residual; required by (and only by) :class:`LayerNorm`.

    Returns
    -------
    RunResult
        ``outputs["c"]`` is the ``(m, n)`` ``torch.int32`` product, or with an epilogue its
        int8 results (as int32).

    Raises
    ------
    OperandError
        If an operand is not 2-D or not int8-valued, the shapes do not chain, or the residual is
        missing, unexpected or of the wrong shape.
    ScaleError
        If an epilogue parameter cannot be represented.
    """
    shapes = {}
    operands = {}
    for name, value in (("a", a), ("b", b)):
        if not hasattr(value, "shape"):
            value = np.asarray(value)
        operands[name] = value
        shape = tuple(value.shape)
        if len(shape) != 2:
            raise OperandError(f"operand {name!r} must be a 2-D matrix, not of shape {shape}")
        shapes[name] = shape
    if shapes["a"][1] != shapes["b"][0]:
        raise OperandError(f"the shapes do not chain: a is {shapes['a']} and b is "
                           f"{shapes['b']}, but a.shape[1] must equal b.shape[0]")
    a = to_int8("a", operands["a"], shapes["a"])
    b = to_int8("b", operands["b"], shapes["b"])
    (m, k), n = shapes["a"], shapes["b"][1]
    for name, value in (("m", m), ("k", k), ("n", n)):
        if value < 1:
            raise OperandError(f"GEMM dimension {name} must be at least 1, not {value} "
                               f"(a is {shapes['a']}, b is {shapes['b']})")
    needs_r = getattr(epilogue, "op", None) == isa.EpOp.LAYERNORM
    if needs_r and r is None:
        raise OperandError(f"the {type(epilogue).__name__} epilogue needs the residual r, of "
                           f"shape {(m, n)}")
    if not needs_r and r is not None:
        raise OperandError("a residual r is only taken with the LayerNorm epilogue")
    program = compile_gemm(device.cfg, m, k, n, epilogue=epilogue)
    inputs = {"a": a, "b": b}
    if needs_r:
        inputs["r"] = to_int8("r", r if hasattr(r, "shape") else np.asarray(r), (m, n))
    return device.run(program, **inputs)
