"""The epilogue pipeline's timing (:class:`Schedule`) and the layouts its parts share.

A sub-beat travels down one pipeline of :attr:`Schedule.depth` register stages, built by several
parts (:mod:`bertaccel.hw.epilogue.unit` lists them). Between two parts it is a stream without
backpressure (:func:`stage_signature`): the valid bit and the tags (:func:`ctl_layout`) of the
sub-beat in the producer's last stage, and what its lanes hold there, one struct of registers a
lane (:func:`lane_layout` of the fields below). Besides the lanes, the parts exchange the row
statistics: the sums of a row's first pass (:data:`SoftmaxSums`, :data:`LayerNormSums`) and
what the finalize pipeline makes of them (:data:`SlotStats`).
"""

from dataclasses import dataclass

from amaranth import signed, unsigned
from amaranth.lib import data, stream

from ..isa import EpOp, PmemWord

__all__ = [
    "ACC_LANE",
    "Carry",
    "BindSelect",
    "E_LANE",
    "LayerNormSums",
    "PRE_LANE",
    "Schedule",
    "SlotStats",
    "SoftmaxSums",
    "WAIT_LANE",
    "beat_layout",
    "ctl_layout",
    "lane_layout",
    "row_layout",
    "stage_signature",
]


def beat_layout(cfg, lanes=None):
    """One strip of one output row, as the store unit sends it (``cols`` wide), or one
    sub-beat of it as it enters the pipeline (``lanes`` wide)."""
    lanes = cfg.cols if lanes is None else lanes
    return data.StructLayout({
        "acc":        data.ArrayLayout(signed(cfg.acc_width), lanes),
        "pm":         data.ArrayLayout(PmemWord, lanes),
        "res":        data.ArrayLayout(signed(cfg.in_width), lanes),
        "op":         EpOp,
        "second":     1,
        "last":       1,
        "lane_valid": lanes,
    })


def row_layout(cfg, lanes=None):
    """Results of one beat (``cols`` wide) or sub-beat (``lanes`` wide): RAW beats carry the
    accumulator values, the int8 ops their results sign-extended."""
    return data.ArrayLayout(signed(cfg.acc_width), cfg.cols if lanes is None else lanes)


