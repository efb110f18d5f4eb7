"""The execute unit's second stage: stream a MATMUL's operand rows into the mesh."""

from amaranth import Module, Mux, Signal, signed
from amaranth.lib import data, memory, stream, wiring
from amaranth.lib.wiring import In, Out

from ..isa import FIELD_WIDTH
from ..pipeline import delay
from .layout import matmul_layout, row_layout
from .read import OPERAND_DELAY, row_read

__all__ = ["StreamStage"]


class StreamStage(wiring.Component):
    """Issues a MATMUL's operand rows, one a cycle, from the cycle after it takes the MATMUL.

    Row *m* of a MATMUL taken in cycle *h* is issued in cycle ``h + 1 + m``: ``o_row`` tags it
    in that cycle (its accumulator row ``acc_addr + m``, ``accumulate``, and on the last row the
    execute->store push), and its operand ``spad_a[a_addr + m]`` leaves on ``o_a``, with the
    MATMUL's weight bank on ``o_bank``, :data:`~.read.OPERAND_DELAY` cycles later. A MATMUL of
    ``m_len == 0`` takes one idle slot (``o_row.valid`` low) that carries its push. The
    execute->load push (``o_push_load``) comes with the last row's issue.

    ``i_matmul.ready`` is a register: high while the stage is idle or on its last row, so a
    MATMUL taken on the last row streams right behind it. But a row is never streamed in the
    cycle right after a row that writes its accumulator row (back-to-back accumulating
    MATMULs of one row into one row): the sum it needs would have to go straight from the
    adders back into them, a loop that held the 8x8 datapath under 150 MHz. So when the MATMUL
    on offer accumulates onto the row the stage streams last, ``ready`` stays low on that last
    row and the hand-over waits a cycle (the cycle model's ``acc_hazard``). ``ready`` is
    decided a cycle ahead from ``i_matmul.payload``, which must therefore be on offer a cycle
    before ``valid`` rises and stay until the MATMUL is taken (the preload stage holds it from
    the cycle after its accept).

    Members
    -------
    i_matmul : In(stream.Signature(matmul_layout(cfg)))
    spad_a : In(ReadPort.Signature)
        Scratchpad A, the operands; read every cycle (see :func:`~.read.row_read`).
    o_a : Out(ArrayLayout(signed(in_width), rows))
    o_bank : Out(1)
        The operand row and its weight bank, for the mesh's ``i_a`` and ``i_bank``.
    o_row : Out(row_layout(cfg))
        The row issued this cycle, for the accumulator path; all zero while idle.
    o_push_load : Out(1)
        The execute->load push.
    o_busy : Out(1)
        Streaming a MATMUL.
    """

    def __init__(self, cfg):
        self._cfg = cfg
        a_shape = data.ArrayLayout(signed(cfg.in_width), cfg.rows)
        super().__init__({
            "i_matmul":    In(stream.Signature(matmul_layout(cfg))),
            "spad_a":      In(memory.ReadPort.Signature(addr_width=cfg.spad_addr_width,
                                                        shape=a_shape)),
            "o_a":         Out(a_shape),
            "o_bank":      Out(1),
            "o_row":       Out(row_layout(cfg)),
            "o_push_load": Out(1),
            "o_busy":      Out(1),
        })

    def elaborate(self, platform):
        cfg = self._cfg
        m = Module()
        p = self.i_matmul.payload

        s_active = Signal()
        s_zero = Signal()           # a MATMUL with m_len == 0: one idle slot for its tokens
        s_bank = Signal()
        s_a_addr = Signal(FIELD_WIDTH)
        s_acc_addr = Signal(FIELD_WIDTH)
        s_remaining = Signal(FIELD_WIDTH)
        s_accumulate = Signal()
        s_push_load = Signal()
        s_push_store = Signal()
        s_final = Signal()          # s_remaining == 1, kept in a register (a timing choice:
        s_last = Signal()           # the 16-bit compare was on the handoff's critical path)
        m.d.comb += s_last.eq(s_active & s_final)
        # ~s_active | s_final, the stage's half of the hand-over, in a register of its own (a
        # timing choice: the hand-over then is one LUT of registers, and so is the preload
        # stage's `free`).
        s_open = Signal(init=1)
        handoff = Signal()
        m.d.comb += [
            self.i_matmul.ready.eq(s_open),
            handoff.eq(self.i_matmul.valid & self.i_matmul.ready),
            self.o_busy.eq(s_active),
        ]

        # -- one operand row a cycle ---------------------------------------------------------
        m.d.comb += [self.o_a.eq(row_read(m, self.spad_a, s_a_addr, name="a")),
                     self.o_bank.eq(delay(m, s_bank, OPERAND_DELAY, name="bank",
                                          reset_less=False))]
        with m.If(s_active):
            m.d.comb += [
                self.o_row.valid.eq(~s_zero),
                self.o_row.addr.eq(s_acc_addr),
                self.o_row.accumulate.eq(s_accumulate),
                self.o_row.push.eq(s_push_store & s_last),
                self.o_push_load.eq(s_last & s_push_load),
            ]
            m.d.sync += [
                s_a_addr.eq(s_a_addr + 1),
                s_acc_addr.eq(s_acc_addr + 1),
                s_remaining.eq(s_remaining - 1),
                s_final.eq(s_remaining == 2),
            ]
            with m.If(s_last):
                m.d.sync += s_active.eq(0)

        # The next `s_open`: from the hand-over, the MATMUL's `final`; else 1 unless the stage
        # streams on (active, not on its last row), when it is the next `s_final`, or when the
        # MATMUL on offer accumulates onto the row the stage streams last (`clash`: the row it
        # streams now is the one before its last). `~s_zero` is implied where `clash` counts,
        # a MATMUL of m_len 0 never having two rows left; it is kept in the compare all the same
        # (the placed netlists that docs/fpga.md reports have it).
        clash = (~s_zero & (s_acc_addr[:cfg.acc_addr_width] == p.acc_prev) &
                 p.accumulate & ~p.zero)
        m.d.sync += s_open.eq(Mux(handoff, p.final,
                                  ~s_active | s_final | ((s_remaining == 2) & ~clash)))
        with m.If(handoff):
            m.d.sync += [
                s_active.eq(1),
                s_zero.eq(p.zero),
                s_bank.eq(p.bank),
                s_a_addr.eq(p.a_addr),
                s_acc_addr.eq(p.acc_addr),
                s_remaining.eq(p.remaining),
                s_final.eq(p.final),
                s_accumulate.eq(p.accumulate),
                s_push_load.eq(p.push_load),
                s_push_store.eq(p.push_store),
            ]
        return m
