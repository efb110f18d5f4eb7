"""The AXI4 shell: register map, host layout, and the shell under cocotb with cocotbext-axi.

Pure-Python tests first (the AXI fields of ``AccelConfig``, the register table and its generated
documentation, the DRAM layout of :mod:`bertaccel.sw.devices.axi`), then one Verilator build of
:class:`bertaccel.hw.axi.AxiShell` per config, running the cocotb tests of this same module:

* ``registers``: the identity registers match the config; RW registers keep what is written
  (byte strobes honoured), RO and CONST registers ignore writes, unmapped offsets read 0;
* ``gemm``: a tiled GEMM (``compile_gemm``) through the real driver sequence
  (:func:`bertaccel.sw.devices.axi.run_ops`) into ``AxiRam``, bit-exact with the software device,
  first with every channel free-running and then with random pauses on every channel of both
  buses (the seed is logged);
* ``back_to_back``: several programs in a row without a reset, regions placed across 4 KiB
  boundaries and, for the 40-bit config, above 4 GiB; a 1x1x1 GEMM (one output beat, a partial
  bus word written with strobes);
* ``errors``: a program with an illegal instruction ends with ``STATUS.ERROR`` and ``DONE``
  instead of hanging, ``FAULT.CHECK`` naming the rule and ``FAULT_PC`` the instruction; a run
  whose data is too short does not finish and is abandoned with ``CTRL.SOFT_RESET``; a refused
  write ends with ``FAULT.CODE`` WRITE; a program with more results than ``OUT_LEN`` ends with
  OUT_OVERRUN, nothing written past ``OUT_LEN``; refused input reads end with DATA_READ and
  nothing written at all; DECERR on the instruction reads and on the writes ends with PROG_READ
  and WRITE, ``FAULT.RESP`` 3; every bus fault with ``FAULT_ADDR`` at the word (read) or burst
  (write) answered with the error, also when the refusal starts at a region's fourth word;
  after each, the next program runs bit-exact;
* ``protection``: each region outside the DMA window (and one past the top of the address
  space) ends with its window fault and ``FAULT_ADDR``, no byte read or written; missing input
  data and a withheld write response end with WATCHDOG and ``STALL`` naming the wait; ``irq``
  follows ``IRQ_ENABLE``; START while BUSY sets ``STATUS.START_IGNORED``; after each, the next
  program runs bit-exact.

A memory monitor checks every bus access: reads only inside the program and data regions,
writes only inside the output area (byte-exact, so strobes are checked), never a burst longer
than ``MAX_BURST`` or across 4 KiB (``AxiRam`` itself asserts the latter).

Adding a case (an epilogue program, later) is adding a :class:`Case` to :data:`CASES`: a
function from the config and a random generator to a program and its inputs. The expected
outputs always come from :class:`~bertaccel.sw.SoftwareDevice`.
"""

import dataclasses
import itertools
import json
import logging
import os
import random
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import cocotb
import pytest
import torch
from bertaccel.hw.axi import MAX_BURST, csr
from bertaccel.hw.config import AccelConfig, ConfigError, preset
from bertaccel.hw.legal import Fault
from bertaccel.hw.verilog import source_key
from bertaccel.sim.build import build, run_cocotb
from bertaccel.sw import SoftwareDevice
from bertaccel.sw.devices import axi as axi_host
from bertaccel.sw.tiler import compile_gemm
from cocotb.clock import Clock
from cocotb.triggers import FallingEdge, RisingEdge, Timer
from verif import funcov

__all__ = []

MODULE = "verif.block.test_axi_shell"
PERIOD_NS = 10
#: Functional coverage: hits of :data:`verif.funcov.AXI_SHELL` in this simulation, written by
#: the last cocotb test to the file that ``BERTACCEL_FUNCOV`` names.
SEEN = Counter()

#: The configs the shell is built for, chosen so that every gearbox ratio occurs:
#: 2x2 on a 128-bit bus: 8 input beats a word, instructions 1:1, 2 output beats a word (the
#: last one partial, with strobes); 4x8 on a 64-bit bus with 40-bit addresses: input beats 1:1,
#: 2 words an instruction, 4 words an output beat, and regions above 4 GiB.
CONFIGS = {
    "2x2-axi128": dataclasses.replace(preset("2x2"), axi_data_width=128),
    "4x8-axi64a40": dataclasses.replace(preset("4x8"), axi_data_width=64, axi_addr_width=40),
}


# -- cases: programs and their inputs -------------------------------------------------------------

@dataclass(frozen=True)
class Case:
    """A program to run through the shell: ``make(cfg, rng) -> (program, inputs)``."""
    name: str
    make: object


def _int8(rng, *shape):
    return torch.tensor([[rng.randrange(-128, 128) for _ in range(shape[1])]
                         for _ in range(shape[0])], dtype=torch.int8)


def gemm_case(m, k, n):
    def make(cfg, rng):
        return compile_gemm(cfg, m, k, n), {"a": _int8(rng, m, k), "b": _int8(rng, k, n)}
    return Case(f"gemm {m}x{k}x{n}", make)


#: Programs, by size. An epilogue program goes here as one more Case.
CASES = {
    "main": gemm_case(9, 21, 11),
    "tiny": gemm_case(1, 1, 1),
    "tall": gemm_case(23, 6, 5),
    "wide": gemm_case(3, 40, 17),
}


