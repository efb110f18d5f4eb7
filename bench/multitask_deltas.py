"""Accuracy against size of compressed per-task deltas of all-MiniLM-L6-v2 (docs/multitask.md).

Each task of :mod:`bertaccel.golden.tasks` has a fully fine-tuned model (``make multitask``).
Its delta against the base is compressed by every scheme of :mod:`bertaccel.sw.multitask.deltas`
at several sizes; the task model rebuilt from the base and the compressed delta (the task's
vectors and head whole) is evaluated in float32 on dev (the split every choice is made on) and
test (reported). The int8 points evaluate the int8-weight model (every encoder matrix on its
per-output-channel int8 grid, activations float) and the row-sparse int8 delta on the base's
grid::

    python bench/multitask_deltas.py [--task T ...] [--threads 1] [--quick]

Writes ``bench/results/multitask_deltas.json`` and ``.png`` (test accuracy against the bytes a
task stores, per task). Every point is cached in ``build/multitask/bench/`` under the
checkpoint's key, so a rerun only evaluates new points. Storage: a separate int8 model per task
(every matrix and table int8 with a scale per output channel, vectors and head float32) against
one int8 base plus every task's delta; the target is <= 0.30x with every task within 1 point
of its own fine-tuned model (on dev to choose, reported on test).
"""

import argparse
import json
import math
import os
import pathlib
import platform
import sys
import time

os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
from _record import record  # noqa: E402  (bench/ is on sys.path)
from bertaccel.golden import bert_ref  # noqa: E402
from bertaccel.golden.tasks import TASKS, labels, load_task  # noqa: E402
from bertaccel.sw.multitask import deltas as D  # noqa: E402
from bertaccel.sw.multitask import store  # noqa: E402
from bertaccel.sw.multitask.activations import input_energy  # noqa: E402
from bertaccel.sw.multitask.finetune import (BUILD, ROWS, Checkpoint,  # noqa: E402
                                             Recipe, checkpoint_folder, checkpoint_key)
from bertaccel.sw.multitask.model import Classifier, batches  # noqa: E402

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "multitask_deltas.json"
CACHE = BUILD / "bench"
#: Every task within this much accuracy of its own fine-tuned model (1 point).
TOLERANCE = 0.01
#: Base plus every task's delta, over separate int8 models.
STORAGE_TARGET = 0.30
#: Task counts the storage is reported for.
TASK_COUNTS = (1, 2, 4, 8, 16, 32)
#: Train texts the rows' activation statistics are taken over.
ACTIVATION_TEXTS = 256

#: ``(scheme, levels)``: a level is a fraction of the delta values kept (top-k and rows), a
#: rank (lowrank) or nothing. ``int8`` schemes are evaluated on the int8-weight model.
GRID = (
    ("none", (0,)),
    ("topk-int8", (0.003, 0.01, 0.03, 0.1, 0.3)),
    ("topk-sign", (0.1,)),
    ("rows-act-int8", (0.03, 0.1, 0.3)),
    ("bitdelta", (0,)),
    ("lowrank-fp16", (32,)),
    ("accel-rows-int8", (0.1, 0.3)),
)
#: The row-sparse model's points (when its checkpoint exists), at its own fraction.
#: The row-sparse models' learning rates tried (on dev); each whose checkpoint exists adds the
#: float row-sparse model as trained (``rowft-fp32``) and its delta file on the int8 base
#: (``accel-rowft-int8``), at level = the learning rate.
ROWFT_LRS = (5e-5, 5e-4, 1e-3)
ROWFT = ("rowft-fp32", "accel-rowft-int8")
QUICK = (("none", (0,)), ("topk-int8", (0.1,)), ("rows-act-int8", (0.1,)),
         ("bitdelta", (0,)), ("accel-rows-int8", (0.1,)))


