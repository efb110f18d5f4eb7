"""The IP package of a build: what an FPGA design needs to take the accelerator in.

:func:`write_ip` writes, for a config with tag ``T``, into one folder:

* ``bertaccel_core_T.v``: the bare core, module ``bertaccel_core`` (stream ports);
* ``bertaccel_core_T.json``: the config (``bertaccel verilog --config`` reads it back);
* ``bertaccel_axi_T.v``: the AXI4 shell, module ``bertaccel_axi``, the FPGA top level;
* ``bertaccel_core_T.core``: a FuseSoC CAPI2 core, ``bertaccel:accel:core_T``;
* ``bertaccel_lint.vlt``: the Verilator waivers of its ``lint`` targets (``hw/lint.vlt``);
* ``bertaccel_csr_T.h``: the register map as a C header;
* ``bertaccel_csr_T.py``: the same map as a Python module that imports nothing;
* ``bertaccel_axi_T_interface.json`` and ``.md``: the shell's ports (clock, reset, the
  AXI4-Lite slave, the AXI4 master, the interrupt) with their widths.

Everything comes from the generator's own facts: the Verilog from
:func:`bertaccel.hw.verilog.convert`, the register map from :mod:`bertaccel.hw.axi.csr` (written
once there), the ports from the elaborated :class:`~bertaccel.hw.axi.AxiShell`, the ECP5 part from
:data:`bertaccel.fpga.synth.TARGETS`. The Verilog is the portable one (no vendor primitives):
Verilator, Icarus (``-g2005`` and ``-g2012``) and yosys all read it.
"""

import json
import shutil
import time
from pathlib import Path
from typing import NamedTuple

from amaranth import ClockDomain, Shape
from amaranth.lib.wiring import In

from .. import hw
from ..hw.axi import AxiShell, csr
from ..hw.axi.signature import CACHE, DATA_ID, INSTR_ID
from ..hw.core import BertAccelCore
from ..hw.verilog import convert
from ..sw.paths import check_folder
from .synth import TARGETS

__all__ = [
    "Constant", "CORE_MODULE", "SHELL_MODULE", "ECP5_TARGET", "WAIVERS_NAME",
    "write_core", "write_ip",
    "shell_ports", "litex_field", "interface", "interface_markdown",
    "csr_constants", "csr_header", "csr_python", "fusesoc_core",
]

#: Module names of the bare core and of the AXI4 shell in the written Verilog.
CORE_MODULE = "bertaccel_core"
SHELL_MODULE = "bertaccel_axi"
#: The part of the FuseSoC core's ``ecp5`` target (a key of :data:`bertaccel.fpga.synth.TARGETS`).
ECP5_TARGET = "ecp5-85k"
#: File name of the Verilator waivers in the package.
WAIVERS_NAME = "bertaccel_lint.vlt"
_WAIVERS = Path(hw.__file__).resolve().parent / "lint.vlt"
_VERSION = "0.1.0"


def _names(cfg):
    tag = cfg.tag
    return {
        "core_v": f"{CORE_MODULE}_{tag}.v", "config": f"{CORE_MODULE}_{tag}.json",
        "shell_v": f"{SHELL_MODULE}_{tag}.v", "fusesoc": f"{CORE_MODULE}_{tag}.core",
        "waivers": WAIVERS_NAME, "header": f"bertaccel_csr_{tag}.h",
        "python": f"bertaccel_csr_{tag}.py",
        "interface_json": f"{SHELL_MODULE}_{tag}_interface.json",
        "interface_md": f"{SHELL_MODULE}_{tag}_interface.md",
    }


def _convert(design, name, what, log):
    """:func:`~bertaccel.hw.verilog.convert` of ``design``, announced on ``log`` before and
    timed after (a large core takes tens of seconds)."""
    if log:
        log(f"converting {what} to Verilog")
    start = time.monotonic()
    text = convert(design, name=name)
    if log:
        lines = text.count("\n")
        log(f"{what}: {lines:,} lines in {time.monotonic() - start:.0f} s")
    return text


