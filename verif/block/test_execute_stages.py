"""Block test: the execute unit's two stages, each alone, cycle by cycle against a model.

The preload stage (:class:`~bertaccel.hw.execute.PreloadStage`) is fed random MATMULs from a
queue with idle cycles and missing tokens, and its hand-over is held back by a stalling stream
stage and by the unit's room check (``i_room``). The model checks, every cycle: the accept
(only when the stage is empty or hands over in that cycle, and the tokens are there), the pops
it makes, the ``rows`` weight-row reads in the ``rows`` cycles after the accept (the read port's
address a cycle after each issue), the weight wave ``OPERAND_DELAY`` cycles after each issue
(data, bank, row; banks alternate from 0) and nothing else on it, the offer from the cycle of
the last read, its payload held from the cycle after the accept until the hand-over, and
``o_busy``.

The stream stage (:class:`~bertaccel.hw.execute.StreamStage`) is fed random MATMULs the way the
preload stage offers them (the payload a cycle or more before ``valid``, held until taken), many
of them accumulating onto the row the one before writes last. The model checks ``ready`` (idle
or on the last row, except on a last row that the next MATMUL's first row accumulates onto),
the rows issued one a cycle from the cycle after the hand-over (their tags, the pushes on the
last row, an idle slot for ``m_len == 0``), the read addresses a cycle after each issue, the
operand and bank ``OPERAND_DELAY`` cycles after it, and ``o_busy``.

Both run free (no idle cycles, no backpressure: the back-to-back timing the cycle model counts
on) and with stalls; the random seed is logged (``BERTACCEL_SEED`` replays another). Amaranth's
simulator runs them.
"""

import logging
import os
import random
from collections import deque

import pytest
from amaranth import Module, signed
from amaranth.lib import data, memory
from amaranth.sim import Simulator

from bertaccel.hw.config import PRESETS
from bertaccel.hw.execute import OPERAND_DELAY, PreloadStage, StreamStage
from bertaccel.hw.execute.layout import matmul_layout
from bertaccel.hw.isa import Instr, Opcode

__all__ = []

SEED = int(os.environ.get("BERTACCEL_SEED", "1"))
CONFIGS = ["2x2", "4x4"]
#: Probability of an idle cycle or a stall at each handshake.
PAUSES = {"free": 0.0, "stalls": 0.35}
FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


def _row(value, lanes):
    """The lanes of an ArrayLayout value read from the simulator, as ints."""
    return [int(value[i]) for i in range(lanes)]


class _Bench:
    """A stage reading a scratchpad of random rows through its port ``port_name``."""

    def __init__(self, stage, port_name, cfg, lanes, pause, seed, log):
        self.cfg, self.stage, self.p = cfg, stage, PAUSES[pause]
        self.log = log
        log.info("config %s, %s, seed %d", cfg.name, pause, seed)
        self.rng = rng = random.Random(seed)
        lo, hi = cfg.in_range
        self.spad = [[rng.randint(lo, hi) for _ in range(lanes)] for _ in range(cfg.spad_depth)]
        self.spad_mask = (1 << cfg.spad_addr_width) - 1
        self.module = m = Module()
        m.submodules.stage = stage
        m.submodules.mem = mem = memory.Memory(
            shape=data.ArrayLayout(signed(cfg.in_width), lanes), depth=cfg.spad_depth,
            init=self.spad)
        rd = mem.read_port()
        port = getattr(stage, port_name)
        m.d.comb += [rd.addr.eq(port.addr), rd.en.eq(port.en), port.data.eq(rd.data)]
        self.reads = {}         # cycle -> the row address due on the read port

    def run(self):
        sim = Simulator(self.module)
        sim.add_clock(1e-8)
        sim.add_testbench(self.bench)
        sim.run()

    def chance(self, scale=1.0):
        """True but for an idle cycle or a stall."""
        return self.rng.random() >= self.p * scale


# -- the preload stage ----------------------------------------------------------------------------

