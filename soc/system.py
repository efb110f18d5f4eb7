"""The SoC itself, in LiteX: :class:`AccelSoC` and the shell as a LiteX peripheral.

:class:`AccelSoC` is a LiteX ``SoCCore`` on LiteX's simulation platform: a VexRiscv CPU (the
``lite`` variant: RV32IM, no data cache, so what the accelerator writes into RAM is what the
CPU reads), an integrated ROM (the firmware), SRAM (the stack), main RAM, a UART (LiteX's
simulated one, on the model's stdout), a timer, LiteX's ``SimFinish`` (the firmware ends the
simulation with it) and :class:`AccelPeripheral`: the bertaccel
:class:`~bertaccel.hw.axi.AxiShell` with its AXI4-Lite slave on the CPU bus at
:data:`ACCEL_ORIGIN` (uncached), its AXI4 master a master of the interconnect (LiteX converts it
to the bus's 32-bit Wishbone), its ``irq`` a line of the CPU's interrupt controller
(``ACCEL_INTERRUPT`` in the firmware's ``generated/soc.h``).

Only this module imports LiteX and Migen (:func:`bertaccel.soc.build.missing_tools` says what
is missing).
"""

from litex.build.generic_platform import Pins, Subsignal
from litex.build.io import CRG
from litex.build.sim import SimPlatform
from litex.build.sim.platform import SimFinish
from litex.gen import LiteXModule
from litex.soc.integration.soc import SoCRegion
from litex.soc.integration.soc_core import SoCCore
from litex.soc.interconnect.axi import AXIInterface, AXILiteInterface
from migen import ClockSignal, Instance, ResetSignal, Signal

from ..fpga.ip import SHELL_MODULE, litex_field, shell_ports
from ..hw.axi import AxiShell, csr

__all__ = ["ACCEL_ORIGIN", "ACCEL_SIZE", "ROM_SIZE", "SRAM_SIZE", "MAIN_RAM_ORIGIN",
           "MAIN_RAM_SIZE",
           "SYS_CLK_HZ", "AccelPeripheral", "AccelSoC", "add_accel"]

#: Where the shell's registers sit on the CPU bus (in VexRiscv's uncached IO region), and the
#: size of their window.
ACCEL_ORIGIN = 0x9000_0000
ACCEL_SIZE = 1 << csr.ADDR_WIDTH
#: Memory sizes in bytes: the ROM holds the firmware with its image, main RAM the firmware's
#: data (the accelerator's program, input data and output area among them) and an encoder
#: layer's image (soc/layer.py: MiniLM's first layer on the 4x4 is 9.8 MB, its programs
#: and input streams), SRAM the stack.
ROM_SIZE = 0x1_0000
SRAM_SIZE = 0x2000
MAIN_RAM_SIZE = 0x100_0000
#: Where main RAM lies on the bus (LiteX's default).
MAIN_RAM_ORIGIN = 0x4000_0000
#: The simulated clock (only the UART's divider depends on it).
SYS_CLK_HZ = 1_000_000

_IO = [
    ("sys_clk", 0, Pins(1)),
    ("sys_rst", 0, Pins(1)),
    ("serial", 0,
     Subsignal("source_valid", Pins(1)), Subsignal("source_ready", Pins(1)),
     Subsignal("source_data", Pins(8)),
     Subsignal("sink_valid", Pins(1)), Subsignal("sink_ready", Pins(1)),
     Subsignal("sink_data", Pins(8))),
]


class _Irq:
    """What LiteX's interrupt controller takes from a peripheral: ``ev.irq``, a level."""

    def __init__(self):
        self.irq = Signal()


