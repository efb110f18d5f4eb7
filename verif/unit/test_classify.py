"""``bertaccel classify`` and :class:`bertaccel.sw.bert.classify.Classifier`: a saved task
model of the BERT family (random weights, MiniLM's tokenizer), its encoder on the accelerator
and its head on the host. The FP32 logits are the model's own; the accelerator's are the head
on the instruction-level device's hidden state, bit for bit, on ``ref`` and ``isa``."""

import json

import pytest
import torch

from bertaccel.cli import main
from bertaccel.golden import bert_ref, heads
from bertaccel.sw import SoftwareDevice
from bertaccel.sw.bert import BertError, run_bert
from bertaccel.sw.bert.classify import Classifier
from verif.family_models import family_model

SEED = 23
PAIRS = [("A man is playing a guitar.", "Someone plays an instrument."),
         ("The cat sleeps.", "A dog runs across the busy road in the morning.")]

pytestmark = pytest.mark.usefixtures("one_thread")


def _saved(folder, name, head):
    tokenizer = bert_ref.load_tokenizer()
    model = family_model(name, seed=SEED, head=head, vocab=tokenizer.vocab_size)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model


@pytest.mark.parametrize("name, head", [("bert", "sequence"), ("distilbert", "token")])
def test_classifier_logits(tmp_path, name, head):
    model = _saved(tmp_path, name, head)
    with Classifier(tmp_path, config="4x8", device="isa", cache=False) as classifier:
        bert = classifier.encoder.bert
        batch = bert.encode_pairs(PAIRS) if name == "bert" else bert.encode([p[0] for p in PAIRS])
        got, _ = classifier.logits(batch)
        result = run_bert(SoftwareDevice(bert.cfg), bert, **batch)
        with torch.no_grad():
            want = heads.head(model)(bert.layers[-1].x2.dequantize(
                result.hidden_int8).float().view(*batch["input_ids"].shape, -1))
            kwargs = {} if name == "distilbert" else {"token_type_ids": batch["token_type_ids"]}
            fp32 = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                         **kwargs).logits
    assert torch.equal(got, want)
    valid = batch["attention_mask"].bool() if head == "token" else slice(None)
    assert torch.allclose(classifier.fp32_logits(batch)[valid], fp32[valid], atol=1e-5)


def test_classify_command(tmp_path, capsys):
    model = _saved(tmp_path, "bert", "sequence")
    args = ["classify", "--model", str(tmp_path), "--config", "4x8", "--no-cache", "--json"]
    for first, second in PAIRS:
        args += ["--pair", first, second]
    assert main(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["kind"] == "sequence" and len(report["inputs"]) == len(PAIRS)
    assert report["labels"] == [model.config.id2label[i] for i in range(3)]
    for row in report["inputs"]:
        assert row["label"] == report["labels"][max(range(3), key=row["logits"].__getitem__)]
        assert row["fp32_label"] in report["labels"]
    assert 0 <= report["label_agreement"] <= 1 and report["logit_error"] < 0.1
    assert report["cycles"] > 0


def test_a_text_file_of_pairs(tmp_path, capsys):
    _saved(tmp_path / "model", "bert", "sequence")
    lines = tmp_path / "pairs.tsv"
    lines.write_text("".join(f"{a}\t{b}\n" for a, b in PAIRS) + "\n")
    assert main(["classify", "--model", str(tmp_path / "model"), "--config", "4x8",
                 "--no-cache", "--text-file", str(lines)]) == 0
    out = capsys.readouterr().out
    assert "[1]" in out and "labels" in out and "vs FP32" in out


@pytest.mark.parametrize("extra, message", [
    ([], "nothing to classify"),
    (["--text", "a", "--pair", "b", "c"], "texts or text pairs, not both"),
    (["--text", "a", "--batch-size", "0"], "--batch-size must be at least 1"),
])
def test_bad_input_is_one_line(tmp_path, capsys, extra, message):
    assert main(["classify", "--model", str(tmp_path), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertaccel: error: ") and err.count("\n") == 1 and message in err


def test_a_base_model_is_refused(tmp_path, capsys):
    tokenizer = bert_ref.load_tokenizer()
    family_model("bert", seed=SEED, vocab=tokenizer.vocab_size).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(BertError, match="BertModel, not a \\*ForSequenceClassification"):
        Classifier(tmp_path, config="4x8", cache=False)
    assert main(["classify", "--model", str(tmp_path), "--text", "hello"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "ForTokenClassification" in err
