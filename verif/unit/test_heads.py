"""Task heads on the host (golden/heads.py) over the accelerator's encoder: a
``*ForSequenceClassification`` and a ``*ForTokenClassification`` model of every BERT family,
random weights. The head on the model's own last hidden state gives the model's logits; on the
int8 encoder's (the instruction-level device, 4x8), logits close to FP32's; a cross-encoder's
sentence pairs carry their token types through the device."""

import pytest
import torch

from bertaccel.golden import bert_ref, families, heads
from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice
from bertaccel.sw.bert import BertError, compile_bert, run_bert
from verif.family_models import FAMILY_CONFIGS, family_model
from verif.helpers import token_batch

SEED = 17
CASES = [(name, head) for name in sorted(FAMILY_CONFIGS) for head in ("sequence", "token")]

pytestmark = pytest.mark.usefixtures("one_thread")


def _batch(seed, lengths=(13, 7, 4)):
    return token_batch(torch.Generator().manual_seed(seed), list(lengths), 90)


def _model_logits(model, name, batch):
    kwargs = {} if name == "distilbert" else {"token_type_ids": batch["token_type_ids"]}
    with torch.no_grad():
        return model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                     **kwargs).logits


@pytest.mark.parametrize("name, head", CASES)
def test_head_gives_the_models_logits(name, head):
    model = family_model(name, seed=SEED, head=head)
    batch = _batch(SEED)
    hidden = bert_ref.forward(families.as_bert(model), **batch)
    with torch.no_grad():
        got = heads.head(model)(hidden)
    want = _model_logits(model, name, batch)
    valid = batch["attention_mask"].bool() if head == "token" else slice(None)
    assert got.shape == want.shape
    assert torch.allclose(got[valid], want[valid], atol=1e-5)


@pytest.mark.parametrize("name, head", CASES)
def test_head_over_the_int8_encoder(name, head):
    model = family_model(name, seed=SEED, head=head)
    gen = torch.Generator().manual_seed(SEED)
    calibration = [token_batch(gen, [21, 17, 9, 3], 90) for _ in range(3)]
    bert = compile_bert(model, PRESETS["4x8"], calibration=calibration, name=name)
    batch = _batch(SEED + 1)
    result = run_bert(SoftwareDevice(bert.cfg), bert, **batch)
    with torch.no_grad():
        got = heads.head(model)(result.last_hidden_state)
    want = _model_logits(model, name, batch)
    valid = batch["attention_mask"].bool() if head == "token" else slice(None)
    error = float((got[valid] - want[valid]).abs().max() / want[valid].abs().max())
    print(f"{name} {head}: logits within {error:.4f} of FP32's largest")
    assert error < 0.05


def test_other_models_have_no_head():
    with pytest.raises(families.FamilyError, match="BertModel has no task head"):
        heads.head(family_model("bert", seed=SEED))


def test_cross_encoder_pairs():
    """Sentence pairs of a BERT cross-encoder: token types 1 on the second segment, through
    the device to the head."""
    tokenizer = bert_ref.load_tokenizer()
    model = family_model("bert", seed=SEED, head="sequence", vocab=tokenizer.vocab_size)
    bert = compile_bert(model, PRESETS["4x8"], tokenizer=tokenizer, name="cross-encoder")
    pairs = [("A man is playing a guitar.", "Someone plays an instrument."),
             ("The cat sleeps.", "A dog runs across the busy road in the morning.")]
    batch = bert.encode_pairs(pairs)
    want = tokenizer([p[0] for p in pairs], [p[1] for p in pairs], padding=True,
                     return_tensors="pt")
    assert torch.equal(batch["token_type_ids"], want["token_type_ids"])
    assert int(batch["token_type_ids"].sum()) > 0
    result = run_bert(SoftwareDevice(bert.cfg), bert, **batch)
    logits = heads.head(model)(result.last_hidden_state)
    assert logits.shape == (2, 3)
    with pytest.raises(BertError, match="text 1 is empty"):
        bert.encode_pairs([("fine", "fine"), ("also fine", " ")])
    with pytest.raises(BertError, match="a pair is two texts"):
        bert.encode_pairs([("one",)])
