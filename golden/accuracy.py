"""Accuracy of the integer epilogue ops (:mod:`bertaccel.golden.intops`) against float PyTorch.

Real activations are captured from all-MiniLM-L6-v2 on English sentences taken from the
docstrings of Python standard-library modules, quantised the way the accelerator holds them, run
through the bit-exact integer ops and compared with ``torch.softmax``,
``torch.nn.functional.layer_norm`` and ``torch.nn.functional.gelu``.

Method
------
Capture (forward hooks, ``attn_implementation="eager"``), per layer:

* softmax: Q and K (outputs of ``attention.self.query`` / ``.key``), the additive mask the model
  passes to its attention (0 or the float32 minimum on padded keys) and the model's own
  attention probabilities (``output_attentions=True``); the scores are rebuilt as
  ``Q @ K^T * d**-0.5 + mask``, exactly as ``eager_attention_forward`` does, and checked against
  the model's probabilities.
* LayerNorm (two a layer): the inputs of ``BertSelfOutput`` / ``BertOutput`` (the dense's input
  and the residual) and the LayerNorm's output.
* GELU: the input of ``BertIntermediate`` (the dense's input) and its output.

Integer formats (every scale is symmetric, per tensor, from the maximum magnitude over the
valid tokens of the whole capture, and goes through :func:`~bertaccel.golden.intops.quantize_scale`
where the hardware takes a multiplier and a shift):

* int8 operands: ``s = max|a| / 127``, ``a_q = clamp(round(a / s), -127, 127)``; weights are
  int8 per tensor too (the GELU and LayerNorm multipliers are scalars, so the accumulator has one
  scale). An accumulator is the exact int32 product ``a_q @ w_q^T`` with scale ``s_a * s_w``;
  a bias is int32 in accumulator units, ``round(b / (s_a * s_w))``.
* softmax: ``x = Q_q @ K_q^T`` (int32, scale ``s_q * s_k``), ``mask`` = 0 or ``-2**31`` on
  padded keys, ``mul/2**shift = s_q * s_k * d**-0.5 * log2(e) * 4096``; output 4095 * p (scale
  1/4095, :data:`~bertaccel.golden.intops.PROB_SCALE`).
* LayerNorm: ``x`` = the dense accumulator, ``bias`` its int32 bias, ``r`` = the int8 residual;
  ``v`` has scale ``s_v = max|dense + residual| / 2**14`` (a factor 2 of headroom below the int16
  limit); ``xmul, vshift = quantize_scale(s_acc / s_v)``, ``rmul = round(s_r / s_v * 2**vshift)``;
  ``gamma = round(g / s_out * 2**(gshift - 12))`` with the largest ``gshift`` that keeps it in
  int16, ``beta = round(b / s_out * 256)``, ``eps_n2 = round(eps / s_v**2 * N**2)``.
* GELU: ``x`` = the dense accumulator, ``bias`` its bias; ``gmul/2**gshift = s_acc * 64``,
  ``omul/2**oshift = s_acc / s_out * 256``.
* The int8 output scale ``s_out`` of a LayerNorm or GELU is the largest magnitude of the float
  model's output and of the float op on the quantised inputs, over 127: no reference saturates.

Comparisons, over every valid output (padded tokens and, for softmax, padded keys left out):

* ``int``: the integer op against the float op applied to exactly the values its integer inputs
  represent (the op's own error);
* ``floor``: that float output rounded to the int8 output grid against itself (the best any int8
  op can do);
* ``model``: the integer op against the float model's own output (adds the error of the int8
  operands).

The float references run in float64. Errors are absolute, in output LSBs and in float units
(LSB times the output scale).
"""

import dataclasses
import math

import torch
import torch.nn.functional as F

from . import bert_ref, intops
from .corpus import STDLIB_MODULES, pool_size, stdlib_docstrings, stdlib_sentences

__all__ = [
    "STDLIB_MODULES", "stdlib_sentences", "stdlib_passages", "stdlib_docstrings", "load_model",
    "capture", "Capture",
    "ErrorStats", "softmax_errors", "layernorm_errors", "gelu_errors", "measure", "format_table",
]

#: log2(e): softmax logits go into the hardware's base-2 exponential.
_LOG2E = math.log2(math.e)


