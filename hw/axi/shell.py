"""The AXI4 shell: the core behind an AXI4-Lite register slave and an AXI4 DMA master.

This is what an FPGA build instantiates. Software writes a program and its input data into
memory, sets the registers of :mod:`bertaccel.hw.axi.csr` (addresses and lengths) and writes
``CTRL.START``; the shell fetches the instructions and the input beats over its AXI4 master,
streams them into the core, writes every output beat back to memory, and sets ``STATUS.DONE``
once the last write has its response. The layout of that memory is in ``docs/axi.md`` and is
built by :mod:`bertaccel.sw.devices.axi`.

Blocks, from the bus inwards:

* :class:`CsrBank`: the AXI4-Lite slave, made from the register table :data:`csr.REGISTERS`;
* :class:`ReadEngine` (twice: instructions with ARID 0, input data with ARID 1): INCR bursts
  from a base address, a FIFO in bus words, a gearbox to the beat width, and a limiter that
  drops the padding beats of the last word; a simple round-robin arbiter shares the AR channel
  and RID routes the R channel;
* :class:`WriteEngine`: a gearbox from the output beat width to bus words (with byte strobes
  for a partial last word), a FIFO, and INCR bursts, each issued only once its data is in the
  FIFO;
* the core, :class:`~bertaccel.hw.core.BertAccelCore`, unchanged.

The shell does not trust the program or the host's lengths. At a start it checks that the
program, the data and the output area lie inside the window ``[WIN_BASE, WIN_LIMIT]`` before
any request is issued; it takes at most ``OUT_LEN`` results from the core, so no write leaves
the output area; a :class:`~bertaccel.hw.watchdog.Watchdog` ends a run that stops making
progress. A region outside the window, a result past ``OUT_LEN``, an error response on any
read or write, or the watchdog stops the run (``STATUS.FAULT``, ``FAULT.CODE``: no new read
burst, no further result taken) and ends it once the bus is quiet.

(:mod:`.dma` says why nothing can deadlock.)
"""

from amaranth import Cat, Const, Module, Mux, ResetInserter, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from ..core import BertAccelCore
from ..watchdog import Watchdog
from . import csr
from .csr_bank import CsrBank
from .dma import ReadEngine, WriteEngine, request_layout, words_of
from .signature import CACHE, MAX_BURST, AXI4LiteSignature, AXI4Signature, Burst, log2

__all__ = ["AxiShell"]


# -- the shell ------------------------------------------------------------------------------------

def _flat(prefix, signature, *, flip=False):
    """Members of ``signature`` named ``<prefix>_<name>``, for flat top-level ports."""
    return {f"{prefix}_{name}": member.flip() if flip else member
            for name, member in signature.members.items()}


