"""The ULX3S-85F SoC (:mod:`bertaccel.soc.board`) as LiteX describes it, without synthesis.

LiteX writes the board SoC's Verilog, pin constraints and headers in a few seconds: main RAM is
the board's 32 MB SDRAM at the simulation's address, the shell sits at the same address, the
FTDI UART and the SDRAM's pins are where litex-boards puts them, and LiteDRAM's start-up
sequence is in the headers that the board's firmware (``soc/firmware/board.c``) compiles with,
when the RISC-V compiler is installed. The figures are read from nextpnr's log and report.
The bitstream itself (minutes) is ``bertaccel soc --board ulx3s --bitstream`` (docs/soc.md).
"""

import shutil

import pytest

pytest.importorskip("litedram")
pytest.importorskip("litex")

from bertaccel.cli import main  # noqa: E402
from bertaccel.fpga.ip import SHELL_MODULE, csr_header  # noqa: E402
from bertaccel.hw.axi import AxiShell  # noqa: E402
from bertaccel.hw.config import preset  # noqa: E402
from bertaccel.hw.verilog import convert  # noqa: E402
from bertaccel.soc import board  # noqa: E402
from bertaccel.soc.run import gemm_image  # noqa: E402
from bertaccel.soc.system import ACCEL_ORIGIN, MAIN_RAM_ORIGIN  # noqa: E402

__all__ = []


@pytest.fixture(scope="module")
def described(tmp_path_factory):
    cfg = preset("2x2")
    build = board.BoardBuild(cfg, tmp_path_factory.mktemp("board"))
    verilog = build.folder / f"{SHELL_MODULE}_{cfg.tag}.v"
    verilog.write_text(convert(AxiShell(cfg), name=SHELL_MODULE))
    build.header.write_text(csr_header(cfg))
    board._builder(cfg, verilog, build.folder, gateware=False)
    return build


def test_memory_map(described):
    mem = (described.include / "generated" / "mem.h").read_text()
    assert f"#define MAIN_RAM_BASE 0x{MAIN_RAM_ORIGIN:08x}L" in mem
    assert "#define MAIN_RAM_SIZE 0x02000000" in mem
    csr = (described.include / "generated" / "csr.h").read_text()
    assert "CSR_SDRAM_DFII_CONTROL_ADDR" in csr and "CSR_SIM_FINISH" not in csr
    soc = (described.include / "generated" / "soc.h").read_text()
    assert "#define ACCEL_INTERRUPT" in soc
    csv = (described.folder / "csr.csv").read_text()
    assert f"memory_region,accel,0x{ACCEL_ORIGIN:08x}," in csv


def test_pins(described):
    lpf = (described.gateware / f"{board.BUILD_NAME}.lpf").read_text()
    for pin in ("G2", "L4", "M1", "F19", "M20", "J16", "R1"):
        assert f'SITE "{pin}"' in lpf, pin


@pytest.mark.skipif(shutil.which("riscv64-unknown-elf-gcc") is None,
                    reason="no RISC-V compiler")
def test_board_firmware_compiles(described):
    image, _ = gemm_image(described.cfg, 9, 21, 11, seed=1)
    firmware = board.board_firmware(described, image)
    assert 0 < len(firmware) < 0x1_0000
    assert "call sdram_start" in (described.folder / "firmware" / "crt0_board.S").read_text()


def test_parse_nextpnr():
    text = ("Info: Max frequency for clock '$glbnet$crg_clkout': 61.23 MHz (PASS at 50.00 MHz)\n"
            "Info: Max frequency for clock '$glbnet$crg_clkout': 58.10 MHz (PASS at 50.00 MHz)\n")
    report = {"fmax": {"$glbnet$crg_clkout": {"achieved": 58.1, "constraint": 50.0}},
              "utilization": {"DP16KD": {"used": 40, "available": 208}}}
    figures = board.parse_nextpnr(text, report)
    assert figures["fmax"] == {"$glbnet$crg_clkout": {"mhz": 58.1, "target_mhz": 50.0,
                                                      "pass": True}}
    assert figures["utilization"] == {"DP16KD": [40, 208]}


@pytest.mark.parametrize("argv", [["--board", "ulx3s"], ["--bitstream"],
                                  ["--board", "ulx3s", "--bitstream", "--model", "minilm"]])
def test_board_usage(argv, capsys):
    assert main(["soc", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertaccel: error:") and err.count("\n") == 1
