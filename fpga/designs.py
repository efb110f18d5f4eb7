"""What the flow places and routes: a part of the design behind registered, pin-reduced ports.

BertAccelCore is the design; its streams are what an AXI shell or a UART bridge will wrap. But
its ports do not fit on the pins of any ECP5 package (an 8x8 core has 457: 128 instruction bits,
64 data bits, 256 result bits and the handshakes; a CABGA381 has 197 user I/Os), and nextpnr's
``--out-of-context`` mode leaves the clock off the global network, which would change the very
timing we measure. So :class:`SynthTop` puts the core behind registered, pin-reduced ports: every
input bit comes from a shift register fed by 8 pins, and every output bit reaches a pin through a
register and an XOR fold. No input of the core is constant and every output is observed, so
yosys can optimise nothing of the core away; every port is registered, so the paths nextpnr
reports are the core's own (and the wrapper's one XOR level, which is never critical). The
wrapper costs about ``(cols * 32 + 128 + lanes * 8)`` flip-flops.
"""

import math

from amaranth import Cat, Module, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..hw.controller import Controller, TokenChannel
from ..hw.core import BertAccelCore
from ..hw.execute import ExecuteUnit
from ..hw.memory import Accumulator, Scratchpad
from ..hw.mesh import SystolicMesh
from ..hw.store import StoreUnit
from .errors import SynthError
from .handshakes import EpilogueHandshakes

__all__ = ["DESIGNS", "check_design", "SynthTop", "TOP_NAME"]

#: What :class:`SynthTop` can put behind its pins: the whole core (the default and the
#: figure of record), the PE array alone, the execute unit with the memories it uses, the
#: store unit (with its epilogue) behind the controller, or the same with the epilogue's
#: handshakes only (:class:`~bertaccel.fpga.handshakes.EpilogueHandshakes`).
DESIGNS = ("core", "mesh", "datapath", "store", "handshakes")


def check_design(design):
    """Raise :class:`~bertaccel.fpga.errors.SynthError` unless ``design`` is one of
    :data:`DESIGNS`."""
    if design not in DESIGNS:
        raise SynthError(f"unknown design {design!r}; designs are {', '.join(DESIGNS)}")


