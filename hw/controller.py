"""Instruction dispatch and the token channels between the units."""

from amaranth import Cat, Module, Signal
from amaranth.hdl import Assert
from amaranth.lib import stream, wiring
from amaranth.lib.wiring import In, Out

from .checker import PC_WIDTH, Checker
from .formal import is_formal
from .isa import (TOKEN_MAX, TOKEN_WIDTH, Instr, LoadHead, MatmulHead, Opcode, StoreHead,
                  load_head, matmul_head, store_head)
from .legal import FAULT_WIDTH
from .queue import Queue

__all__ = ["TokenProducer", "TokenConsumer", "TokenChannel", "Controller"]


class TokenProducer(wiring.Signature):
    """A unit's side of a channel it pushes into: whether there is room.

    ``room`` (the channel's count is not ``TOKEN_MAX``) and ``room2`` (it is below
    ``TOKEN_MAX - 1``: room for two) are registers kept beside the count, so a unit's accept
    logic starts from them rather than from compares of the count (a timing choice, as
    ``avail``). ``popped`` is the consumer's pops so far, modulo ``2**TOKEN_WIDTH`` (the count
    is the pushes less the pops), for a unit that counts its pushes ahead of making them.
    """

    def __init__(self):
        super().__init__({"push": Out(1), "room": In(1), "room2": In(1),
                          "popped": In(TOKEN_WIDTH)})


class TokenConsumer(wiring.Signature):
    """A unit's side of a channel it pops from: a token is there while ``avail`` is set.

    ``avail`` is a register (``count != 0`` kept beside the count), so a unit's accept logic
    starts from it rather than from a compare of the count (a timing choice).
    """

    def __init__(self):
        super().__init__({"pop": Out(1), "avail": In(1)})


class TokenChannel(wiring.Component):
    """A counting semaphore between two units (TVM VTA's dependence queues, as counters).

    Units only push when ``count`` leaves room and only pop when it is nonzero, so the count
    stays within 0 .. TOKEN_MAX.

    Members
    -------
    producer : In(TokenProducer())
    consumer : In(TokenConsumer())

    Under :data:`~bertaccel.hw.formal.FORMAL` the channel asserts that its flags agree with
    its count and drives ``count`` (not a port) for a harness's model.
    """

    producer: In(TokenProducer())
    consumer: In(TokenConsumer())

    def __init__(self):
        super().__init__()
        self.count = Signal(TOKEN_WIDTH)

    #: A push in cycle t is counted (``avail``, a register) from cycle t + DELAY.
    DELAY = 1

    def elaborate(self, platform):
        m = Module()
        # Timing: push and pop come late in the cycle (each from its unit's accept logic). The
        # count is the pushes less the pops (modulo 2**TOKEN_WIDTH: it never exceeds
        # TOKEN_MAX), each counted in a register that only its own side moves, so no register
        # waits for both units' decisions but the flags, which only select between values
        # computed beside them (`avail` between set and `count != 1`).
        pushed = Signal(TOKEN_WIDTH)
        popped = Signal(TOKEN_WIDTH)
        count = Signal(TOKEN_WIDTH)
        avail = Signal()
        room = Signal(init=1)
        room2 = Signal(init=1)
        m.d.comb += [count.eq(pushed - popped), self.producer.popped.eq(popped),
                     self.consumer.avail.eq(avail),
                     self.producer.room.eq(room), self.producer.room2.eq(room2)]
        with m.If(self.producer.push):
            m.d.sync += pushed.eq(pushed + 1)
        with m.If(self.consumer.pop):
            m.d.sync += popped.eq(popped + 1)
        with m.If(self.producer.push & ~self.consumer.pop):
            m.d.sync += [avail.eq(1), room.eq(count != TOKEN_MAX - 1),
                         room2.eq(count < TOKEN_MAX - 2)]
        with m.Elif(self.consumer.pop & ~self.producer.push):
            m.d.sync += [avail.eq(count != 1), room.eq(1), room2.eq(room)]
        if is_formal(platform):
            m.d.comb += [self.count.eq(count), Assert(avail == (count != 0)),
                         Assert(room == (count != TOKEN_MAX)),
                         Assert(room2 == (count < TOKEN_MAX - 1))]
        return m


assert TOKEN_MAX == (1 << TOKEN_WIDTH) - 1


