"""Post-training int8 quantisation of a BERT model for the accelerator: calibration and scales.

Every tensor the accelerator holds is int8 with a symmetric scale (real = scale x integer, zero
point 0); weights use ``[-127, 127]``, activations ``[-128, 127]`` (the epilogues saturate).
docs/bert.md has the reasoning and the measurements; in short:

* **Calibration.** Forward hooks on the float model record every activation the accelerator
  makes, over the valid (non-padding) tokens of sample text. A range is the largest ``|x|``
  (``method="max"``) or a percentile of ``|x|`` (``method="percentile"``).
* **Q, K, V, the context** have one scale per tensor; the probabilities are the softmax's
  12-bit ``4095 p`` (scale 1/4095), which enter P V as two int8 digit planes.
* **Outlier channels.** BERT's LayerNorm outputs and GELU outputs have a few channels whose
  range is 5-15x that of the rest (all-MiniLM-L6-v2: channel 99 of the hidden state reaches 28
  where most stay below 3). One scale per tensor would leave the other channels a few steps. So
  these tensors (:class:`ActQuant`) have a *base* scale for most channels and their own scale for
  the ``outliers`` largest channels: a LayerNorm makes that with per-column gamma and beta
  (``gamma_j * base / scale_j``); GELU's outlier columns are a second, small GEMM with their
  own output scale (one coarse scale for all of them). The embeddings, made on the host, get the
  same two-level scales.
* **Weights.** Q, K, V have a scale per output channel (their REQUANT takes a multiplier and
  shift per column). The output projection and the FFN feed LayerNorm and GELU, whose input
  scale is one number, so they have one scale per tensor; the weights of every BERT layer also
  have a few large elements (all-MiniLM-L6-v2's first FFN2: 7.9 where the rest stay below 1.3),
  so the scale is set by the ``budget + 1``-th largest ``|w|``, not the largest.
* **Channel splitting (exact).** A weight that does not fit int8 at its scale, and a weight row
  that meets an outlier channel of its input (``w * scale_k / base``), is an integer ``q`` larger
  than 127: its row of B becomes rows that add up to it, and the input column is repeated once
  for each in A (a gather on the host). The GEMM's K grows by a few rows; the sum is the same
  integer. A row up to ``2 * 127`` is split into two halves; a larger one into *digits*: a low
  row ``q mod 64`` (centred, from -32 to 31) and a high row ``(q - low) / 64``, itself split in
  equal parts when beyond 127, whose products the accelerator shifts left by 6 before adding
  them (the MATMUL ``shift`` of the high K tiles, :mod:`bertaccel.sw.tiler`'s high rows): a row
  of outlier weights 17 times the range (all-MiniLM-L6-v2's FFN2) takes 2 rows, not 17. The
  high rows are K tiles of their own, so a row of two halves is split in halves only while the
  low rows' last K tile has room, and in digits (one high row) after that: the split rows then
  take the fewest K tiles, with the same products. A LayerNorm residual whose outlier channels
  have their own scale is corrected the same way: the residual port adds ``r * base``, and rows
  of B holding ``(scale_k - base) / acc_unit`` (on output column ``k`` only) add the rest of
  ``r_k * scale_k`` through the GEMM.
* Biases stay real and become int32 accumulator units in the epilogue. LayerNorm's int16
  pre-normalisation sum is sized by the calibrated bound of ``|dense + bias + residual|`` with a
  factor 2 of headroom.
"""

import math
from dataclasses import dataclass, field

import numpy as np
import torch

from ...golden.intops import PROB_SCALE
from ...hw.isa import MATMUL_SHIFT
from ..epilogue import Gelu, LayerNorm, Requant
from ..tiler import k_tiles

