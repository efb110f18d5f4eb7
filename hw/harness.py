"""A simulation harness: the core plus stream engines in gateware that read and write files.

The cocotb testbench never drives the core's streams itself (that would put Python on every
clock). The host writes a program and its data into files, the testbench pulses ``start`` and
awaits ``done``, and the host reads the output beats from a file. Stream sources and the sink
run in gateware, with optional idle cycles and backpressure drawn from an LFSR, so a run is
free-running and reproducible from its seed; their words come from and go to files as the run
goes (:mod:`bertaccel.hw.filestream`), so a program of any size runs in one piece, with the
cycles of the hardware running it from a stream that never runs dry.

Files, not memories, by measurement (8x8 harness, a 256^3 GEMM: 2,098 instruction words,
57,344 data beats, 8,192 output beats). Memories that hold a program must be filled before the
run: through a host port that is a Python call a word (about 20 us a word under Verilator, 1.4
s of the GEMM's 3.2 s), and Amaranth converts a memory's initialiser bit by bit (seconds a
Mbit: 29 s to convert an 8x8 harness with 3.5 Mbit of memories, 13 s without). Verilog
memories loaded with ``$readmemh`` would load as fast as a file is written, but their depth is
fixed when the simulator is built, so a larger program would still need rebuilding or runs in
pieces (each draining the pipeline, a few cycles the hardware does not spend); and a ring
buffer refilled by the testbench during the run needs Python to wake up and gateware to track
the fill levels. The files need neither: the host writes the GEMM's in a few ms, the
simulator reads them through its buffered file I/O, and there is no limit on a program's size.
"""

from amaranth import Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from .checker import PC_WIDTH
from .core import BertAccelCore
from .filestream import VERILOG, FileSink, FileSource
from .isa import INSTR_WIDTH
from .legal import FAULT_WIDTH
from .verilog import convert
from .watchdog import LIMIT_WIDTH, Wait, Watchdog

__all__ = ["SimHarness", "STREAM_FILES", "harness_verilog"]

#: The files of a run, relative to the simulator's working folder: instruction words
#: (``INSTR_WIDTH // 8`` bytes each, most significant first), data-in beats (``cfg.lanes``
#: bytes each, lane ``cfg.lanes - 1`` first) and output beats (one line of hex digits each,
#: ``cfg.acc_width // 4`` a lane, lane ``cfg.cols - 1`` first).
STREAM_FILES = {"instr": "bertaccel_instr.bin", "data": "bertaccel_data.bin",
                "out": "bertaccel_out.hex"}