class Controller(wiring.Component):
    """Decodes the instruction stream and queues each instruction for its unit.

    LOAD goes to the load queue, MATMUL to the execute queue, SET and STORE to the store queue; each
    queue holds ``cfg.queue_depth`` instructions and the stream stalls while the one it needs
    is full. Dispatch is in program order, which together with the token rules makes every
    legal program deadlock-free. A :class:`~bertaccel.hw.checker.Checker` checks every
    instruction taken against the rules of :mod:`bertaccel.hw.legal`; the first that fails one
    sets the sticky ``o_error``, ``o_fault`` and ``o_fault_pc``, and from then on the queues
    offer nothing and every instruction is accepted and dropped: the units finish what they
    started and the core goes idle.

    Parameters
    ----------
    cfg : AccelConfig
    checks : set of Fault, optional
        The :class:`~bertaccel.hw.checker.Checker`'s rules (every one by default).

    Members
    -------
    i_instr : In(stream.Signature(Instr))
    o_load, o_exec, o_store : Out(stream.Signature(Instr))
    o_load_head : Out(LoadHead)
        What the LOAD at ``o_load``'s head is (:func:`~.isa.load_head`: whether it moves no
        beat, one beat), decided as ``o_store_head`` is.
    o_exec_head : Out(MatmulHead)
        What the MATMUL at ``o_exec``'s head is (:func:`~.isa.matmul_head`: whether it streams
        no row, at most one), decided as ``o_store_head`` is.
    o_store_head : Out(StoreHead)
        What the STORE at ``o_store``'s head is (:func:`~.isa.store_head`: whether it moves
        nothing, is two-pass, has one or two rows, one strip; meaningless for a SET). Timing:
        it is decided as the instruction is queued and kept beside it, so the store unit's
        accept and its registers start from registers, not from compares of 16-bit fields.
    i_start : In(1)
        A program begins: the checker reads it from its start (index 0, no SETs, no tokens).
    o_error : Out(1)
    o_fault : Out(FAULT_WIDTH)
        The :class:`~bertaccel.hw.legal.Fault` of the first illegal instruction (0: none).
    o_fault_pc : Out(PC_WIDTH)
        Its index in the program (the instructions since the last ``i_start``, or reset).
    o_busy : Out(1)
        Some queue is not empty (and no instruction failed its checks), or the checker is
        still checking an instruction.
    """

    def __init__(self, cfg, *, checks=None):
        self._cfg = cfg
        self._checks = checks
        super().__init__({
            "i_instr": In(stream.Signature(Instr)),
            "o_load":  Out(stream.Signature(Instr)),
            "o_exec":  Out(stream.Signature(Instr)),
            "o_store": Out(stream.Signature(Instr)),
            "o_load_head": Out(LoadHead),
            "o_exec_head": Out(MatmulHead),
            "o_store_head": Out(StoreHead),
            "i_start": In(1),
            "o_error": Out(1),
            "o_fault": Out(FAULT_WIDTH),
            "o_fault_pc": Out(PC_WIDTH),
            "o_busy":  Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        m.submodules.checker = checker = Checker(self._cfg, faults=self._checks)
        error = checker.error
        queues = {}
        body = self.i_instr.payload.body
        extra = {"load": [load_head(body.load)], "exec": [matmul_head(body.matmul)],
                 "store": [store_head(body.store)]}
        # Timing: each entry is the flags in `extra`, then the instruction, so its opcode and
        # dependence flags, which the units' accept logic decides from, are among the queue's
        # `fast` bits: registers with no multiplexer after them (hw/queue.py).
        for name in ("load", "exec", "store"):
            n_extra = sum(len(value) for value in extra[name])
            queue = Queue(width=n_extra + Instr.size, depth=self._cfg.queue_depth,
                          fast=slice(0, n_extra + Instr["body"].offset))
            m.submodules[f"{name}_queue"] = queue
            queues[name] = queue
            out = getattr(self, f"o_{name}")
            m.d.comb += [
                out.payload.eq(queue.r_data[n_extra:]),
                out.valid.eq(queue.r_rdy & ~error),
                queue.r_en.eq(out.ready),
                queue.w_data.eq(Cat(*extra[name], self.i_instr.payload)),
            ]
        m.d.comb += [self.o_load_head.eq(queues["load"].r_data[:LoadHead.size]),
                     self.o_exec_head.eq(queues["exec"].r_data[:MatmulHead.size]),
                     self.o_store_head.eq(queues["store"].r_data[:StoreHead.size])]
        route = {Opcode.LOAD: "load", Opcode.MATMUL: "exec", Opcode.STORE: "store",
                 Opcode.SET: "store"}

        m.d.comb += [self.o_error.eq(error), self.o_fault.eq(checker.fault),
                     self.o_fault_pc.eq(checker.pc), checker.instr.eq(self.i_instr.payload),
                     checker.restart.eq(self.i_start),
                     checker.take.eq(self.i_instr.valid & self.i_instr.ready & ~error)]
        opcode = self.i_instr.payload.opcode
        with m.If(error):
            m.d.comb += self.i_instr.ready.eq(1)
        with m.Else():
            with m.Switch(opcode):
                for op, unit in route.items():
                    queue = queues[unit]
                    with m.Case(op):
                        m.d.comb += [
                            self.i_instr.ready.eq(queue.w_rdy),
                            queue.w_en.eq(self.i_instr.valid),
                        ]
                with m.Default():       # taken and dropped: the checker faults it
                    m.d.comb += self.i_instr.ready.eq(1)

        busy = Cat(q.level != 0 for q in queues.values()).any()
        m.d.comb += self.o_busy.eq((busy & ~error) | checker.busy)
        return m
