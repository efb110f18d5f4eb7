"""BERT-family encoders (golden/families.py): RoBERTa, XLM-R, ELECTRA, DistilBERT, ALBERT and
BERT itself, random weights from their transformers configs. Seen as BERT, each computes
the model's own last hidden state; compiled, its fast path equals the instruction-level device
bit for bit, with the cycles of the cycle model; the int8 model's sentence embeddings are close
to FP32's; a model folder of each loads; other encoders are refused in one line."""

import pytest
import torch
import transformers

from bertaccel.golden import bert_ref, families
from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice
from bertaccel.sw.bert import BertError, compile_bert, load_bert, run_bert
from bertaccel.sw.bert.fast import FastModel
from bertaccel.sw.bert.timing import StageTimer
from verif.family_models import FAMILY_CONFIGS, family_model
from verif.helpers import token_batch

SEED = 11

pytestmark = pytest.mark.usefixtures("one_thread")


def _batch(seed, lengths=(13, 7, 2)):
    return token_batch(torch.Generator().manual_seed(seed), list(lengths), 90)


def _compiled(name, config):
    model = family_model(name, seed=SEED)
    gen = torch.Generator().manual_seed(SEED)
    calibration = [token_batch(gen, [21, 17, 9, 3], 90) for _ in range(3)]
    return model, compile_bert(model, PRESETS[config], calibration=calibration, name=name)


@pytest.mark.parametrize("name", sorted(FAMILY_CONFIGS))
def test_seen_as_bert_computes_the_model(name):
    model = family_model(name, seed=SEED)
    bert = families.as_bert(model)
    assert isinstance(bert, transformers.BertModel)
    batch = _batch(SEED)
    mask = batch["attention_mask"]
    with torch.no_grad():
        base = families.base_model(model)
        kwargs = {} if name == "distilbert" else {"token_type_ids": batch["token_type_ids"]}
        want = base(input_ids=batch["input_ids"], attention_mask=mask, **kwargs)
        got = bert(**batch)
    valid = mask.bool()
    assert torch.allclose(got.last_hidden_state[valid], want.last_hidden_state[valid],
                          atol=1e-5)
    # The weights are the model's own tensors, not copies.
    shared = {p.data_ptr() for p in model.parameters()}
    assert all(p.data_ptr() in shared for p in bert.parameters())


def test_albert_layers_share_their_group():
    bert = families.as_bert(family_model("albert", seed=SEED))
    layers = bert.encoder.layer
    query = [layer.attention.self.query.weight for layer in layers]
    assert query[0] is query[1] and query[1] is not query[2]


@pytest.mark.parametrize("name", sorted(FAMILY_CONFIGS))
def test_compiled_bit_exact_and_close_to_fp32(name):
    model, bert = _compiled(name, "4x8")
    batch = _batch(SEED + 1)
    device = run_bert(SoftwareDevice(bert.cfg), bert, **batch)
    x = bert.embed_input(batch["input_ids"], batch["token_type_ids"])
    fast = FastModel(bert).encoder(x, batch["attention_mask"].bool())
    assert torch.equal(fast.view_as(device.hidden_int8), device.hidden_int8)
    size, seq = batch["input_ids"].shape
    assert StageTimer(bert).model(size, seq)[0] == device.stats["cycles"]
    mask = batch["attention_mask"]
    ref = bert_ref.mean_pool(bert_ref.forward(families.as_bert(model), **batch), mask)
    cosine = bert_ref.cosine_similarity(device.embedding, ref)
    print(f"{name}: embedding cosine with FP32 {float(cosine.min()):.5f}")
    assert float(cosine.min()) > 0.99


@pytest.mark.parametrize("name", ["roberta", "distilbert", "albert"])
def test_a_model_folder_loads(tmp_path, name):
    """A saved model of the family, with MiniLM's tokenizer, loads as BERT and compiles."""
    tokenizer = bert_ref.load_tokenizer()
    family_model(name, seed=SEED, vocab=tokenizer.vocab_size).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    tok, model, _ = load_bert(tmp_path)
    assert isinstance(model, transformers.BertModel)
    bert = compile_bert(model, PRESETS["4x8"], tokenizer=tok, name=name)
    batch = bert.encode(["A family's encoder on the accelerator.", "Two sentences."])
    assert batch["input_ids"].shape[0] == 2


def test_other_encoders_are_refused(tmp_path, capsys):
    from bertaccel.cli import main

    transformers.DebertaV2Config(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                 intermediate_size=64).save_pretrained(tmp_path)
    with pytest.raises(BertError, match="'deberta-v2' .* no relative-position attention"):
        load_bert(tmp_path)
    assert main(["run", "--model", str(tmp_path), "--text", "hello"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertaccel: error: ") and err.count("\n") == 1 and "deberta-v2" in err