__all__ = ["CALIBRATION_METHODS", "SITES", "Calibration", "ActQuant", "SplitB", "QuantLayer",
           "calibrate", "act_quant", "tensor_range", "weight_ints", "correction_ints",
           "split_rows", "quantize_layer", "weight_scales", "fit_weight", "OUTLIERS", "BUDGET",
           "LN_HEADROOM", "COARSEN"]

#: How a calibrated range is taken from the recorded ``|x|``.
CALIBRATION_METHODS = ("max", "percentile")

#: The activation sites recorded per layer: the int8 tensors the accelerator makes, and the two
#: LayerNorm inputs (``sum1``, ``sum2``) whose bounds size the int16 sums.
SITES = ("q", "k", "v", "ctx", "sum1", "x1", "h", "sum2", "x2")

#: Channels of a LayerNorm or GELU output that get their own scale, by default.
OUTLIERS = 8
#: Elements of a per-tensor weight allowed above the scale's range (then split), by default.
BUDGET = 16
#: Headroom on the calibrated bound of a LayerNorm input.
LN_HEADROOM = 2.0
#: How much coarser than the budget's the per-tensor weight scale of each stage may grow to
#: save a K tile (:func:`fit_weight`). Measured on all-MiniLM-L6-v2 (docs/numerics.md): W1's
#: rows meet the LayerNorm's outlier channels, and a scale up to 12 % coarser takes its split
#: rows into one K tile of 16 with the 64-sentence minimum cosine unchanged or better; the
#: output projection and W2 saved a tile only at a cost in accuracy, so theirs stay.
COARSEN = {"wo": 1.0, "w1": 1.3, "w2": 1.0}


@dataclass
class Calibration:
    """What the calibration recorded: per site, the ``(tokens, channels)`` float32 values over the
    valid tokens (``values``), and facts about the run."""

    values: dict
    tokens: int
    sentences: int

    def site(self, layer, name):
        """The values of ``name`` in ``layer`` (``layer`` -1, ``"x2"``: the embeddings)."""
        return self.values["embeddings" if layer < 0 else (layer, name)]


def calibrate(model, batches):
    """Record the activations of ``model`` (a float ``transformers.BertModel``) on ``batches``.

    Parameters
    ----------
    model : transformers.BertModel
    batches : iterable of dict
        Tokenised batches: ``input_ids``, ``attention_mask`` and optionally ``token_type_ids``.

    Returns
    -------
    Calibration
    """
    seen = {"embeddings": []}
    for layer in range(len(model.encoder.layer)):
        for site in SITES:
            seen[(layer, site)] = []
    valid = {}
    hooks = []

    def record(key, value):
        seen[key].append(value.detach().float()[valid["mask"]])

    def out_hook(key):
        return lambda module, args, out: record(key, out[0] if isinstance(out, tuple) else out)

    def in_hook(key):
        return lambda module, args: record(key, args[0])

    hooks.append(model.embeddings.register_forward_hook(out_hook("embeddings")))
    for number, layer in enumerate(model.encoder.layer):
        attn = layer.attention
        hooks += [
            attn.self.query.register_forward_hook(out_hook((number, "q"))),
            attn.self.key.register_forward_hook(out_hook((number, "k"))),
            attn.self.value.register_forward_hook(out_hook((number, "v"))),
            attn.output.dense.register_forward_pre_hook(in_hook((number, "ctx"))),
            attn.output.LayerNorm.register_forward_pre_hook(in_hook((number, "sum1"))),
            attn.output.LayerNorm.register_forward_hook(out_hook((number, "x1"))),
            layer.intermediate.register_forward_hook(out_hook((number, "h"))),
            layer.output.LayerNorm.register_forward_pre_hook(in_hook((number, "sum2"))),
            layer.output.LayerNorm.register_forward_hook(out_hook((number, "x2"))),
        ]
    tokens = sentences = 0
    try:
        with torch.no_grad():
            for batch in batches:
                mask = batch["attention_mask"].bool()
                valid["mask"] = mask
                tokens += int(mask.sum())
                sentences += mask.shape[0]
                model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                      token_type_ids=batch.get("token_type_ids"))
    finally:
        for hook in hooks:
            hook.remove()
    if not tokens:
        raise ValueError("calibration needs at least one valid token")
    return Calibration(values={key: torch.cat(parts) for key, parts in seen.items()},
                       tokens=tokens, sentences=sentences)


