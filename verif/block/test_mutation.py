"""Block test of the mutation flow (:mod:`bertaccel.sim.mutate`) on a tiny counter.

yosys lists mutants of a 4-bit-step, 8-bit counter, keeps their source lines (this file,
relative to the repository root) and applies them all into one design whose ``mutsel`` input
selects one; one Verilator build runs them. The cocotb test here drives the counter with
random steps and checks its total against a model: with ``mutsel`` 0 (no mutant) it passes,
with a mutant that inverts a bit of the total it fails. ``bench/mutation.py`` runs the same
flow on the 2x2 core with the suite's programs.
"""

import os
import random

import cocotb
import pytest
from amaranth import Module
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

from bertaccel.sim import mutate
from bertaccel.sim.build import SimulationError, build, run_cocotb
from bertaccel.sw.devices.rtl import RtlDevice

__all__ = []

MODULE = "verif.block.test_mutation"
NAME = "mut_counter"


class Counter(wiring.Component):
    """``total`` adds ``step`` in every cycle with ``en`` high."""

    step: In(4)
    en: In(1)
    total: Out(8)

    def elaborate(self, platform):
        m = Module()
        with m.If(self.en):
            m.d.sync += self.total.eq(self.total + self.step)
        return m


@cocotb.test()
async def counter_bench(dut):
    """200 random cycles against the model, under ``mutsel`` = ``$BERTACCEL_MUTSEL``."""
    rng = random.Random(3)
    Clock(dut.clk, 10, unit="ns").start()
    dut.mutsel.value = int(os.environ["BERTACCEL_MUTSEL"])
    dut.rst.value = 1
    dut.en.value = 0
    dut.step.value = 0
    await FallingEdge(dut.clk)
    dut.rst.value = 0
    total = 0
    for cycle in range(200):
        step, en = rng.randrange(16), rng.random() < 0.7
        dut.step.value = step
        dut.en.value = en
        await ReadOnly()
        assert int(dut.total.value) == total, f"cycle {cycle}: {int(dut.total.value)}, not {total}"
        total = (total + step) % 256 if en else total
        await FallingEdge(dut.clk)


@pytest.fixture(scope="module")
def rtlil():
    return mutate.design_rtlil(Counter(), name=NAME)


def test_list_has_sources_and_every_module(rtlil):
    mutants = mutate.list_mutants(rtlil, count=12, seed=1, min_per_module=1)
    assert len(mutants) >= 6
    assert [m.index for m in mutants] == list(range(1, len(mutants) + 1))
    assert len({mutate.Mutant(**{**m.to_dict(), "index": 0}) for m in mutants}) == len(mutants)
    assert all(m.mode in mutate.MODES and m.module == NAME for m in mutants)
    # The counter's cells were made on lines of this file, named from the repository root.
    assert any(m.src and m.src.startswith("verif/block/test_mutation.py:") for m in mutants)
    assert all(not (m.src or "").startswith("/") for m in mutants), mutants
    again = mutate.list_mutants(rtlil, count=12, seed=1, min_per_module=1)
    assert again == mutants, "the same seed must give the same list"


def test_unmutated_passes_and_a_known_mutant_is_killed(rtlil, tmp_path):
    """mutsel 0 runs the design unchanged; mutant 1 inverts a bit of ``total`` (a register
    the test reads every cycle) and must be killed."""
    mutants = mutate.list_mutants(rtlil, count=1, seed=1, min_per_module=0, modes=("inv",),
                                  filters={"mode": "inv", "wire": "total"})
    assert mutants and mutants[0].wire == "total", mutants
    text = mutate.mutant_verilog(rtlil, mutants)
    assert f"input [15:0] {mutate.CTRL};" in text
    key = mutate.mutants_key(rtlil, mutants)
    sim = build(text, name=NAME, build_dir=f"build/sim/{NAME}-{key}")
    run_cocotb(sim, MODULE, "counter_bench", timeout=120,
               extra_env={"BERTACCEL_MUTSEL": "0"}, log_file=tmp_path / "none.log")
    with pytest.raises(SimulationError, match="failed"):
        run_cocotb(sim, MODULE, "counter_bench", timeout=120,
                   extra_env={"BERTACCEL_MUTSEL": "1"}, log_file=tmp_path / "mutant.log")


def test_no_mutants_still_has_the_select(rtlil):
    text = mutate.mutant_verilog(rtlil, [])
    assert f"input [15:0] {mutate.CTRL};" in text


def test_rtl_device_variant_needs_its_key():
    from bertaccel.hw.config import PRESETS
    with pytest.raises(ValueError, match="verilog and verilog_key"):
        RtlDevice(PRESETS["2x2"], verilog=lambda: "")
