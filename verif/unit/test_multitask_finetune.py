"""The fine-tuning loop, the probe and the checkpoint key of bertaccel.sw.multitask, in seconds.

A tiny random BERT (2 layers, hidden 32) with all-MiniLM-L6-v2's tokenizer stands in for the
model: the loop learns (the loss falls), is seeded (the same seed gives the same weights, bit
for bit), and leaves what the task never touches exactly as it was (no weight decay).
"""

import dataclasses
import os

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from bertaccel.golden import bert_ref  # noqa: E402
from bertaccel.golden.tasks import TASKS, load_task  # noqa: E402
from bertaccel.sw.multitask import finetune as F  # noqa: E402
from bertaccel.sw.multitask.model import Classifier, accuracy, logits, pooled  # noqa: E402
from bertaccel.sw.multitask.probe import PENALTIES, fit_probe, train_probe  # noqa: E402

RECIPE = F.Recipe(lr=2e-3, epochs=10, batch_size=8, threads=1, seed=5)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def tokenizer():
    return bert_ref.load_tokenizer()


def tiny_classifier(seed=0, num_labels=4):
    import transformers

    torch.manual_seed(seed)
    config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                     intermediate_size=64, max_position_embeddings=128,
                                     attn_implementation="eager")
    bert = transformers.BertModel(config)
    return Classifier(bert, num_labels)


@pytest.fixture(scope="module")
def data():
    texts, labels = load_task(TASKS[1], "train")
    return texts[:24], labels[:24]


def trained(tokenizer, data, recipe=RECIPE):
    model = tiny_classifier()
    losses = F.train(model, tokenizer, *data, recipe)
    return model, losses


def test_loss_falls_and_fits(tokenizer, data):
    model, losses = trained(tokenizer, data)
    assert len(losses) == RECIPE.epochs and losses[-1] < 0.7 * losses[0]
    assert accuracy(model, tokenizer, *data) > 0.6
    assert not model.training


def test_seeded(tokenizer, data):
    a, _ = trained(tokenizer, data)
    b, _ = trained(tokenizer, data)
    c, _ = trained(tokenizer, data, dataclasses.replace(RECIPE, seed=6))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa)


def test_untouched_parameters_stay(tokenizer, data):
    before = tiny_classifier().state_dict()
    model, _ = trained(tokenizer, data)
    after = model.state_dict()
    seen = set()
    for ids in tokenizer(list(data[0]))["input_ids"]:
        seen.update(ids)
    table = "bert.embeddings.word_embeddings.weight"
    unseen = torch.ones(before[table].shape[0], dtype=torch.bool)
    unseen[list(seen)] = False
    assert torch.equal(after[table][unseen], before[table][unseen])
    assert not torch.equal(after[table][~unseen], before[table][~unseen])
    for name in ("bert.pooler.dense.weight", "bert.pooler.dense.bias"):
        assert torch.equal(after[name], before[name])   # mean pooling never uses the pooler


def test_logits_are_in_text_order(tokenizer, data):
    model = tiny_classifier().eval()
    texts = list(data[0][:10])
    batched = logits(model, tokenizer, texts, batch_size=3)
    with torch.no_grad():
        one = torch.cat([model(**bert_ref.tokenize(tokenizer, [t])) for t in texts])
    assert torch.allclose(batched, one, atol=1e-5)
    emb = pooled(model.bert, tokenizer, texts, batch_size=4)
    assert torch.allclose(model.head(emb), batched, atol=1e-5)


def test_probe_fits_separable_data():
    g = torch.Generator().manual_seed(0)
    centres = torch.randn(3, 16, generator=g) * 4
    y = torch.arange(90) % 3
    x = centres[y] + torch.randn(90, 16, generator=g)
    w, b = fit_probe(x, y, 3, 1e-3)
    assert float(((x @ w.t() + b).argmax(1) == y).double().mean()) == 1.0
    probe = train_probe(x[:60], y[:60], x[60:], y[60:], 3)
    assert probe.penalty in PENALTIES and probe.dev_accuracy == 1.0
    assert probe.penalty == PENALTIES[0]                 # ties go to the smallest penalty


def test_checkpoint_key_follows_recipe_and_task():
    base = F.checkpoint_key(TASKS[0], F.Recipe())
    assert base == F.checkpoint_key(TASKS[0], F.Recipe()) and len(base) == 12
    assert base != F.checkpoint_key(TASKS[0], F.Recipe(lr=1e-4))
    assert base != F.checkpoint_key(TASKS[1], F.Recipe())


