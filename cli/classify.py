"""``bertaccel classify``: a sequence or token classifier of the BERT family, its encoder on
the accelerator and its head on the host, against FP32 PyTorch."""

import argparse
import json

from . import common
from .common import UsageError

__all__ = ["Classify"]

#: Inputs shown in the text report (``--json`` has all).
SHOWN = 8


def _read_inputs(args):
    """``(texts, pairs)`` of ``--text``, ``--pair`` and ``--text-file`` (one text a line, or
    a pair as two texts with a tab between; read as ``bertaccel run`` reads it,
    :func:`~bertaccel.sw.bert.text.read_text_file`); one of the two is None."""
    from ..sw.bert import BertError
    from ..sw.bert.text import read_text_file

    texts, pairs = list(args.text or []), [tuple(p) for p in args.pair or []]
    if args.text_file:
        try:
            lines = read_text_file(args.text_file)
        except BertError as error:
            raise UsageError(str(error)) from None
        for line in lines:
            fields = line.split("\t")
            if len(fields) > 2:
                raise UsageError(f"{args.text_file}: a line holds one text or two with a tab "
                                 f"between, not {len(fields)} fields")
            if len(fields) == 2:
                pairs.append(tuple(fields))
            else:
                texts.append(line)
    if texts and pairs:
        raise UsageError("give texts or text pairs, not both")
    if not texts and not pairs:
        raise UsageError("nothing to classify: give --text, --pair or --text-file")
    return (texts, None) if texts else (None, pairs)


def format_report(report):
    """The report as lines of text."""
    lines = [f"model        {report['model']} ({report['kind']} classifier, labels "
             f"{', '.join(map(str, report['labels']))})",
             f"config       {report['config']} ({report['tag']}), device {report['device']}"]
    for number, row in enumerate(report["inputs"][:SHOWN]):
        label = row["label"] if report["kind"] == "sequence" else " ".join(
            f"{token}/{tag}" for token, tag in zip(row["tokens"], row["label"]))
        lines.append(f"[{number}]          {label}"
                     + (f" (FP32: {row['fp32_label']})" if "fp32_label" in row
                        and report["kind"] == "sequence" else ""))
    if len(report["inputs"]) > SHOWN:
        lines.append(f"             ... {len(report['inputs']) - SHOWN} more (--json for all)")
    if "label_agreement" in report:
        lines.append(f"vs FP32      labels {report['label_agreement']:.1%} the same; logits "
                     f"within {report['logit_error']:.2%} of FP32's largest")
    lines.append(f"cycles       {report['cycles']:,} ({report['latency_s'] * 1e3:.3f} ms at "
                 f"{report['clock_mhz']:g} MHz)")
    if report.get("bit_exact") is not None:
        lines.append(f"bit-exact    {report['bit_exact']} (RTL against the software device)")
    return "\n".join(lines)


class Classify:
    """Classify ``--text``, ``--pair`` or ``--text-file`` inputs with a task model."""

    name = "classify"
    help = ("classify text or text pairs with a sequence or token classifier of the BERT "
            "family: the encoder on the accelerator, the head on the host")

    def add_arguments(self, parser):
        parser.add_argument("--model", required=True, metavar="FOLDER",
                            help="a local folder of a *ForSequenceClassification or "
                                 "*ForTokenClassification model (BERT, RoBERTa, XLM-R, ELECTRA, "
                                 "DistilBERT, ALBERT)")
        parser.add_argument("--text", action="append", metavar="TEXT",
                            help="a text to classify; may be repeated")
        parser.add_argument("--pair", action="append", nargs=2, metavar=("FIRST", "SECOND"),
                            help="a text pair (a cross-encoder's input); may be repeated")
        parser.add_argument("--text-file", metavar="F",
                            help="inputs one a line (UTF-8): a text, or a pair with a tab "
                                 "between; blank lines are skipped")
        parser.add_argument("--device", choices=("ref", "isa", "rtl"), default="ref",
                            help="as for bertaccel run (ref)")
        parser.add_argument("--config", default="8x8", help="a preset or a .json (8x8)")
        parser.add_argument("--batch-size", type=int, default=32, help="inputs a batch (32)")
        parser.add_argument("--no-fp32", action="store_true",
                            help="do not compare with the FP32 model")
        common.add_cache_options(parser)
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument("--build-root", default="build/sim", help=argparse.SUPPRESS)

    def run(self, args):
        import os
        os.environ["HF_HUB_OFFLINE"] = "1"
        from ..sw.bert import BertError
        from ..sw.bert.cache import CacheError
        from ..sw.bert.classify import Classifier
        cfg = common.config(args.config)
        common.dimension("batch-size", args.batch_size)
        texts, pairs = _read_inputs(args)
        if args.device == "rtl":
            common.build_root(args.build_root)
        common.quiet_transformers()
        try:
            with Classifier(args.model, config=cfg, device=args.device, cache=not args.no_cache,
                            cache_dir=args.cache_dir, build_root=args.build_root) as model:
                report = model.classify(texts, pairs, batch_size=args.batch_size,
                                        compare_fp32=not args.no_fp32)
        except (BertError, CacheError) as error:
            raise UsageError(str(error)) from None
        report["model"] = str(args.model)
        print(json.dumps(report, indent=2) if args.json else format_report(report))
        return 0 if report["bit_exact"] in (None, True) else 1
