"""all-MiniLM-L6-v2 encoder layers on the RTL (Verilator, 8x8), bit-exact with the software device.

Real weights, calibrated as :func:`bertaccel.sw.bert.compile_bert` does; a batch of two real
sentences of different lengths padded to 16 tokens (the longer one truncated, with the warning).
Layer 1 runs on a free-running simulator (its cycles must equal the cycle model's); layer 6, on the input the software device computes for it, runs with idle
cycles on the input streams and backpressure on the output stream (seed printed). Every stage's
int8 output must equal the software device's. The 8x8 simulator build is shared with the GEMM
tests (about a minute when it is not built yet); each layer then takes about 20 s.
"""

import os
import time

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
from bertaccel.golden import bert_ref, sentences  # noqa: E402
from bertaccel.hw.config import PRESETS  # noqa: E402
from bertaccel.sw import SoftwareDevice  # noqa: E402
from bertaccel.sw.bert import STAGES, Runner, compile_bert, layer_programs, run_layer  # noqa: E402

__all__ = []

SEQ = 16
# (src_idle, sink_stall) out of 256: about 30% idle input cycles and 40% output backpressure.
STALLED = dict(seed=11, src_idle=77, sink_stall=102)


@pytest.fixture(scope="module")
def minilm_8x8():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    tokenizer, model = bert_ref.load()
    cfg = PRESETS["8x8"]
    bert = compile_bert(model, cfg, tokenizer=tokenizer, name="all-MiniLM-L6-v2")
    texts = sentences.evaluation_sentences()
    short = next(t for t in texts if len(tokenizer(t)["input_ids"]) <= SEQ - 3)
    long = next(t for t in texts if len(tokenizer(t)["input_ids"]) > SEQ + 4)
    with pytest.warns(UserWarning, match="truncated to 16 tokens"):
        batch = bert.encode([long, short], max_length=SEQ)
    mask = batch["attention_mask"].bool()
    assert mask.shape == (2, SEQ) and mask[0].all() and not mask[1].all()
    yield cfg, bert, batch, mask
    torch.set_num_threads(threads)


def _run(device, bert, layer, x, mask, programs):
    trace = {}
    runner = Runner(device)
    start = time.perf_counter()
    out = run_layer(device, bert, layer, x, mask, programs=programs, runner=runner, trace=trace)
    return out, trace, runner, time.perf_counter() - start


@pytest.mark.parametrize("layer, stalls", [(0, None), (5, STALLED)], ids=["layer1-free",
                                                                          "layer6-stalled"])
def test_minilm_layer_bit_exact(rtl_device, minilm_8x8, layer, stalls):
    cfg, bert, batch, mask = minilm_8x8
    x = bert.embed_input(batch["input_ids"], batch["token_type_ids"])
    software = SoftwareDevice(cfg)
    for earlier in range(layer):
        x = run_layer(software, bert, earlier, x, mask)
    programs = layer_programs(bert, layer, mask)
    device = rtl_device(cfg, **(stalls or {}))
    reference = SoftwareDevice(cfg)   # its cycles are the cycle model's, one run a program
    want, want_trace, modelled, _ = _run(reference, bert, layer, x, mask, programs)
    print(f"layer {layer + 1} on {device!r}")
    got, got_trace, runner, wall = _run(device, bert, layer, x, mask, programs)
    for stage in STAGES:
        assert torch.equal(got_trace[(layer, stage)], want_trace[(layer, stage)]), \
            f"stage {stage} of layer {layer + 1}: RTL != software device"
    assert torch.equal(got, want)
    stats = runner.stats
    ideal = stats["macs"] / cfg.macs_per_cycle
    print(f"layer {layer + 1}: {runner.cycles} cycles (cycle model {modelled.cycles}, "
          f"ideal {ideal:.0f}, estimate "
          f"{stats['est_cycles']}), {stats['instructions']} instructions, "
          f"{stats['data_beats']} data beats, {stats['device_calls']} device calls, "
          f"wall {wall:.1f} s")
    assert runner.counted and stats["device_calls"] == len(STAGES)
    assert runner.cycles >= ideal
    if stalls is None:
        assert runner.cycles == modelled.cycles
        assert runner.cycles <= 1.5 * stats["est_cycles"]
