"""AXI4 and AXI4-Lite interfaces as Amaranth signatures, and their constant values."""

from amaranth import Mux
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

__all__ = ["Burst", "Resp", "AXI4LiteSignature", "AXI4Signature", "INSTR_ID", "DATA_ID",
           "MAX_BURST", "CACHE"]

#: ARID of instruction fetches and of input-data fetches.
INSTR_ID, DATA_ID = 0, 1
#: Default longest burst, in bus words (AXI4 allows 256 for INCR; 16 is also legal AXI3).
MAX_BURST = 16
#: AxCACHE of every request: normal, non-cacheable, bufferable (what DMA engines use).
CACHE = 0b0011


class Burst:
    """AxBURST values."""
    FIXED, INCR, WRAP = 0, 1, 2


class Resp:
    """xRESP values. ``SLVERR`` and ``DECERR`` (bit 1 set) are errors."""
    OKAY, EXOKAY, SLVERR, DECERR = 0, 1, 2, 3


def log2(value):
    return value.bit_length() - 1


def min_of(a, b):
    return Mux(a < b, a, b)


class AXI4LiteSignature(wiring.Signature):
    """An AXI4-Lite interface, seen from the master (a slave takes ``In(...)`` of it).

    Parameters
    ----------
    addr_width : int
    data_width : int
        32 or 64.
    """

    def __init__(self, *, addr_width, data_width=32):
        self.addr_width = addr_width
        self.data_width = data_width
        super().__init__({
            "awaddr":  Out(addr_width), "awprot": Out(3), "awvalid": Out(1), "awready": In(1),
            "wdata":   Out(data_width), "wstrb": Out(data_width // 8),
            "wvalid":  Out(1), "wready": In(1),
            "bresp":   In(2), "bvalid": In(1), "bready": Out(1),
            "araddr":  Out(addr_width), "arprot": Out(3), "arvalid": Out(1), "arready": In(1),
            "rdata":   In(data_width), "rresp": In(2), "rvalid": In(1), "rready": Out(1),
        })


class AXI4Signature(wiring.Signature):
    """A full AXI4 interface (no user signals, no region), seen from the master.

    Parameters
    ----------
    addr_width, data_width, id_width : int
    """

    def __init__(self, *, addr_width, data_width, id_width):
        self.addr_width = addr_width
        self.data_width = data_width
        self.id_width = id_width
        members = {}
        for ch in ("aw", "ar"):
            members.update({
                f"{ch}id": Out(id_width), f"{ch}addr": Out(addr_width), f"{ch}len": Out(8),
                f"{ch}size": Out(3), f"{ch}burst": Out(2), f"{ch}lock": Out(1),
                f"{ch}cache": Out(4), f"{ch}prot": Out(3), f"{ch}qos": Out(4),
                f"{ch}valid": Out(1), f"{ch}ready": In(1),
            })
            if ch == "aw":
                members.update({
                    "wdata": Out(data_width), "wstrb": Out(data_width // 8), "wlast": Out(1),
                    "wvalid": Out(1), "wready": In(1),
                    "bid": In(id_width), "bresp": In(2), "bvalid": In(1), "bready": Out(1),
                })
        members.update({
            "rid": In(id_width), "rdata": In(data_width), "rresp": In(2), "rlast": In(1),
            "rvalid": In(1), "rready": Out(1),
        })
        super().__init__(members)


