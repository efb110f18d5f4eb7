"""The execute unit's first stage: accept a MATMUL and preload its weights into the mesh."""

from amaranth import Cat, Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..controller import TokenConsumer
from ..isa import FIELD_WIDTH, Instr, MatmulHead
from ..pipeline import delay
from .layout import matmul_layout
from .read import OPERAND_DELAY, row_read

__all__ = ["PreloadStage"]


class PreloadStage(wiring.Component):
    """Takes MATMULs in order and reads each one's weight rows into a bank of the mesh.

    A MATMUL is accepted in a cycle the stage is free (empty, or handing its MATMUL over) when
    its tokens are there; the pops are made in that cycle. In the ``rows`` cycles after the
    accept the stage issues the weight rows ``spad_b[b_addr]`` .. ``spad_b[b_addr + rows - 1]``,
    one a cycle, through :func:`~.read.row_read`; row *j* leaves on ``o_w`` tagged for row *j* of
    the MATMUL's bank (``o_w_en``, ``o_w_bank``, ``o_w_row``: the weight wave of
    :class:`~bertaccel.hw.mesh.SystolicMesh`) :data:`~.read.OPERAND_DELAY` cycles after its
    issue. Banks alternate from 0, one a MATMUL.

    ``o_matmul`` offers the MATMUL for the stream stage from the cycle that issues its last
    weight row (the first operand row read after it already meets the new weights), in the
    cycles ``i_room`` allows (the unit's check that the MATMUL's pushes have room), until it is
    taken; the stage takes the next MATMUL in the cycle it hands this one over, so weight reads
    run back to back. The payload is more than a stream promises: it holds the MATMUL
    from the cycle after its accept until its hand-over, at least a cycle before ``valid``
    rises, and the stream stage and the unit's token-room check read it that early.

    Members
    -------
    i_instr : In(stream.Signature(Instr))
        MATMULs (the unit's queue holds nothing else).
    i_head : In(MatmulHead)
        What the MATMUL at ``i_instr``'s head is (:func:`~..isa.matmul_head`). Timing: the
        stage's ``zero``, ``final`` and ``remaining`` start from these registers, not from
        compares of ``m_len`` after the queue's head.
    from_load, from_store : Out(TokenConsumer())
        Popped at the accept, as the instruction's ``deps`` say.
    spad_b : In(ReadPort.Signature)
        Scratchpad B, the weights; read every cycle (see :func:`~.read.row_read`).
    o_w : Out(ArrayLayout(signed(in_width), cols))
    o_w_en, o_w_bank : Out(1)
    o_w_row : Out(range(rows))
        The weight wave, for the mesh's ``i_w*``.
    o_matmul : Out(stream.Signature(matmul_layout(cfg)))
        The preloaded MATMUL, for the stream stage.
    i_room : In(1)
        The MATMUL may be handed over as far as its token pushes go.
    o_busy : Out(1)
        Holding a MATMUL.

    Notes
    -----
    A MATMUL holds the stage ``cfg.rows + HANDOVER_DELAY`` cycles when its hand-over is not
    held back: ``rows`` weight reads after the accept, the hand-over in the cycle of the last.
    """

    #: Cycles from the last weight row's issue to the hand-over to the stream stage (it is in
    #: the same cycle), and so from a hand-over to the next MATMUL's accept.
    HANDOVER_DELAY = 0

    def __init__(self, cfg):
        self._cfg = cfg
        b_shape = data.ArrayLayout(signed(cfg.in_width), cfg.cols)
        super().__init__({
            "i_instr":    In(stream.Signature(Instr)),
            "i_head":     In(MatmulHead),
            "from_load":  Out(TokenConsumer()),
            "from_store": Out(TokenConsumer()),
            "spad_b":     In(memory.ReadPort.Signature(addr_width=cfg.spad_addr_width,
                                                       shape=b_shape)),
            "o_w":        Out(b_shape),
            "o_w_en":     Out(1),
            "o_w_bank":   Out(1),
            "o_w_row":    Out(range(cfg.rows)),
            "o_matmul":   Out(stream.Signature(matmul_layout(cfg))),
            "i_room":     In(1),
            "o_busy":     Out(1),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()

        p_full = Signal()
        p_count = Signal(range(cfg.rows + 1))
        p_b_addr = Signal(FIELD_WIDTH)     # the next weight row to read
        # Done from the cycle that reads the last weight row: the first operand row read after
        # it already meets the new weights. A register (a timing choice: it starts the hand-over
        # decision, which loads every stream-stage register), set by the read before that one.
        p_done = Signal()
        # The MATMUL held, in registers of their own (named as timing reports name them).
        p = self.o_matmul.payload
        held = {name: Signal(p[name].shape(), name=f"p_{name}") for name in p.shape().members}
        m.d.comb += [p[name].eq(register) for name, register in held.items()]

        handoff = Signal()
        m.d.comb += [
            self.o_matmul.valid.eq(p_done & self.i_room),
            handoff.eq(self.o_matmul.valid & self.o_matmul.ready),
            self.o_busy.eq(p_full),
        ]

        # -- read the weight rows, row j into row j of the bank ----------------------------------
        reading = Signal()
        m.d.comb += reading.eq(p_full & (p_count != cfg.rows))
        w_data = row_read(m, self.spad_b, p_b_addr, name="w")
        with m.If(reading):
            m.d.sync += [p_count.eq(p_count + 1), p_b_addr.eq(p_b_addr + 1),
                         p_done.eq(p_count >= cfg.rows - 2 if cfg.rows > 2 else 1)]
        # The row tag follows the read through its OPERAND_DELAY cycles.
        m.d.comb += Cat(self.o_w_en, self.o_w_bank, self.o_w_row).eq(
            delay(m, Cat(reading, p.bank, p_count[:len(self.o_w_row)]), OPERAND_DELAY,
                  name="w_tag", reset_less=False))
        m.d.comb += self.o_w.eq(w_data)

        with m.If(handoff):
            m.d.sync += p_full.eq(0)
        self._accept(m, p_full, p_count, p_b_addr, p_done, held, handoff)
        return m

    def _accept(self, m, p_full, p_count, p_b_addr, p_done, held, handoff):
        """Take the next MATMUL, also in the cycle of a hand-over.

        Its sync statements come after the hand-over's and the read's, so they win. The bank
        it preloads was last used by the MATMUL two back, which has read its last operand row
        by now (the hand-over waits for it): the mesh keeps that row on the old weights.
        """
        cfg = self._cfg
        instr = self.i_instr.payload
        body = instr.body.matmul
        next_bank = Signal()        # the bank of the next MATMUL accepted: banks alternate
        # Timing: the stage's registers load whenever it is free, whether or not it accepts
        # (they mean nothing until `p_full` is set), so the wide registers' enable does not
        # wait for the valid and token checks.
        can_pop = ((~instr.deps.pop_prev | self.from_load.avail) &
                   (~instr.deps.pop_next | self.from_store.avail))
        free = Signal()
        accept = Signal()
        m.d.comb += [free.eq(~p_full | handoff),
                     accept.eq(free & self.i_instr.valid & can_pop)]
        with m.If(accept):
            m.d.comb += [
                self.i_instr.ready.eq(1),
                self.from_load.pop.eq(instr.deps.pop_prev),
                self.from_store.pop.eq(instr.deps.pop_next),
            ]
            m.d.sync += [p_full.eq(1), next_bank.eq(~next_bank)]
        with m.If(free):
            m.d.sync += [
                p_done.eq(0),
                p_count.eq(0),
                p_b_addr.eq(body.b_addr),
                held["bank"].eq(next_bank),
                held["a_addr"].eq(body.a_addr),
                held["acc_addr"].eq(body.acc_addr),
                held["acc_prev"].eq(body.acc_addr[:cfg.acc_addr_width] - 1),
                held["remaining"].eq(Mux(self.i_head.zero, 1, body.m_len)),
                held["zero"].eq(self.i_head.zero),
                held["final"].eq(self.i_head.final),
                held["accumulate"].eq(body.accumulate),
                held["shift"].eq(body.shift),
                held["push_load"].eq(instr.deps.push_prev),
                held["push_store"].eq(instr.deps.push_next),
            ]
