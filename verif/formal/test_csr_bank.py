"""Formal proof of the AXI4-Lite slave :class:`~bertaccel.hw.axi.csr_bank.CsrBank`.

The master is free but keeps AXI's rules (assumed): a valid stays up, its payload unchanged,
until its ready. Under them, with any requests and resets in any cycles, the proof shows that
the slave answers every request exactly once and never without one (a model counts the
requests taken less the responses given: it is 1 exactly while ``bvalid``, or ``rvalid``, is
up, and never above 1), that it keeps the rules on its side (a response stays valid, its
data and status unchanged, until ready), that AW and W are taken together, and that a
response is OKAY exactly where the map has a register at the offset (a write: one with a
writable field), SLVERR elsewhere. k-induction.
"""

from amaranth import Elaboratable, Module, Mux, Signal
from amaranth.asserts import AnySeq
from amaranth.hdl import Assert, Assume, Cover

from bertaccel.hw.axi import csr
from bertaccel.hw.axi.csr_bank import CsrBank
from bertaccel.hw.axi.signature import Resp
from bertaccel.hw.config import preset

from verif.tb.formal import check


def _held(m, valid, ready, payload, rule):
    """``rule`` (Assert or Assume): once ``valid`` is up without ``ready``, next cycle it is
    still up with the same ``payload``."""
    waiting = Signal(name=f"{valid.name}_waiting")
    before = Signal(len(payload), name=f"{valid.name}_before")
    m.d.sync += [waiting.eq(valid & ~ready), before.eq(payload)]
    m.d.comb += rule(~waiting | (valid & (payload == before)))


class CsrBankProperties(Elaboratable):
    def __init__(self):
        self.bank = CsrBank(preset("2x2"))

    def elaborate(self, platform):
        m = Module()
        m.submodules.bank = bank = self.bank
        bus = bank.bus
        for name in ("awaddr", "awvalid", "wdata", "wstrb", "wvalid", "bready", "araddr",
                     "arvalid", "rready", "awprot", "arprot"):
            port = getattr(bus, name)
            m.d.comb += port.eq(AnySeq(len(port)))
        for name, member in bank.signature.members.items():
            if name != "bus" and member.flow.name == "In":
                port = getattr(bank, name)
                m.d.comb += port.eq(AnySeq(len(port)))
        _held(m, bus.awvalid, bus.awready, bus.awaddr, Assume)
        _held(m, bus.wvalid, bus.wready, bus.wdata, Assume)
        _held(m, bus.arvalid, bus.arready, bus.araddr, Assume)
        _held(m, bus.bvalid, bus.bready, bus.bresp, Assert)
        _held(m, bus.rvalid, bus.rready, bus.rdata, Assert)
        writes, reads = Signal(2), Signal(2)
        aw_taken = bus.awvalid & bus.awready
        w_taken = bus.wvalid & bus.wready
        ar_taken = bus.arvalid & bus.arready
        m.d.sync += [writes.eq(writes + w_taken - (bus.bvalid & bus.bready)),
                     reads.eq(reads + ar_taken - (bus.rvalid & bus.rready))]
        # The response each request must get, from the map.
        mapped = [reg.offset >> 2 for reg in csr.REGISTERS]
        writable = [reg.offset >> 2 for reg in csr.REGISTERS if reg.writable]
        b_want, r_want = Signal(2), Signal(2)
        with m.If(w_taken):
            m.d.sync += b_want.eq(Mux(bus.awaddr[2:].matches(*writable), Resp.OKAY,
                                      Resp.SLVERR))
        with m.If(ar_taken):
            m.d.sync += r_want.eq(Mux(bus.araddr[2:].matches(*mapped), Resp.OKAY, Resp.SLVERR))
        m.d.comb += [
            Assert(writes == bus.bvalid), Assert(reads == bus.rvalid),
            Assert(aw_taken == w_taken),
            Assert(~bus.bvalid | (bus.bresp == b_want)),
            Assert(~bus.rvalid | (bus.rresp == r_want)),
            Assert(~bus.rvalid | (bus.rresp == Resp.OKAY) | (bus.rdata == 0)),
            Cover(bus.bvalid & (bus.bresp == Resp.SLVERR)),
            Cover(bus.rvalid & (bus.rresp == Resp.SLVERR)),
            Cover(bus.bvalid & bus.bready), Cover(bus.rvalid & ~bus.rready),
            Cover(bus.rvalid & (bus.rdata != 0)), Cover(aw_taken & ar_taken),
        ]
        return m


def test_csr_bank_answers_every_request_once(tmp_path):
    result = check(CsrBankProperties(), name="csr_bank", workdir=tmp_path, depth=3, cover=6)
    assert result.proven and result.covered, result.summary
