"""STS-B (golden/stsb.py, analysis/stsb.py, ``bertaccel eval stsb``): the files read as the
benchmark defines them, Spearman's rank correlation against a direct computation, and the
evaluation on a few pairs, FP32 against the bit-exact path."""

import itertools
import random

import numpy as np
import pytest

from bertaccel.analysis import stsb as evaluation
from bertaccel.cli import main
from bertaccel.golden import stsb


@pytest.mark.parametrize("split,pairs", [("dev", 1500), ("test", 1379)])
def test_splits(split, pairs):
    rows = stsb.load(split)
    assert len(rows) == pairs
    assert all(0 <= row.score <= 5 and row.first and row.second for row in rows)
    assert 2 * len(rows) == {"dev": 3000, "test": 2758}[split]


def test_rows_with_extra_fields():
    """Some test rows carry source fields after the pair; the pair is still columns 6 and 7."""
    first = stsb.load("test")[0]
    assert (first.score, first.first, first.second) == (
        2.5, "A girl is styling her hair.", "A girl is brushing her hair.")


def test_bad_split():
    with pytest.raises(stsb.StsbError, match="must be one of dev, test, not 'train'"):
        stsb.load("train")


def _spearman_written_out(x, y):
    """Spearman's rho written out: ranks by sorting, ties averaged, then Pearson's formula."""
    def ranks(v):
        order = sorted(range(len(v)), key=lambda i: v[i])
        out = [0.0] * len(v)
        for _, group in itertools.groupby(enumerate(order), key=lambda t: v[t[1]]):
            group = list(group)
            mean = sum(pos + 1 for pos, _ in group) / len(group)
            for _, i in group:
                out[i] = mean
        return out
    rx, ry = ranks(x), ranks(y)
    mx, my = sum(rx) / len(rx), sum(ry) / len(ry)
    cov = sum((a - mx) * (b - my) for a, b in zip(rx, ry))
    return cov / (sum((a - mx) ** 2 for a in rx) * sum((b - my) ** 2 for b in ry)) ** 0.5


def test_spearman():
    rng = random.Random(3)
    x = [rng.choice([0, 0.5, 1, 2, 2, 3]) for _ in range(200)]     # many ties
    y = [v + rng.gauss(0, 1) for v in x]
    assert evaluation.spearman(x, y) == pytest.approx(_spearman_written_out(x, y), abs=1e-12)
    assert evaluation.spearman(x, x) == pytest.approx(1.0)
    assert evaluation.spearman(x, [-v for v in x]) == pytest.approx(-1.0)


def test_evaluate_a_few_pairs(monkeypatch, tmp_path):
    """Twelve test pairs on 4x8: every figure present, FP32 and the accelerator close."""
    pairs = stsb.load("test")[:12]
    monkeypatch.setattr(stsb, "load", lambda split: pairs)
    report = evaluation.evaluate(["4x8"], ["test"], cache_dir=tmp_path)
    row = report["splits"]["test"]
    assert (row["pairs"], row["sentences"]) == (12, 24)
    res = row["configs"]["4x8"]
    assert res["minus_fp32"] == pytest.approx(res["spearman_x100"]
                                              - row["fp32"]["spearman_x100"])
    assert res["embedding_cosine_fp32"]["min"] > 0.98
    assert abs(res["minus_fp32"]) < 10
    assert np.isfinite(res["cycles"]) and res["cycles"] > 0
    assert report["machine"]["gemm_kernel"]
    assert "4x8" in evaluation.format_report(report)


@pytest.mark.parametrize("argv,message", [
    (["--split", "train"], "--split must name dev or test, not 'train'"),
    (["--configs", "9x9"], "9x9"),
    (["--batch-size", "0"], "--batch-size must be at least 1, not 0"),
])
def test_cli_refuses(capsys, argv, message):
    assert main(["eval", "stsb", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertaccel: error: ") and message in err and err.count("\n") == 1