def compress(scheme, level, ctx):
    """The :class:`~bertaccel.sw.multitask.deltas.Compressed` of ``scheme`` at ``level``.

    Top-k and rows choose among the encoder matrices and the embedding tables together;
    BitDelta and low rank, as published, compress the linear layers (the encoder matrices) and
    leave the tables the base's; the int8 rows are the accelerator's encoder matrices.
    """
    d, act = ctx["deltas"], ctx["activations"]
    if scheme == "none":
        return D.Compressed({}, {})
    if scheme == "bitdelta":
        return D.bitdelta(ctx["matrix_deltas"])
    if scheme.startswith("lowrank-"):
        return D.lowrank(ctx["matrix_deltas"], level, values=scheme.rsplit("-", 1)[1])
    if scheme == "accel-rows-int8":
        return D.rows_int8(ctx["finetuned"], ctx["base"], level, activations=act)
    kind, *mid, values = scheme.split("-")
    scope = "matrix" if "matrix" in mid else "global"
    if kind == "topk":
        return D.topk(d, level, values=values, scope=scope)
    return D.rows(d, level, values=values, scope=scope,
                  activations=act if "act" in mid else None)


def _delta_file_point(ctx, lr, as_trained):
    """The row-sparse model as its delta file holds it (:mod:`bertaccel.sw.multitask.store`):
    int8 K-rows on the base's grid, evaluated on the int8 base."""
    rowft = ctx["rowft"][lr]
    delta = store.make_delta(ctx["task"], labels(ctx["task"]), rowft, ctx["base"],
                             config=ctx["config"])
    out = _evaluate(ctx, rowft if as_trained else store.task_state(ctx["base"], delta))
    params = sum(v.numel() for v in delta.params.values()) * 4
    m = ctx["matrix_deltas"]
    out.update(task_bytes=store.delta_bytes(delta),
               delta_bytes=store.delta_bytes(delta) - params,
               kept=sum(v.shape[0] for v in delta.rows.values()),
               extra_macs=sum(v.numel() for v in delta.values.values())
               / sum(d.numel() for d in m.values()), clipped=delta.clipped)
    return out


def _accuracy(classifier, prepared):
    right = 0
    with torch.no_grad():
        for index, batch, target in prepared:
            right += int((classifier(**batch).argmax(dim=1) == target).sum())
    return right / sum(len(t) for _, _, t in prepared)


def _prepare(tokenizer, task, split):
    texts, targets = load_task(task, split)
    targets = torch.as_tensor(targets)
    return [(index, batch, targets[torch.tensor(index)])
            for index, batch in batches(tokenizer, texts, batch_size=64, max_length=128)]


def _context(task, recipe, log, activations=True):
    folder = BUILD / f"{task}-{checkpoint_key(task, recipe)}"
    if not (folder / "model.pt").is_file():
        raise SystemExit(f"no checkpoint for {task} in {folder}: run 'make multitask' first")
    tokenizer, bert = bert_ref.load()
    # Copies: loading a task's weights into the classifier overwrites the module's tensors.
    base = {f"bert.{n}": v.clone() for n, v in bert.state_dict().items()}
    classifier = Classifier(bert, len(labels(task))).eval()
    finetuned = Checkpoint(folder).state_dict()
    classifier.load_state_dict(finetuned)
    act, start = None, time.perf_counter()
    if activations:                 # only the schemes that choose rows by activation use them
        act = input_energy(classifier, tokenizer, load_task(task, "train")[0][:ACTIVATION_TEXTS])
        log(f"{task}: activation statistics in {time.perf_counter() - start:.0f} s")
    return {"task": task, "folder": folder, "classifier": classifier, "base": base,
            "config": bert.config,
            "finetuned": finetuned, "deltas": D.deltas(finetuned, base, ("matrix", "table")),
            "matrix_deltas": D.deltas(finetuned, base), "activations": act,
            "splits": {s: _prepare(tokenizer, task, s) for s in ("dev", "test")},
            "int8_bits": D.int8_model_bits(finetuned)}


