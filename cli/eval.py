"""``bertaccel eval stsb``: all-MiniLM-L6-v2 on STS-B, FP32 against the accelerator's bit-exact
path (:mod:`bertaccel.analysis.stsb`)."""

import json

from . import common
from .common import Parser, UsageError

__all__ = ["Eval"]


def _stsb(args):
    from ..analysis.stsb import evaluate, format_report
    from ..cluster.grid import GridError, name_list
    from ..golden.stsb import SPLITS, StsbError
    try:
        configs = name_list("--configs", args.configs)
        splits = name_list("--split", args.split)
    except GridError as error:
        raise UsageError(str(error)) from None
    for cfg in configs:
        common.config(cfg)
    for split in splits:
        if split not in SPLITS:
            raise UsageError(f"--split must name {' or '.join(SPLITS)}, not {split!r}")
    if args.batch_size < 1:
        raise UsageError(f"--batch-size must be at least 1, not {args.batch_size}")
    common.quiet_transformers()
    try:
        report = evaluate(configs, splits, batch_size=args.batch_size, cache=not args.no_cache,
                          cache_dir=args.cache_dir, log=common.stderr_log(args))
    except StsbError as error:
        raise UsageError(str(error)) from None
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


class Eval:
    """Accuracy on a real benchmark: ``bertaccel eval stsb``."""

    name = "eval"
    help = "accuracy on a real benchmark: STS-B's Spearman for FP32 and the accelerator"

    def add_arguments(self, parser):
        benches = parser.add_subparsers(dest="benchmark", required=True, parser_class=Parser)
        sts = benches.add_parser("stsb", help="all-MiniLM-L6-v2 on STS-B: Spearman x 100 of "
                                              "cosine similarities, FP32 and each config")
        sts.add_argument("--configs", default="8x8,16x16", metavar="LIST",
                         help="presets or config .json files, comma-separated (8x8,16x16)")
        sts.add_argument("--split", default="dev,test", metavar="LIST",
                         help="dev, test or both, comma-separated (dev,test)")
        sts.add_argument("--batch-size", type=int, default=32, help="texts a batch (32)")
        common.add_cache_options(sts)
        sts.add_argument("--json", action="store_true", help="print one JSON object")

    def run(self, args):
        return _stsb(args)
