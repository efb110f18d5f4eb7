"""Task heads of BERT-family models, run on the host from the encoder's last hidden state.

A ``*ForSequenceClassification`` model (a cross-encoder, a sentiment classifier) or a
``*ForTokenClassification`` model (a tagger) is its base encoder, which the accelerator runs
(:func:`bertaccel.golden.families.as_bert`), and a small float head: :func:`head` gives that
head as a function of the last hidden state, with the model's own modules, exactly as the
model's ``forward`` applies them (in eval mode, dropout is the identity):

==============================  ==============================================================
model                           head on the last hidden state ``h``
==============================  ==============================================================
``*ForTokenClassification``     ``classifier(h)``, every token
BERT, ALBERT (sequence)         the pooler (``h[:, 0]``, dense, tanh), then ``classifier``
RoBERTa, XLM-R, ELECTRA         ``classifier(h)``: the model's head takes ``h[:, 0]`` itself
DistilBERT                      ``pre_classifier(h[:, 0])``, ReLU, ``classifier``
==============================  ==============================================================
"""

import torch

from .families import FamilyError, base_model

__all__ = ["head"]


def _pooled(model):
    """BERT's and ALBERT's: the base model's pooler, then the classifier."""
    base = base_model(model)
    if base.config.model_type == "albert":
        def pool(hidden):
            return base.pooler_activation(base.pooler(hidden[:, 0]))
    else:
        pool = base.pooler
    return lambda hidden: model.classifier(model.dropout(pool(hidden)))


def _distilbert(model):
    def run(hidden):
        pooled = torch.relu(model.pre_classifier(hidden[:, 0]))
        return model.classifier(model.dropout(pooled))
    return run


def head(model):
    """The task head of ``model`` as ``head(hidden) -> logits``: ``hidden`` the last hidden
    state ``(B, L, hidden)`` float32; logits ``(B, labels)`` for a sequence classifier,
    ``(B, L, labels)`` for a token classifier.

    Raises
    ------
    FamilyError
        If ``model`` is not a ``*ForSequenceClassification`` or ``*ForTokenClassification``
        model of the BERT family (or, a BERT or ALBERT sequence classifier, has no pooler).
    """
    kind = type(model).__name__
    family = getattr(getattr(model, "config", None), "model_type", None)
    if kind.endswith("ForTokenClassification"):
        return lambda hidden: model.classifier(model.dropout(hidden))
    if kind.endswith("ForSequenceClassification"):
        if family in ("roberta", "xlm-roberta", "electra"):
            return model.classifier
        if family == "distilbert":
            return _distilbert(model)
        if family in ("bert", "albert") and getattr(base_model(model), "pooler", None):
            return _pooled(model)
    raise FamilyError(f"{kind} has no task head that the host runs: it takes a "
                      f"*ForSequenceClassification or *ForTokenClassification model of the BERT "
                      f"family")