def write_core(cfg, out_dir, *, log=None):
    """Write the bare core's Verilog and the config JSON into ``out_dir``; return the paths.
    ``log(text)`` says what is being converted and how long it took."""
    out_dir = check_folder(out_dir)
    names = _names(cfg)
    v_path, json_path = out_dir / names["core_v"], out_dir / names["config"]
    v_path.write_text(_convert(BertAccelCore(cfg), CORE_MODULE, f"the {cfg.name} core", log))
    json_path.write_text(cfg.to_json() + "\n")
    return [v_path, json_path]


def write_ip(cfg, out_dir, *, log=None):
    """Write the IP package of ``cfg`` (the files listed in the module docstring) into
    ``out_dir``, made if needed; return the paths written. ``log(text)`` says what is being
    converted and how long it took.

    Raises
    ------
    PathError
        Before any work, if ``out_dir`` is not a folder that can be written
        (:func:`bertaccel.sw.paths.check_folder`).
    """
    out_dir = check_folder(out_dir)
    names = _names(cfg)
    paths = write_core(cfg, out_dir, log=log)
    shell = AxiShell(cfg)
    desc = interface(cfg, shell)
    texts = {
        "shell_v": _convert(shell, SHELL_MODULE, f"the {cfg.name} AXI4 shell", log),
        "fusesoc": fusesoc_core(cfg),
        "header": csr_header(cfg),
        "python": csr_python(cfg),
        "interface_json": json.dumps(desc, indent=2) + "\n",
        "interface_md": interface_markdown(desc),
    }
    for key, text in texts.items():
        path = out_dir / names[key]
        path.write_text(text)
        paths.append(path)
    waivers = out_dir / names["waivers"]
    shutil.copyfile(_WAIVERS, waivers)
    paths.append(waivers)
    return paths


# -- ports ----------------------------------------------------------------------------------------

def shell_ports(shell):
    """``[{"name", "direction", "width"}]``: the ports of the Verilog of ``shell`` (an
    :class:`~bertaccel.hw.axi.AxiShell`), the clock and reset of its one domain first."""
    ports = [{"name": "clk", "direction": "input", "width": 1},
             {"name": "rst", "direction": "input", "width": 1}]
    for name, member in shell.signature.members.items():
        ports.append({"name": name, "direction": "input" if member.flow == In else "output",
                      "width": Shape.cast(member.shape).width})
    return ports


def _axi_signals(ports, prefix):
    """``{AXI signal name: port name}`` of the ports named ``<prefix>_<signal>``."""
    return {port["name"][len(prefix) + 1:].upper(): port["name"] for port in ports
            if port["name"].startswith(prefix + "_")}


def interface(cfg, shell):
    """The description of the shell's ports that :func:`write_ip` writes as JSON: a dict.

    Parameters
    ----------
    cfg : AccelConfig
    shell : AxiShell
        The shell of ``cfg`` to describe (the one that is converted to Verilog).
    """
    ports = shell_ports(shell)
    sync = ClockDomain("sync")
    return {
        "module": SHELL_MODULE,
        "verilog": _names(cfg)["shell_v"],
        "config": cfg.name, "tag": cfg.tag,
        "clock": {"port": "clk", "edge": "rising" if sync.clk_edge == "pos" else "falling",
                  "note": "the only clock: every other port is synchronous to it"},
        "reset": {"port": "rst", "active": "high", "synchronous": not sync.async_reset,
                  "note": "resets every register of the shell and the core (memories keep "
                          "their contents); registers also start at their reset values"},
        "interfaces": [
            {"name": "s_axil", "protocol": "AXI4-Lite", "mode": "slave", "clock": "clk",
             "reset": "rst", "addr_width": csr.ADDR_WIDTH, "data_width": csr.DATA_WIDTH,
             "register_map": _names(cfg)["header"],
             "signals": _axi_signals(ports, "s_axil")},
            {"name": "m_axi", "protocol": "AXI4", "mode": "master", "clock": "clk",
             "reset": "rst", "addr_width": cfg.axi_addr_width,
             "data_width": cfg.axi_data_width, "id_width": shell.axi_signature.id_width,
             "max_burst": shell.max_burst, "burst": "INCR", "cache": CACHE,
             "ids": {f"ARID {INSTR_ID}": "instruction reads", f"ARID {DATA_ID}": "input data "
                     "reads", "AWID 0": "every write"},
             "signals": _axi_signals(ports, "m_axi")},
            {"name": "irq", "protocol": "interrupt", "sensitivity": "level-high",
             "clock": "clk", "signals": {"IRQ": "irq"},
             "note": "STATUS.DONE: high from the end of a run to the next CTRL.START or "
                     "CTRL.SOFT_RESET"},
        ],
        "ports": ports,
    }


