"""The task files of bertaccel.golden.tasks load, their splits are disjoint, their labels right.

Also the builder's splitting rule on made-up examples (groups never straddle splits, caps and
fractions hold, the seed decides) and its text clipping.
"""

import json
import os

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bertaccel.golden import bert_ref  # noqa: E402
from bertaccel.golden import tasks as T  # noqa: E402
from bertaccel.golden.tasks import build  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer():
    return bert_ref.load_tokenizer()


@pytest.mark.parametrize("task", T.TASKS)
def test_task_loads_with_its_labels(task):
    meta = T.meta(task)
    assert meta["name"] == task and list(T.labels(task)) == meta["labels"]
    assert len(set(meta["labels"])) == len(meta["labels"]) >= 4
    for split in T.SPLITS:
        texts, labels = T.load_task(task, split)
        assert len(texts) == len(labels) > 0
        assert all(isinstance(t, str) and t.strip() == t and t for t in texts)
        # Every label occurs in every split, and the counts are the ones meta.json states.
        counts = {name: labels.count(i) for i, name in enumerate(meta["labels"])}
        assert counts == meta["counts"][split]
        assert min(counts.values()) > 0 and set(labels) <= set(range(len(meta["labels"])))


@pytest.mark.parametrize("task", T.TASKS)
def test_splits_disjoint_and_sized(task):
    seen = {}
    for split in T.SPLITS:
        texts, _ = T.load_task(task, split)
        assert len(set(texts)) == len(texts), f"{task}/{split} repeats a text"
        for text in texts:
            assert text not in seen, f"{task}: a text is in {seen.get(text)} and {split}"
            seen[text] = split
        assert (T.task_dir(task) / f"{split}.jsonl").stat().st_size < 500_000
    sizes = {s: sum(T.meta(task)["counts"][s].values()) for s in T.SPLITS}
    assert sum(sizes.values()) <= 3000
    # 60/20/20 per label, within the rounding of whole groups.
    assert sizes["train"] > 2.5 * sizes["dev"] and sizes["train"] > 2.5 * sizes["test"]


@pytest.mark.parametrize("task", T.TASKS)
def test_texts_fit_128_tokens(task, tokenizer):
    for split in T.SPLITS:
        texts, _ = T.load_task(task, split)
        lengths = [len(ids) for ids in tokenizer(texts)["input_ids"]]
        assert max(lengths) <= 128


def test_meta_states_source_and_licence():
    for task in T.TASKS:
        meta = T.meta(task)
        assert meta["source"] and meta["licence"] and meta["seed"] == 0
    readme = (T.task_dir(T.TASKS[0]).parent / "README.md").read_text()
    for task in T.TASKS:
        assert task in readme


def test_bad_task_and_split():
    with pytest.raises(T.TaskError, match="unknown task 'nope'"):
        T.load_task("nope", "train")
    with pytest.raises(T.TaskError, match="unknown split 'val'"):
        T.load_task(T.TASKS[0], "val")


def made_up(n_groups=40, per_group=3, labels=("a", "b")):
    return [(f"text {label} {g} {i}", label, f"{label}{g}")
            for label in labels for g in range(n_groups) for i in range(per_group)]


def test_split_groups_keeps_groups_whole_and_caps():
    examples = made_up()
    splits = build.split_groups(examples, cap=60, seed=3)
    group_of = {text: group for text, _, group in examples}
    where = {}
    for split, rows in splits.items():
        for text, _ in rows:
            assert where.setdefault(group_of[text], split) == split
    for label in ("a", "b"):
        sizes = [sum(lab == label for _, lab in splits[s]) for s in build.SPLITS]
        assert sum(sizes) == 60                          # 20 groups of 3
        assert sizes == [36, 12, 12]


def test_split_groups_seeded_and_deduplicated():
    examples = made_up() + [("text a 0 0", "a", "a0"), ("twice", "a", "x"), ("twice", "b", "y")]
    one = build.split_groups(examples, cap=1000, seed=1)
    assert one == build.split_groups(examples, cap=1000, seed=1)
    assert one != build.split_groups(examples, cap=1000, seed=2)
    texts = [t for rows in one.values() for t, _ in rows]
    assert len(texts) == len(set(texts)) == 240           # the repeat and "twice" dropped
    assert "twice" not in texts


def test_write_task_indexes_labels(tmp_path):
    splits = {"train": [("x", "b"), ("y", "a")], "dev": [("z", "a")], "test": [("w", "b")]}
    meta = build.write_task(tmp_path / "t", splits, {"labels": ["a", "b"]})
    lines = (tmp_path / "t" / "train.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert rows == [{"text": "x", "label": 1}, {"text": "y", "label": 0}]
    assert meta["counts"]["train"] == {"a": 1, "b": 1}


def test_clip():
    assert build._clip("one  two\nthree") == "one two three"
    words = "Short. " + " ".join(["w"] * 60)           # no sentence end in the second half
    assert build._clip(words, max_words=10).split() == words.split()[:10]
    text = " ".join(["a"] * 30) + ". " + " ".join(["b"] * 30)
    assert build._clip(text, max_words=40) == " ".join(["a"] * 30) + "."