def stdlib_passages(n, tokenizer, *, max_tokens=480):
    """``n`` passages of consecutive :func:`stdlib_sentences`, each at most ``max_tokens`` tokens.

    Long rows are where a softmax's rounding adds up (BERT takes up to 512 tokens).

    Raises
    ------
    ValueError
        If ``n`` is below 1 or more than the docstrings fill.
    """
    passages, current = [], []
    for sentence in stdlib_sentences(pool_size()):
        if current and len(tokenizer(" ".join(current + [sentence]))["input_ids"]) > max_tokens:
            passages.append(" ".join(current))
            current = []
            if len(passages) == n:
                return passages
        current.append(sentence)
    raise ValueError(f"n must be from 1 to {len(passages)}, not {n!r}")


def load_model(path=None):
    """``(tokenizer, model)``: all-MiniLM-L6-v2 (or the folder ``path``), from
    :func:`bertaccel.golden.bert_ref.load`."""
    return bert_ref.load(path)


@dataclasses.dataclass
class Capture:
    """Float activations of one padded batch.

    Members
    -------
    valid : (B, L) bool, the tokens that are not padding.
    layers : list of dict, one a layer: ``q``, ``k`` (B, H, L, d); ``mask`` (B, 1, L, L) additive;
        ``probs`` (B, H, L, L); ``scaling``; for ``site`` in ``attn``, ``ffn``: ``{site}_in``
        (the dense's input), ``{site}_res`` (the residual), ``{site}_ln`` (the LayerNorm output);
        ``gelu_in`` (the intermediate dense's input), ``gelu_out``.
    """
    valid: torch.Tensor
    layers: list


def capture(model, tokenizer, sentences, *, batch_size=16, max_length=None):
    """Run ``model`` on ``sentences`` in padded batches and capture the inputs of every op;
    texts longer than ``max_length`` tokens (when given) are cut to it.

    Returns
    -------
    list of Capture
        One a batch. The scores rebuilt from Q, K and the mask are checked against the model's
        attention probabilities.

    Raises
    ------
    ValueError
        If the model does not run eager attention.
    """
    if model.config._attn_implementation != "eager":
        raise ValueError(f"the model must run eager attention, not "
                         f"{model.config._attn_implementation!r}")
    heads = model.config.num_attention_heads
    captures = []
    for lo in range(0, len(sentences), batch_size):
        enc = tokenizer(sentences[lo:lo + batch_size], padding=True, return_tensors="pt",
                        truncation=max_length is not None, max_length=max_length)
        layers = [{} for _ in model.encoder.layer]
        hooks = []

        def keep(store, key, fn):
            def save(module, args, *rest):
                store[key] = fn(args, *rest)
            return save

        for layer, store in zip(model.encoder.layer, layers):
            attn = layer.attention
            hooks += [
                attn.self.query.register_forward_hook(keep(store, "q", lambda a, o: o)),
                attn.self.key.register_forward_hook(keep(store, "k", lambda a, o: o)),
                attn.self.register_forward_pre_hook(
                    keep(store, "mask", lambda a, kw: kw["attention_mask"]), with_kwargs=True),
                attn.output.register_forward_hook(keep(store, "attn", lambda a, o: (*a, o))),
                layer.intermediate.register_forward_hook(keep(store, "gelu", lambda a, o: (*a, o))),
                layer.output.register_forward_hook(keep(store, "ffn", lambda a, o: (*a, o))),
            ]
        try:
            with torch.no_grad():
                out = model(**enc, output_attentions=True)
        finally:
            for hook in hooks:
                hook.remove()
        for store, layer, probs in zip(layers, model.encoder.layer, out.attentions):
            batch, length, _ = store["q"].shape
            for key in ("q", "k"):
                store[key] = store[key].view(batch, length, heads, -1).transpose(1, 2)
            store["scaling"] = layer.attention.self.scaling
            store["probs"] = probs
            for site in ("attn", "ffn"):
                store[f"{site}_in"], store[f"{site}_res"], store[f"{site}_ln"] = store.pop(site)
            store["gelu_in"], store["gelu_out"] = store.pop("gelu")
            # Without padding the model passes no mask (None): nothing is added.
            mask = 0 if store["mask"] is None else store["mask"]
            scores = store["q"] @ store["k"].transpose(2, 3) * store["scaling"] + mask
            if not torch.allclose(torch.softmax(scores, dim=-1), probs, atol=1e-6):
                raise RuntimeError("scores rebuilt from Q, K and the mask do not give the "
                                   "model's attention probabilities")
        captures.append(Capture(valid=enc["attention_mask"].bool(), layers=layers))
    return captures