def litex_field(signal):
    """``"AWADDR"`` -> ``"aw.addr"``: the field of LiteX's AXI interfaces."""
    lower = signal.lower()
    channel = lower[:2] if lower[:2] in ("aw", "ar") else lower[:1]
    return f"{channel}.{lower[len(channel):]}"


def interface_markdown(desc):
    """The port description ``desc`` (from :func:`interface`) as Markdown."""
    clock, reset = desc["clock"], desc["reset"]
    lines = [f"# `{desc['module']}`: bertaccel {desc['config']} ({desc['tag']})", "",
             f"Verilog: `{desc['verilog']}`. Clock `{clock['port']}` ({clock['edge']} edge; "
             f"{clock['note']}). Reset `{reset['port']}`: active {reset['active']}, "
             f"{'synchronous' if reset['synchronous'] else 'asynchronous'}; {reset['note']}.",
             ""]
    for bus in desc["interfaces"]:
        facts = ", ".join(f"{key.replace('_', ' ')} {bus[key]}" for key in
                          ("addr_width", "data_width", "id_width", "max_burst") if key in bus)
        lines += [f"## `{bus['name']}`: {bus['protocol']} {bus.get('mode', '')}".rstrip()
                  + (f" ({facts})" if facts else ""), ""]
        if "ids" in bus:
            lines += ["IDs: " + "; ".join(f"{k}: {v}" for k, v in bus["ids"].items())
                      + f". Bursts INCR, AxCACHE `{bus['cache']:#06b}`.", ""]
        if "note" in bus:
            lines += [bus["note"] + ".", ""]
        if "register_map" in bus:
            lines += [f"Registers: `{bus['register_map']}` (docs/axi.md).", ""]
    lines += ["## Ports", "", "| port | direction | width |", "|---|---|---:|"]
    lines += [f"| `{p['name']}` | {p['direction']} | {p['width']} |" for p in desc["ports"]]
    lines += ["", "## Integration", "",
              "Vendor block designs (Vivado's *add module*, Quartus Platform Designer) infer "
              "the two AXI interfaces from the `s_axil_` and `m_axi_` prefixes; associate "
              "both with `clk`, and `rst` as an active-high reset.", "",
              "LiteX (`litex.soc.interconnect.axi`: `axil` an `AXILiteInterface` of "
              f"{desc['interfaces'][0]['data_width']}-bit data, `axi` an `AXIInterface` "
              f"of {desc['interfaces'][1]['data_width']}-bit data, "
              f"{desc['interfaces'][1]['addr_width']}-bit address and "
              f"{desc['interfaces'][1]['id_width']}-bit IDs):", "", "```python",
              f'self.specials += Instance("{desc["module"]}",',
              '    i_clk=ClockSignal("sys"), i_rst=ResetSignal("sys"),']
    by_name = {p["name"]: p for p in desc["ports"]}
    for bus, var in (("s_axil", "axil"), ("m_axi", "axi")):
        signals = next(b for b in desc["interfaces"] if b["name"] == bus)["signals"]
        for signal, port in signals.items():
            kind = "i" if by_name[port]["direction"] == "input" else "o"
            lines.append(f"    {kind}_{port}={var}.{litex_field(signal)},")
    lines += ["    o_irq=irq,", ")", "```", ""]
    return "\n".join(lines)