def _evaluate(ctx, state):
    ctx["classifier"].load_state_dict(state)
    return {s: _accuracy(ctx["classifier"], p) for s, p in ctx["splits"].items()}


def _cache(ctx):
    path = CACHE / f"{ctx['folder'].name}.json"
    return path, json.loads(path.read_text()) if path.is_file() else {}


def _cached(ctx, point_id, make, log):
    path, cache = _cache(ctx)
    if point_id not in cache:
        start = time.perf_counter()
        cache[point_id] = make()
        cache[point_id]["seconds"] = round(time.perf_counter() - start, 1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(cache, indent=1) + "\n")
        p = cache[point_id]
        log(f"{ctx['task']}: {point_id:24s} dev {p['dev']:.4f} test {p['test']:.4f}"
            + (f" {p['task_bytes'] / 1e3:9.1f} kB" if "task_bytes" in p else "")
            + f" ({p['seconds']:.0f} s)")
    return cache[point_id]


def _point(ctx, scheme, level):
    """Accuracy and size of one scheme at one level."""
    if scheme in ROWFT:
        return _delta_file_point(ctx, level, scheme == "rowft-fp32")
    model = ctx["finetuned"]
    c = compress(scheme, level, ctx)
    out = _evaluate(ctx, D.apply(ctx["base"], model, c))
    out.update(task_bytes=D.task_bits(model, c) / 8, delta_bytes=c.total_bits / 8,
               kept=sum(v for k, v in c.kept.items() if k != "overflow"))
    if scheme.startswith("accel"):
        # Extra K-rows of the encoder GEMMs, as a share of their MACs.
        m = ctx["matrix_deltas"]
        out["extra_macs"] = sum(c.kept.get(n, 0) * D.as_rows(n, d).shape[1]
                                for n, d in m.items()) / sum(d.numel() for d in m.values())
        out["overflow_rows"] = c.kept["overflow"]
    return out


def _rowft(ctx, recipe):
    """The row-sparse checkpoints made (``{lr: state dict}``) into ``ctx``; returns the grid
    points they add."""
    ctx["rowft"], ctx["rowft_result"] = {}, {}
    for lr in ROWFT_LRS:
        folder = checkpoint_folder(ctx["task"], recipe=recipe, rows=ROWS, rows_lr=lr)
        if (folder / "model.pt").is_file():
            ctx["rowft"][lr] = Checkpoint(folder).state_dict()
            ctx["rowft_result"][lr] = Checkpoint(folder).result
    return tuple((scheme, tuple(ctx["rowft"])) for scheme in ROWFT) if ctx["rowft"] else ()


def measure_task(task, grid, recipe, log=print, measured_only=False):
    """Every reference and scheme point of ``task``: ``{"references": ..., "points": [...]}``."""
    ctx = _context(task, recipe, log, activations=not measured_only)
    ft, base = ctx["finetuned"], ctx["base"]
    refs = {
        "finetuned": _cached(ctx, "finetuned", lambda: _evaluate(ctx, ft), log),
        "finetuned-int8": _cached(ctx, "finetuned-int8",
                                  lambda: _evaluate(ctx, store.separate_int8_state(ft)), log),
        "base-tables": _cached(ctx, "base-tables", lambda: _evaluate(
            ctx, D.apply(base, ft, D.Compressed(ctx["matrix_deltas"], {}))), log),
    }
    grid = (*grid, *_rowft(ctx, recipe))
    points = []
    for scheme, levels in grid:
        for level in levels:
            if measured_only and scheme not in ROWFT \
                    and f"{scheme}@{level:g}" not in _cache(ctx)[1]:
                continue
            point = dict(_cached(ctx, f"{scheme}@{level:g}",
                                 lambda s=scheme, v=level: _point(ctx, s, v), log),
                         scheme=scheme, level=level)
            point["fraction_of_int8"] = point["task_bytes"] * 8 / ctx["int8_bits"]
            points.append(point)
    result = json.loads((ctx["folder"] / "result.json").read_text())
    return {"task": task, "labels": list(labels(task)), "checkpoint": ctx["folder"].name,
            "int8_model_bytes": ctx["int8_bits"] / 8,
            "base_int8_bytes": D.int8_model_bits(base) / 8,
            "delta_values": sum(d.numel() for d in ctx["deltas"].values()),
            "changes": D.changes(ft, base),
            "probe": result["probe"], "train_seconds": result["train_seconds"],
            "rowft": {f"{lr:g}": {k: r[k] for k in ("rows", "recipe", "finetuned",
                                                    "train_seconds")}
                      for lr, r in ctx["rowft_result"].items()},
            "references": refs, "points": points}


