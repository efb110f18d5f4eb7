"""What the cycle model reports, and what it reads of an instruction."""

from dataclasses import dataclass, field

import numpy as np

from ...hw import isa

__all__ = ["CycleReport", "BREAKDOWN", "OP_CLASSES", "EPILOGUE_CLASS", "STAGE_CLASSES",
           "TIMED_FIELDS", "timing_view", "interval_overlap", "cycles_by_class"]

#: The classes of :attr:`CycleReport.breakdown`, in report order.
BREAKDOWN = ("compute", "zero_slots", "preload", "load_wait", "store_wait", "dispatch",
             "acc_hazard", "mesh_drain", "store_drain")

#: The op classes of the cycle breakdown, which :mod:`bertaccel.analysis.profile` imports.
OP_CLASSES = ("gemm", "attn_matmul", "softmax", "layernorm", "gelu", "dropout", "other")

#: The op class of a STORE's epilogue: the cycles a STORE of these ops exposes are charged to
#: the nonlinear op, whatever region it is in (REQUANT and RAW belong to their GEMM).
EPILOGUE_CLASS = {isa.EpOp.SOFTMAX: "softmax", isa.EpOp.LAYERNORM: "layernorm",
                  isa.EpOp.GELU: "gelu"}

#: The op class of each stage of a BERT encoder layer (:data:`bertaccel.sw.bert.STAGES`), for
#: ``run(program, default_class=STAGE_CLASSES[stage])``.
STAGE_CLASSES = {"qkv": "gemm", "qk": "attn_matmul", "pv": "attn_matmul", "wo": "gemm",
                 "w1": "gemm", "w2": "gemm"}

#: The fields the model reads of each instruction kind, besides its kind and its four token
#: flags: every other field (the scratchpad, PMEM and host addresses, a STORE's stride and
#: accumulator base, a SET's index and value) leaves the whole report unchanged.
TIMED_FIELDS = {isa.Load: ("count",), isa.Matmul: ("m_len", "accumulate", "acc_addr"),
                isa.Store: ("rows", "strips", "op"), isa.Set: ()}


@dataclass
class CycleReport:
    """What :meth:`CycleModel.run` returns.

    Members
    -------
    cycles : int
        Cycles of the run (the sum over the chunks), as ``SimHarness.cycles`` counts them.
    chunk_cycles : list of int
        Cycles of each harness run (one entry unless the program ran in chunks).
    breakdown : dict of str to int
        Cycles by class (:data:`BREAKDOWN`); the values sum to :attr:`cycles`.
    by_class : dict of str to int
        The same cycles by op class (:data:`OP_CLASSES`); they sum to :attr:`cycles`.
    overlap : dict
        ``load_busy`` (cycles the load unit moves a beat), ``load_hidden`` (of those, cycles
        the execute unit streamed operands), ``load_hidden_share``; the same for the store
        unit (``store_busy``: its STOREs from first to last read, ``store_hidden``,
        ``store_hidden_share``); ``epilogue_beats`` (beats through a nonlinear epilogue) and
        ``epilogue_exposed`` (cycles charged to nonlinear STOREs).
    dispatch, start, end : numpy.ndarray
        Per instruction (int64, cycles from the start of the first run; a chunk starts where
        the one before ended): the cycle it was written into its queue, the cycle its unit
        took it (popped its tokens), and its last busy cycle (LOAD: last beat; MATMUL: last
        accumulator write, or its stream slot; STORE: the cycle its last beat leaves the
        epilogue; SET: ``start``).
    stream : numpy.ndarray
        Per instruction: the first stream cycle of a MATMUL, -1 for the others.
    charged : numpy.ndarray
        Per instruction: the cycles of :attr:`breakdown` charged to it (they sum to
        :attr:`cycles`).
    stalls : dict
        Cycles each unit waited, counted where it waited (they overlap one another and
        :attr:`breakdown`): ``dispatch_blocked`` (the instruction stream held by a full queue),
        ``load_on_e2l`` (LOADs waiting for a free operand buffer), ``exec_on_l2e`` and
        ``exec_on_s2e`` (MATMULs whose accept a load or store token decided), ``store_on_e2s``
        (STOREs waiting for their results), ``set_on_drain`` (SETs waiting for the epilogue to
        drain).
    counts : dict
        Instructions, MATMUL rows streamed, load beats, store reads, epilogue beats.
    """

    cycles: int
    chunk_cycles: list
    breakdown: dict
    by_class: dict
    overlap: dict
    dispatch: np.ndarray
    start: np.ndarray
    end: np.ndarray
    stream: np.ndarray
    charged: np.ndarray
    stalls: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)

    def summary(self):
        """A few lines: total, the breakdown and the overlap, for logs."""
        total = max(self.cycles, 1)
        parts = ", ".join(f"{name} {value} ({100 * value / total:.1f}%)"
                          for name, value in self.breakdown.items() if value)
        o = self.overlap
        return (f"{self.cycles} cycles in {len(self.chunk_cycles)} run(s): {parts}; loads "
                f"{o['load_hidden_share']:.0%} hidden, stores {o['store_hidden_share']:.0%} "
                f"hidden")



