"""Fine-tune all-MiniLM-L6-v2 on a task of :mod:`bertaccel.golden.tasks`, on the CPU.

The recipe (:class:`Recipe`) is linear probing then full fine-tuning: the head (a linear layer
on the mean-pooled embedding, :class:`~.model.Classifier`) starts as the base model's linear
probe (:mod:`.probe`), then every parameter is trained with AdamW (no weight decay, so what the
task never touches, such as the embeddings of tokens it never sees, stays exactly the base
model's), a linear warm-up and decay, gradient clipping, in seeded shuffled batches. Nothing is
chosen on the test split; its accuracy is only recorded.

The row-sparse model (``rows``) trains the same way from the base model, but its encoder
matrices only on the few K-rows where the full fine-tuning moved them most (:func:`row_masks`)
and its embedding tables not at all: its delta is row-sparse by construction, the form the
accelerator runs as extra K-rows of the same GEMMs, and its tables are the base's.

A checkpoint is a folder ``<out>/<task>-<key>[-rows<f>]/`` with ``model.pt`` (the classifier's
state dict) and ``result.json`` (the recipe, accuracies, wall time). ``key`` hashes the task's
data, the recipe and the base model, so a finished checkpoint is reused and a changed input
makes a new one::

    python -m bertaccel.sw.multitask.finetune (--task T ...|--all) [--rows 0.04]
        [--out build/multitask] [--threads 1] [--force]
"""

import argparse
import dataclasses
import hashlib
import json
import math
import os
import pathlib
import shutil
import sys
import tempfile
import time

import torch

from ...golden import bert_ref
from ...golden.tasks import TASKS, labels, load_task, task_dir
from . import deltas
from .activations import input_energy
from .model import Classifier, accuracy, pooled
from .probe import train_probe

__all__ = ["Recipe", "BUILD", "ROWS", "ROWS_LR", "ENERGY_TEXTS", "Checkpoint",
           "checkpoint_key", "checkpoint_folder", "row_recipe", "row_masks", "train", "finetune",
           "load_checkpoint", "main"]

#: Where checkpoints go (build artefacts, not committed).
BUILD = pathlib.Path("build/multitask")
#: The row-sparse models' share of the encoder matrices' values: int8 rows of about 0.85 MB,
#: under the 1.17 MB a task may store for 0.30x of four separate int8 models.
ROWS = 0.08
#: The row-sparse models' learning rate per task, chosen on dev: a few rows must move further
#: than in a full fine-tuning, where every weight shares the change (dev accuracy at 5e-5 and
#: 5e-4: stdlib-topic 0.7255, 0.7617; stdlib-kind 0.7063, 0.7451; debian-section 0.8250,
#: 0.8396; debian-interface 0.7941, 0.8088).
ROWS_LR = {"stdlib-topic": 5e-4, "stdlib-kind": 5e-4, "debian-section": 5e-4,
           "debian-interface": 5e-4}
#: Training texts the rows' input energies are measured over.
ENERGY_TEXTS = 256


@dataclasses.dataclass(frozen=True, kw_only=True)
class Recipe:
    """The fine-tuning settings (every one enters the checkpoint key).

    Members
    -------
    lr : float
        Peak learning rate of AdamW (no weight decay).
    epochs : int
    batch_size : int
    warmup : float
        Fraction of the steps the learning rate ramps up over; it then decays linearly to 0.
    clip : float
        Largest gradient norm.
    max_length : int
        Tokens a text is truncated to (no task text is longer).
    seed : int
    threads : int
        ``torch.set_num_threads`` while training (results are bit-reproducible for one count;
        on a machine whose cores other jobs share, one thread runs faster than two).
    """

    lr: float = 5e-5
    epochs: int = 3
    batch_size: int = 16
    warmup: float = 0.1
    clip: float = 1.0
    max_length: int = 128
    seed: int = 0
    threads: int = 1

    def __post_init__(self):
        if not (self.lr > 0 and self.epochs >= 1 and self.batch_size >= 1
                and 0 <= self.warmup < 1 and self.clip > 0 and self.threads >= 1):
            raise ValueError(f"bad recipe {self!r}: lr and clip must be positive, epochs, "
                             f"batch_size and threads at least 1, warmup in [0, 1)")


