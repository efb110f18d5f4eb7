"""BERT-family encoders on the RTL (Verilator): every family of verif/family_models.py (RoBERTa,
XLM-R, ELECTRA, DistilBERT, ALBERT, and BERT itself), random weights, every layer of
a padded batch on the 4x8 core, equal bit for bit to the instruction-level software device,
free-running with the cycle model's cycles; ALBERT (factorised embeddings, layers sharing their
group's weights) and DistilBERT (no token types, its own layer names) also with idle input
cycles and output backpressure."""

import pytest
import torch

from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice
from bertaccel.sw.bert import compile_bert, run_bert
from verif.family_models import FAMILY_CONFIGS, family_model
from verif.helpers import token_batch

SEED = 13
STALLED = {"seed": SEED, "src_idle": 2, "sink_stall": 3}


CASES = [(name, None) for name in sorted(FAMILY_CONFIGS)] + \
    [(name, STALLED) for name in ("albert", "distilbert")]


@pytest.mark.parametrize("name, stalls", CASES,
                         ids=[f"{name}-{'stalled' if stalls else 'free'}" for name, stalls in CASES])
def test_family_bit_exact_on_rtl(rtl_device, name, stalls):
    cfg = PRESETS["4x8"]
    gen = torch.Generator().manual_seed(SEED)
    calibration = [token_batch(gen, [21, 17, 9, 3], 90) for _ in range(3)]
    bert = compile_bert(family_model(name, seed=SEED), cfg, calibration=calibration, name=name)
    batch = token_batch(gen, [9, 4], 90)
    want = run_bert(SoftwareDevice(cfg), bert, **batch)
    got = run_bert(rtl_device(cfg, **(stalls or {})), bert, **batch)
    assert torch.equal(got.hidden_int8, want.hidden_int8)
    print(f"{name}: {got.stats['cycles']} cycles on the RTL, {want.stats['cycles']} modelled")
    if stalls is None:
        assert got.stats["cycles"] == want.stats["cycles"]
    else:
        assert got.stats["cycles"] > want.stats["cycles"]
