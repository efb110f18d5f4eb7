"""Delta files of bertaccel.sw.multitask.store, on a tiny random BERT, in seconds.

The delta is the form the accelerator runs: per encoder matrix, K-row indices and an int8
``(rows, N)`` delta in units of the base's per-output-channel scale. These tests check that the
task weight is the base's integers plus the delta on those rows, that running it as extra K-rows
of the same GEMM gives the same integers, that a file round-trips, and that a damaged file or
one for another base or architecture is refused without leaving anything behind.
"""

import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bertaccel.sw.multitask import deltas as D  # noqa: E402
from bertaccel.sw.multitask import store as S  # noqa: E402
from bertaccel.sw.multitask.model import Classifier  # noqa: E402

QUERY = "bert.encoder.layer.0.attention.self.query.weight"
FFN2 = "bert.encoder.layer.1.output.dense.weight"


def tiny(seed=0, hidden=32):
    import transformers

    torch.manual_seed(seed)
    config = transformers.BertConfig(hidden_size=hidden, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=64,
                                     max_position_embeddings=128, attn_implementation="eager")
    return Classifier(transformers.BertModel(config), 3)


def row_sparse(model, seed=1):
    """A task model: the base with a few K-rows of two matrices, every vector and the head
    changed (the tables kept)."""
    g = torch.Generator().manual_seed(seed)
    state = {n: v.clone() for n, v in model.state_dict().items()}
    for name, rows in ((QUERY, [3, 17]), (FFN2, [0, 40, 63])):
        state[name][:, rows] += 0.01 * torch.randn(state[name].shape[0], len(rows), generator=g)
    for name, value in state.items():
        if D.param_kind(name, value.shape) in ("vector", "head"):
            state[name] = value + 0.01 * torch.randn(value.shape, generator=g)
    return state


@pytest.fixture(scope="module")
def case():
    model = tiny()
    base = {n: v.clone() for n, v in model.state_dict().items() if n.startswith("bert.")}
    task = row_sparse(model)
    delta = S.make_delta("t", ("a", "b", "c"), task, base, config=model.bert.config)
    return model, base, task, delta


def test_delta_rows_are_the_changed_k_rows(case):
    _, _, _, delta = case
    assert delta.rows[QUERY].tolist() == [3, 17]
    assert delta.rows[FFN2].tolist() == [0, 40, 63]
    assert set(delta.rows) == {QUERY, FFN2}
    assert delta.values[QUERY].dtype == torch.int8 and delta.values[QUERY].shape == (2, 32)
    assert delta.values[FFN2].shape == (3, 32)              # (rows, N): N outputs of FFN2
    assert delta.clipped == 0
    assert set(delta.params) == {n for n, v in case[2].items()
                                 if D.param_kind(n, v.shape) in ("vector", "head")}


def test_task_weight_is_base_ints_plus_delta_on_the_base_grid(case):
    _, base, task, delta = case
    state = S.task_state(base, delta)
    for name in (QUERY, FFN2):
        s = D.int8_scale(base[name])
        q_t = torch.round(task[name].double() / s)
        rebuilt = state[name].double() / s
        assert torch.equal(torch.round(rebuilt), q_t)        # q_b + delta on its rows
        assert torch.allclose(rebuilt, torch.round(rebuilt), atol=1e-4)
    for name, value in delta.params.items():
        assert torch.equal(state[name], value)
    table = "bert.embeddings.word_embeddings.weight"
    assert torch.equal(state[table], base[table])


def test_extra_k_rows_give_the_same_integers(case):
    # A' = [A | A[:, rows]] times B' = [q_b ; values]: the accelerator's channel-split form.
    _, base, _, delta = case
    name = FFN2
    s = D.int8_scale(base[name])
    q_b = torch.round(base[name].double() / s).clamp(-127, 127).long().t()     # B: (K, N)
    rows, values = delta.rows[name], delta.values[name].long()
    a = torch.randint(-128, 128, (5, q_b.shape[0]), generator=torch.Generator().manual_seed(2))
    merged = q_b.clone()
    merged[rows] += values
    split = torch.cat([a, a[:, rows]], dim=1) @ torch.cat([q_b, values])
    assert torch.equal(split, a @ merged)


def test_delta_bytes(case):
    _, _, _, delta = case
    params = sum(v.numel() for v in delta.params.values())
    # 2 rows of 32 values (K 32: 5-bit indices) and 3 rows of 32 (K 64: 6-bit indices).
    assert S.delta_bytes(delta) == (2 * 32 * 8 + 2 * 5 + 3 * 32 * 8 + 3 * 6) / 8 + 4 * params


def test_round_trip(case, tmp_path):
    model, base, _, delta = case
    path = tmp_path / "d.pt"
    S.save_delta(delta, path)
    back = S.load_delta(path, base_digest=S.state_digest(base), config=model.bert.config)
    assert back.task == "t" and back.labels == ("a", "b", "c") and back.arch == delta.arch
    for group in ("rows", "values", "params"):
        got, want = getattr(back, group), getattr(delta, group)
        assert got.keys() == want.keys()
        assert all(torch.equal(got[k], want[k]) for k in want)
    assert [p.name for p in tmp_path.iterdir()] == ["d.pt"]


def test_refuses_another_base_or_config(case, tmp_path):
    model, base, _, delta = case
    path = tmp_path / "d.pt"
    S.save_delta(delta, path)
    other = tiny(seed=5)
    with pytest.raises(S.DeltaError, match="another base model"):
        S.load_delta(path, base_digest=S.state_digest(other.state_dict()),
                     config=other.bert.config)
    wide = tiny(hidden=64)
    with pytest.raises(S.DeltaError, match="another model config: hidden_size 32 .base 64."):
        S.load_delta(path, base_digest=S.state_digest(base), config=wide.bert.config)


@pytest.mark.parametrize("damage", ["flip", "truncate", "text"])
def test_refuses_a_damaged_file(case, tmp_path, damage):
    _, _, _, delta = case
    path = tmp_path / "d.pt"
    S.save_delta(delta, path)
    data = bytearray(path.read_bytes())
    if damage == "flip":
        # A byte of the last tensor's storage (the head's bias): the zip still reads.
        payload = torch.load(path, weights_only=True)
        raw = payload["params"]["head.bias"].numpy().tobytes()
        at = bytes(data).rindex(raw)
        data[at] ^= 0x40
    elif damage == "truncate":
        data = data[:len(data) // 2]
    else:
        data = bytearray(b"not a delta\n")
    path.write_bytes(bytes(data))
    with pytest.raises(S.DeltaError, match="damaged|not a delta file") as error:
        S.load_delta(path)
    assert "\n" not in str(error.value)


def test_atomic_write_leaves_nothing_on_error(tmp_path):
    def fail(tmp):
        tmp.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        S.atomic_write(tmp_path / "x" / "f.json", fail)
    assert list((tmp_path / "x").iterdir()) == []


def test_a_changed_table_has_no_row_sparse_delta(case):
    model, base, task, _ = case
    task = dict(task)
    name = "bert.embeddings.word_embeddings.weight"
    task[name] = task[name] + 1
    with pytest.raises(S.DeltaError, match="embedding table"):
        S.make_delta("t", ("a", "b", "c"), task, base, config=model.bert.config)


def test_separate_int8_state_is_on_its_own_grid(case):
    _, _, task, _ = case
    state = S.separate_int8_state(task)
    assert torch.equal(state[QUERY], D.fake_int8(task[QUERY]))
    assert torch.equal(state["head.weight"], task["head.weight"])
