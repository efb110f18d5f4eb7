"""``bertaccel sweep``: a design-space sweep as Ray tasks."""

import argparse
import json

from . import common
from .common import UsageError

__all__ = ["Sweep"]


def _sweep_grid(args):
    """``(configs, invalid, workloads)`` of ``bertaccel sweep``'s options, or a usage error."""
    from ..cluster.grid import FIELDS, GridError, config_grid, int_list, name_list, \
        workload_grid
    from ..cluster.sweep import check_model
    try:
        fields = {name: int_list(f"--{name.replace('_', '-')}", getattr(args, name))
                  for name in FIELDS if getattr(args, name) is not None}
        presets = name_list("--configs", args.configs) if args.configs else []
        if not presets and not fields:
            raise GridError("give the configs to sweep: --configs and/or field lists "
                            "(--rows, --cols, --spad-depth, --acc-depth, --epilogue-lanes)")
        configs, invalid = config_grid(presets, fields)
        models = [check_model(model) for model in name_list("--model", args.model)]
        seqs = int_list("--seq", args.seq)
        if max(seqs) > 512:
            raise GridError(f"--seq must be at most 512 (BERT's positions), not {max(seqs)}")
        workloads = workload_grid(models, seqs, int_list("--batch", args.batch))
    except GridError as error:
        raise UsageError(str(error)) from None
    return configs, invalid, workloads


def _sweep_synth(args):
    """The synthesis settings of ``bertaccel sweep --synth``, or None."""
    if not args.synth:
        if args.target:
            raise UsageError("--target applies to --synth only")
        return None
    from pathlib import Path

    from ..fpga.errors import SynthError
    from ..fpga.targets import target
    try:
        target(args.target or "ecp5-85k")
    except SynthError as error:
        raise UsageError(str(error)) from None
    if args.synth_timeout <= 0:
        raise UsageError(f"--synth-timeout must be a positive number of minutes, "
                          f"not {args.synth_timeout}")
    common.build_root(args.build_root)
    return {"target": args.target or "ecp5-85k",
            "build_root": str(Path(args.build_root).resolve()),
            "timeout_s": 60 * args.synth_timeout, "seed": 1}


class Sweep:
    """Cycles, latency and utilization (and with ``--synth`` resources and Fmax) over a grid."""

    name = "sweep"
    help = ("design-space sweep on Ray: cycles, latency and utilization of BERT over a grid of "
            "configs (with --synth also resources and Fmax); JSON, CSV and a Pareto plot")

    def add_arguments(self, parser):
        parser.add_argument("--configs", metavar="LIST",
                            help="presets or config .json files, comma-separated (4x4,8x8); the "
                                 "field lists vary each of them")
        for field in ("rows", "cols", "spad-depth", "acc-depth", "epilogue-lanes"):
            parser.add_argument(f"--{field}", metavar="LIST",
                               help=f"values of {field.replace('-', '_')}, comma-separated")
        parser.add_argument("--model", default="minilm", metavar="LIST",
                            help="minilm (real weights), bert-base, bert-large (random weights) or "
                                 "a model folder; comma-separated (minilm)")
        parser.add_argument("--seq", default="128", metavar="LIST", help="tokens a sequence (128)")
        parser.add_argument("--batch", default="1", metavar="LIST", help="sequences (1)")
        parser.add_argument("--seed", type=int, default=0, help="seeds the random weights (0)")
        parser.add_argument("--synth", action="store_true",
                            help="also synthesise, place and route each config's core (minutes a "
                                 "config; cached in build/synth)")
        parser.add_argument("--target", help="--synth: the FPGA part (ecp5-85k)")
        parser.add_argument("--synth-timeout", type=float, default=45.0, metavar="MIN",
                            help="--synth: minutes place and route may take (45)")
        common.add_cluster_options(parser)
        parser.add_argument("-o", "--output", default="build/sweep",
                            help="folder for parser.json, parser.csv, pareto.png (build/sweep)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument("--build-root", default="build/synth", help=argparse.SUPPRESS)

    def run(self, args):
        common.quiet_transformers()
        from ..cluster.connect import connect
        from ..cluster.sweep import sweep
        from ..cluster.table import format_sweep, write_sweep
        configs, invalid, workloads = _sweep_grid(args)
        synth = _sweep_synth(args)
        address, workers, retries = common.cluster_options(args)
        out_dir = common.output_dir(args.output)
        log = common.stderr_log(args)
        with connect(address, workers=workers) as where:
            if log:
                log(f"{len(configs)} config(s) x {len(workloads)} workload(s) on Ray "
                    f"({where['cpus']} CPUs, {where['nodes']} node(s))")
            report = sweep(configs, workloads, invalid=invalid, synth=synth, seed=args.seed,
                           retries=retries, log=log)
        report["cluster"] = where
        write_sweep(report, out_dir)
        print(json.dumps(report, indent=2) if args.json else format_sweep(report))
        return 0
