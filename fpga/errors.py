"""The errors of the FPGA flow (:mod:`.synth` and the rooms it draws on)."""

__all__ = ["SynthError", "DoesNotFit", "NotRouted"]


class SynthError(RuntimeError):
    """A synthesis tool failed, or is missing."""


class DoesNotFit(SynthError):
    """The config needs more of some resource than the part has."""


class NotRouted(SynthError):
    """nextpnr did not finish within the time limit.

    Members
    -------
    used : dict
        yosys's counts (as :func:`~bertaccel.fpga.reports.parse_yosys_stat` gives them).
    placed_fmax_mhz : float or None
        nextpnr's Fmax estimate after placement, if it got that far (rough: routing delays are
        estimated).
    lut_mapper : str
        The LUT mapper that made the netlist (as the report's ``lut_mapper``).
    router_iteration : tuple or None
        ``(iteration, overused wires)`` from router2's last finished iteration, if it got that
        far.
    seed : int
        The placement seed of the run.
    placer : str
        nextpnr's placer in the run.
    router : str
        nextpnr's router in the run.
    """

    def __init__(self, message, *, used, placed_fmax_mhz, lut_mapper="abc9",
                 router_iteration=None, seed=1, placer="heap", router="router1"):
        super().__init__(message)
        self.used = used
        self.placed_fmax_mhz = placed_fmax_mhz
        self.lut_mapper = lut_mapper
        self.router_iteration = router_iteration
        self.placer = placer
        self.router = router
        self.seed = seed

