"""The epilogue ops of :mod:`bertaccel.golden.intops` transcribed straight from its docstring
on int64 tensors, one step a line: the oracle that the product's faster implementations (float64
and int32 arithmetic, folded tables) are checked against, on random and extreme inputs
(``verif/unit/test_intops_oracle.py``). It takes the arguments as valid: the product checks
them."""

import torch

from bertaccel.golden.intops import (EXP2_CUTOFF, EXP2_GUARD, EXP2_TABLE, PHI_TABLE,
                                     PROB_SCALE, RECIP_BITS, RECIP_SHIFT, RECIP_TABLE,
                                     RSQRT_TABLE, SOFTMAX_FRAC)

__all__ = ["requant", "gelu", "softmax", "layernorm"]


def _i64(value):
    return torch.as_tensor(value, dtype=torch.int64)


def rshift_round(v, s):
    """``(v + (2**s >> 1)) >> s``, elementwise; ``s`` may be a tensor.

    The half is formed as ``2**(s-1)``, never as ``2**s``, which would wrap in int64 at
    ``s == 63`` (the hardware computes ``((2v >> s) + 1) >> 1``, the same value)."""
    return _rshift_round_(v.clone() if isinstance(v, torch.Tensor) else _i64(v), s)


def _rshift_round_(v, s):
    """:func:`rshift_round` in place on the int64 tensor ``v`` (a temporary): ``v``."""
    if not isinstance(s, torch.Tensor):
        s = int(s)
        v += (1 << s) >> 1
        v >>= s
        return v
    s = _i64(s)
    v += torch.where(s > 0, torch.ones_like(s) << (s - 1).clamp(min=0), torch.zeros_like(s))
    v >>= s
    return v


def _clamp(v, bits):
    return v.clamp(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def _clamp_(v, bits):
    return v.clamp_(-(1 << (bits - 1)), (1 << (bits - 1)) - 1)


def _check_rows(x):
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"x must be a 2-D tensor of accumulator rows, not {type(x).__name__}"
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else ''}")
    return x.to(torch.int64)


def _vector(v, n, name):
    v = _i64(v)
    if v.dim() == 0:
        return v.expand(n)
    if v.shape != (n,):
        raise ValueError(f"{name} must be a scalar or have shape ({n},), not {tuple(v.shape)}")
    return v


def requant(x, *, bias=0, mul, shift):
    """int8 of ``(x + bias) * mul / 2**shift``, rounded half up and saturated."""
    x = _check_rows(x)
    n = x.shape[1]
    v = (x + _vector(bias, n, "bias")).mul_(_vector(mul, n, "mul"))
    shift = int(shift) if isinstance(shift, int) else _vector(shift, n, "shift")
    return _clamp_(_rshift_round_(v, shift), 8).to(torch.int32)


#: golden's PHI lookup with its two saturations folded in: index clamp(t + 257, 0, 513) reads 0
#: (t < -256), PHI_TABLE[t + 256], or 2**16 (t >= 256).
_PHI_ROM = torch.tensor([0, *PHI_TABLE, 1 << 16], dtype=torch.int64)


def gelu(x, *, bias=0, gmul, gshift, omul, oshift):
    """int8 GELU (erf form) of ``x + bias``; see the module docstring for the scales."""
    x = _check_rows(x) + _vector(bias, x.shape[1], "bias")
    t = _rshift_round_(x * gmul, gshift)
    phi = _PHI_ROM[t.add_(257).clamp_(0, 513)]
    z = _clamp_(_rshift_round_(x.mul_(omul), oshift), 24)
    return _clamp_(_rshift_round_(z.mul_(phi), 24), 8).to(torch.int32)


def _bit_length(v):
    """Exact bit length of each non-negative int64 (a priority encoder in the hardware)."""
    return ((v.unsqueeze(-1) >> torch.arange(63)) > 0).sum(dim=-1)


_EXP2 = torch.tensor(EXP2_TABLE, dtype=torch.int64)
_RECIP = torch.tensor(RECIP_TABLE, dtype=torch.int64)
_RSQRT = torch.tensor(RSQRT_TABLE, dtype=torch.int64)


def _exp2(t, m, valid):
    """``rshift_round(EXP2_TABLE[u & 4095] << EXP2_GUARD, u >> 12)`` for ``u = 4096 * m - t``,
    0 from a shift of EXP2_CUTOFF and in the columns that are not ``valid``."""
    u = (m << SOFTMAX_FRAC) - t
    q = u >> SOFTMAX_FRAC
    e = _rshift_round_(_EXP2[u & ((1 << SOFTMAX_FRAC) - 1)] << EXP2_GUARD,
                       q.clamp(max=EXP2_CUTOFF))
    return e.masked_fill_((q >= EXP2_CUTOFF) | ~valid, 0)


