"""``bertaccel seqpoint``: a text set's cycles projected from k representative lengths."""

import json

from . import common
from .common import UsageError

__all__ = ["Seqpoint"]


class Seqpoint:
    """Project a text set's cycles from k sequence lengths (SeqPoint)."""

    name = "seqpoint"
    help = ("project a text set's cycles from k "
                                                    "representative sequence lengths")

    def add_arguments(self, parser):
        parser.add_argument("--model", default="minilm",
                            help="minilm (real weights) or a shape: bert-base, bert-large "
                                 "(random weights) (minilm)")
        parser.add_argument("--config", default="8x8", help="a preset or a .json (8x8)")
        parser.add_argument("--texts", default="stdlib",
                            help="stdlib (every docstring of the stdlib modules of the accuracy "
                                 "set), sentences (the 96 real sentences) or a file, one input "
                                 "a line (stdlib)")
        parser.add_argument("--k", type=int, default=10, help="try k = 1 .. K points (10)")
        parser.add_argument("--seed", type=int, default=0, help="seeds random weights (0)")
        parser.add_argument("--no-cache", action="store_true",
                            help="compile the model afresh and keep nothing on disk")
        parser.add_argument("--cache-dir", metavar="D",
                            help="compile cache folder ($BERTACCEL_CACHE or ~/.cache/bertaccel)")
        parser.add_argument("--json", action="store_true", help="print one JSON object")

    def run(self, args):
        common.quiet_transformers()
        from ..analysis.seqpoint import format_report, seqpoint_text_set
        from ..sw.bert import BertError
        from ..sw.bert.cache import CacheError, CompileCache
        cfg = common.config(args.config)
        if args.k < 1:
            raise UsageError(f"--k must be at least 1, not {args.k}")
        try:
            cache = None if args.no_cache else CompileCache(args.cache_dir).check()
            report, _ = seqpoint_text_set(args.model, cfg, args.texts, ks=range(1, args.k + 1),
                                          seed=args.seed, cache=cache, log=common.stderr_log(args))
        except (BertError, CacheError) as error:
            raise UsageError(str(error)) from None
        print(json.dumps(report, indent=2) if args.json else format_report(report))
        return 0