class ErrorStats:
    """Running max and mean of absolute errors, in output LSBs and in float units."""

    def __init__(self):
        self.count = 0
        self.sum_lsb = self.sum_float = 0.0
        self.max_lsb = self.max_float = 0.0

    def add(self, err_lsb, scale):
        err_lsb = err_lsb.abs().double()
        if err_lsb.numel():
            self.count += err_lsb.numel()
            self.sum_lsb += err_lsb.sum().item()
            self.sum_float += err_lsb.sum().item() * scale
            self.max_lsb = max(self.max_lsb, err_lsb.max().item())
            self.max_float = max(self.max_float, err_lsb.max().item() * scale)

    def as_dict(self):
        mean = (lambda s: s / self.count) if self.count else (lambda s: 0.0)
        return {"max_lsb": self.max_lsb, "mean_lsb": mean(self.sum_lsb),
                "max_float": self.max_float, "mean_float": mean(self.sum_float)}


class _OpStats:
    def __init__(self):
        self.int, self.floor, self.model = ErrorStats(), ErrorStats(), ErrorStats()
        self.exact = self.within_1 = 0

    def add(self, y_int, ref, model, scale, lo, hi):
        """``y_int`` int outputs, ``ref`` and ``model`` float outputs in LSBs."""
        y_int = y_int.double()
        floor = (ref + 0.5).floor().clamp(lo, hi)  # round half up, as the hardware does
        self.int.add(y_int - ref, scale)
        self.floor.add(floor - ref, scale)
        self.model.add(y_int - model, scale)
        self.exact += (y_int == floor).sum().item()
        self.within_1 += ((y_int - floor).abs() <= 1).sum().item()

    def as_dict(self):
        n = max(self.int.count, 1)
        return {"elements": self.int.count, "int": self.int.as_dict(),
                "floor": self.floor.as_dict(), "model": self.model.as_dict(),
                "exact": self.exact / n, "within_1": self.within_1 / n}


def _maxabs(tensors):
    return max(t.abs().max().item() for t in tensors)


def _int8(a, scale):
    return (a / scale).round().clamp(-127, 127)


def _valid_rows(captures, layer, key):
    """The rows of ``key`` at valid tokens, all batches stacked: (T, features)."""
    return torch.cat([c.layers[layer][key][c.valid] for c in captures])


def _dense_acc(a, dense, s_a, s_w):
    """The exact int32 accumulator of int8 ``a`` times int8 weights, and the int32 bias."""
    w_q = _int8(dense.weight.detach().double(), s_w)
    # Exact in float64: every |sum| is below 127 * 127 * 1536 < 2**53.
    acc = _int8(a.double(), s_a) @ w_q.T
    bias = (dense.bias.detach().double() / (s_a * s_w)).round()
    if acc.abs().max() >= 2 ** 31 or bias.abs().max() >= 2 ** 31:
        raise ValueError("an accumulator or bias does not fit in int32")
    return acc.to(torch.int64), bias.to(torch.int64)


