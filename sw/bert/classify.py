"""A task model end to end: the encoder on the accelerator, the classifier head on the host.

A ``*ForSequenceClassification`` model (a cross-encoder over sentence pairs, a sentiment
classifier) or a ``*ForTokenClassification`` model (a tagger) of the BERT family is its base
encoder, compiled and run like any other (:class:`~bertaccel.sw.bert.encoder.Encoder`: ``ref``,
``isa`` or ``rtl``), and a small float head (:func:`bertaccel.golden.heads.head`) that runs on
the host from the dequantised int8 last hidden state::

    from bertaccel.sw.bert.classify import Classifier

    model = Classifier("path/to/cross-encoder", config="8x8")
    out = model.classify(pairs=[("A man plays a guitar.", "Someone plays music.")])
    out["inputs"][0]["label"], out["inputs"][0]["logits"], out["label_agreement"]

The FP32 model's logits and labels come alongside (``compare_fp32``): the same head on the float
encoder's hidden state, which is the model's own ``forward``.
"""

import torch

from ...golden import bert_ref, heads
from .encoder import Encoder, RunStats, check_batch_size
from .load import BertError

__all__ = ["Classifier"]


class Classifier:
    """A task model compiled for an accelerator config.

    Parameters
    ----------
    model : path
        A local folder of a ``*ForSequenceClassification`` or ``*ForTokenClassification`` model
        of the BERT family.
    config, device, cache, cache_dir, build_root
        As :class:`~bertaccel.sw.bert.encoder.Encoder`'s.

    Raises
    ------
    BertError
        A folder that holds no such model, or whose encoder the accelerator cannot run.
    """

    def __init__(self, model, *, config="8x8", device="ref", cache=True, cache_dir=None,
                 build_root="build/sim"):
        try:
            _, self.task_model = bert_ref.load_task(model)
        except bert_ref.ModelError as error:
            raise BertError(str(error)) from None
        self.head = heads.head(self.task_model)
        self.kind = ("token" if type(self.task_model).__name__.endswith("ForTokenClassification")
                     else "sequence")
        self.encoder = Encoder(model, config=config, device=device, cache=cache,
                               cache_dir=cache_dir, build_root=build_root)
        self.labels = self.task_model.config.id2label

    def close(self):
        self.encoder.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False

    def logits(self, batch):
        """``(logits, stats)`` of one tokenised batch on the accelerator: ``(B, labels)`` for a
        sequence classifier, ``(B, L, labels)`` for a token classifier, float32."""
        _, hidden_int8, stats = self.encoder.run_batch(batch)
        bert = self.encoder.bert
        hidden = bert.layers[-1].x2.dequantize(hidden_int8).float()
        with torch.no_grad():
            return self.head(hidden.view(*batch["input_ids"].shape, -1)), stats

    def fp32_logits(self, batch):
        """The FP32 model's logits of ``batch``: the head on the float encoder's hidden state."""
        hidden = bert_ref.forward(self.encoder.float_model, batch["input_ids"],
                                  batch["attention_mask"], batch["token_type_ids"])
        with torch.no_grad():
            return self.head(hidden)

    def classify(self, texts=None, pairs=None, *, batch_size=32, compare_fp32=True):
        """Classify ``texts`` (a list of str) or ``pairs`` (a list of ``(first, second)``), in
        input order, ``batch_size`` at a time; a report (JSON-able dict): ``inputs`` (each
        input's ``label`` and ``logits``, with ``fp32_label``, ``fp32_logits`` when
        ``compare_fp32``; a token classifier's per valid token, with its ``tokens``), the run's
        figures (:class:`~bertaccel.sw.bert.encoder.RunStats`), and with ``compare_fp32``
        ``label_agreement`` (the share of labels equal to FP32's) and ``logit_error`` (the
        largest logit difference over FP32's largest logit magnitude)."""
        if (texts is None) == (pairs is None):
            raise BertError("give texts or pairs, one of the two")
        check_batch_size(batch_size)
        items = list(texts if texts is not None else pairs)
        if not items:
            raise BertError("no text given")
        run, rows, errors = RunStats(self.encoder), [], []
        bert = self.encoder.bert
        for lo in range(0, len(items), batch_size):
            chunk = items[lo:lo + batch_size]
            batch = bert.encode(chunk) if texts is not None else bert.encode_pairs(chunk)
            got, stats = self.logits(batch)
            run.count(batch, stats)
            want = self.fp32_logits(batch) if compare_fp32 else None
            rows.extend(self._rows(batch, got, want))
            if want is not None:
                errors.append(_error(got, want, batch))
        report = {"kind": self.kind, "labels": [self.labels[i] for i in sorted(self.labels)],
                  "inputs": rows, **run.finish()}
        if compare_fp32:
            same = [a == b for row in rows
                    for a, b in zip(_as_list(row["label"]), _as_list(row["fp32_label"]))]
            report["label_agreement"] = sum(same) / len(same)
            report["logit_error"] = max(errors)
        return report

    def _rows(self, batch, got, want):
        """One report row an input of ``batch``."""
        tokenizer = self.encoder.bert.tokenizer
        rows = []
        for number, valid in enumerate(batch["attention_mask"].bool()):
            if self.kind == "token":
                ids = batch["input_ids"][number][valid].tolist()
                row = {"tokens": tokenizer.convert_ids_to_tokens(ids),
                       **self._labelled("", got[number][valid])}
                if want is not None:
                    row.update(self._labelled("fp32_", want[number][valid]))
            else:
                row = self._labelled("", got[number])
                if want is not None:
                    row.update(self._labelled("fp32_", want[number]))
            rows.append(row)
        return rows

    def _labelled(self, prefix, logits):
        """``{prefix + "label": ..., prefix + "logits": ...}`` of one input's (or one token
        row's) logits; a token classifier's label is a list, one a token."""
        best = logits.argmax(-1)
        label = ([self.labels[int(i)] for i in best] if best.dim()
                 else self.labels[int(best)])
        return {prefix + "label": label, prefix + "logits": logits.tolist()}


def _error(got, want, batch):
    """The largest logit difference over FP32's largest logit magnitude, valid tokens only."""
    if got.dim() == 3:
        valid = batch["attention_mask"].bool()
        got, want = got[valid], want[valid]
    return float((got - want).abs().max() / want.abs().max().clamp_min(1e-12))


def _as_list(label):
    """A sequence classifier's label as a list of one, a token classifier's as it is."""
    return label if isinstance(label, list) else [label]