@dataclass(frozen=True, kw_only=True)
class Schedule:
    """Stage numbers of the epilogue pipeline for ``lanes`` lanes, taking each beat as
    ``ratio`` sub-beats of ``lanes`` columns.

    A beat accepted in cycle ``T`` has its sub-beat ``j`` in stage ``k`` during cycle
    ``T + 1 + j + k``; the logic of stage ``k`` reads stage ``k - 1``. The last stage is
    ``depth - 1``; what it computes is written into the output FIFO (with ``ratio > 1``, once
    the beat's last sub-beat is there).
    """
    lanes: int
    ratio: int = 1

    @classmethod
    def of(cls, cfg):
        """The schedule of ``cfg``'s epilogue."""
        return cls(lanes=cfg.ep_lanes, ratio=cfg.ep_ratio)

    @property
    def levels(self):
        """Levels of a reduction tree over the lanes."""
        return self.lanes.bit_length() - 1

    IN, ADD, MULI, MUL, PSUM, SUM, SHC, SHF, RND, SAT, PRE = range(11)

    @property
    def ACC(self):
        return self.PRE + self.levels + 1

    @property
    def U(self):
        return self.ACC + 1

    @property
    def EXP(self):
        return self.ACC + 2

    @property
    def EREG(self):
        return self.ACC + 3

    @property
    def ESH(self):
        return self.ACC + 4

    @property
    def E(self):
        return self.ACC + 5

    @property
    def SLOOP(self):
        """The rescaled-sum loop, after the tree over the e of stage E."""
        return self.E + self.levels + 1

    #: Cycles from the cycle a row's sums are final (in the ACC or SLOOP registers) to the
    #: first cycle its slot holds the statistics.
    SMX_FINALIZE = 4        # k, mant, RECIP, slot
    LN_FINALIZE = 16        # the DSPs' input registers, products, 2 sum levels, D, msb
                            # chunks, j, mant (2), RSQRT, its register, the DSPs' input
                            # registers, products, 2 sum levels, slot

    @property
    def BIND(self):
        # After E; and late enough that a row's statistics are final at most 8 (SOFTMAX) or
        # 11 (LAYERNORM) cycles after its last first-pass beat came in (``gap``; which rows
        # wait: hw/epilogue/intake.py).
        return max(self.E + 1, self.SLOOP + 1 + self.SMX_FINALIZE - 8,
                   self.ACC + 1 + self.LN_FINALIZE - 11)

    @property
    def MUL2(self):
        """The second multiply's products; its operands are in the DSPs' input registers a
        stage before, BIND's values a stage after BIND."""
        return self.BIND + 2

    @property
    def MUL3(self):
        return self.BIND + 8

    @property
    def depth(self):
        """Register stages; a beat is in the FIFO ``depth + 1`` cycles after it was accepted."""
        return self.BIND + 13

    @property
    def gap(self):
        """Cycles from a row's last first-pass beat to the earliest accept of its second pass.

        A row's last sub-beat enters ``ratio - 1`` cycles after its beat's accept ``T``, so its
        sums are final from ``T + ratio - 1 + ACC + 1`` (LAYERNORM) or ``T + ratio - 1 + SLOOP
        + 1`` (SOFTMAX), its slot a finalize later, and the first sub-beat of a second-pass beat
        accepted in ``T'`` reads the slot in cycle ``T' + BIND``.
        """
        return {EpOp.SOFTMAX: max(1, self.ratio - 1 + self.SLOOP + 1 + self.SMX_FINALIZE
                                  - self.BIND),
                EpOp.LAYERNORM: max(1, self.ratio - 1 + self.ACC + 1 + self.LN_FINALIZE
                                    - self.BIND)}

    @property
    def latency(self):
        """Cycles from a beat's accept to its output on ``o_data`` (when the FIFO is empty)."""
        return self.depth + 2 + self.ratio - 1

    @property
    def fifo_depth(self):
        """Output FIFO rows, one credit each.

        A beat holds its credit from the cycle after its accept until the cycle its output
        leaves (``latency`` cycles; the count drops a cycle later), and beats are accepted at
        most one every ``ratio`` cycles, so ``ceil((latency + 1) / ratio)`` credits let a beat
        in whenever the input has room for one while the output is ready.
        """
        return -(-(self.latency + 1) // self.ratio)


def ctl_layout(sch):
    """The tags of a sub-beat, which travel down the stages with it unchanged.

    ``last`` is the row's last sub-beat in this pass, ``slot`` the statistics slot of its row
    and ``sub`` which sub-beat of its beat it is (only when there are several: no zero-width
    wires).
    """
    return data.StructLayout({"op": EpOp, "second": 1, "last": 1, "lane_valid": sch.lanes,
                              "slot": 1, **({"sub": range(sch.ratio)} if sch.ratio > 1 else {})})


def stage_signature(sch, lanes):
    """The stream from one part of the pipeline to the next: stage ``k``'s valid bit, tags
    and ``lanes`` (a layout: what the lanes hold in that stage). The pipeline never stalls,
    so the stream is always ready."""
    return stream.Signature(data.StructLayout({"ctl": ctl_layout(sch), "lanes": lanes}),
                            always_ready=True)


#: Union of what a lane carries from ADD to the end: the output of an op that has finished
#: (RAW, REQUANT; GELU and SOFTMAX late), or the coefficients of the last multiply (GELU phi,
#: LAYERNORM gamma and beta + 128) -- never both at once.
Carry = data.UnionLayout({
    "out":  signed(32),
    "coef": data.StructLayout({"m": signed(18), "beta": signed(17)}),
})

#: A lane in stage PRE, where the front ends: ``a`` is GELU's z, SOFTMAX's t or LAYERNORM's v;
#: ``c`` SOFTMAX's ceil(t / 4096) and ``v2`` LAYERNORM's v * v, the leaves of the lane trees;
#: ``gt`` (even lanes) whether this lane's t exceeds the next lane's, which picks the larger c
#: in the max tree's first level (ceil is monotonic, so the larger t has the larger c);
#: ``phi`` the PHI table's read, a register of the table's data alone, and ``gelu`` whether
#: it is the sub-beat's (GELU's phi goes into ``carry.coef.m`` a stage later).
PRE_LANE = {"a": signed(24), "c": signed(17), "v2": unsigned(31), "gt": 1, "phi": unsigned(17),
            "gelu": 1}
#: A lane in a stage where it only waits (for a tree over the lanes, or for BIND).
WAIT_LANE = {"a": signed(24)}
#: A lane in stage ACC: ``m`` is SOFTMAX's running maximum M (a copy in every lane).
ACC_LANE = {"a": signed(24), "m": signed(17)}
#: A lane in stage E: ``a`` is SOFTMAX's e; the other ops' ``a`` has travelled unchanged.
E_LANE = {"a": signed(24)}
#: What a lane's BIND stage chooses its statistics by: whether the sub-beat is SOFTMAX's, and
#: its slot (:class:`~.exponent.Exponent` registers it a lane beside stage E, for
#: :class:`~.back.Back`).
BindSelect = data.StructLayout({"softmax": 1, "slot": 1})


def lane_layout(sch, fields):
    """The registers of every lane in a stage with ``fields`` (and :data:`Carry`)."""
    return data.ArrayLayout(data.StructLayout({**fields, "carry": Carry}), sch.lanes)


#: A SOFTMAX row's sum of exponentials ``S = a >> p`` (``S < 2**32``, ``p < 8``: the rescaled-sum
#: loop keeps ``p`` bits below S, :mod:`~.exponent`), valid for the one cycle its last first-pass
#: sub-beat spends in stage SLOOP; ``slot`` is the row's statistics slot.
SoftmaxSums = data.StructLayout({"a": unsigned(39), "p": unsigned(3), "slot": 1})

#: A LAYERNORM row's sums of v and v * v, valid for the one cycle its last first-pass sub-beat
#: spends in stage ACC.
LayerNormSums = data.StructLayout({"s1": signed(26), "s2": unsigned(41), "slot": 1})

#: One row's statistics in a slot, as the second pass reads them: SOFTMAX ``r`` (R) and ``k``;
#: LAYERNORM ``nr`` (N * rsq), ``sr`` (S1 * rsq) and ``j``.
SlotStats = data.StructLayout({
    "r":  unsigned(17),
    "k":  unsigned(5),
    "nr": unsigned(30),
    "sr": signed(46),
    "j":  signed(6),
})