def tensor_range(values, method="max", percentile=99.99):
    """The range of ``values``: the largest ``|x|``, or that percentile of ``|x|``."""
    if method not in CALIBRATION_METHODS:
        raise ValueError(f"method must be one of {', '.join(CALIBRATION_METHODS)}, "
                         f"not {method!r}")
    values = values.abs().reshape(-1)
    if values.numel() == 0:
        return 0.0
    if method == "max":
        return float(values.max())
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], not {percentile!r}")
    # np.percentile has no element limit (torch.quantile stops at 2**24).
    return float(np.percentile(values.double().numpy(), percentile))


def _positive(value, what):
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"the calibrated range of {what} is {value!r}; it must be a finite "
                         f"number above 0 (does the calibration text reach this tensor?)")
    return value


@dataclass
class ActQuant:
    """The scales of an int8 activation with a few outlier channels.

    Members
    -------
    base : float
        The scale of every channel but the outliers.
    scale : torch.Tensor
        ``(n,)`` float64, the scale of each channel (``base`` but at ``outliers``).
    outliers : torch.Tensor
        int64 indices of the channels with their own scale, ascending.
    """

    base: float
    scale: torch.Tensor
    outliers: torch.Tensor

    @property
    def factors(self):
        """``scale / base`` per channel (1 but at the outliers)."""
        return self.scale / self.base

    def quantize(self, x):
        """``x`` (``(..., n)`` real) as int8, per channel, saturated."""
        return torch.round(x.detach().double() / self.scale).clamp(-128, 127).to(torch.int8)

    def dequantize(self, q):
        return q.double() * self.scale


