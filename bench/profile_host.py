"""Profile PyTorch BERT on this CPU by op class: MiniLM and the BERT-base shape, inference and
one training step; print the tables, write the JSON and the stacked-bar plot.

::

    python bench/profile_host.py [--seq 128] [--batch 1] [--iterations 5] [--threads 2]
                                 [--config 8x8] [--accel-breakdown cycles.json]
    python bench/profile_host.py --replot [--config 16x16]     # no new host measurement

Each model and mode goes through :func:`bertaccel.analysis.profile.profile` (what ``bertaccel
profile`` runs): MiniLM with its real all-MiniLM-L6-v2 weights, BERT-base as its shape (12
layers, hidden 768, 12 heads, intermediate 3072) with random weights from the seed; eager
attention; the training step is forward with dropout on, a sequence-classification
cross-entropy loss, backward and an AdamW step. Writes ``bench/results/profile_host.json`` and
``bench/results/profile_host.png`` (needs matplotlib). Beside each model's host bars goes the
accelerator's: the cycle model's breakdown of the same model and input on ``--config``
(inference; :func:`bertaccel.analysis.profile.accelerator_side`), by the same classes. With
``--accel-breakdown`` one more accelerator bar is drawn from a file. ``--replot`` keeps the host
measurements in the JSON and recomputes the accelerator bars (deterministic) and the PNG. The
method is in ``docs/profile.md``.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from _record import record  # bench/ is on sys.path
from bertaccel.analysis.profile import (OP_CLASSES, SCHEMA, ProfileError, accel_bar,
                                        accelerator_side, busy_warning, format_table,
                                        load_accel_breakdown, plot_shares, profile, report_bars,
                                        threads_text)
from bertaccel.cli.profile import add_measure_arguments

RESULTS = Path(__file__).resolve().parent / "results"
MODELS = ("minilm", "bert-base")


def plot(doc, png):
    """Draw the bars of every profile in ``doc`` (each with its accelerator) into ``png``."""
    bars = []
    for report in doc["profiles"]:
        if bars:
            bars.append(None)                          # a gap between the models
        bars.extend(report_bars(report))
    accel = doc.get("accelerator")
    if accel:
        bars.extend([None, accel_bar(accel)])
    accel = accel or any(report.get("accelerator") for report in doc["profiles"])
    first = doc["profiles"][0]
    env = first["environment"]
    iterations = next(iter(first["runs"].values()))["iterations"]
    busy = any(busy_warning(report["environment"]) for report in doc["profiles"])
    plot_shares(bars, png,
                title=f"BERT, batch {first['batch']}, seq {first['seq']}: PyTorch time on the "
                      f"host CPU and accelerator cycles, by op class",
                subtitle=f"{env['cpu']}, {threads_text(env)}, torch {env['torch']}; median "
                         f"self time of ATen operators over {iterations} iterations"
                         + ("" if accel else "\nno accelerator breakdown given: host only")
                         + ("\nthe machine was busy during the run (see other_runnable in the "
                            "JSON)" if busy else ""))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    add_measure_arguments(parser)
    parser.add_argument("--replot", action="store_true",
                        help="redraw the PNG from --output instead of profiling")
    parser.add_argument("--output", type=Path, default=RESULTS / "profile_host.json")
    parser.add_argument("--png", type=Path, default=RESULTS / "profile_host.png")
    args = parser.parse_args(argv)
    from bertaccel.sw.paths import check_args
    check_args(parser, files={"--output": args.output, "--png": args.png})

    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()

    begin = time.monotonic()
    try:
        accel = load_accel_breakdown(args.accel_breakdown) if args.accel_breakdown else None
        if args.replot:
            doc = json.loads(args.output.read_text())
            doc["accelerator"] = accel or doc.get("accelerator")
        else:
            doc = {"schema": f"{SCHEMA}-host", "classes": list(OP_CLASSES), "profiles": [],
                   "accelerator": accel}
            for model in args.models:
                doc["profiles"].append(
                    profile(model, batch=args.batch, seq=args.seq, iterations=args.iterations,
                            warmup=args.warmup, seed=args.seed, threads=args.threads,
                            log=lambda text: print(f"bench: {text}", file=sys.stderr)))
        if args.config != "none":                     # deterministic: recomputed on --replot
            for report in doc["profiles"]:
                name = report["model"]["name"]
                print(f"bench: {name}: the accelerator side on {args.config}", file=sys.stderr)
                report["accelerator"] = accelerator_side(name, config=args.config,
                                                         seq=report["seq"],
                                                         batch=report["batch"],
                                                         seed=report["seed"])
    except ProfileError as error:
        print(f"bench: error: {error}", file=sys.stderr)
        return 2

    record(doc, args.output, __file__, argv)
    plot(doc, args.png)
    for report in doc["profiles"]:
        print(format_table(report))
        print()
    print(f"wrote {args.output}")
    print(f"wrote {args.png} ({time.monotonic() - begin:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
