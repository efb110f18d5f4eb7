"""What running a task from the shared int8 base plus its row delta costs on the accelerator.

::

    python bench/multitask_accel.py [--configs 8x8 16x16] [--fractions 0.01 0.02 0.04] [--json]

all-MiniLM-L6-v2 is compiled for each config (the base). For each fraction ``f``, a random task
changes ``round(f K)`` K-rows of every encoder weight matrix (``K`` = 384 for Q/K/V, the
output projection and FFN1, 1536 for FFN2) and replaces every bias and LayerNorm vector; the
task runs as the base's GEMMs with the delta's rows appended (sw/multitask/ondevice.py).
Printed per config and fraction:

* cycles per inference (one sequence of 128 tokens, and a batch of 8) of base + delta, from
  the stage timer (equal to the cycle model and the RTL), against the merged int8 model (the
  task's weights ``base_q + delta`` compiled as one int8 model; the random values are cut so
  that they fit int8 wherever the base's do, so it needs no split rows beyond the base's);
* bytes a task switch moves (the delta rows and the replaced epilogue parameters) against
  reloading the whole int8 model (every B operand and the weight stages' parameters).

As a check of the outputs, not only the cycles, the fast path of base + delta must equal the
merged model's (built here as the reference) on one 128-token text, bit for bit; the script
stops if it does not. Writes ``bench/results/multitask_accel.json``.
"""

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
# The random task and the merged-model reference (sw/multitask/reference.py) are the ones the
# bit-exactness tests run: the figures here are of the same deltas.
SEQ = 128
BATCHES = (1, 8)
SEED = 2024


def _text_batch(bert):
    from bertaccel.golden.sentences import evaluation_sentences

    text = " ".join(evaluation_sentences())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)     # truncated to SEQ tokens, on purpose
        batch = bert.encode([text], max_length=SEQ)
    assert batch["input_ids"].shape == (1, SEQ)
    return batch


def _merged(bert, task, delta, batch):
    """The merged-weight model of ``delta`` (the reference), after checking that the fast path
    of ``task`` equals it on ``batch``; and whether the task changes the base's output."""
    import torch

    from bertaccel.sw.bert.fast import FastModel
    from bertaccel.sw.multitask.reference import merged_program

    merged, extra = merged_program(bert, delta)
    assert extra <= 0, "the merged weights must fit int8 (no split rows beyond the base's)"
    mask = batch["attention_mask"].bool()
    outs = [FastModel(model).encoder(model.embed_input(batch["input_ids"]), mask)
            for model in (task, merged, bert)]
    if not torch.equal(outs[0], outs[1]):
        sys.exit(f"{bert.cfg.name}: base + delta != merged model on the check text")
    return merged, not torch.equal(outs[0], outs[2])


def _config(name, fractions, log):
    import torch

    from bertaccel.hw.config import load_config
    from bertaccel.sw.bert import MINILM, compile_bert
    from bertaccel.sw.bert.timing import StageTimer
    from bertaccel.sw.multitask.ondevice import apply_task, model_bytes, switch_bytes
    from bertaccel.sw.multitask.reference import random_task_delta

    start = time.perf_counter()
    bert = compile_bert(MINILM, load_config(name))
    log(f"{name}: compiled in {time.perf_counter() - start:.1f} s; GEMM depths {bert.k}")
    base_timer = StageTimer(bert)
    base = {b: base_timer.model(b, SEQ)[0] for b in BATCHES}
    whole = model_bytes(bert)
    batch = _text_batch(bert)
    rows = []
    for fraction in fractions:
        delta = random_task_delta(bert, torch.Generator().manual_seed(SEED), fraction=fraction,
                                  name=f"rows{fraction:g}")
        task = apply_task(bert, delta)
        merged_model, changed = _merged(bert, task, delta, batch)
        timer, merged_timer = StageTimer(task), StageTimer(merged_model)
        row = {"fraction": fraction, "delta_rows": {s: task.k[s] - bert.k[s] for s in task.k},
               "outputs_equal_merged": True, "task_changes_output": changed,
               "switch_bytes": switch_bytes(bert, delta)}
        row["switch_over_model"] = row["switch_bytes"]["total"] / whole["total"]
        row["rows_over_weights"] = row["switch_bytes"]["rows"] / whole["weights"]
        for b in BATCHES:
            cycles, merged = timer.model(b, SEQ)[0], merged_timer.model(b, SEQ)[0]
            row[f"b{b}"] = {"cycles": cycles, "merged_cycles": merged, "base_cycles": base[b],
                            "overhead": cycles / merged - 1}
        one = row["b1"]
        log(f"{name} rows {fraction:.0%}: +{row['delta_rows']} K-rows; cycles (1 x {SEQ}) "
            f"{one['cycles']} vs merged {one['merged_cycles']}: {one['overhead']:+.2%}; "
            f"batch 8 {row['b8']['overhead']:+.2%}; switch "
            f"{row['switch_bytes']['total']} B ({row['switch_bytes']['rows']} B rows + "
            f"{row['switch_bytes']['vectors']} B vectors) vs whole model {whole['total']} B: "
            f"{row['switch_over_model']:.2%}")
        rows.append(row)
    return {"k": bert.k, "model_bytes": whole, "seq": SEQ, "fractions": rows}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["8x8", "16x16"])
    parser.add_argument("--fractions", nargs="+", type=float, default=[0.01, 0.02, 0.04])
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--output", type=Path, default=RESULTS / "multitask_accel.json")
    args = parser.parse_args(argv)
    bad = [f for f in args.fractions if not 0 < f <= 1]
    if bad:
        parser.error(f"fractions must be in (0, 1], not {bad[0]!r}")
    log = (lambda text: print(text, file=sys.stderr)) if args.json else print
    from _record import record  # bench/ is on sys.path
    result = {"configs": {name: _config(name, args.fractions, log) for name in args.configs}}
    record(result, args.output, __file__, argv)
    if args.json:
        print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
