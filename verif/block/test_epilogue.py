"""Block test: the epilogue, every op bit for bit against :mod:`bertaccel.golden.intops`.

The testbench plays the store unit: it sends *STOREs* (rows of ``strips`` beats each, in the
documented pass order P1(0), P1(1), P2(0), P1(2), ..., P2(R-1) for SOFTMAX and LAYERNORM), and
changes ``params`` only while ``o_busy`` is low. A *segment* is a parameter setting and the STOREs
that run under it back to back. The rows come from realistic scales (multipliers and shifts
from ``quantize_scale``) and from the edges of every op: REQUANT ties at .5 and saturation, per
tensor and per column; GELU at both saturation ends and at the edges of the PHI table; SOFTMAX
with equal logits, one huge logit, everything masked but one position, rows of length 1, int32
extremes, and rows whose length is not a multiple of ``cols``; LayerNorm with constant rows
(eps and no eps), int32 extremes, rows of length 1 and one outlier in a long row.

Every segment runs with idle cycles on the input and backpressure on the output, random or
cocotbext-axi's ready one cycle in four (:class:`verif.tb.streams.StreamSource` and
:class:`~verif.tb.streams.StreamSink` with pause generators); every output beat is compared with
golden's, in order, and then nothing more may come out before ``o_busy`` falls, nor for a few
cycles after. Then two checks of throughput with neither: a long single-pass stream is taken at
one beat a cycle, and SOFTMAX and LAYERNORM STOREs whose rows have the fewest strips that the
intake's docstring says never wait (``ceil(gap / ratio) - 1``) are taken without a single stall.

This module is the pytest file and, inside the simulator, the cocotb test module. The seed is
logged; ``BERTACCEL_SEED=<n> pytest verif/block/test_epilogue.py`` replays a run.
"""

import inspect
import json
import math
import os
import random
from dataclasses import dataclass, field

import cocotb
import numpy as np
import pytest
import torch
from amaranth import Module
from amaranth.lib import wiring
from bertaccel.golden import intops
from bertaccel.hw.config import PRESETS, AccelConfig
from bertaccel.hw.epilogue import Epilogue, Schedule, beat_layout
from bertaccel.hw.isa import EpOp, ParamsLayout, PmemWord
from bertaccel.hw.verilog import source_key
from bertaccel.sim.build import build, run_cocotb
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, ReadOnly
from cocotb.utils import get_sim_time

from verif.helpers import pass_order
from verif.tb.streams import StreamSink, StreamSource, cycle_pause, drain, random_pause

__all__ = []

MODULE = "verif.block.test_epilogue"
I32_MIN, I32_MAX = -(1 << 31), (1 << 31) - 1
PERIOD_NS = 10


# -- STOREs and their expected outputs ------------------------------------------------------------

@dataclass
class StoreJob:
    """One STORE: ``rows`` x ``strips * cols`` accumulator values and what golden makes of them."""
    name: str
    op: EpOp
    acc: np.ndarray                  # (rows, n) int64
    bias: np.ndarray                 # (n,) the PMEM bias / mask, int32 values
    p1: np.ndarray                   # (n,) uint16
    p2: np.ndarray                   # (n,) uint16
    res: np.ndarray                  # (rows, n) int8 values
    row_len: int
    expected: np.ndarray = None      # (rows, n) int32

    @property
    def two_pass(self):
        return self.op in (EpOp.SOFTMAX, EpOp.LAYERNORM)


@dataclass
class Segment:
    """STOREs that run back to back under one parameter setting."""
    name: str
    params: dict
    stores: list = field(default_factory=list)