# -- register map ---------------------------------------------------------------------------------

class Constant(NamedTuple):
    """A named integer of the register map, as the C header and the Python module write it."""
    name: str
    value: int
    comment: str = ""
    #: Written in hexadecimal (offsets, masks, register values), else in decimal.
    hex: bool = False

    def literal(self, suffix=""):
        return (f"{self.value:#x}" if self.hex else f"{self.value}") + suffix


def csr_constants(cfg):
    """``[Constant]``: the register map of :mod:`bertaccel.hw.axi.csr` and the
    identity of ``cfg`` as named integers, the one list that the C header and the Python module
    both write.

    Per register ``R``: ``R_OFFSET``, ``R_RESET`` (not for constant registers) and ``R_VALUE``
    (what a constant register of this build reads). Per field ``F`` (named by
    :func:`csr.port_name`, upper case): ``F_SHIFT``, ``F_WIDTH``, ``F_MASK`` (in place), and
    ``F_VALUE`` for a constant field.
    """
    out = [
        Constant("CSR_ADDR_WIDTH", csr.ADDR_WIDTH, "address bits of the AXI4-Lite window"),
        Constant("CSR_DATA_WIDTH", csr.DATA_WIDTH, "bits of every register"),
        Constant("MAGIC", csr.MAGIC, "ID.MAGIC of every bertaccel shell", hex=True),
        Constant("MAP_VERSION", csr.MAP_VERSION, "ID.VERSION: the version of this map"),
        Constant("INSTR_BYTES", csr.INSTR_BYTES, "bytes of one instruction in memory"),
        Constant("DATA_BEAT_BYTES", csr.data_beat_bytes(cfg), "bytes of an input beat in memory"),
        Constant("OUT_BEAT_BYTES", csr.out_beat_bytes(cfg), "bytes of an output beat in memory"),
    ]
    identity = csr.identity(cfg)
    for reg in csr.REGISTERS:
        out.append(Constant(f"{reg.name}_OFFSET", reg.offset, f"{reg.access}: {reg.doc}",
                            hex=True))
        if reg.name in identity:
            out.append(Constant(f"{reg.name}_VALUE", identity[reg.name],
                                "what it reads in this build", hex=True))
        else:
            out.append(Constant(f"{reg.name}_RESET", reg.reset, "value after reset", hex=True))
        for field in reg.fields:
            name = csr.port_name(reg, field).upper()
            out += [Constant(f"{name}_SHIFT", field.lsb,
                             f"{reg.name}.{field.name} {field.bits}, {field.access}"),
                    Constant(f"{name}_WIDTH", field.width),
                    Constant(f"{name}_MASK", field.mask, hex=True)]
            if field.access == csr.Access.CONST:
                out.append(Constant(f"{name}_VALUE",
                                    field.value(cfg) & ((1 << field.width) - 1), field.source))
    names = [constant.name for constant in out]
    assert len(names) == len(set(names)), "two constants of the register map share a name"
    return out


def _c_comment(text):
    return " ".join(text.replace("*/", "* /").split())


