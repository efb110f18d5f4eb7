"""The delta schemes of bertaccel.sw.multitask.deltas keep what they claim and count it right.

Small random "models" (a state dict with the names and kinds of a BERT classifier, tiny
shapes): every scheme's reconstruction is checked against its definition (top-k keeps exactly k
values and they are the largest; sign+scale has one bit a value and one scale; low rank has the
rank asked for; row-sparse keeps whole K-rows), and every size against a count made by hand.
"""

import math

import pytest
import torch

from bertaccel.sw.multitask import deltas as D

SEED = 1234


pytestmark = pytest.mark.usefixtures("one_thread")


def tiny_state(seed=SEED, scale=1.0):
    """A classifier-shaped state dict: two encoder matrices, a table, vectors, a head and an
    unused pooler."""
    g = torch.Generator().manual_seed(seed)

    def r(*shape):
        return torch.randn(*shape, generator=g) * scale

    return {
        "bert.embeddings.word_embeddings.weight": r(20, 8),
        "bert.embeddings.LayerNorm.weight": r(8),
        "bert.encoder.layer.0.attention.self.query.weight": r(8, 8),
        "bert.encoder.layer.0.attention.self.query.bias": r(8),
        "bert.encoder.layer.0.intermediate.dense.weight": r(16, 8),
        "bert.pooler.dense.weight": r(8, 8),
        "head.weight": r(3, 8),
        "head.bias": r(3),
    }


@pytest.fixture
def pair():
    base = tiny_state()
    noise = tiny_state(seed=SEED + 1, scale=0.01)
    finetuned = {n: base[n] + noise[n] for n in base}
    return base, finetuned


def test_param_kinds(pair):
    base, _ = pair
    kinds = {n: D.param_kind(n, v.shape) for n, v in base.items()}
    assert kinds == {
        "bert.embeddings.word_embeddings.weight": "table",
        "bert.embeddings.LayerNorm.weight": "vector",
        "bert.encoder.layer.0.attention.self.query.weight": "matrix",
        "bert.encoder.layer.0.attention.self.query.bias": "vector",
        "bert.encoder.layer.0.intermediate.dense.weight": "matrix",
        "bert.pooler.dense.weight": "unused",
        "head.weight": "head",
        "head.bias": "head",
    }


def test_deltas_pick_kinds(pair):
    base, ft = pair
    d = D.deltas(ft, base)
    assert set(d) == {"bert.encoder.layer.0.attention.self.query.weight",
                      "bert.encoder.layer.0.intermediate.dense.weight"}
    both = D.deltas(ft, {n[len("bert."):]: v for n, v in base.items() if n.startswith("bert.")},
                    kinds=("matrix", "table"))
    assert "bert.embeddings.word_embeddings.weight" in both
    for name, delta in both.items():
        assert torch.equal(delta, ft[name] - base[name])


@pytest.mark.parametrize("scope", ["global", "matrix"])
@pytest.mark.parametrize("fraction", [0.0, 0.1, 0.5, 1.0])
def test_topk_keeps_exactly_k_largest(pair, scope, fraction):
    d = D.deltas(*reversed(pair))
    c = D.topk(d, fraction, values="fp32", scope=scope)
    total = sum(v.numel() for v in d.values())
    if scope == "global":
        assert sum(c.kept.values()) == round(fraction * total)
        kept = torch.cat([c.delta[n][c.delta[n] != 0] for n in d]).abs()
        dropped = torch.cat([d[n][c.delta[n] == 0] for n in d]).abs()
        if kept.numel() and dropped.numel():
            assert kept.min() >= dropped.max()
    else:
        assert c.kept == {n: round(fraction * v.numel()) for n, v in d.items()}
    for name, delta in d.items():
        nz = c.delta[name] != 0
        assert int(nz.sum()) == c.kept[name]
        assert torch.equal(c.delta[name][nz], delta[nz])  # fp32 values are kept exactly
        n, k = delta.numel(), c.kept[name]
        assert c.bits[name] == k * 32 + D.index_bits(n, k)


def test_index_bits():
    assert D.index_bits(1024, 0) == 0
    assert D.index_bits(1024, 3) == 30          # three 10-bit indices
    assert D.index_bits(1024, 200) == 1024      # a bitmap is smaller
    assert D.index_bits(1, 1) == 1


