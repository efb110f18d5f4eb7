"""Block test: the controller's dispatch of instructions to the three unit queues.

A random program goes in with idle cycles on the instruction stream and independent
backpressure on each unit's queue output. Each unit must receive exactly its instructions, in
program order, and each LOAD and STORE comes with the flags the controller decodes of it
(``LoadHead``, ``StoreHead``). Then an illegal opcode: the error flag rises, the rest of the stream is still
consumed (nothing hangs) and nothing more reaches any unit.
"""

import os
import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly

from bertaccel.hw.config import PRESETS
from bertaccel.hw.controller import Controller
from bertaccel.hw.isa import (EpOp, Load, LoadHead, Matmul, MatmulHead, Param, Set, Store,
                              StoreHead, Target, encode)
from bertaccel.sim.build import build, run_cocotb

__all__ = []

MODULE = "verif.block.test_controller"
OUTPUTS = {"o_load": (Load,), "o_exec": (Matmul,), "o_store": (Store, Set)}


def _random_instr(rng):
    flags = {name: rng.random() < 0.5 for name in ("pop_prev", "pop_next", "push_prev",
                                                  "push_next")}
    kind = rng.choice([Load, Matmul, Store, Set])
    field = lambda: rng.randrange(1 << 16)  # noqa: E731
    if kind is Load:
        return Load(target=rng.choice(list(Target)), addr=field(),
                    count=rng.choice([0, 1, 2, field()]), **flags)
    if kind is Matmul:
        return Matmul(a_addr=field(), b_addr=field(), acc_addr=field(),
                      m_len=rng.choice([0, 1, 2, field()]),
                      accumulate=rng.random() < 0.5, **flags)
    if kind is Set:
        return Set(index=rng.choice(list(Param)), value=rng.getrandbits(64), **flags)
    count = lambda: rng.choice([0, 1, 2, field(), field()])  # noqa: E731
    return Store(acc_addr=field(), rows=count(), strips=count(), stride=field(),
                 op=rng.choice(list(EpOp)), param_addr=field(), aux_addr=field(), **flags)


@cocotb.test()
async def dispatch(dut):
    seed = int(os.environ.get("BERTACCEL_SEED", "1"))
    log = dut._log.getChild("tb.controller")
    log.info("seed %d", seed)
    rng = random.Random(seed)
    Clock(dut.clk, 10, unit="ns").start()
    dut.rst.value = 1
    dut.i_instr__valid.value = 0
    dut.i_instr__payload.value = 0
    for name in OUTPUTS:
        getattr(dut, f"{name}__ready").value = 0
    await FallingEdge(dut.clk)
    await FallingEdge(dut.clk)
    dut.rst.value = 0

    async def run(words, expect, idle=0.3, stall=0.4, limit=20000):
        got = {name: [] for name in OUTPUTS}
        heads = {"o_load": [], "o_exec": [], "o_store": []}
        sent = 0
        for _ in range(limit):
            offer = sent < len(words) and rng.random() >= idle
            dut.i_instr__valid.value = int(offer)
            dut.i_instr__payload.value = words[sent] if offer else 0
            for name in OUTPUTS:
                getattr(dut, f"{name}__ready").value = int(rng.random() >= stall)
            await ReadOnly()
            if offer and dut.i_instr__ready.value:
                sent += 1
            for name in OUTPUTS:
                if getattr(dut, f"{name}__valid").value and getattr(dut, f"{name}__ready").value:
                    got[name].append(int(getattr(dut, f"{name}__payload").value))
                    if name in heads:
                        heads[name].append(int(getattr(dut, f"{name}_head").value))
            await FallingEdge(dut.clk)
            if sent == len(words) and not dut.o_busy.value:
                break
        else:
            raise AssertionError(f"dispatch did not finish in {limit} cycles ({sent} sent)")
        assert got == expect
        return heads

    program = [_random_instr(rng) for _ in range(400)]
    expect = {name: [encode(i) for i in program if isinstance(i, kinds)]
              for name, kinds in OUTPUTS.items()}
    heads = await run([encode(i) for i in program], expect)
    loads = _flags([i for i in program if isinstance(i, Load)], heads["o_load"], LoadHead)
    for instr, got in loads:
        assert got == {"empty": instr.count == 0, "one": instr.count == 1}, instr
    matmuls = _flags([i for i in program if isinstance(i, Matmul)], heads["o_exec"],
                     MatmulHead)
    for instr, got in matmuls:
        assert got == {"zero": instr.m_len == 0, "final": instr.m_len <= 1}, instr
    stores = _flags([i for i in program if isinstance(i, (Store, Set))], heads["o_store"],
                    StoreHead)
    for instr, got in stores:
        if isinstance(instr, Store):
            assert got == {"empty": instr.rows == 0 or instr.strips == 0,
                           "two_pass": instr.two_pass, "one_row": instr.rows == 1,
                           "two_rows": instr.rows == 2, "one_strip": instr.strips == 1}, instr
    assert not dut.o_error.value and not dut.o_busy.value

    # An illegal opcode (0) in the middle: what came before is dispatched, nothing after.
    before = [_random_instr(rng) for _ in range(50)]
    after = [_random_instr(rng) for _ in range(50)]
    words = [encode(i) for i in before] + [0x1234 << 64] + [encode(i) for i in after]
    expect = {name: [encode(i) for i in before if isinstance(i, kinds)]
              for name, kinds in OUTPUTS.items()}
    await run(words, expect)
    assert dut.o_error.value == 1, "an illegal instruction must raise o_error"


def _flags(instrs, heads, layout):
    """``(instr, {flag: value})`` for each instruction and the head word that came with it;
    checks that each flag is set for some and clear for others."""
    flags = [(instr, {name: head >> field.offset & 1 for name, field in layout})
             for instr, head in zip(instrs, heads)]
    for name, _ in layout:
        assert {got[name] for instr, got in flags if not isinstance(instr, Set)} == {0, 1}, name
    return flags


@pytest.mark.parametrize("preset", ["2x2"])
def test_controller(preset, tmp_path):
    cfg = PRESETS[preset]
    sim = build(lambda: Controller(cfg), name="controller",
                build_dir=f"build/sim/controller-{cfg.tag}")
    run_cocotb(sim, MODULE, "dispatch", timeout=300,
               extra_env={"BERTACCEL_CONFIG": cfg.to_json(), "BERTACCEL_SEED": "9"},
               log_file=tmp_path / "sim.log")
