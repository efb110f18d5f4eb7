"""Formal proof of the AXI shell's bounded output DMA (:class:`~bertaccel.hw.axi.shell.AxiShell`).

The shell under proof is the real one with its two neighbours set free: the register bank is
replaced by free values (every ``RW`` field and ``CTRL``'s pulses any value in any cycle, a
host that rewrites any register at any time) and the core by ``FreeCore``, whose every output
is any value in any cycle (results offered or withdrawn, errors, busy). Every input of the AXI4
master is free too (ready signals, any R and B response, errors included), and so is reset.

At each start the harness keeps the output area, ``[OUT_ADDR, OUT_ADDR + OUT_LEN beats)`` (its
base to the bus word, as the shell reads it), and asserts that every write burst on ``m_axi``
lies inside it, and every W word is one of the area's words, strobing only the bytes of beats
below ``OUT_LEN``; that every write burst starts at a bus word, is at most ``max_burst`` words
long and ends at or before the next 4 KiB boundary; and that AW and W, once offered, stay
up and unchanged until taken (soft resets included).

A run started while ``FAULT.CODE`` still holds an earlier fault (no soft reset between) keeps
that fault, but its window fault halts the shell all the same: the proof holds without any rule
for the host. One rule is assumed, the core's: no result reaches the write engine in the cycle
of the window check, nor from the first cycle the shell is finishing on (it raises the engine's
``flush`` once every instruction is taken and the core is not ``o_busy``, or after an
ILLEGAL_INSTRUCTION fault). A core keeps it where it offers results only while busy and is idle
at a start; but after an ILLEGAL_INSTRUCTION fault a STORE that began may still stream, and
without this rule the proof fails: a result taken in the cycle the run ends is written after
``DONE``, and a START meanwhile resets the engine with its AW request not taken; a result after
a partial word was flushed goes to a word of its own past the area's end; and a result taken in
the check cycle is written even when the window check then faults (to a wrapped address, for an
area past the top).

Bounded: 10 cycles from reset (each cycle more doubles the solver's time) reach a start, the
one-cycle window check, results taken up to ``OUT_LEN`` and one refused past it (the
OUT_OVERRUN fault), a burst issued and written and a partial last word flushed (each a cover,
all by cycle 6), for ``OUT_LEN`` and both addresses any values. Run for a 2x2 core (8-byte
results) on a 128-bit bus (two results a word, byte strobes) and on a 32-bit bus (a result in
two words), ``max_burst`` 4.
"""

import dataclasses
from unittest import mock

import pytest
from amaranth import Cat, Const, Elaboratable, Module, Signal, Value
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Cover
from amaranth.lib import wiring

from bertaccel.hw.axi import csr
from bertaccel.hw.axi import shell as shell_module
from bertaccel.hw.axi.dma import words_of
from bertaccel.hw.axi.shell import AxiShell
from bertaccel.hw.config import PRESETS
from bertaccel.hw.core import BertAccelCore

from verif.tb.formal import check

MAX_BURST = 4


def _free(m, port):
    value = Value.cast(port)
    m.d.comb += value.eq(AnySeq(len(value)))


class FreeCore(wiring.Component):
    """Stands in for :class:`BertAccelCore`: each output any value in any cycle."""

    def __init__(self, cfg):
        core = BertAccelCore(cfg)
        core._MustUse__silence = True   # made for its signature only
        super().__init__(core.signature)

    def elaborate(self, platform):
        m = Module()
        for port in (self.i_instr.ready, self.i_data.ready, self.o_data.valid,
                     self.o_data.payload, self.o_busy, self.o_error, self.o_fault,
                     self.o_fault_pc, self.o_progress, self.o_wait):
            _free(m, port)
        return m


class FreeBank:
    """Stands in for :class:`~bertaccel.hw.axi.csr_bank.CsrBank`: a signal for each field,
    the shell's to drive for ``RO`` fields, free (driven by ``free``) for the others."""

    def __init__(self):
        for reg in csr.REGISTERS:
            for field in reg.fields:
                name = csr.port_name(reg, field)
                setattr(self, name, Signal(field.width, name=name))

    def port(self, register, field=None):
        reg = csr.register(register)
        return getattr(self, csr.port_name(reg, reg.field(field or register)))

    def free(self, m):
        for reg in csr.REGISTERS:
            for field in reg.fields:
                if field.access in (csr.Access.RW, csr.Access.W1P):
                    _free(m, getattr(self, csr.port_name(reg, field)))


class OpenShell(AxiShell):
    """The shell with a :class:`FreeBank` and a :class:`FreeCore`; keeps both and the write
    engine for the harness."""

    def __init__(self, cfg):
        super().__init__(cfg, max_burst=MAX_BURST)
        self.bank = FreeBank()
        self.out_wr = None

    def elaborate(self, platform):
        with mock.patch.object(shell_module, "BertAccelCore", FreeCore):
            return super().elaborate(platform)

    def _registers(self, m):
        self.bank.free(m)
        return self.bank

    def _blocks(self, m, soft_reset):
        blocks = super()._blocks(m, soft_reset)
        self.out_wr = blocks[3]
        return blocks