@pytest.mark.parametrize("fmt,top,bits", [("int8", 127, 8), ("int4", 7, 4)])
def test_quantize_integer_formats(fmt, top, bits):
    v = torch.tensor([0.5, -1.0, 0.25, 0.0, 0.75])
    q, n = D.quantize(v, fmt)
    assert n == v.numel() * bits + D.SCALE_BITS
    scale = 1.0 / top
    assert torch.allclose(q, torch.round(v / scale) * scale)
    assert len(torch.unique(torch.round(q / scale))) <= 2 * top + 1
    assert float((q - v).abs().max()) <= scale / 2 + 1e-7


def test_quantize_fp16_and_errors():
    v = torch.tensor([1.0001, -3.0])
    q, n = D.quantize(v, "fp16")
    assert n == 32 and torch.equal(q, v.half().float())
    with pytest.raises(ValueError, match="value format"):
        D.quantize(v, "int3")


def test_bitdelta_is_one_bit_and_one_scale(pair):
    d = D.deltas(*reversed(pair))
    c = D.bitdelta(d)
    for name, delta in d.items():
        values = torch.unique(c.delta[name].abs())
        assert values.numel() == 1                      # one scale per matrix
        assert torch.allclose(values, delta.abs().mean())
        assert torch.equal(torch.sign(c.delta[name]), torch.sign(delta))
        assert c.bits[name] == delta.numel() + D.SCALE_BITS


@pytest.mark.parametrize("rank", [1, 2, 5])
def test_lowrank_has_the_rank(pair, rank):
    d = D.deltas(*reversed(pair))
    c = D.lowrank(d, rank, values="fp32")
    for name, delta in d.items():
        m, n = delta.shape
        assert torch.linalg.matrix_rank(c.delta[name].double(), rtol=1e-5) == rank
        assert c.bits[name] == (m + n) * rank * 32
        # Eckart-Young: the error is the energy of the dropped singular values.
        s = torch.linalg.svdvals(delta.double())
        err = torch.linalg.norm((delta - c.delta[name]).double())
        assert math.isclose(float(err), float(s[rank:].norm()), rel_tol=1e-4, abs_tol=1e-6)


@pytest.mark.parametrize("scope", ["global", "matrix"])
def test_rows_keep_whole_k_rows(pair, scope):
    d = D.deltas(*reversed(pair), kinds=("matrix", "table"))
    c = D.rows(d, 0.25, values="fp32", scope=scope)
    total_values = 0
    for name, delta in d.items():
        view, rebuilt = D.as_rows(name, delta), D.as_rows(name, c.delta[name])
        kept = (rebuilt != 0).any(dim=1)
        assert int(kept.sum()) == c.kept[name]
        assert torch.equal(rebuilt[kept], view[kept])   # whole rows, exact in fp32
        assert not rebuilt[~kept].any()
        total_values += int(kept.sum()) * view.shape[1]
        assert c.bits[name] == int(kept.sum()) * view.shape[1] * 32 \
            + D.index_bits(view.shape[0], int(kept.sum()))
        if scope == "matrix":
            assert c.kept[name] == round(0.25 * view.shape[0])
    if scope == "global":
        assert total_values <= 0.25 * sum(v.numel() for v in d.values())


def test_linear_k_rows_are_input_channels():
    # A Linear weight (out, in) is B^T: one K-row is one input channel, W[:, k].
    w = torch.zeros(6, 4)
    w[:, 2] = torch.arange(1.0, 7.0)
    name = "bert.encoder.layer.0.output.dense.weight"
    c = D.rows({name: w}, 0.25, values="fp32")
    assert c.kept[name] == 1 and torch.equal(c.delta[name], w)


def test_rows_activation_weighting_changes_the_choice():
    name = "bert.encoder.layer.0.attention.self.query.weight"
    w = torch.ones(4, 4)
    w[:, 0] = 2.0                                        # the largest row of the delta
    plain = D.rows({name: w}, 0.25, values="fp32")
    act = D.rows({name: w}, 0.25, values="fp32",
                 activations={name: torch.tensor([1.0, 100.0, 1.0, 1.0])})
    assert bool(plain.delta[name][:, 0].all()) and not plain.delta[name][:, 1].any()
    assert bool(act.delta[name][:, 1].all()) and not act.delta[name][:, 0].any()


