"""Random-weight models of every BERT family the compiler takes, from their transformers configs,
for the tests (no weights downloaded: each is drawn after ``torch.manual_seed``)."""

import torch

__all__ = ["FAMILY_MODELS", "family_model"]

#: The shape every family model shares: head size 10, no multiple of an array side.
_SHAPE = dict(hidden=40, heads=4, intermediate=72, layers=2)


def _common(vocab, positions):
    h = _SHAPE
    return dict(vocab_size=vocab, hidden_size=h["hidden"], num_hidden_layers=h["layers"],
                num_attention_heads=h["heads"], intermediate_size=h["intermediate"],
                max_position_embeddings=positions)


def _roberta(t, vocab, positions):
    return t.RobertaModel(t.RobertaConfig(**_common(vocab, positions + 2), pad_token_id=0),
                          add_pooling_layer=False)


def _xlm_roberta(t, vocab, positions):
    return t.XLMRobertaModel(t.XLMRobertaConfig(**_common(vocab, positions + 2), pad_token_id=0),
                             add_pooling_layer=False)


def _electra(t, vocab, positions):
    return t.ElectraModel(t.ElectraConfig(**_common(vocab, positions), embedding_size=24))


def _distilbert(t, vocab, positions):
    h = _SHAPE
    return t.DistilBertModel(t.DistilBertConfig(
        vocab_size=vocab, dim=h["hidden"], n_layers=h["layers"], n_heads=h["heads"],
        hidden_dim=h["intermediate"], max_position_embeddings=positions, pad_token_id=0))


def _albert(t, vocab, positions):
    # Three layers over two groups: layers 0 and 1 are group 0's, layer 2 group 1's.
    return t.AlbertModel(t.AlbertConfig(**{**_common(vocab, positions), "num_hidden_layers": 3},
                                        embedding_size=24, num_hidden_groups=2,
                                        pad_token_id=0), add_pooling_layer=False)


def _bert_classifier(t, vocab, positions):
    return t.BertForSequenceClassification(t.BertConfig(**_common(vocab, positions),
                                                        type_vocab_size=2, num_labels=3))


#: Each family's random model by name: ``build(transformers, vocab, positions)``; every one
#: holds at least ``positions`` tokens of text.
FAMILY_MODELS = {
    "roberta": _roberta, "xlm-roberta": _xlm_roberta, "electra": _electra,
    "distilbert": _distilbert, "albert": _albert, "bert-classifier": _bert_classifier,
}


def family_model(name, *, seed, vocab=90, positions=48):
    """The random model of family ``name`` (:data:`FAMILY_MODELS`), eval mode, eager
    attention."""
    import transformers

    torch.manual_seed(seed)
    model = FAMILY_MODELS[name](transformers, vocab, positions).eval()
    model.config._attn_implementation = "eager"
    return model
