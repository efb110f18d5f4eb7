"""Short programs aimed at the edge of one mechanism each: high bits of counters and fields,
the checker's bounds to the row, token counts at a given value, forwarding between accumulator
rows that differ in one bit.

The compiled GEMMs, the hand programs (:mod:`.hand_programs`) and the random programs
(:mod:`.random_programs`) keep fields small and counts low; each program here takes one of
them to a value where a single wrong bit of the gateware changes what the core does. Three
kinds, as the mutation run (:mod:`bertaccel.cluster.mutation`) uses them:

:func:`exact_programs`
    legal programs that write every row they read: their outputs are compared;
:func:`timed_programs`
    legal programs that read memory they never write: their cycles, beat counts and end
    state are compared (as the hand programs');
:func:`checker_programs`
    programs at the bounds of the checker's rules (:mod:`bertaccel.hw.legal`), most of them
    illegal by one row or one token: the fault and the index are compared.
"""

from ..hw import isa
from .hand_programs import load, matmul, store

__all__ = ["exact_programs", "timed_programs", "checker_programs"]

T, P, Op = isa.Target, isa.Param, isa.EpOp


def _row_matmul(acc_addr, a_addr, accumulate, m_len=1, **flags):
    return isa.Matmul(a_addr=a_addr, b_addr=0, acc_addr=acc_addr, m_len=m_len,
                      accumulate=accumulate, **flags)


def exact_programs(cfg):
    """``{name: instructions}`` of legal programs whose outputs are compared.

    ``accumulate_forward``: MATMULs into accumulator rows 4 and 68 (and 5 and 69) in turn,
    most of them accumulating, so that each reads a row written a few cycles before it (the
    accumulator path forwards it) while the other row in flight differs from it in bit 6
    alone."""
    near, far = 4, 4 + 64
    assert far + 2 <= cfg.acc_depth, cfg
    loads = [load(5), isa.Load(target=T.SPAD_B, addr=0, count=cfg.rows, push_next=True)]
    order = [(near, 0, False), (far, 1, False), (near, 2, True), (far, 3, True),
             (near, 1, True), (near, 2, True), (far, 0, True), (far, 1, True)]
    one_row = [_row_matmul(acc, a, acc_on) for acc, a, acc_on in order]
    two_rows = [_row_matmul(acc, a, acc_on, m_len=2) for acc, a, acc_on in order]
    mms = one_row + two_rows
    mms[0] = mms[0].with_deps(pop_prev=True)
    mms[-1] = mms[-1].with_deps(push_next=True)
    stores = [isa.Store(acc_addr=near, rows=2, pop_prev=True), isa.Store(acc_addr=far, rows=2)]
    return {"accumulate_forward": loads + mms + stores}


def timed_programs(cfg):
    """``{name: instructions}`` of legal programs whose cycles and beats are compared.

    ``store_strips_max``: a RAW STORE of one row read ``2**14 + 2`` times (stride 0): the
    store unit's strip counter passes 2**11 and ``strips - 2`` has bit 14 set.
    ``exec_to_store_owed``: eight MATMULs each pushing a token the store unit pops at once,
    then, while a long STORE keeps the store unit busy, four more pushes: the fourth finds
    three tokens waiting with the channel's pop count at 8, then a long MATMUL whose start
    the execute unit's room check decides."""
    acc = cfg.acc_depth
    return {
        "store_strips_max": [isa.Store(acc_addr=0, rows=1, strips=(1 << 14) + 2, stride=0)],
        "exec_to_store_owed": [matmul(0, push_next=True), store(0, pop_prev=True)] * 8
        + [store(acc // 2)] + [matmul(0, push_next=True)] * 4 + [matmul(acc)]
        + [store(0, pop_prev=True)] * 4,
    }


def _exec_pushes(cfg, **push):
    """256 MATMULs that each push a token: the last two legal ones long, so that the execute
    unit is still busy when the 256th comes and the checker faults it (an idle execute unit can
    take a MATMUL before its fault is raised, and one that finds its channel full never
    hands it over: the core hangs)."""
    long = matmul(cfg.acc_depth // 2, **push)
    return [matmul(0, **push)] * (isa.TOKEN_MAX - 2) + [long, long, matmul(0, **push)]


def checker_programs(cfg):
    """``{name: instructions}`` at the bounds of the checker's rules.

    TOKEN_FULL in each of the four channels (its 256th push, at index 255); STORE_ACC one row
    past the accumulator from an odd row, and by its row count alone, and one a hundred
    instructions into a program (the product rules' late verdict names its index); STORE_AUX
    past the scratchpad from an ``aux_addr`` with bit 8 set; STORE_ACC of a STORE of 2**14
    rows whose ``param_addr`` (unchecked for RAW) is 256; a legal RAW STORE of five strips of
    stride 0 whose ``param_addr`` has bit 11 set; and MATMUL_A of a MATMUL of ``2**13 + 1``
    rows (the execute unit takes it before the fault is raised and runs it: the run's cycles
    turn on its row count's bit 13)."""
    acc, spad = cfg.acc_depth, cfg.spad_depth
    ln = [isa.Set(index=P.ROW_LEN, value=3 * cfg.cols), isa.Set(index=P.SHIFT1, value=8)]
    aux_addr = spad - 224
    assert aux_addr & 256 and aux_addr + 300 > spad >= (aux_addr ^ 256) + 300, cfg
    return {
        "full_l2e": [load(0, push_next=True)] * (isa.TOKEN_MAX + 1),
        "full_e2l": _exec_pushes(cfg, push_prev=True),
        "full_e2s": _exec_pushes(cfg, push_next=True),
        "full_s2e": [store(0, push_prev=True)] * (isa.TOKEN_MAX + 1),
        "acc_odd_past": [isa.Store(acc_addr=1, rows=acc)],
        "acc_rows_past": [isa.Store(acc_addr=0, rows=acc + 1)],
        "acc_late": [load(0)] * 100 + [isa.Store(acc_addr=1, rows=acc)],
        "aux_past": ln + [isa.Store(acc_addr=0, rows=100, strips=3, stride=0, op=Op.LAYERNORM,
                                    aux_addr=aux_addr)],
        "rows_high": [isa.Store(acc_addr=0, rows=1 << 14, param_addr=256)],
        "param_high": [isa.Store(acc_addr=0, rows=1, strips=5, stride=0, param_addr=1 << 11)],
        "matmul_long": [isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=(1 << 13) + 1,
                                   accumulate=False)],
    }
