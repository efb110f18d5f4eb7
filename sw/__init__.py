"""Host side of bertaccel: programs, the GEMM tiler, and the devices that run programs.

The public API is re-exported here. Backends that need optional tooling (the RTL device in
``bertaccel.sw.devices.rtl``) are not imported by this package; import them by their module.
"""

from .devices.base import Device, DeviceError, RunResult
from .devices.software import SoftwareDevice
from .epilogue import Gelu, LayerNorm, Requant, ScaleError, Softmax
from .gemm import gemm
from .program import OperandError, Program, ProgramError, to_int8
from .tiler import TilePlan, compile_gemm, plan_gemm

__all__ = [
    "Program", "ProgramError", "OperandError", "to_int8",
    "TilePlan", "plan_gemm", "compile_gemm",
    "Device", "DeviceError", "RunResult", "SoftwareDevice", "gemm",
    "Requant", "Gelu", "Softmax", "LayerNorm", "ScaleError",
]
