"""``bertaccel run``: embed texts with a BERT model on a device, alone or over Ray actors."""

import argparse
import json
import sys

from . import common
from .common import UsageError

__all__ = ["Run"]


def _add_ray_run_options(run):
    run.add_argument("--ray", action="store_true",
                     help="share the texts out over Ray actors that each hold the compiled "
                          "model (same embeddings, in input order)")
    common.add_cluster_options(run)


def _ray_stream(args):
    """``bertaccel run``'s ShardedStream with ``--ray``, else None."""
    if not args.ray:
        if args.address or args.workers is not None or args.retries is not None:
            raise UsageError("--address, --workers and --retries apply to --ray only")
        return None
    from ..cluster.shard import ShardedStream
    address, workers, retries = common.cluster_options(args)
    return ShardedStream(args.model, cache=not args.no_cache, cache_dir=args.cache_dir,
                         address=address, workers=workers, retries=retries)


class Run:
    """Embed ``--text`` and ``--text-file`` texts and compare with FP32 PyTorch."""

    name = "run"
    help = "embed text with a BERT model on the accelerator and compare with FP32 PyTorch"

    def add_arguments(self, parser):
        parser.add_argument("--model", default="minilm",
                            help="'minilm' (all-MiniLM-L6-v2, offline) or a local model folder "
                                 "of the BERT family (BERT, RoBERTa, XLM-R, ELECTRA, DistilBERT, "
                                 "ALBERT)")
        parser.add_argument("--text", action="append", metavar="TEXT",
                            help="a text to embed; may be repeated")
        parser.add_argument("--text-file", metavar="F",
                            help="texts to embed, one a line (UTF-8; blank lines are skipped), "
                                 "read and run in windows of sorted batches: any length, "
                                 "bounded memory")
        parser.add_argument("--device", choices=("ref", "isa", "rtl"), default="ref",
                            help="ref: the bit-exact software reference at tensor speed; isa: "
                                 "the instruction-level software device; rtl: the Verilated "
                                 "RTL, checked bit for bit against ref")
        parser.add_argument("--config", default="8x8", help="a preset or a .json (8x8)")
        parser.add_argument("--batch-size", type=int, default=32, help="texts a batch (32)")
        parser.add_argument("--output", metavar="F",
                            help="write the embeddings to F (.npy: float32 rows in input order; "
                                 ".jsonl: one object a text, with its line number)")
        parser.add_argument("--max-seq-length", type=int, metavar="N",
                            help="tokens a text keeps; longer text is truncated, with a "
                                 "warning (the model's own max_seq_length: 256 for minilm)")
        parser.add_argument("--no-fp32", action="store_true",
                            help="do not compare with the FP32 model (it costs about as much "
                                 "again)")
        common.add_cache_options(parser)
        parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
        parser.add_argument("--max-memory", metavar="SIZE",
                            help="refuse a run whose largest batch is estimated to need more "
                                 "memory than SIZE (4G, 512M); by default, more than the "
                                 "machine has")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument("--build-root", default="build/sim", help=argparse.SUPPRESS)
        _add_ray_run_options(parser)

    def run(self, args):
        import os
        os.environ["HF_HUB_OFFLINE"] = "1"
        from ..sw.bert import BertError
        from ..sw.bert.cache import CacheError
        from ..sw.bert.progress import RateProgress
        from ..sw.bert.text import format_report, run_texts
        from ..sw.budget import BudgetError
        cfg = common.config(args.config)
        max_memory = common.max_memory(args)
        if args.batch_size < 1:
            raise UsageError(f"--batch-size must be at least 1, not {args.batch_size}")
        if args.device == "rtl":
            common.build_root(args.build_root)
        log = None if args.quiet else (lambda text: print(f"bertaccel: {text}", file=sys.stderr))
        stream = _ray_stream(args)
        try:
            report = run_texts(args.model, cfg=cfg, texts=args.text, text_file=args.text_file,
                               device=args.device, batch_size=args.batch_size, output=args.output,
                               compare_fp32=not args.no_fp32, cache=not args.no_cache,
                               cache_dir=args.cache_dir, build_root=args.build_root,
                               progress=None if args.quiet else RateProgress(), log=log,
                               stream=stream, max_memory=max_memory,
                               max_seq_length=args.max_seq_length)
        except (BertError, CacheError, BudgetError) as error:
            raise UsageError(str(error)) from None
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            print(format_report(report))
        return 0 if report["bit_exact"] in (None, True) else 1
