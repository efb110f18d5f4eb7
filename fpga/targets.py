"""The FPGA parts the flow places and routes for, and what a design needs of them.

:data:`TARGETS` names the parts; :func:`estimate` says how many multipliers and block RAMs a
design needs at least, before synthesis, and :func:`check_fit` refuses a design that needs more
of some resource than the part has (before synthesis against the estimate, after it against
yosys's counts).
"""

import math
from dataclasses import dataclass

from .errors import DoesNotFit, SynthError

__all__ = ["Target", "TARGETS", "target", "estimate", "check_fit"]


@dataclass(frozen=True, kw_only=True)
class Target:
    """An FPGA part that the flow can place and route for.

    Members
    -------
    name : str
        The ``--target`` name, ``"ecp5-85k"``.
    part : str
        The Lattice part number.
    nextpnr_args : tuple of str
        Device, package and speed grade for ``nextpnr-ecp5``.
    totals : dict of str to int
        What the part has: ``lut4``, ``ff``, ``mult18x18d``, ``dp16kd``.
    clock_pin : str
        Where the clock pin is placed (the ULX3S's 25 MHz oscillator pin, a clock-capable pin).
    """
    name: str
    part: str
    nextpnr_args: tuple
    totals: dict
    clock_pin: str = "G2"


def _ecp5(size, luts, dsps, brams):
    return Target(name=f"ecp5-{size}k", part=f"LFE5U-{size}F-6BG381C",
                  nextpnr_args=(f"--{size}k", "--package", "CABGA381", "--speed", "6"),
                  totals={"lut4": luts, "ff": luts, "mult18x18d": dsps, "dp16kd": brams})


#: The parts known to the flow (ECP5 speed grade 6, CABGA381, as on the ULX3S boards).
TARGETS = {t.name: t for t in (
    _ecp5(25, 24288, 28, 56),
    _ecp5(45, 43848, 72, 108),
    _ecp5(85, 83640, 156, 208),
)}


def target(name):
    """The :class:`Target` called ``name``, or :class:`SynthError` listing the known ones."""
    try:
        return TARGETS[name]
    except KeyError:
        raise SynthError(f"unknown target {name!r}; targets are {', '.join(TARGETS)}") from None



#: DP16KD aspect ratios (depth, data width); 512 x 36 only with one read and one write port.
_DP16KD_SHAPES = ((16384, 1), (8192, 2), (4096, 4), (2048, 9), (1024, 18), (512, 36))


def _brams(depth, width, copies=1):
    return copies * min(math.ceil(depth / d) * math.ceil(width / w) for d, w in _DP16KD_SHAPES)


def estimate(cfg, design="core"):
    """What a design needs of the scarce resources at least, before synthesis.

    One MULT18X18D per MAC; block RAM for the two scratchpads and the accumulator (which has
    two read ports and so two copies of one write and one read port each), not counting the
    core's smaller memories. yosys's own counts, checked after synthesis, are what the report
    gives.

    Returns
    -------
    dict
        ``mult18x18d`` and ``dp16kd``.
    """
    if design in ("store", "handshakes"):
        # No PE array and no memory of its own: only the epilogue's DSPs and tables.
        return {"mult18x18d": 0, "dp16kd": 0}
    brams = 0
    if design != "mesh":
        brams = (_brams(cfg.spad_depth, cfg.rows * cfg.in_width)
                 + _brams(cfg.spad_depth, cfg.cols * cfg.in_width)
                 + _brams(cfg.acc_depth, cfg.cols * cfg.acc_width, copies=2))
    return {"mult18x18d": cfg.rows * cfg.cols, "dp16kd": brams}


def check_fit(cfg, tgt, used, *, when):
    """Raise :class:`DoesNotFit` if ``used`` exceeds a total of ``tgt``."""
    over = [f"{used[key]} {key.upper()} > {tgt.totals[key]}"
            for key in ("mult18x18d", "dp16kd", "lut4", "ff")
            if key in used and used[key] > tgt.totals[key]]
    if over:
        raise DoesNotFit(f"config {cfg.name} ({cfg.tag}) does not fit {tgt.name} "
                         f"({tgt.part}) {when}: needs {', '.join(over)}")

