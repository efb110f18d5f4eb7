"""``bertaccel multitask build | eval | run`` on a tiny random base model, in seconds.

The task checkpoints are made here (a random head and vectors, a few changed K-rows: what a
row-sparse fine-tuning leaves) in the folders ``build`` looks in, so ``build`` finds them cached
and only writes the delta files; nothing is fine-tuned. Bad input (an unknown task, a damaged
delta file, a delta for another base model) ends with one line on stderr, exit status 2, and
leaves the cache as it was.
"""

import json
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bertaccel.golden import bert_ref  # noqa: E402
from bertaccel.golden.tasks import labels  # noqa: E402
from bertaccel.cli import main  # noqa: E402
from bertaccel.sw.multitask import deltas as D  # noqa: E402
from bertaccel.sw.multitask import finetune as F  # noqa: E402
from bertaccel.sw.multitask import suite  # noqa: E402
from bertaccel.sw.multitask.model import Classifier  # noqa: E402

TASK = "stdlib-kind"
KEYS = {"accuracy_fp32", "accuracy_int8_separate", "accuracy_base_delta", "delta_bytes",
        "int8_model_bytes", "cycles_base_delta", "cycles_merged", "cycle_overhead",
        "switch_bytes", "model_bytes"}


def _base_folder(path, seed):
    import transformers

    torch.manual_seed(seed)
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=128)
    transformers.BertModel(config).save_pretrained(path)
    bert_ref.load_tokenizer().save_pretrained(path)
    return path


def _checkpoint(out, model, rows, seed):
    """A task checkpoint where ``build`` looks for it: the base's encoder with a few K-rows
    changed (when ``rows``), new vectors and head."""
    _, bert = bert_ref.load(model)
    classifier = Classifier(bert, len(labels(TASK)))
    g = torch.Generator().manual_seed(seed)
    state = classifier.state_dict()
    for name, value in state.items():
        kind = D.param_kind(name, value.shape)
        if kind in ("vector", "head"):
            value += 0.05 * torch.randn(value.shape, generator=g)
        elif kind == "matrix" and (rows is None or name.endswith("query.weight")):
            cols = slice(None) if rows is None else slice(0, 4)
            value[:, cols] += 0.002 * torch.randn(value[:, cols].shape, generator=g)
    folder = F.checkpoint_folder(TASK, out=out, model=model, rows=rows)
    F._save(folder, state, {"task": TASK})


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("multitask")
    model = _base_folder(root / "base", seed=0)
    out = root / "out"
    _checkpoint(out, model, None, seed=1)
    _checkpoint(out, model, F.ROWS, seed=2)
    return model, out


def cli(built, *argv):
    model, out = built
    return main(["multitask", *argv, "--out", str(out), "--model", str(model)])


def _files(out):
    return sorted(str(p.relative_to(out)) for p in out.rglob("*"))


def test_build_eval_run(built, capsys):
    model, out = built
    assert cli(built, "build", "--task", TASK) == 0
    path = suite.delta_path(TASK, out=out, model=model)
    assert path.is_file()
    assert cli(built, "eval", "--task", TASK, "--json") == 0
    report = json.loads(capsys.readouterr().out)
    assert report["int8_path"] == suite.INT8_PATH
    task = report["tasks"][TASK]
    assert KEYS <= task.keys()
    assert all(0 <= task[k] <= 1 for k in KEYS if k.startswith("accuracy"))
    assert task["delta_k_rows"] == 4 * 2                      # 4 K-rows of 2 query weights
    want = (report["base_bytes"] + task["delta_bytes"]) / task["int8_model_bytes"]
    assert report["storage_ratio"] == pytest.approx(want)
    # Four extra K-rows per query weight make the base+delta GEMMs deeper than the merged.
    assert task["cycles_base_delta"] > 0 and task["cycles_merged"] > 0
    assert 0 < task["switch_bytes"] < task["model_bytes"]
    assert cli(built, "eval", "--task", TASK, "--json", "--cycles-only", "--config",
               "16x16") == 0
    cycles = json.loads(capsys.readouterr().out)["tasks"][TASK]
    assert cycles["config"] != task["config"] and "accuracy_base_delta" not in cycles
    assert cli(built, "run", "--task", TASK, "--text", "Return the sum of two numbers.",
               "--text", "A module of helpers.") == 0
    printed = capsys.readouterr().out.split("\n")
    assert len(printed) == 3 and printed[2] == "" and set(printed[:2]) <= set(labels(TASK))


def _error(capsys, code):
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("bertaccel: error: ") and err.count("\n") == 1
    return err


def test_unknown_task(built, capsys):
    for command in (["build"], ["eval"], ["run", "--text", "x"]):
        err = _error(capsys, cli(built, *command, "--task", "nope"))
        assert "unknown task 'nope'" in err


def test_bad_delta_files_leave_the_cache_as_it_was(built, capsys, tmp_path):
    model, out = built
    assert cli(built, "build", "--task", TASK) == 0
    capsys.readouterr()
    path = suite.delta_path(TASK, out=out, model=model)
    good = path.read_bytes()
    try:
        path.write_bytes(good[:len(good) // 3])
        before = _files(out)
        assert "damaged delta file" in _error(capsys, cli(built, "eval", "--task", TASK,
                                                          "--json"))
        assert _files(out) == before
        # A delta made against another base model, at this base's delta path.
        other = _base_folder(tmp_path / "other", seed=7)
        _, bert = bert_ref.load(other)
        state = {f"bert.{n}": v for n, v in bert.state_dict().items()}
        head = Classifier(bert, len(labels(TASK))).state_dict()
        from bertaccel.sw.multitask import store
        store.save_delta(store.make_delta(TASK, labels(TASK), head, state, config=bert.config),
                         path)
        before = _files(out)
        assert "another base model" in _error(capsys, cli(built, "eval", "--task", TASK))
        assert _files(out) == before
    finally:
        path.write_bytes(good)


def test_bad_accelerator_delta_is_refused(built, capsys):
    """The task's accelerator delta (``.npz``, made by eval or run) damaged, or made for
    another config at this config's path: one line, exit status 2, the cache as it was."""
    model, out = built
    assert cli(built, "run", "--task", TASK, "--text", "x", "--config", "4x8") == 0
    assert cli(built, "run", "--task", TASK, "--text", "x") == 0
    capsys.readouterr()
    path, = (out / "deltas").glob("*-r8c8_*.npz")
    other, = (out / "deltas").glob("*-r4c8_*.npz")
    good = path.read_bytes()
    try:
        path.write_bytes(other.read_bytes())
        before = _files(out)
        assert "config" in _error(capsys, cli(built, "run", "--task", TASK, "--text", "x"))
        path.write_bytes(good[:len(good) // 3])
        assert "not a readable delta file" in _error(capsys, cli(built, "run", "--task", TASK,
                                                                 "--text", "x"))
        assert _files(out) == before
    finally:
        path.write_bytes(good)
