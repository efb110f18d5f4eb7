"""The IP package that ``bertaccel verilog`` writes (bertaccel.fpga.ip).

One package, for 2x2, is written through the CLI; then each of its parts is checked with the
tool that will read it: FuseSoC lints the core file's Verilog with Verilator (every warning on,
the generator's waivers) and sets up its ECP5 flow; ``cc -Wall -Werror`` compiles a program with
the C header, whose every value must equal the Python module's, whose every value must equal
:mod:`bertaccel.hw.axi.csr`'s; the port description must list exactly the ports of the shell's
Verilog and of the elaborated :class:`~bertaccel.hw.axi.AxiShell`.
"""

import dataclasses
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from amaranth import Shape
from amaranth.hdl import Fragment
from amaranth.lib.wiring import In

from bertaccel.fpga import ip
from bertaccel.hw.axi import AxiShell, csr
from bertaccel.hw.config import PRESETS, AccelConfig, load_config
from bertaccel.sim.build import verilator_bin_dir
from bertaccel import cli

__all__ = []

CFG = PRESETS["2x2"]
#: A config whose AXI4 master is not the default one, for the port description.
WIDE = dataclasses.replace(CFG, axi_data_width=128, axi_addr_width=40)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """``{file name: path}`` of the package that ``bertaccel verilog --config 2x2`` wrote."""
    out_dir = tmp_path_factory.mktemp("ip") / "out"
    written = subprocess.run(
        [sys.executable, "-m", "bertaccel.cli", "verilog", "--config", "2x2", "-o",
         str(out_dir)], capture_output=True, text=True, timeout=300, check=True)
    # Progress on stderr: each conversion announced, then timed.
    said = written.stderr.splitlines()
    for what in ("the 2x2 core", "the 2x2 AXI4 shell"):
        at = said.index(f"bertaccel: converting {what} to Verilog")
        assert re.fullmatch(rf"bertaccel: {what}: [\d,]+ lines in \d+ s", said[at + 1]), said
    paths = [Path(line) for line in written.stdout.splitlines()]
    return {path.name: path for path in paths}


def test_package_files(package):
    tag = CFG.tag
    assert set(package) == {
        f"bertaccel_core_{tag}.v", f"bertaccel_core_{tag}.json", f"bertaccel_axi_{tag}.v",
        f"bertaccel_core_{tag}.core", "bertaccel_lint.vlt", f"bertaccel_csr_{tag}.h",
        f"bertaccel_csr_{tag}.py", f"bertaccel_axi_{tag}_interface.json",
        f"bertaccel_axi_{tag}_interface.md"}
    assert all(path.is_file() and path.stat().st_size for path in package.values())
    # The config file names every field and reads back as the config.
    config_file = package[f"bertaccel_core_{tag}.json"]
    assert set(json.loads(config_file.read_text())) == set(AccelConfig.__dataclass_fields__)
    assert load_config(str(config_file)) == CFG


