"""How much each K-row of a task model's GEMMs is used: the mean square of its input channel.

A delta's K-row ``k`` adds ``x_k * delta[k, :]`` to every output row, so its effect on the
output grows with ``E[x_k^2]`` as well as with the row's own size (the reasoning of AWQ's
activation-aware scaling). For an encoder Linear the input is the layer's activation; for an
embedding table it is one-hot, and ``E[x_k^2]`` is how often token (or position, or type)
``k`` occurs. Only valid (non-padding) tokens count. :func:`bertaccel.sw.multitask.deltas.rows`
weights its row scores with these.
"""

import torch

from .model import batches

__all__ = ["input_energy"]

_TABLES = {"word_embeddings": "input_ids", "position_embeddings": "position_ids",
           "token_type_embeddings": "token_type_ids"}


def _table_counts(batch, counts, prefix, sizes):
    valid = batch["attention_mask"].bool()
    types = batch.get("token_type_ids", torch.zeros_like(valid, dtype=torch.long))
    ids = {"input_ids": batch["input_ids"],
           "position_ids": torch.arange(valid.shape[1]).expand_as(valid),
           "token_type_ids": types}
    for table, key in _TABLES.items():
        name = f"{prefix}embeddings.{table}.weight"
        counts[name] = counts.get(name, 0) + torch.bincount(ids[key][valid],
                                                            minlength=sizes[name]).double()


def input_energy(classifier, tokenizer, texts, *, batch_size=64, max_length=128):
    """``{parameter name: (K,) float32}``, the mean square input of each K-row over the valid
    tokens of ``texts``: every encoder Linear weight's input channel, and every embedding
    table's row (its frequency). ``classifier`` is a :class:`~.model.Classifier`."""
    sums, hooks, state = {}, [], {}
    for name, module in classifier.named_modules():
        if isinstance(module, torch.nn.Linear) and ".encoder." in f".{name}.":
            def hook(_mod, inputs, _out, key=f"{name}.weight"):
                x = inputs[0].detach().double()[state["valid"]]
                sums[key] = sums.get(key, 0) + x.square().sum(dim=0)
            hooks.append(module.register_forward_hook(hook))
    sizes = {f"bert.embeddings.{t}.weight": getattr(classifier.bert.embeddings, t).num_embeddings
             for t in _TABLES}
    tokens = 0
    try:
        with torch.no_grad():
            for _, batch in batches(tokenizer, texts, batch_size=batch_size,
                                    max_length=max_length):
                state["valid"] = batch["attention_mask"].bool()
                classifier(**batch)
                _table_counts(batch, sums, "bert.", sizes)
                tokens += int(state["valid"].sum())
    finally:
        for h in hooks:
            h.remove()
    return {k: (v / max(tokens, 1)).float() for k, v in sums.items()}
