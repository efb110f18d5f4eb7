"""What the flow tells the tools: the yosys scripts, the clock constraint and nextpnr's command
line. Every run works in one build folder with relative paths (the YoWASP tools see only their
working directory): ``top.v`` (or ``top.il``) in, ``netlist.json`` and ``stat.json`` from
yosys, ``top.lpf``, then ``report.json`` and ``nextpnr.log`` from nextpnr."""

from ..hw.dsp import KEEP_REGISTERS
from ..hw.memory import RTLIL_NO_RW_CHECK
from .designs import TOP_NAME

__all__ = ["CLASSIC_ABC_STEPS", "yosys_scripts", "blocks_script", "lpf", "nextpnr_command"]

_YOSYS_SCRIPT = """\
read_verilog {verilog}
{keep}
synth_ecp5 -top {top}{options} -json netlist.json
tee -q -o stat.json stat -json
"""

#: ``synth_ecp5`` up to its cell mapping with the classic abc LUT mapper in place of abc9
#: (format with ``top``); the board build (bench/ulx3s.py) uses it too. LUTs of 4 to 7
#: inputs, as synth_ecp5 maps with the classic mapper: a wider function is LUT4s and the
#: slice's PFUMX or L6MUX21, no route between them, where LUT4s alone take a level of
#: routing more (docs/fpga.md).
CLASSIC_ABC_STEPS = """\
synth_ecp5 -top {top} -run :map_luts
check -latchonly -assert
techmap -map +/lattice/latches_map.v
abc -dress -lut 4:7
clean"""

_YOSYS_FALLBACK_SCRIPT = """\
read_verilog {verilog}
{keep}
""" + CLASSIC_ABC_STEPS + """
synth_ecp5 -top {top} -run map_cells: -json netlist.json
tee -q -o stat.json stat -json
"""


_YOSYS_BLOCKS_SCRIPT = """\
{read}
{keep}
synth_ecp5 -top {top} -run :map_luts
tee -q -o stat.json stat -json
select {top}
write_json -selected netlist.json
"""


def yosys_scripts():
    """The scripts a synthesis run may use, by file name, in the order the flow tries them:
    ``synth_ecp5`` (abc9), the same without wide LUTs, and the classic abc mapper's steps."""
    return {
        "synth.ys": _YOSYS_SCRIPT.format(verilog="top.v", top=TOP_NAME, keep=KEEP_REGISTERS,
                                         options=""),
        "synth-nowidelut.ys": _YOSYS_SCRIPT.format(verilog="top.v", top=TOP_NAME,
                                                   keep=KEEP_REGISTERS, options=" -nowidelut"),
        "synth-abc.ys": _YOSYS_FALLBACK_SCRIPT.format(verilog="top.v", top=TOP_NAME,
                                                      keep=KEEP_REGISTERS),
    }


def blocks_script(frontend="verilog"):
    """``synth_ecp5`` up to LUT mapping (for :func:`~bertaccel.fpga.synth.map_blocks`); it writes
    the top module's netlist too (the cell library's models, which hold processes until LUT
    mapping, are left out). It reads ``top.v``, or for ``frontend="rtlil"`` ``top.il`` followed
    by :data:`~bertaccel.hw.memory.RTLIL_NO_RW_CHECK` (the meaning ``no_rw_check`` has when
    yosys reads the Verilog)."""
    read = {"verilog": "read_verilog top.v",
            "rtlil": f"read_rtlil top.il\n{RTLIL_NO_RW_CHECK}"}[frontend]
    return _YOSYS_BLOCKS_SCRIPT.format(read=read, top=TOP_NAME, keep=KEEP_REGISTERS)


def lpf(tgt, freq_mhz):
    """The constraints: the clock pin of ``tgt`` and the clock frequency nextpnr aims for."""
    return (f'LOCATE COMP "clk" SITE "{tgt.clock_pin}";\n'
            f'IOBUF PORT "clk" IO_TYPE=LVCMOS33;\n'
            f'FREQUENCY PORT "clk" {freq_mhz:g} MHZ;\n')


def nextpnr_command(tgt, seed, placer="heap", router="router1"):
    """nextpnr-ecp5's arguments for a run in a build folder holding ``netlist.json`` and
    ``top.lpf`` (relative paths: the YoWASP tools see only their working directory); it writes
    ``report.json`` and ``nextpnr.log`` there. ``placer`` is named only when it is not nextpnr's
    default (heap)."""
    return [*tgt.nextpnr_args, "--json", "netlist.json", "--lpf", "top.lpf",
            "--lpf-allow-unconstrained", "--seed", str(seed),
            *([] if placer == "heap" else ["--placer", placer]), "--router", router,
            "--report", "report.json", "--timing-allow-fail", "-l", "nextpnr.log", "-q"]
