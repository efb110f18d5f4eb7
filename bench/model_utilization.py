"""Utilization counting only the model's MACs, and BERT-base's attention cycles.

::

    python bench/model_utilization.py [--configs 8x8 16x16] [--json] [-o PATH]

Every cycle count is the cycle model's (equal to the RTL's), from
:class:`bertaccel.sw.bert.timing.StageTimer` on the stage programs the compiler writes:

* **utilization**: the model's own MACs (:func:`bertaccel.sw.bert.model_macs`: without the rows
  and columns that channel splitting adds, and with P V counted once, however many digit planes
  it runs on) over ``rows * cols * cycles``, for all-MiniLM-L6-v2 (real weights, all 6 layers) at
  seq 32 and for a random-weight BERT-base (:func:`bertaccel.analysis.perf.compile_shape`, layer
  0 counted 12 times) at seq 128, batch 1;
* **where the cycles go**, per stage: the cycles the model's own MACs take at one MAC per PE
  a cycle (``ideal``), the cycles of the same GEMMs without the rows that channel splitting
  adds (``without_splits``: every weight stage at the model's own depth, no high rows), and of
  P V on one digit plane (``pv_one_plane``: ``L x L x d``). ``cycles - without_splits`` is
  what the split rows cost, ``pv - pv_one_plane`` the probabilities' second plane, and the
  rest over ``ideal`` the fixed costs of the tiles (loads, drains, edge tiles);
* **attention**: the cycles of BERT-base's two attention stages (``qk``: ``Q K^T`` fused with
  SOFTMAX, ``pv``: ``P V`` fused with REQUANT) summed over its 12 layers, at seq 128 and 512.

Writes ``bench/results/model_utilization.json``. Offline (``HF_HUB_OFFLINE=1``); a few minutes
on the 2-core development machine.
"""

import argparse
import json
import os
import pathlib
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
from bertaccel.analysis.perf import compile_shape  # noqa: E402
from bertaccel.golden import bert_ref  # noqa: E402
from bertaccel.hw.config import PRESETS  # noqa: E402
from bertaccel.sw.bert import STAGES, compile_bert, model_macs, stage_macs  # noqa: E402
from bertaccel.sw.bert.timing import StageTimer  # noqa: E402
from bertaccel.sw.timing import GemmTimer  # noqa: E402
from _record import record  # noqa: E402  (bench/ is on sys.path)

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "model_utilization.json"
#: (what, seq) of the utilization figures, and the sequence lengths of the attention figures.
UTILIZATION = (("all-MiniLM-L6-v2", 32), ("bert-base", 128))
ATTENTION_SEQS = (128, 512)


def _cycles(timer, bert, seq, every_layer):
    """``(total, {stage: cycles})`` of one sequence of ``seq`` tokens over every layer (layer 0
    counted for each unless ``every_layer``)."""
    if every_layer:
        return timer.model(1, seq)
    stages = timer.layer(0, 1, seq)
    stages = {stage: bert.spec.layers * cycles for stage, cycles in stages.items()}
    return sum(stages.values()), stages


def _unsplit(bert, stage, gemms):
    """``gemms`` (:meth:`BertProgram.stage_gemms`) at the model's own depth, without high rows
    (P V keeps its two digit planes)."""
    if stage not in bert.k:
        return [gemm[1:] for gemm in gemms]
    depth = bert.spec.intermediate if stage == "w2" else bert.spec.hidden
    return [(m, depth, n, epilogue, 0, batch) for _, m, _, n, epilogue, _, batch in gemms]


def breakdown(bert, seq, every_layer):
    """Where the cycles go, per stage: ``{"ideal", "without_splits", "pv_one_plane"}`` summed
    over the layers (layer 0 counted for each unless ``every_layer``)."""
    timer, spec = GemmTimer(bert.cfg), bert.spec
    mask = torch.ones((1, seq), dtype=torch.bool)
    layers = range(spec.layers) if every_layer else [0] * spec.layers
    ideal = {stage: spec.layers * macs / bert.cfg.macs_per_cycle
             for stage, macs in stage_macs(spec, seq).items()}
    unsplit, one_plane = dict.fromkeys(STAGES, 0), 0
    for layer in layers:
        for stage in STAGES:
            gemms = bert.stage_gemms(layer, stage, mask)
            unsplit[stage] += timer.concat(_unsplit(bert, stage, gemms))
            if stage == "pv":
                one_plane += timer.concat([(m, seq, n, ep, 0, batch)
                                           for _, m, _, n, ep, _, batch in gemms])
    return {"ideal": ideal, "without_splits": unsplit, "pv_one_plane": one_plane}


def measure(cfg, minilm, base, log):
    """The figures of one config: ``{"utilization": [...], "attention": [...]}``."""
    out = {"utilization": [], "attention": []}
    for (what, seq), bert in zip(UTILIZATION, (minilm, base)):
        timer = StageTimer(bert)
        total, stages = _cycles(timer, bert, seq, every_layer=what != "bert-base")
        macs = model_macs(bert.spec, seq)
        share = macs / (cfg.macs_per_cycle * total)
        parts = breakdown(bert, seq, every_layer=what != "bert-base")
        unsplit = sum(parts["without_splits"].values())
        out["utilization"].append({"model": what, "seq": seq, "cycles": total, "macs": macs,
                                   "utilization": share, "stages": stages,
                                   "k": dict(bert.k), "k_high": dict(bert.k_high), **parts})
        log(f"  {cfg.name}: {what} seq {seq}: {total:,} cycles, {share:.1%} of the array on "
            f"the model's {macs:,} MACs; without split rows {unsplit:,} cycles "
            f"({macs / (cfg.macs_per_cycle * unsplit):.1%})")
    timer = StageTimer(base)
    for seq in ATTENTION_SEQS:
        _, stages = _cycles(timer, base, seq, every_layer=False)
        out["attention"].append({"seq": seq, "qk": stages["qk"], "pv": stages["pv"],
                                 "attention": stages["qk"] + stages["pv"]})
        log(f"  {cfg.name}: bert-base attention at seq {seq}: qk {stages['qk']:,} + pv "
            f"{stages['pv']:,} = {stages['qk'] + stages['pv']:,} cycles (12 layers)")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=["8x8", "16x16"], choices=list(PRESETS))
    parser.add_argument("--json", action="store_true", help="print the JSON")
    parser.add_argument("-o", "--output", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args(argv)
    log = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    start = time.perf_counter()
    tokenizer, model = bert_ref.load()
    report = {"configs": {}}
    for name in args.configs:
        cfg = PRESETS[name]
        minilm = compile_bert(model, cfg, tokenizer=tokenizer, name="all-MiniLM-L6-v2")
        base = compile_shape("bert-base", cfg)
        report["configs"][name] = measure(cfg, minilm, base, log)
    report["wall_s"] = time.perf_counter() - start
    record(report, args.output, __file__, argv)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"wrote {args.output} in {report['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
