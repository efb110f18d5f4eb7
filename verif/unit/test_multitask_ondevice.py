"""A task run from the int8 base plus its row delta (sw/multitask/ondevice.py), and the delta
file (sw/multitask/rowdelta.py).

On small random BERT models, square and non-square configs: the delta's rows appended to the
GEMMs give, on the instruction-level software device and on the fast path, stage for stage the
same int8 outputs, and the same as the merged-weight model (``base_q + delta`` built here, as
the reference, and split into int8 rows the way the compiler splits any weight) -- both where
the merged weights fit int8 and where they do not. The stage timer's cycles equal the
device's. Then the file: a round trip, and every way a delta can be wrong refused with a
one-line :class:`DeltaError`, with nothing half-written left behind.
"""

import dataclasses

import numpy as np
import pytest
import torch

from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice
from bertaccel.sw.bert import compile_bert, run_bert
from bertaccel.sw.bert.fast import FastModel
from bertaccel.sw.bert.quant import weight_ints
from bertaccel.sw.bert.timing import StageTimer
from bertaccel.sw.multitask.ondevice import (apply_task, base_ints, model_bytes,
                                             switch_bytes)
from bertaccel.sw.multitask.reference import merged_program, random_task_delta
from bertaccel.sw.multitask.rowdelta import DeltaError, RowDelta, base_fingerprint, load_delta
from verif.helpers import random_bert, random_float_bert, token_batch


SEED = 5


pytestmark = pytest.mark.usefixtures("one_thread")


def small_bert(config, **shape):
    return random_bert(PRESETS[config], seed=SEED, **shape)


@pytest.fixture(scope="module", params=["8x8", "4x8"])
def small(request):
    return small_bert(request.param)


def _fast(bert, batch):
    trace = {}
    x = bert.embed_input(batch["input_ids"], batch["token_type_ids"])
    out = FastModel(bert).encoder(x, batch["attention_mask"].bool(), trace=trace)
    return out, trace


@pytest.mark.parametrize("fits", [True, False], ids=["merged-fits-int8", "merged-splits"])
def test_task_equals_merged_on_device_and_fast_path(small, fits):
    bert, batch = small
    gen = torch.Generator().manual_seed(SEED + fits)
    delta = random_task_delta(bert, gen, fits=fits, uneven=True)
    task = apply_task(bert, delta)
    for number, (base_q, task_q) in enumerate(zip(bert.layers, task.layers)):
        for stage in ("qkv", "wo", "w1", "w2"):
            # The task holds the base's operand itself (shared, not a copy) and the delta's
            # rows; a device call reads them stacked, the base's rows first.
            stacked = getattr(task_q, stage)
            assert stacked.base.b is getattr(base_q, stage).b
            assert stacked.rows.shape[0] == delta.rows[(number, stage)].rows.size >= 1
            assert torch.equal(stacked.b[:bert.k[stage]], stacked.base.b)
        assert task.operands[number].base is bert.operands[number]
    # Each layer runs at its own depth: the base's plus its own delta rows, not the deepest's.
    for stage in ("qkv", "wo", "w1", "w2"):
        depths = [task.depth(number, stage) for number in range(bert.spec.layers)]
        assert depths == [(bert.k[stage] + delta.rows[(number, stage)].rows.size,
                           bert.k_high[stage]) for number in range(bert.spec.layers)]
        assert len(set(depths)) > 1, f"{stage}: the random task must make the depths differ"
        for number in range(bert.spec.layers):
            gemms = task.stage_gemms(number, stage, batch["attention_mask"].bool())
            assert {gemm[2] for gemm in gemms} == {depths[number][0]}
    device = run_bert(SoftwareDevice(bert.cfg), task, **batch, trace=True)
    out, trace = _fast(task, batch)
    for key, want in device.trace.items():
        assert torch.equal(trace[key], want), f"fast path != software device at {key}"
    merged, extra = merged_program(bert, delta)
    assert (extra > 0) != fits      # split rows the merged weights need beyond the base's
    want, want_trace = _fast(merged, batch)
    for key, value in want_trace.items():
        assert torch.equal(trace[key], value), f"base + delta != merged at {key}"
    assert torch.equal(out, want)
    assert not torch.equal(out, _fast(bert, batch)[0])       # the task changed the model
    size, seq = batch["input_ids"].shape
    assert StageTimer(task).model(size, seq)[0] == device.stats["cycles"]


