"""BERT-family encoders, each as the ``transformers.BertModel`` that computes the same function.

The compiler reads a ``BertModel``: embeddings made on the host, then encoder layers of BERT's
shape (self-attention; the output projection, the residual and a LayerNorm; a GELU FFN, the
residual and a LayerNorm). RoBERTa, XLM-R, ELECTRA, DistilBERT and ALBERT have layers of that
shape under other names, and embeddings of their own: :func:`as_bert` builds a ``BertModel``
whose layers carry the model's weights (shared, not copied) and whose embeddings are the
model's own (:class:`HostEmbeddings`), so everything downstream sees one architecture.

======================  ==========================================================================
model_type              what differs from BERT
======================  ==========================================================================
``roberta``,            positions count from ``pad_token_id + 1`` (the embeddings do it), so
``xlm-roberta``         ``max_position_embeddings - pad_token_id - 1`` positions hold text
``electra``             ``embeddings_project`` maps ``embedding_size`` to ``hidden_size`` (host)
``distilbert``          no token types; ``q_lin`` ... ``output_layer_norm``; eps 1e-12
``albert``              factorised embeddings (``embedding_hidden_mapping_in``, host); the layer
                        groups' weights shared by the layers that use them
======================  ==========================================================================

Anything else is refused by :func:`bert_config` with :class:`FamilyError`, which names what the
accelerator lacks for it.
"""

import torch

__all__ = ["FAMILIES", "FamilyError", "HostEmbeddings", "as_bert", "base_model", "bert_config"]

#: The model types :func:`as_bert` takes.
FAMILIES = ("bert", "roberta", "xlm-roberta", "electra", "distilbert", "albert")

#: What the accelerator lacks for some well-known encoders that it refuses.
_MISSING = {
    "deberta": "relative-position attention (a content-to-position term in Q K^T)",
    "deberta-v2": "relative-position attention (a content-to-position term in Q K^T)",
    "funnel": "pooling between blocks (the sequence shrinks)",
    "mpnet": "relative-position attention bias",
    "longformer": "sliding-window attention",
    "bigbird": "block-sparse attention",
    "xlnet": "two-stream relative attention",
}

_DISTILBERT_EPS = 1e-12       # DistilBERT's LayerNorms: eps fixed in its code, not its config


class FamilyError(ValueError):
    """A model that is not a BERT-family encoder the accelerator runs; the message says why."""


def _refuse(config):
    kind = getattr(config, "model_type", None)
    arch = ", ".join(getattr(config, "architectures", None) or []) or "unknown"
    why = _MISSING.get(kind)
    lacks = f": the accelerator has no {why}" if why else ""
    raise FamilyError(f"not a BERT model: model_type is {kind!r} (architectures: {arch})"
                      f"{lacks}; the compiler takes the BERT family: {', '.join(FAMILIES)}")


def bert_config(config):
    """The ``transformers.BertConfig`` of the BERT that :func:`as_bert` makes of a model with
    ``config``: its shape, activation and LayerNorm epsilon, and the positions that hold text.

    Raises
    ------
    FamilyError
        If ``config``'s ``model_type`` is not one of :data:`FAMILIES`.
    """
    import transformers

    kind = getattr(config, "model_type", None)
    if kind == "bert":
        return config
    if kind not in FAMILIES:
        _refuse(config)
    if kind == "distilbert":
        return transformers.BertConfig(
            vocab_size=config.vocab_size, hidden_size=config.dim,
            num_hidden_layers=config.n_layers, num_attention_heads=config.n_heads,
            intermediate_size=config.hidden_dim, hidden_act=config.activation,
            max_position_embeddings=config.max_position_embeddings, type_vocab_size=1,
            layer_norm_eps=_DISTILBERT_EPS, pad_token_id=config.pad_token_id)
    positions = config.max_position_embeddings
    if kind in ("roberta", "xlm-roberta"):
        positions -= config.pad_token_id + 1
    extra = {name: getattr(config, name) for name in
             ("position_embedding_type", "is_decoder", "add_cross_attention")
             if hasattr(config, name)}
    layers = config.num_hidden_layers
    if kind == "albert":          # each layer runs every inner layer of its group
        layers *= config.inner_group_num
    return transformers.BertConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size,
        num_hidden_layers=layers,
        num_attention_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size, hidden_act=config.hidden_act,
        max_position_embeddings=positions, type_vocab_size=config.type_vocab_size,
        layer_norm_eps=config.layer_norm_eps, pad_token_id=config.pad_token_id, **extra)


