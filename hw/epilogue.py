"""The epilogue: requantisation and the nonlinear ops on the accumulator drain.

The store unit reads accumulator rows (with their parameter-memory row and, for LayerNorm, the
residual row) and sends them here as *beats*, one strip of ``cols`` columns of one output row each.
The arithmetic of every op is defined by :mod:`bertaccel.golden.intops`; this unit must equal it
bit for bit.

Beats arrive in the order the store unit schedules them. Single-pass ops (RAW, REQUANT, GELU)
send each row once, with ``second`` set. Two-pass ops (SOFTMAX, LAYERNORM) send each row twice:
first with ``second`` clear (statistics only, no output), then with ``second`` set (output).
The passes of consecutive rows interleave as P1(0), P1(1), P2(0), P1(2), P2(1), ..., P2(R-1),
so at most two rows have statistics outstanding, and a row's second pass may have to wait until
its statistics are final (the unit then holds ``i_beat.ready`` low). ``last`` marks the last
beat of a row in either pass. ``lane_valid`` marks the columns before ``row_len``.

The parameters (``params``) are written by SET instructions, which the store unit only lets
through when this unit is idle, so they are constant while beats flow.
"""

from amaranth import Module, signed
from amaranth.lib import data, stream, wiring
from amaranth.lib.wiring import In, Out

from .isa import EpOp, PmemWord

__all__ = ["beat_layout", "ParamsLayout", "Epilogue"]


def beat_layout(cfg):
    """One strip of one output row, as the store unit sends it."""
    return data.StructLayout({
        "acc":        data.ArrayLayout(signed(cfg.acc_width), cfg.cols),
        "pm":         data.ArrayLayout(PmemWord, cfg.cols),
        "res":        data.ArrayLayout(signed(cfg.in_width), cfg.cols),
        "op":         EpOp,
        "second":     1,
        "last":       1,
        "lane_valid": cfg.cols,
    })


#: The store unit's parameter registers (see :class:`bertaccel.hw.isa.Param`).
ParamsLayout = data.StructLayout({
    "mul0":    16,
    "shift0":  6,
    "mul1":    32,
    "shift1":  6,
    "row_len": 16,
    "eps":     64,
    "flags":   8,
})


class Epilogue(wiring.Component):
    """Applies the op of each beat and sends output beats in order.

    Parameters
    ----------
    cfg : AccelConfig

    Members
    -------
    i_beat : In(stream.Signature(beat_layout(cfg)))
    o_data : Out(stream.Signature(ArrayLayout(signed(acc_width), cols)))
        RAW beats carry the accumulator values; the int8 ops carry int8 results sign-extended.
    params : In(ParamsLayout)
    o_busy : Out(1)
        A beat is inside the unit.
    """

    def __init__(self, cfg):
        self._cfg = cfg
        super().__init__({
            "i_beat": In(stream.Signature(beat_layout(cfg))),
            "o_data": Out(stream.Signature(data.ArrayLayout(signed(cfg.acc_width), cfg.cols))),
            "params": In(ParamsLayout),
            "o_busy": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        # Pass-through of RAW beats; the ops come with the full datapath.
        beat = self.i_beat.payload
        m.d.comb += [
            self.o_data.payload.eq(beat.acc),
            self.o_data.valid.eq(self.i_beat.valid & beat.second),
            self.i_beat.ready.eq(self.o_data.ready | ~beat.second),
        ]
        return m