@dataclasses.dataclass(frozen=True)
class Checkpoint:
    """A fine-tuned task model on disk: ``folder/model.pt`` and ``folder/result.json``."""

    folder: pathlib.Path

    @property
    def result(self):
        """``result.json`` as a dict."""
        return json.loads((self.folder / "result.json").read_text())

    def state_dict(self):
        """The classifier's state dict (``bert.*`` and ``head.*``), float32."""
        return torch.load(self.folder / "model.pt", weights_only=True)


def _digest(paths):
    h = hashlib.sha256()
    for path in paths:
        h.update(pathlib.Path(path).name.encode())
        h.update(pathlib.Path(path).read_bytes())
    return h.hexdigest()


def checkpoint_key(task, recipe, model=None):
    """A 12-digit hash of the task's train/dev files and labels, the recipe, and the base
    model's config and weights."""
    folder = bert_ref.model_path(model)
    weights = sorted(folder.glob("*.safetensors")) or sorted(folder.glob("*.bin"))
    h = hashlib.sha256()
    h.update(_digest([task_dir(task) / f for f in ("train.jsonl", "dev.jsonl")]).encode())
    h.update(json.dumps([labels(task), dataclasses.asdict(recipe)]).encode())
    h.update(_digest([folder / "config.json", *weights]).encode())
    return h.hexdigest()[:12]


def _schedule(recipe, steps):
    warm = max(1, round(recipe.warmup * steps))
    return lambda step: min((step + 1) / warm, max(0.0, (steps - step) / max(1, steps - warm)))


def _restrict(classifier, masks):
    """Gradient hooks that keep the parameters named in ``masks`` (``{name: bool K-rows}``)
    to their kept K-rows, and freeze the other matrices and tables; returns the hooks."""
    hooks = []
    for name, param in classifier.named_parameters():
        if deltas.param_kind(name, param.shape) not in ("matrix", "table"):
            continue
        if name in masks:
            mask = deltas.row_mask(name, param.shape, masks[name]).to(param.dtype)
            hooks.append(param.register_hook(lambda grad, mask=mask: grad * mask))
        else:
            param.requires_grad_(False)
    return hooks


def train(classifier, tokenizer, texts, targets, recipe, *, masks=None, log=None):
    """Fine-tune ``classifier`` in place on ``(texts, targets)`` with ``recipe``; returns the
    mean training loss of each epoch. Seeded: the same inputs give the same weights.

    ``masks`` (``{parameter name: bool (K,)}``, optional) restricts the encoder matrices and
    the embedding tables to those K-rows (:func:`~.deltas.as_rows`): with no weight decay, the
    rest stay exactly the starting model's, so the delta is row-sparse by construction.
    """
    torch.manual_seed(recipe.seed)
    order = torch.Generator().manual_seed(recipe.seed)
    targets = torch.as_tensor(targets)
    per_epoch = math.ceil(len(texts) / recipe.batch_size)
    hooks = _restrict(classifier, masks) if masks is not None else []
    params = [p for p in classifier.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=recipe.lr, weight_decay=0.0, fused=True)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, _schedule(recipe, recipe.epochs * per_epoch))
    losses = []
    classifier.train()
    for epoch in range(recipe.epochs):
        total, index = 0.0, torch.randperm(len(texts), generator=order)
        for lo in range(0, len(texts), recipe.batch_size):
            pick = index[lo:lo + recipe.batch_size]
            batch = bert_ref.tokenize(tokenizer, [texts[i] for i in pick.tolist()],
                                      max_length=recipe.max_length)
            loss = torch.nn.functional.cross_entropy(classifier(**batch), targets[pick])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, recipe.clip)
            opt.step()
            sched.step()
            opt.zero_grad(set_to_none=True)
            total += float(loss.detach()) * len(pick)
        losses.append(total / len(texts))
        if log:
            log(f"epoch {epoch + 1}/{recipe.epochs}: loss {losses[-1]:.4f}")
    for hook in hooks:
        hook.remove()
    classifier.eval()
    return losses