# -- cocotb side (runs inside the simulator) ------------------------------------------------------

def _pauses(rng, p):
    while True:
        yield rng.random() < p


class AxiShellTb:
    """Testbench of :class:`~bertaccel.hw.axi.AxiShell`: clock, reset, the CSR master, DRAM,
    the bus monitor and the scoreboard.

    Parameters
    ----------
    dut
        The shell's top level.
    cfg : AccelConfig
    seed : int
        Seeds the operands and the pause generators.
    """

    def __init__(self, dut, cfg, seed):
        from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

        self.dut = dut
        self.cfg = cfg
        self.seed = seed
        self.rng = random.Random(seed)
        self.log = logging.getLogger("cocotb.tb.axi_shell")
        self.log_scoreboard = self.log.getChild("scoreboard")
        self.log_monitor = self.log.getChild("monitor")
        self.log.info("config %s (%s), seed %d (replay with BERTACCEL_SEED=%d)",
                      cfg.name, cfg.tag, seed, seed)
        Clock(dut.clk, PERIOD_NS, unit="ns").start()
        # cocotbext-axi logs every burst and CSR access at INFO, under cocotb.<toplevel>.<bus>.
        logging.getLogger(f"cocotb.{dut._name}").setLevel(logging.WARNING)
        self.csr = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axil"), dut.clk, dut.rst)
        self.dram = AxiRam(AxiBus.from_prefix(dut, "m_axi"), dut.clk, dut.rst,
                           size=1 << cfg.axi_addr_width)
        self.software = SoftwareDevice(cfg)
        self.readable = []   # (start, end) the shell may read
        self.writable = []   # (start, end) the shell may write
        self.violations = []
        self.refusal = 2     # the response a refused access gets: AxiResp.SLVERR (or DECERR)
        self.written = 0     # bytes the shell has written
        self.bursts = {"read": 0, "write": 0}
        self._watch()
        cocotb.start_soon(self._check_handshakes())

    # -- bus monitor --------------------------------------------------------------------------

    def _watch(self):
        read_if, write_if = self.dram.read_if, self.dram.write_if
        read_word, write_bytes = read_if._read, write_if._write
        word = self.cfg.axi_data_width // 8

        def inside(spans, start, end):
            return any(lo <= start and end <= hi for lo, hi in spans)

        # An access outside the allowed regions is recorded and refused: AxiRam answers it
        # with SLVERR, which the shell must report as STATUS.BUS_ERROR.
        async def checked_read(address, length):
            if not inside(self.readable, address, address + length):
                self.violation(f"the shell read {length} bytes at {address:#x}, outside the "
                               f"program and data")
            return await read_word(address, length)

        async def checked_write(address, data):
            self.written += len(data)
            if not inside(self.writable, address, address + len(data)):
                self.violation(f"the shell wrote {len(data)} bytes at {address:#x}, outside "
                               f"the output area")
            await write_bytes(address, data)

        read_if._read, write_if._write = checked_read, checked_write
        # AxiRam answers a refused access SLVERR; self.refusal turns that into DECERR.
        for channel, field in ((read_if.r_channel, "rresp"), (write_if.b_channel, "bresp")):
            channel.send = self._refusing(channel.send, field)
        ar, aw = read_if.ar_channel, write_if.aw_channel

        def on_request(kind, channel):
            def check(item):
                beats = int(getattr(item, f"{channel}len")) + 1
                assert beats <= MAX_BURST, f"a {beats}-word {kind} burst (max {MAX_BURST})"
                assert int(getattr(item, f"{channel}size")) == word.bit_length() - 1
                self.bursts[kind] += 1
                end = int(getattr(item, f"{channel}addr")) + beats * word
                SEEN[f"{kind} burst of 1 word"] += beats == 1
                SEEN[f"{kind} burst of max_burst words"] += beats == MAX_BURST
                SEEN[f"{kind} burst up to a 4 KiB boundary"] += end % 0x1000 == 0
                if kind == "read":
                    SEEN[("instruction read (ARID 0)", "data read (ARID 1)")[
                        int(item.arid)]] += 1
            return check

        ar._recv = _tap(ar._recv, on_request("read", "ar"))
        aw._recv = _tap(aw._recv, on_request("write", "aw"))

    def _refusing(self, send, field):
        from cocotbext.axi import AxiResp

        async def refused(item):
            if getattr(item, field) == AxiResp.SLVERR:
                setattr(item, field, self.refusal)
                SEEN[f"{AxiResp(self.refusal).name} on {field[0].upper()}"] += 1
            await send(item)
        return refused

    def violation(self, message):
        self.log_monitor.error("%s", message)
        self.violations.append(message)
        raise PermissionError(message)

    def allow(self, image, *, write=True):
        """Let the shell touch ``image``'s regions (whole bus words for reads) and no more."""
        word = self.cfg.axi_data_width // 8
        self.readable = [(addr, -(-(addr + len(data)) // word) * word)
                         for addr, data in image.segments]
        self.writable = [(image.out_addr, image.out_addr + image.out_size)] if write else []

    async def _check_handshakes(self):
        """AXI rule on every channel the shell drives: once VALID is high it stays high, with
        the same payload, until READY. Checked at every clock edge."""
        dut = self.dut
        channels = {
            "m_axi ar": ("m_axi_arvalid", "m_axi_arready",
                         ("m_axi_arid", "m_axi_araddr", "m_axi_arlen")),
            "m_axi aw": ("m_axi_awvalid", "m_axi_awready", ("m_axi_awaddr", "m_axi_awlen")),
            "m_axi w": ("m_axi_wvalid", "m_axi_wready",
                        ("m_axi_wdata", "m_axi_wstrb", "m_axi_wlast")),
            "s_axil r": ("s_axil_rvalid", "s_axil_rready", ("s_axil_rdata",)),
            "s_axil b": ("s_axil_bvalid", "s_axil_bready", ()),
        }
        handles = {name: (getattr(dut, valid), getattr(dut, ready),
                          [getattr(dut, sig) for sig in payload])
                   for name, (valid, ready, payload) in channels.items()}
        held = {}
        edge = RisingEdge(dut.clk)
        while True:
            await edge
            if dut.rst.value:
                held.clear()
                continue
            for name, (valid, ready, payload) in handles.items():
                if name in held and (not valid.value
                                     or [int(p.value) for p in payload] != held[name]):
                    self.violations.append(f"{name}: VALID dropped or payload changed before "
                                           f"READY")
                    self.log_monitor.error("%s", self.violations[-1])
                if valid.value and not ready.value:
                    held[name] = [int(p.value) for p in payload]
                else:
                    held.pop(name, None)

    # -- drivers ------------------------------------------------------------------------------

    def backpressure(self, p):
        """Random pauses with probability ``p`` on every channel of both buses (0: none)."""
        channels = {
            "dram.aw": self.dram.write_if.aw_channel, "dram.w": self.dram.write_if.w_channel,
            "dram.b": self.dram.write_if.b_channel, "dram.ar": self.dram.read_if.ar_channel,
            "dram.r": self.dram.read_if.r_channel,
            "csr.aw": self.csr.write_if.aw_channel, "csr.w": self.csr.write_if.w_channel,
            "csr.b": self.csr.write_if.b_channel, "csr.ar": self.csr.read_if.ar_channel,
            "csr.r": self.csr.read_if.r_channel,
        }
        for index, channel in enumerate(channels.values()):
            if p:
                channel.set_pause_generator(_pauses(random.Random(self.seed * 100 + index), p))
            else:
                channel.clear_pause_generator()
        self.log.info("backpressure %.2f on %s (seed %d)", p, ", ".join(channels), self.seed)

    async def reset(self):
        self.dut.rst.value = 1
        for _ in range(4):
            await FallingEdge(self.dut.clk)
        self.dut.rst.value = 0
        for _ in range(2):
            await FallingEdge(self.dut.clk)

    async def execute(self, ops, poll_cycles=32):
        """Run a generator of :mod:`bertaccel.sw.devices.axi` bus operations; return its value."""
        reply = None
        while True:
            try:
                op = ops.send(reply)
            except StopIteration as stop:
                return stop.value
            reply = None
            if isinstance(op, axi_host.RegWrite):
                await self.csr.write_dword(op.offset, op.value)
            elif isinstance(op, axi_host.RegRead):
                reply = await self.csr.read_dword(op.offset)
            elif isinstance(op, axi_host.MemWrite):
                self.dram.write(op.addr, op.data)
            elif isinstance(op, axi_host.MemRead):
                reply = bytes(self.dram.read(op.addr, op.size))
            elif isinstance(op, axi_host.Poll):
                await Timer(poll_cycles * PERIOD_NS, unit="ns")
            else:
                raise TypeError(f"unknown bus operation {op!r}")

    async def read(self, name):
        return await self.csr.read_dword(csr.register(name).offset)

    async def write(self, name, value):
        await self.csr.write_dword(csr.register(name).offset, value)

    # -- model and scoreboard -----------------------------------------------------------------

    def image(self, case, **where):
        program, inputs = case.make(self.cfg, self.rng)
        image = axi_host.layout(program, **where, **inputs)
        expected = self.software.run(program, **inputs).outputs
        return image, expected

    async def run(self, case, *, max_polls=20_000, **where):
        """Run ``case`` through the shell with the real driver sequence; check every output."""
        image, expected = self.image(case, **where)
        self.allow(image)
        begin = time.perf_counter()
        try:
            result = await self.execute(axi_host.run_ops(image, max_polls=max_polls))
        finally:
            assert not self.violations, "; ".join(self.violations)
        for name, tensor in expected.items():
            got = result.outputs[name]
            bad = (got != tensor).nonzero()
            assert not len(bad), (f"{case.name}: output {name!r} differs from the software "
                                  f"device at {len(bad)} places, first {bad[0].tolist()} "
                                  f"(seed {self.seed})")
        assert result.counts["PROG_COUNT"] == image.prog_len
        self.log_scoreboard.info(
            "%s: bit-exact; %d instructions, %d data beats, %d output beats, %d cycles, "
            "%d read and %d write bursts so far, %.2f s", case.name, image.prog_len,
            image.data_len, image.out_len, result.cycles, self.bursts["read"],
            self.bursts["write"], time.perf_counter() - begin)
        return image, result


def _tap(function, callback):
    def tapped(item):
        callback(item)
        return function(item)
    return tapped


def _tb(dut):
    cfg = AccelConfig.from_dict(json.loads(os.environ["BERTACCEL_CONFIG"]))
    return AxiShellTb(dut, cfg, int(os.environ.get("BERTACCEL_SEED", "1")))


@cocotb.test(timeout_time=2, timeout_unit="ms")
async def registers(dut):
    """Identity, RW with strobes, RO/CONST ignore writes (SLVERR), unmapped offsets read 0
    (SLVERR) and ignore writes (SLVERR)."""
    from cocotbext.axi import AxiResp
    tb = _tb(dut)
    await tb.reset()
    identity = {name: await tb.read(name) for name in csr.identity(tb.cfg)}
    axi_host.check_identity(tb.cfg, identity)
    assert await tb.read("STATUS") == 0 and await tb.read("CTRL") == 0
    rw = [reg for reg in csr.REGISTERS if reg.access == csr.Access.RW]
    values = {reg.name: tb.rng.getrandbits(32) for reg in rw}
    for name, value in values.items():
        await tb.write(name, value)
    for name, value in values.items():   # bits no RW field holds read 0
        value &= sum(field.mask for field in csr.register(name).fields)
        values[name] = value
        assert await tb.read(name) == value, name
    # One byte lane: the AXI4-Lite master sets WSTRB to 0b0010.
    await tb.csr.write(csr.register("PROG_LEN").offset + 1, b"\xa5")
    expect = (values["PROG_LEN"] & ~0xFF00) | 0xA500
    assert await tb.read("PROG_LEN") == expect
    for reg in csr.REGISTERS:
        if reg.access in (csr.Access.RO, csr.Access.CONST):
            before = await tb.read(reg.name)
            flipped = (~before & 0xFFFF_FFFF).to_bytes(4, "little")
            written = await tb.csr.write(reg.offset, flipped)
            assert written.resp == AxiResp.SLVERR, f"a write to {reg.name} answered {written.resp}"
            SEEN["CSR write to a read-only register"] += 1
            after = await tb.read(reg.name)
            if reg.name != "CYCLES_HI":  # latched by the CYCLES_LO read, still 0 here
                assert after == before, f"{reg.name} changed on a write"
    used = {reg.offset for reg in csr.REGISTERS}
    for offset in (0x018, 0x0FC, 0xFFC):
        assert offset not in used
        written = await tb.csr.write(offset, b"\xff" * 4)
        read = await tb.csr.read(offset, 4)
        assert written.resp == read.resp == AxiResp.SLVERR, (offset, written.resp, read.resp)
        SEEN["CSR access at an unmapped offset"] += 1
        assert read.data == bytes(4)
    for name, value in values.items():  # unmapped writes touched nothing
        if name != "PROG_LEN":
            assert await tb.read(name) == value, name
    assert not tb.violations, "; ".join(tb.violations)


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def gemm(dut):
    """A tiled GEMM through the shell: free-running, then with pauses on every channel."""
    tb = _tb(dut)
    await tb.reset()
    _, free = await tb.run(CASES["main"])
    tb.log.info("free-running %s: %d cycles through the shell", CASES["main"].name, free.cycles)
    pause = 0.3
    tb.backpressure(pause)
    _, stalled = await tb.run(CASES["main"])
    tb.log.info("with pauses (p = %.2f) on every channel: %d cycles", pause, stalled.cycles)


@cocotb.test(timeout_time=40, timeout_unit="ms")
async def back_to_back(dut):
    """Programs in a row with no reset between them, regions across 4 KiB boundaries."""
    tb = _tb(dut)
    await tb.reset()
    tb.backpressure(0.25)
    word = tb.cfg.axi_data_width // 8
    high = 1 << 32 if tb.cfg.axi_addr_width > 32 else 0
    # Each region starts a few words before a 4 KiB boundary, so bursts must split there.
    places = [
        {"base": high + 0x3000 - 3 * word, "align": word},
        {"prog_addr": high + 0x8000 - 5 * word, "data_addr": high + 0x2000 - 7 * word,
         "out_addr": high + 0xA000 - word},
        {"base": 0x5000 - word, "align": word},
        {"base": high + 0x10000},
    ]
    cases = [CASES["tall"], CASES["tiny"], CASES["wide"], CASES["main"]]
    for case, where in zip(cases, places):
        await tb.run(case, **where)
    assert tb.bursts["read"] and tb.bursts["write"]
    SEEN["back-to-back runs"] += len(cases) - 1


def _fault(code, *, resp=0, check=0, pc=0, addr=0, stall=0):
    """The fields of ``FAULT``, ``FAULT_PC``, ``FAULT_ADDR`` and ``STALL`` as
    :class:`~axi_host.ShellError` has them."""
    return {"CODE": csr.FAULT[code], "RESP": resp, "CHECK": check, "PC": pc, "ADDR": addr,
            "STALL": stall}


def _base(image, region):
    """The byte address ``image`` gives ``region`` (``"PROG"``, ``"DATA"`` or ``"OUT"``)."""
    registers = image.registers()
    return registers[f"{region}_ADDR_LO"] | registers[f"{region}_ADDR_HI"] << 32


def _bits(register, *names):
    """The word of ``register`` with the one-bit fields ``names`` set."""
    return sum(1 << csr.register(register).field(name).lsb for name in names)


@cocotb.test(timeout_time=40, timeout_unit="ms")
async def errors(dut):
    """An illegal instruction ends the run with ERROR; a stuck run is abandoned by SOFT_RESET;
    the shell works after each."""
    tb = _tb(dut)
    await tb.reset()
    tb.backpressure(0.2)

    # -- an illegal instruction (all-zero word) in the middle of a GEMM ------------------------
    image, _ = tb.image(CASES["tall"])
    tb.allow(image)
    prog_addr, prog = image.segments[0]
    bad = image.prog_len // 2
    patched = bytearray(prog)
    patched[bad * axi_host.INSTR_BYTES:(bad + 1) * axi_host.INSTR_BYTES] = bytes(16)
    image.segments[0] = (prog_addr, bytes(patched))
    error = await _expect_fault(tb, image,
                                _fault("ILLEGAL_INSTRUCTION", check=Fault.OPCODE, pc=bad))
    assert error.status["ERROR"], error.status
    # The driver soft-reset the shell: the flags are clear and a program runs.
    assert await tb.read("STATUS") == 0
    await tb.run(CASES["main"])

    # -- too few data beats: the core waits forever; SOFT_RESET abandons the run ----------------
    image, _ = tb.image(CASES["tall"])
    tb.allow(image)
    image.data_len //= 2
    try:
        await tb.execute(axi_host.run_ops(image, max_polls=60))
    except axi_host.ShellTimeout as error:
        tb.log.info("stuck run abandoned: %s", error)
    else:
        raise AssertionError("a run with half its data finished")
    status = await tb.read("STATUS")
    assert status == 0, f"STATUS {status:#x} after the soft reset"
    await tb.run(CASES["tall"])

    # -- SOFT_RESET in the middle of a run, with bursts in flight -------------------------------
    image, _ = tb.image(CASES["wide"])
    tb.allow(image)
    for addr, data in image.segments:
        tb.dram.write(addr, data)
    for name, value in image.registers().items():
        await tb.write(name, value)
    await tb.write("CTRL", 1 << csr.register("CTRL").field("START").lsb)
    await Timer(150 * PERIOD_NS, unit="ns")
    assert axi_host.field_value("STATUS", await tb.read("STATUS"), "BUSY")
    taken = await tb.read("PROG_COUNT")
    await _soft_reset(tb)
    SEEN["soft reset with a run in flight"] += 1
    assert await tb.read("STATUS") == 0
    tb.log.info("soft reset during a run, after %d of %d instructions", taken, image.prog_len)
    await tb.run(CASES["main"])

    # -- a write answered with SLVERR sets STATUS.BUS_ERROR; FAULT_ADDR is its burst's ------
    image, _ = tb.image(CASES["tiny"])
    tb.allow(image, write=False)
    error = await _expect_fault(tb, image, _fault("WRITE", resp=2, addr=_base(image, "OUT")),
                                refused=True)
    assert error.status["BUS_ERROR"], error.status
    await tb.run(CASES["tiny"])

    # -- more results than OUT_LEN: the rest is not written, the run ends with OUT_OVERRUN -----
    image, _ = tb.image(CASES["tall"])
    image.out_len //= 2
    tb.allow(image)   # writable: the first half of the output area only
    error = await _expect_fault(tb, image, _fault("OUT_OVERRUN", resp=0))
    assert error.status["FAULT"], error.status
    await tb.run(CASES["tall"])

    # -- input data answered with SLVERR: nothing is computed on it, nothing written ----------
    image, _ = tb.image(CASES["main"])
    tb.allow(image)
    data_addr = _base(image, "DATA")
    tb.readable = [span for span in tb.readable if span[0] != data_addr]
    written = tb.written
    error = await _expect_fault(tb, image, _fault("DATA_READ", resp=2, addr=data_addr),
                                refused=True)
    assert error.status["FAULT"] and error.status["BUS_ERROR"], error.status
    assert tb.written == written, f"{tb.written - written} bytes written after a refused read"
    await tb.run(CASES["main"])

    # -- ... from the fourth word on: FAULT_ADDR is the first word answered with the error -----
    image, _ = tb.image(CASES["main"])
    tb.allow(image)
    word = tb.cfg.axi_data_width // 8
    tb.readable = [(lo, data_addr + 3 * word if lo == data_addr else hi)
                   for lo, hi in tb.readable]
    await _expect_fault(tb, image, _fault("DATA_READ", resp=2, addr=data_addr + 3 * word),
                        refused=True)
    await tb.run(CASES["main"])

    # -- DECERR on the instruction reads, then on the writes: the same faults, RESP 3 ----------
    from cocotbext.axi import AxiResp
    tb.refusal = AxiResp.DECERR
    for region, code in (("prog", "PROG_READ"), ("out", "WRITE")):
        image, _ = tb.image(CASES["tiny"])
        tb.allow(image, write=region != "out")
        if region == "prog":
            tb.readable = tb.readable[1:]       # segments[0] is the program
        written = tb.written
        at = _base(image, region.upper())
        error = await _expect_fault(tb, image, _fault(code, resp=AxiResp.DECERR, addr=at),
                                    refused=True)
        assert error.status["BUS_ERROR"] and f"(DECERR at {at:#x})" in str(error), error
        if region == "prog":
            assert tb.written == written, "results written after a refused instruction read"
        await tb.run(CASES["tiny"])
    tb.refusal = AxiResp.SLVERR


async def _expect_fault(tb, image, fault, *, max_polls=2_000, refused=False):
    """Run ``image`` with the driver; it must end in ``fault`` touching no memory at all when
    ``fault`` is a window fault (the monitor sees every access), and with no access the
    monitor refused, unless ``refused``: then with some (they are forgotten). Return the
    error."""
    before = dict(tb.bursts), tb.written
    try:
        await tb.execute(axi_host.run_ops(image, max_polls=max_polls))
    except axi_host.ShellError as caught:
        error = caught
        assert error.status is not None and error.status["DONE"], error
        got = dict(error.fault)
        if fault["STALL"] is None:      # the caller checks the bits it expects
            got["STALL"] = None
        assert got == fault, (error.fault, fault)
        SEEN[f"fault {csr.FAULT_CODES[fault['CODE']]}"] += 1
        tb.log.info("%s", error)
    else:
        raise AssertionError(f"the run did not end with {fault}")
    if csr.FAULT_CODES[fault["CODE"]] in csr.WINDOW_FAULTS.values():
        assert (dict(tb.bursts), tb.written) == before, "a region outside the window was used"
    if refused:
        assert tb.violations, "the monitor refused no access"
        tb.violations.clear()
    assert not tb.violations, "; ".join(tb.violations)
    return error


async def _start(tb, image):
    """Write ``image`` and its registers and pulse ``CTRL.START``, without the driver."""
    for addr, data in image.segments:
        tb.dram.write(addr, data)
    for name, value in image.registers().items():
        await tb.write(name, value)
    await tb.write("CTRL", _bits("CTRL", "START"))


async def _until(tb, name, field, *, polls=2_000):
    """Poll ``name`` until its ``field`` is set; return the register's word."""
    for _ in range(polls):
        word = await tb.read(name)
        if axi_host.field_value(name, word, field):
            return word
        await Timer(32 * PERIOD_NS, unit="ns")
    raise AssertionError(f"{name}.{field} still clear after {polls} polls")


async def _soft_reset(tb):
    await tb.write("CTRL", _bits("CTRL", "SOFT_RESET"))
    for _ in range(100):
        if not axi_host.field_value("STATUS", await tb.read("STATUS"), "BUSY"):
            return
    raise AssertionError("still busy 100 reads after CTRL.SOFT_RESET")


@cocotb.test(timeout_time=40, timeout_unit="ms")
async def protection(dut):
    """The DMA window, the watchdog, irq's causes and START while BUSY; after each fault the
    next run is bit-exact."""
    tb = _tb(dut)
    await tb.reset()
    tb.backpressure(0.2)
    word = tb.cfg.axi_data_width // 8

    # -- each region in turn outside the window: no byte is read or written ----------------
    for prefix, code in csr.WINDOW_FAULTS.items():
        image, _ = tb.image(CASES["tall"])
        tb.allow(image)
        first, last = image.span()
        addr = {"PROG": image.prog_addr, "DATA": image.data_addr, "OUT": image.out_addr}[prefix]
        # A window that ends a word before the region, or starts a word after its start.
        image.window = (first, addr - 1) if addr > first else (addr + word, last)
        await _expect_fault(tb, image, _fault(code, addr=addr))
        await tb.run(CASES["tall"])
    # An output area that would run past the top of the address space (it must not wrap).
    image, _ = tb.image(CASES["tiny"])
    tb.allow(image)
    top = 1 << tb.cfg.axi_addr_width
    image.window = (0, top - 1)
    image.out_addr, image.out_len = top - word, 64
    await _expect_fault(tb, image, _fault("OUT_WINDOW", addr=image.out_addr))
    await tb.run(CASES["tiny"])

    # -- the watchdog: input data that never comes ------------------------------------------
    await tb.write("WATCHDOG", 3_000)
    image, _ = tb.image(CASES["tall"])
    tb.allow(image)
    image.data_len //= 2
    error = await _expect_fault(tb, image, _fault("WATCHDOG", stall=None), max_polls=20_000)
    want = _bits("STALL", "DATA", "LOAD")
    assert error.fault["STALL"] & want == want, f"STALL {error.fault['STALL']:#x}"
    assert "load unit waits for input data" in str(error), error
    await tb.run(CASES["tall"])
    # ... and a write response that never comes: the run ends once it does.
    image, expected = tb.image(CASES["tiny"])
    tb.allow(image)
    b_channel = tb.dram.write_if.b_channel
    b_channel.set_pause_generator(itertools.repeat(True))
    await _start(tb, image)
    await _until(tb, "STATUS", "FAULT", polls=20_000)
    fault = await tb.read("FAULT")
    assert axi_host.field_value("FAULT", fault, "CODE") == csr.FAULT["WATCHDOG"], fault
    stall = await tb.read("STALL")
    assert axi_host.field_value("STALL", stall, "WRITE_BUS"), f"STALL {stall:#x}"
    assert not axi_host.field_value("STATUS", await tb.read("STATUS"), "DONE")
    b_channel.clear_pause_generator()
    b_channel.pause = False        # clearing the generator leaves its last value
    await _until(tb, "STATUS", "DONE")
    tb.log.info("a write response withheld: WATCHDOG, STALL %#x, DONE once it came", stall)
    await _soft_reset(tb)
    tb.backpressure(0.2)
    await tb.write("WATCHDOG", 1 << 20)
    await tb.run(CASES["tiny"])

    # -- irq: its causes, each enabled or not ------------------------------------------------
    for enable in (_bits("IRQ_ENABLE", "DONE", "FAULT"), _bits("IRQ_ENABLE", "FAULT")):
        await tb.write("IRQ_ENABLE", enable)
        image, expected = tb.image(CASES["tiny"])
        tb.allow(image)
        await _start(tb, image)
        await _until(tb, "STATUS", "DONE")
        assert await tb.read("IRQ_STATUS") == _bits("IRQ_STATUS", "DONE")
        assert dut.irq.value == bool(enable & _bits("IRQ_ENABLE", "DONE")), enable
    image, _ = tb.image(CASES["tiny"])
    tb.allow(image)
    image.window = (image.out_addr + word, image.span()[1])
    await _start(tb, image)
    await _until(tb, "STATUS", "DONE")
    assert await tb.read("IRQ_STATUS") == _bits("IRQ_STATUS", "FAULT")
    assert dut.irq.value == 1, "no irq for a fault"
    await _soft_reset(tb)
    assert await tb.read("IRQ_STATUS") == 0 and dut.irq.value == 0
    await tb.write("IRQ_ENABLE", _bits("IRQ_ENABLE", "DONE", "FAULT"))

    # -- START while BUSY is ignored and reported; the run in progress is unharmed ----------
    image, expected = tb.image(CASES["wide"])
    tb.allow(image)
    await _start(tb, image)
    await tb.write("CTRL", _bits("CTRL", "START"))
    await _until(tb, "STATUS", "START_IGNORED")
    await _until(tb, "STATUS", "DONE")
    assert axi_host.field_value("STATUS", await tb.read("STATUS"), "START_IGNORED")
    SEEN["START while BUSY"] += 1
    raw = bytes(tb.dram.read(image.out_addr, image.out_size))
    for name, tensor in expected.items():
        assert torch.equal(image.outputs(raw)[name], tensor), name
    await tb.run(CASES["main"])   # the driver's START clears it
    assert not axi_host.field_value("STATUS", await tb.read("STATUS"), "START_IGNORED")


@cocotb.test()
async def write_functional_coverage(dut):
    """Last: write what the tests above saw (:data:`SEEN`) where ``BERTACCEL_FUNCOV`` says."""
    path = os.environ.get("BERTACCEL_FUNCOV")
    if path:
        funcov.write({"AXI shell": SEEN}, Path(path))


@cocotb.test(skip="BERTACCEL_AXI_MEASURE" not in os.environ)
async def measure(dut):
    """Cycles of one GEMM (``BERTACCEL_AXI_MEASURE="m,k,n"``) through the shell, free-running;
    for comparison with the harness (``RtlDevice``). Not part of the suite."""
    tb = _tb(dut)
    await tb.reset()
    m, k, n = (int(x) for x in os.environ["BERTACCEL_AXI_MEASURE"].split(","))
    image, result = await tb.run(gemm_case(m, k, n), max_polls=10_000_000)
    tb.log.info("MEASURE %s", json.dumps({"m": m, "k": k, "n": n, "cycles": result.cycles,
                                          "instructions": image.prog_len,
                                          "data_beats": image.data_len,
                                          "out_beats": image.out_len,
                                          "read_bursts": tb.bursts["read"],
                                          "write_bursts": tb.bursts["write"]}))


# -- pytest side ----------------------------------------------------------------------------------

@pytest.mark.parametrize("fields, name, value", [
    ({"axi_data_width": 16}, "axi_data_width", "16"),
    ({"axi_data_width": 1024}, "axi_data_width", "1024"),
    ({"axi_data_width": 96}, "axi_data_width", "96"),
    ({"axi_data_width": 64.0}, "axi_data_width", "64.0"),
    ({"axi_addr_width": 31}, "axi_addr_width", "31"),
    ({"axi_addr_width": 65}, "axi_addr_width", "65"),
    ({"axi_addr_width": True}, "axi_addr_width", "True"),
    ({"axi_addr_width": "32"}, "axi_addr_width", "'32'"),
])
def test_axi_fields_are_validated(fields, name, value):
    with pytest.raises(ConfigError, match=name) as info:
        AccelConfig(**fields)
    assert value in str(info.value)


def test_axi_fields_name_only_shell_builds():
    cfg = preset("8x8")
    assert (cfg.axi_data_width, cfg.axi_addr_width) == (64, 32)
    assert "_ax" not in cfg.tag  # every existing build keeps its name
    wide = dataclasses.replace(cfg, axi_data_width=128, axi_addr_width=40)
    assert wide.tag == cfg.tag + "_ax128a40"
    assert AccelConfig.from_dict(json.loads(wide.to_json())) == wide
    for width in (32, 64, 128, 256, 512):
        AccelConfig(axi_data_width=width)
    for width in (32, 48, 64):
        AccelConfig(axi_addr_width=width)


def test_register_map_is_well_formed():
    names = [csr.port_name(reg, field) for reg in csr.REGISTERS for field in reg.fields]
    assert len(names) == len(set(names))
    assert csr.register("CTRL").field("START").access == csr.Access.W1P
    for name in ("PROG_ADDR_LO", "PROG_LEN", "DATA_ADDR_LO", "DATA_LEN", "OUT_ADDR_LO",
                 "OUT_LEN", "OUT_COUNT", "CYCLES_LO", "CYCLES_HI", "STATUS", "ID", "CONFIG0",
                 "FAULT"):
        csr.register(name)
    with pytest.raises(KeyError, match="no register 'NOPE'"):
        csr.register("NOPE")
    ident = csr.identity(preset("4x8"))
    assert axi_host.field_value("CONFIG0", ident["CONFIG0"], "COLS") == 8
    assert axi_host.field_value("ID", ident["ID"], "MAGIC") == csr.MAGIC


def test_docs_are_generated_from_the_register_map():
    root = Path(__file__).resolve().parents[2]
    result = subprocess.run([sys.executable, str(root / "docs" / "registers.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, ("docs out of date; run `python docs/registers.py`:\n"
                                    + result.stdout + result.stderr)
    text = (root / "docs" / "axi.md").read_text()
    for reg in csr.REGISTERS:
        assert f"`{reg.offset:#05x}` {reg.name}" in text


def test_check_identity_names_the_difference():
    cfg = CONFIGS["2x2-axi128"]
    values = csr.identity(cfg)
    axi_host.check_identity(cfg, values)
    with pytest.raises(axi_host.ShellError, match="AXI_DATA_WIDTH is 128, expected 64"):
        axi_host.check_identity(dataclasses.replace(cfg, axi_data_width=64), values)


def test_layout_round_trip():
    cfg = CONFIGS["4x8-axi64a40"]
    rng = random.Random(3)
    program, inputs = CASES["main"].make(cfg, rng)
    image = axi_host.layout(program, base=0x1_0000_0010, **inputs)
    word = cfg.axi_data_width // 8
    assert image.prog_addr == 0x1_0000_0040 and image.prog_addr % word == 0
    assert image.data_addr >= image.prog_addr + 16 * image.prog_len
    assert image.out_addr >= image.data_addr + cfg.lanes * image.data_len
    regs = image.registers()
    assert regs["PROG_ADDR_HI"] == 1 and regs["PROG_ADDR_LO"] == 0x40
    # Memory holds the instruction words little-endian and the packed beats lane by lane.
    prog = image.segments[0][1]
    assert int.from_bytes(prog[16:32], "little") == program.words()[1]
    beats = program.pack(**inputs)
    data = image.segments[1][1]
    assert list(data[:cfg.lanes]) == [v & 0xFF for v in beats[0].tolist()]
    # Decoding the output area gives back what a device produced.
    expected = SoftwareDevice(cfg).run(program, **inputs).outputs
    index = program.unpack_index
    flat = torch.cat([expected["c"].reshape(-1), torch.zeros(1, dtype=torch.int32)])
    out = flat[index.clamp(max=flat.numel() - 1)]
    raw = out.numpy().astype("<i4").tobytes()
    assert len(raw) == image.out_size
    assert torch.equal(image.outputs(raw)["c"], expected["c"])


def test_layout_refuses_bad_addresses():
    cfg = CONFIGS["2x2-axi128"]
    program, inputs = CASES["tiny"].make(cfg, random.Random(1))
    with pytest.raises(ValueError, match="data address must be a multiple of 16"):
        axi_host.layout(program, data_addr=0x1008, **inputs)
    with pytest.raises(ValueError, match="overlap"):
        axi_host.layout(program, prog_addr=0x1000, data_addr=0x1000, out_addr=0x2000, **inputs)
    with pytest.raises(ValueError, match="32-bit AXI address space"):
        axi_host.layout(program, base=(1 << 32) - 16, **inputs)
    with pytest.raises(ValueError, match="align"):
        axi_host.layout(program, align=8, **inputs)


def _source_key(cfg):
    """The config and every generator source: what the Verilog is made of, so that an
    unchanged build is not even converted again."""
    return source_key(cfg.to_json())


@pytest.fixture(scope="module", params=sorted(CONFIGS))
def shell_sim(request, sim_root):
    from bertaccel.hw.axi import AxiShell
    cfg = CONFIGS[request.param]
    sim = build(lambda: AxiShell(cfg), name="axi_shell",
                build_dir=sim_root / f"axi_shell-{cfg.tag}", source_key=_source_key(cfg),
                quick=True)
    return cfg, sim


def test_shell_rtl(shell_sim, tmp_path, request):
    cfg, sim = shell_sim
    seed = int(os.environ.get("BERTACCEL_SEED", "11"))  # logged by the testbench; replayable
    hits = request.config.rootpath / funcov.FOLDER / f"axi_shell-{cfg.tag}.json"
    run_cocotb(sim, MODULE, timeout=300, log_file=tmp_path / "sim.log",
               extra_env={"BERTACCEL_CONFIG": cfg.to_json(), "BERTACCEL_SEED": str(seed),
                          "BERTACCEL_FUNCOV": str(hits)})