def csr_header(cfg):
    """The C header ``bertaccel_csr_<tag>.h``: :func:`csr_constants` as ``BERTACCEL_*``
    macros, with ``BERTACCEL_GET`` / ``BERTACCEL_SET`` for fields."""
    guard = f"BERTACCEL_CSR_{cfg.tag.upper()}_H"
    lines = [f"/* Register map of the bertaccel AXI4 shell ({SHELL_MODULE}), build {cfg.name} "
             f"({cfg.tag}).",
             " * Written by `bertaccel verilog` from bertaccel/hw/axi/csr.py; docs/axi.md "
             "describes every field.",
             " * Registers are 32-bit words at BASE + BERTACCEL_<REG>_OFFSET on the AXI4-Lite "
             "slave. */",
             f"#ifndef {guard}", f"#define {guard}", "",
             "/* Field F of a register value, and a register value with field F set to v. */",
             "#define BERTACCEL_GET(F, value) \\",
             "    (((value) & BERTACCEL_##F##_MASK) >> BERTACCEL_##F##_SHIFT)",
             "#define BERTACCEL_SET(F, value, v) \\",
             "    (((value) & ~BERTACCEL_##F##_MASK) \\",
             "     | (((unsigned long)(v) << BERTACCEL_##F##_SHIFT) & BERTACCEL_##F##_MASK))",
             ""]
    for constant in csr_constants(cfg):
        if constant.name.endswith("_OFFSET"):
            lines.append("")
        text = f"#define BERTACCEL_{constant.name} {constant.literal('u')}"
        lines.append(f"{text:<56}/* {_c_comment(constant.comment)} */" if constant.comment
                     else text)
    lines += ["", f"#endif /* {guard} */", ""]
    return "\n".join(lines)


def _dict(name, entries):
    """``name = {...}``, one ``key: value`` text pair a line."""
    return [f"{name} = {{", *(f"    {key!r}: {value}," for key, value in entries), "}"]


def csr_python(cfg):
    """The Python module ``bertaccel_csr_<tag>.py``: :func:`csr_constants` as module constants
    (the C header's names without ``BERTACCEL_``), the map as dicts, and field helpers. It
    imports nothing, so a host without bertaccel can use it."""
    constants = csr_constants(cfg)
    fields = [(reg.name, repr({field.name: (field.lsb, field.width, field.access)
                               for field in reg.fields})) for reg in csr.REGISTERS]
    lines = [f'"""Register map of the bertaccel AXI4 shell ({SHELL_MODULE}), build {cfg.name}.',
             "", f"Tag {cfg.tag}. Written by ``bertaccel verilog`` from bertaccel/hw/axi/csr.py:",
             f"the values of bertaccel_csr_{cfg.tag}.h without its ``BERTACCEL_`` prefix.",
             "docs/axi.md describes every field.", '"""', "",
             f"CONFIG = {cfg.name!r}", f"TAG = {cfg.tag!r}", ""]
    for constant in constants:
        if constant.name.endswith("_OFFSET"):
            lines.append("")
        text = f"{constant.name} = {constant.literal()}"
        comment = " ".join(constant.comment.split())
        lines.append(f"{text:<48}# {comment}" if comment else text)
    lines += ["", "#: {register: byte offset}",
              *_dict("REGISTERS", [(reg.name, f"{reg.offset:#05x}") for reg in csr.REGISTERS]),
              "#: {register: {field: (lsb, width, access)}}",
              *_dict("FIELDS", fields),
              "#: {register: value} that the constant registers of this build read",
              *_dict("IDENTITY", [(name, f"{value:#010x}")
                                  for name, value in csr.identity(cfg).items()]), "", "",
              "def get(register, field, value):",
              '    """Field ``field`` of ``register`` in the register value ``value``."""',
              "    lsb, width, _ = FIELDS[register][field]",
              "    return (value >> lsb) & ((1 << width) - 1)", "", "",
              "def put(register, field, value, field_value):",
              '    """``value`` with field ``field`` of ``register`` set to ``field_value``."""',
              "    lsb, width, _ = FIELDS[register][field]",
              "    mask = ((1 << width) - 1) << lsb",
              "    return (value & ~mask) | ((field_value << lsb) & mask)", ""]
    return "\n".join(lines)


# -- FuseSoC --------------------------------------------------------------------------------------

def _yaml_list(items):
    return "[" + ", ".join(json.dumps(item) for item in items) + "]"