def _probe(bert, tokenizer, task, recipe):
    """The base model's probe on ``task`` and its test accuracy (recorded, never used)."""
    feats, ys = {}, {}
    for split in ("train", "dev", "test"):
        texts, ys[split] = load_task(task, split)
        feats[split] = pooled(bert, tokenizer, texts, max_length=recipe.max_length)
    probe = train_probe(feats["train"], ys["train"], feats["dev"], ys["dev"], len(labels(task)))
    test = float(((feats["test"] @ probe.weight.t() + probe.bias).argmax(1)
                  == torch.as_tensor(ys["test"])).double().mean())
    return probe, test


def row_recipe(recipe, task, rows_lr=None):
    """The recipe ``task``'s row-sparse model trains with: ``recipe`` at the learning rate
    ``rows_lr`` (the task's :data:`ROWS_LR` by default)."""
    return dataclasses.replace(recipe, lr=ROWS_LR[task] if rows_lr is None else rows_lr)


def checkpoint_folder(task, *, recipe=Recipe(), out=BUILD, model=None, rows=None,
                      rows_lr=None):
    """The folder of ``task``'s checkpoint: ``<out>/<task>-<key>``; the row-sparse one's is
    ``<out>/<task>-<key of its row_recipe>-rows<f>``."""
    if rows is None:
        return pathlib.Path(out) / f"{task}-{checkpoint_key(task, recipe, model)}"
    key = checkpoint_key(task, row_recipe(recipe, task, rows_lr), model)
    return pathlib.Path(out) / f"{task}-{key}-rows{rows:g}"


def row_masks(task, rows, *, recipe=Recipe(), out=BUILD, model=None, log=print):
    """The K-rows a row-sparse fine-tuning of ``task`` trains: ``rows`` of the values of the
    encoder matrices, in whole K-rows, where the full fine-tuning's delta
    has the most energy per value weighted by the row's input energy
    (:func:`~.deltas.pick_rows`, :func:`~.activations.input_energy` over
    :data:`ENERGY_TEXTS` training texts). Fine-tunes fully first if that is not cached."""
    finetune(task, recipe=recipe, out=out, model=model, log=log)
    tokenizer, classifier = load_checkpoint(task, recipe=recipe, out=out, model=model)
    base = {f"bert.{n}": v for n, v in bert_ref.load(model)[1].state_dict().items()}
    energy = input_energy(classifier, tokenizer, load_task(task, "train")[0][:ENERGY_TEXTS],
                          max_length=recipe.max_length)
    full = deltas.deltas(classifier.state_dict(), base, ("matrix",))
    return deltas.pick_rows(full, rows, activations=energy)


def _train_task(task, recipe, model, masks, log):
    """Probe, start the head from it, train; returns the classifier and the facts."""
    tokenizer, bert = bert_ref.load(model)
    probe, probe_test = _probe(bert, tokenizer, task, recipe)
    log(f"{task}: probe dev {probe.dev_accuracy:.4f} (L2 {probe.penalty:g})")
    classifier = Classifier(bert, len(labels(task)))
    with torch.no_grad():
        classifier.head.weight.copy_(probe.weight)
        classifier.head.bias.copy_(probe.bias)
    texts, targets = load_task(task, "train")
    start = time.perf_counter()
    losses = train(classifier, tokenizer, texts, targets, recipe, masks=masks,
                   log=lambda m: log(f"{task}: {m}"))
    trained = time.perf_counter() - start
    acc = {s: accuracy(classifier, tokenizer, *load_task(task, s),
                       max_length=recipe.max_length) for s in ("dev", "test")}
    return classifier, {
        "train_examples": len(texts), "losses": losses,
        "probe": {"penalty": probe.penalty, "dev": probe.dev_accuracy, "test": probe_test},
        "finetuned": acc, "train_seconds": round(trained, 1)}


