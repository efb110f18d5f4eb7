"""A fast check of golden/accuracy.py: the integer ops on real all-MiniLM-L6-v2 activations.

Eight standard-library sentences in two padded batches (so the attention mask matters). The
bounds are the errors measured on these sentences (in output LSBs) with a margin; the full
measurement is ``python bench/accuracy_ops.py`` (docs/accuracy.md).
"""

import math
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bertaccel.golden import accuracy, intops  # noqa: E402

SENTENCES = 8
BATCH = 4


@pytest.fixture(scope="module")
def model(one_thread):
    return accuracy.load_model()


@pytest.fixture(scope="module")
def sentences():
    return accuracy.stdlib_sentences(SENTENCES)


@pytest.fixture(scope="module")
def results(model, sentences):
    tokenizer, bert = model
    return accuracy.measure(sentences, model=bert, tokenizer=tokenizer, batch_size=BATCH,
                            softmax_cols=(8, 32))


def test_sentences_are_real_prose():
    pool = accuracy.stdlib_sentences(64)
    assert pool == accuracy.stdlib_sentences(64)               # deterministic
    assert len(set(pool)) == 64
    assert pool[:SENTENCES] == accuracy.stdlib_sentences(SENTENCES)
    for s in pool:
        assert s[0].isupper() and s.endswith(".") and 6 <= len(s.split()) <= 60
    for n in (0, 10 ** 6):
        with pytest.raises(ValueError, match="n must be"):
            accuracy.stdlib_sentences(n)


def test_padding_is_exercised(results):
    assert results["texts"] == SENTENCES
    assert results["padding_fraction"] > 0.2
    assert len(results["padded_lengths"]) == math.ceil(SENTENCES / BATCH)


# op: (integer op max LSB, vs float model max LSB, vs float model mean LSB); measured
# softmax 0.724 / 138.2 / 1.465 (its LSB is 1/4095: int8 Q and K cost it some 4 LSB of 1/127),
# LayerNorm 0.596 / 13.05 / 0.676, GELU 0.546 / 7.41 / 0.328.
BOUNDS = {
    "softmax": (0.8, 180.0, 1.8),
    "layernorm": (0.7, 16.0, 0.8),
    "gelu": (0.6, 10.0, 0.4),
}


@pytest.mark.parametrize("op", sorted(BOUNDS))
def test_error_bounds(results, op):
    stats = results["ops"][op]
    int_max, model_max, model_mean = BOUNDS[op]
    print(op, stats)
    assert stats["elements"] > 10_000
    # The floor: rounding the float output to the int8 grid, at most half an LSB.
    assert stats["floor"]["max_lsb"] <= 0.5 + 1e-6
    # The integer op: within a fraction of an LSB of the floor, on average no worse than it.
    assert stats["int"]["max_lsb"] <= int_max
    assert stats["int"]["mean_lsb"] <= stats["floor"]["mean_lsb"] + 0.005
    assert stats["exact"] >= 0.98 and stats["within_1"] == 1.0
    # Against the float model, int8 operands add the most.
    assert stats["model"]["max_lsb"] <= model_max
    assert stats["model"]["mean_lsb"] <= model_mean
    # Float units are LSBs times the output scale (1/4095 for the softmax).
    if op == "softmax":
        assert stats["int"]["max_float"] == pytest.approx(stats["int"]["max_lsb"]
                                                          / intops.PROB_SCALE)


def test_softmax_cols_barely_matter(results):
    by_cols = results["softmax_by_cols"]
    assert set(by_cols) == {"8", "32"}
    assert abs(by_cols["8"]["int"]["max_lsb"] - by_cols["32"]["int"]["max_lsb"]) <= 0.01
    assert abs(by_cols["8"]["exact"] - by_cols["32"]["exact"]) <= 1e-3


def test_formats(results):
    for f in results["formats"]["layernorm"]:
        assert 0 < f["rmul"] < 2 ** 32 and 8 <= f["gshift"] <= intops.SHIFT_MAX
        assert f["beta_clamped"] == 0 and f["xmul"] < 2 ** intops.MUL_BITS
    for f in results["formats"]["gelu"] + results["formats"]["softmax"]:
        assert all(f[k] < 2 ** intops.MUL_BITS for k in f if k.endswith("mul"))
    assert len(results["formats"]["layernorm"]) == 12 and len(results["formats"]["gelu"]) == 6


def test_mask_and_row_len_agree_on_real_scores(model, sentences):
    # Right padding puts every padded key at the end, so a mask of -2**31 on them is row_len.
    tokenizer, bert = model
    capture = accuracy.capture(bert, tokenizer, sentences[:BATCH], batch_size=BATCH)[0]
    layer = capture.layers[0]
    s = layer["q"].abs().max().item() / 127, layer["k"].abs().max().item() / 127
    q = (layer["q"] / s[0]).round().clamp(-127, 127)
    k = (layer["k"] / s[1]).round().clamp(-127, 127)
    acc = (q.double() @ k.double().transpose(2, 3)).to(torch.int64)
    mul, shift = intops.quantize_scale(s[0] * s[1] * layer["scaling"] * math.log2(math.e)
                                       * (1 << intops.SOFTMAX_FRAC))
    padded = 0
    for b in range(acc.shape[0]):
        valid = capture.valid[b]
        n = int(valid.sum())
        padded += (~valid).sum().item()
        x = acc[b, :, :n].reshape(-1, acc.shape[-1])
        by_mask = intops.softmax(x, mask=torch.where(valid, 0, -2 ** 31), mul=mul, shift=shift,
                                 cols=8)
        by_len = intops.softmax(x, mul=mul, shift=shift, cols=8, row_len=n)
        assert torch.equal(by_mask, by_len)
        assert (by_mask[:, n:] == 0).all()
    assert padded > 0