def timing_view(instr):
    """What the model reads of ``instr``: a tuple of its kind, its token flags and its
    :data:`TIMED_FIELDS`. Programs whose instructions have equal views take equal cycles."""
    kind = type(instr)
    return (kind, instr.pop_prev, instr.pop_next, instr.push_prev, instr.push_next,
            *(getattr(instr, name) for name in TIMED_FIELDS[kind]))


def interval_overlap(a_lo, a_hi, b_lo, b_hi):
    """Total length of the intersection of two unions of disjoint inclusive intervals, each
    sorted by start."""
    if not len(a_lo) or not len(b_lo):
        return 0
    # Cumulative covered length of b up to x, evaluated at every a bound.
    b_lo = np.asarray(b_lo, dtype=np.int64)
    b_hi = np.asarray(b_hi, dtype=np.int64) + 1          # half-open
    keep = b_hi > b_lo
    b_lo, b_hi = b_lo[keep], b_hi[keep]
    if not len(b_lo):
        return 0
    cum = np.concatenate([[0], np.cumsum(b_hi - b_lo)])

    def covered(x):                                        # |b ∩ (-inf, x)|
        i = np.searchsorted(b_lo, x, side="right")        # intervals starting before x
        full = cum[i]
        # The last of them may reach past x.
        last = np.maximum(i - 1, 0)
        excess = np.where(i > 0, np.maximum(b_hi[last] - x, 0), 0)
        return full - excess

    a_lo = np.asarray(a_lo, dtype=np.int64)
    a_hi = np.asarray(a_hi, dtype=np.int64) + 1
    keep = a_hi > a_lo
    return int(np.sum(covered(a_hi[keep]) - covered(a_lo[keep])))


def cycles_by_class(instrs, charged, nonlinear, regions, default_class, cycles):
    """Cycles by op class: ``charged`` summed by the class of each instruction (its region's,
    or the op's for the ``nonlinear`` STOREs)."""
    n = len(instrs)
    index = {name: number for number, name in enumerate(OP_CLASSES)}
    labels = np.full(n, index[default_class], dtype=np.int64)
    for first, stop, cls in regions or ():
        if cls not in index:
            raise ValueError(f"region op class must be one of {OP_CLASSES}, not {cls!r}")
        labels[int(first):int(stop)] = index[cls]
    for number in nonlinear:
        labels[number] = index[EPILOGUE_CLASS[instrs[number].op]]
    sums = np.bincount(labels, weights=charged, minlength=len(OP_CLASSES)) if n else \
        np.zeros(len(OP_CLASSES))
    out = {name: round(float(sums[number])) for name, number in index.items()}
    if not n:
        out[default_class] = cycles
    return out
