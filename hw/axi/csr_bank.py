"""The shell's AXI4-Lite register slave, built from the register map of :mod:`.csr`."""

from amaranth import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from . import csr
from .signature import AXI4LiteSignature, Resp

__all__ = ["CsrBank"]


class CsrBank(wiring.Component):
    """The AXI4-Lite slave and the registers of :data:`bertaccel.hw.axi.csr.REGISTERS`.

    Every field of the table becomes a port named by :func:`csr.port_name`: an ``RW`` field an
    output holding the value written (from its reset value), a ``W1P`` field a one-cycle output
    pulse, an ``RO`` field an input that reads return; ``CONST`` fields read their value for
    ``cfg``. Writes take the AW and W beats together; a read returns the next cycle. A read of
    an offset that holds no register, and a write to one that holds no writable field (a
    read-only register, or none), are answered SLVERR (a read with zero data), and the write
    changes nothing.

    Parameters
    ----------
    cfg : AccelConfig
    registers : sequence of csr.Register
        The map; :data:`csr.REGISTERS` by default.

    Members
    -------
    bus : In(AXI4LiteSignature(addr_width=csr.ADDR_WIDTH, data_width=csr.DATA_WIDTH))
    <field ports>
        As described above.
    """

    def __init__(self, cfg, registers=csr.REGISTERS):
        self.cfg = cfg
        self.registers = tuple(registers)
        members = {"bus": In(AXI4LiteSignature(addr_width=csr.ADDR_WIDTH,
                                               data_width=csr.DATA_WIDTH))}
        for reg in self.registers:
            for field in reg.fields:
                name = csr.port_name(reg, field)
                if field.access == csr.Access.RW:
                    members[name] = Out(field.width, init=field.reset)
                elif field.access == csr.Access.W1P:
                    members[name] = Out(1)
                elif field.access == csr.Access.RO:
                    members[name] = In(field.width)
        super().__init__(members)

    def port(self, register, field=None):
        """The port of ``register.field`` (or of the register's only field)."""
        reg = csr.register(register)
        return getattr(self, csr.port_name(reg, reg.field(field or register)))

    def elaborate(self, platform):
        m = Module()
        bus = self.bus
        by_name = {reg.name: reg for reg in self.registers}
        snapshotted = {reg.snapshot for reg in self.registers if reg.snapshot}

        # -- write: AW and W together, then B ------------------------------------------------------
        b_valid = Signal()
        b_resp = Signal(2)
        w_take = Signal()
        m.d.comb += [
            w_take.eq(bus.awvalid & bus.wvalid & ~b_valid),
            bus.awready.eq(w_take),
            bus.wready.eq(w_take),
            bus.bvalid.eq(b_valid),
            bus.bresp.eq(b_resp),
        ]
        byte_mask = Cat(bit.replicate(8) for bit in bus.wstrb)
        w_word = bus.awaddr[2:]
        writable = [reg.offset >> 2 for reg in self.registers if reg.writable]
        with m.If(w_take):
            m.d.sync += [b_valid.eq(1),
                         b_resp.eq(Mux(w_word.matches(*writable), Resp.OKAY, Resp.SLVERR))]
        with m.Elif(bus.bready):
            m.d.sync += b_valid.eq(0)
        for reg in self.registers:
            hit = w_take & (w_word == reg.offset >> 2)
            for field in reg.fields:
                port = getattr(self, csr.port_name(reg, field), None)
                span = slice(field.lsb, field.lsb + field.width)
                if field.access == csr.Access.RW:
                    mask = byte_mask[span]
                    with m.If(hit):
                        m.d.sync += port.eq((port & ~mask) | (bus.wdata[span] & mask))
                elif field.access == csr.Access.W1P:
                    # Registered, so the pulse does not depend combinationally on the bus.
                    m.d.sync += port.eq(hit & bus.wdata[field.lsb]
                                        & bus.wstrb[field.lsb // 8])

        # -- read: the addressed register one cycle after AR -------------------------------------
        r_valid = Signal()
        r_data = Signal(csr.DATA_WIDTH)
        r_resp = Signal(2)
        r_take = Signal()
        m.d.comb += [
            r_take.eq(bus.arvalid & ~r_valid),
            bus.arready.eq(~r_valid),
            bus.rvalid.eq(r_valid),
            bus.rdata.eq(r_data),
            bus.rresp.eq(r_resp),
        ]
        r_word = bus.araddr[2:]
        shadows = {}
        for name in snapshotted:
            for field in by_name[name].fields:
                if field.access == csr.Access.RO:
                    shadows[name, field.name] = Signal(
                        field.width, name=f"{csr.port_name(by_name[name], field)}_shadow")

        def value(reg):
            word = Signal(csr.DATA_WIDTH, name=f"{reg.name.lower()}_value")
            for field in reg.fields:
                span = slice(field.lsb, field.lsb + field.width)
                if field.access == csr.Access.CONST:
                    m.d.comb += word[span].eq(field.value(self.cfg))
                elif (reg.name, field.name) in shadows:
                    m.d.comb += word[span].eq(shadows[reg.name, field.name])
                elif field.access in (csr.Access.RO, csr.Access.RW):
                    m.d.comb += word[span].eq(getattr(self, csr.port_name(reg, field)))
            return word

        values = {reg.name: value(reg) for reg in self.registers}
        with m.If(r_take):
            m.d.sync += [r_valid.eq(1), r_resp.eq(Resp.OKAY)]
            with m.Switch(r_word):
                for reg in self.registers:
                    with m.Case(reg.offset >> 2):
                        m.d.sync += r_data.eq(values[reg.name])
                        if reg.snapshot:
                            target = by_name[reg.snapshot]
                            for field in target.fields:
                                if (target.name, field.name) in shadows:
                                    m.d.sync += shadows[target.name, field.name].eq(
                                        getattr(self, csr.port_name(target, field)))
                with m.Default():
                    m.d.sync += [r_data.eq(0), r_resp.eq(Resp.SLVERR)]
        with m.Elif(bus.rready):
            m.d.sync += r_valid.eq(0)
        return m