class PreloadBench(_Bench):
    """The preload stage, its instruction source, its tokens and a stalling hand-over."""

    def __init__(self, cfg, pause, seed, count=150):
        super().__init__(PreloadStage(cfg), "spad_b", cfg, cfg.cols, pause, seed,
                         logging.getLogger("tb.preload"))
        self.queue = deque(self.random_matmul() for _ in range(count))
        self.count = count
        self.accepts, self.handoffs = [], []
        self.held = None        # (accept cycle, fields, bank) of the MATMUL in the stage
        self.next_bank = 0
        self.weights = {}       # cycle -> (bank, row, data) due on the weight wave

    def random_matmul(self):
        """The fields of a random MATMUL instruction, addresses near the ends of their range."""
        rng, cfg = self.rng, self.cfg
        return {
            "a_addr": rng.randrange(1 << 16),
            "b_addr": rng.choice([rng.randrange(64), cfg.spad_depth - 2, rng.randrange(1 << 16)]),
            "acc_addr": rng.choice([0, rng.randrange(1 << 16)]),
            "m_len": rng.choice([0, 1, 2, rng.randrange(1, 40), (1 << 16) - 1]),
            "accumulate": rng.random() < 0.5,
            "shift": rng.random() < 0.5,
            "deps": {flag: rng.random() < 0.5 for flag in FLAGS},
        }

    def handed_over(self, fields, bank):
        """The payload the stage must offer for the MATMUL ``fields`` preloaded into ``bank``."""
        m_len = fields["m_len"]
        return {
            "bank": bank, "a_addr": fields["a_addr"], "acc_addr": fields["acc_addr"],
            "acc_prev": (fields["acc_addr"] - 1) % (1 << self.cfg.acc_addr_width),
            "remaining": m_len or 1, "zero": int(m_len == 0), "final": int(m_len <= 1),
            "accumulate": int(fields["accumulate"]), "shift": int(fields["shift"]),
            "push_load": int(fields["deps"]["push_prev"]),
            "push_store": int(fields["deps"]["push_next"]),
        }

    async def bench(self, ctx):
        stage = self.stage
        offering = False        # i_instr.valid is up (held until taken)
        cycle = 0
        while len(self.handoffs) < self.count:
            assert cycle < 200 * self.count, "the preload stage stopped"
            offering = bool(self.queue) and (offering or self.chance())
            head = self.queue[0] if offering else None
            avail = {"pop_prev": self.chance(0.5), "pop_next": self.chance(0.5)}
            sink_ready, room = self.chance(), self.chance(0.5)
            ctx.set(stage.i_instr.valid, offering)
            if head:
                ctx.set(stage.i_instr.payload, Instr.const({
                    "opcode": Opcode.MATMUL, "deps": head["deps"],
                    "body": {"matmul": {k: v for k, v in head.items() if k != "deps"}}}))
                ctx.set(stage.i_head, {"zero": head["m_len"] == 0, "final": head["m_len"] <= 1})
            ctx.set(stage.from_load.avail, avail["pop_prev"])
            ctx.set(stage.from_store.avail, avail["pop_next"])
            ctx.set(stage.o_matmul.ready, sink_ready)
            ctx.set(stage.i_room, room)

            offer = self.held is not None and cycle >= self.held[0] + self.cfg.rows and room
            handoff = offer and sink_ready
            accept = ((self.held is None or handoff) and head is not None and
                      all(avail[flag] or not head["deps"][flag] for flag in avail))
            self.check(ctx, cycle, offer, accept, head)
            if handoff:
                self.handoffs.append(cycle)
                self.held = None
            if accept:
                self.accept(cycle, self.queue.popleft())
                offering = False
            await ctx.tick()
            cycle += 1
        for _ in range(OPERAND_DELAY + 1):      # the last weight rows, and nothing after them
            assert ctx.get(stage.o_w_en) == (self.weights.pop(cycle, None) is not None)
            await ctx.tick()
            cycle += 1
        assert not self.weights

    def check(self, ctx, cycle, offer, accept, head):
        """Every output in ``cycle``, against what the stage must do."""
        stage, at = self.stage, f"cycle {cycle}"
        assert ctx.get(stage.o_busy) == (self.held is not None), at
        assert ctx.get(stage.o_matmul.valid) == offer, at
        if self.held is not None and cycle > self.held[0]:
            got = ctx.get(stage.o_matmul.payload)
            want = self.handed_over(*self.held[1:])
            assert {k: int(getattr(got, k)) for k in want} == want, at
        assert ctx.get(stage.i_instr.ready) == accept, at
        assert ctx.get(stage.from_load.pop) == (accept and head["deps"]["pop_prev"]), at
        assert ctx.get(stage.from_store.pop) == (accept and head["deps"]["pop_next"]), at
        if cycle in self.reads:
            assert ctx.get(stage.spad_b.addr) == self.reads.pop(cycle), at
        wave = self.weights.pop(cycle, None)
        assert ctx.get(stage.o_w_en) == (wave is not None), at
        if wave is not None:
            bank, row, value = wave
            assert (ctx.get(stage.o_w_bank), ctx.get(stage.o_w_row)) == (bank, row), at
            assert _row(ctx.get(stage.o_w), self.cfg.cols) == value, at

    def accept(self, cycle, fields):
        """The stage took ``fields`` in ``cycle``: its weight reads and rows fall due."""
        self.accepts.append(cycle)
        self.held = (cycle, fields, self.next_bank)
        for j in range(self.cfg.rows):
            addr = (fields["b_addr"] + j) & self.spad_mask
            self.reads[cycle + 2 + j] = addr
            self.weights[cycle + 1 + j + OPERAND_DELAY] = (self.next_bank, j, self.spad[addr])
        self.next_bank ^= 1


