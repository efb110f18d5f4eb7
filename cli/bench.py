"""``bertaccel bench``: performance figures from the cycle model."""

import json

from . import common
from .common import Parser, UsageError

__all__ = ["Bench"]


def _add_bert_arguments(parser):
    parser.add_argument("--shape", default="bert-base",
                        help="bert-base, bert-large or minilm (bert-base)")
    parser.add_argument("--seq", type=int, default=128, help="tokens per sequence (128)")
    parser.add_argument("--batch", type=int, default=1, help="sequences (1)")
    parser.add_argument("--config", default="16x16", help="a preset or a .json (16x16)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the random weights (0)")
    parser.add_argument("--one-layer", action="store_true",
                        help="time layer 0 and count it for every layer (the layers of a "
                             "random model have the same programs)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--max-memory", metavar="SIZE",
                        help="refuse a shape estimated to need more memory than SIZE (4G, "
                             "512M); by default, more than the machine has available")


def _bench_bert(args):
    common.quiet_transformers()
    from ..analysis.perf import SHAPES, bench_bert, compile_shape, format_report
    from ..sw.bert import BertError
    from ..sw.budget import bert_memory
    cfg = common.config(args.config)
    common.max_memory(args)
    if args.shape not in SHAPES:
        raise UsageError(f"--shape must be one of {', '.join(SHAPES)}, not {args.shape!r}")
    common.dimension("seq", args.seq)
    common.dimension("batch", args.batch)
    if args.seq > 512:
        raise UsageError(f"--seq must be at most 512 (BERT's positions), not {args.seq}")
    log = common.stderr_log(args)
    try:
        if log:
            log(f"compiling a random-weight {args.shape} for {cfg.label}")
        bert = compile_shape(args.shape, cfg, seed=args.seed)
        if args.seq <= bert.max_seq:                # else bench_bert says why not
            common.check_memory(bert_memory(bert, args.batch, args.seq), args,
                                f"{args.shape} with {args.batch} x {args.seq} tokens on "
                                f"{cfg.label}", "; a smaller --batch or --seq needs less")
        report = bench_bert(bert, seq=args.seq, batch=args.batch,
                            every_layer=not args.one_layer, log=log)
    except BertError as error:
        raise UsageError(str(error)) from None
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


class Bench:
    """``bertaccel bench bert``: a BERT shape (random weights) on a config, timed."""

    name = "bench"
    help = "performance figures from the cycle model"

    def add_arguments(self, parser):
        benches = parser.add_subparsers(dest="bench", required=True, parser_class=Parser)
        bert = benches.add_parser("bert", help="time a BERT shape (random weights) on a config: "
                                               "cycles, utilization, latency, breakdown")
        _add_bert_arguments(bert)

    def run(self, args):
        return _bench_bert(args)