def test_base_ints_match_weight_ints():
    model = random_float_bert(SEED, hidden=32, heads=2, intermediate=64, layers=1)
    gen = torch.Generator().manual_seed(SEED)
    bert = compile_bert(model, PRESETS["8x8"], calibration=[token_batch(gen, [20, 9], 90)])
    quant, layer = bert.layers[0], model.encoder.layer[0]
    self_attn = layer.attention.self
    w_qkv = torch.cat([m.weight.detach().double().t()
                       for m in (self_attn.query, self_attn.key, self_attn.value)], dim=1)
    want, _ = weight_ints(w_qkv, quant.x.factors, per_channel=True)
    assert torch.equal(base_ints(bert, 0, "qkv"), want)
    w2 = layer.output.dense.weight.detach().double().t()
    order = torch.cat([quant.h_keep, quant.h.outliers])
    want, _ = weight_ints(w2[order], quant.h.factors[order], per_channel=False,
                          w_scale=quant.info["w2"]["w_scale"])
    assert torch.equal(base_ints(bert, 0, "w2")[order], want)


def test_switch_moves_only_the_delta(small):
    bert, _ = small
    delta = random_task_delta(bert, torch.Generator().manual_seed(SEED), fraction=0.05)
    moved, whole = switch_bytes(bert, delta), model_bytes(bert)
    rows = sum(part.values.size for part in delta.rows.values())
    assert moved["rows"] == rows
    assert moved["vectors"] == whole["vectors"]        # every stage's vectors are replaced
    assert moved["total"] < whole["total"]
    no_vectors = dataclasses.replace(delta, vectors={})
    assert switch_bytes(bert, no_vectors) == {"rows": rows, "vectors": 0, "total": rows}


# -- the delta file --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny():
    return small_bert("8x8", hidden=16, heads=2, intermediate=32, layers=1)[0]


def test_file_round_trip(tiny, tmp_path):
    delta = random_task_delta(tiny, torch.Generator().manual_seed(1), name="sst")
    path = delta.save(tmp_path / "sst.npz")
    back = load_delta(path).check(tiny)
    assert (back.base, back.config, back.name) == (delta.base, delta.config, "sst")
    assert set(back.rows) == set(delta.rows) and set(back.vectors) == set(delta.vectors)
    for key, part in delta.rows.items():
        assert np.array_equal(back.rows[key].rows, part.rows)
        assert np.array_equal(back.rows[key].values, part.values)
        assert back.rows[key].values.dtype == np.int8
    for key, fields in delta.vectors.items():
        for name, value in fields.items():
            assert np.array_equal(back.vectors[key][name], value)
    assert [p.name for p in tmp_path.iterdir()] == ["sst.npz"]


def _one_line(error):
    text = str(error.value)
    assert "\n" not in text and text
    return text


def test_another_base_or_config_refused(tiny):
    delta = random_task_delta(tiny, torch.Generator().manual_seed(2))
    other = dataclasses.replace(delta, base="0" * 64)
    with pytest.raises(DeltaError, match="another base model") as error:
        apply_task(tiny, other)
    _one_line(error)
    with pytest.raises(DeltaError, match=f"made for config r4c4.*not {tiny.cfg.tag}"):
        apply_task(tiny, dataclasses.replace(delta, config="r4c4"))
    # A base compiled from other weights has another fingerprint.
    changed = small_bert("8x8", hidden=16, heads=2, intermediate=32, layers=1)[0]
    changed.layers[0].w1.b[0, 0] += 1
    assert base_fingerprint(changed) != base_fingerprint(tiny)