class SynthTop(wiring.Component):
    """A part of the design behind registered, pin-reduced ports, for place and route.

    Only for measuring a design on an FPGA (see the module docstring); it has no protocol.
    Every cycle ``pins_in`` shifts into a register as wide as all the design's inputs together,
    which drives them (payloads and handshakes alike). Every output is registered, and the
    registered outputs are folded by XOR onto ``pins_out`` (bit *j* is the XOR of every output
    bit *i* with *i* mod 8 == *j*, through a tree of registered XORs of four bits). So no input
    is constant, every output is observed, and every path nextpnr reports starts and ends at a
    flip-flop of the design or of this wrapper. Around the core and the datapath the outputs
    are registered three times (one register may move into a block RAM, see below).

    For the PE array and the datapath each stage of the input register also takes the XOR of
    its neighbour, so that no two inputs are delayed copies of one another. With a plain shift
    register they are, and so are many of the array's own pipeline registers, which are delayed
    copies of its inputs: yosys merges 1,245 of the 8x8 array's 7,029 flip-flops into others,
    and the merged registers fan out across the array. The core's inputs enter its queues
    first, where nothing merges (the 2x2 core maps to the same flip-flop count either way), so
    its wrapper stays the plain shift register.

    Parameters
    ----------
    cfg : AccelConfig
    design : str
        ``"core"``: :class:`~bertaccel.hw.core.BertAccelCore`. ``"mesh"``: the
        :class:`~bertaccel.hw.mesh.SystolicMesh` alone (the PE array). ``"datapath"``: the
        :class:`~bertaccel.hw.execute.ExecuteUnit` with both scratchpads and the accumulator;
        the scratchpads' write ports, the accumulator's store port (always enabled, as in the
        core) and the token counts are driven from the pins as above. ``"store"``: the
        :class:`~bertaccel.hw.controller.Controller` and the
        :class:`~bertaccel.hw.store.StoreUnit` (with its epilogue) joined as in the core, with
        the token channels between the store and execute units; the memories' read data, the
        execute unit's side of the channels and the load and execute queues' ``ready`` come
        from the pins (those queues' payloads are not observed, so yosys removes them). It
        holds the handshakes between the store queue, the store unit and the epilogue.
        ``"handshakes"``: the same with
        :class:`~bertaccel.fpga.handshakes.EpilogueHandshakes` for the epilogue (its intake
        and outlet, a delay line between them): the fast timing check.

    Members
    -------
    pins_in : In(8)
    pins_out : Out(8)
    """

    PINS = 8

    pins_in: In(PINS)
    pins_out: Out(PINS)

    def __init__(self, cfg, design="core"):
        check_design(design)
        self.cfg = cfg
        self.design = design
        super().__init__()

    def _design(self, m):
        """Instantiate the design; return (its inputs, its outputs) as lists of values."""
        cfg = self.cfg
        if self.design == "core":
            m.submodules.core = core = BertAccelCore(cfg)
            return ([core.i_instr.payload, core.i_instr.valid, core.i_data.payload,
                     core.i_data.valid, core.o_data.ready],
                    [core.o_data.payload, core.o_data.valid, core.i_instr.ready,
                     core.i_data.ready, core.o_busy, core.o_error])
        if self.design == "mesh":
            m.submodules.mesh = mesh = SystolicMesh(cfg)
            return ([mesh.i_a, mesh.i_bank, mesh.i_w, mesh.i_w_en, mesh.i_w_bank,
                     mesh.i_w_row], [mesh.o_c])
        if self.design in ("store", "handshakes"):
            return self._store(m)
        m.submodules.execute = execute = ExecuteUnit(cfg)
        m.submodules.spad_a = spad_a = Scratchpad(lanes=cfg.rows, width=cfg.in_width,
                                                  depth=cfg.spad_depth)
        m.submodules.spad_b = spad_b = Scratchpad(lanes=cfg.cols, width=cfg.in_width,
                                                  depth=cfg.spad_depth)
        m.submodules.acc = acc = Accumulator(cfg)
        wiring.connect(m, execute.spad_a, spad_a.rd)
        wiring.connect(m, execute.spad_b, spad_b.rd)
        wiring.connect(m, execute.acc_rd, acc.rmw_rd)
        wiring.connect(m, execute.acc_wr, acc.wr)
        # The accumulator's store port is always enabled, as the store unit drives it; an
        # enable from the pins would give the port's address register a hold multiplexer that
        # the core does not have (on the 8x8 datapath, the critical path on two seeds).
        m.d.comb += acc.st_rd.en.eq(1)
        return ([execute.i_instr.payload, execute.i_instr.valid, execute.i_head,
                 execute.from_load.avail, execute.from_store.avail,
                 execute.to_load.room, execute.to_load.room2, execute.to_load.popped,
                 execute.to_store.room, execute.to_store.room2, execute.to_store.popped,
                 spad_a.wr.addr, spad_a.wr.data, spad_a.wr.en,
                 spad_b.wr.addr, spad_b.wr.data, spad_b.wr.en, acc.st_rd.addr],
                [execute.i_instr.ready, execute.from_load.pop, execute.from_store.pop,
                 execute.to_load.push, execute.to_store.push, execute.o_busy, acc.st_rd.data])

    def _store(self, m):
        """The controller and the store unit, joined as in the core (``"store"``,
        ``"handshakes"``)."""
        cfg = self.cfg
        m.submodules.controller = controller = Controller(cfg)
        m.submodules.store = store = StoreUnit(
            cfg, **({"epilogue": EpilogueHandshakes} if self.design == "handshakes" else {}))
        m.submodules.e2s = e2s = TokenChannel()
        m.submodules.s2e = s2e = TokenChannel()
        wiring.connect(m, controller.o_store, store.i_instr)
        wiring.connect(m, store.from_exec, e2s.consumer)
        wiring.connect(m, store.to_exec, s2e.producer)
        m.d.comb += store.i_head.eq(controller.o_store_head)
        return ([controller.i_instr.payload, controller.i_instr.valid,
                 controller.o_load.ready, controller.o_exec.ready,
                 store.acc.data, store.pmem.data, store.res.data, store.o_data.ready,
                 e2s.producer.push, s2e.consumer.pop],
                [controller.i_instr.ready, controller.o_load.valid, controller.o_exec.valid,
                 controller.o_error,
                 controller.o_busy, store.acc.addr, store.pmem.addr, store.res.addr,
                 store.o_data.payload, store.o_data.valid, store.o_busy,
                 e2s.producer.popped, s2e.consumer.avail])

    def elaborate(self, platform):
        m = Module()
        inputs, outputs = self._design(m)
        inputs = Cat(value.as_value() if hasattr(value, "as_value") else value
                     for value in inputs)
        outputs = Cat(value.as_value() if hasattr(value, "as_value") else value
                      for value in outputs)

        width = math.ceil(len(inputs) / self.PINS) * self.PINS
        chain = Signal(width)
        shifted = chain[:-self.PINS]
        if self.design != "core":
            shifted = shifted ^ chain[1:width - self.PINS + 1]
        m.d.sync += chain.eq(Cat(self.pins_in, shifted))
        m.d.comb += inputs.eq(chain[:len(inputs)])

        result = Signal(len(outputs), reset_less=True)
        if self.design == "mesh":
            m.d.sync += result.eq(outputs)
        else:
            # A block RAM's read data can be an output (the datapath's accumulator store port):
            # the ECP5 flow moves the first register into the RAM (fpga/ramreg.py), and the
            # second is a fabric copy, as in the store unit, which writes the copy to its FIFO;
            # the third keeps the fold below from starting at the copy.
            in_ram = Signal(len(outputs), reset_less=True)
            copy = Signal(len(outputs), reset_less=True)
            m.d.sync += [in_ram.eq(outputs), copy.eq(in_ram), result.eq(copy)]
        # The fold is a tree of registered XORs of up to four bits each (one LUT), so that it
        # does not limit what it observes: an unregistered fold of the datapath's 300 output
        # bits is a 7.1 ns path of four LUTs.
        for j in range(self.PINS):
            bits = [result[i] for i in range(j, len(result), self.PINS)]
            level = 0
            while len(bits) > 4:
                folded = [Signal(name=f"fold{j}_l{level}_{g}", reset_less=True)
                          for g in range(0, len(bits), 4)]
                m.d.sync += [reg.eq(Cat(*bits[4 * g:4 * g + 4]).xor())
                             for g, reg in enumerate(folded)]
                bits, level = folded, level + 1
            m.d.sync += self.pins_out[j].eq(Cat(*bits).xor())
        return m


#: The Verilog module name of the synthesis top.
TOP_NAME = "bertaccel_synth_top"