def softmax_errors(captures, *, cols=8):
    """Errors of :func:`intops.softmax` over every layer; returns (stats dict, formats list)."""
    stats, formats = _OpStats(), []
    for layer in range(len(captures[0].layers)):
        lay = [c.layers[layer] for c in captures]
        s_q = _maxabs(l["q"].transpose(1, 2)[c.valid] for l, c in zip(lay, captures)) / 127
        s_k = _maxabs(l["k"].transpose(1, 2)[c.valid] for l, c in zip(lay, captures)) / 127
        scaling = lay[0]["scaling"]
        s_logit = s_q * s_k * scaling            # float logit per accumulator unit
        mul, shift = intops.quantize_scale(s_logit * _LOG2E * (1 << intops.SOFTMAX_FRAC),
                                           name="softmax scale")
        formats.append({"layer": layer, "s_q": s_q, "s_k": s_k, "mul": mul, "shift": shift})
        for l, c in zip(lay, captures):
            acc = (_int8(l["q"].double(), s_q) @ _int8(l["k"].double(), s_k).transpose(2, 3))
            acc = acc.to(torch.int64)            # exact: |sum| < 127 * 127 * 32
            for b in range(acc.shape[0]):
                keys = c.valid[b]
                n_valid = int(keys.sum())
                heads, length = acc.shape[1], acc.shape[2]
                x = acc[b, :, :n_valid, :].reshape(heads * n_valid, length)
                mask = torch.where(keys, 0, -2 ** 31)
                y = intops.softmax(x, mask=mask, mul=mul, shift=shift, cols=cols)
                if y[:, ~keys].any():
                    raise AssertionError("softmax gave a padded key a probability")
                logits = (x.double() * s_logit).masked_fill(~keys, -math.inf)
                full = intops.PROB_SCALE
                ref = torch.softmax(logits, dim=-1) * full
                model = l["probs"][b, :, :n_valid, :].reshape(heads * n_valid, length) * full
                stats.add(y[:, keys], ref[:, keys], model[:, keys].double(), 1 / full, 0, full)
    return stats.as_dict(), formats


def layernorm_errors(captures, model):
    """Errors of :func:`intops.layernorm` at both LayerNorms of every layer."""
    stats, formats = _OpStats(), []
    for layer, block in enumerate(model.encoder.layer):
        for site, mod in (("attn", block.attention.output), ("ffn", block.output)):
            a = _valid_rows(captures, layer, f"{site}_in")
            res = _valid_rows(captures, layer, f"{site}_res")
            out = _valid_rows(captures, layer, f"{site}_ln").double()
            n = out.shape[1]
            s_a, s_w = _maxabs([a]) / 127, _maxabs([mod.dense.weight.detach()]) / 127
            s_r = _maxabs([res]) / 127
            s_acc = s_a * s_w
            with torch.no_grad():
                s_v = _maxabs([mod.dense(a) + res]) / 2 ** 14
            acc, bias = _dense_acc(a, mod.dense, s_a, s_w)
            r = _int8(res.double(), s_r).to(torch.int64)
            ln = mod.LayerNorm
            x_float = (acc + bias).double() * s_acc + r.double() * s_r
            ref = F.layer_norm(x_float, (n,), ln.weight.detach().double(),
                               ln.bias.detach().double(), ln.eps)
            s_out = _maxabs([out, ref]) / 127
            xmul, vshift = intops.quantize_scale(s_acc / s_v, name="LayerNorm x scale")
            rmul = round(s_r / s_v * 2 ** vshift)
            if not 0 < rmul < 2 ** 32:
                raise ValueError(f"LayerNorm rmul {rmul} does not fit in 32 bits")
            g = ln.weight.detach().double() / s_out   # output LSBs per normalised unit
            gshift = 8
            while gshift < intops.SHIFT_MAX \
                    and (g * 2.0 ** (gshift + 1 - 12)).round().abs().max() < 2 ** 15:
                gshift += 1
            gamma = (g * 2.0 ** (gshift - 12)).round().to(torch.int64)
            beta = (ln.bias.detach().double() / s_out * 256).round()
            beta_clamped = int((beta.abs() > 2 ** 15 - 1).sum())
            beta = beta.clamp(-2 ** 15, 2 ** 15 - 1).to(torch.int64)
            eps_n2 = round(ln.eps / s_v ** 2 * n * n)
            y = intops.layernorm(acc, bias=bias, residual=r, xmul=xmul, rmul=rmul, vshift=vshift,
                                 gamma=gamma, beta=beta, gshift=gshift, eps_n2=eps_n2)
            stats.add(y, ref / s_out, out / s_out, s_out, -128, 127)
            formats.append({"layer": layer, "site": site, "s_a": s_a, "s_w": s_w, "s_r": s_r,
                            "s_v": s_v, "s_out": s_out, "xmul": xmul, "rmul": rmul,
                            "vshift": vshift, "gshift": gshift, "eps_n2": eps_n2,
                            "beta_clamped": beta_clamped})
    return stats.as_dict(), formats