def _reference(task_result, scheme):
    key = "finetuned-int8" if scheme.startswith("accel") else "finetuned"
    return task_result["references"][key]


def choose(tasks, scheme):
    """Per task, the smallest point of ``scheme`` within :data:`TOLERANCE` of its reference on
    dev (``None`` where no point is)."""
    out = {}
    for t in tasks:
        ref = _reference(t, scheme)["dev"]
        ok = [p for p in t["points"] if p["scheme"] == scheme and p["dev"] >= ref - TOLERANCE]
        out[t["task"]] = min(ok, key=lambda p: p["task_bytes"]) if ok else None
    return out


def storage(tasks, chosen, counts=TASK_COUNTS):
    """Base plus ``n`` tasks' deltas over ``n`` separate int8 models, for each ``n`` (the
    tasks' mean delta and int8 model size standing for each)."""
    delta = sum(p["task_bytes"] for p in chosen.values()) / len(chosen)
    model = sum(t["int8_model_bytes"] for t in tasks) / len(tasks)
    return {n: D.storage_ratio(tasks[0]["base_int8_bytes"], [delta] * n, [model] * n)
            for n in counts}


def tasks_for_target(tasks, chosen):
    """The fewest tasks at which base plus deltas is within :data:`STORAGE_TARGET` of separate
    int8 models (``None`` if a delta alone is over the target's share of a model)."""
    delta = sum(p["task_bytes"] for p in chosen.values()) / len(chosen)
    model = sum(t["int8_model_bytes"] for t in tasks) / len(tasks)
    room = STORAGE_TARGET * model - delta
    return math.ceil(tasks[0]["base_int8_bytes"] / room) if room > 0 else None


def summarize(tasks):
    """The chosen point of each scheme, whether it meets the target, and its storage."""
    out = {}
    for scheme in dict.fromkeys(p["scheme"] for t in tasks for p in t["points"]):
        chosen = choose(tasks, scheme)
        if any(p is None for p in chosen.values()):
            out[scheme] = {"reaches_tolerance": False}
            continue
        ratio = storage(tasks, chosen)
        test_ok = all(chosen[t["task"]]["test"] >= _reference(t, scheme)["test"] - TOLERANCE
                      for t in tasks)
        out[scheme] = {
            "reaches_tolerance": True,
            "levels": {k: p["level"] for k, p in chosen.items()},
            "task_bytes": {k: p["task_bytes"] for k, p in chosen.items()},
            "dev_drop": {t["task"]: _reference(t, scheme)["dev"] - chosen[t["task"]]["dev"]
                         for t in tasks},
            "test_drop": {t["task"]: _reference(t, scheme)["test"] - chosen[t["task"]]["test"]
                          for t in tasks},
            "test_within_tolerance": test_ok,
            "storage_ratio": {str(n): r for n, r in ratio.items()},
            "tasks_for_target": tasks_for_target(tasks, chosen),
            "meets_target": bool(ratio[len(tasks)] <= STORAGE_TARGET and test_ok),
        }
    return out


