"""``bertaccel seqpoint``: a text set's cycles projected from k representative lengths."""

import json

from . import common
from .common import UsageError

__all__ = ["Seqpoint"]


def _compared(text):
    """The configs of ``--compare``: at least two, each a preset or a .json."""
    from ..cluster.grid import GridError, name_list
    try:
        specs = name_list("--compare", text)
    except GridError as error:
        raise UsageError(str(error)) from None
    if len(specs) < 2:
        raise UsageError(f"--compare needs at least two configs, not {text!r}")
    return [common.config(spec) for spec in specs]


class Seqpoint:
    """Project a text set's cycles from k sequence lengths (SeqPoint)."""

    name = "seqpoint"
    help = "project a text set's cycles from k representative sequence lengths"

    def add_arguments(self, parser):
        parser.add_argument("--model", default="minilm",
                            help="minilm (real weights) or a shape: bert-base, bert-large "
                                 "(random weights) (minilm)")
        parser.add_argument("--config", default="8x8", help="a preset or a .json (8x8)")
        parser.add_argument("--compare", metavar="LIST",
                            help="instead of --config: presets or .json files, comma-separated; "
                                 "project each one's speed-up over the first from the k lengths "
                                 "and compare with timing every text on each")
        parser.add_argument("--texts", default="stdlib",
                            help="stdlib (every docstring of the stdlib modules of the accuracy "
                                 "set), sentences (the 96 real sentences), stsb (the 2,758 "
                                 "sentences of STS-B's test split) or a file, one input a line "
                                 "(stdlib)")
        parser.add_argument("--k", type=int, default=10, help="try k = 1 .. K points (10)")
        parser.add_argument("--seed", type=int, default=0, help="seeds random weights (0)")
        common.add_cache_options(parser)
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def run(self, args):
        common.quiet_transformers()
        from ..analysis.seqpoint import (compare_text_set, format_compare, format_report,
                                         seqpoint_text_set)
        from ..sw.bert import BertError
        from ..sw.bert.cache import CacheError, CompileCache
        cfgs = _compared(args.compare) if args.compare else None
        cfg = common.config(args.config)
        if args.k < 1:
            raise UsageError(f"--k must be at least 1, not {args.k}")
        ks, log = range(1, args.k + 1), common.stderr_log(args)
        try:
            cache = None if args.no_cache else CompileCache(args.cache_dir).check()
            if cfgs:
                report = compare_text_set(args.model, cfgs, args.texts, ks=ks, seed=args.seed,
                                          cache=cache, log=log)
            else:
                report, _ = seqpoint_text_set(args.model, cfg, args.texts, ks=ks,
                                              seed=args.seed, cache=cache, log=log)
        except (BertError, CacheError) as error:
            raise UsageError(str(error)) from None
        text = format_compare(report) if cfgs else format_report(report)
        print(json.dumps(report, indent=2) if args.json else text)
        return 0
