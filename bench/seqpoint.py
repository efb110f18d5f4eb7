"""SeqPoint on a real text set: project its accelerator cycles from k = 1..10 sequence lengths.

::

    python bench/seqpoint.py [--model minilm] [--config 8x8] [--texts stdlib] [--k 10]

What ``bertaccel seqpoint`` runs (:mod:`bertaccel.analysis.seqpoint`): every docstring of the
stdlib modules of the accuracy set (376 texts with CPython 3.11) tokenised with all-MiniLM-L6-v2's
tokenizer, each input timed on its own by the cycle model, against the projection from k
representative lengths. Writes ``bench/results/seqpoint.json`` and ``seqpoint.png`` (the length
histogram with the k = 3 points, and the error against k).
"""

import argparse
import os
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def plot(report, lengths, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    left.hist(lengths, bins=64, color="tab:blue", alpha=0.7)
    for point in report["ks"][3]["points"]:
        left.axvline(point["length"], color="tab:red", linestyle="--", linewidth=1)
        left.axvspan(point["low"], point["high"], color="tab:red", alpha=0.05)
    left.set_xlabel("tokens")
    left.set_ylabel("inputs")
    left.set_title(f"{report['inputs']} inputs; k = 3 points (dashed) and their bins")
    ks = list(report["ks"])
    right.plot(ks, [100 * report["ks"][k]["abs_error"] for k in ks], marker="o")
    right.axhline(1, color="grey", linestyle=":", linewidth=1)
    right.set_yscale("log")
    right.set_xlabel("k (representative lengths run)")
    right.set_ylabel("|projection error|, %")
    right.set_title(f"{report['model']} on {report['config']}: projected vs every input")
    right.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="minilm")
    parser.add_argument("--config", default="8x8")
    parser.add_argument("--texts", default="stdlib")
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--output", type=Path, default=RESULTS / "seqpoint.json")
    args = parser.parse_args(argv)
    from bertaccel.sw.paths import check_args
    check_args(parser, files={"--output": args.output,
                              "the plot": args.output.with_suffix(".png")})
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()

    from _record import record  # bench/ is on sys.path
    from bertaccel.hw.config import load_config
    from bertaccel.analysis.seqpoint import format_report, seqpoint_text_set

    begin = time.monotonic()
    report, lengths = seqpoint_text_set(
        args.model, load_config(args.config), args.texts, ks=range(1, args.k + 1),
        log=lambda text: print(f"bench: {text}", file=sys.stderr))
    report["lengths"] = lengths
    record(report, args.output, __file__, argv)
    png = args.output.with_suffix(".png")
    plot(report, lengths, png)
    print(format_report(report))
    print(f"wrote {args.output} and {png} ({time.monotonic() - begin:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