def plot(report, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = report["tasks"]
    fig, axes = plt.subplots(1, len(tasks), figsize=(4.2 * len(tasks), 4), squeeze=False)
    for ax, t in zip(axes[0], tasks):
        families = dict.fromkeys(p["scheme"] for p in t["points"] if p["scheme"] != "none")
        for scheme in families:
            pts = sorted((p for p in t["points"] if p["scheme"] == scheme),
                         key=lambda p: p["task_bytes"])
            if scheme in ROWFT:
                for p in pts:
                    ax.plot(p["task_bytes"] / 1e6, 100 * p["test"],
                            "*" if scheme.startswith("accel") else "^", ms=7,
                            label=f"{scheme} lr {p['level']:g}")
                continue
            ax.plot([p["task_bytes"] / 1e6 for p in pts], [100 * p["test"] for p in pts],
                    "o-" if len(pts) > 1 else "s", ms=3, label=scheme)
        ft, probe = t["references"]["finetuned"]["test"], t["probe"]["test"]
        ax.axhline(100 * ft, color="k", lw=0.8, label="fine-tuned")
        ax.axhline(100 * (ft - TOLERANCE), color="k", lw=0.8, ls="--", label="-1 point")
        ax.axhline(100 * probe, color="grey", lw=0.8, ls=":", label="base probe")
        ax.axvline(report["budget_bytes_per_task"] / 1e6, color="r", lw=0.8, ls="-.",
                   label=f"{STORAGE_TARGET}x at {len(tasks)} tasks")
        ax.set_xscale("log")
        ax.set_title(t["task"])
        ax.set_xlabel("bytes a task stores (MB)")
        ax.set_ylabel("test accuracy (%)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", action="append", choices=TASKS, help="default: all")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (1: faster than 2 where other jobs share the cores)")
    parser.add_argument("--quick", action="store_true", help="a few points a task")
    parser.add_argument("--measured-only", action="store_true",
                        help="only the points already measured (cached), and the row-sparse "
                             "models' points")
    parser.add_argument("-o", "--output", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, not {args.threads}")
    torch.set_num_threads(args.threads)
    start = time.perf_counter()
    tasks = [measure_task(t, QUICK if args.quick else GRID, Recipe(),
                          measured_only=args.measured_only)
             for t in args.task or TASKS]
    model = sum(t["int8_model_bytes"] for t in tasks) / len(tasks)
    n = len(tasks)
    report = {
        "model": "sentence-transformers/all-MiniLM-L6-v2", "evaluation": "float32",
        "tolerance": TOLERANCE, "storage_target": STORAGE_TARGET,
        "budget_bytes_per_task": (STORAGE_TARGET * n * model - tasks[0]["base_int8_bytes"]) / n,
        "tasks": tasks, "summary": summarize(tasks),
        "environment": {"python": platform.python_version(), "torch": torch.__version__,
                        "threads": torch.get_num_threads()},
        "wall_s": round(time.perf_counter() - start, 1),
    }
    record(report, args.output, __file__, argv)
    plot(report, args.output.with_suffix(".png"))
    print(f"per-task budget for {STORAGE_TARGET}x at {n} tasks: "
          f"{report['budget_bytes_per_task'] / 1e3:.0f} kB (int8 model {model / 1e6:.2f} MB)")
    for scheme, s in report["summary"].items():
        if not s["reaches_tolerance"]:
            print(f"  {scheme:18s} never within {100 * TOLERANCE:g} point on dev on every task")
            continue
        kb = sum(s["task_bytes"].values()) / len(s["task_bytes"]) / 1e3
        print(f"  {scheme:18s} {kb:9.1f} kB/task  ratio@{n} {s['storage_ratio'][str(n)]:.3f}"
              f"  test drops {', '.join(f'{100 * v:+.1f}' for v in s['test_drop'].values())}"
              f"  {STORAGE_TARGET}x from {s['tasks_for_target']} tasks"
              f"  {'MEETS THE TARGET' if s['meets_target'] else ''}")
    print(f"wrote {args.output} and {args.output.with_suffix('.png').name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
