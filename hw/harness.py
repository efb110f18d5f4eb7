"""A simulation harness: the core plus host memories and stream engines in gateware.

The cocotb testbench never drives the core's streams itself (that would put Python on every
clock). It writes a program and its data into the harness memories, pulses ``start`` and awaits
``done``. Stream sources and the sink run in gateware, with optional idle cycles and
backpressure drawn from an LFSR, so a run is free-running and reproducible from its seed.
"""

from amaranth import Module, Mux, Signal, unsigned
from amaranth.lib import memory, wiring
from amaranth.lib.wiring import In, Out

from .core import BertAccelCore
from .isa import INSTR_WIDTH, Load, Store

__all__ = ["SimHarness", "HostSel", "harness_chunks"]


class HostSel:
    """Values of ``h_sel``."""
    INSTR = 0
    DATA_IN = 1
    DATA_OUT = 2


def _is_pow2(value):
    return isinstance(value, int) and value > 0 and value & (value - 1) == 0


class SimHarness(wiring.Component):
    """The core with an instruction memory, a data-in memory and a data-out memory.

    Parameters
    ----------
    cfg : AccelConfig
    instr_depth, data_depth, out_depth : int, optional
        Memory depths, powers of two; :meth:`default_depths` by default. Data-in words are ``cfg.lanes`` x 8 bits, data-out words
        ``cfg.cols`` x 32 bits, lane *i* in the *i*-th lowest bits.

    Members
    -------
    h_sel, h_addr, h_wdata, h_we : In
        Host port: a word is written at the clock edge where ``h_we`` is high.
    h_rdata : Out
        The word at (``h_sel``, ``h_addr``) one clock edge after they were set.
    n_instr, n_data, seed, src_idle, sink_stall : In
        Sampled while ``start`` is high. ``src_idle``/256 is the chance of an idle cycle on each
        source stream, ``sink_stall``/256 the chance of backpressure on the output stream.
    start : In(1)
    done : Out(1)
        High once every instruction was consumed and the core went idle; stays high until the
        next ``start``.
    cycles : Out(48)
        Cycles from ``start`` to ``done``.
    n_out, data_used : Out(32)
        Output beats written (from address 0) and data beats consumed.
    error : Out(1)
        The core's illegal-instruction flag.
    """

    def __init__(self, cfg, *, instr_depth=None, data_depth=None, out_depth=None):
        default = self.default_depths(cfg)
        instr_depth = default[0] if instr_depth is None else instr_depth
        data_depth = default[1] if data_depth is None else data_depth
        out_depth = default[2] if out_depth is None else out_depth
        for name, depth in (("instr_depth", instr_depth), ("data_depth", data_depth),
                            ("out_depth", out_depth)):
            if not _is_pow2(depth):
                raise ValueError(f"{name} must be a power of two, not {depth!r}")
        self.cfg = cfg
        self.instr_depth = instr_depth
        self.data_depth = data_depth
        self.out_depth = out_depth
        self.data_width = cfg.lanes * cfg.in_width
        self.out_width = cfg.cols * cfg.acc_width
        self.host_width = max(INSTR_WIDTH, self.data_width, self.out_width)
        super().__init__({
            "h_sel":      In(2),
            "h_addr":     In(32),
            "h_wdata":    In(self.host_width),
            "h_we":       In(1),
            "h_rdata":    Out(self.host_width),
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
        })

    @staticmethod
    def default_depths(cfg):
        """Default ``(instr_depth, data_depth, out_depth)`` for ``cfg``.

        Amaranth spends about 3 s per Mbit of memory converting a design to Verilog (it expands
        the zero initialiser bit by bit), so the depths come from a bit budget rather than a word
        count: 4096 instructions, 1 Mbit of data-in and 2 Mbit of data-out words. The RTL device
        runs larger programs in chunks.
        """
        data_bits = cfg.lanes * cfg.in_width
        out_bits = cfg.cols * cfg.acc_width
        return 1 << 12, max(1 << 10, (1 << 20) // data_bits), max(1 << 9, (1 << 21) // out_bits)

    def elaborate(self, platform):
        m = Module()
        m.submodules.core = core = BertAccelCore(self.cfg)

        m.submodules.instr_mem = instr_mem = memory.Memory(
            shape=unsigned(INSTR_WIDTH), depth=self.instr_depth, init=[])
        m.submodules.data_mem = data_mem = memory.Memory(
            shape=unsigned(self.data_width), depth=self.data_depth, init=[])
        m.submodules.out_mem = out_mem = memory.Memory(
            shape=unsigned(self.out_width), depth=self.out_depth, init=[])

        # -- host port ---------------------------------------------------------------------
        sel_d = Signal(2)
        m.d.sync += sel_d.eq(self.h_sel)
        host_rd = {}
        for sel, mem in ((HostSel.INSTR, instr_mem), (HostSel.DATA_IN, data_mem),
                         (HostSel.DATA_OUT, out_mem)):
            rd = mem.read_port()
            m.d.comb += rd.addr.eq(self.h_addr)
            host_rd[sel] = rd
        with m.Switch(sel_d):
            for sel, rd in host_rd.items():
                with m.Case(sel):
                    m.d.comb += self.h_rdata.eq(rd.data)
        for sel, mem in ((HostSel.INSTR, instr_mem), (HostSel.DATA_IN, data_mem)):
            wr = mem.write_port()
            m.d.comb += [
                wr.addr.eq(self.h_addr),
                wr.data.eq(self.h_wdata),
                wr.en.eq(self.h_we & (self.h_sel == sel)),
            ]

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
            self.done.eq(done), self.error.eq(core.o_error),
        ]

        # -- sources: memory -> stream, one word a cycle ---------------------------------------
        def source(mem, stream, count, idle, name):
            rd = mem.read_port()
            ptr = Signal(32, name=f"{name}_ptr")
            valid = Signal(name=f"{name}_valid")
            m.d.comb += [
                stream.valid.eq(valid),
                stream.payload.eq(rd.data),
                rd.addr.eq(ptr),
                rd.en.eq(0),
            ]
            # A beat on offer is held until taken (stream rules); idle cycles only fall between
            # beats, by not fetching the next one.
            with m.If(~valid | stream.ready):
                with m.If(running & (ptr < count) & ~idle):
                    m.d.comb += rd.en.eq(1)
                    m.d.sync += [valid.eq(1), ptr.eq(ptr + 1)]
                with m.Else():
                    m.d.sync += valid.eq(0)
            with m.If(self.start):
                m.d.sync += [ptr.eq(0), valid.eq(0)]
            return ptr, valid

        instr_ptr, instr_valid = source(instr_mem, core.i_instr, n_instr, idle_instr, "instr")
        _, _ = source(data_mem, core.i_data, n_data, idle_data, "data")
        with m.If(core.i_data.valid & core.i_data.ready):
            m.d.sync += data_used.eq(data_used + 1)

        # -- sink: stream -> memory ------------------------------------------------------------
        out_wr = out_mem.write_port()
        m.d.comb += [
            core.o_data.ready.eq(running & ~stall_sink),
            out_wr.addr.eq(n_out),
            out_wr.data.eq(core.o_data.payload),
            out_wr.en.eq(core.o_data.valid & core.o_data.ready),
        ]
        with m.If(out_wr.en):
            m.d.sync += n_out.eq(n_out + 1)

        with m.If(running):
            m.d.sync += cycles.eq(cycles + 1)
            with m.If((instr_ptr == n_instr) & ~instr_valid & ~core.o_busy):
                m.d.sync += [running.eq(0), done.eq(1)]

        with m.If(self.start):
            m.d.sync += [
                running.eq(1), done.eq(0), cycles.eq(0), n_out.eq(0), data_used.eq(0),
                n_instr.eq(self.n_instr), n_data.eq(self.n_data),
                src_idle.eq(self.src_idle), sink_stall.eq(self.sink_stall),
                lfsr.eq(Mux(self.seed == 0, 1, self.seed)),  # xorshift needs a nonzero state
            ]
        return m