@pytest.mark.parametrize("pause", sorted(PAUSES))
@pytest.mark.parametrize("name", CONFIGS)
def test_preload_stage(name, pause):
    tb = PreloadBench(PRESETS[name], pause, SEED * 100 + CONFIGS.index(name))
    tb.run()
    assert len(tb.accepts) == tb.count
    if pause == "free":
        # Back to back: each MATMUL is handed over `rows` cycles after its accept, and the next
        # is accepted in that cycle.
        assert tb.handoffs == [a + tb.cfg.rows for a in tb.accepts]
        assert tb.accepts[1:] == tb.handoffs[:-1]


# -- the stream stage -----------------------------------------------------------------------------

class StreamBench(_Bench):
    """The stream stage, fed hand-overs the way the preload stage offers them."""

    def __init__(self, cfg, pause, seed, count=200):
        super().__init__(StreamStage(cfg), "spad_a", cfg, cfg.rows, pause, seed,
                         logging.getLogger("tb.stream"))
        self.acc_mask = (1 << cfg.acc_addr_width) - 1
        self.payloads = []
        for _ in range(count):
            self.payloads.append(self.random_matmul(self.payloads[-1] if self.payloads else None))
        self.handoffs = []
        self.clashes = set()    # the MATMULs (by index) the next one clashed with
        self.operands = {}      # cycle -> (a row, bank) due at the mesh

    def random_matmul(self, before):
        """A random hand-over payload; ``before``, the one offered before it, or None."""
        rng, mask = self.rng, self.acc_mask
        m_len = rng.choice([0, 1, 1, 2, 2, 3, rng.randrange(1, 12)])
        if before is not None and rng.random() < 0.5:
            # Onto the row the MATMUL before writes last, or near it.
            last = before["acc_addr"] + before["remaining"] - 1
            acc_addr = (last + rng.choice([0, 0, 1, -1])) & mask
        else:
            acc_addr = rng.randrange(1 << 16)
        return {
            "bank": rng.randrange(2), "a_addr": rng.randrange(1 << 16), "acc_addr": acc_addr,
            "acc_prev": (acc_addr - 1) & mask, "remaining": m_len or 1, "zero": int(m_len == 0),
            "final": int(m_len <= 1), "accumulate": int(rng.random() < 0.7),
            "shift": int(rng.random() < 0.5),
            "push_load": int(rng.random() < 0.5), "push_store": int(rng.random() < 0.5),
        }

    async def bench(self, ctx):
        stage, layout, count = self.stage, matmul_layout(self.cfg), len(self.payloads)
        streaming = None        # (hand-over cycle, payload) of the MATMUL in the stage
        clash = False           # the stage closed its last row to the MATMUL on offer
        taken = 0               # MATMULs taken so far: payloads[taken] is next
        shown = None            # the cycle the next payload went on offer
        cycle = 0
        while taken < count or streaming is not None:
            assert cycle < 100 * count, "the stream stage stopped"
            # The source: the payload a cycle or more before valid, held until taken.
            nxt = self.payloads[taken] if taken < count else None
            if nxt is not None:
                shown = cycle if shown is None else shown
                ctx.set(stage.i_matmul.payload, layout.const(nxt))
            valid = (nxt is not None and cycle > shown and
                     (ctx.get(stage.i_matmul.valid) or self.chance()))
            ctx.set(stage.i_matmul.valid, valid)

            row = None if streaming is None else cycle - streaming[0] - 1
            last = streaming is not None and row == streaming[1]["remaining"] - 1
            ready = streaming is None or (last and not clash)
            assert ctx.get(stage.i_matmul.ready) == ready, f"cycle {cycle}"
            self.check(ctx, cycle, streaming and streaming[1], row, last)

            # The stage decides its next `ready` from the payload on offer now: the row after
            # this one is its last, and the next MATMUL's first row accumulates onto it.
            clash = (streaming is not None and nxt is not None and
                     row == streaming[1]["remaining"] - 2 and
                     (streaming[1]["acc_addr"] + row) & self.acc_mask == nxt["acc_prev"] and
                     nxt["accumulate"] and not nxt["zero"])
            if clash:
                self.clashes.add(taken - 1)
            if last:
                streaming = None
            if valid and ready:
                self.handoffs.append(cycle)
                streaming, taken, shown = (cycle, nxt), taken + 1, None
            await ctx.tick()
            cycle += 1
        for _ in range(OPERAND_DELAY):
            self.check(ctx, cycle, None, None, False)
            await ctx.tick()
            cycle += 1
        assert not self.operands

    def check(self, ctx, cycle, s, row, last):
        """The outputs in ``cycle``: row ``row`` of the MATMUL ``s`` issued, or none."""
        stage, at = self.stage, f"cycle {cycle}"
        assert ctx.get(stage.o_busy) == (s is not None), at
        tag = ctx.get(stage.o_row)
        got = [int(getattr(tag, f)) for f in ("valid", "addr", "accumulate", "shift", "push")]
        if s is None:
            assert got == [0, 0, 0, 0, 0] and not ctx.get(stage.o_push_load), at
        else:
            assert got == [1 - s["zero"], (s["acc_addr"] + row) & self.acc_mask,
                           s["accumulate"], s["shift"], int(s["push_store"] and last)], at
            assert ctx.get(stage.o_push_load) == (s["push_load"] and last), at
            addr = (s["a_addr"] + row) & self.spad_mask
            self.reads[cycle + 1] = addr
            self.operands[cycle + OPERAND_DELAY] = (self.spad[addr], s["bank"])
        if cycle in self.reads:
            assert ctx.get(stage.spad_a.addr) == self.reads.pop(cycle), at
        if cycle in self.operands:
            value, bank = self.operands.pop(cycle)
            assert (_row(ctx.get(stage.o_a), self.cfg.rows), ctx.get(stage.o_bank)) == \
                (value, bank), at


@pytest.mark.parametrize("pause", sorted(PAUSES))
@pytest.mark.parametrize("name", CONFIGS)
def test_stream_stage(name, pause):
    tb = StreamBench(PRESETS[name], pause, SEED * 100 + 50 + CONFIGS.index(name))
    tb.run()
    assert tb.clashes, "no MATMUL accumulated onto the row the one before writes last"
    if pause == "free":
        # Back to back, as the source allows (the payload a cycle before `valid`, as the preload
        # stage offers it): each MATMUL is taken on the last row of the one before, a cycle
        # later where they clash.
        gaps = [b - a for a, b in zip(tb.handoffs, tb.handoffs[1:])]
        assert gaps == [max(q["remaining"], 2) + (i in tb.clashes)
                        for i, q in enumerate(tb.payloads[:-1])]