def _vlnv(cfg):
    """The FuseSoC name of the core of ``cfg``."""
    return f"bertaccel:accel:core_{cfg.tag}:{_VERSION}"


def fusesoc_core(cfg):
    """The FuseSoC CAPI2 core file ``bertaccel_core_<tag>.core``.

    Targets: ``default`` (the shell's Verilog, top ``bertaccel_axi``); ``lint`` and
    ``lint_core`` (Verilator ``--lint-only -Wall`` of the shell and of the bare core, with the
    waivers of ``hw/lint.vlt``); ``ecp5``: yosys ``synth_ecp5`` (edalize's generic flow with
    its yosys tool), then, as a post-build hook, ``nextpnr-ecp5`` placing and routing the
    netlist on the part of :data:`ECP5_TARGET` out of context, writing the routed design and
    nextpnr's report (resources, Fmax).

    Out of context, because the shell is a block for a design around it: its ports (385 bits
    for 2x2 with a 64-bit master) are more than the package's 197 user I/Os, so they are left
    unplaced. And not edalize's trellis flow: that always asks nextpnr for a bitstream
    configuration (``--textcfg``), which nextpnr refuses out of context.
    """
    names = _names(cfg)
    tgt = TARGETS[ECP5_TARGET]
    edam = _vlnv(cfg).replace(":", "_")  # FuseSoC's name of the build: it names the netlist
    nextpnr = ["nextpnr-ecp5", *tgt.nextpnr_args, "--out-of-context", "--json", f"{edam}.json",
               "--write", f"{edam}.routed.json", "--report", "nextpnr_report.json",
               "-l", "nextpnr.log"]
    lint = ("    flow: lint\n"
            "    flow_options:\n"
            "      tool: verilator\n"
            "      verilator_options: [-Wall]\n")
    return (
        "CAPI=2:\n"
        f"# bertaccel {cfg.name} ({cfg.tag}), written by `bertaccel verilog`. Ports: "
        f"{names['interface_md']}.\n"
        f"name: {_vlnv(cfg)}\n"
        f"description: int8 BERT inference accelerator, {cfg.rows}x{cfg.cols} array, behind an "
        f"AXI4-Lite register slave and an AXI4 DMA master\n"
        "\n"
        "filesets:\n"
        "  shell:\n"
        f"    files: [{names['shell_v']}]\n"
        "    file_type: verilogSource\n"
        "  core:\n"
        f"    files: [{names['core_v']}]\n"
        "    file_type: verilogSource\n"
        "  waivers:\n"
        f"    files: [{names['waivers']}]\n"
        "    file_type: vlt\n"
        "\n"
        "scripts:\n"
        "  nextpnr_ecp5_ooc:\n"
        f"    cmd: {_yaml_list(nextpnr)}\n"
        "\n"
        "targets:\n"
        "  default:\n"
        "    filesets: [shell]\n"
        f"    toplevel: {SHELL_MODULE}\n"
        "  lint:\n"
        "    description: Verilator lint of the AXI4 shell, every warning on, with the "
        "generator's waivers\n"
        "    filesets: [waivers, shell]\n"
        f"    toplevel: {SHELL_MODULE}\n" + lint +
        "  lint_core:\n"
        "    description: Verilator lint of the bare core\n"
        "    filesets: [waivers, core]\n"
        f"    toplevel: {CORE_MODULE}\n" + lint +
        "  ecp5:\n"
        f"    description: yosys synth_ecp5, then nextpnr-ecp5 on the {tgt.part} out of "
        "context\n"
        "    filesets: [shell]\n"
        f"    toplevel: {SHELL_MODULE}\n"
        "    flow: generic\n"
        "    flow_options:\n"
        "      tool: yosys\n"
        "      arch: ecp5\n"
        "      output_format: json\n"
        "    hooks:\n"
        "      post_build: [nextpnr_ecp5_ooc]\n"
    )