def _save(folder, state, result):
    """Write ``model.pt`` and ``result.json`` into a temporary folder beside ``folder`` and
    rename it into place: an error or Ctrl-C never leaves a half-written checkpoint."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = pathlib.Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}."))
    try:
        torch.save(state, tmp / "model.pt")
        (tmp / "result.json").write_text(json.dumps(result, indent=1) + "\n")
        if folder.exists():
            shutil.rmtree(folder)
        os.replace(tmp, folder)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def finetune(task, *, recipe=Recipe(), out=BUILD, model=None, rows=None, rows_lr=None,
             force=False, log=print):
    """The :class:`Checkpoint` of ``task`` fine-tuned with ``recipe`` from ``model``
    (all-MiniLM-L6-v2 by default), trained now unless it exists (or ``force``).

    ``rows`` (a fraction, optional) makes the row-sparse model instead: only the K-rows of
    :func:`row_masks` (chosen from the full fine-tuning with ``recipe``) of the matrices train
    (the vectors and the head all do), from the base model with :func:`row_recipe` (``recipe``
    at ``rows_lr``); the tables stay the base's.
    """
    folder = checkpoint_folder(task, recipe=recipe, out=out, model=model, rows=rows,
                               rows_lr=rows_lr)
    if not force and (folder / "result.json").is_file() and (folder / "model.pt").is_file():
        log(f"{task}: cached in {folder}")
        return Checkpoint(folder)
    threads = torch.get_num_threads()
    torch.set_num_threads(recipe.threads)
    try:
        start = time.perf_counter()
        masks = None if rows is None else row_masks(task, rows, recipe=recipe, out=out,
                                                    model=model, log=log)
        if rows is not None:
            recipe = row_recipe(recipe, task, rows_lr)
        classifier, facts = _train_task(task, recipe, model, masks, log)
    finally:
        torch.set_num_threads(threads)
    result = {"task": task, "key": checkpoint_key(task, recipe, model),
              "recipe": dataclasses.asdict(recipe), "rows": rows, "labels": list(labels(task)),
              **facts, "total_seconds": round(time.perf_counter() - start, 1)}
    if masks is not None:
        result["kept_rows"] = {n: int(m.sum()) for n, m in masks.items() if int(m.sum())}
    _save(folder, classifier.state_dict(), result)
    acc = facts["finetuned"]
    log(f"{task}: fine-tuned dev {acc['dev']:.4f} test {acc['test']:.4f} (probe test "
        f"{facts['probe']['test']:.4f}); {facts['train_seconds']:.0f} s training -> {folder}")
    return Checkpoint(folder)


def load_checkpoint(task, *, recipe=Recipe(), out=BUILD, model=None, rows=None, rows_lr=None):
    """``(tokenizer, classifier)`` of ``task``'s checkpoint, in eval mode;
    :class:`FileNotFoundError` naming the command that makes it if there is none."""
    folder = checkpoint_folder(task, recipe=recipe, out=out, model=model, rows=rows,
                               rows_lr=rows_lr)
    if not (folder / "model.pt").is_file():
        flag = "" if rows is None else f" --rows {rows:g}"
        raise FileNotFoundError(f"no checkpoint {folder}: run 'make multitask' or 'python -m "
                                f"bertaccel.sw.multitask.finetune --task {task}{flag}'")
    tokenizer, bert = bert_ref.load(model)
    classifier = Classifier(bert, len(labels(task)))
    classifier.load_state_dict(Checkpoint(folder).state_dict())
    return tokenizer, classifier.eval()


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bertaccel.sw.multitask.finetune",
                                     description="Fine-tune all-MiniLM-L6-v2 on a task "
                                                 "(cached in OUT).")
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--task", action="append", choices=TASKS)
    group.add_argument("--all", action="store_true", help="every task")
    parser.add_argument("--out", type=pathlib.Path, default=BUILD)
    parser.add_argument("--force", action="store_true", help="train even if cached")
    parser.add_argument("--threads", type=int, default=Recipe.threads)
    parser.add_argument("--rows", type=float, metavar="F",
                        help="the row-sparse model: train only this fraction of the matrix and "
                             f"table values, in K-rows (the issue's storage target: {ROWS})")
    parser.add_argument("--rows-lr", type=float, metavar="LR",
                        help="the row-sparse models' learning rate (ROWS_LR: per task)")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, not {args.threads}")
    if args.rows is not None and not 0 < args.rows < 1:
        parser.error(f"--rows must be between 0 and 1, not {args.rows}")
    recipe = Recipe(threads=args.threads)
    for task in TASKS if args.all else args.task:
        finetune(task, recipe=recipe, out=args.out, rows=args.rows, rows_lr=args.rows_lr,
                 force=args.force, log=lambda message: print(message, flush=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
