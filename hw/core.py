"""The accelerator core: controller, units, memories and token channels."""

from amaranth import Module, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .checker import PC_WIDTH
from .controller import Controller, TokenChannel
from .execute import ExecuteUnit
from .isa import Instr
from .legal import FAULT_WIDTH
from .load import LoadUnit
from .memory import Accumulator, ParamMemory, Scratchpad
from .store import StoreUnit
from .watchdog import Wait

__all__ = ["BertAccelCore"]


class BertAccelCore(wiring.Component):
    """The bertaccel core, with a stream interface to the host.

    Instructions arrive on ``i_instr`` and operand data on ``i_data``; accumulator rows leave on
    ``o_data``. All three are ``amaranth.lib.stream`` interfaces with AXI-Stream handshake rules,
    so a DMA engine or an AXI shell can wrap the core without knowing its insides.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    i_instr : In(stream.Signature(isa.Instr))
    i_data : In(stream.Signature(ArrayLayout(signed(in_width), cfg.lanes)))
    o_data : Out(stream.Signature(ArrayLayout(signed(acc_width), cfg.cols)))
    i_start : In(1)
        A program begins with the next instruction (a one-cycle pulse between programs): the
        instruction checker reads it from its start.
    o_busy : Out(1)
        High while an instruction is queued or any unit is working.
    o_error : Out(1)
        Sticky: an instruction failed a check of :mod:`bertaccel.hw.legal`; nothing from it on
        runs (later instructions are taken and dropped).
    o_fault : Out(FAULT_WIDTH)
        Which check: a :class:`~bertaccel.hw.legal.Fault` (0 while ``o_error`` is low).
    o_fault_pc : Out(PC_WIDTH)
        The index of that instruction in its program (since the last ``i_start``, or reset).
    o_progress : Out(1)
        Something moved this cycle: a beat on one of the three streams, or a unit took an
        instruction (what a :class:`~bertaccel.hw.watchdog.Watchdog` counts).
    o_wait : Out(Wait)
        What the core waits for this cycle (:data:`~bertaccel.hw.watchdog.Wait`).
    """

    def __init__(self, cfg):
        self.cfg = cfg
        super().__init__({
            "i_instr": In(stream.Signature(Instr)),
            "i_data":  In(stream.Signature(data.ArrayLayout(signed(cfg.in_width), cfg.lanes))),
            "o_data":  Out(stream.Signature(data.ArrayLayout(signed(cfg.acc_width), cfg.cols))),
            "i_start": In(1),
            "o_busy":  Out(1),
            "o_error": Out(1),
            "o_fault": Out(FAULT_WIDTH),
            "o_fault_pc": Out(PC_WIDTH),
            "o_progress": Out(1),
            "o_wait": Out(Wait),
        })

    def elaborate(self, platform):
        cfg = self.cfg
        m = Module()
        m.submodules.controller = controller = Controller(cfg)
        m.submodules.load = load = LoadUnit(cfg)
        m.submodules.execute = execute = ExecuteUnit(cfg)
        m.submodules.store = store = StoreUnit(cfg)
        m.submodules.spad_a = spad_a = Scratchpad(lanes=cfg.rows, width=cfg.in_width,
                                                  depth=cfg.spad_depth)
        m.submodules.spad_b = spad_b = Scratchpad(lanes=cfg.cols, width=cfg.in_width,
                                                  depth=cfg.spad_depth, aux_read=True)
        m.submodules.pmem = pmem = ParamMemory(cfg)
        m.submodules.acc = acc = Accumulator(cfg)
        m.submodules.l2e = l2e = TokenChannel()
        m.submodules.e2l = e2l = TokenChannel()
        m.submodules.e2s = e2s = TokenChannel()
        m.submodules.s2e = s2e = TokenChannel()

        wiring.connect(m, wiring.flipped(self.i_instr), controller.i_instr)
        wiring.connect(m, controller.o_load, load.i_instr)
        wiring.connect(m, controller.o_exec, execute.i_instr)
        wiring.connect(m, controller.o_store, store.i_instr)
        m.d.comb += [controller.i_start.eq(self.i_start),
                     load.i_head.eq(controller.o_load_head),
                     execute.i_head.eq(controller.o_exec_head),
                     store.i_head.eq(controller.o_store_head)]

        wiring.connect(m, wiring.flipped(self.i_data), load.i_data)
        wiring.connect(m, load.spad_a, spad_a.wr)
        wiring.connect(m, load.spad_b, spad_b.wr)
        wiring.connect(m, load.pmem, pmem.wr)
        wiring.connect(m, execute.spad_a, spad_a.rd)
        wiring.connect(m, execute.spad_b, spad_b.rd)
        wiring.connect(m, execute.acc_rd, acc.rmw_rd)
        wiring.connect(m, execute.acc_wr, acc.wr)
        wiring.connect(m, store.acc, acc.st_rd)
        wiring.connect(m, store.pmem, pmem.rd)
        wiring.connect(m, store.res, spad_b.rd_aux)
        wiring.connect(m, store.o_data, wiring.flipped(self.o_data))

        wiring.connect(m, load.to_exec, l2e.producer)
        wiring.connect(m, execute.from_load, l2e.consumer)
        wiring.connect(m, execute.to_load, e2l.producer)
        wiring.connect(m, load.from_exec, e2l.consumer)
        wiring.connect(m, execute.to_store, e2s.producer)
        wiring.connect(m, store.from_exec, e2s.consumer)
        wiring.connect(m, store.to_exec, s2e.producer)
        wiring.connect(m, execute.from_store, s2e.consumer)

        m.d.comb += [
            self.o_busy.eq(controller.o_busy | load.o_busy | execute.o_busy | store.o_busy),
            self.o_error.eq(controller.o_error),
            self.o_fault.eq(controller.o_fault),
            self.o_fault_pc.eq(controller.o_fault_pc),
        ]
        self._watch(m, controller, load, execute, store)
        return m

    def _watch(self, m, controller, load, execute, store):
        """``o_progress`` and ``o_wait``."""
        def moved(stream):
            return stream.valid & stream.ready
        m.d.comb += [
            self.o_progress.eq(moved(self.i_instr) | moved(self.i_data) | moved(self.o_data)
                               | moved(controller.o_load) | moved(controller.o_exec)
                               | moved(controller.o_store)),
            self.o_wait.instr.eq(self.i_instr.ready & ~self.i_instr.valid),
            self.o_wait.data.eq(self.i_data.ready & ~self.i_data.valid),
            self.o_wait.room.eq(self.o_data.valid & ~self.o_data.ready),
            self.o_wait.load.eq(load.o_busy),
            self.o_wait.execute.eq(execute.o_busy),
            self.o_wait.store.eq(store.o_busy),
        ]
