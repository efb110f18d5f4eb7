"""The multi-task suite behind ``bertaccel multitask``: build, evaluate, run.

``build`` checks each task's data, fine-tunes it fully and row-sparsely (cached checkpoints,
:mod:`.finetune`) and writes its delta file (:mod:`.store`) to
``<out>/deltas/<task>-<key>-rows<f>.pt``, which sizes the task's storage; ``evaluate``
reports per task the test accuracy of the FP32 fine-tuned model, of its int8 model and of the
shared int8 base plus the task's delta, with the bytes each stores, the cycles of one
inference and the bytes a task switch moves; ``predict`` labels texts with the base plus a
delta.

The int8 accuracies come from the accelerator path (:data:`INT8_PATH`, :mod:`.accel`) for an
accelerator config: the separate model is the task's whole fine-tuned encoder compiled for the
config; base plus delta is the compiled base with the task's row delta
(:class:`~.rowdelta.TaskDelta`, made from the row-sparse checkpoint and cached in
``<out>/deltas/`` under the config and the base's fingerprint) applied on the device side
(:func:`~.ondevice.apply_task`). Both run on the fast path, bit-exact with the software device
and the RTL. Every file is written atomically; evaluations are cached in ``<out>/eval/`` under
the delta file's digest, the config and the base's fingerprint.
"""


import json
import pathlib

import torch

from ...golden import bert_ref
from ...golden.tasks import SPLITS, TASKS, labels, load_task, task_dir
from ...hw.config import AccelConfig, load_config
from ..bert.cache import CompileCache, code_digest
from ..bert.encoder import load_compiled
from ..bert.load import MINILM
from . import accel
from . import deltas as D
from . import store
from .ondevice import model_bytes, switch_bytes
from .rowdelta import base_fingerprint
from .finetune import BUILD, ROWS, Recipe, checkpoint_folder, finetune
from .finetune import Checkpoint
from .model import Classifier, accuracy

__all__ = ["INT8_PATH", "SuiteError", "check_task", "check_data", "delta_path", "build_task",
           "Base", "Accelerator", "evaluate_task", "storage", "report", "predict"]

#: How the int8 accuracies are computed (named in ``bertaccel multitask eval --json``).
INT8_PATH = "accelerator-fast-path"
_INT8_NOTE = ("int8 encoder compiled for the config, run on the fast path (bit-exact with the "
              "software device and the RTL), int8 output dequantised and mean-pooled, float "
              "head on the host; int8 separate: the task's whole fine-tuned model compiled; "
              "base+delta: the compiled base with the task's row delta as extra K-rows "
              "(apply_task)")


class SuiteError(ValueError):
    """Bad input to the suite: an unknown task, bad data, a missing or unusable delta."""


def check_task(task):
    """``task`` if it is a known task, else :class:`SuiteError` naming the choices."""
    if task not in TASKS:
        raise SuiteError(f"unknown task {task!r}: choose from {', '.join(TASKS)}")
    return task


def check_data(task):
    """Check a task's files: every split present and non-empty, labels in range, no text in
    two splits; :class:`SuiteError` naming the problem."""
    seen, n = {}, len(labels(task))
    for split in SPLITS:
        if not (task_dir(task) / f"{split}.jsonl").is_file():
            raise SuiteError(f"{task}: missing {split}.jsonl in {task_dir(task)}")
        texts, targets = load_task(task, split)
        if not texts:
            raise SuiteError(f"{task}: {split} split is empty")
        bad = [t for t in targets if not (isinstance(t, int) and 0 <= t < n)]
        if bad:
            raise SuiteError(f"{task}: {split} has label {bad[0]!r}, not in 0..{n - 1}")
        for text in texts:
            if seen.setdefault(text, split) != split:
                raise SuiteError(f"{task}: a text is in both {seen[text]} and {split}")


def delta_path(task, *, recipe=Recipe(), out=BUILD, model=None, rows=ROWS):
    """Where ``task``'s delta file goes: ``<out>/deltas/<row-sparse checkpoint name>.pt``."""
    name = checkpoint_folder(task, recipe=recipe, out=out, model=model, rows=rows).name
    return pathlib.Path(out) / "deltas" / f"{name}.pt"


