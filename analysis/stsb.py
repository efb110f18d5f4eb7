"""all-MiniLM-L6-v2 on STS-B: Spearman x 100 of the pairs' cosine similarities against the
gold scores, for FP32 PyTorch and for the accelerator's bit-exact path on each config.

The sentences of a split are embedded once each (FP32 with ``transformers``, the accelerator
with :class:`~bertaccel.sw.bert.encoder.Encoder` on the ``ref`` device, the tensor-level path
bit-exact with the instruction-level device), and each embedding is compared with FP32's: the
report has the distribution of those cosines and of the pairs' similarities. Nothing is
calibrated or tuned on STS-B: the compiled model is calibrated on its own sample text.
"""

import time

import numpy as np
import torch

from ..golden import bert_ref, kernels, stsb

__all__ = ["evaluate", "format_report", "spearman"]


def _ranks(values):
    """Ranks from 1 of ``values``, ties taking their mean rank."""
    values = np.asarray(values, dtype=np.float64)
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    ranks[order] = np.arange(1, len(values) + 1)
    _, inverse, counts = np.unique(values, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse, weights=ranks)
    return sums[inverse] / counts[inverse]


def spearman(x, y):
    """Spearman's rank correlation of ``x`` and ``y`` (Pearson's of their tie-averaged ranks)."""
    rx, ry = _ranks(x), _ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return float((rx * ry).sum() / np.sqrt((rx * rx).sum() * (ry * ry).sum()))


def _summary(values):
    values = np.asarray(values, dtype=np.float64)
    return {"min": float(values.min()), "p01": float(np.quantile(values, 0.01)),
            "median": float(np.median(values)), "mean": float(values.mean()),
            "max": float(values.max())}


def _pair_cosines(emb, pairs, index):
    emb = torch.as_tensor(emb, dtype=torch.float64)
    first = emb[[index[p.first] for p in pairs]]
    second = emb[[index[p.second] for p in pairs]]
    return torch.nn.functional.cosine_similarity(first, second, dim=1).numpy()


def _split(split, pairs, configs, fp32_model, tokenizer, *, batch_size, cache, cache_dir,
           log):
    from ..sw.bert.encoder import Encoder

    sentences = list(dict.fromkeys(s for p in pairs for s in (p.first, p.second)))
    index = {s: i for i, s in enumerate(sentences)}
    gold = [p.score for p in pairs]
    begin = time.perf_counter()
    fp32 = bert_ref.embed(fp32_model, tokenizer, sentences, batch_size=batch_size)
    fp32_cos = _pair_cosines(fp32, pairs, index)
    row = {"pairs": len(pairs), "sentences": 2 * len(pairs), "distinct_sentences": len(sentences),
           "fp32": {"spearman_x100": 100 * spearman(fp32_cos, gold),
                    "pair_cosine": _summary(fp32_cos),
                    "wall_s": time.perf_counter() - begin},
           "configs": {}}
    for cfg in configs:
        if log:
            log(f"STS-B {split}: {len(sentences)} sentences on {cfg} (ref, bit-exact)")
        begin = time.perf_counter()
        encoder = Encoder("minilm", config=cfg, cache=cache, cache_dir=cache_dir)
        emb = encoder.encode(sentences, batch_size=batch_size)
        cos = _pair_cosines(emb, pairs, index)
        with_fp32 = torch.nn.functional.cosine_similarity(
            torch.from_numpy(np.asarray(emb)).double(), fp32.double(), dim=1).numpy()
        rho = 100 * spearman(cos, gold)
        row["configs"][cfg] = {
            "spearman_x100": rho, "minus_fp32": rho - row["fp32"]["spearman_x100"],
            "embedding_cosine_fp32": _summary(with_fp32), "pair_cosine": _summary(cos),
            "cycles": emb.stats["cycles"], "wall_s": time.perf_counter() - begin}
    return row


def evaluate(configs, splits=stsb.SPLITS, *, batch_size=32, cache=True, cache_dir=None,
             log=None):
    """STS-B on FP32 and on each config of ``configs`` (preset names), for each split.

    Returns
    -------
    dict
        ``{"model", "machine", "splits": {split: {"pairs", "sentences", "fp32", "configs":
        {config: {"spearman_x100", "minus_fp32", "embedding_cosine_fp32", "pair_cosine",
        "cycles", "wall_s"}}}}}``.

    Raises
    ------
    StsbError
        If the data is not installed.
    """
    pairs = {split: stsb.load(split) for split in splits}   # before any model loads
    tokenizer, model = bert_ref.load()
    report = {"model": "all-MiniLM-L6-v2", "machine": kernels.describe(), "splits": {}}
    for split in splits:
        report["splits"][split] = _split(split, pairs[split], configs, model, tokenizer,
                                         batch_size=batch_size, cache=cache,
                                         cache_dir=cache_dir, log=log)
    return report


def format_report(report):
    """The report as a table: Spearman x 100 per split and config, the embedding cosines."""
    machine = report["machine"]
    lines = [f"{report['model']} on STS-B; {machine['cpu']} ({machine['isa']}), GEMM kernel "
             f"{machine['gemm_kernel']}",
             f"{'split':6s} {'model':10s} {'Spearman':>9s} {'- FP32':>7s} "
             f"{'min cos(emb, FP32)':>19s} {'mean':>7s}"]
    for split, row in report["splits"].items():
        lines.append(f"{split:6s} {'FP32':10s} {row['fp32']['spearman_x100']:9.2f}")
        for cfg, res in row["configs"].items():
            cos = res["embedding_cosine_fp32"]
            lines.append(f"{split:6s} {cfg:10s} {res['spearman_x100']:9.2f} "
                         f"{res['minus_fp32']:+7.2f} {cos['min']:19.5f} {cos['mean']:7.5f}")
    return "\n".join(lines)
