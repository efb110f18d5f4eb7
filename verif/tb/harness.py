"""The simulation harness in Amaranth's own simulator, as a device.

:class:`AmaranthDevice` runs programs on :class:`~bertaccel.hw.harness.SimHarness` (the core
with its stream engines and their LFSR stalls: the gateware the Verilated device runs) with the
file ends swapped for :class:`WordSource` and :class:`WordSink`, which hold the words in the
simulation. It needs no Verilator build, so a test gets the RTL's cycles and outputs for short
programs in the quick tier::

    with AmaranthDevice(preset("2x2"), sink_stall=64) as device:
        result = device.run(program, x=x)

One simulation serves every run of a device, so the memories keep what each program leaves, as
the hardware's (and the other devices') do. The simulation advances only inside :meth:`run`.
"""

import numpy as np
import torch
from amaranth import Module, Signal
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from bertaccel.hw.harness import STREAM_FILES, SimHarness
from bertaccel.sw.devices.base import Device, DeviceError

__all__ = ["AmaranthDevice", "WordSource", "WordSink"]


class WordSource(wiring.Component):
    """:class:`~bertaccel.hw.filestream.FileSource`'s ports and timing, its words in a memory
    of ``depth`` that the testbench fills (``words``): ``open`` starts from word 0, each ``en``
    puts the next word on ``data`` at the clock edge, a read past the memory sets ``error``."""

    def __init__(self, *, width, depth):
        self.words = memory.Memory(shape=width, depth=depth, init=[])
        super().__init__({"open": In(1), "en": In(1), "data": Out(width), "error": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.submodules.words = self.words
        port = self.words.read_port(domain="comb")
        depth = self.words.depth
        ptr = Signal(range(depth + 1))
        m.d.comb += port.addr.eq(ptr)
        with m.If(self.open):
            m.d.sync += [ptr.eq(0), self.error.eq(0)]
        with m.Elif(self.en):
            with m.If(ptr < depth):
                m.d.sync += [self.data.eq(port.data), ptr.eq(ptr + 1)]
            with m.Else():
                m.d.sync += [self.data.eq(0), self.error.eq(1)]
        return m


class WordSink(wiring.Component):
    """:class:`~bertaccel.hw.filestream.FileSink`'s ports; the testbench reads ``data`` at
    every edge where ``en`` is high."""

    def __init__(self, *, width):
        super().__init__({"open": In(1), "en": In(1), "data": In(width), "flush": In(1),
                          "error": Out(1)})

    def elaborate(self, platform):
        return Module()


class AmaranthDevice(Device):
    """The harness of ``cfg`` in the Amaranth simulator.

    Parameters
    ----------
    cfg : AccelConfig
    seed, src_idle, sink_stall : int
        As the harness takes them: the LFSR's seed, the chance in 256 of an idle cycle on each
        source and of backpressure on the sink.
    depth : int
        Instruction words and data beats a program may have, at most.
    max_cycles : int
        A run that has not raised ``done`` by then fails with :class:`DeviceError`.
    """

    def __init__(self, cfg, *, seed=0, src_idle=0, sink_stall=0, depth=2048, max_cycles=20_000):
        super().__init__(cfg)
        self.seed, self.src_idle, self.sink_stall = seed, src_idle, sink_stall
        self.depth, self.max_cycles = depth, max_cycles
        self._sim = self._job = None

    def _start(self):
        ends = {}

        def source(*, width, path):
            ends[path] = WordSource(width=width, depth=self.depth)
            return ends[path]

        def sink(*, width, path):
            ends[path] = WordSink(width=width)
            return ends[path]

        self._harness = harness = SimHarness(self.cfg, source=source, sink=sink)
        sim = Simulator(harness)
        sim.add_clock(1e-6)
        sim.add_testbench(self._serve(harness, ends[STREAM_FILES["instr"]],
                                      ends[STREAM_FILES["data"]]))
        sim.add_process(self._collect(ends[STREAM_FILES["out"]]))
        self._sim = sim

    def _execute(self, program, data_beats):
        words = program.words()
        beats = [int.from_bytes(row.tobytes(), "little")
                 for row in data_beats.contiguous().numpy().view(np.uint8)]
        if max(len(words), len(beats)) > self.depth:
            raise DeviceError(f"{len(words)} instruction words and {len(beats)} data beats: "
                              f"more than this device's depth of {self.depth}")
        if self._sim is None:
            self._start()
        self._job = job = {"instr": words, "data": beats, "out": None}
        while "cycles" not in job and "error" not in job:
            self._sim.advance()
        self._job = None
        if "error" in job:
            raise DeviceError(job["error"])
        return self._out_beats(job["out"]), {"cycles": job["cycles"]}

    def _serve(self, harness, instr, data):
        async def serve(ctx):
            while True:
                job = self._job
                if job is None or job["out"] is not None:
                    await ctx.tick()
                    continue
                for source, words in ((instr, job["instr"]), (data, job["data"])):
                    for number, word in enumerate(words):
                        ctx.set(source.words.data[number], word)
                job["out"] = []
                await self._run(ctx, harness, job)
        return serve

    async def _run(self, ctx, harness, job):
        for port, value in ((harness.n_instr, len(job["instr"])),
                            (harness.n_data, len(job["data"])), (harness.seed, self.seed),
                            (harness.src_idle, self.src_idle),
                            (harness.sink_stall, self.sink_stall), (harness.start, 1)):
            ctx.set(port, value)
        await ctx.tick()
        ctx.set(harness.start, 0)
        for _ in range(self.max_cycles):
            if ctx.get(harness.done):
                break
            await ctx.tick()
        else:
            job["error"] = f"no done within {self.max_cycles} cycles"
            return
        if ctx.get(harness.error) or ctx.get(harness.file_error):
            job["error"] = "the harness flags an error (an illegal instruction or a stream)"
        job["cycles"] = ctx.get(harness.cycles)

    def _collect(self, sink):
        async def collect(ctx):
            async for _clk, _rst, en, word in ctx.tick().sample(sink.en, sink.data):
                if en and self._job is not None:
                    self._job["out"].append(word)
        return collect

    def _out_beats(self, words):
        cfg = self.cfg
        width = cfg.acc_width
        mask, sign = (1 << width) - 1, 1 << (width - 1)
        lanes = [[((word >> (c * width)) & mask ^ sign) - sign for c in range(cfg.cols)]
                 for word in words]
        return torch.tensor(lanes, dtype=torch.int64).reshape(len(words), cfg.cols) \
            .to(torch.int32)