class OutputProperties(Elaboratable):
    def __init__(self, cfg):
        self.cfg = cfg
        self.shell = OpenShell(cfg)

    def elaborate(self, platform):
        m = Module()
        m.submodules.shell = shell = self.shell
        cfg = self.cfg
        for name, member in shell.axi_signature.members.items():
            if member.flow == wiring.In:
                _free(m, getattr(shell, f"m_axi_{name}"))
        for name, member in shell.axil_signature.members.items():
            if member.flow == wiring.Out:   # the slave's inputs: unused, the bank is free
                m.d.comb += getattr(shell, f"s_axil_{name}").eq(0)
        # `elaborate` of the shell runs after this one: its write engine is read through
        # signals made here and driven below, once the shell has made it.
        m.submodules.watch = _Watch(self)
        return m


class _Watch(Elaboratable):
    """The properties, made once the shell has been elaborated (its write engine exists)."""

    def __init__(self, harness):
        self.harness = harness

    def elaborate(self, platform):
        m = Module()
        harness = self.harness
        shell, cfg = harness.shell, harness.cfg
        out_wr, bank = shell.out_wr, shell.bank
        axi = lambda name: getattr(shell, f"m_axi_{name}")   # noqa: E731
        aw, bus_bytes = cfg.axi_addr_width, cfg.axi_data_width // 8
        shift = bus_bytes.bit_length() - 1
        beat_bytes = csr.out_beat_bytes(cfg)
        wide = aw + 40
        # The output area of the last start, in whole bus words.
        lo, hi, out_len = Signal(wide), Signal(wide), Signal(32)
        start = out_wr.start
        base = Cat(Const(0, shift), out_wr.base[shift:aw])
        words = words_of(bank.port("OUT_LEN"), beat_width=8 * beat_bytes,
                         bus_width=cfg.axi_data_width)
        with m.If(start):
            m.d.sync += [lo.eq(base), hi.eq(base + (words << shift)),
                         out_len.eq(bank.port("OUT_LEN"))]
        # Bursts: inside the area, the AXI burst rules, held until taken.
        addr, length = axi("awaddr"), axi("awlen") + 1
        with m.If(axi("awvalid")):
            m.d.comb += [Assert((addr >= lo) & (addr + (length << shift) <= hi)),
                         Assert(addr[:shift] == 0), Assert(length <= MAX_BURST),
                         Assert(addr[:12] + (length << shift) <= 0x1000)]
        for channel, payload in (("aw", Cat(axi("awaddr"), axi("awlen"))),
                                 ("w", Cat(axi("wdata"), axi("wstrb"), axi("wlast")))):
            waiting, before = Signal(name=f"{channel}_waiting"), Signal.like(payload)
            valid, ready = axi(f"{channel}valid"), axi(f"{channel}ready")
            m.d.sync += [waiting.eq(valid & ~ready), before.eq(payload)]
            m.d.comb += Assert(~waiting | (valid & (payload == before)))
        # W: word n of the run is the area's word n; its strobes only the bytes of beats
        # below OUT_LEN.
        written = Signal(32)
        with m.If(start):
            m.d.sync += written.eq(0)
        with m.Elif(axi("wvalid") & axi("wready")):
            m.d.sync += written.eq(written + 1)
        with m.If(axi("wvalid")):
            m.d.comb += Assert(lo + (written << shift) < hi)
            per_word = bus_bytes // beat_bytes
            for part in range(1, per_word):
                strobed = axi("wstrb")[part * beat_bytes:(part + 1) * beat_bytes].any()
                m.d.comb += Assert(~strobed | (written * per_word + part < out_len))
        # The core's rule: no result reaches the write engine when the window is checked, nor
        # while the shell has begun to finish (see the module's docstring for why).
        checking, finished = Signal(), Signal()
        m.d.sync += checking.eq(start)
        with m.If(start):
            m.d.sync += finished.eq(0)
        with m.Elif(out_wr.flush):
            m.d.sync += finished.eq(1)
        m.d.comb += Assume(~(out_wr.i.valid & (out_wr.flush | finished | checking)))
        overrun = bank.port("FAULT", "CODE") == csr.FAULT["OUT_OVERRUN"]
        m.d.comb += [Cover(axi("awvalid") & axi("awready") & overrun),
                     Cover(axi("wvalid") & axi("wready") & axi("wlast")
                           & (lo + ((written + 1) << shift) == hi) & (out_len != 0))]
        if bus_bytes > beat_bytes:
            m.d.comb += Cover(axi("wvalid") & axi("wready") & ~axi("wstrb")[-1])
        return m


@pytest.mark.parametrize("bus_width", [128, 32])
def test_writes_stay_in_the_output_area(tmp_path, bus_width):
    cfg = dataclasses.replace(PRESETS["2x2"], axi_data_width=bus_width)
    result = check(OutputProperties(cfg), name="shell_output", workdir=tmp_path, depth=10,
                   mode="bmc", cover=10, map_memories=True)
    assert result.proven and result.covered, result.summary
