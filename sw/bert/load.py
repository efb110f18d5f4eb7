"""Loading a BERT model for the compiler: what it accepts, and the shape it reads from the config."""

import dataclasses

from ...golden import bert_ref, families
from ...golden.intops import MAX_ROW

__all__ = ["MINILM", "BertError", "BertSpec", "bert_model", "check_model", "load_bert",
           "check_tokens"]

#: The name that stands for sentence-transformers/all-MiniLM-L6-v2 (the local copy).
MINILM = bert_ref.MINILM
#: Supported activations: the hardware's GELU is the erf form; the tanh forms differ from it by
#: under 1e-3 (well under one int8 step).
_GELUS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_python")


class BertError(ValueError):
    """A model, an input or a config that the BERT compiler cannot take; the message says why."""


@dataclasses.dataclass(frozen=True)
class BertSpec:
    """The shape of a BERT model, read from its config.

    Members
    -------
    layers, hidden, heads, intermediate, max_positions, type_vocab_size, vocab_size : int
    eps : float
        LayerNorm epsilon.
    hidden_act : str
    """

    layers: int
    hidden: int
    heads: int
    intermediate: int
    max_positions: int
    type_vocab_size: int
    vocab_size: int
    eps: float
    hidden_act: str

    @property
    def head_dim(self):
        return self.hidden // self.heads

    @classmethod
    def from_config(cls, config):
        """The spec of a ``transformers`` config; :class:`BertError` if it is not a BERT
        encoder the accelerator runs."""
        try:
            config = families.bert_config(config)
        except families.FamilyError as error:
            raise BertError(str(error)) from None
        act = getattr(config, "hidden_act", None)
        if act not in _GELUS:
            raise BertError(f"the model's activation is {act!r}; the accelerator's FFN "
                            f"epilogue is GELU ({', '.join(_GELUS)})")
        position = getattr(config, "position_embedding_type", "absolute") or "absolute"
        if position != "absolute":
            raise BertError(f"position_embedding_type {position!r} is not supported (absolute "
                            f"only: relative positions add a term to QK^T)")
        if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
            raise BertError("a BERT decoder or cross-attention model is not supported (the "
                            "encoder only)")
        hidden, heads = config.hidden_size, config.num_attention_heads
        if hidden % heads:
            raise BertError(f"hidden_size {hidden} is not a multiple of num_attention_heads "
                            f"{heads}")
        if hidden > MAX_ROW:
            raise BertError(f"hidden_size {hidden} is longer than the LayerNorm rows the "
                            f"hardware takes ({MAX_ROW} columns)")
        return cls(layers=config.num_hidden_layers, hidden=hidden, heads=heads,
                   intermediate=config.intermediate_size,
                   max_positions=config.max_position_embeddings,
                   type_vocab_size=config.type_vocab_size, vocab_size=config.vocab_size,
                   eps=float(config.layer_norm_eps), hidden_act=act)


def bert_model(model):
    """The ``BertModel`` that computes ``model``'s last hidden state: ``model`` itself, a
    ``*For*`` model's base, or a BERT-family encoder seen as BERT
    (:func:`bertaccel.golden.families.as_bert`)."""
    import transformers

    if not isinstance(model, transformers.PreTrainedModel):
        raise BertError(f"not a BERT model: {type(model).__name__}; the compiler takes a "
                        f"transformers model of the BERT family ({', '.join(families.FAMILIES)}), "
                        f"a local model folder, or {MINILM!r}")
    BertSpec.from_config(families.base_model(model).config)    # refuses what it cannot run
    return families.as_bert(model)


def check_model(spec):
    """:class:`BertSpec` of the model ``spec`` (:data:`MINILM` or a local folder), read from its
    config alone, before anything else loads.

    Raises
    ------
    BertError
        If the folder does not exist, its config cannot be read, or it is not a BERT model the
        accelerator runs.
    """
    try:
        return BertSpec.from_config(bert_ref.load_config(spec))
    except bert_ref.ModelError as error:
        raise BertError(str(error)) from None


def load_bert(spec):
    """``(tokenizer, model, max_seq_length)`` of ``spec``: :data:`MINILM` or a local model
    folder, loaded by :func:`bertaccel.golden.bert_ref.load` (float32, eval mode, eager
    attention, offline) after :meth:`BertSpec.from_config` accepted its config; the model's
    own text limit from :func:`bertaccel.golden.bert_ref.max_seq_length` (or ``None``).

    Raises
    ------
    BertError
        If the folder does not exist, holds no ``config.json``, is not a BERT model the
        accelerator runs, or has a bad ``sentence_bert_config.json``.
    """
    try:
        return (*bert_ref.load(spec, check=BertSpec.from_config),
                bert_ref.max_seq_length(spec))
    except bert_ref.ModelError as error:
        raise BertError(str(error)) from None


def check_tokens(tokenizer, texts, *, names=None):
    """Token ids of ``texts`` (no truncation), refusing a text that holds nothing but special
    tokens: white space and control characters only, which the tokenizer drops. Such a text
    would embed only ``[CLS] [SEP]``, so it is refused like an empty one. ``names`` says how the
    message calls each text (``"text <number>"`` by default)."""
    texts = list(texts)
    if not texts:
        return []
    ids = tokenizer(texts, padding=False, truncation=False, verbose=False)["input_ids"]
    special = set(tokenizer.all_special_ids)
    for number, row in enumerate(ids):
        if all(token in special for token in row):
            name = names[number] if names is not None else f"text {number}"
            raise BertError(f"{name} has no token but the special ones: it holds only "
                            f"characters the tokenizer drops (control characters)")
    return ids
