"""``bertaccel regress``: random GEMMs on the RTL as Ray tasks."""

import argparse
import json

from . import common
from .common import UsageError

__all__ = ["Regress"]


class Regress:
    """Random GEMMs with every epilogue, free-running and stalled, checked bit for bit."""

    name = "regress"
    help = ("random GEMMs with every epilogue, free-running and stalled, on the RTL, checked bit "
            "for bit; as Ray tasks")

    def add_arguments(self, parser):
        parser.add_argument("--configs", default="2x2,4x8,8x8", metavar="LIST",
                            help="presets or config .json files, comma-separated (2x2,4x8,8x8)")
        parser.add_argument("--programs", type=int, default=60, metavar="N",
                            help="random programs in all, shared out over the configs (60)")
        parser.add_argument("--seed", type=int, default=0, help="seeds the draw of programs (0)")
        common.add_cluster_options(parser)
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument("--build-root", default="build/sim", help=argparse.SUPPRESS)

    def run(self, args):
        from pathlib import Path

        from ..cluster.connect import connect
        from ..cluster.grid import GridError, name_list
        from ..cluster.regress import draw_cases, format_regress, regress
        try:
            specs = name_list("--configs", args.configs)
        except GridError as error:
            raise UsageError(str(error)) from None
        for spec in specs:
            common.config(spec)
        common.dimension("programs", args.programs)
        common.build_root(args.build_root)
        address, workers, retries = common.cluster_options(args)
        cases = draw_cases(specs, args.programs, args.seed)
        log = common.stderr_log(args)
        with connect(address, workers=workers) as where:
            if log:
                log(f"{len(cases)} programs over {', '.join(specs)} on Ray ({where['cpus']} CPUs, "
                    f"{where['nodes']} node(s)); the first of each config builds its simulator")
            report = regress(cases, build_root=Path(args.build_root).resolve(),
                             retries=retries, log=log)
        report.update(cluster=where, seed=args.seed)
        print(json.dumps(report, indent=2) if args.json else format_regress(report))
        return 0 if not report["failures"] else 1
