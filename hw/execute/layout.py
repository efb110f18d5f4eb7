"""What the execute unit's parts pass one another: a MATMUL at its hand-over, a row's tag."""

from amaranth.lib import data

from ..isa import FIELD_WIDTH

__all__ = ["matmul_layout", "row_layout"]


def matmul_layout(cfg):
    """A MATMUL as the preload stage hands it to the stream stage.

    Fields
    ------
    bank : 1
        The weight bank it preloaded.
    a_addr, acc_addr : FIELD_WIDTH
        Its first operand row and first accumulator row.
    acc_prev : acc_addr_width
        ``acc_addr - 1`` in the accumulator's address width (the row whose write its first row
        would have to wait for).
    remaining : FIELD_WIDTH
        Rows to stream: ``m_len``, or 1 for ``m_len == 0``.
    zero, final : 1
        ``m_len == 0``; ``m_len <= 1``.
    accumulate, push_load, push_store : 1
        Its ``accumulate`` flag and its execute->load and execute->store pushes.
    """
    return data.StructLayout({
        "bank": 1, "a_addr": FIELD_WIDTH, "acc_addr": FIELD_WIDTH,
        "acc_prev": cfg.acc_addr_width, "remaining": FIELD_WIDTH, "zero": 1, "final": 1,
        "accumulate": 1, "push_load": 1, "push_store": 1,
    })


def row_layout(cfg):
    """The tag of an operand row as the stream stage issues it, for the accumulator path.

    Fields
    ------
    valid : 1
        A real row (not the idle slot of a MATMUL of ``m_len == 0``, nor no row at all).
    addr : acc_addr_width
        The accumulator row its sums go to.
    accumulate : 1
        Its sums are added to the row's old value (else they replace it).
    push : 1
        The execute->store push rides on it (its MATMUL's last row, or its idle slot).
    """
    return data.StructLayout({
        "valid": 1, "addr": cfg.acc_addr_width, "accumulate": 1, "push": 1,
    })
