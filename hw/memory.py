"""Scratchpad and accumulator memories."""

from amaranth import Module, signed
from amaranth.lib import data, memory, wiring

from .isa import PmemWord
from amaranth.lib.wiring import Out

__all__ = ["Scratchpad", "Accumulator", "ParamMemory"]


class Scratchpad(wiring.Component):
    """An operand scratchpad: ``depth`` rows of ``lanes`` x signed(``width``), one write port and
    one synchronous read port (data one cycle after the address). It starts all zero.

    Parameters
    ----------
    lanes, width, depth : int
    aux_read : bool
        Add the second read port ``rd_aux`` (scratchpad B: the store unit reads LayerNorm
        residuals there while the execute unit preloads weights).

    Members
    -------
    wr : Out(WritePort.Signature)
        Written by the load unit.
    rd : Out(ReadPort.Signature)
        Read by the execute unit.
    rd_aux : Out(ReadPort.Signature)
        Only with ``aux_read``.
    """

    def __init__(self, *, lanes, width, depth, aux_read=False):
        self._shape = data.ArrayLayout(signed(width), lanes)
        self._depth = depth
        self._aux_read = aux_read
        addr_width = (depth - 1).bit_length()
        members = {
            "wr": Out(memory.WritePort.Signature(addr_width=addr_width, shape=self._shape)),
            "rd": Out(memory.ReadPort.Signature(addr_width=addr_width, shape=self._shape)),
        }
        if aux_read:
            members["rd_aux"] = Out(memory.ReadPort.Signature(addr_width=addr_width,
                                                              shape=self._shape))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=self._shape, depth=self._depth, init=[])
        wr = mem.write_port()
        rd = mem.read_port()
        wiring.connect(m, wiring.flipped(self.wr), wr)
        wiring.connect(m, wiring.flipped(self.rd), rd)
        if self._aux_read:
            wiring.connect(m, wiring.flipped(self.rd_aux), mem.read_port())
        return m


class Accumulator(wiring.Component):
    """The accumulator: ``cfg.acc_depth`` rows of ``cfg.cols`` x signed(``cfg.acc_width``).

    The execute unit owns ``wr`` and ``rmw_rd`` (for read-modify-write accumulation); the store
    unit owns ``st_rd``. ``rmw_rd`` is transparent to ``wr``: a read issued in the cycle that
    writes the same row returns the new row, so back-to-back accumulations into one row need
    no stall. It starts all zero.

    Members
    -------
    wr : Out(WritePort.Signature)
    rmw_rd : Out(ReadPort.Signature)
    st_rd : Out(ReadPort.Signature)
    """

    def __init__(self, cfg):
        self._shape = data.ArrayLayout(signed(cfg.acc_width), cfg.cols)
        self._depth = cfg.acc_depth
        addr_width = cfg.acc_addr_width
        super().__init__({
            "wr":     Out(memory.WritePort.Signature(addr_width=addr_width, shape=self._shape)),
            "rmw_rd": Out(memory.ReadPort.Signature(addr_width=addr_width, shape=self._shape)),
            "st_rd":  Out(memory.ReadPort.Signature(addr_width=addr_width, shape=self._shape)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=self._shape, depth=self._depth, init=[])
        wr = mem.write_port()
        rmw_rd = mem.read_port(transparent_for=(wr,))
        st_rd = mem.read_port()
        wiring.connect(m, wiring.flipped(self.wr), wr)
        wiring.connect(m, wiring.flipped(self.rmw_rd), rmw_rd)
        wiring.connect(m, wiring.flipped(self.st_rd), st_rd)
        return m


class ParamMemory(wiring.Component):
    """The epilogue parameter memory: ``cfg.pmem_depth`` rows of ``cfg.cols`` x :data:`PmemWord`
    (a bias or mask and two 16-bit values per column), written by the load unit and read by the
    store unit, one row per strip. It starts all zero.

    Members
    -------
    wr : Out(WritePort.Signature)
    rd : Out(ReadPort.Signature)
    """

    def __init__(self, cfg):
        self._shape = data.ArrayLayout(PmemWord, cfg.cols)
        self._depth = cfg.pmem_depth
        addr_width = cfg.pmem_addr_width
        super().__init__({
            "wr": Out(memory.WritePort.Signature(addr_width=addr_width, shape=self._shape)),
            "rd": Out(memory.ReadPort.Signature(addr_width=addr_width, shape=self._shape)),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = memory.Memory(shape=self._shape, depth=self._depth, init=[])
        wiring.connect(m, wiring.flipped(self.wr), mem.write_port())
        wiring.connect(m, wiring.flipped(self.rd), mem.read_port())
        return m
