"""A BERT sentence classifier: the mean-pooled sentence embedding and one linear layer.

The head reads the attention-masked mean of the last hidden state
(:func:`bertaccel.golden.bert_ref.mean_pool`), the very vector all-MiniLM-L6-v2 was trained to
produce and the one the accelerator's text path returns, so a task model on the accelerator is
its encoder run there and a ``(hidden, labels)`` matrix on the host. The [CLS] token of this
model is not trained as a sentence summary (its pooler is never used), so a head on it would
have to teach the encoder a new read-out; on the mean the base model's linear probe is already
a good start (the fine-tuning starts from it, see :mod:`.finetune`).
"""

import torch

from ...golden import bert_ref

__all__ = ["Classifier", "batches", "logits", "accuracy", "pooled"]


class Classifier(torch.nn.Module):
    """A ``transformers.BertModel`` and a linear head on its mean-pooled last hidden state.

    Parameters
    ----------
    bert : transformers.BertModel
    num_labels : int

    Members
    -------
    bert : transformers.BertModel
    head : torch.nn.Linear
        ``hidden -> num_labels``.
    """

    def __init__(self, bert, num_labels):
        super().__init__()
        self.bert = bert
        self.head = torch.nn.Linear(bert.config.hidden_size, num_labels)

    def pool(self, input_ids, attention_mask, token_type_ids=None):
        """The mean-pooled sentence embeddings ``(batch, hidden)``."""
        out = self.bert(input_ids=input_ids, attention_mask=attention_mask,
                        token_type_ids=token_type_ids)
        return bert_ref.mean_pool(out.last_hidden_state, attention_mask)

    def forward(self, input_ids, attention_mask, token_type_ids=None):
        """The logits ``(batch, num_labels)``."""
        return self.head(self.pool(input_ids, attention_mask, token_type_ids))


def batches(tokenizer, texts, *, batch_size, max_length):
    """``(indices, batch)`` over ``texts`` in batches of similar length (sorted by token count,
    so padding is small), each padded to its longest text."""
    lengths = [len(ids) for ids in tokenizer(list(texts), truncation=True,
                                             max_length=max_length)["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: (lengths[i], i))
    for lo in range(0, len(order), batch_size):
        index = order[lo:lo + batch_size]
        yield index, bert_ref.tokenize(tokenizer, [texts[i] for i in index],
                                       max_length=max_length)


def _apply(fn, tokenizer, texts, *, batch_size, max_length):
    out = None
    with torch.no_grad():
        for index, batch in batches(tokenizer, texts, batch_size=batch_size,
                                    max_length=max_length):
            values = fn(**batch)
            if out is None:
                out = values.new_empty((len(texts), values.shape[1]))
            out[torch.tensor(index)] = values
    return out


def logits(model, tokenizer, texts, *, batch_size=64, max_length=128):
    """The logits ``(len(texts), num_labels)`` of ``model`` (a :class:`Classifier`, put in
    eval mode), float32, in length-sorted batches."""
    model.eval()
    return _apply(model, tokenizer, texts, batch_size=batch_size, max_length=max_length)


def pooled(bert, tokenizer, texts, *, batch_size=64, max_length=128):
    """The mean-pooled embeddings ``(len(texts), hidden)`` of a ``BertModel``."""
    bert.eval()

    def pool(input_ids, attention_mask, token_type_ids=None):
        out = bert(input_ids=input_ids, attention_mask=attention_mask,
                   token_type_ids=token_type_ids)
        return bert_ref.mean_pool(out.last_hidden_state, attention_mask)

    return _apply(pool, tokenizer, texts, batch_size=batch_size, max_length=max_length)


def accuracy(model, tokenizer, texts, labels, **kwargs):
    """The fraction of ``texts`` whose arg-max logit is their label."""
    predicted = logits(model, tokenizer, texts, **kwargs).argmax(dim=1)
    return float((predicted == torch.as_tensor(labels)).double().mean())
