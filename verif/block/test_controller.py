"""Block test: the controller's dispatch of instructions to the three unit queues.

Random programs go in, each under one setting of :data:`PAUSES`: random idle cycles on the
instruction stream and independent random backpressure on each unit's queue output, none at all,
heavy backpressure, and cocotbext-axi's ready-one-cycle-in-four. Each unit must receive exactly
its instructions, in program order, and then nothing more once the controller is idle; each LOAD,
MATMUL and STORE comes with the flags the controller decodes of it (``LoadHead``, ``MatmulHead``,
``StoreHead``). Then an illegal opcode: the error flag rises, naming the fault and the instruction's index, the
rest of the stream is still consumed (nothing hangs) and nothing more reaches any unit. (The
controller checks the opcode alone here, so that any fields are dispatched; the checker's other
rules are tested on the whole core, against the software device, in verif/system.)
"""

import os
import random

import cocotb
import pytest
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge

from bertaccel.hw.config import PRESETS
from bertaccel.hw.legal import Fault
from bertaccel.hw.controller import Controller
from bertaccel.hw.isa import (EpOp, Load, LoadHead, Matmul, MatmulHead, Param, Set, Store,
                              StoreHead, Target, encode)
from bertaccel.sim.build import build, run_cocotb

from verif.tb.streams import (StreamMonitor, StreamSink, StreamSource, cycle_pause, drain,
                              random_pause)

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


class ControllerTB:
    """The controller between an instruction source and the three unit queues.

    ``source`` drives ``i_instr``, ``taken`` watches it (every word taken once, in program
    order), and a sink per queue (``sinks["o_load"]`` ...) takes the queue's output with its head
    word. The model is :data:`OUTPUTS`: each instruction goes to the queue of its kind.
    """

    def __init__(self, dut, seed):
        self.dut = dut
        self.log = dut._log.getChild("tb.controller")
        self.rng = random.Random(seed)                 # the programs
        self.pause_rng = random.Random(seed ^ 0x5EED)  # the idle cycles and backpressure

    async def reset(self):
        dut = self.dut
        Clock(dut.clk, 10, unit="ns").start()
        dut.rst.value = 1
        dut.i_instr__valid.value = 0
        dut.i_instr__payload.value = 0
        for name in OUTPUTS:
            getattr(dut, f"{name}__ready").value = 0
        await FallingEdge(dut.clk)
        await FallingEdge(dut.clk)
        dut.rst.value = 0
        self.source = StreamSource(dut, "i_instr", dut.clk)
        self.taken = StreamMonitor(dut, "i_instr", dut.clk)
        self.sinks = {name: StreamSink(dut, name, dut.clk, extra=[f"{name}_head"])
                      for name in OUTPUTS}

    def set_pauses(self, pauses):
        """Pause the source and sinks by ``pauses``, one of :data:`PAUSES`."""
        source, sinks = PAUSES[pauses]
        self.source.set_pause_generator(source(random.Random(self.pause_rng.getrandbits(64))))
        for index, sink in enumerate(self.sinks.values()):
            sink.set_pause_generator(
                sinks(random.Random(self.pause_rng.getrandbits(64)), index))

    async def run(self, words, expect, *, limit=20000):
        """Send ``words``; check that every word is taken and that each queue gives exactly
        ``expect[name]``, in order, and then nothing more; return each queue's head words."""
        self.source.send(words)
        await self.source.wait(limit)
        for name, sink in self.sinks.items():
            await sink.wait(len(expect[name]), limit)
        got = {name: [sink.get() for _ in expect[name]] for name, sink in self.sinks.items()}
        assert [t.payload for t in self.taken.get_all()] == words
        assert {name: [t.payload for t in got[name]] for name in got} == expect
        await drain(self.dut.clk, sinks=[*self.sinks.values(), self.taken],
                    busy=self.dut.o_busy)
        return {name: [t.extra[f"{name}_head"] for t in got[name]] for name in got}


# Pause generators of the source and of each sink (by its index): random idle cycles and
# backpressure (the first, this test's from the start), none at all, heavy backpressure, and
# cocotbext-axi's one cycle in four, at a different phase on each sink.
PAUSES = {
    "idle 0.3, stall 0.4": (lambda rng: random_pause(rng, 0.3),
                            lambda rng, index: random_pause(rng, 0.4)),
    "none": (lambda rng: None, lambda rng, index: None),
    "idle 0.1, stall 0.8": (lambda rng: random_pause(rng, 0.1),
                            lambda rng, index: random_pause(rng, 0.8)),
    "1110": (lambda rng: cycle_pause([1, 1, 1, 0]),
             lambda rng, index: cycle_pause(([1, 1, 1, 0] * 2)[index:index + 4])),
}


@cocotb.test()
async def dispatch(dut):
    seed = int(os.environ.get("BERTACCEL_SEED", "1"))
    tb = ControllerTB(dut, seed)
    tb.log.info("seed %d", seed)
    await tb.reset()

    # A random program under each of the pauses.
    for pauses in PAUSES:
        tb.set_pauses(pauses)
        program = [_random_instr(tb.rng) for _ in range(400)]
        expect = {name: [encode(i) for i in program if isinstance(i, kinds)]
                  for name, kinds in OUTPUTS.items()}
        heads = await tb.run([encode(i) for i in program], expect)
        tb.log.info("pauses %s: %d instructions dispatched", pauses, len(program))
        _check_heads(program, heads)
        assert not dut.o_error.value and not dut.o_busy.value

    # An illegal opcode: it and everything after it is taken, and nothing reaches a unit.
    tb.set_pauses("idle 0.3, stall 0.4")
    after = [_random_instr(tb.rng) for _ in range(50)]
    await tb.run([0x1234 << 64] + [encode(i) for i in after], {name: [] for name in OUTPUTS})
    assert dut.o_error.value == 1, "an illegal instruction must raise o_error"
    assert dut.o_fault.value == Fault.OPCODE and dut.o_fault_pc.value == 1600


def _check_heads(program, heads):
    """Each LOAD, MATMUL and STORE came with the head flags decoded of it."""
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
    sim = build(lambda: Controller(cfg, checks={Fault.OPCODE}), name="controller",
                build_dir=f"build/sim/controller-{cfg.tag}", quick=True)
    run_cocotb(sim, MODULE, "dispatch", timeout=300,
               extra_env={"BERTACCEL_CONFIG": cfg.to_json(), "BERTACCEL_SEED": "9"},
               log_file=tmp_path / "sim.log")