class AxiShell(wiring.Component):
    """The core with an AXI4-Lite register slave and an AXI4 master: an FPGA top level.

    Ports are flat and named the way vendor tools and cocotbext-axi find AXI interfaces by
    prefix: ``s_axil_awaddr`` ... for the slave, ``m_axi_awaddr`` ... for the master.

    Parameters
    ----------
    cfg : AccelConfig
        The build; ``cfg.axi_data_width`` and ``cfg.axi_addr_width`` size the master.
    max_burst : int
        Longest AXI burst in bus words (power of two, at most 256).
    fifo_depth : int, optional
        Words of buffering in each DMA engine; ``2 * max_burst`` by default.

    Members
    -------
    s_axil_* : the AXI4-Lite slave (see :class:`AXI4LiteSignature`, flipped)
    m_axi_* : the AXI4 master (see :class:`AXI4Signature`; ID width 1)
    irq : Out(1)
        High from the end of a run to the next ``CTRL.START`` or ``CTRL.SOFT_RESET`` where
        ``IRQ_ENABLE`` enables its cause in ``IRQ_STATUS`` (ended without or with a fault).
    """

    def __init__(self, cfg, *, max_burst=MAX_BURST, fifo_depth=None):
        self.cfg = cfg
        self.max_burst = max_burst
        self.fifo_depth = fifo_depth
        self.axil_signature = AXI4LiteSignature(addr_width=csr.ADDR_WIDTH,
                                                data_width=csr.DATA_WIDTH)
        self.axi_signature = AXI4Signature(addr_width=cfg.axi_addr_width,
                                           data_width=cfg.axi_data_width, id_width=1)
        super().__init__({
            **_flat("s_axil", self.axil_signature, flip=True),
            **_flat("m_axi", self.axi_signature),
            "irq": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        bank = self._registers(m)
        # The core and the engines, all reset by CTRL.SOFT_RESET.
        soft_reset = Signal()
        core, instr_rd, data_rd, out_wr = self._blocks(m, soft_reset)
        run = _Run()
        start = Signal()
        m.d.comb += start.eq(bank.port("CTRL", "START") & ~bank.port("CTRL", "SOFT_RESET")
                             & ~run.running & ~run.resetting)
        with m.If(bank.port("CTRL", "START") & (run.running | run.resetting)):
            m.d.sync += run.start_ignored.eq(1)
        m.d.comb += core.i_start.eq(start)     # the core's checker reads a new program
        for dma, base in ((instr_rd, "PROG_ADDR"), (data_rd, "DATA_ADDR"), (out_wr, "OUT_ADDR")):
            m.d.comb += [
                dma.start.eq(start),
                dma.base.eq(Cat(bank.port(f"{base}_LO"), bank.port(f"{base}_HI"))),
            ]
        m.d.comb += [
            instr_rd.count.eq(bank.port("PROG_LEN")),
            data_rd.count.eq(bank.port("DATA_LEN")),
        ]
        # The order matters where two of these set one register: the later wins (a start
        # clears the counts, a soft reset the bus error).
        self._streams(m, core, instr_rd, data_rd, out_wr, run)
        self._read_channels(m, instr_rd, data_rd)
        self._write_channels(m, out_wr)
        self._windows(m, bank, run, start)
        self._watchdog(m, bank, core, (instr_rd, data_rd, out_wr), run, start, soft_reset)
        self._faults(m, core, (instr_rd, data_rd, out_wr), run)
        self._run_control(m, bank, core, (instr_rd, data_rd, out_wr), run, start, soft_reset)
        self._status(m, bank, core, run)
        return m

    def _axi(self, name):
        """The master's port ``m_axi_<name>``."""
        return getattr(self, f"m_axi_{name}")

    def _registers(self, m):
        """The register bank, on the AXI4-Lite slave ports."""
        m.submodules.csr = bank = CsrBank(self.cfg)
        for name, member in self.axil_signature.members.items():
            outer, inner = getattr(self, f"s_axil_{name}"), getattr(bank.bus, name)
            m.d.comb += inner.eq(outer) if member.flow == Out else outer.eq(inner)
        return bank

    def _blocks(self, m, soft_reset):
        """``(core, instr_rd, data_rd, out_wr)``: the core and the DMA engines, each reset by
        ``soft_reset``."""
        cfg = self.cfg
        engine = {"addr_width": cfg.axi_addr_width, "bus_width": cfg.axi_data_width,
                  "max_burst": self.max_burst, "fifo_depth": self.fifo_depth}
        core = BertAccelCore(cfg)
        # Beats lie in memory at their width rounded up to a power of two bytes (csr.py); the
        # core's payloads are their low bits.
        instr_rd = ReadEngine(beat_width=8 * csr.INSTR_BYTES, **engine)
        data_rd = ReadEngine(beat_width=8 * csr.data_beat_bytes(cfg), **engine)
        out_wr = WriteEngine(beat_width=8 * csr.out_beat_bytes(cfg), **engine)
        m.submodules.core = ResetInserter(soft_reset)(core)
        m.submodules.instr_dma = ResetInserter(soft_reset)(instr_rd)
        m.submodules.data_dma = ResetInserter(soft_reset)(data_rd)
        m.submodules.out_dma = ResetInserter(soft_reset)(out_wr)
        return core, instr_rd, data_rd, out_wr

    def _streams(self, m, core, instr_rd, data_rd, out_wr, run):
        """The streams into and out of the core, and their counts."""
        taking, feeding = Signal(), Signal()
        m.d.comb += [
            # After a fault of the shell the core is given nothing more. A word answered with
            # an error enters its engine's FIFO in the cycle it arrives and leaves it no sooner
            # than the next, when ``halted`` is set: the core never sees it.
            feeding.eq(run.running & ~run.halted),
            taking.eq(feeding & (run.out_count != run.out_len)),
        ]
        m.d.comb += [
            core.i_instr.valid.eq(instr_rd.o.valid & feeding),
            core.i_instr.payload.eq(instr_rd.o.payload),
            instr_rd.o.ready.eq(core.i_instr.ready & feeding),
            core.i_data.valid.eq(data_rd.o.valid & feeding),
            core.i_data.payload.eq(data_rd.o.payload),
            data_rd.o.ready.eq(core.i_data.ready & feeding),
            # Results are taken only during a run that has not faulted, and only as many as
            # OUT_LEN: after an error the core may still hold some.
            out_wr.i.valid.eq(core.o_data.valid & taking),
            out_wr.i.payload.eq(core.o_data.payload),
            core.o_data.ready.eq(out_wr.i.ready & taking),
        ]
        with m.If(core.i_instr.valid & core.i_instr.ready):
            m.d.sync += run.prog_count.eq(run.prog_count + 1)
        with m.If(core.i_data.valid & core.i_data.ready):
            m.d.sync += run.data_count.eq(run.data_count + 1)
        with m.If(core.o_data.valid & core.o_data.ready):
            m.d.sync += run.out_count.eq(run.out_count + 1)

    def _read_channels(self, m, instr_rd, data_rd):
        """AR: round robin between the two read engines; R: routed by RID."""
        axi = self._axi
        readers = (instr_rd, data_rd)  # index = ARID
        grant = Signal()
        ar = Signal(request_layout(self.cfg.axi_addr_width))
        m.d.comb += [
            axi("arvalid").eq(Mux(grant, data_rd.ar.valid, instr_rd.ar.valid)),
            ar.eq(Mux(grant, data_rd.ar.payload, instr_rd.ar.payload)),
            axi("arid").eq(grant),
            axi("araddr").eq(ar.addr),
            axi("arlen").eq(ar.len),
        ]
        for index, reader in enumerate(readers):
            m.d.comb += reader.ar.ready.eq(axi("arready") & (grant == index))
        # A request on offer is held until taken (AXI rule); the grant moves only between them.
        other_wants = Mux(grant, instr_rd.ar.valid, data_rd.ar.valid)
        with m.If((~axi("arvalid") | axi("arready")) & other_wants):
            m.d.sync += grant.eq(~grant)
        for index, reader in enumerate(readers):
            m.d.comb += [
                reader.r.valid.eq(axi("rvalid") & (axi("rid") == index)),
                reader.r.payload.data.eq(axi("rdata")),
            ]
        m.d.comb += axi("rready").eq(Mux(axi("rid"), data_rd.r.ready, instr_rd.r.ready))
        self._burst_fields(m, "ar")

    def _write_channels(self, m, out_wr):
        """AW, W, B: the write engine's."""
        axi = self._axi
        m.d.comb += [
            axi("awvalid").eq(out_wr.aw.valid),
            axi("awid").eq(0),
            axi("awaddr").eq(out_wr.aw.payload.addr),
            axi("awlen").eq(out_wr.aw.payload.len),
            out_wr.aw.ready.eq(axi("awready")),
            axi("wvalid").eq(out_wr.w.valid),
            axi("wdata").eq(out_wr.w.payload.data),
            axi("wstrb").eq(out_wr.w.payload.strb),
            axi("wlast").eq(out_wr.w.payload.last),
            out_wr.w.ready.eq(axi("wready")),
            out_wr.b.valid.eq(axi("bvalid")),
            out_wr.b.payload.resp.eq(axi("bresp")),
            axi("bready").eq(out_wr.b.ready),
        ]
        self._burst_fields(m, "aw")

    def _burst_fields(self, m, ch):
        """The constant fields of every request on channel ``ch`` (``"ar"`` or ``"aw"``)."""
        axi = self._axi
        m.d.comb += [
            axi(f"{ch}size").eq(log2(self.cfg.axi_data_width // 8)),
            axi(f"{ch}burst").eq(Burst.INCR),
            axi(f"{ch}lock").eq(0),
            axi(f"{ch}cache").eq(CACHE),
            axi(f"{ch}prot").eq(0),
            axi(f"{ch}qos").eq(0),
        ]

    def _regions(self, bank):
        """``(prefix, count, beat width)`` of the program, the input data and the output area,
        as the registers give them now."""
        return (("PROG", bank.port("PROG_LEN"), 8 * csr.INSTR_BYTES),
                ("DATA", bank.port("DATA_LEN"), 8 * csr.data_beat_bytes(self.cfg)),
                ("OUT", bank.port("OUT_LEN"), 8 * csr.out_beat_bytes(self.cfg)))

    def _windows(self, m, bank, run, start):
        """At a start, check that each region lies inside ``[WIN_BASE, WIN_LIMIT]``: its whole
        words, the sums registered in the cycle of the start and compared in the next, in which
        the engines issue nothing. ``run.window`` is the first region outside (its
        ``FAULT.CODE``) in that cycle, 0 otherwise; ``run.window_addr`` its first word."""
        cfg = self.cfg
        aw, bus_width = cfg.axi_addr_width, cfg.axi_data_width
        shift = log2(bus_width // 8)
        win_base = Cat(bank.port("WIN_BASE_LO"), bank.port("WIN_BASE_HI"))[:aw]
        win_limit = Cat(bank.port("WIN_LIMIT_LO"), bank.port("WIN_LIMIT_HI"))[:aw]
        checking = Signal()
        m.d.sync += checking.eq(start)
        m.d.comb += run.checking.eq(checking)
        verdicts = []
        for prefix, count, beat_width in self._regions(bank):
            base = Cat(bank.port(f"{prefix}_ADDR_LO"), bank.port(f"{prefix}_ADDR_HI"))
            first = Signal(aw, name=f"{prefix.lower()}_first")
            # The last byte, wide enough that a region past the address space is not wrapped.
            last = Signal(aw + 40, name=f"{prefix.lower()}_last")
            used = Signal(name=f"{prefix.lower()}_used")
            words = words_of(count, beat_width=beat_width, bus_width=bus_width)
            with m.If(start):
                m.d.sync += [first.eq(Cat(Const(0, shift), base[shift:aw])),
                             last.eq(Cat(Const(0, shift), base[shift:aw])
                                     + (words << shift) - 1),
                             used.eq(count != 0)]
            outside = used & ((first < win_base) | (last > win_limit))
            verdicts.append((outside, csr.FAULT[csr.WINDOW_FAULTS[prefix]], first))
        with m.If(checking):
            for outside, code, first in reversed(verdicts):   # the first region wins
                with m.If(outside):
                    m.d.comb += [run.window.eq(code), run.window_addr.eq(first)]

    def _watchdog(self, m, bank, core, dmas, run, start, soft_reset):
        """The watchdog over the core's and the bus's progress; ``run.stall`` what they waited
        for when it fired (the ``STALL`` fields)."""
        instr_rd, data_rd, out_wr = dmas
        axi = self._axi
        m.submodules.watchdog = dog = ResetInserter(soft_reset)(Watchdog())
        bus_moved = Cat(axi(f"{ch}valid") & axi(f"{ch}ready")
                        for ch in ("ar", "r", "aw", "w", "b")).any()
        m.d.comb += [dog.start.eq(start), dog.limit.eq(bank.port("WATCHDOG")),
                     dog.running.eq(run.running), dog.progress.eq(core.o_progress | bus_moved),
                     run.stuck.eq(dog.fired)]
        now = Signal.like(run.stall)
        m.d.comb += [now[:len(core.o_wait.as_value())].eq(core.o_wait),
                     now[8].eq(~instr_rd.idle | ~data_rd.idle), now[9].eq(~out_wr.quiet)]
        with m.If(~dog.fired):   # what it waited for in the last cycle before it fired
            m.d.sync += run.stall.eq(now)

    def _faults(self, m, core, dmas, run):
        """``run.bus_error`` (an error response on R or B) and the first fault of the run:
        ``run.fault``, ``run.fault_resp``, ``run.fault_addr`` (the region's first word for a
        window fault, the word or burst answered for a bus fault), and ``run.halted`` for a
        fault of the shell."""
        instr_rd, data_rd, out_wr = dmas
        axi = self._axi
        r_error = axi("rvalid") & axi("rready") & axi("rresp")[1]
        b_error = axi("bvalid") & axi("bready") & axi("bresp")[1]
        overrun = core.o_data.valid & run.running & ~run.halted & (run.out_count == run.out_len)
        with m.If(r_error | b_error):
            m.d.sync += run.bus_error.eq(1)
        code = csr.FAULT
        # The first fault is kept; of two in one cycle, the first listed here.
        with m.If(run.fault == code["NONE"]):
            with m.If(run.window != 0):
                m.d.sync += [run.fault.eq(run.window), run.fault_addr.eq(run.window_addr),
                             run.halted.eq(1)]
            with m.Elif(r_error):
                m.d.sync += [run.fault.eq(Mux(axi("rid"), code["DATA_READ"], code["PROG_READ"])),
                             run.fault_resp.eq(axi("rresp")),
                             run.fault_addr.eq(Mux(axi("rid"), data_rd.at, instr_rd.at)),
                             run.halted.eq(1)]
            with m.Elif(b_error):
                m.d.sync += [run.fault.eq(code["WRITE"]), run.fault_resp.eq(axi("bresp")),
                             run.fault_addr.eq(out_wr.at), run.halted.eq(1)]
            with m.Elif(overrun):
                m.d.sync += [run.fault.eq(code["OUT_OVERRUN"]), run.halted.eq(1)]
            with m.Elif(core.o_error):
                m.d.sync += run.fault.eq(code["ILLEGAL_INSTRUCTION"])
            with m.Elif(run.stuck):
                m.d.sync += [run.fault.eq(code["WATCHDOG"]), run.halted.eq(1)]
        # A later fault halts the shell too; a window fault even in a run started while an
        # earlier fault is still recorded (no soft reset between), so that no region outside
        # the window is ever read or written.
        with m.Elif(r_error | b_error | overrun | run.stuck | (run.window != 0)):
            m.d.sync += run.halted.eq(1)

    def _run_control(self, m, bank, core, dmas, run, start, soft_reset):
        """Start a run, end it, and the soft reset."""
        instr_rd, data_rd, out_wr = dmas
        # The run ends when the core has taken every instruction and gone idle (or flagged an
        # error, after which it drops instructions and may never go idle), nothing is in flight
        # on the bus and every result has its write response.
        finishing = Signal()
        m.d.comb += [
            finishing.eq(run.running & (run.halted | (run.prog_count == run.prog_len)
                                        & (~core.o_busy | core.o_error))),
            out_wr.flush.eq(finishing),
            # Outside a run too: a run that a fault ended leaves words unread.
            instr_rd.stop.eq(~run.running | finishing | run.resetting | run.checking),
            data_rd.stop.eq(~run.running | finishing | run.resetting | run.checking),
            out_wr.stop.eq(run.resetting | run.checking),
        ]
        with m.If(run.running):
            m.d.sync += run.cycles.eq(run.cycles + 1)
            with m.If(finishing & instr_rd.idle & data_rd.idle & out_wr.idle):
                m.d.sync += [run.running.eq(0), run.done.eq(1)]
        with m.If(start):
            m.d.sync += [
                run.running.eq(1), run.done.eq(0), run.cycles.eq(0),
                run.prog_len.eq(bank.port("PROG_LEN")), run.out_len.eq(bank.port("OUT_LEN")),
                run.prog_count.eq(0), run.data_count.eq(0), run.out_count.eq(0),
                run.start_ignored.eq(0),
            ]

        # A soft reset waits until the bus is quiet (no request may be cut short), then resets
        # the core and the engines in one cycle.
        with m.If(bank.port("CTRL", "SOFT_RESET")):
            m.d.sync += run.resetting.eq(1)
        m.d.comb += soft_reset.eq(run.resetting & instr_rd.idle & data_rd.idle & out_wr.quiet)
        with m.If(soft_reset):
            m.d.sync += [run.resetting.eq(0), run.running.eq(0), run.done.eq(0),
                         run.bus_error.eq(0), run.fault.eq(0), run.fault_resp.eq(0),
                         run.fault_addr.eq(0), run.halted.eq(0), run.start_ignored.eq(0)]

    def _status(self, m, bank, core, run):
        """The read-only registers, and ``irq``."""
        m.d.comb += [
            bank.port("STATUS", "BUSY").eq(run.running | run.resetting),
            bank.port("STATUS", "DONE").eq(run.done),
            bank.port("STATUS", "ERROR").eq(core.o_error),
            bank.port("STATUS", "BUS_ERROR").eq(run.bus_error),
            bank.port("STATUS", "CORE_BUSY").eq(core.o_busy),
            bank.port("STATUS", "FAULT").eq(run.halted),
            bank.port("FAULT", "CODE").eq(run.fault),
            bank.port("FAULT", "RESP").eq(run.fault_resp),
            bank.port("FAULT", "CHECK").eq(core.o_fault),
            bank.port("FAULT_PC").eq(core.o_fault_pc),
            bank.port("FAULT_ADDR_LO").eq(run.fault_addr[:32]),
            bank.port("FAULT_ADDR_HI").eq(run.fault_addr[32:]),
            bank.port("STATUS", "START_IGNORED").eq(run.start_ignored),
            bank.port("OUT_COUNT").eq(run.out_count),
            bank.port("CYCLES_LO").eq(run.cycles[:32]),
            bank.port("CYCLES_HI").eq(run.cycles[32:]),
            bank.port("PROG_COUNT").eq(run.prog_count),
            bank.port("DATA_COUNT").eq(run.data_count),
        ]
        stall = csr.register("STALL")
        for field in stall.fields:
            m.d.comb += bank.port("STALL", field.name).eq(run.stuck & run.stall[field.lsb])
        ended = {"DONE": run.done & (run.fault == csr.FAULT["NONE"]),
                 "FAULT": run.done & (run.fault != csr.FAULT["NONE"])}
        for cause, value in ended.items():
            m.d.comb += bank.port("IRQ_STATUS", cause).eq(value)
        m.d.comb += self.irq.eq(Cat(value & bank.port("IRQ_ENABLE", cause)
                                    for cause, value in ended.items()).any())


class _Run:
    """The shell's run state: registers the run control, the counters and the status share."""

    def __init__(self):
        self.running = Signal(name="running")
        self.done = Signal(name="done")
        self.resetting = Signal(name="resetting")
        self.bus_error = Signal(name="bus_error")
        self.fault = Signal(4, name="fault")            # FAULT.CODE of the first fault
        self.fault_resp = Signal(2, name="fault_resp")
        self.halted = Signal(name="halted")             # a fault of the shell stopped the run
        self.fault_addr = Signal(64, name="fault_addr")
        self.checking = Signal(name="checking")         # the regions are checked this cycle
        self.window = Signal(4, name="window")          # a region's window fault, or 0
        self.window_addr = Signal(64, name="window_addr")
        self.stuck = Signal(name="stuck")               # the watchdog fired
        self.stall = Signal(10, name="stall")           # STALL's fields
        self.start_ignored = Signal(name="start_ignored")
        self.prog_len = Signal(32, name="prog_len")
        self.out_len = Signal(32, name="out_len")
        self.prog_count = Signal(32, name="prog_count")
        self.data_count = Signal(32, name="data_count")
        self.out_count = Signal(32, name="out_count")
        self.cycles = Signal(64, name="cycles")
