"""Which softmax output format, and how precise an integer softmax, long rows need (MiniLM).

Two measurements on real passages of standard-library docstring text
(:func:`bertaccel.golden.accuracy.stdlib_passages`, packed past the longest length and cut to
it), all-MiniLM-L6-v2 compiled for 8x8::

    python bench/softmax_formats.py [--lengths 128,512] [--passages 10] [--json]

* **formats**: the embedding cosine with FP32 when every layer runs the tensor-level path
  (:class:`bertaccel.sw.bert.fast.FastModel`) but attention is float -- a float softmax of
  the integer scores, its probabilities rounded to a candidate format, times float V, the
  context rounded to int8 -- so each format is measured without any integer op's own error:
  ``float`` (no rounding), ``p<N>`` (``round(N p) / N``: 127 is int8, 255 an unsigned 8-bit
  operand, 4095 the 12-bit format of :func:`bertaccel.golden.intops.softmax`), ``max<N>``
  (``round(N p / p_max)`` with the row's exact ``p_max`` as a per-row scale: a row maximum
  normalised format).
* **precision**: :func:`bertaccel.golden.intops.softmax` against ``4095 * softmax`` in float
  on the scores of every head and layer at the longest length (every 8th query row of two
  passages), in LSB of the 12-bit output, with the op's design parameters varied: the logit's
  fraction bits (``SOFTMAX_FRAC``), the exponentials' guard bits (``EXP2_GUARD``, 0: the
  shift truncates and drops exponentials from 17 octaves down) and the reciprocal mantissa's
  bits (``RECIP_BITS``). The variants patch golden's constants and tables for the run.

Writes ``bench/results/softmax_formats.json``. Offline (``HF_HUB_OFFLINE=1``); about 15 minutes
on the 2-core development machine.
"""

import argparse
import contextlib
import json
import math
import os
import pathlib
import sys
import time
import warnings

os.environ["HF_HUB_OFFLINE"] = "1"

import torch  # noqa: E402
from bertaccel.golden import accuracy, bert_ref, intops  # noqa: E402
from bertaccel.hw.config import preset  # noqa: E402
from bertaccel.sw.bert import compile_bert  # noqa: E402
from bertaccel.sw.bert.fast import FastModel  # noqa: E402
from _record import record  # noqa: E402  (bench/ is on sys.path)

RESULTS = pathlib.Path(__file__).resolve().parent / "results" / "softmax_formats.json"
FORMATS = ("float", "p127", "p255", "max255", "p1023", "p4095", "p32767")
#: (SOFTMAX_FRAC, EXP2_GUARD, RECIP_BITS): the 8-bit op's logit with 12-bit outputs, then each
#: choice of golden's 12-bit softmax taken back in turn, then golden's.
VARIANTS = ((8, 0, 13), (12, 0, 13), (10, 4, 13), (12, 4, 11), (12, 4, 12), (12, 4, 13))


def quantized(p, fmt):
    """Probabilities ``p`` (rows) rounded to ``fmt``."""
    if fmt == "float":
        return p
    if fmt.startswith("max"):
        full = int(fmt[3:])
        top = p.amax(dim=-1, keepdim=True)
        return (p / top * full).round() * top / full
    full = int(fmt[1:])
    return (p * full).round() / full


class FloatAttention(FastModel):
    """The fast path with a float attention whose probabilities are rounded to ``fmt``."""

    fmt = "float"

    def _attention(self, layer, q, k, v, mask):
        quant = self.bert.layers[layer]
        batch, seq = mask.shape
        heads, d = self.bert.spec.heads, self.bert.spec.head_dim
        scores = q.reshape(-1, seq, d).double() @ k.reshape(-1, seq, d).double().transpose(1, 2)
        padded = (~mask).unsqueeze(1).expand(batch, heads, seq).reshape(-1, 1, seq)
        p = torch.softmax((scores * quant.qk_scale).masked_fill(padded, -math.inf), dim=-1)
        ctx = quantized(p, self.fmt) @ (v.reshape(-1, seq, d).double() * quant.s_v) / quant.s_ctx
        return None, ctx.round().clamp(-128, 127).to(torch.int8)


def formats(bert, model, texts, lengths, log):
    """Cosine with FP32 (min, mean) per format and length."""
    fast = FloatAttention(bert)
    out = {fmt: {} for fmt in FORMATS}
    for length in lengths:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")          # every passage is truncated
            batch = bert.encode(texts, max_length=length)
        mask = batch["attention_mask"].bool()
        ref = bert_ref.mean_pool(bert_ref.forward(model, batch["input_ids"],
                                                  batch["attention_mask"],
                                                  batch["token_type_ids"]), mask)
        x = bert.embed_input(batch["input_ids"], batch["token_type_ids"])
        for fmt in FORMATS:
            fast.fmt = fmt
            hidden = bert.layers[-1].x2.dequantize(fast.encoder(x, mask).view(*mask.shape, -1))
            cos = bert_ref.cosine_similarity(bert_ref.mean_pool(hidden.float(), mask), ref)
            out[fmt][length] = {"min": float(cos.min()), "mean": float(cos.mean())}
            log(f"  {fmt:>7} at {length:3d} tokens: cosine min {float(cos.min()):.5f} "
                f"mean {float(cos.mean()):.5f}")
    return out