@pytest.mark.parametrize("output", ["file", "file/below"])
def test_cli_refuses_an_output_that_is_no_directory(tmp_path, capsys, output):
    (tmp_path / "file").write_text("")
    assert cli.main(["verilog", "--config", "2x2", "-o", str(tmp_path / output)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bertaccel: error:" in err and "is a file, not a folder" in err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["file"]


def _fusesoc(package, *args, build_root):
    """``fusesoc run`` of the package's core; its result."""
    fusesoc = Path(sys.executable).with_name("fusesoc")
    core = f"bertaccel:accel:core_{CFG.tag}"
    cores_root = next(iter(package.values())).parent
    env = dict(os.environ, PATH=f"{verilator_bin_dir()}{os.pathsep}{os.environ['PATH']}")
    return subprocess.run(
        [str(fusesoc), "--cores-root", str(cores_root), "run", "--build-root",
         str(build_root), *args, core], capture_output=True, text=True, timeout=300, env=env,
        check=False)


@pytest.mark.parametrize("target", ["lint", "lint_core"])
def test_fusesoc_lint(package, tmp_path, target):
    # Verilator's warnings are fatal here: the target fails unless the waivers cover all.
    result = _fusesoc(package, "--target", target, build_root=tmp_path)
    report = result.stdout + result.stderr
    assert result.returncode == 0 and "%Warning" not in report, report[-4000:]
    vc = next(tmp_path.rglob("*.vc")).read_text()
    assert "--lint-only" in vc and "-Wall" in vc and "bertaccel_lint.vlt" in vc


def test_fusesoc_ecp5_flow_is_set_up(package, tmp_path):
    # The tools (yosys with Tcl, nextpnr-ecp5) need not be here: --setup writes the flow's
    # Makefile and yosys script only. nextpnr runs after yosys, on its netlist.
    result = _fusesoc(package, "--setup", "--target", "ecp5", build_root=tmp_path)
    assert result.returncode == 0, (result.stdout + result.stderr)[-4000:]
    makefile = next(tmp_path.rglob("ecp5/Makefile")).read_text()
    part = ip.TARGETS[ip.ECP5_TARGET]
    netlist = re.search(r"^(\S+\.json): edalize_yosys_template\.tcl", makefile, re.MULTILINE)
    assert netlist, makefile
    assert re.search(r"nextpnr-ecp5 " + re.escape(" ".join(part.nextpnr_args))
                     + r" --out-of-context --json " + re.escape(netlist[1]), makefile), makefile
    script = "".join(path.read_text() for path in tmp_path.rglob("ecp5/*.tcl"))
    assert "synth_ecp5" in script and f"set top {ip.SHELL_MODULE}" in script
    assert f"bertaccel_axi_{CFG.tag}.v" in script


def _module(path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_python_module_equals_csr(package):
    module = _module(package[f"bertaccel_csr_{CFG.tag}.py"])
    assert module.TAG == CFG.tag
    assert module.REGISTERS == {reg.name: reg.offset for reg in csr.REGISTERS}
    assert module.IDENTITY == csr.identity(CFG)
    assert (module.INSTR_BYTES, module.DATA_BEAT_BYTES, module.OUT_BEAT_BYTES) == (
        csr.INSTR_BYTES, csr.data_beat_bytes(CFG), csr.out_beat_bytes(CFG))
    assert (module.MAGIC, module.MAP_VERSION) == (csr.MAGIC, csr.MAP_VERSION)
    for reg in csr.REGISTERS:
        assert getattr(module, f"{reg.name}_OFFSET") == reg.offset
        assert module.FIELDS[reg.name] == {field.name: (field.lsb, field.width, field.access)
                                           for field in reg.fields}
        for field in reg.fields:
            name = csr.port_name(reg, field).upper()
            assert getattr(module, f"{name}_MASK") == field.mask
            assert getattr(module, f"{name}_SHIFT") == field.lsb
            if field.access == csr.Access.CONST:
                want = field.value(CFG)
                assert getattr(module, f"{name}_VALUE") == want
                assert module.get(reg.name, field.name, module.IDENTITY[reg.name]) == want
    word = module.put("STATUS", "DONE", 0xFFFF_FFFF, 0)
    assert word == 0xFFFF_FFFF & ~csr.register("STATUS").field("DONE").mask


def test_c_header_compiles_and_equals_python(package, tmp_path):
    header = package[f"bertaccel_csr_{CFG.tag}.h"]
    constants = ip.csr_constants(CFG)
    prints = "\n".join(f'    printf("{c.name} %lu\\n", (unsigned long)BERTACCEL_{c.name});'
                       for c in constants)
    (tmp_path / "use.c").write_text(
        f'#include "{header.name}"\n#include "{header.name}"  /* the guard holds */\n'
        "#include <stdio.h>\n\nint main(void)\n{\n"
        "    unsigned long ctrl = BERTACCEL_SET(CTRL_START, 0ul, 1);\n"
        "    printf(\"ROWS %lu\\n\", (unsigned long)BERTACCEL_GET(CONFIG0_ROWS, "
        "BERTACCEL_CONFIG0_VALUE));\n"
        "    printf(\"CTRL %lu\\n\", ctrl);\n" + prints + "\n    return 0;\n}\n")
    compiler = shutil.which("cc") or shutil.which("gcc")
    assert compiler, "no C compiler (cc) on PATH"
    build = subprocess.run(
        [compiler, "-std=c99", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I",
         str(header.parent), "-o", str(tmp_path / "use"), str(tmp_path / "use.c")],
        capture_output=True, text=True, timeout=120, check=False)
    assert build.returncode == 0, build.stderr
    out = subprocess.run([str(tmp_path / "use")], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    values = {name: int(value) for name, value in (line.split() for line in out.splitlines())}
    module = _module(package[f"bertaccel_csr_{CFG.tag}.py"])
    assert values.pop("ROWS") == CFG.rows
    assert values.pop("CTRL") == csr.register("CTRL").field("START").mask
    assert values == {c.name: getattr(module, c.name) for c in constants}


def _verilog_ports(text, module):
    """``[{"name", "direction", "width"}]`` declared in ``module`` of the Verilog ``text``."""
    body = text[text.index(f"module {module}("):]
    body = body[:body.index("endmodule")]
    return [{"name": name, "direction": direction,
             "width": int(msb) + 1 if msb else 1}
            for direction, msb, name in re.findall(
                r"^  (input|output) (?:\[(\d+):0\] )?(\w+);$", body, re.MULTILINE)]


def _key(ports):
    return sorted((p["name"], p["direction"], p["width"]) for p in ports)


def test_interface_matches_the_shell_verilog(package):
    desc = json.loads(package[f"bertaccel_axi_{CFG.tag}_interface.json"].read_text())
    verilog = package[desc["verilog"]].read_text()
    ports = _verilog_ports(verilog, desc["module"])
    assert len(ports) > 50
    assert _key(desc["ports"]) == _key(ports)
    markdown = package[f"bertaccel_axi_{CFG.tag}_interface.md"].read_text()
    assert all(f"| `{p['name']}` | {p['direction']} | {p['width']} |" in markdown
               for p in ports)


@pytest.mark.parametrize("cfg", [CFG, WIDE], ids=["2x2", "2x2-axi128a40"])
def test_interface_matches_the_elaborated_shell(cfg):
    shell = AxiShell(cfg)
    Fragment.get(shell, None)             # elaborated, as the Verilog is
    desc = ip.interface(cfg, shell)
    members = dict(shell.signature.members.items())
    listed = {p["name"]: p for p in desc["ports"]}
    assert set(listed) == set(members) | {"clk", "rst"}
    for name, member in members.items():
        assert listed[name]["width"] == Shape.cast(member.shape).width
        assert listed[name]["direction"] == ("input" if member.flow == In else "output")
    assert desc["reset"] == dict(desc["reset"], port="rst", active="high", synchronous=True)
    buses = {bus["name"]: bus for bus in desc["interfaces"]}
    slave, master = buses["s_axil"], buses["m_axi"]
    assert (slave["mode"], slave["addr_width"], slave["data_width"]) == (
        "slave", csr.ADDR_WIDTH, csr.DATA_WIDTH)
    assert (master["mode"], master["addr_width"], master["data_width"]) == (
        "master", cfg.axi_addr_width, cfg.axi_data_width)
    assert listed[master["signals"]["WDATA"]]["width"] == cfg.axi_data_width
    assert listed[master["signals"]["ARADDR"]]["width"] == cfg.axi_addr_width
    assert listed[master["signals"]["WSTRB"]]["width"] == cfg.axi_data_width // 8
    assert listed[slave["signals"]["AWADDR"]]["width"] == csr.ADDR_WIDTH
    signals = [port for bus in desc["interfaces"] for port in bus["signals"].values()]
    assert sorted(signals) == sorted(set(listed) - {"clk", "rst"})