class SimHarness(wiring.Component):
    """The core with an instruction source, a data-in source and a data-out sink.

    Parameters
    ----------
    cfg : AccelConfig
    source, sink : callable
        Make the streams' file ends from ``width`` and ``path`` (keywords):
        :class:`~bertaccel.hw.filestream.FileSource` and ``FileSink`` by default; an Amaranth
        simulation passes stand-ins with their ports (``verif/tb/harness.py``).

    Members
    -------
    n_instr, n_data, seed, src_idle, sink_stall : In
        Sampled while ``start`` is high. ``src_idle``/256 is the chance of an idle cycle on each
        source stream, ``sink_stall``/256 the chance of backpressure on the output stream.
    start : In(1)
        Reopens the :data:`STREAM_FILES` (the output file empty) and starts a run.
    done : Out(1)
        High once every instruction was consumed and the core went idle; stays high until the
        next ``start``. The output file holds every beat by then.
    cycles : Out(48)
        Cycles from ``start`` to ``done``.
    n_out, data_used : Out(32)
        Output beats written and data beats consumed.
    error, fault, fault_pc : Out
        The core's ``o_error``, ``o_fault`` and ``o_fault_pc``: whether an instruction failed
        a check, which (a :class:`~bertaccel.hw.legal.Fault`), and its index in the program
        (``start`` starts the core's count over).
    file_error : Out(1)
        A stream file could not be opened, or a source read past its file's end.
    watchdog : In(LIMIT_WIDTH)
        Sampled while ``start`` is high: cycles without progress that end the run
        (:class:`~bertaccel.hw.watchdog.Watchdog`; 0: never).
    stuck : Out(1)
        The watchdog ended the run (``done`` rose with it); until the next ``start``.
    wait : Out(Wait)
        What the core waited for in the last cycle before the watchdog fired.
    """

    #: The cycle in which instruction word 0 is first on offer: each source reads its file in
    #: cycle 0, a clocked read.
    FIRST_WORD = 1
    #: ``done`` rises the cycle after the core's last busy cycle, and ``cycles`` counts that
    #: edge too: a run takes its last busy cycle + DONE_CYCLES.
    DONE_CYCLES = 2

    def __init__(self, cfg, *, source=FileSource, sink=FileSink):
        self.cfg = cfg
        self._source, self._sink = source, sink
        self.data_width = cfg.lanes * cfg.in_width
        self.out_width = cfg.cols * cfg.acc_width
        super().__init__({
            "n_instr":    In(32),
            "n_data":     In(32),
            "seed":       In(32),
            "src_idle":   In(8),
            "sink_stall": In(8),
            "start":      In(1),
            "done":       Out(1),
            "cycles":     Out(48),
            "n_out":      Out(32),
            "data_used":  Out(32),
            "error":      Out(1),
            "fault":      Out(FAULT_WIDTH),
            "fault_pc":   Out(PC_WIDTH),
            "file_error": Out(1),
            "watchdog":   In(LIMIT_WIDTH),
            "stuck":      Out(1),
            "wait":       Out(Wait),
        })

    def _watchdog(self, m, core, running):
        """The watchdog: a stuck run ends, with what the core waited for; return it."""
        m.submodules.watchdog = dog = Watchdog()
        m.d.comb += [dog.start.eq(self.start), dog.limit.eq(self.watchdog),
                     dog.running.eq(running), dog.progress.eq(core.o_progress),
                     self.stuck.eq(dog.fired)]
        with m.If(~dog.fired):
            m.d.sync += self.wait.eq(core.o_wait)
        return dog

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = BertAccelCore(self.cfg)
        m.submodules.instr_file = instr_file = self._source(width=INSTR_WIDTH,
                                                            path=STREAM_FILES["instr"])
        m.submodules.data_file = data_file = self._source(width=self.data_width,
                                                          path=STREAM_FILES["data"])
        m.submodules.out_file = out_file = self._sink(width=self.out_width,
                                                      path=STREAM_FILES["out"])

        # -- run control ---------------------------------------------------------------------
        running = Signal()
        n_instr = Signal(32)
        n_data = Signal(32)
        src_idle = Signal(8)
        sink_stall = Signal(8)
        lfsr = Signal(32, init=1)
        # xorshift32: a full-period generator; its low bytes decide the stalls of this cycle.
        x1 = Signal(32)
        x2 = Signal(32)
        x3 = Signal(32)
        m.d.comb += [
            x1.eq(lfsr ^ (lfsr << 13)[:32]),
            x2.eq(x1 ^ (x1 >> 17)),
            x3.eq(x2 ^ (x2 << 5)[:32]),
        ]
        m.d.sync += lfsr.eq(x3)
        idle_instr = lfsr[0:8] < src_idle
        idle_data = lfsr[8:16] < src_idle
        stall_sink = lfsr[16:24] < sink_stall

        cycles = Signal(48)
        n_out = Signal(32)
        data_used = Signal(32)
        done = Signal()
        m.d.comb += [
            self.cycles.eq(cycles), self.n_out.eq(n_out), self.data_used.eq(data_used),
            self.done.eq(done), self.error.eq(core.o_error), self.fault.eq(core.o_fault),
            self.fault_pc.eq(core.o_fault_pc), core.i_start.eq(self.start),
            self.file_error.eq(instr_file.error | data_file.error | out_file.error),
        ]

        # -- sources: file -> stream, one word a cycle -----------------------------------------
        def source(file, stream, count, idle, name):
            ptr = Signal(32, name=f"{name}_ptr")
            valid = Signal(name=f"{name}_valid")
            m.d.comb += [
                stream.valid.eq(valid),
                stream.payload.eq(file.data),
                file.open.eq(self.start),
            ]
            # A beat on offer is held until taken (stream rules); idle cycles only fall between
            # beats, by not fetching the next one.
            with m.If(~valid | stream.ready):
                with m.If(running & (ptr < count) & ~idle):
                    m.d.comb += file.en.eq(1)
                    m.d.sync += [valid.eq(1), ptr.eq(ptr + 1)]
                with m.Else():
                    m.d.sync += valid.eq(0)
            with m.If(self.start):
                m.d.sync += [ptr.eq(0), valid.eq(0)]
            return ptr, valid

        instr_ptr, instr_valid = source(instr_file, core.i_instr, n_instr, idle_instr, "instr")
        _, _ = source(data_file, core.i_data, n_data, idle_data, "data")
        with m.If(core.i_data.valid & core.i_data.ready):
            m.d.sync += data_used.eq(data_used + 1)

        dog = self._watchdog(m, core, running)

        # -- sink: stream -> file --------------------------------------------------------------
        finish = running & ((instr_ptr == n_instr) & ~instr_valid & ~core.o_busy | dog.fired)
        m.d.comb += [
            core.o_data.ready.eq(running & ~stall_sink),
            out_file.open.eq(self.start),
            out_file.data.eq(core.o_data.payload),
            out_file.en.eq(core.o_data.valid & core.o_data.ready),
            # The beats are on file when done rises: the last was written at this edge or before.
            out_file.flush.eq(finish),
        ]
        with m.If(out_file.en):
            m.d.sync += n_out.eq(n_out + 1)

        with m.If(running):
            m.d.sync += cycles.eq(cycles + 1)
        with m.If(finish):
            m.d.sync += [running.eq(0), done.eq(1)]

        with m.If(self.start):
            m.d.sync += [
                running.eq(1), done.eq(0), cycles.eq(0), n_out.eq(0), data_used.eq(0),
                n_instr.eq(self.n_instr), n_data.eq(self.n_data),
                src_idle.eq(self.src_idle), sink_stall.eq(self.sink_stall),
                lfsr.eq(Mux(self.seed == 0, 1, self.seed)),  # xorshift needs a nonzero state
            ]
        return m


def harness_verilog(cfg, *, name="bertaccel_harness"):
    """The Verilog of :class:`SimHarness` for ``cfg`` as module ``name``: Amaranth's output
    (:func:`bertaccel.hw.verilog.convert`) followed by the file modules it instantiates
    (:data:`bertaccel.hw.filestream.VERILOG`)."""
    return convert(SimHarness(cfg), name=name) + "\n" + VERILOG