class HostEmbeddings(torch.nn.Module):
    """A family's embeddings as BERT's are called: ``forward(input_ids, token_type_ids)`` gives
    the first layer's input ``(B, L, hidden)``.

    Members
    -------
    LayerNorm : torch.nn.LayerNorm
        Present when the output is that LayerNorm's (no projection after it): the compiler
        reads its ``bias`` to size the embeddings' scales.
    """

    def __init__(self, embeddings, *, project=None, token_types=True):
        super().__init__()
        self.inner = embeddings
        self.project = project
        self.token_types = token_types
        if project is None:
            self.LayerNorm = embeddings.LayerNorm

    def forward(self, input_ids=None, token_type_ids=None, position_ids=None, inputs_embeds=None,
                **_):
        kwargs = {"input_ids": input_ids, "position_ids": position_ids,
                  "inputs_embeds": inputs_embeds}
        if self.token_types:
            kwargs["token_type_ids"] = token_type_ids
        out = self.inner(**kwargs)
        return out if self.project is None else self.project(out)


#: Module names of a DistilBERT layer -> BERT's.
_DISTILBERT_NAMES = {
    "attention.q_lin": "attention.self.query", "attention.k_lin": "attention.self.key",
    "attention.v_lin": "attention.self.value", "attention.out_lin": "attention.output.dense",
    "sa_layer_norm": "attention.output.LayerNorm", "ffn.lin1": "intermediate.dense",
    "ffn.lin2": "output.dense", "output_layer_norm": "output.LayerNorm",
}
#: Module names of an ALBERT layer -> BERT's.
_ALBERT_NAMES = {
    "attention.query": "attention.self.query", "attention.key": "attention.self.key",
    "attention.value": "attention.self.value", "attention.dense": "attention.output.dense",
    "attention.LayerNorm": "attention.output.LayerNorm", "ffn": "intermediate.dense",
    "ffn_output": "output.dense", "full_layer_layer_norm": "output.LayerNorm",
}


def _renamed(layer, names):
    """``layer``'s parameters by BERT's names: ``names`` maps its modules' names to BERT's
    (``None``: RoBERTa's and ELECTRA's layers, which use BERT's already)."""
    if names is None:
        return dict(layer.named_parameters())
    out = {}
    for name, param in layer.named_parameters():
        module, leaf = name.rsplit(".", 1)
        out[f"{names[module]}.{leaf}"] = param
    return out


def _albert_layers(model):
    """ALBERT's layers in the order its encoder runs them: layer ``i`` is the inner layers of
    group ``int(i / (layers / groups))`` (transformers' own expression), the same modules each
    time their group comes round."""
    config, groups = model.config, model.encoder.albert_layer_groups
    layers = []
    for number in range(config.num_hidden_layers):
        group = groups[int(number / (config.num_hidden_layers / config.num_hidden_groups))]
        layers.extend(group.albert_layers)
    return layers


def _parts(model):
    """``(embeddings, layers, names)`` of a family's base model (``names``: see
    :func:`_renamed`)."""
    kind = model.config.model_type
    if kind in ("roberta", "xlm-roberta"):
        return HostEmbeddings(model.embeddings), list(model.encoder.layer), None
    if kind == "electra":
        project = getattr(model, "embeddings_project", None)
        return (HostEmbeddings(model.embeddings, project=project), list(model.encoder.layer),
                None)
    if kind == "distilbert":
        return (HostEmbeddings(model.embeddings, token_types=False),
                list(model.transformer.layer), _DISTILBERT_NAMES)
    return (HostEmbeddings(model.embeddings, project=model.encoder.embedding_hidden_mapping_in),
            _albert_layers(model), _ALBERT_NAMES)


def base_model(model):
    """The encoder inside ``model``: itself, or a ``*For*`` model's base (``model.bert``,
    ``model.roberta``, ...)."""
    base = getattr(model, "base_model", model)
    return model if base is None else base


def as_bert(model):
    """The ``BertModel`` (eval mode, eager attention, no pooler) that computes ``model``'s last
    hidden state: ``model`` itself if it is one, otherwise a BERT built around the family's
    embeddings and layer weights (the same tensors: training one trains the other).

    Raises
    ------
    FamilyError
        If ``model`` is not a transformers model of one of :data:`FAMILIES`.
    """
    import transformers

    model = base_model(model)
    if isinstance(model, transformers.BertModel):
        return model
    config = getattr(model, "config", None)
    if config is None:
        raise FamilyError(f"not a transformers model: {type(model).__name__}")
    bert_cfg = bert_config(config)
    bert_cfg._attn_implementation = "eager"
    bert_cfg._name_or_path = getattr(config, "_name_or_path", "")
    embeddings, layers, names = _parts(model)
    with torch.device("meta"):      # no weights drawn: every one is the model's
        bert = transformers.BertModel(bert_cfg, add_pooling_layer=False)
    bert.embeddings = embeddings
    for target, layer in zip(bert.encoder.layer, layers, strict=True):
        for name, param in _renamed(layer, names).items():
            module, leaf = name.rsplit(".", 1)
            setattr(target.get_submodule(module), leaf, param)
    return bert.eval()