def gelu_errors(captures, model):
    """Errors of :func:`intops.gelu` at every layer's intermediate dense."""
    stats, formats = _OpStats(), []
    for layer, block in enumerate(model.encoder.layer):
        dense = block.intermediate.dense
        a = _valid_rows(captures, layer, "gelu_in")
        out = _valid_rows(captures, layer, "gelu_out").double()
        s_a, s_w = _maxabs([a]) / 127, _maxabs([dense.weight.detach()]) / 127
        s_acc = s_a * s_w
        acc, bias = _dense_acc(a, dense, s_a, s_w)
        ref = F.gelu((acc + bias).double() * s_acc)
        s_out = _maxabs([out, ref]) / 127
        gmul, gshift = intops.quantize_scale(s_acc * 64, name="GELU index scale")
        omul, oshift = intops.quantize_scale(s_acc / s_out * 256, name="GELU output scale")
        y = intops.gelu(acc, bias=bias, gmul=gmul, gshift=gshift, omul=omul, oshift=oshift)
        stats.add(y, ref / s_out, out / s_out, s_out, -128, 127)
        formats.append({"layer": layer, "s_a": s_a, "s_w": s_w, "s_out": s_out, "gmul": gmul,
                        "gshift": gshift, "omul": omul, "oshift": oshift})
    return stats.as_dict(), formats


def measure(texts, *, model=None, tokenizer=None, cols=8, softmax_cols=(8, 16, 32),
            batch_size=16, max_length=None):
    """Capture, quantise and compare on ``texts`` (cut to ``max_length`` tokens when given); a
    JSON-ready dict of the results.

    ``ops`` holds one entry an op (``softmax`` at ``cols``, ``layernorm``, ``gelu``), each with
    ``elements`` and the ``int``, ``floor`` and ``model`` :class:`ErrorStats`, and the fractions
    of outputs equal to the floor (``exact``) and within one LSB of it (``within_1``);
    ``softmax_by_cols`` the softmax's ``int`` errors at each of ``softmax_cols``; ``formats``
    every scale, multiplier and shift used.
    """
    if model is None or tokenizer is None:
        tokenizer, model = load_model()
    captures = capture(model, tokenizer, texts, batch_size=batch_size, max_length=max_length)
    ops, formats, by_cols = {}, {}, {}
    for c in sorted(set(softmax_cols) | {cols}):
        by_cols[c], fmt = softmax_errors(captures, cols=c)
        if c == cols:
            ops["softmax"], formats["softmax"] = dict(by_cols[c], cols=c), fmt
    ops["layernorm"], formats["layernorm"] = layernorm_errors(captures, model)
    ops["gelu"], formats["gelu"] = gelu_errors(captures, model)
    tokens = sum(int(c.valid.sum()) for c in captures)
    return {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "texts": len(texts),
        "tokens": tokens,
        "longest": max(int(c.valid.sum(dim=1).max()) for c in captures),
        "batch_size": batch_size,
        "padded_lengths": [c.valid.shape[1] for c in captures],
        "padding_fraction": 1 - tokens / sum(c.valid.numel() for c in captures),
        "ops": ops,
        "softmax_by_cols": {str(c): {"int": s["int"], "exact": s["exact"]}
                            for c, s in by_cols.items()},
        "formats": formats,
    }


def format_table(sets):
    """The Markdown table of several :func:`measure` results, ``{label: results}``."""
    rows = [
        ("| inputs | op | outputs | grid floor max / mean (LSB) | integer op max / mean (LSB) "
         "| integer op max / mean (float) | = floor | vs float model max / mean (LSB) |"),
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for label, results in sets.items():
        names = {"softmax": f"softmax (cols={results['ops']['softmax']['cols']})",
                 "layernorm": "LayerNorm", "gelu": "GELU"}
        for op, name in names.items():
            s = results["ops"][op]
            rows.append(
                f"| {label} | {name} | {s['elements']:,} "
                f"| {s['floor']['max_lsb']:.3f} / {s['floor']['mean_lsb']:.3f} "
                f"| {s['int']['max_lsb']:.3f} / {s['int']['mean_lsb']:.3f} "
                f"| {s['int']['max_float']:.2e} / {s['int']['mean_float']:.2e} "
                f"| {100 * s['exact']:.2f} % "
                f"| {s['model']['max_lsb']:.2f} / {s['model']['mean_lsb']:.3f} |")
    return "\n".join(rows)