class Base:
    """The shared base model: tokenizer, ``transformers`` config, state dict and its digest.

    Parameters
    ----------
    model : str or path, optional
        The base model (all-MiniLM-L6-v2 by default; see :func:`bertaccel.golden.bert_ref.load`).
    """

    def __init__(self, model=None):
        self.model = model
        self.tokenizer, bert = bert_ref.load(model)
        self.config = bert.config
        self.state = {f"bert.{n}": v.clone() for n, v in bert.state_dict().items()}
        self.digest = store.state_digest(self.state)
        self._bert = bert

    def classifier(self, state, num_labels):
        """A :class:`~.model.Classifier` holding ``state``, in eval mode."""
        classifier = Classifier(self._bert, num_labels)
        classifier.load_state_dict(state)
        return classifier.eval()

    def load_delta(self, path):
        """The delta file at ``path``, checked against this base (:class:`store.DeltaError`)."""
        return store.load_delta(path, base_digest=self.digest, config=self.config)


def build_task(task, *, recipe=Recipe(), out=BUILD, model=None, rows=ROWS, base=None,
               log=print):
    """Check ``task``'s data, fine-tune it fully and row-sparsely (cached), write its delta
    file (atomically; kept when it exists and loads); returns the delta's path."""
    check_data(check_task(task))
    path = delta_path(task, recipe=recipe, out=out, model=model, rows=rows)
    base = base or Base(model)
    if path.is_file():
        try:
            base.load_delta(path)
            log(f"{task}: delta cached in {path}")
            return path
        except store.DeltaError as error:
            log(f"{task}: remaking the delta ({error})")
    finetune(task, recipe=recipe, out=out, model=model, log=log)
    folder = finetune(task, recipe=recipe, out=out, model=model, rows=rows, log=log).folder
    delta = store.make_delta(task, labels(task), Checkpoint(folder).state_dict(), base.state,
                             config=base.config)
    store.save_delta(delta, path)
    log(f"{task}: delta of {sum(v.shape[0] for v in delta.rows.values())} K-rows, "
        f"{store.delta_bytes(delta) / 1e3:.1f} kB -> {path}")
    return path


def _accuracy(base, state, task, split="test"):
    classifier = base.classifier(state, len(labels(task)))
    return accuracy(classifier, base.tokenizer, *load_task(task, split))


def _require(folder, task):
    if not (folder / "model.pt").is_file():
        raise SuiteError(f"{task}: no checkpoint in {folder}: run 'bertaccel multitask build'")
    return Checkpoint(folder).state_dict()


class Accelerator:
    """The compiled shared base for a config, and each task's programs on it.

    Parameters
    ----------
    base : Base
    config : str or AccelConfig
        A preset (``"8x8"``), a config JSON file, or a config.
    out : path
        The build folder; task deltas are cached in ``<out>/deltas/``.
    """

    def __init__(self, base, config="8x8", *, out=BUILD):
        self.cfg = config if isinstance(config, AccelConfig) else load_config(config)
        self.bert, self.float_model, _ = load_compiled(base.model or MINILM, self.cfg,
                                                       cache=CompileCache().check())
        self.fingerprint = base_fingerprint(self.bert)
        self.out = pathlib.Path(out)

    def delta(self, task, folder):
        """The task's :class:`~.rowdelta.TaskDelta` from its row-sparse checkpoint ``folder``
        (made on first use and cached, :func:`~.accel.task_delta`)."""
        state = _require(folder, task)
        path = accel.delta_file(self.out / "deltas", folder.name, self.bert)
        return accel.task_delta(self.bert, self.float_model, state, path), state

    def base_delta(self, task, folder):
        """``(AccelTask, TaskDelta)``: the task as the base plus its delta."""
        delta, state = self.delta(task, folder)
        return accel.AccelTask.from_delta(self.bert, delta, state), delta

    def separate(self, task, state):
        """The task's whole fine-tuned model compiled for the config (an ``AccelTask``)."""
        program = accel.compile_separate(self.float_model, state, self.cfg,
                                         tokenizer=self.bert.tokenizer, name=task)
        return accel.AccelTask(program, state)


def _cycles(acc, tasked, separate, delta):
    with_delta, merged = accel.cycles(tasked.program), accel.cycles(separate.program)
    moved, whole = switch_bytes(acc.bert, delta), model_bytes(acc.bert)
    return {"cycles_base_delta": with_delta, "cycles_merged": merged,
            "cycle_overhead": with_delta / merged - 1,
            "switch_bytes": moved["total"], "model_bytes": whole["total"],
            "switch_fraction": moved["total"] / whole["total"]}