def harness_chunks(instrs, depths):
    """Split ``instrs`` into runs that fit harness memories of ``depths`` (``(instr_depth,
    data_depth, out_depth)``): ``[(first, end, beats_in, beats_out)]``. The RTL device runs a
    program larger than its harness this way, and the cycle model counts the same chunks.

    Raises
    ------
    ValueError
        If one instruction moves more beats than a memory holds.
    """
    instr_depth, data_depth, out_depth = depths
    chunks = []
    first, beats_in, beats_out = 0, 0, 0
    for number, instr in enumerate(instrs):
        add_in = instr.count if isinstance(instr, Load) else 0
        add_out = instr.count if isinstance(instr, Store) else 0
        if add_in > data_depth or add_out > out_depth:
            raise ValueError(
                f"instruction {number} moves {max(add_in, add_out)} beats, more than the RTL "
                f"harness memories hold (data-in {data_depth}, data-out {out_depth} words); "
                f"build the device with larger data_depth/out_depth")
        if (number - first >= instr_depth or beats_in + add_in > data_depth
                or beats_out + add_out > out_depth):
            chunks.append((first, number, beats_in, beats_out))
            first, beats_in, beats_out = number, 0, 0
        beats_in += add_in
        beats_out += add_out
    chunks.append((first, len(instrs), beats_in, beats_out))
    return chunks