def golden(job, params, cols):
    """What golden.intops makes of ``job``, for an epilogue of ``cols`` lanes."""
    x = torch.from_numpy(job.acc.astype(np.int64))
    bias = torch.from_numpy(job.bias.astype(np.int64))
    if job.op == EpOp.RAW:
        return job.acc.astype(np.int32)
    if job.op == EpOp.REQUANT:
        if params["flags"] & 1:
            mul = torch.from_numpy(job.p1.astype(np.int64))
            shift = torch.from_numpy(job.p2.astype(np.int64) & 63)
        else:
            mul, shift = params["mul0"], params["shift0"]
        y = intops.requant(x, bias=bias, mul=mul, shift=shift)
    elif job.op == EpOp.GELU:
        y = intops.gelu(x, bias=bias, gmul=params["mul0"], gshift=params["shift0"],
                        omul=params["mul1"], oshift=params["shift1"])
    elif job.op == EpOp.SOFTMAX:
        y = intops.softmax(x, mask=bias, mul=params["mul0"], shift=params["shift0"], cols=cols,
                           row_len=job.row_len)
    else:
        y = intops.layernorm(
            x, bias=bias, residual=torch.from_numpy(job.res.astype(np.int64)),
            xmul=params["mul0"], rmul=params["mul1"], vshift=params["shift0"],
            gamma=torch.from_numpy(job.p1.astype(np.int16).astype(np.int64)),
            beta=torch.from_numpy(job.p2.astype(np.int16).astype(np.int64)),
            gshift=params["shift1"], eps_n2=params["eps"], row_len=job.row_len)
    return y.numpy().astype(np.int32)


# -- packing, read off the layouts -----------------------------------------------------------

class Codec:
    """Beats, parameters and output rows as the integers the simulator's ports take."""

    def __init__(self, cfg):
        self.cols = cfg.cols
        beat = beat_layout(cfg)
        self.off = {name: beat[name].offset for name in
                    ("acc", "pm", "res", "op", "second", "last", "lane_valid")}
        assert beat["acc"].shape.elem_shape.width == 32 and beat["res"].shape.elem_shape.width == 8
        self.pm_size = PmemWord.size
        assert self.pm_size == 64
        self.pm_off = {name: PmemWord[name].offset for name in ("bias", "p1", "p2")}
        self.params_off = {name: (f.offset, f.width) for name, f in ParamsLayout}

    @staticmethod
    def lanes32(values):
        return int.from_bytes(np.asarray(values, dtype="<i4").tobytes(), "little")

    def beat(self, job, row, strip, second):
        lo, hi = strip * self.cols, (strip + 1) * self.cols
        words = ((job.bias[lo:hi].astype(np.int64) & 0xFFFFFFFF).astype(np.uint64)
                 << np.uint64(self.pm_off["bias"]))
        words |= job.p1[lo:hi].astype(np.uint64) << np.uint64(self.pm_off["p1"])
        words |= job.p2[lo:hi].astype(np.uint64) << np.uint64(self.pm_off["p2"])
        lane_valid = sum(1 << c for c in range(self.cols)
                         if not job.two_pass or lo + c < job.row_len)
        strips = job.acc.shape[1] // self.cols
        return (self.lanes32(job.acc[row, lo:hi]) << self.off["acc"]
                | int.from_bytes(words.astype("<u8").tobytes(), "little") << self.off["pm"]
                | int.from_bytes(job.res[row, lo:hi].astype("<i1").tobytes(), "little")
                << self.off["res"]
                | job.op.value << self.off["op"]
                | int(second) << self.off["second"]
                | int(strip == strips - 1) << self.off["last"]
                | lane_valid << self.off["lane_valid"])

    def params(self, values):
        word = 0
        for name, value in values.items():
            offset, width = self.params_off[name]
            assert 0 <= value < (1 << width), (name, value)
            word |= value << offset
        return word

    def unpack(self, word):
        return np.frombuffer(word.to_bytes(4 * self.cols, "little"), dtype="<i4")


# -- the testbench ------------------------------------------------------------------------------