class AccelPeripheral(LiteXModule):
    """The shell as a LiteX module: an ``Instance`` of its Verilog.

    Every port of the shell (:func:`bertaccel.fpga.ip.shell_ports`) is connected by name, port
    ``s_axil_awaddr`` to ``axil.aw.addr`` and so on (:func:`bertaccel.fpga.ip.litex_field`); a
    port narrower than LiteX's field (the 12-bit register address) takes its low bits.

    Parameters
    ----------
    platform : SimPlatform
        The Verilog file is added to it.
    cfg : AccelConfig
    verilog : Path
        The shell's Verilog (module :data:`bertaccel.fpga.ip.SHELL_MODULE`).

    Members
    -------
    axil : AXILiteInterface
        The register slave, 32-bit.
    axi : AXIInterface
        The memory master, of ``cfg.axi_data_width`` and ``cfg.axi_addr_width``.
    ev.irq : Signal
        The shell's ``irq``.
    """

    def __init__(self, platform, cfg, verilog):
        self.axil = AXILiteInterface(data_width=csr.DATA_WIDTH, address_width=32)
        self.axi = AXIInterface(data_width=cfg.axi_data_width,
                                address_width=cfg.axi_addr_width, id_width=1)
        self.ev = _Irq()
        platform.add_source(str(verilog))
        ports = {"i_clk": ClockSignal("sys"), "i_rst": ResetSignal("sys"), "o_irq": self.ev.irq}
        buses = {"s_axil": self.axil, "m_axi": self.axi}
        shell = AxiShell(cfg)
        shell._MustUse__silence = True   # read for its ports, never elaborated
        for port in shell_ports(shell):
            name, width = port["name"], port["width"]
            prefix = next((p for p in buses if name.startswith(p + "_")), None)
            if prefix is None:
                continue
            channel, field = litex_field(name[len(prefix) + 1:].upper()).split(".")
            signal = getattr(getattr(buses[prefix], channel), field)
            if port["direction"] == "input":
                ports[f"i_{name}"] = signal[:width]
            elif len(signal) == width:
                ports[f"o_{name}"] = signal
            else:
                wire = Signal(width, name=name)
                self.comb += signal.eq(wire)
                ports[f"o_{name}"] = wire
        self.specials += Instance(SHELL_MODULE, **ports)


def add_accel(soc, platform, cfg, verilog):
    """Put the shell on ``soc`` (a LiteX ``SoCCore``) as ``soc.accel``: its AXI4-Lite slave at
    :data:`ACCEL_ORIGIN` (uncached), its AXI4 master on the bus, its interrupt."""
    soc.accel = AccelPeripheral(platform, cfg, verilog)
    soc.bus.add_slave("accel", soc.accel.axil,
                      region=SoCRegion(origin=ACCEL_ORIGIN, size=ACCEL_SIZE, cached=False))
    soc.bus.add_master("accel", master=soc.accel.axi)
    soc.irq.add("accel", use_loc_if_exists=True)


class AccelSoC(SoCCore):
    """The SoC of the module docstring.

    Parameters
    ----------
    cfg : AccelConfig
    verilog : Path
        The shell's Verilog for ``cfg``.
    """

    def __init__(self, cfg, verilog):
        platform = SimPlatform("SIM", list(_IO))
        self.crg = CRG(platform.request("sys_clk"))
        # The ROM and main RAM are initialised (with zeros) so that LiteX gives them $readmemh
        # files: the firmware (and a layer's image) is written there before each run, and the
        # model needs no rebuild for it.
        SoCCore.__init__(
            self, platform, clk_freq=SYS_CLK_HZ, cpu_type="vexriscv", cpu_variant="lite",
            integrated_rom_size=ROM_SIZE, integrated_rom_init=[0] * (ROM_SIZE // 4),
            integrated_sram_size=SRAM_SIZE, integrated_main_ram_size=MAIN_RAM_SIZE,
            integrated_main_ram_init=[0] * (MAIN_RAM_SIZE // 4),
            uart_name="sim", with_timer=True, ident="bertaccel SoC", ident_version=False)
        if self.mem_map["main_ram"] != MAIN_RAM_ORIGIN:
            raise ValueError(f"LiteX puts main RAM at {self.mem_map['main_ram']:#x}, not "
                             f"{MAIN_RAM_ORIGIN:#x}: update soc/system.py")
        self.sim_finish = SimFinish()
        add_accel(self, platform, cfg, verilog)
