"""A task's row delta made from fine-tuned float weights (sw/multitask/fromweights.py).

A "fine-tuned" model here is a random BertModel with some K-rows of every weight matrix moved,
or every bias and LayerNorm vector. The delta of the unchanged model is zero and gives the
base's output exactly; base + delta holds the task's weights on the base's grid on the kept
rows; the task's vectors move the accelerator's output (on the fast path) as they move the
float model's.
"""

import copy

import pytest
import torch
import transformers

from bertaccel.golden import bert_ref
from bertaccel.hw.config import PRESETS
from bertaccel.sw.bert import BertError
from bertaccel.sw.bert.fast import FastModel
from bertaccel.sw.multitask.fromweights import delta_from_model, stage_weight, weight_grid
from bertaccel.sw.multitask.ondevice import apply_task, base_ints
from bertaccel.sw.multitask.rowdelta import WEIGHT_STAGES, DeltaError, stage_shape
from verif.helpers import random_bert, random_float_model


SEED = 31


@pytest.fixture(scope="module")
def base():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    bert, batch = random_bert(PRESETS["8x8"], seed=SEED)
    yield bert, batch
    torch.set_num_threads(threads)


def _rows(bert, gen, fraction):
    out = {}
    for layer in range(bert.spec.layers):
        for stage in WEIGHT_STAGES:
            k = stage_shape(bert.spec, stage)[0]
            out[(layer, stage)] = torch.randperm(k, generator=gen)[:max(1, round(fraction * k))]
    return out


def _finetuned(model, rows, gen, *, part):
    """``model`` with the K-rows ``rows`` of every matrix moved (``part="rows"``), or every
    bias and LayerNorm vector (``part="vectors"``)."""
    task = copy.deepcopy(model)
    with torch.no_grad():
        for (layer, stage), picked in rows.items():
            block = task.encoder.layer[layer]
            attn = block.attention
            modules = {"qkv": (attn.self.query, attn.self.key, attn.self.value),
                       "wo": (attn.output.dense,), "w1": (block.intermediate.dense,),
                       "w2": (block.output.dense,)}[stage]
            for module in modules:
                if part == "rows":
                    w = module.weight          # (out, in): a K-row is a column
                    w[:, picked] += 0.5 * w.std() * torch.randn(w.shape[0], len(picked),
                                                                generator=gen)
                else:
                    module.bias += 0.05 * torch.randn(module.bias.shape, generator=gen)
        for block in task.encoder.layer if part == "vectors" else ():
            for ln in (block.attention.output.LayerNorm, block.output.LayerNorm):
                ln.weight *= 1 + 0.05 * torch.randn(ln.weight.shape, generator=gen)
                ln.bias += 0.05 * torch.randn(ln.bias.shape, generator=gen)
    return task


def _hidden(bert, batch):
    """The last hidden state of the valid tokens on the fast path, dequantised."""
    mask = batch["attention_mask"].bool()
    x = FastModel(bert).encoder(bert.embed_input(batch["input_ids"]), mask)
    return bert.layers[-1].x2.dequantize(x.view(*mask.shape, -1))[mask]


def _error(got, want):
    return float((got - want).norm() / want.norm())


def test_unchanged_model_gives_zero_delta_and_the_base(base):
    bert, batch = base
    model = random_float_model(bert, seed=SEED)
    rows = _rows(bert, torch.Generator().manual_seed(1), 0.1)
    delta, report = delta_from_model(bert, model, rows, name="same")
    assert report == {"clipped": 0}
    assert all(not part.values.any() for part in delta.rows.values())
    for (layer, stage), fields in delta.vectors.items():
        ep = getattr(bert.layers[layer], f"{stage}_ep")
        if stage != "w1":
            for field, value in fields.items():
                assert torch.allclose(torch.as_tensor(value), torch.as_tensor(getattr(ep, field)),
                                      rtol=1e-12, atol=0), (layer, stage, field)
    assert torch.equal(_hidden(apply_task(bert, delta), batch), _hidden(bert, batch))


def test_delta_rows_hold_the_task_weights(base):
    """On the kept rows, base + delta dequantised at the base's grid is the task's weight to
    half a step; on the others, the base's weight."""
    bert, _ = base
    gen = torch.Generator().manual_seed(2)
    rows = _rows(bert, gen, 0.1)
    base_model = random_float_model(bert, seed=SEED)
    task_model = _finetuned(base_model, rows, gen, part="rows")
    delta, report = delta_from_model(bert, task_model, rows, name="rows")
    assert report["clipped"] == 0
    for (layer, stage), part in delta.rows.items():
        factors, scale = weight_grid(bert.layers[layer], stage)
        q = base_ints(bert, layer, stage).double()
        q[torch.from_numpy(part.rows)] += torch.from_numpy(part.values).double()
        step = torch.as_tensor(scale) / factors.unsqueeze(1)       # (K, N) or (K, 1)
        got = q * step
        want = stage_weight(base_model.encoder.layer[layer], stage)[0]
        want[torch.from_numpy(part.rows)] = stage_weight(task_model.encoder.layer[layer],
                                                         stage)[0][torch.from_numpy(part.rows)]
        half = (step / 2).expand_as(got) * (1 + 1e-9)
        # Weights beyond the per-tensor scale's range (its budget) are split, not clipped.
        assert bool(((got - want).abs() <= half).all()), (layer, stage)
        assert float((got - want).abs().max()) > 0


def test_delta_vectors_bring_the_task_model(base):
    bert, batch = base
    gen = torch.Generator().manual_seed(3)
    rows = _rows(bert, gen, 0.1)
    base_model = random_float_model(bert, seed=SEED)
    task_model = _finetuned(base_model, rows, gen, part="vectors")
    delta, _ = delta_from_model(bert, task_model, {}, name="vectors")
    # What the task changes, in float and on the accelerator.
    mask = batch["attention_mask"].bool()
    ids, attention = batch["input_ids"], batch["attention_mask"]
    moved = (bert_ref.forward(task_model, ids, attention)
             - bert_ref.forward(base_model, ids, attention))[mask]
    got = _hidden(apply_task(bert, delta), batch) - _hidden(bert, batch)
    print(f"error of the change against the float task model's: {_error(got, moved):.3f}")
    assert _error(got, moved) < 0.25


def test_bad_requests_refused(base):
    bert, _ = base
    model = random_float_model(bert, seed=SEED)
    with pytest.raises(DeltaError, match="no weight matrix 'ffn' in layer 0"):
        delta_from_model(bert, model, {(0, "ffn"): [1]})
    with pytest.raises(DeltaError, match="no weight matrix 'wo' in layer 9"):
        delta_from_model(bert, model, {(9, "wo"): [1]})
    with pytest.raises(DeltaError, match="rows must be indices from 0 to 39"):
        delta_from_model(bert, model, {(0, "wo"): [40]})
    with pytest.raises(DeltaError, match="rows must be indices from 0 to 71"):
        delta_from_model(bert, model, {(0, "w2"): [-1]})
    other = transformers.BertModel(transformers.BertConfig(
        vocab_size=90, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=72, max_position_embeddings=48), add_pooling_layer=False)
    with pytest.raises(BertError, match="not the base's"):
        delta_from_model(bert, other, {})


def test_stage_weight_shapes(base):
    bert, _ = base
    layer = random_float_model(bert, seed=SEED).encoder.layer[0]
    for stage in WEIGHT_STAGES:
        weight, bias = stage_weight(layer, stage)
        assert tuple(weight.shape) == stage_shape(bert.spec, stage)
        assert bias.shape == (weight.shape[1],)
