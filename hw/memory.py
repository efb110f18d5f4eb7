"""Scratchpad, accumulator and parameter memories.

On an FPGA these are block RAMs, and two choices keep the RAM's output free of logic (a timing
choice: nextpnr puts an ECP5 DP16KD's clock-to-output at 5.8 ns, so at 150 MHz its data must go
straight into a register):

* The scratchpads, the accumulator and the parameter memory carry yosys's ``no_rw_check``
  attribute: what a read returns in the cycle its row is written is left undefined on the
  FPGA (a simulator still gives the Verilog answer). Without it yosys emulates the defined
  answer with a multiplexer after the RAM. No unit may depend on it: the token channels keep
  a unit off the rows another is writing (a legal program never reads a row in the cycle it
  is loaded or stored; docs/tiler.md gives the chain that protects the parameter memory), and
  the execute unit forwards its own accumulator writes.
* A scratchpad deeper than 2048 rows is built of column slices that each fit one block RAM
  (see :func:`_block_ram_slice`).

yosys reads ``no_rw_check`` only where it turns Verilog's register after a memory into a
synchronous read port. A design that reaches yosys as RTLIL (amaranth's own build, the ULX3S
flow) already has synchronous ports, which then keep their defined answer and get the
multiplexer; such a flow runs :data:`RTLIL_NO_RW_CHECK` after reading the design.
"""

from amaranth import Cat, Module, signed, unsigned
from amaranth.lib import data, memory, wiring
from amaranth.lib.wiring import Out

from .dsp import uses_ecp5_dsp
from .isa import PmemWord

__all__ = ["Scratchpad", "Accumulator", "ParamMemory", "RTLIL_NO_RW_CHECK", "rom"]

#: yosys: a read of the row written in the same cycle may return anything (module docstring).
_RAM_ATTRS = {"no_rw_check": 1}

#: The yosys command that gives ``no_rw_check``'s meaning to the read ports of these memories
#: in a design read as RTLIL: their collisions with the (one) write port are don't-care. It
#: selects them by name: every memory here, and only these, is named ``mem`` or ``mem_<i>``.
RTLIL_NO_RW_CHECK = "setparam -set COLLISION_X_MASK 1'1 t:$memrd_v2 r:MEMID=\\mem* %i"


class Scratchpad(wiring.Component):
    """An operand scratchpad: ``depth`` rows of ``lanes`` x signed(``width``), one write port and
    one synchronous read port (data one cycle after the address). It starts all zero. A read
    of the row being written in the same cycle returns the old row in simulation and an
    undefined row on an FPGA (see the module docstring).

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
        slice_bits = _block_ram_slice(self._depth)
        if slice_bits is None or slice_bits >= self._shape.size:
            m.submodules.mem = mem = memory.Memory(shape=self._shape, depth=self._depth, init=[],
                                                   attrs=_RAM_ATTRS)
            wiring.connect(m, wiring.flipped(self.wr), mem.write_port())
            wiring.connect(m, wiring.flipped(self.rd), mem.read_port())
            if self._aux_read:
                wiring.connect(m, wiring.flipped(self.rd_aux), mem.read_port())
            return m

        # Timing: deeper than 2048 rows, yosys may build the memory from 2048 x 9 block RAMs
        # stacked two deep, with a LUT multiplexer after them. The block RAM's clock-to-output
        # (5.8 ns in nextpnr's ECP5 model) leaves no time for it at 150 MHz. Column slices as
        # wide as one 16 Kbit block RAM is at this depth (4 bits at 4096 rows) map to one RAM
        # each, with nothing after it.
        read_ports = [self.rd, self.rd_aux] if self._aux_read else [self.rd]
        for index, low in enumerate(range(0, self._shape.size, slice_bits)):
            high = min(low + slice_bits, self._shape.size)
            mem = memory.Memory(shape=high - low, depth=self._depth, init=[], attrs=_RAM_ATTRS)
            m.submodules[f"mem_{index}"] = mem
            wr = mem.write_port()
            m.d.comb += [wr.addr.eq(self.wr.addr), wr.en.eq(self.wr.en),
                         wr.data.eq(self.wr.data.as_value()[low:high])]
            for port in read_ports:
                rd = mem.read_port()
                m.d.comb += [rd.addr.eq(port.addr), rd.en.eq(port.en),
                             port.data.as_value()[low:high].eq(rd.data)]
        return m


def _block_ram_slice(depth):
    """Bits a 16 Kbit block RAM (ECP5 DP16KD, and most FPGAs' 18 Kbit RAMs) holds per row at
    ``depth`` rows with no multiplexer, when that is narrower than its 9 bits at 2048 rows;
    else None."""
    if 2048 < depth <= 16384:
        return 16384 // depth
    return None


def rom(m, values, addr, *, name, platform):
    """``values[addr]`` a cycle after ``addr``: a table's synchronous read.

    For an ECP5 (``platform``, as :func:`~bertaccel.hw.dsp.uses_ecp5_dsp`) a table deeper than
    2048 rows is block RAMs side by side, each holding the bits one RAM holds at that depth
    (:func:`_block_ram_slice`), so no multiplexer follows them and a register of the data
    alone can become their output register (``fpga/ramreg.py``); elsewhere it is one memory
    (the same values in the same cycles, and fewer lines of initial values in the Verilog a
    simulator compiles). The memories are ``m``'s submodules ``<name>0``, ``<name>1``, ...
    """
    width = max(values).bit_length()
    step = (_block_ram_slice(len(values)) if uses_ecp5_dsp(platform) else None) or width
    parts = []
    for lo in range(0, width, step):
        bits = min(step, width - lo)
        table = m.submodules[f"{name}{lo // step}"] = memory.Memory(
            shape=unsigned(bits), depth=len(values),
            init=[value >> lo & ((1 << bits) - 1) for value in values])
        port = table.read_port()
        m.d.comb += port.addr.eq(addr)
        parts.append(port.data)
    return Cat(*parts)


class Accumulator(wiring.Component):
    """The accumulator: ``cfg.acc_depth`` rows of ``cfg.cols`` x signed(``cfg.acc_width``).

    The execute unit owns ``wr`` and ``rmw_rd`` (for read-modify-write accumulation); the store
    unit owns ``st_rd``. Neither read port is transparent: a read issued in the cycle that
    writes the same row returns the old row in simulation and an undefined row on an FPGA (see
    the module docstring); the execute unit forwards its own writes. (Timing: with a
    transparent ``rmw_rd`` yosys builds the port from the RAM's address register instead of
    its data register, which leaves the RAM's 5.8 ns clock-to-output in front of the execute
    unit's adder; non-transparent, the register after the port stays one and the ECP5 flow
    moves it into the RAM, fpga/ramreg.py.) It starts all zero.

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
        m.submodules.mem = mem = memory.Memory(shape=self._shape, depth=self._depth, init=[],
                                               attrs=_RAM_ATTRS)
        wr = mem.write_port()
        rmw_rd = mem.read_port()
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
        m.submodules.mem = mem = memory.Memory(shape=self._shape, depth=self._depth, init=[],
                                               attrs=_RAM_ATTRS)
        wiring.connect(m, wiring.flipped(self.wr), mem.write_port())
        wiring.connect(m, wiring.flipped(self.rd), mem.read_port())
        return m