def act_quant(values, *, outliers=OUTLIERS, shared=False, method="max", percentile=99.99,
              beta=None, what="activation"):
    """Two-level scales of an activation from its calibration ``values`` ``(tokens, n)``.

    The ``outliers`` channels of largest ``|x|`` (at most one in 32 channels, and only those
    above the rest's range) get their own scale -- one common scale when ``shared`` (GELU's
    outlier GEMM) -- and the rest the range of their values over 127. ``beta`` (a
    LayerNorm's): a channel whose ``|beta|`` the base scale cannot hold (``|beta| / scale <
    127``) becomes an outlier too.
    """
    values = values.double()
    n = values.shape[1]
    channel_max = values.abs().amax(dim=0) if values.numel() else torch.zeros(n,
                                                                               dtype=torch.float64)
    order = torch.argsort(channel_max, descending=True, stable=True)
    count = min(max(int(outliers), 0), max(1, n // 32), n - 1)
    top = order[:count]
    keep = torch.ones(n, dtype=torch.bool)
    keep[top] = False
    base = tensor_range(values[:, keep], method, percentile)
    top = top[channel_max[top] > base]             # only the channels above the rest
    if beta is not None:
        beta = torch.as_tensor(beta, dtype=torch.float64).abs()
        extra = torch.nonzero(beta >= 126 * base).reshape(-1)
        top = torch.unique(torch.cat([top, extra]))
        if top.numel() >= n:
            base = max(base, float(beta.max()) / 126)
            top = torch.zeros(0, dtype=torch.int64)
    base = _positive(base, what) / 127
    scale = torch.full((n,), base, dtype=torch.float64)
    if top.numel():
        own = channel_max[top].clamp(min=base * 127) / 127
        if beta is not None:
            own = torch.maximum(own, beta[top] / 126)
        scale[top] = own.max() if shared else own
    return ActQuant(base=base, scale=scale, outliers=torch.sort(top).values)


def _scaled(w, row_factors):
    """``(w * row_factor, the rows whose factor is 1)`` in float64 (every row if none is)."""
    w = w.detach().double()
    factors = torch.as_tensor(row_factors, dtype=torch.float64)
    scaled = w * factors.unsqueeze(1)
    return scaled, (w[factors == 1] if bool((factors == 1).any()) else scaled)


def weight_ints(w, row_factors, *, per_channel, budget=BUDGET, w_scale=None):
    """The integer weights of a real ``(k, n)`` B operand whose input rows carry
    ``row_factors`` (the input's ``scale / base``).

    Returns ``(q, w_scale)``: ``q`` ``(k, n)`` int64 (possibly beyond int8; :func:`split_rows`
    splits it) with ``w * row_factor = q * w_scale``; ``w_scale`` ``(n,)`` per column when
    ``per_channel``, else a float. The scale is the largest ``|w|`` (per column), or per tensor
    the ``budget + 1``-th largest, over the rows whose factor is 1; or ``w_scale`` when given
    (per tensor; :func:`weight_scales` lists the ones worth trying).
    """
    scaled, plain = _scaled(w, row_factors)
    if per_channel:
        top = plain.abs().amax(dim=0)
        w_scale = torch.where(top > 0, top / 127, torch.ones_like(top))
    elif w_scale is None:
        w_scale = weight_scales(w, row_factors, budget=budget)[0]
    return torch.round(scaled / w_scale).to(torch.int64), w_scale


def weight_scales(w, row_factors, *, budget=BUDGET, coarsen=1.0):
    """Per-tensor scales of a weight (see :func:`weight_ints`), finest first: the ``budget``'s,
    then each coarser one up to ``coarsen`` times it at which one fewer row whose factor is 1
    goes beyond int8 (its largest ``|w|`` over 127)."""
    _, plain = _scaled(w, row_factors)
    flat = plain.abs().reshape(-1)
    top = float(torch.topk(flat, min(budget + 1, flat.numel())).values[-1])
    if top <= 0:
        top = float(flat.max()) if flat.numel() and float(flat.max()) > 0 else 127.0
    rows = plain.abs().amax(dim=1)
    coarser = torch.sort(rows[(rows > top) & (rows <= coarsen * top)]).values
    return [top / 127] + [float(value) / 127 for value in coarser]


def fit_weight(w, row_factors, split_of, *, budget=BUDGET, tile=None, coarsen=1.0):
    """The per-tensor scale of a weight whose split (``split_of(q, w_scale)``, a
    :class:`SplitB`) takes the fewest K tiles of ``tile`` rows, of the scales up to ``coarsen``
    times the ``budget``'s (:func:`weight_scales`); of equals the finest. Without ``tile``, the
    ``budget``'s. Returns ``(w_scale, split)``."""
    best = None
    for w_scale in weight_scales(w, row_factors, budget=budget,
                                 coarsen=coarsen if tile else 1.0):
        q, _ = weight_ints(w, row_factors, per_channel=False, w_scale=w_scale)
        split = split_of(q, w_scale)
        tiles = tile and k_tiles(tile, split.k, split.k_high)
        if best is None or tiles < best[0]:
            best = (tiles, w_scale, split)
    return best[1], best[2]


def correction_ints(residual, acc_unit, n):
    """Rows of B that add the outlier channels' share of a residual through the GEMM.

    The LayerNorm's residual port adds ``r * residual.base``; channel ``k`` of the residual is
    worth ``r * residual.scale[k]``. Row ``i`` (for outlier ``k = residual.outliers[i]``) holds
    ``round((scale_k - base) / acc_unit)`` on column ``k``. Returns ``(q, channels)``.
    """
    channels = residual.outliers
    q = torch.zeros((channels.numel(), n), dtype=torch.int64)
    for row, channel in enumerate(channels.tolist()):
        q[row, channel] = round((float(residual.scale[channel]) - residual.base) / acc_unit)
    return q, channels


def _parts(row):
    """``row`` (int64) as ``t = ceil(max |row| / 127)`` rows ``floor((row + j) / t)``, ``j <
    t``, each in ``[-127, 127]``, that sum to it."""
    t = max(1, -(-(int(row.abs().max()) if row.numel() else 0) // 127))
    return [torch.div(row + j, t, rounding_mode="floor") for j in range(t)]


def split_rows(q, source, *, room=None):
    """Split integer rows of B beyond int8 into rows that add up to them, exactly.

    Row ``i`` of ``q`` (input column ``source[i]``) becomes ``t = ceil(max |q_i| / 127)`` rows
    ``floor((q_i + j) / t)``, ``j < t``, each in ``[-127, 127]``, that sum to ``q_i``; or its
    digits: the low row ``l = ((q_i + 32) mod 64) - 32`` and the high row ``h = (q_i - l) /
    64`` split that way, ``q_i = 64 h + l``. Digits are taken where they make fewer rows, and
    for a row of two halves once the low rows have no ``room`` left: halves add a low row,
    digits a high row, and the high rows are K tiles of their own (:mod:`bertaccel.sw.tiler`),
    so the low rows' room in their last K tile is where a split costs no tile.

    Parameters
    ----------
    q : torch.Tensor
        ``(k, n)`` int64.
    source : torch.Tensor
        ``(k,)`` int64, the input column of each row.
    room : int, optional
        The low rows that halves may add (``None``: no limit, a row of two halves is always
        split in halves).

    Returns
    -------
    SplitB
        The high rows then the low rows (``k_high`` of them high), each row's input column in
        ``index``.
    """
    high, low, high_index, low_index = [], [], [], []
    shift = 1 << MATMUL_SHIFT
    room = math.inf if room is None else room
    for i in range(q.shape[0]):
        parts = _parts(q[i])
        if len(parts) > 2 or (len(parts) == 2 and room < 1):
            digit = torch.remainder(q[i] + shift // 2, shift) - shift // 2
            tops = _parts(torch.div(q[i] - digit, shift, rounding_mode="floor"))
            if len(tops) + 1 < len(parts) or len(parts) == 2:
                high += tops
                high_index += [int(source[i])] * len(tops)
                parts = [digit]
        room -= len(parts) - 1
        low += parts
        low_index += [int(source[i])] * len(parts)
    rows = high + low
    b = torch.stack(rows) if rows else torch.zeros((0, q.shape[1]), dtype=torch.int64)
    assert b.numel() == 0 or int(b.abs().max()) <= 127
    return SplitB(b=b.to(torch.int8),
                  index=torch.tensor(high_index + low_index, dtype=torch.int64),
                  k_high=len(high))


@dataclass
class SplitB:
    """A B operand after channel splitting.

    Members
    -------
    b : torch.Tensor
        ``(k', n)`` int8.
    index : torch.Tensor
        ``(k',)`` int64: the column of the A sources (concatenated in the stage's order) that
        each row of B multiplies; ``A' = A[:, index]``.
    k_high : int
        The first ``k_high`` rows are high digits, whose products count ``2**6`` times (the
        GEMM's high rows, see :func:`split_rows`).
    """

    b: torch.Tensor
    index: torch.Tensor
    k_high: int = 0

    @property
    def k(self):
        return self.b.shape[0]

    def padded(self, k_high, k):
        """The same operand with zero rows after the high rows up to ``k_high`` of them, and
        after the low rows up to ``k`` rows in all."""
        def zeros(rows):
            return (torch.zeros((rows, self.b.shape[1]), dtype=torch.int8),
                    torch.zeros(rows, dtype=torch.int64))
        extra_high, extra = k_high - self.k_high, k - k_high - (self.k - self.k_high)
        if extra_high < 0 or extra < 0:
            raise ValueError(f"cannot pad {self.k_high} high and {self.k - self.k_high} low rows "
                             f"to {k_high} and {k - k_high}")
        if not extra_high and not extra:
            return self
        top, bottom = zeros(extra_high), zeros(extra)
        return SplitB(b=torch.cat([self.b[:self.k_high], top[0], self.b[self.k_high:],
                                   bottom[0]]),
                      index=torch.cat([self.index[:self.k_high], top[1],
                                       self.index[self.k_high:], bottom[1]]),
                      k_high=k_high)


def _split(parts, tile=None):
    """``SplitB`` of ``[(q, source), ...]`` stacked: every part's high rows, then the low.
    With ``tile`` (the K tile's rows), halves fill only the room the low rows leave in their
    last K tile (see :func:`split_rows`)."""
    room = None if tile is None else -sum(q.shape[0] for q, _ in parts) % tile
    splits = []
    for q, source in parts:
        splits.append(split_rows(q, source, room=room))
        if room is not None:
            room -= splits[-1].k - splits[-1].k_high - q.shape[0]
    high = [(s.b[:s.k_high], s.index[:s.k_high]) for s in splits]
    low = [(s.b[s.k_high:], s.index[s.k_high:]) for s in splits]
    return SplitB(b=torch.cat([b for b, _ in high + low]),
                  index=torch.cat([index for _, index in high + low]),
                  k_high=sum(s.k_high for s in splits))


@dataclass
class QuantLayer:
    """One encoder layer, quantised.

    Members
    -------
    x, x1, h, x2 : ActQuant
        The layer input, the attention block's LayerNorm output, the GELU output (its outliers
        share one scale) and the layer output.
    s_q, s_k, s_v, s_ctx : float
        Per-tensor scales of Q, K, V and the attention context.
    qkv : SplitB, A sources ``[X]``;  qkv_ep : Requant (per column)
    qk_scale : float
        The softmax input scale ``s_q s_k / sqrt(d)``.
    pv_ep : Requant
    wo : SplitB, A sources ``[ctx | X]``;  wo_ep : LayerNorm (residual X)
    w1 : SplitB, A sources ``[X1]``, all ``intermediate`` columns; ``h.outliers`` go to the
        second GEMM;  w1_ep, w1_out_ep : Gelu (the other columns, the outlier columns)
    w2 : SplitB, A sources ``[H (other columns) | H (outlier columns) | X1]``;  w2_ep : LayerNorm
        (residual X1)
    info : dict
        Weight scales and the extra rows of each stage, for reports.
    """

    x: ActQuant
    x1: ActQuant
    h: ActQuant
    x2: ActQuant
    s_q: float
    s_k: float
    s_v: float
    s_ctx: float
    qkv: SplitB
    qkv_ep: Requant
    qk_scale: float
    pv_ep: Requant
    wo: SplitB
    wo_ep: LayerNorm
    w1: SplitB
    w1_ep: Gelu
    w1_out_ep: Gelu | None
    w2: SplitB
    w2_ep: LayerNorm
    info: dict = field(default_factory=dict)

    @property
    def h_keep(self):
        """The GELU columns of the main GEMM (every column but ``h.outliers``)."""
        keep = torch.ones(self.h.scale.numel(), dtype=torch.bool)
        keep[self.h.outliers] = False
        return torch.nonzero(keep).reshape(-1)

    @property
    def h_order(self):
        """The columns of ``H`` in the order the accelerator makes them: :attr:`h_keep`, then
        ``h.outliers``."""
        return torch.cat([self.h_keep, self.h.outliers])


def quantize_layer(layer, cal, number, x, *, head_dim, eps, method="max", percentile=99.99,
                   outliers=OUTLIERS, budget=BUDGET, tile=None):
    """Quantise one ``transformers`` ``BertLayer``.

    Parameters
    ----------
    layer : transformers.models.bert.modeling_bert.BertLayer
    cal : Calibration
    number : int
        The layer's index.
    x : ActQuant
        The scales of the layer input (the previous layer's output, or the embeddings').
    head_dim : int
    eps : float
        LayerNorm epsilon.
    method, percentile, outliers, budget
        See :func:`tensor_range`, :func:`act_quant` and :func:`weight_ints`.
    tile : int, optional
        The rows of the array's K tiles, which the split rows are packed for (see
        :func:`split_rows`; the products are the same whatever it is).
    """
    attn = layer.attention

    def site(name):
        return cal.site(number, name)

    def per_tensor(name):
        return _positive(tensor_range(site(name), method, percentile), name) / 127

    s_q, s_k, s_v, s_ctx = (per_tensor(name) for name in ("q", "k", "v", "ctx"))
    ln1, ln2 = attn.output.LayerNorm, layer.output.LayerNorm
    common = dict(outliers=outliers, method=method, percentile=percentile)
    x1 = act_quant(site("x1"), beta=ln1.bias.detach().double(), what="x1", **common)
    h = act_quant(site("h"), shared=True, what="h", **common)
    x2 = act_quant(site("x2"), beta=ln2.bias.detach().double(), what="x2", **common)
    fit = dict(budget=budget, tile=tile)
    info = {}
    qkv, qkv_ep, info["qkv"] = _quant_qkv(attn.self, x, (s_q, s_k, s_v), tile)
    wo, wo_ep, info["wo"] = _quant_wo(attn.output.dense, ln1, x, s_ctx, x1, eps=eps,
                                      bound=float(site("sum1").abs().max()), **fit)
    w1, w1_ep, w1_out_ep, info["w1"] = _quant_w1(layer.intermediate.dense, x1, h, **fit)
    w2, w2_ep, info["w2"] = _quant_w2(layer.output.dense, ln2, x1, h, x2, eps=eps,
                                      bound=float(site("sum2").abs().max()), **fit)
    return QuantLayer(x=x, x1=x1, h=h, x2=x2, s_q=s_q, s_k=s_k, s_v=s_v, s_ctx=s_ctx,
                      qkv=qkv, qkv_ep=qkv_ep, qk_scale=s_q * s_k / math.sqrt(head_dim),
                      pv_ep=Requant(scale=s_v / (PROB_SCALE * s_ctx)), wo=wo, wo_ep=wo_ep,
                      w1=w1, w1_ep=w1_ep, w1_out_ep=w1_out_ep, w2=w2, w2_ep=w2_ep,
                      info=info)


def _linear(module):
    """The weight (``in x out``) and bias of a ``torch.nn.Linear``, as float64."""
    return module.weight.detach().double().t(), module.bias.detach().double()


def _layernorm(ln, in_scale, out, residual_scale, bias, bound, eps):
    """The LayerNorm epilogue of ``ln`` into the scales of ``out``."""
    return LayerNorm(in_scale=in_scale,
                     gamma=(ln.weight.detach().double() * out.base / out.scale).numpy(),
                     beta=(ln.bias.detach().double() * out.base / out.scale).numpy(),
                     out_scale=out.base, eps=eps, residual_scale=residual_scale,
                     bias=bias.numpy(), absmax=LN_HEADROOM * bound)


def _kept(h, inter):
    """The mask of the columns of H (``inter`` of them) that are not outliers."""
    keep = torch.ones(inter, dtype=torch.bool)
    keep[h.outliers] = False
    return keep


def _quant_qkv(self_attn, x, out_scales, tile):
    """(1) QKV: X @ [Wq|Wk|Wv], per-column scales. ``out_scales`` are ``s_q, s_k, s_v``;
    returns the split B, its epilogue and its info."""
    hidden = self_attn.query.weight.shape[0]
    wq, bq = _linear(self_attn.query)
    wk, bk = _linear(self_attn.key)
    wv, bv = _linear(self_attn.value)
    w_qkv, b_qkv = torch.cat([wq, wk, wv], dim=1), torch.cat([bq, bk, bv])
    q, s_w = weight_ints(w_qkv, x.factors, per_channel=True)
    qkv = _split([(q, torch.arange(hidden))], tile)
    s_out = torch.cat([torch.full((hidden,), s) for s in out_scales])
    qkv_ep = Requant(scale=x.base, bias=(b_qkv / (x.base * s_w)).numpy(),
                     per_channel_scale=(s_w / s_out).numpy())
    info = {"w_scale_min": float(s_w.min()), "w_scale_max": float(s_w.max()),
            "extra_rows": qkv.k - hidden}
    return qkv, qkv_ep, info


def _quant_wo(dense, ln1, x, s_ctx, x1, *, eps, bound, budget, tile):
    """(4) ctx @ Wo + bo + X, LayerNorm: A = [ctx | X]. Returns the split B, its epilogue and
    its info."""
    wo, bo = _linear(dense)
    hidden = wo.shape[1]

    def wo_split(q, s_wo):
        corr, channels = correction_ints(x, s_ctx * s_wo, hidden)
        return _split([(q, torch.arange(hidden)), (corr, hidden + channels)], tile)
    s_wo, wo_b = fit_weight(wo, torch.ones(hidden), wo_split, budget=budget, tile=tile,
                            coarsen=COARSEN["wo"])
    wo_ep = _layernorm(ln1, s_ctx * s_wo, x1, x.base, bo, bound, eps)
    return wo_b, wo_ep, {"w_scale": s_wo, "extra_rows": wo_b.k - hidden}


def _quant_w1(dense, x1, h, *, budget, tile):
    """(5) X1 @ W1 + b1, GELU: the outlier columns of H are a second GEMM. Returns the split B,
    the epilogues of the kept and of the outlier columns (``None`` without outliers), and the
    info."""
    w1, b1 = _linear(dense)
    hidden, inter = w1.shape
    s_w1, w1_b = fit_weight(w1, x1.factors,
                            lambda q, _: _split([(q, torch.arange(hidden))], tile),
                            budget=budget, tile=tile, coarsen=COARSEN["w1"])
    keep = _kept(h, inter)
    w1_ep = Gelu(in_scale=x1.base * s_w1, out_scale=h.base, bias=b1[keep].numpy())
    w1_out_ep = None
    if h.outliers.numel():
        w1_out_ep = Gelu(in_scale=x1.base * s_w1, out_scale=float(h.scale[h.outliers[0]]),
                         bias=b1[h.outliers].numpy())
    info = {"w_scale": s_w1, "extra_rows": w1_b.k - hidden,
            "outlier_columns": h.outliers.tolist()}
    return w1_b, w1_ep, w1_out_ep, info


def _quant_w2(dense, ln2, x1, h, x2, *, eps, bound, budget, tile):
    """(6) H @ W2 + b2 + X1, LayerNorm: A = [H (kept columns) | H (outliers) | X1]. Returns
    the split B, its epilogue and its info."""
    w2, b2 = _linear(dense)
    inter, hidden = w2.shape
    keep = _kept(h, inter)
    order = torch.cat([torch.nonzero(keep).reshape(-1), h.outliers])

    def w2_split(q, s_w2):
        corr, channels = correction_ints(x1, h.base * s_w2, hidden)
        return _split([(q, torch.arange(inter)), (corr, inter + channels)], tile)
    s_w2, w2_b = fit_weight(w2[order], h.factors[order], w2_split, budget=budget, tile=tile,
                            coarsen=COARSEN["w2"])
    w2_ep = _layernorm(ln2, h.base * s_w2, x2, x1.base, b2, bound, eps)
    return w2_b, w2_ep, {"w_scale": s_w2, "extra_rows": w2_b.k - inter}
