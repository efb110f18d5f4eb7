"""BERT-base on the accelerator: utilization against sequence length, and where the cycles go.

::

    python bench/bert_utilization.py [--configs 8x8 16x16 32x32] [--seqs 8 16 ... 512]

Times a random-weight BERT-base (12 layers, hidden 768, 12 heads, intermediate 3072; what
``bertaccel bench bert`` runs) with the cycle model, which equals the RTL's cycles on every
program of the test suite: every layer at seq 128 (batch 1) for each config, and layer 0 counted
12 times for the sweep (the layers of a random model have the same programs). Writes
``bench/results/bert_utilization.json`` and ``bench/results/bert_utilization.png`` (utilization
against sequence length; the seq-128 breakdown by class).
"""

import argparse
import sys
import time
from pathlib import Path

from _record import record  # bench/ is on sys.path
from bertaccel.hw.config import PRESETS
from bertaccel.analysis.perf import CLASS_LABELS, CLASSES, bench_bert, compile_shape, retarget

RESULTS = Path(__file__).resolve().parent / "results"
SEQS = (8, 16, 32, 64, 128, 256, 384, 512)


def plot(doc, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={"width_ratios": [3, 2]})
    for name, points in doc["sweep"].items():
        seqs = [p["seq"] for p in points]
        left.plot(seqs, [100 * p["utilization"] for p in points], marker="o", label=name)
    left.set_xscale("log", base=2)
    left.set_xticks(doc["seqs"], [str(s) for s in doc["seqs"]])
    left.set_ylim(0, 100)
    left.axhline(90, color="grey", linestyle=":", linewidth=1)
    left.set_xlabel("sequence length (tokens, batch 1)")
    left.set_ylabel("utilization (model MACs / (rows x cols x cycles)), %")
    left.set_title("BERT-base end to end, cycle model")
    left.grid(alpha=0.3)
    left.legend(title="array")

    names = list(doc["seq128"])
    colors = plt.get_cmap("tab10").colors
    bottom = [0.0] * len(names)
    for number, cls in enumerate(CLASSES):
        shares = [100 * doc["seq128"][n]["shares"][cls] for n in names]
        right.bar(names, shares, bottom=bottom, label=CLASS_LABELS[cls],
                  color=colors[number % len(colors)], hatch="//" if cls == "stalls" else None)
        bottom = [b + s for b, s in zip(bottom, shares)]
    for x, n in enumerate(names):
        right.text(x, 101, f"{100 * doc['seq128'][n]['utilization']:.1f} %", ha="center",
                   fontsize=9)
    right.set_ylim(0, 108)
    right.set_ylabel("share of cycles, %")
    right.set_title("seq 128: where the cycles go")
    right.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["8x8", "16x16", "32x32"],
                        choices=list(PRESETS))
    parser.add_argument("--seqs", nargs="+", type=int, default=list(SEQS))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS / "bert_utilization.json")
    args = parser.parse_args(argv)
    from bertaccel.sw.paths import check_args
    check_args(parser, files={"--output": args.output,
                              "the plot": args.output.with_suffix(".png")})
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()

    begin = time.monotonic()
    base = compile_shape("bert-base", PRESETS[args.configs[0]], seed=args.seed)
    doc = {"schema": "bertaccel-bert-utilization/1", "model": "bert-base (random weights)",
           "seqs": args.seqs, "batch": 1, "seq128": {}, "sweep": {}}
    for name in args.configs:
        bert = retarget(base, PRESETS[name])
        report = bench_bert(bert, seq=128)
        doc["seq128"][name] = report
        print(f"{name:>6} seq 128: {report['cycles']:,} cycles, ideal "
              f"{report['ideal_cycles']:,}, utilization {report['utilization']:.1%}, "
              f"{report['latency_us']:,.0f} us at {report['clock_mhz']:g} MHz", flush=True)
        doc["sweep"][name] = []
        for seq in args.seqs:
            if seq > bert.max_seq:
                print(f"{name:>6} seq {seq}: longer than the config takes ({bert.max_seq})")
                continue
            r = bench_bert(bert, seq=seq, every_layer=False)
            doc["sweep"][name].append({key: r[key] for key in (
                "seq", "cycles", "ideal_cycles", "utilization", "latency_us", "breakdown",
                "shares", "stalls")})
            print(f"{name:>6} seq {seq:>3}: utilization {r['utilization']:6.1%}, preload "
                  f"stalls {r['stalls']['preload'] / r['cycles']:6.1%}", flush=True)
    record(doc, args.output, __file__, argv)
    png = args.output.with_suffix(".png")
    plot(doc, png)
    print(f"wrote {args.output} and {png} ({time.monotonic() - begin:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