def test_fake_int8_on_the_grid():
    w = torch.randn(5, 7, generator=torch.Generator().manual_seed(SEED))
    s = D.int8_scale(w)
    q = D.fake_int8(w).double() / s
    assert torch.allclose(q, torch.round(q), atol=1e-5)
    assert float(q.abs().max()) <= 127 + 1e-6
    assert torch.allclose(q.abs().amax(dim=1), torch.full((5,), 127.0, dtype=torch.float64))


def test_rows_int8_holds_the_task_weight_on_the_base_grid(pair):
    base, ft = pair
    c = D.rows_int8(ft, base, 0.5)
    for name in D.deltas(ft, base):
        s = D.int8_scale(base[name])
        rebuilt = (base[name] + c.delta[name]).double()
        view = (rebuilt / s).t()                         # K-rows, in base-scale units
        assert torch.allclose(view, torch.round(view), atol=1e-4)
        q_task = torch.round(ft[name].double() / s).t()
        q_base = torch.round(base[name].double() / s).clamp(-127, 127).t()
        kept = ~torch.isclose(view, q_base).all(dim=1)
        assert int(kept.sum()) <= c.kept[name]
        assert torch.allclose(view[kept], q_task[kept])
        dq = (q_task - q_base)[kept]
        per_value = 4 if dq.numel() == 0 or float(dq.abs().max()) <= 7 else 8
        assert c.bits[name] == c.kept[name] * view.shape[1] * per_value \
            + D.index_bits(view.shape[0], c.kept[name])
    zero = D.rows_int8(ft, base, 0.0)
    for name in D.deltas(ft, base):
        assert torch.allclose(base[name] + zero.delta[name], D.fake_int8(base[name]), atol=1e-6)


def test_model_and_task_sizes(pair):
    base, ft = pair
    # matrices and the table: int8 + one float32 scale per output row; vectors and head
    # float32; pooler not stored.
    expect = (20 * 8 * 8 + 20 * 32) + 8 * 32 + (8 * 8 * 8 + 8 * 32) + 8 * 32 \
        + (16 * 8 * 8 + 16 * 32) + (3 * 8 + 3) * 32
    assert D.int8_model_bits(ft) == expect
    c = D.topk(D.deltas(ft, base), 0.1, values="int8")
    assert D.task_bits(ft, c) == c.total_bits + (8 + 8 + 3 * 8 + 3) * 32


def test_apply_rebuilds(pair):
    base, ft = pair
    d = D.deltas(ft, base)
    full = D.topk(d, 1.0, values="fp32")
    rebuilt = D.apply(base, ft, full)
    for name in ft:
        kind = D.param_kind(name, ft[name].shape)
        if kind in ("matrix", "vector", "head"):
            assert torch.allclose(rebuilt[name], ft[name], atol=1e-6)
        else:                                           # tables and pooler stay the base's
            assert torch.equal(rebuilt[name], base[name])


def test_storage_ratio():
    # A 100-bit base and 4 tasks of 5 bits against four 100-bit models: 120 / 400.
    assert D.storage_ratio(100, [5] * 4, [100] * 4) == pytest.approx(0.3)
    assert D.storage_ratio(100, [0], [100]) == 1.0
    with pytest.raises(ValueError, match="one task and one model size"):
        D.storage_ratio(100, [1, 2], [100])


def test_changes(pair):
    base, ft = pair
    ft = dict(ft)
    ft["bert.pooler.dense.weight"] = base["bert.pooler.dense.weight"]
    table = "bert.embeddings.word_embeddings.weight"
    ft[table] = base[table].clone()
    ft[table][3] += 1.0
    c = D.changes(ft, base)
    assert c["unused"]["changed"] == 0 and c["unused"]["relative_norm"] == 0
    assert c["table"]["rows"] == 20 and c["table"]["rows_changed"] == 1
    assert c["matrix"]["values"] == 8 * 8 + 16 * 8 == c["matrix"]["changed"]
    assert "head" not in c