def softmax(x, *, mask=0, mul, shift, cols, row_len=None):
    """``PROB_SCALE * softmax`` (12 bits) over each row of ``x + mask``, a beat of ``cols``
    columns at a time.

    Columns at or past ``row_len`` (default: all ``N``) are padding: no probability, no effect.
    ``mask`` is a scalar, one value a column, or one row a row (``(rows, N)``: rows of programs
    with masks of their own, stacked).
    """
    x = _check_rows(x)
    rows, n = x.shape
    row_len = n if row_len is None else row_len
    mask = _i64(mask)
    a = _clamp_(x + (mask if mask.shape == (rows, n) else _vector(mask, n, "mask")), 32)
    t = _clamp_(_rshift_round_(a.mul_(mul), shift), 24)
    # Beats of ``cols`` columns: the last one is filled with padding, which the hardware's
    # narrower last beat does not have but which changes no maximum and adds no exponential.
    beats = -(-n // cols)
    valid = torch.arange(beats * cols) < row_len
    t = torch.nn.functional.pad(t, (0, beats * cols - n))
    t.masked_fill_(~valid, -(1 << 23))
    t, valid = t.view(rows, beats, cols), valid.view(beats, cols)
    # The running maximum after each beat, then the sum of each beat's exponentials against
    # it, then the sum rescaled beat by beat: S = (S >> dM) + sum(e).
    first = torch.full((rows, 1), -(1 << 15), dtype=torch.int64)
    one = 1 << SOFTMAX_FRAC
    m = torch.cummax(torch.cat([first, (t.amax(dim=2) + one - 1) >> SOFTMAX_FRAC], dim=1),
                     dim=1).values
    beat_sums = _exp2(t, m[:, 1:].unsqueeze(2), valid).sum(dim=2)
    grow = (m[:, 1:] - m[:, :-1]).clamp_(max=63)
    total = torch.zeros(rows, dtype=torch.int64)
    for beat in range(beats):
        total = (total >> grow[:, beat]) + beat_sums[:, beat]
    # S holds the row's largest exponential, above 2**20, so k >= RECIP_BITS: the mantissa is
    # S shifted right.
    k = _bit_length(total) - 1
    mant = torch.where(k >= RECIP_BITS, total >> (k - RECIP_BITS).clamp(min=0),
                       total << (RECIP_BITS - k).clamp(min=0))
    recip = _RECIP[mant - (1 << RECIP_BITS)]
    e = _exp2(t, m[:, -1:].unsqueeze(2), valid).view(rows, -1)
    y = _rshift_round_(e.mul_(recip.unsqueeze(1)), (RECIP_SHIFT + k).unsqueeze(1))
    return y.clamp_(0, PROB_SCALE)[:, :n].to(torch.int32)


def layernorm(x, *, bias=0, residual=None, xmul, rmul=0, vshift, gamma, beta, gshift, eps_n2,
              row_len=None):
    """int8 LayerNorm of ``(x + bias) + residual`` over each row, with per-column gamma, beta.

    Columns at or past ``row_len`` (default: all ``N``) are padding: they take no part in the
    statistics and their outputs are 0.
    """
    x = _check_rows(x)
    rows, n = x.shape
    row_len = n if row_len is None else row_len
    r = torch.zeros_like(x) if residual is None else _i64(residual)
    valid = torch.arange(n) < row_len
    v = _clamp(rshift_round((x + _vector(bias, n, "bias")) * xmul + r * rmul, vshift), 16)
    v = torch.where(valid, v, torch.zeros_like(v))
    s1 = v.sum(dim=1)
    s2 = (v * v).sum(dim=1)
    d = row_len * s2 - s1 * s1 + int(eps_n2)
    bits = _bit_length(d)
    j = torch.div(bits - 9, 2, rounding_mode="floor")
    m = torch.where(j >= 0, d >> (2 * j).clamp(min=0), d << (-2 * j).clamp(min=0))
    rsq = _RSQRT[(m - 256).clamp(0, 767)]
    rsq = torch.where(d > 0, rsq, torch.zeros_like(rsq))
    j = torch.where(d > 0, j, torch.zeros_like(j))
    z = rshift_round((row_len * v - s1.unsqueeze(1)) * rsq.unsqueeze(1), (11 + j).unsqueeze(1))
    g, b = _vector(gamma, n, "gamma"), _vector(beta, n, "beta")
    if gshift <= 48:
        y = _clamp(rshift_round(z * g + (b << (gshift - 8)), gshift), 8)
    else:   # b << (gshift - 8) would leave int64: floor(z * g / 2**(gshift - 8)) carries it
        y = _clamp(((z * g >> (gshift - 8)) + b + 128) >> 8, 8)
    return torch.where(valid, y, torch.zeros_like(y)).to(torch.int32)