def test_row_sparse_folder_names_its_own_recipe(tmp_path):
    full = F.checkpoint_folder(TASKS[0], out=tmp_path)
    rows = F.checkpoint_folder(TASKS[0], out=tmp_path, rows=0.08)
    recipe = F.row_recipe(F.Recipe(), TASKS[0])
    assert rows.name == f"{TASKS[0]}-{F.checkpoint_key(TASKS[0], recipe)}-rows0.08"
    assert recipe.lr == F.ROWS_LR[TASKS[0]] != F.Recipe().lr
    assert set(F.ROWS_LR) == set(TASKS)
    # At the full recipe's learning rate the row-sparse model's key is the full model's.
    same = F.checkpoint_folder(TASKS[0], out=tmp_path, rows=0.08, rows_lr=F.Recipe().lr)
    assert same.name == f"{full.name}-rows0.08"


def test_checkpoint_written_whole_or_not_at_all(tmp_path, monkeypatch):
    folder = tmp_path / "t-key"

    def fail(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(F.json, "dumps", fail)          # fails after model.pt is written
    with pytest.raises(KeyboardInterrupt):
        F._save(folder, {"w": torch.zeros(2)}, {"task": "t"})
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    F._save(folder, {"w": torch.zeros(2)}, {"task": "t"})
    assert sorted(p.name for p in folder.iterdir()) == ["model.pt", "result.json"]
    assert [p.name for p in tmp_path.iterdir()] == ["t-key"]


def test_bad_recipe():
    with pytest.raises(ValueError, match="bad recipe"):
        F.Recipe(epochs=0)


def test_cli_rejects_bad_threads(capsys):
    with pytest.raises(SystemExit) as exit_:
        F.main(["--task", TASKS[0], "--threads", "0"])
    assert exit_.value.code == 2
    assert "--threads must be at least 1" in capsys.readouterr().err


def test_input_energy(tokenizer, data):
    from bertaccel.sw.multitask.activations import input_energy

    model = tiny_classifier().eval()
    texts = list(data[0][:6])
    energy = input_energy(model, tokenizer, texts, batch_size=4)
    batch = bert_ref.tokenize(tokenizer, texts)
    valid = batch["attention_mask"].bool()
    # Tables: how often each token, position and type occurs among the valid tokens.
    word = energy["bert.embeddings.word_embeddings.weight"]
    assert word.shape == (model.bert.config.vocab_size,)
    assert float(word.sum()) == pytest.approx(1.0)
    cls = tokenizer.cls_token_id
    assert float(word[cls]) == pytest.approx(len(texts) / int(valid.sum()))
    assert float(energy["bert.embeddings.token_type_embeddings.weight"][0]) == pytest.approx(1)
    # The first query's input is the embedding output: its mean square over valid tokens.
    with torch.no_grad():
        x = model.bert.embeddings(input_ids=batch["input_ids"],
                                  token_type_ids=batch["token_type_ids"])[valid]
    query = energy["bert.encoder.layer.0.attention.self.query.weight"]
    assert torch.allclose(query, x.square().mean(dim=0), rtol=1e-4)
    assert len([k for k in energy if ".encoder." in k]) == 2 * 6   # 6 Linears a layer


def test_masked_training_is_row_sparse(tokenizer, data):
    from bertaccel.sw.multitask import deltas as D

    before = tiny_classifier().state_dict()
    query = "bert.encoder.layer.0.attention.self.query.weight"
    table = "bert.embeddings.word_embeddings.weight"
    keep_q = torch.zeros(32, dtype=torch.bool)
    keep_q[[1, 7]] = True
    ids = sorted({i for t in tokenizer(list(data[0]))["input_ids"] for i in t})[:5]
    keep_t = torch.zeros(before[table].shape[0], dtype=torch.bool)
    keep_t[ids] = True
    model = tiny_classifier()
    F.train(model, tokenizer, *data, RECIPE, masks={query: keep_q, table: keep_t})
    after = model.state_dict()
    for name, value in after.items():
        kind = D.param_kind(name, value.shape)
        delta = value - before[name]
        if name in (query, table):
            rows = D.as_rows(name, delta)
            keep = keep_q if name == query else keep_t
            assert not rows[~keep].any() and bool(rows[keep].any(dim=1).all())
        elif kind in ("matrix", "table", "unused"):
            assert not delta.any(), name                 # frozen: exactly the start
        else:
            assert delta.any(), name                     # vectors and head all train
