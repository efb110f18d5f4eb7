"""Text-classification tasks on real text that this project did not write.

Four tasks, each a folder of this package with ``train.jsonl``, ``dev.jsonl`` and ``test.jsonl``
(one ``{"text", "label"}`` a line, the label an index into the task's labels) and ``meta.json``
(labels, counts, source, licence, provenance), made by :mod:`bertaccel.golden.tasks.build`:

* ``stdlib-topic``: a standard-library docstring sentence -> its module's Library Reference
  chapter (8 labels);
* ``stdlib-kind``: a standard-library docstring summary -> module, class, function or method;
* ``debian-section``: a Debian program's description -> its archive section (8 labels);
* ``debian-interface``: a Debian program's description -> its user interface (debtags).

``README.md`` beside the data states the sources, licences, sizes and label counts. The test
split is for reporting only: every choice is made on dev.
"""

import functools
import json
import pathlib

__all__ = ["TASKS", "SPLITS", "TaskError", "task_dir", "labels", "meta", "load_task"]

#: The tasks, in the order they are reported.
TASKS = ("stdlib-topic", "stdlib-kind", "debian-section", "debian-interface")
#: The splits of every task.
SPLITS = ("train", "dev", "test")

_ROOT = pathlib.Path(__file__).resolve().parent


class TaskError(ValueError):
    """An unknown task or split; the message names it and the choices."""


def task_dir(name):
    """The folder of task ``name``."""
    if name not in TASKS:
        raise TaskError(f"unknown task {name!r}: choose from {', '.join(TASKS)}")
    return _ROOT / name


@functools.cache
def meta(name):
    """The ``meta.json`` of task ``name`` as a dict."""
    return json.loads((task_dir(name) / "meta.json").read_text(encoding="utf-8"))


def labels(name):
    """The label names of task ``name``, in index order."""
    return tuple(meta(name)["labels"])


@functools.cache
def _rows(name, split):
    if split not in SPLITS:
        raise TaskError(f"unknown split {split!r}: choose from {', '.join(SPLITS)}")
    with open(task_dir(name) / f"{split}.jsonl", encoding="utf-8") as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return tuple(row["text"] for row in rows), tuple(row["label"] for row in rows)


def load_task(name, split):
    """``(texts, labels)`` of ``split`` of task ``name``: two lists, labels as int indices into
    :func:`labels`.

    Raises
    ------
    TaskError
        If the task or the split is unknown.
    """
    texts, targets = _rows(name, split)
    return list(texts), list(targets)
