"""The execute unit: its two stages, the mesh and the accumulator path, and the token room."""

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..controller import TokenConsumer, TokenProducer
from ..isa import TOKEN_WIDTH, Instr, MatmulHead
from ..mesh import SystolicMesh
from .accumulate import AccumulatePath
from .preload import PreloadStage
from .read import OPERAND_DELAY
from .stream import StreamStage

__all__ = ["ExecuteUnit"]


class ExecuteUnit(wiring.Component):
    """Runs MATMUL instructions in order, two at a time in a two-stage pipeline.

    *Preload* stage (:class:`PreloadStage`): the instruction waits for its tokens, pops, then
    reads the ``rows`` weight rows ``spad_b[b_addr]`` .. ``spad_b[b_addr + rows - 1]``, one a
    cycle, and the mesh writes row *j* into row *j* of the instruction's weight bank (the weight
    wave of :class:`SystolicMesh`). The stage takes the next instruction in the cycle it hands
    this one over, so weight reads run back to back from one MATMUL to the next.

    *Stream* stage (:class:`StreamStage`): one row ``spad_a[a_addr + m]`` a cycle is issued,
    read and registered, and enters the mesh :attr:`OPERAND_DELAY` cycles after its issue
    (weight rows likewise); ``cfg.mesh_latency`` cycles later its ``cols`` sums leave it, and the
    accumulator path (:class:`AccumulatePath`) adds them to the old row of
    ``acc[acc_addr + m]`` when ``accumulate`` is set and writes them there :attr:`WRITE_DELAY`
    cycles later. The old row is read :attr:`READ_AHEAD` cycles before the sums arrive; the
    writes that read cannot see (the :attr:`FORWARDED` rows before it, of which the one right
    before never writes its row) are forwarded. The execute->load token is pushed with the last
    operand row's issue (the load unit writes two cycles later at the earliest, after that
    row's read); the execute->store token a cycle before the last row's write lands (the store
    unit cannot read that row sooner). The timing choices are explained where they are made.

    MATMULs alternate between weight banks 0 and 1, so the preload of one overlaps the stream of
    the one before. A MATMUL is handed over in the cycle of its last weight read at the earliest,
    when the stream stage is idle or on its last row and its pushes have room in their token
    channels, and streams from the next cycle (a cycle later when its first row accumulates onto
    the row that last row writes: no sum is forwarded that close). The mesh keeps a weight row
    and an operand row in the order they were read, wherever they meet, so no bank has to
    drain: the first weight read of MATMUL *i* comes after the last operand read of MATMUL
    *i* - 2 (*i* is accepted no earlier than the hand-over of *i* - 1, which waits for the last
    row of *i* - 2), and its last weight read before its own first operand read. In steady state
    each MATMUL of ``m`` rows costs ``max(m, rows)`` cycles: the only limit is scratchpad B's one
    weight row a cycle.

    Members
    -------
    i_instr : In(stream.Signature(Instr))
    i_head : In(MatmulHead)
        What the MATMUL at ``i_instr``'s head is (``Controller.o_exec_head``).
    spad_a, spad_b : In(ReadPort.Signature)
    acc_rd : In(ReadPort.Signature)
    acc_wr : In(WritePort.Signature)
    from_load, from_store : Out(TokenConsumer())
    to_load, to_store : Out(TokenProducer())
    o_busy : Out(1)
    """

    #: Cycles from a row's issue (weight or operand) to its data at the mesh
    #: (:data:`~.read.OPERAND_DELAY`).
    OPERAND_DELAY = OPERAND_DELAY
    #: Cycles from a row's sums to its write (:attr:`AccumulatePath.WRITE_DELAY`).
    WRITE_DELAY = AccumulatePath.WRITE_DELAY
    #: Cycles from a row's old-row read to its add (:attr:`AccumulatePath.READ_AHEAD`).
    READ_AHEAD = AccumulatePath.READ_AHEAD
    #: Rows ahead whose writes are forwarded (:attr:`AccumulatePath.FORWARDED`).
    FORWARDED = AccumulatePath.FORWARDED
    #: Cycles from the last operand row's issue to the unit's last busy cycle (the one that
    #: pushes the execute->store token), beyond ``cfg.mesh_latency``: the row enters the mesh
    #: OPERAND_DELAY cycles after its issue, and its sums are written WRITE_DELAY cycles after
    #: they leave it; the unit is busy up to the cycle before the write.
    DRAIN = OPERAND_DELAY + WRITE_DELAY - 1

    def __init__(self, cfg):
        self._cfg = cfg
        a_shape = data.ArrayLayout(signed(cfg.in_width), cfg.rows)
        b_shape = data.ArrayLayout(signed(cfg.in_width), cfg.cols)
        acc_shape = data.ArrayLayout(signed(cfg.acc_width), cfg.cols)
        super().__init__({
            "i_instr":    In(stream.Signature(Instr)),
            "i_head":     In(MatmulHead),
            "spad_a":     In(memory.ReadPort.Signature(addr_width=cfg.spad_addr_width,
                                                       shape=a_shape)),
            "spad_b":     In(memory.ReadPort.Signature(addr_width=cfg.spad_addr_width,
                                                       shape=b_shape)),
            "acc_rd":     In(memory.ReadPort.Signature(addr_width=cfg.acc_addr_width,
                                                       shape=acc_shape)),
            "acc_wr":     In(memory.WritePort.Signature(addr_width=cfg.acc_addr_width,
                                                        shape=acc_shape)),
            "from_load":  Out(TokenConsumer()),
            "to_load":    Out(TokenProducer()),
            "to_store":   Out(TokenProducer()),
            "from_store": Out(TokenConsumer()),
            "o_busy":     Out(1),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        m.submodules.mesh = mesh = SystolicMesh(cfg)
        m.submodules.preload = preload = PreloadStage(cfg)
        m.submodules.stream = streamer = StreamStage(cfg)
        m.submodules.accumulate = accumulate = AccumulatePath(cfg)

        wiring.connect(m, wiring.flipped(self.i_instr), preload.i_instr)
        m.d.comb += preload.i_head.eq(self.i_head)
        wiring.connect(m, wiring.flipped(self.from_load), preload.from_load)
        wiring.connect(m, wiring.flipped(self.from_store), preload.from_store)
        wiring.connect(m, wiring.flipped(self.spad_b), preload.spad_b)
        wiring.connect(m, wiring.flipped(self.spad_a), streamer.spad_a)
        wiring.connect(m, wiring.flipped(self.acc_rd), accumulate.acc_rd)
        wiring.connect(m, wiring.flipped(self.acc_wr), accumulate.acc_wr)
        wiring.connect(m, preload.o_matmul, streamer.i_matmul)
        m.d.comb += [
            mesh.i_w.eq(preload.o_w),
            mesh.i_w_en.eq(preload.o_w_en),
            mesh.i_w_bank.eq(preload.o_w_bank),
            mesh.i_w_row.eq(preload.o_w_row),
            mesh.i_a.eq(streamer.o_a),
            mesh.i_bank.eq(streamer.o_bank),
            accumulate.i_row.eq(streamer.o_row),
            accumulate.i_sums.eq(mesh.o_c),
            self.to_load.push.eq(streamer.o_push_load),
            self.to_store.push.eq(accumulate.o_push_store),
            self.o_busy.eq(preload.o_busy | streamer.o_busy | accumulate.o_busy),
        ]
        # The hand-over also waits until the MATMUL's pushes have room in their channels.
        m.d.comb += preload.i_room.eq(self._room(m, preload.o_matmul, streamer.o_push_load))
        return m

    def _room(self, m, matmul, load_pushing):
        """Whether the pushes of the MATMUL on offer (``matmul``) have room: a register.

        Timing: the room check is one register, computed from registers one cycle old, with
        no adder or compare of counts in front of it: the channels' room flags and the pushes
        this unit has handed over and not made yet (for execute->load, the streaming MATMUL's
        at its last row; for execute->store, those still travelling down the delay line), and
        the preloaded MATMUL's push flags of that cycle. That is safe: the tokens only grow by
        this unit's handoffs, and a handoff never follows another in the next cycle (a
        preload reads `rows` >= 2 weight rows), so it is at most one cycle late to see room
        that a pop made; and a hand-over is never in the cycle after the preload stage took a
        new MATMUL, whose push flags it would miss.
        """
        p = matmul.payload
        handoff = matmul.valid & matmul.ready
        load_owed = Signal()
        # The execute->store tokens and the pushes owed to that channel are the handoffs that
        # owe one, less the channel's pops (modulo 2**TOKEN_WIDTH; at most TOKEN_MAX, which is
        # 2**TOKEN_WIDTH - 1). Kept plus one, "below TOKEN_MAX" is "not equal to the pops".
        store_owed = Signal(TOKEN_WIDTH, init=1)
        room = Signal()
        m.d.sync += room.eq(
            (~p.push_load | Mux(load_owed, self.to_load.room2, self.to_load.room)) &
            (~p.push_store | (store_owed != self.to_store.popped)))
        with m.If(handoff & p.push_store):
            m.d.sync += store_owed.eq(store_owed + 1)
        # A handoff and the push it owes are never in the same cycle: the push is at the last
        # row, from the cycle after the handoff at the earliest.
        with m.If(handoff & p.push_load):
            m.d.sync += load_owed.eq(1)
        with m.Elif(load_pushing):
            m.d.sync += load_owed.eq(0)
        return room
