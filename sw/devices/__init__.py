"""Devices: the backends that run compiled programs behind one protocol (:class:`Device`).

The software device is imported here; the RTL device (``bertaccel.sw.devices.rtl``), which
needs the simulator tooling, and the AXI host model (``bertaccel.sw.devices.axi``) are imported
by their modules.
"""

from .base import Device, DeviceError, RunResult
from .software import SoftwareDevice

__all__ = ["Device", "DeviceError", "RunResult", "SoftwareDevice"]