@pytest.mark.parametrize("change, message", [
    (lambda d: {(0, "wo"): RowDelta(rows=np.array([16]), values=np.zeros((1, 16), np.int8))},
     "row index 16 is beyond the 16 rows"),
    (lambda d: {(0, "w2"): RowDelta(rows=np.array([1]), values=np.zeros((1, 17), np.int8))},
     "values have 17 columns, not 16"),
    (lambda d: {(1, "qkv"): d.rows[(0, "qkv")]}, "layer 1 is not one of the model's 1"),
    (lambda d: {(0, "ffn"): d.rows[(0, "qkv")]}, "stage 'ffn' is not one of"),
])
def test_bad_shapes_refused(tiny, change, message):
    delta = random_task_delta(tiny, torch.Generator().manual_seed(3), vectors=False)
    with pytest.raises(DeltaError, match=message) as error:
        apply_task(tiny, dataclasses.replace(delta, rows=change(delta)))
    _one_line(error)


def test_bad_vectors_refused(tiny):
    delta = random_task_delta(tiny, torch.Generator().manual_seed(4), vectors=False)
    for fields, message in (({"gamma": np.ones(48)}, "no epilogue vector 'gamma'"),
                            ({"bias": np.ones(5)}, "bias must be 48 finite numbers"),
                            ({"bias": np.full(48, np.nan)}, "bias must be 48 finite")):
        with pytest.raises(DeltaError, match=message):
            apply_task(tiny, dataclasses.replace(delta, vectors={(0, "qkv"): fields}))


@pytest.mark.parametrize("rows, values, message", [
    (np.array([1, 1]), np.zeros((2, 4), np.int8), "row indices repeat"),
    (np.array([-1]), np.zeros((1, 4), np.int8), "row index -1 is negative"),
    (np.array([1]), np.zeros((1, 4), np.int16), "values must be a 2-D int8 array"),
    (np.array([1.0]), np.zeros((1, 4), np.int8), "rows must be a 1-D int64 array"),
    (np.array([1, 2]), np.zeros((1, 4), np.int8), "values has 1 rows for 2 row indices"),
])
def test_bad_row_delta_refused(rows, values, message):
    with pytest.raises(DeltaError, match=message):
        RowDelta(rows=rows, values=values)


def test_damaged_files_refused(tiny, tmp_path):
    delta = random_task_delta(tiny, torch.Generator().manual_seed(6))
    good = delta.save(tmp_path / "good.npz").read_bytes()
    cases = {"missing.npz": None, "cut.npz": good[:len(good) // 2],
             "noise.npz": bytes(range(256)) * 8, "empty.npz": b""}
    for name, data in cases.items():
        if data is not None:
            (tmp_path / name).write_bytes(data)
        with pytest.raises(DeltaError, match=name) as error:
            load_delta(tmp_path / name)
        _one_line(error)
    # A readable archive that is not a delta (no metadata, another format, wrong dtypes).
    np.savez(tmp_path / "foreign.npz", x=np.zeros(3))
    with pytest.raises(DeltaError, match="no readable metadata"):
        load_delta(tmp_path / "foreign.npz")
    arrays = dict(np.load(tmp_path / "good.npz"))
    key = next(k for k in arrays if k.endswith("/values"))
    arrays[key] = arrays[key].astype(np.int32)
    np.savez(tmp_path / "wide.npz", **arrays)
    with pytest.raises(DeltaError, match="wide.npz: values must be a 2-D int8 array"):
        load_delta(tmp_path / "wide.npz")


def test_failed_save_leaves_nothing(tiny, tmp_path, monkeypatch):
    delta = random_task_delta(tiny, torch.Generator().manual_seed(7))
    path = delta.save(tmp_path / "task.npz")
    before = path.read_bytes()

    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(np, "savez_compressed", broken)
    with pytest.raises(OSError, match="disk full"):
        dataclasses.replace(delta, name="other").save(path)
    assert path.read_bytes() == before        # the old file whole, no temporary beside it
    assert [p.name for p in tmp_path.iterdir()] == ["task.npz"]