@contextlib.contextmanager
def variant(frac, guard, recip_bits):
    """golden's softmax with other design parameters, for the ``with`` block."""
    names = ("SOFTMAX_FRAC", "EXP2_GUARD", "EXP2_CUTOFF", "RECIP_BITS", "_EXP2", "_RECIP")
    saved = {name: getattr(intops, name) for name in names}
    exp2 = [round(2 ** intops.EXP2_BITS * 2 ** (-f / 2 ** frac)) for f in range(2 ** frac)]
    recip = [round(intops.PROB_SCALE * 2 ** (recip_bits + intops.RECIP_SHIFT)
                   / (2 ** recip_bits + i + 0.5)) for i in range(2 ** recip_bits)]
    # Without guard bits the shift truncates, as the 8-bit softmax's did: the exponential is
    # floor(EXP2 / 2**q), 0 from 18 octaves down.
    patch = {"SOFTMAX_FRAC": frac, "EXP2_GUARD": guard,
             "EXP2_CUTOFF": intops.EXP2_BITS + guard + 2 if guard else intops.EXP2_BITS + 1,
             "RECIP_BITS": recip_bits, "_EXP2": torch.tensor(exp2, dtype=torch.int64),
             "_RECIP": torch.tensor(recip, dtype=torch.int64)}
    truncate = guard == 0
    exp2_fn = intops._exp2

    def floor_exp2(t, m, valid):
        u = (m << frac) - t
        q = u >> frac
        e = patch["_EXP2"][u & ((1 << frac) - 1)] >> q.clamp(max=62)
        return e.masked_fill_((q >= patch["EXP2_CUTOFF"]) | ~valid, 0)
    try:
        for name, value in patch.items():
            setattr(intops, name, value)
        if truncate:
            intops._exp2 = floor_exp2
        yield
    finally:
        for name, value in saved.items():
            setattr(intops, name, value)
        intops._exp2 = exp2_fn


def precision(model, tokenizer, texts, length, log):
    """golden's softmax and its variants against float on real rows of ``length`` keys."""
    enc = tokenizer(texts[:2], padding=True, truncation=True, max_length=length,
                    return_tensors="pt")
    store = {}
    hooks = [h for i, layer in enumerate(model.encoder.layer) for h in (
        layer.attention.self.query.register_forward_hook(
            lambda m, a, o, i=i: store.__setitem__((i, "q"), o)),
        layer.attention.self.key.register_forward_hook(
            lambda m, a, o, i=i: store.__setitem__((i, "k"), o)))]
    try:
        with torch.no_grad():
            model(**enc)
    finally:
        for hook in hooks:
            hook.remove()
    heads = model.config.num_attention_heads
    rows = []
    for layer in range(len(model.encoder.layer)):
        q, k = store[(layer, "q")], store[(layer, "k")]
        batch, seq, hidden = q.shape
        d = hidden // heads
        q = q.view(batch, seq, heads, d).transpose(1, 2).double()
        k = k.view(batch, seq, heads, d).transpose(1, 2).double()
        s_q, s_k = q.abs().max().item() / 127, k.abs().max().item() / 127
        acc = ((q / s_q).round() @ (k / s_k).round().transpose(2, 3)).to(torch.int64)
        rows.append((acc[:, :, ::8].reshape(-1, seq), s_q * s_k / math.sqrt(d)))
    out = []
    for frac, guard, recip_bits in VARIANTS:
        worst = total = count = 0
        with variant(frac, guard, recip_bits):
            for x, s_x in rows:
                mul, shift = intops.quantize_scale(s_x * math.log2(math.e) * (1 << frac))
                y = intops.softmax(x, mul=mul, shift=shift, cols=4)
                err = (y.double() - torch.softmax(x.double() * s_x, dim=-1)
                       * intops.PROB_SCALE).abs()
                worst, total, count = max(worst, err.max().item()), total + err.sum().item(), \
                    count + err.numel()
        out.append({"softmax_frac": frac, "exp2_guard": guard, "recip_bits": recip_bits,
                    "max_lsb": worst, "mean_lsb": total / count})
        log(f"  logit 2**-{frac}, {guard} guard bits, {recip_bits}-bit mantissa: max "
            f"{worst:.3f} LSB, mean {total / count:.4f} LSB")
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", default="128,512", metavar="L,L,...",
                        help="tokens a passage (default 128,512)")
    parser.add_argument("--passages", type=int, default=10, metavar="N",
                        help="passages (default 10)")
    parser.add_argument("--json", action="store_true", help="print the JSON")
    parser.add_argument("-o", "--output", type=pathlib.Path, default=RESULTS)
    args = parser.parse_args(argv)
    try:
        lengths = sorted({int(x) for x in args.lengths.split(",")})
    except ValueError:
        parser.error(f"--lengths must be integers separated by commas, not {args.lengths!r}")
    if not all(2 <= x <= 512 for x in lengths):
        parser.error(f"--lengths must each be from 2 to 512, not {args.lengths!r}")
    if not 2 <= args.passages <= 40:
        parser.error(f"--passages must be from 2 to 40, not {args.passages}")
    log = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    start = time.perf_counter()
    torch.set_num_threads(2)
    tokenizer, model = bert_ref.load()
    bert = compile_bert(model, preset("8x8"), tokenizer=tokenizer, name="all-MiniLM-L6-v2")
    texts = accuracy.stdlib_passages(args.passages, tokenizer, max_tokens=max(lengths) + 96)
    log("embedding cosine with FP32, float attention with rounded probabilities:")
    report = {"passages": len(texts), "lengths": lengths,
              "formats": formats(bert, model, texts, lengths, log)}
    log(f"integer softmax against float at {max(lengths)} keys (LSB = 1/4095):")
    report["precision"] = precision(model, tokenizer, texts, max(lengths), log)
    report["wall_s"] = time.perf_counter() - start
    record(report, args.output, __file__, argv)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"wrote {args.output} in {report['wall_s']:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
