"""Random-weight models of every BERT family the compiler takes, from their transformers configs,
for the tests (no weights downloaded: each is drawn after ``torch.manual_seed``)."""

import torch

__all__ = ["FAMILY_CONFIGS", "HEADS", "family_model"]

#: The shape every family model shares: head size 10, no multiple of an array side.
_SHAPE = dict(hidden=40, heads=4, intermediate=72, layers=2)


def _common(vocab, positions):
    h = _SHAPE
    return dict(vocab_size=vocab, hidden_size=h["hidden"], num_hidden_layers=h["layers"],
                num_attention_heads=h["heads"], intermediate_size=h["intermediate"],
                max_position_embeddings=positions, pad_token_id=0, num_labels=3)


def _bert(t, vocab, positions):
    return t.BertConfig(**_common(vocab, positions), type_vocab_size=2)


def _roberta(t, vocab, positions):
    return t.RobertaConfig(**_common(vocab, positions + 2))


def _xlm_roberta(t, vocab, positions):
    return t.XLMRobertaConfig(**_common(vocab, positions + 2))


def _electra(t, vocab, positions):
    return t.ElectraConfig(**_common(vocab, positions), embedding_size=24)


def _distilbert(t, vocab, positions):
    h = _SHAPE
    return t.DistilBertConfig(vocab_size=vocab, dim=h["hidden"], n_layers=h["layers"],
                              n_heads=h["heads"], hidden_dim=h["intermediate"],
                              max_position_embeddings=positions, pad_token_id=0, num_labels=3)


def _albert(t, vocab, positions):
    # Three layers over two groups: layers 0 and 1 are group 0's, layer 2 group 1's.
    return t.AlbertConfig(**{**_common(vocab, positions), "num_hidden_layers": 3},
                          embedding_size=24, num_hidden_groups=2)


#: Each family's config by name: ``build(transformers, vocab, positions)``; every model holds
#: at least ``positions`` tokens of text, pads with id 0 and has 3 labels.
FAMILY_CONFIGS = {
    "bert": _bert, "roberta": _roberta, "xlm-roberta": _xlm_roberta, "electra": _electra,
    "distilbert": _distilbert, "albert": _albert,
}

#: The model classes of :func:`family_model`'s ``head``, by the name of their Auto class.
HEADS = {None: "AutoModel", "sequence": "AutoModelForSequenceClassification",
         "token": "AutoModelForTokenClassification"}


def family_model(name, *, seed, head=None, vocab=90, positions=48):
    """The random model of family ``name`` (:data:`FAMILY_CONFIGS`): the base encoder, or with
    ``head`` (``"sequence"``, ``"token"``) a classifier; eval mode, eager attention."""
    import transformers

    config = FAMILY_CONFIGS[name](transformers, vocab, positions)
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    return getattr(transformers, HEADS[head]).from_config(config).eval()
