"""The accelerator in a system-on-chip: C firmware on a RISC-V CPU drives the AXI4 shell.

The SoC (:mod:`bertaccel.soc`: LiteX, a VexRiscv CPU, ROM, SRAM, main RAM, UART, timer and
the 2x2 shell on the bus) is built once under Verilator (about 35 s on 2 cores, then cached in
``build/sim/soc-<tag>``; the whole file takes about 45 s from a clean folder). For each GEMM,
the firmware is compiled with the program and its input data linked in and the register map's
generated header, and run: it checks the identity registers, programs the regions and the DMA
window, starts the run, waits for the interrupt, checks the error and fault bits and prints
``CYCLES``, the counters and the output area over the UART. The outputs printed must equal the
software device's bit for bit; the run must have ended with the interrupt (not the polling
fallback); the counters must be the program's; and ``CYCLES`` can only be at least the cycle
model's free-running figure for the core, since every memory access goes through the SoC's
32-bit interconnect one word at a time (the figures are printed side by side and recorded as
properties of the test).

A program with an illegal instruction in its middle ends with the firmware reporting the fault
the shell recorded: ``FAULT.CODE`` ILLEGAL_INSTRUCTION, the rule, and the instruction's index.

The layer firmware (``soc/firmware/layer.c``) runs one encoder layer of a small random BERT
(one layer, hidden 16, two heads, two sequences of 5 and 3 tokens padded to 5), its six stage
programs back to back with the moves between them done on the CPU: the layer's output must
equal the software device's bit for bit, every stage must end with the interrupt, and each
stage's ``CYCLES`` can only be at least the cycle model's.

Skipped when a tool is missing (LiteX, the VexRiscv Verilog, the RISC-V compiler, libevent and
json-c headers; :func:`bertaccel.soc.build.missing_tools` names it), failed instead under
``BERTACCEL_REQUIRE_TOOLS=1``.
"""

import pytest
import torch

from bertaccel.hw.axi import csr
from bertaccel.hw.config import preset
from bertaccel.hw.legal import Fault
from bertaccel.soc.run import run_bert_layer, run_gemm, run_image
from bertaccel.sw.cycles import CycleModel
from bertaccel.sw.devices import axi as axi_host
from bertaccel.sw.tiler import compile_gemm
from verif.helpers import check_outputs, missing_tool, random_bert

__all__ = []

#: The shell's own GEMM cases (verif/block/test_axi_shell.py): a tiled GEMM, the 1x1x1 one
#: (one output beat, a partial bus word written with strobes), a tall one.
CASES = {"main": (9, 21, 11), "tiny": (1, 1, 1), "tall": (23, 6, 5)}


@pytest.fixture(autouse=True)
def _tools():
    from bertaccel.soc.build import missing_tools

    missing = missing_tools()
    if missing:
        missing_tool("the SoC needs " + ", ".join(missing))


@pytest.mark.parametrize("case", CASES)
def test_gemm_through_firmware(case, sim_root, record_property):
    cfg = preset("2x2")
    m, k, n = CASES[case]
    soc, reference = run_gemm(cfg, m, k, n, seed=sum(CASES[case]),
                              folder=sim_root / f"soc-{cfg.tag}")
    what = f"gemm {m}x{k}x{n} on the {cfg.name} SoC"
    check_outputs(soc, reference, what=what)
    assert soc.report.wake == "irq", f"{what}: the firmware saw no interrupt"
    model = CycleModel(cfg).run(soc.image.program).cycles
    assert soc.cycles >= model, f"{what}: CYCLES {soc.cycles} < the model's {model}"
    record_property("cycles_soc", soc.cycles)
    record_property("cycles_model", model)
    print(f"{what}: CYCLES {soc.cycles} (the cycle model's core: {model}); build "
          f"{soc.build_s:.0f} s, firmware {soc.firmware_s:.1f} s, run {soc.run_s:.1f} s")


def test_illegal_instruction_reported(sim_root):
    cfg = preset("2x2")
    m, k, n = CASES["tall"]
    gen = torch.Generator().manual_seed(7)
    inputs = {"a": torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8),
              "b": torch.randint(-128, 128, (k, n), generator=gen, dtype=torch.int8)}
    image = axi_host.layout(compile_gemm(cfg, m, k, n), align=64, **inputs)
    # An all-zero word in the middle of the program: no such opcode.
    addr, prog = image.segments[0]
    bad = image.prog_len // 2
    size = axi_host.INSTR_BYTES
    image.segments[0] = (addr, prog[:bad * size] + bytes(size) + prog[(bad + 1) * size:])
    run = run_image(image, folder=sim_root / f"soc-{cfg.tag}", check=False)
    report = run.report
    assert not report.ok and report.error.startswith("fault"), report.text
    fault, status = report.facts["fault"], report.facts["status"]
    assert csr.FAULT_CODES[axi_host.field_value("FAULT", fault, "CODE")] \
        == "ILLEGAL_INSTRUCTION", report.text
    assert axi_host.field_value("FAULT", fault, "CHECK") == Fault.OPCODE, report.text
    assert axi_host.field_value("STATUS", status, "ERROR"), report.text
    assert report.facts["fault_pc"] == bad, report.text


def test_encoder_layer_through_firmware(sim_root, record_property):
    cfg = preset("2x2")
    bert, batch = random_bert(cfg, seed=5, hidden=16, heads=2, intermediate=32, layers=1,
                              lengths=(5, 3))
    soc, reference = run_bert_layer(bert, 0, batch, folder=sim_root / f"soc-{cfg.tag}")
    assert torch.equal(soc.output, reference), "the layer's output differs from the software " \
        "device's"
    text = soc.report.text
    assert text.count("wake irq") == len(soc.cycles), text
    for stage, cycles in soc.cycles.items():
        model = soc.model_cycles[stage]
        assert cycles >= model, f"stage {stage}: CYCLES {cycles} < the model's {model}"
    record_property("cycles_soc", sum(soc.cycles.values()))
    record_property("cycles_model", sum(soc.model_cycles.values()))
    print(f"one encoder layer on the {cfg.name} SoC: CYCLES {soc.cycles} (the cycle model's "
          f"core: {soc.model_cycles}); firmware {soc.firmware_s:.1f} s, run {soc.run_s:.1f} s")
