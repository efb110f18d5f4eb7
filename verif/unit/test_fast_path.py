"""The fast functional path (sw/bert/fast.py) against the instruction-level software device:
every stage's int8 output equal, bit for bit, and the stage timer's cycles equal to the cycles
the device's cycle model counts, on all-MiniLM-L6-v2 and on random BERT models of odd shapes
(hidden sizes and head sizes that are not multiples of the array, padded batches), on square
and non-square configs."""

import pytest
import torch

from bertaccel.golden import bert_ref, sentences
from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice
from bertaccel.sw.bert import STAGES, compile_bert, model_macs, run_bert
from bertaccel.sw.bert.fast import FastModel, batched_int_gemm
from bertaccel.sw.bert.timing import StageTimer
from verif.helpers import random_float_bert, token_batch

SEED = 7


pytestmark = pytest.mark.usefixtures("one_thread")


def _fast_trace(bert, batch):
    trace = {}
    x = bert.embed_input(batch["input_ids"], batch["token_type_ids"])
    out = FastModel(bert).encoder(x, batch["attention_mask"].bool(), trace=trace)
    return out, trace


def _check_equal(bert, batch):
    """The fast path's stages and cycles against the software device's, for one batch."""
    device = run_bert(SoftwareDevice(bert.cfg), bert, **batch, trace=True)
    out, trace = _fast_trace(bert, batch)
    assert set(trace) == set(device.trace)
    for key in device.trace:
        assert torch.equal(trace[key], device.trace[key]), f"stage {key} differs"
    assert torch.equal(out.view_as(device.hidden_int8), device.hidden_int8)
    size, seq = batch["input_ids"].shape
    total, by_stage = StageTimer(bert).model(size, seq)
    assert total == device.stats["cycles"]
    assert set(by_stage) == set(STAGES)


ODD_SHAPES = [
    # hidden, heads, intermediate, layers: head sizes 10, 6 and 13, none a multiple of 4 or 8
    (40, 4, 72, 2),
    (30, 5, 50, 1),
    (52, 4, 100, 1),
]


@pytest.mark.parametrize("config", ["4x8", "8x8", "4x4"])
@pytest.mark.parametrize("shape", ODD_SHAPES, ids=lambda s: f"h{s[0]}a{s[1]}i{s[2]}")
def test_random_models_of_odd_shapes(config, shape):
    hidden, heads, intermediate, layers = shape
    model = random_float_bert(SEED, hidden=hidden, heads=heads, intermediate=intermediate,
                              layers=layers)
    gen = torch.Generator().manual_seed(SEED)
    calibration = [token_batch(gen, [21, 17, 9, 3], 90, types=True) for _ in range(3)]
    bert = compile_bert(model, PRESETS[config], calibration=calibration)
    _check_equal(bert, token_batch(gen, [13, 7, 1], 90, types=True))


def test_blocks_of_rows(monkeypatch):
    """The attention a batch row at a time and the epilogues 7 elements at a time: the same
    bits as the device."""
    from bertaccel.sw.bert import fast
    monkeypatch.setattr(fast, "ATTENTION_ELEMENTS", 1)
    monkeypatch.setattr(fast, "EPILOGUE_ELEMENTS", 7)
    test_random_models_of_odd_shapes("4x8", ODD_SHAPES[0])


@pytest.fixture(scope="module")
def minilm():
    return bert_ref.load()


@pytest.mark.parametrize("config", ["8x8", "16x16"])
def test_minilm(minilm, config):
    tokenizer, model = minilm
    bert = compile_bert(model, PRESETS[config], tokenizer=tokenizer)
    batch = bert.encode(sentences.evaluation_sentences(2))
    assert int(batch["attention_mask"].sum()) < batch["attention_mask"].numel()   # padded
    _check_equal(bert, batch)
    # The array's use on the model's own MACs at 32 tokens, batch 1 (the cycles are exactly
    # the cycle model's, so the figure is too): at least 93 % (bench/model_utilization.py).
    cycles, _ = StageTimer(bert).model(1, 32)
    assert model_macs(bert.spec, 32) / (bert.cfg.macs_per_cycle * cycles) >= 0.93


def test_batched_int_gemm_is_exact():
    gen = torch.Generator().manual_seed(SEED)
    for k in (1, 37, 1024, 1500):   # 1500: past what float32 holds, float64 takes over
        a = torch.randint(-128, 128, (3, 5, k), generator=gen, dtype=torch.int8)
        b = torch.randint(-128, 128, (3, k, 4), generator=gen, dtype=torch.int8)
        a[0] = -128
        b[0] = -128
        assert torch.equal(batched_int_gemm(a, b), torch.bmm(a.long(), b.long()).int())