class EpilogueTB:
    """The epilogue between the store unit's beats and the output stream, checked against golden.

    ``source`` drives ``i_beat``, ``sink`` takes ``o_data``; ``params`` is driven directly and
    changed only while ``o_busy`` is low. The cycles in which the epilogue takes a beat from
    its queue (``o_taken``) are recorded in ``takes``. The model is :func:`golden`.
    """

    def __init__(self, dut, cfg, seed):
        self.dut, self.cfg, self.codec = dut, cfg, Codec(cfg)
        self.rng = random.Random(seed)
        self.log = dut._log.getChild("tb.epilogue")
        self.drv_log = self.log.getChild("driver")
        self.mon_log = self.log.getChild("monitor")
        self.checked = 0
        self.takes = []

    @property
    def cycle(self):
        return int(get_sim_time("ns")) // PERIOD_NS

    async def reset(self):
        dut = self.dut
        Clock(dut.clk, PERIOD_NS, unit="ns").start()
        dut.rst.value = 1
        dut.i_beat__valid.value = 0
        dut.i_beat__payload.value = 0
        dut.o_data__ready.value = 0
        dut.params.value = 0
        for _ in range(3):
            await FallingEdge(dut.clk)
        dut.rst.value = 0
        self.source = StreamSource(dut, "i_beat", dut.clk)
        self.sink = StreamSink(dut, "o_data", dut.clk)
        cocotb.start_soon(self._watch_taken())

    async def _watch_taken(self):
        while True:
            await FallingEdge(self.dut.clk)
            await ReadOnly()
            if self.dut.o_taken.value:
                self.takes.append(self.cycle)

    async def drain(self, limit=1000):
        """Every beat taken, ``o_busy`` low, and no output beyond those checked."""
        await drain(self.dut.clk, sources=[self.source], sinks=[self.sink],
                    busy=self.dut.o_busy, limit=limit)

    def _pauses(self, pause):
        """A pause generator: a pattern for :func:`cycle_pause`, or a probability for
        :func:`random_pause` (with its own generator, seeded from the testbench's)."""
        seed = self.rng.getrandbits(64)
        if isinstance(pause, (list, tuple)):
            return cycle_pause(pause)
        return random_pause(random.Random(seed), pause) if pause else None

    async def run(self, segment, *, idle, stall):
        """Send every beat of ``segment`` with ``idle`` cycles on the input and ``stall``
        backpressure on the output (each a probability, or a pattern for :func:`cycle_pause`);
        check every output and that nothing more comes; return the cycles in which the
        epilogue took a beat from its queue (``o_taken``)."""
        dut, codec = self.dut, self.codec
        cols = self.cfg.cols
        await self.drain()
        segment.params = {name: int(segment.params.get(name, 0)) for name in codec.params_off}
        dut.params.value = codec.params(segment.params)
        beats, expected, names = [], [], []
        for job in segment.stores:
            job.expected = golden(job, segment.params, self.cfg.ep_lanes)
            strips = job.acc.shape[1] // cols
            for row, second in pass_order(job.acc.shape[0], job.two_pass):
                for strip in range(strips):
                    beats.append(codec.beat(job, row, strip, second))
                    if second:
                        expected.append(job.expected[row, strip * cols:(strip + 1) * cols])
                        names.append(f"{job.name} row {row} strip {strip}")
        self.drv_log.info("segment %s: %d beats in, %d out, idle %s, stall %s", segment.name,
                          len(beats), len(expected), idle, stall)
        want = [codec.lanes32(row) for row in expected]
        self.source.set_pause_generator(self._pauses(idle))
        self.sink.set_pause_generator(self._pauses(stall))
        self.takes = []
        limit = 20 * len(beats) + 1000
        self.source.send(beats)
        try:
            await self.sink.wait(len(want), limit)
            await self.source.wait(limit)
        except AssertionError as error:
            raise AssertionError(f"segment {segment.name}: {self.source.count}/{len(beats)} "
                                 f"beats in, {len(self.sink.queue)}/{len(want)} out "
                                 f"({error})") from None
        got = [self.sink.get() for _ in want]
        for index, transfer in enumerate(got):
            if transfer.payload != want[index]:
                raise AssertionError(
                    f"segment {segment.name}, {names[index]}: got "
                    f"{codec.unpack(transfer.payload).tolist()}, want "
                    f"{expected[index].tolist()}")
        self.first_output = (int(got[0].time) // PERIOD_NS) if got else None
        try:
            await self.drain()
        except AssertionError as error:
            raise AssertionError(f"segment {segment.name}: {error}") from None
        self.mon_log.info("segment %s: %d output beats equal golden's", segment.name, len(got))
        self.checked += len(got)
        return list(self.takes)


# -- realistic parameters and rows ----------------------------------------------------------------

class Workload:
    """Segments of random and edge STOREs for one config."""

    def __init__(self, cfg, seed):
        self.cols = cfg.cols
        self.schedule = Schedule.of(cfg)
        self.small = cfg.cols < 8
        self.np = np.random.default_rng(seed)
        self.rng = random.Random(seed + 1)

    def _scale(self, value):
        return intops.quantize_scale(value)

    def _i32(self, x):
        return np.clip(np.rint(x), I32_MIN, I32_MAX).astype(np.int64)

    def job(self, name, op, acc, *, bias=None, p1=None, p2=None, res=None, row_len=None):
        rows, n = acc.shape
        assert n % self.cols == 0
        g = self.np
        return StoreJob(
            name=name, op=op, acc=acc.astype(np.int64),
            bias=(g.integers(I32_MIN, I32_MAX, n, endpoint=True) if bias is None
                  else np.broadcast_to(np.asarray(bias, dtype=np.int64), (n,)).copy()),
            p1=(g.integers(0, 1 << 16, n) if p1 is None
                else np.broadcast_to(np.asarray(p1), (n,)).astype(np.uint16)),
            p2=(g.integers(0, 1 << 16, n) if p2 is None
                else np.broadcast_to(np.asarray(p2), (n,)).astype(np.uint16)),
            res=(g.integers(-128, 128, (rows, n)) if res is None else res),
            row_len=n if row_len is None else row_len)

    def n_for(self, row_len, pad_strips=0):
        return (math.ceil(row_len / self.cols) + pad_strips) * self.cols

    # -- single-pass ops --
    def single_pass(self):
        g, cols = self.np, self.cols
        out = []
        for index in range(3):
            s_acc = 10 ** g.uniform(-5, -3)                   # real value of one acc LSB
            gmul, gshift = self._scale(s_acc * 64)
            omul, oshift = self._scale(s_acc / 10 ** g.uniform(-2, -1) * 256)
            seg = Segment(f"single{index}", {"mul0": gmul, "shift0": gshift, "mul1": omul,
                                             "shift1": oshift, "flags": 0})
            rows, n = g.integers(2, 6), cols * g.integers(1, 5)
            real = g.normal(0, 2.5, (rows, n))
            bias = self._i32(g.normal(0, 0.3, n) / s_acc)
            acc = self._i32(real / s_acc)
            # RAW and REQUANT (here at GELU's index scale: saturating often) and GELU, mixed
            seg.stores += [self.job("raw", EpOp.RAW, g.integers(I32_MIN, I32_MAX, (rows, n),
                                                                 endpoint=True)),
                           self.job("gelu", EpOp.GELU, acc, bias=bias),
                           self.job("requant", EpOp.REQUANT, acc // 64, bias=bias // 64),
                           self.job("gelu2", EpOp.GELU, acc[::-1].copy(), bias=bias)]
            out.append(seg)
        # REQUANT at its own realistic scales, per tensor and per column
        for index in range(2):
            scale = 10 ** g.uniform(-4.5, -1.5)
            mul, shift = self._scale(scale)
            rows, n = g.integers(2, 8), cols * g.integers(1, 6)
            acc = self._i32(g.normal(0, 60 / scale, (rows, n)))
            seg = Segment(f"requant{index}", {"mul0": mul, "shift0": shift, "flags": 0})
            seg.stores.append(self.job("requant", EpOp.REQUANT, acc,
                                       bias=self._i32(g.normal(0, 10 / scale, n))))
            out.append(seg)
        n = cols * (8 if self.small else 4)
        scales = [self._scale(10 ** g.uniform(-5, -0.5)) for _ in range(n)]
        scales[:8] = [(1, 0), (65535, 0), (65535, 62), (0, 5), (1, 1), (3, 1), (1, 5), (1, 13)]
        mul = np.array([s[0] for s in scales])
        shift = np.array([s[1] for s in scales])
        junk = g.integers(0, 1 << 10, n) << 6                # p2 bits above 6 are ignored
        shift = np.minimum(shift, 62)
        acc = self._i32(g.normal(0, 1, (6, n)) * 60 / np.maximum(mul / 2.0 ** shift, 1e-9))
        acc[0], acc[1] = I32_MIN, I32_MAX
        seg = Segment("requant-per-column", {"mul0": g.integers(1 << 16), "shift0": 7, "flags": 1})
        seg.stores.append(self.job("requant-pc", EpOp.REQUANT, acc, p1=mul, p2=shift | junk,
                                   bias=self._i32(g.normal(0, 1, n) * 5)))
        # Ties per column: x * mul an odd multiple of 2**(shift - 1), and its neighbours.
        k = g.integers(-200, 200, (4, n))
        ties = np.where((mul % 2 == 1) & (shift >= 1) & (shift < 20),
                        (k * (1 << np.clip(shift, 1, 19)) + (1 << np.clip(shift - 1, 0, 18))), k)
        ties = np.where(ties % np.maximum(mul, 1) == 0, ties // np.maximum(mul, 1), k)
        seg.stores.append(self.job("requant-pc-ties", EpOp.REQUANT,
                                   np.concatenate([ties, ties + 1, ties - 1]), bias=0, p1=mul,
                                   p2=shift | junk))
        out.append(seg)
        return out

    def requant_edges(self):
        g, cols = self.np, self.cols
        out = []
        n = cols * (8 if self.small else 2)
        # Ties: (x + 0) * mul is an odd multiple of 2**(shift-1); and their neighbours.
        # Shifts stop at 62: golden's rshift_round overflows int64 at 63 (see the report).
        for mul, shift in [(1, 1), (3, 1), (1, 5), (5, 3), (1, 0), (65535, 0), (1, 62),
                           (65535, 62), (40000, 40)]:
            k = g.integers(-300, 300, (4, n))
            if 0 < shift < 48:
                ties = k * (1 << shift) + (1 << (shift - 1))
                acc = np.where(ties % mul == 0, ties // mul, k)
            else:
                acc = k
            acc = np.concatenate([acc, acc + 1, acc - 1, g.choice(
                [I32_MIN, I32_MIN + 1, -1, 0, 1, I32_MAX - 1, I32_MAX], (2, n)),
                np.full((1, n), 255), np.full((1, n), -257), np.full((1, n), -259)])
            acc = np.clip(acc, I32_MIN, I32_MAX)
            bias = np.zeros(n, dtype=np.int64)
            bias[::3] = g.choice([I32_MIN, I32_MAX, -1, 1], len(bias[::3]))
            seg = Segment(f"requant-edge-{mul}-{shift}", {"mul0": mul, "shift0": shift, "flags": 0})
            seg.stores.append(self.job("ties", EpOp.REQUANT, acc, bias=0))
            seg.stores.append(self.job("ties-bias", EpOp.REQUANT, acc, bias=bias))
            out.append(seg)
        return out

    def gelu_edges(self):
        g, cols = self.np, self.cols
        out = []
        n = cols * 4
        # gmul = 1, gshift = 0: t = x + bias, so every table edge is hit exactly.
        span = np.arange(-300, 300, 2)
        t_edges = np.array([-10**6, -513, -258, -257, -256, -255, -1, 0, 1, 254, 255, 256, 257,
                            10**6, I32_MIN, I32_MAX])
        values = np.concatenate([span, t_edges])
        values = np.concatenate([values, g.choice(values, (-len(values)) % n)])
        acc = values.reshape(-1, n)
        for omul, oshift in [(65535, 0), (1, 0), (65535, 62), (300, 12)]:
            seg = Segment(f"gelu-edge-{omul}-{oshift}",
                          {"mul0": 1, "shift0": 0, "mul1": omul, "shift1": oshift})
            seg.stores.append(self.job("edges", EpOp.GELU, acc, bias=0))
            seg.stores.append(self.job("edges-bias", EpOp.GELU, acc[::-1].copy(),
                                       bias=g.choice([0, -1, 1, I32_MIN, I32_MAX], n)))
            out.append(seg)
        return out

    # -- SOFTMAX --
    def softmax(self):
        g, cols = self.np, self.cols
        max_len = 512
        out = []
        for index in range(4):
            s_in = 10 ** g.uniform(-3.5, -2)
            mul, shift = self._scale(s_in * math.log2(math.e) / 8 * (1 << intops.SOFTMAX_FRAC))
            # one long row length, the others anywhere up to it
            row_len = int(g.integers(max_len * 3 // 4 if index == 0 else 2, max_len + 1))
            if row_len % cols == 0:
                row_len -= 1
            n = self.n_for(row_len, int(g.integers(0, 2)))
            rows = int(g.integers(1, 3 if self.small else 5))
            sigma = 10 ** g.uniform(1.5, 3.5) / (mul / 2 ** shift)   # spread of t, in acc LSBs
            seg = Segment(f"softmax{index}", {"mul0": mul, "shift0": shift, "row_len": row_len})
            masked = -self._i32(g.uniform(0, 4e4, n) / (mul / 2 ** shift))
            mask = np.where(g.random(n) < 0.2, masked, 0)
            seg.stores.append(self.job("random", EpOp.SOFTMAX,
                                       self._i32(g.normal(0, sigma, (rows, n))),
                                       bias=mask, row_len=row_len))
            out.append(seg)
        # the edges, under one realistic scale and one that saturates t
        one = 1 << intops.SOFTMAX_FRAC            # t of 1 (log2 units)
        for mul, shift in [self._scale(0.005 * math.log2(math.e) / 8 * one), (65535, 0)]:
            row_len = 3 * cols + 1
            n = self.n_for(row_len, 1)
            seg = Segment(f"softmax-edge-{mul}-{shift}",
                          {"mul0": mul, "shift0": shift, "row_len": row_len})
            rows = 3
            equal = np.full((rows, n), 0, dtype=np.int64) + g.integers(-5000, 5000, (rows, 1))
            huge = self._i32(g.normal(0, 300, (rows, n)))
            huge[np.arange(rows), g.integers(0, row_len, rows)] = I32_MAX
            lonely = self._i32(g.normal(0, 300, (rows, n)))
            keep = int(g.integers(0, row_len))
            only_one = np.full(n, I32_MIN, dtype=np.int64)
            only_one[keep] = 0
            extremes = g.choice([I32_MIN, I32_MAX, 0, -1], (rows, n))
            seg.stores += [
                self.job("equal", EpOp.SOFTMAX, equal, bias=0, row_len=row_len),
                self.job("huge", EpOp.SOFTMAX, huge, bias=0, row_len=row_len),
                self.job("masked-but-one", EpOp.SOFTMAX, lonely, bias=only_one,
                         row_len=row_len),
                self.job("extremes", EpOp.SOFTMAX, extremes,
                         bias=g.choice([0, I32_MIN, I32_MAX, -1000], n), row_len=row_len),
            ]
            out.append(seg)
            for n_strips in (1, 3):
                seg = Segment(f"softmax-len1-{n_strips}-{mul}",
                              {"mul0": mul, "shift0": shift, "row_len": 1})
                seg.stores.append(self.job("len1", EpOp.SOFTMAX,
                                           self._i32(g.normal(0, 1e6, (2, n_strips * cols))),
                                           row_len=1))
                out.append(seg)
        return out

    # -- LAYERNORM --
    def ln_params(self, row_len):
        g = self.np
        s_acc = 10 ** g.uniform(-5, -3)
        s_v = 2.0 ** -int(g.integers(6, 11))
        xmul, vshift = self._scale(s_acc / s_v)
        rmul = min(round(10 ** g.uniform(-2.5, -1) / s_v * 2 ** vshift), (1 << 32) - 1)
        s_out = 10 ** g.uniform(-1.5, -0.5)
        gshift = max(8, min(63, 12 + math.floor(math.log2(32767 * s_out / 2.0))))
        eps_n2 = round(1e-5 / s_v ** 2 * row_len ** 2)
        params = {"mul0": xmul, "shift0": vshift, "mul1": rmul, "shift1": gshift,
                  "row_len": row_len, "eps": eps_n2}
        return params, s_acc, s_out

    def gamma_beta(self, n, s_out, gshift):
        g = self.np
        gamma = np.clip(np.rint(g.normal(1, 0.4, n) / s_out * 2.0 ** (gshift - 12)),
                        -32768, 32767).astype(np.int64)
        beta = np.clip(np.rint(g.normal(0, 0.5, n) / s_out * 256), -32768, 32767).astype(np.int64)
        return gamma & 0xFFFF, beta & 0xFFFF

    def layernorm(self):
        g, cols = self.np, self.cols
        lo, hi = (16, 128) if self.small else (128, 1024)
        out = []
        for index in range(3):
            row_len = int(g.integers(lo, hi + 1))
            if index == 0 and row_len % cols == 0:
                row_len -= 1
            n = self.n_for(row_len, int(g.integers(0, 2)))
            params, s_acc, s_out = self.ln_params(row_len)
            rows = int(g.integers(1, 4))
            gamma, beta = self.gamma_beta(n, s_out, params["shift1"])
            real = (g.normal(0, 1, (rows, n)) * g.uniform(0.2, 3, (rows, 1))
                    + g.normal(0, 1, (rows, 1)))
            seg = Segment(f"layernorm{index}", params)
            seg.stores.append(self.job("random", EpOp.LAYERNORM, self._i32(real / s_acc),
                                       bias=self._i32(g.normal(0, 0.1, n) / s_acc), p1=gamma,
                                       p2=beta, row_len=row_len))
            out.append(seg)
        # edges: constant rows (with and without eps), int32 extremes, length 1, one outlier
        row_len = lo + 3
        n = self.n_for(row_len, 1)
        params, s_acc, s_out = self.ln_params(row_len)
        gamma, beta = self.gamma_beta(n, s_out, params["shift1"])
        const = np.zeros((3, n), dtype=np.int64) + g.integers(-10**6, 10**6, (3, 1))
        const_res = np.zeros((3, n), dtype=np.int64) + g.integers(-128, 128, (3, 1))
        extremes = g.choice([I32_MIN, I32_MAX, 0], (3, n))
        for eps in (params["eps"], 0):
            seg = Segment(f"layernorm-edge-eps{eps}", dict(params, eps=eps))
            seg.stores += [
                self.job("constant", EpOp.LAYERNORM, const, bias=0, p1=gamma, p2=beta,
                         res=const_res, row_len=row_len),
                self.job("extremes", EpOp.LAYERNORM, extremes,
                         bias=g.choice([I32_MIN, I32_MAX, 0], n), p1=gamma, p2=beta,
                         row_len=row_len),
            ]
            out.append(seg)
        seg = Segment("layernorm-len1", dict(params, row_len=1, eps=0))
        seg.stores.append(self.job("len1", EpOp.LAYERNORM,
                                   self._i32(g.normal(0, 1e6, (3, 2 * cols))), p1=gamma[:2 * cols],
                                   p2=beta[:2 * cols], row_len=1))
        out.append(seg)
        # One v = 32767 among zeros: |z| is as large as it gets (sqrt(N) * 2**12).
        row_len = hi
        n = self.n_for(row_len)
        params = {"mul0": 1, "shift0": 0, "mul1": 0, "shift1": 20, "row_len": row_len, "eps": 0}
        outlier = np.zeros((2, n), dtype=np.int64)
        outlier[0, 5] = 40000
        outlier[1, row_len - 1] = -40000
        seg = Segment("layernorm-outlier", params)
        seg.stores.append(self.job("outlier", EpOp.LAYERNORM, outlier, bias=0,
                                   p1=np.full(n, 0x7FFF), p2=np.full(n, 0x8000), row_len=row_len))
        out.append(seg)
        return out

    # -- throughput --
    def no_wait_strips(self, op):
        """The fewest strips a row of ``op`` has that never waits for its statistics,
        ``ceil(gap / ratio) - 1`` (hw/epilogue/intake.py), and at least 2."""
        sch = self.schedule
        return max(2, -(-sch.gap[op] // sch.ratio) - 1)

    def throughput(self):
        g, cols = self.np, self.cols
        mul, shift = self._scale(0.01)
        single = Segment("throughput-single", {"mul0": mul, "shift0": shift, "flags": 0})
        rows = 256 // 4
        single.stores.append(self.job("stream", EpOp.REQUANT,
                                      self._i32(g.normal(0, 5000, (rows, 4 * cols)))))
        row_len = self.no_wait_strips(EpOp.SOFTMAX) * cols - 1
        n = self.n_for(row_len)
        smx = Segment("throughput-softmax", {"mul0": mul, "shift0": shift, "row_len": row_len})
        smx.stores.append(self.job("rows", EpOp.SOFTMAX, self._i32(g.normal(0, 3e4, (4, n))),
                                   bias=0, row_len=row_len))
        row_len = self.no_wait_strips(EpOp.LAYERNORM) * cols - 1
        n = self.n_for(row_len)
        params, s_acc, s_out = self.ln_params(row_len)
        gamma, beta = self.gamma_beta(n, s_out, params["shift1"])
        ln = Segment("throughput-layernorm", params)
        ln.stores.append(self.job("rows", EpOp.LAYERNORM,
                                  self._i32(g.normal(0, 1, (4, n)) / s_acc), p1=gamma, p2=beta,
                                  row_len=row_len))
        return [single, smx, ln]

    def segments(self):
        segs = (self.single_pass() + self.requant_edges() + self.gelu_edges() + self.softmax()
                + self.layernorm())
        self.rng.shuffle(segs)
        return segs


@cocotb.test(timeout_time=50, timeout_unit="ms")
async def epilogue_ops(dut):
    cfg = AccelConfig.from_dict(json.loads(os.environ["BERTACCEL_CONFIG"]))
    seed = int(os.environ.get("BERTACCEL_SEED", "1"))
    tb = EpilogueTB(dut, cfg, seed)
    tb.log.info("config %s, seed %d", cfg.name, seed)
    work = Workload(cfg, seed)
    await tb.reset()

    # Every op, random idle cycles on the input and backpressure on the output (or
    # cocotbext-axi's ready one cycle in four).
    for segment in work.segments():
        idle, stall = tb.rng.choice([(0.0, 0.0), (0.3, 0.4), (0.1, 0.7), (0.6, 0.1),
                                     (0.0, [1, 1, 1, 0])])
        await tb.run(segment, idle=idle, stall=stall)

    # Throughput: nothing idle, nothing pressing back. Every beat is taken from the queue
    # ep_ratio cycles after the one before (the next cycle when the epilogue is as wide as the
    # beat), and the first output comes Schedule.latency cycles after its beat was taken.
    schedule = Schedule.of(cfg)
    latency, ratio = schedule.latency, schedule.ratio
    for segment in work.throughput():
        takes = await tb.run(segment, idle=0, stall=0)
        span = takes[-1] - takes[0] + 1
        tb.log.info("%s: %d beats taken in %d cycles, first output after %d", segment.name,
                    len(takes), span, tb.first_output - takes[0])
        assert span == ratio * (len(takes) - 1) + 1, \
            f"{segment.name}: {len(takes)} beats took {span} cycles to be taken"
        if not segment.stores[0].two_pass:
            assert tb.first_output - takes[0] == latency
    await tb.drain()
    tb.log.info("%d output beats checked in %d cycles", tb.checked, tb.cycle)


class EpilogueTop(wiring.Component):
    """The epilogue one level down, so the simulator's top module has only the ports.

    Verilator makes every signal of the top module visible to VPI (see sim/build.py); the
    epilogue's thousands of pipeline registers would then be unoptimisable and slow to build.
    """

    def __init__(self, cfg):
        self._epilogue = Epilogue(cfg)
        super().__init__(self._epilogue.signature)

    def elaborate(self, platform):
        m = Module()
        m.submodules.epilogue = epilogue = self._epilogue
        wiring.connect(m, wiring.flipped(self.i_beat), epilogue.i_beat)
        wiring.connect(m, epilogue.o_data, wiring.flipped(self.o_data))
        m.d.comb += [epilogue.params.eq(self.params), self.o_busy.eq(epilogue.o_busy),
                     self.o_taken.eq(epilogue.o_taken)]
        return m


def _source_key(cfg):
    """The Verilog depends on the config, the generator sources and the wrapper only."""
    return source_key(cfg.to_json(), inspect.getsource(EpilogueTop))


@pytest.mark.timeout(600)
@pytest.mark.parametrize("preset", ["2x2", "8x8"])
def test_epilogue(preset, sim_root, tmp_path):
    cfg = PRESETS[preset]
    sim = build(lambda: EpilogueTop(cfg), name="epilogue",
                build_dir=sim_root / f"epilogue-{cfg.tag}",
                source_key=_source_key(cfg), quick=True)
    run_cocotb(sim, MODULE, "epilogue_ops", timeout=300,
               extra_env={"BERTACCEL_CONFIG": cfg.to_json(),
                          "BERTACCEL_SEED": os.environ.get("BERTACCEL_SEED", "5"),
                          # cocotb rewrites the asserts of every module imported after it
                          # starts (default "*.py"): torch's 700 modules took 12 s.
                          "COCOTB_REWRITE_ASSERTION_FILES": "test_*.py"},
               log_file=tmp_path / "sim.log")