def _measure(task, base, acc, delta, path, recipe, out, model, rows, cycles_only):
    full = _require(checkpoint_folder(task, recipe=recipe, out=out, model=model), task)
    rows_folder = checkpoint_folder(task, recipe=recipe, out=out, model=model, rows=rows)
    tasked, task_delta = acc.base_delta(task, rows_folder)
    separate = acc.separate(task, full)
    result = {"config": acc.cfg.tag, **_cycles(acc, tasked, separate, task_delta)}
    if cycles_only:
        return result
    texts, targets = load_task(task, "test")
    extra = sum(v.shape[0] * v.shape[1] for v in delta.values.values())
    gemm = sum(v.numel() for n, v in full.items() if D.param_kind(n, v.shape) == "matrix")
    return {
        "accuracy_fp32": _accuracy(base, full, task),
        "accuracy_int8_separate": separate.accuracy(texts, targets),
        "accuracy_base_delta": tasked.accuracy(texts, targets),
        "test_examples": len(texts), **result,
        "delta_bytes": store.delta_bytes(delta),
        "int8_model_bytes": D.int8_model_bits(full) / 8,
        "delta_k_rows": sum(v.shape[0] for v in delta.rows.values()),
        "extra_macs": extra / gemm,
        "clipped_values": delta.clipped,
        "delta_file": str(path),
    }


def evaluate_task(task, *, recipe=Recipe(), out=BUILD, model=None, rows=ROWS, base=None,
                  acc=None, config="8x8", cycles_only=False, log=print):
    """The figures of one task (see the module docstring), cached in ``<out>/eval/`` under
    the delta file's digest, the config, the compiled base's fingerprint and the code's
    digest."""
    check_task(task)
    base = base or Base(model)
    acc = acc or Accelerator(base, config, out=out)
    path = delta_path(task, recipe=recipe, out=out, model=model, rows=rows)
    if not path.is_file():
        raise SuiteError(f"{task}: no delta file {path}: run 'bertaccel multitask build'")
    delta = base.load_delta(path)
    digest = torch.load(path, weights_only=True)["digest"][:16]
    kind = "cycles" if cycles_only else "eval"
    cache = (pathlib.Path(out) / "eval"
             / f"{path.stem}-{digest}-{acc.cfg.tag}-{acc.fingerprint[:16]}-"
               f"{code_digest()[:12]}-{kind}.json")
    if cache.is_file():
        return json.loads(cache.read_text())
    log(f"{task}: evaluating the FP32, int8 separate and int8 base+delta models on "
        f"{acc.cfg.tag}" + (" (cycles only)" if cycles_only else ""))
    result = _measure(task, base, acc, delta, path, recipe, out, model, rows, cycles_only)
    store.atomic_write(cache, lambda tmp: tmp.write_text(json.dumps(result, indent=1) + "\n"))
    return result


def storage(base, tasks):
    """``{"base_bytes", "separate_bytes", "storage_ratio"}``: the int8 base plus every task's
    delta over a separate int8 model per task (``tasks``: :func:`evaluate_task` results)."""
    base_bytes = D.int8_model_bits(base.state) / 8
    separate = sum(t["int8_model_bytes"] for t in tasks)
    return {"base_bytes": base_bytes, "separate_bytes": separate,
            "storage_ratio": (base_bytes + sum(t["delta_bytes"] for t in tasks)) / separate}


def report(tasks, *, recipe=Recipe(), out=BUILD, model=None, rows=ROWS, config="8x8",
           cycles_only=False, log=print):
    """The ``bertaccel multitask eval --json`` object of ``tasks``."""
    base = Base(model)
    acc = Accelerator(base, config, out=out)
    per = {t: evaluate_task(t, recipe=recipe, out=out, model=model, rows=rows, base=base,
                            acc=acc, cycles_only=cycles_only, log=log) for t in tasks}
    head = {"model": str(model or "sentence-transformers/all-MiniLM-L6-v2"),
            "config": acc.cfg.tag, "int8_path": INT8_PATH, "int8_path_note": _INT8_NOTE,
            "timed_inference": {"batch": accel.TIMED_BATCH, "seq": accel.TIMED_SEQ}}
    if cycles_only:
        return {**head, "tasks": per}
    return {**head,
            "scheme": {"name": "row-sparse fine-tuning, int8 K-rows in the base's units",
                       "rows": rows},
            "split": "test", **storage(base, list(per.values())), "tasks": per}


def predict(task, texts, *, recipe=Recipe(), out=BUILD, model=None, rows=ROWS, config="8x8"):
    """The label of each text by the compiled base plus ``task``'s delta on the fast path."""
    check_task(task)
    base = Base(model)
    acc = Accelerator(base, config, out=out)
    folder = checkpoint_folder(task, recipe=recipe, out=out, model=model, rows=rows)
    tasked, _ = acc.base_delta(task, folder)
    names = labels(task)
    return [names[i] for i in tasked.logits(texts).argmax(1)]
