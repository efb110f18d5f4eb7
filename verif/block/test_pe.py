"""Block test: one processing element, cycle by cycle against a Python model.

Every input is random every cycle (operand, bank, partial sum, weight writes into either bank),
so the test covers the bank switch (the bank leads its operand by a cycle), a write in the same
cycle as an operand on the same bank (the operand multiplies the old weight, the next one the
new), the registered weight of the next operand's bank, the weight and strobe pipeline
registers, the registered multiplier operands, the product and its copy, and the 32-bit wrap of
the sum. It runs for both builds of the PE: the inner one and the ``top`` one (no partial sum
in, the product out). This module is the pytest file and, inside the simulator, the cocotb test module.
"""

import json
import os
import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

from bertaccel.hw.pe import ProcessingElement
from bertaccel.sim.build import build, run_cocotb
from verif.tb.models import PeModel

__all__ = []

MODULE = "verif.block.test_pe"


@cocotb.test()
async def pe_random(dut):
    params = json.loads(os.environ["BERTACCEL_PE"])
    in_width, acc_width = params["in_width"], params["acc_width"]
    options = {"top": params["top"]}
    seed = int(os.environ.get("BERTACCEL_SEED", "1"))
    log = dut._log.getChild("tb.pe")
    log.info("seed %d", seed)
    rng = random.Random(seed)
    lo, hi = -(1 << (in_width - 1)), (1 << (in_width - 1)) - 1
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    names = ["i_a", "i_bank", "i_w", "i_w_en", "i_w_bank"] + ([] if options["top"] else ["i_psum"])
    for name in names:
        getattr(dut, name).value = 0
    await FallingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0

    model = PeModel(acc_width, **options)
    extremes = [lo, hi, 0, -1]
    for cycle in range(2000):
        inputs = {
            "i_a": rng.choice(extremes) if rng.random() < 0.2 else rng.randint(lo, hi),
            "i_bank": rng.randrange(2),
            "i_psum": rng.choice([-(1 << (acc_width - 1)), (1 << (acc_width - 1)) - 1,
                                  rng.randrange(-(1 << (acc_width - 1)),
                                                1 << (acc_width - 1))]),
            "i_w": rng.choice(extremes) if rng.random() < 0.2 else rng.randint(lo, hi),
            "i_w_en": int(rng.random() < 0.3),
            "i_w_bank": rng.randrange(2),
        }
        if options["top"]:
            inputs["i_psum"] = 0            # no such port: the top row has no sum above it
        for name in names:
            getattr(dut, name).value = inputs[name]
        await ReadOnly()
        got = {
            "o_a": dut.o_a.value.to_signed(), "o_bank": int(dut.o_bank.value),
            "o_psum": dut.o_psum.value.to_signed(), "o_w": dut.o_w.value.to_signed(),
            "o_w_en": int(dut.o_w_en.value), "o_w_bank": int(dut.o_w_bank.value),
        }
        want = {"o_a": model.o_a, "o_bank": model.o_bank, "o_psum": model.o_psum,
                "o_w": model.o_w, "o_w_en": model.o_w_en, "o_w_bank": model.o_w_bank}
        assert got == want, f"cycle {cycle}: inputs {inputs}: got {got}, want {want}"
        model.clock(**inputs)
        await FallingEdge(dut.clk)


@pytest.mark.parametrize("top", [False, True], ids=["inner", "top"])
@pytest.mark.parametrize("in_width,acc_width", [(8, 32)])
def test_pe(in_width, acc_width, top, tmp_path):
    options = {"top": top}
    variant = "top" if top else "inner"
    sim = build(lambda: ProcessingElement(in_width=in_width, acc_width=acc_width, **options),
                name="pe", build_dir=f"build/sim/pe-i{in_width}a{acc_width}-{variant}")
    run_cocotb(sim, MODULE, "pe_random", timeout=300,
               extra_env={"BERTACCEL_PE": json.dumps({"in_width": in_width,
                                                      "acc_width": acc_width, **options}),
                          "BERTACCEL_SEED": "7"},
               log_file=tmp_path / "sim.log")
