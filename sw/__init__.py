"""Host side of bertaccel: programs, the GEMM tiler, and the devices that run programs.

The public API is re-exported here. Backends that need optional tooling (the RTL device in
``bertaccel.sw.rtl``) are not imported by this package; import them by their module.
"""

from .device import Device, DeviceError, RunResult, SoftwareDevice, gemm
from .epilogue import Gelu, LayerNorm, Requant, ScaleError, Softmax
from .program import OperandError, Program, ProgramError, to_int8
from .tiler import TilePlan, compile_gemm, plan_gemm

__all__ = [
    "Program", "ProgramError", "OperandError", "to_int8",
    "TilePlan", "plan_gemm", "compile_gemm",
    "Device", "DeviceError", "RunResult", "SoftwareDevice", "gemm",
    "Requant", "Gelu", "Softmax", "LayerNorm", "ScaleError",
]
