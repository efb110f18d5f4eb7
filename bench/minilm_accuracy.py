"""Accuracy of all-MiniLM-L6-v2 on the accelerator (the bit-exact software device) against FP32.

Compiles the model (calibrated on :func:`bertaccel.golden.sentences.calibration_sentences`),
embeds the 64 evaluation sentences (:func:`bertaccel.golden.sentences.evaluation_sentences`, real
standard-library docstring text, disjoint from the calibration text) in padded batches of mixed
lengths on the software device, and compares with the FP32 PyTorch model
(:mod:`bertaccel.golden.bert_ref`)::

    python bench/minilm_accuracy.py [--config 8x8] [--batch-size 8] [--method percentile] [--json]

Prints and writes ``bench/results/minilm_accuracy.json``: the cosine similarity of every
sentence's embedding with FP32 (min, mean, max), and the Spearman rank correlation between the
two pairwise cosine-similarity matrices (the 2016 pairs above the diagonal). Acceptance: every
cosine >= 0.99 and Spearman >= 0.98. Offline (``HF_HUB_OFFLINE=1``).

``--lengths 64,128,256,384,512`` adds long text: real passages of consecutive standard-library
docstring sentences (:func:`bertaccel.golden.accuracy.stdlib_passages`, 10 by default, each
packed past the longest length) cut to exactly each length, run at the tensor level
(:class:`bertaccel.sw.bert.fast.FastModel`, bit-exact with the software device and hundreds of
times faster): per length the cosine with FP32 (min, mean) and the Spearman of the pairwise
similarities, and the Spearman over every passage at every length. Acceptance: every cosine
>= 0.99 and every Spearman >= 0.98.
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
from bertaccel.golden import accuracy, bert_ref, sentences  # noqa: E402
from bertaccel.hw.config import ConfigError, load_config  # noqa: E402
from bertaccel.sw import SoftwareDevice  # noqa: E402
from bertaccel.sw.bert import compile_bert, embed_texts  # noqa: E402
from bertaccel.sw.bert.fast import FastModel  # noqa: E402
from bertaccel.sw.bert.quant import BUDGET, CALIBRATION_METHODS, OUTLIERS  # noqa: E402
from _record import record  # noqa: E402  (bench/ is on sys.path)

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "minilm_accuracy.json"
COSINE_MIN = 0.99
SPEARMAN_MIN = 0.98


def pairwise(embeddings):
    """The cosine similarities of every pair ``i < j``, as a vector."""
    unit = torch.nn.functional.normalize(embeddings.double(), dim=1)
    sim = unit @ unit.t()
    i, j = torch.triu_indices(len(embeddings), len(embeddings), 1)
    return sim[i, j]


def measure(cfg, *, n=64, batch_size=8, method="percentile", percentile=99.99, outliers=OUTLIERS,
            budget=BUDGET, log=print):
    start = time.perf_counter()
    texts = sentences.evaluation_sentences(n)
    tokenizer, model = bert_ref.load()
    bert = compile_bert(model, cfg, tokenizer=tokenizer, method=method, percentile=percentile,
                        outliers=outliers, budget=budget, name="all-MiniLM-L6-v2")
    compiled = time.perf_counter()
    log(f"compiled for {cfg.name} in {compiled - start:.1f} s; running {len(texts)} sentences "
        f"in batches of {batch_size} on the software device")
    with SoftwareDevice(cfg) as device:
        accel, batches = embed_texts(device, bert, texts, batch_size=batch_size)
    ran = time.perf_counter()
    ref = bert_ref.embed(model, tokenizer, texts, batch_size=batch_size)
    cos = bert_ref.cosine_similarity(accel, ref)
    rho = bert_ref.spearman(pairwise(accel), pairwise(ref))
    worst = int(torch.argmin(cos))
    sources = sentences.sentence_sources("evaluation")[:n]
    return {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "config": cfg.label, "tag": cfg.tag, "device": "ref",
        "sentences": len(texts), "batch_size": batch_size,
        "batches": [{"seq": b["seq"], "tokens": b["tokens"]} for b in batches],
        "padding_fraction": 1 - sum(b["tokens"] for b in batches)
        / sum(b["seq"] * min(batch_size, len(texts) - i * batch_size)
              for i, b in enumerate(batches)),
        "quantization": dict(bert.calibration, stage_k=bert.k),
        "cosine": {"min": float(cos.min()), "mean": float(cos.mean()), "max": float(cos.max()),
                   "per_sentence": [round(float(c), 6) for c in cos]},
        "worst": {"index": worst, "module": sources[worst][0], "text": texts[worst],
                  "cosine": float(cos[worst])},
        "spearman": rho,
        "pairs": len(texts) * (len(texts) - 1) // 2,
        "pass": bool(float(cos.min()) >= COSINE_MIN and rho >= SPEARMAN_MIN),
        "criteria": {"cosine_min": COSINE_MIN, "spearman_min": SPEARMAN_MIN},
        "est_cycles": sum(b["stats"]["est_cycles"] for b in batches),
        "macs": sum(b["stats"]["macs"] for b in batches),
        "wall_s": {"compile": compiled - start, "device": ran - compiled,
                   "total": time.perf_counter() - start},
    }


def _embed_fast(bert, fast, model, texts, length, batch_size):
    """``(accelerator, fp32)`` embeddings of ``texts`` cut to ``length`` tokens, in batches."""
    import warnings

    accel, ref = [], []
    for lo in range(0, len(texts), batch_size):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")          # every passage is truncated
            batch = bert.encode(texts[lo:lo + batch_size], max_length=length)
        mask = batch["attention_mask"].bool()
        if not bool(mask.all()):
            raise ValueError(f"a passage has fewer than {length} tokens")
        x = fast.encoder(bert.embed_input(batch["input_ids"], batch["token_type_ids"]), mask)
        hidden = bert.layers[-1].x2.dequantize(x.view(*mask.shape, -1)).float()
        accel.append(bert_ref.mean_pool(hidden, mask))
        ref.append(bert_ref.mean_pool(bert_ref.forward(model, batch["input_ids"],
                                                       batch["attention_mask"],
                                                       batch["token_type_ids"]), mask))
    return torch.cat(accel), torch.cat(ref)


def by_length(cfg, lengths, *, passages=10, batch_size=4, method="percentile",
              percentile=99.99, outliers=OUTLIERS, budget=BUDGET, log=print):
    """Cosine with FP32 and the Spearman of the pairwise similarities against the sequence
    length: ``passages`` real passages (:func:`bertaccel.golden.accuracy.stdlib_passages`,
    packed past the longest length), each cut to exactly ``length`` tokens, on the tensor-level
    path."""
    tokenizer, model = bert_ref.load()
    bert = compile_bert(model, cfg, tokenizer=tokenizer, method=method, percentile=percentile,
                        outliers=outliers, budget=budget, name="all-MiniLM-L6-v2")
    fast = FastModel(bert)
    # A sentence is at most 60 words: packing to 96 tokens past the longest length leaves every
    # passage longer than it.
    texts = accuracy.stdlib_passages(passages, tokenizer, max_tokens=max(lengths) + 96)
    rows, every_accel, every_ref = [], [], []
    for length in lengths:
        start = time.perf_counter()
        accel, ref = _embed_fast(bert, fast, model, texts, length, batch_size)
        cos = bert_ref.cosine_similarity(accel, ref)
        rho = bert_ref.spearman(pairwise(accel), pairwise(ref))
        rows.append({"seq": length, "passages": len(texts), "min": float(cos.min()),
                     "mean": float(cos.mean()), "spearman": rho,
                     "per_passage": [round(float(c), 6) for c in cos],
                     "wall_s": time.perf_counter() - start})
        every_accel.append(accel)
        every_ref.append(ref)
        log(f"  seq {length:4d}: {len(texts)} passages, cosine min {float(cos.min()):.5f} "
            f"mean {float(cos.mean()):.5f}, spearman {rho:.5f}")
    rho = bert_ref.spearman(pairwise(torch.cat(every_accel)), pairwise(torch.cat(every_ref)))
    log(f"  spearman over all {len(texts) * len(lengths)} passage embeddings: {rho:.5f}")
    ok = all(r["min"] >= COSINE_MIN and r["spearman"] >= SPEARMAN_MIN for r in rows)
    return {"passages": len(texts), "device": "ref (tensor level)", "lengths": rows,
            "spearman_all": rho, "pass": bool(ok and rho >= SPEARMAN_MIN)}


def _lengths(parser, args):
    """The ``--lengths`` asked for (``[]`` without), or a parser error naming the bad value."""
    if not args.lengths:
        return []
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        parser.error(f"--lengths must be integers separated by commas, not {args.lengths!r}")
    if not all(1 <= x <= 512 for x in lengths):
        parser.error(f"--lengths must each be from 1 to 512, not {args.lengths!r}")
    if not 2 <= args.passages <= 40:
        parser.error(f"--passages must be from 2 to 40, not {args.passages}")
    return lengths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="8x8", help="a preset or a .json (8x8)")
    parser.add_argument("--sentences", type=int, default=64, metavar="N",
                        help="evaluation sentences (default all 64)")
    parser.add_argument("--batch-size", type=int, default=8, metavar="B",
                        help="sentences a padded batch (default 8)")
    parser.add_argument("--method", choices=CALIBRATION_METHODS, default="percentile",
                        help="calibrated range: the largest |x| or a percentile (percentile)")
    parser.add_argument("--percentile", type=float, default=99.99)
    parser.add_argument("--outliers", type=int, default=OUTLIERS,
                        help=f"channels with their own scale (default {OUTLIERS})")
    parser.add_argument("--budget", type=int, default=BUDGET,
                        help=f"weights split beyond a per-tensor scale (default {BUDGET})")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: the software device runs many small GEMMs)")
    parser.add_argument("--lengths", metavar="L,L,...",
                        help="also measure long text: real passages cut to these lengths "
                             "(e.g. 64,128,256,384,512)")
    parser.add_argument("--passages", type=int, default=10, metavar="N",
                        help="passages a length (default 10)")
    parser.add_argument("--json", action="store_true", help="print the JSON")
    parser.add_argument("-o", "--output", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args(argv)
    from bertaccel.sw.paths import check_args
    check_args(parser, files={"--output": args.output})
    try:
        cfg = load_config(args.config)
    except ConfigError as error:
        parser.error(str(error))
    if args.batch_size < 1:
        parser.error(f"--batch-size must be at least 1, not {args.batch_size}")
    if not 3 <= args.sentences <= 64:
        parser.error(f"--sentences must be from 3 to 64, not {args.sentences}")
    lengths = _lengths(parser, args)
    torch.set_num_threads(max(1, args.threads))
    log = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    report = measure(cfg, n=args.sentences, batch_size=args.batch_size, method=args.method,
                     percentile=args.percentile, outliers=args.outliers, budget=args.budget,
                     log=log)
    if lengths:
        log(f"cosine against the sequence length ({args.passages} passages a length, "
            f"tensor level):")
        report["by_length"] = by_length(cfg, lengths, passages=args.passages,
                                        method=args.method, percentile=args.percentile,
                                        outliers=args.outliers, budget=args.budget, log=log)
        report["pass"] = report["pass"] and report["by_length"]["pass"]
    import transformers
    report["environment"] = {"python": platform.python_version(), "torch": torch.__version__,
                             "transformers": transformers.__version__,
                             "threads": torch.get_num_threads()}
    record(report, args.output, __file__, argv)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0 if report["pass"] else 1
    c = report["cosine"]
    q = report["quantization"]
    print(f"all-MiniLM-L6-v2 on {report['config']} (software device) vs FP32 PyTorch")
    print(f"  {report['sentences']} sentences in batches of {report['batch_size']} "
          f"(padded lengths {[b['seq'] for b in report['batches']]}, "
          f"{100 * report['padding_fraction']:.0f} % padding)")
    print(f"  calibration: {q['method']}"
          + (f" {q['percentile']}" if q['percentile'] else "")
          + f" over {q['sentences']} other sentences ({q['tokens']} tokens), "
            f"{q['outliers']} outlier channels, weight budget {q['budget']}")
    print(f"  cosine      min {c['min']:.5f}  mean {c['mean']:.5f}  max {c['max']:.5f}  "
          f"(>= {COSINE_MIN} each)")
    print(f"  spearman    {report['spearman']:.5f} over {report['pairs']} pairs "
          f"(>= {SPEARMAN_MIN})")
    w = report["worst"]
    print(f"  worst       {w['cosine']:.5f}: [{w['module']}] {w['text'][:70]}")
    if "by_length" in report:
        long = report["by_length"]
        print(f"  long text, {long['passages']} passages a length (tensor level):")
        for row in long["lengths"]:
            print(f"    seq {row['seq']:4d}: cosine min {row['min']:.5f} mean {row['mean']:.5f}"
                  f", spearman {row['spearman']:.5f}")
        print(f"    spearman over every passage and length: {long['spearman_all']:.5f}")
    print(f"  pass: {'yes' if report['pass'] else 'NO'}")
    print(f"wrote {args.output} in {report['wall_s']['total']:.0f} s")
    return 0 if report["pass"] else 1


if __name__ == "__main__":
    sys.exit(main())
