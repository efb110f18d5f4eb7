"""The FPGA parts the flow places and routes for, and what a design needs of them.

:data:`TARGETS` names the parts; :func:`estimate` says how many multipliers and block RAMs a
design needs at least, before synthesis, and :func:`check_fit` refuses a design that needs more
of some resource than the part has (before synthesis against the estimate, after it against
yosys's counts). :func:`dsp_blocks` counts a core's MULT18X18D, and :func:`fit_lut_pes` finds
the fewest PEs that must multiply in the fabric (``AccelConfig.lut_pes``) for them to fit.
"""

import math
from dataclasses import dataclass, replace

from .errors import DoesNotFit, SynthError

__all__ = ["Target", "TARGETS", "target", "estimate", "check_fit", "dsp_blocks", "fit_lut_pes",
           "EPILOGUE_DSPS_PER_LANE", "FINALIZE_DSPS", "CHECKER_DSPS"]

#: MULT18X18D of one epilogue lane on an ECP5: the four 17 x 16 tiles of its front multiply,
#: ``v * v``, and two tiles each for its second and third multiplies (hw/epilogue/unit.py).
EPILOGUE_DSPS_PER_LANE = 9
#: MULT18X18D of the LayerNorm finalize pipeline, which the lanes share
#: (hw/epilogue/finalize.py).
FINALIZE_DSPS = 13
#: MULT18X18D of the instruction checker: a STORE's ``strips * stride`` and ``strips * rows``
#: (hw/checker.py).
CHECKER_DSPS = 2


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


def dsp_blocks(cfg, design="core"):
    """The MULT18X18D that ``design`` (``"core"``, ``"mesh"`` or ``"datapath"``) of ``cfg`` maps
    to: one a PE but for the ``lut_pes`` that multiply in the fabric, and for the core the
    epilogue's nine a lane and thirteen shared, and the checker's two.
    ``verif/block/test_synth.py`` checks it against yosys's count."""
    macs = cfg.rows * cfg.cols - cfg.lut_pes
    epilogue = EPILOGUE_DSPS_PER_LANE * cfg.ep_lanes + FINALIZE_DSPS
    return {"core": macs + epilogue + CHECKER_DSPS, "mesh": macs, "datapath": macs}[design]


def fit_lut_pes(cfg, tgt):
    """The smallest ``lut_pes`` with which the core of ``cfg`` has the MULT18X18D it needs on
    ``tgt``: 0 if it fits as it is, or :class:`DoesNotFit` if even a fabric multiply in every
    PE leaves too few (the epilogue's and the checker's)."""
    spare = tgt.totals["mult18x18d"] - dsp_blocks(replace(cfg, lut_pes=0))
    if spare < -cfg.rows * cfg.cols:
        need = dsp_blocks(replace(cfg, lut_pes=cfg.rows * cfg.cols))
        raise DoesNotFit(f"config {cfg.name} ({cfg.tag}) does not fit {tgt.name} "
                         f"({tgt.part}) with any lut_pes: its epilogue and checker alone "
                         f"need {need} MULT18X18D > {tgt.totals['mult18x18d']}")
    return max(0, -spare)


def estimate(cfg, design="core"):
    """What a design needs of the scarce resources at least, before synthesis.

    Its MULT18X18D (:func:`dsp_blocks`; none for the store and handshakes designs); block
    RAM for the two scratchpads and the accumulator (which has two read ports and so two
    copies of one write and one read port each), not counting the core's smaller memories.
    yosys's own counts, checked after synthesis, are what the report gives.

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
    return {"mult18x18d": dsp_blocks(cfg, design), "dp16kd": brams}


def check_fit(cfg, tgt, used, *, when, hint=""):
    """Raise :class:`DoesNotFit` if ``used`` exceeds a total of ``tgt`` (the message ends with
    ``hint``)."""
    over = [f"{used[key]} {key.upper()} > {tgt.totals[key]}"
            for key in ("mult18x18d", "dp16kd", "lut4", "ff")
            if key in used and used[key] > tgt.totals[key]]
    if over:
        raise DoesNotFit(f"config {cfg.name} ({cfg.tag}) does not fit {tgt.name} "
                         f"({tgt.part}) {when}: needs {', '.join(over)}{hint}")

