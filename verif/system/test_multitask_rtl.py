"""A delta-applied encoder layer on the RTL (Verilator): a task run from the int8 base plus its
row delta (extra K-rows of the same GEMMs, sw/multitask/ondevice.py), bit for bit equal on the
RTL, the instruction-level software device and the fast path, on 8x8 and on the non-square
4x8, free-running and with idle input cycles and output backpressure (seed printed).

The model is a small random BertModel (hidden 40, 4 heads of 10, intermediate 72, two layers)
with a random task: 5 % of the K-rows of every weight matrix changed in the first layer and
15 % in the second (so each layer runs at its own GEMM depth), and new biases and LayerNorm
vectors. The layer's input is the software device's output of the layer before it,
so the RTL runs the second layer; the fast path must also equal the merged-weight model
(``base_q + delta``), built here as the reference. Free-running, the RTL's cycles must equal
the cycle model's. Then all-MiniLM-L6-v2's first layer with a random 1 % task, on 8x8.
"""

import os
import time
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
from bertaccel.golden import bert_ref, sentences  # noqa: E402
from bertaccel.hw.config import PRESETS  # noqa: E402
from bertaccel.sw import SoftwareDevice  # noqa: E402
from bertaccel.sw.bert import (STAGES, Runner, compile_bert, layer_programs,  # noqa: E402
                               run_layer)
from bertaccel.sw.bert.fast import FastModel  # noqa: E402
from bertaccel.sw.multitask.ondevice import apply_task  # noqa: E402
from bertaccel.sw.multitask.reference import merged_program, random_task_delta  # noqa: E402

from verif.helpers import random_bert  # noqa: E402

__all__ = []

SEED = 23
# (src_idle, sink_stall) out of 256: about 30% idle input cycles and 40% output backpressure.
STALLED = dict(seed=29, src_idle=77, sink_stall=102)


def _run(device, bert, layer, x, mask, programs):
    trace, runner = {}, Runner(device)
    start = time.perf_counter()
    out = run_layer(device, bert, layer, x, mask, programs=programs, runner=runner, trace=trace)
    return out, trace, runner, time.perf_counter() - start


def _check_layer(device, bert, delta, batch, layer, free):
    """Layer ``layer`` of base ``bert`` + ``delta`` on the RTL ``device``, against the software
    device, the fast path and the merged model; its input is the software device's."""
    cfg = bert.cfg
    task = apply_task(bert, delta)
    mask = batch["attention_mask"].bool()
    x = task.embed_input(batch["input_ids"], batch["token_type_ids"])
    for earlier in range(layer):
        x = run_layer(SoftwareDevice(cfg), task, earlier, x, mask)
    programs = layer_programs(task, layer, mask)
    want, want_trace, modelled, _ = _run(SoftwareDevice(cfg), task, layer, x, mask, programs)
    print(f"task layer {layer + 1} on {device!r}, delta rows "
          f"{ {stage: task.depth(layer, stage)[0] - bert.k[stage] for stage in task.k} }")
    got, got_trace, runner, wall = _run(device, task, layer, x, mask, programs)
    fast_trace = {}
    fast = FastModel(task).layer(layer, x, mask, trace=fast_trace)
    merged_trace = {}
    FastModel(merged_program(bert, delta)[0]).layer(layer, x, mask, trace=merged_trace)
    for stage in STAGES:
        key = (layer, stage)
        assert torch.equal(got_trace[key], want_trace[key]), f"{stage}: RTL != software device"
        assert torch.equal(fast_trace[key], want_trace[key]), f"{stage}: fast path != device"
        assert torch.equal(merged_trace[key], want_trace[key]), f"{stage}: != merged model"
    assert torch.equal(got, want) and torch.equal(fast, want)
    print(f"{runner.cycles} cycles (cycle model {modelled.cycles}), "
          f"{runner.stats['data_beats']} data beats, wall {wall:.1f} s")
    assert runner.counted and runner.stats["device_calls"] == len(STAGES)
    if free:
        assert runner.cycles == modelled.cycles
    else:
        assert runner.cycles > modelled.cycles


@pytest.mark.parametrize("stalls", [None, STALLED], ids=["free", "stalled"])
@pytest.mark.parametrize("config", ["8x8", "4x8"])
def test_delta_layer_bit_exact(rtl_device, config, stalls):
    cfg = PRESETS[config]
    bert, batch = random_bert(cfg, seed=SEED)
    delta = random_task_delta(bert, torch.Generator().manual_seed(SEED), fraction=0.1,
                              uneven=True)
    _check_layer(rtl_device(cfg, **(stalls or {})), bert, delta, batch, 1, stalls is None)


def test_minilm_delta_layer_bit_exact(rtl_device):
    """all-MiniLM-L6-v2 (real weights) with a random task changing 1 % of the K-rows, its
    first layer on 8x8, free-running, on two real sentences padded to 16 tokens."""
    tokenizer, model = bert_ref.load()
    cfg = PRESETS["8x8"]
    bert = compile_bert(model, cfg, tokenizer=tokenizer, name="all-MiniLM-L6-v2")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)      # truncated to 16 tokens, on purpose
        batch = bert.encode(sentences.evaluation_sentences(2), max_length=16)
    delta = random_task_delta(bert, torch.Generator().manual_seed(SEED), fraction=0.01)
    _check_layer(rtl_device(cfg), bert, delta, batch, 0, True)
