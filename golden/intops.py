"""Bit-exact integer references of the epilogue ops (requantise, GELU, softmax, LayerNorm).

These functions define the arithmetic the hardware performs; the RTL and the software device must
equal them bit for bit. The arithmetic is exact integer arithmetic, vectorised over rows, carried
in int32, int64 or float64 tensors (float64 for the wide products: it holds every integer below
2**53, and no value it carries here reaches 2**52). The lookup tables are built once, here, and
the gateware reads them from this module.

Conventions
-----------
* Inputs ``x`` are int32 accumulator rows, shape (M, N). Per-column vectors (bias, mask, gamma,
  beta, per-channel multipliers) have shape (N,).
* ``rshift_round(v, s) = (v + (2**s >> 1)) >> s``: an arithmetic shift that rounds half up;
  ``s == 0`` leaves ``v`` unchanged.
* A real scale is a 16-bit unsigned multiplier and a shift: ``scale = mul / 2**shift``.
* Results are int8 values (in an int32 tensor, as the hardware sends them); the softmax's
  are 12-bit probabilities.

Algorithms
----------
requant : ``y = sat8(rshift_round((x + bias) * mul, shift))``; ``mul``/``shift`` per tensor or per
    column.
gelu : ``x' = x + bias``. An index ``t = rshift_round(x' * gmul, gshift)`` holds ``x`` in units
    of 1/64; ``phi = PHI_TABLE[t + 256]`` (Phi(x) = P(X <= x), in units of 2**-16) for
    ``-256 <= t < 256``, 0 below, 2**16 above. ``z = clamp24(rshift_round(x' * omul, oshift))``
    is ``x`` in output units with 8 fraction bits. ``y = sat8(rshift_round(z * phi, 24))``.
softmax : ``a = sat32(x + mask)``; ``t = clamp24(rshift_round(a * mul, shift))`` is the logit in
    log2 units with :data:`SOFTMAX_FRAC` (12) fraction bits (``mul/2**shift`` = input scale *
    log2(e) / sqrt(d) * 4096). Columns at or past ``row_len`` are padding and take no part. One
    pass over the row, a beat of ``cols`` columns at a time, keeps an integer running maximum
    ``M`` (Softermax's online form): ``M = max(M, ceil(max(t) / 4096))``; with ``u = 4096 * M - t
    >= 0`` the exponential is ``e = rshift_round(EXP2_TABLE[u & 4095] << 4, u >> 12)``, 2**(-u /
    4096) in units of 2**-21 (:data:`EXP2_GUARD` guard bits below the table's 2**-17, so that a
    long tail of small exponentials is rounded, not truncated away; 0 from a shift of 23, where
    the rounding gives 0 anyway); the sum is rescaled by a shift when ``M`` grows: ``S = (S >>
    dM) + sum(e)``, below 2**32 for rows of up to 1024. Then ``S = mant * 2**(k - 13)`` with
    ``mant`` in [8192, 16384), ``R = RECIP_TABLE[mant - 8192]`` (= 4095 * 2**18 / mant, 17
    bits) and a second pass gives ``y = clamp(rshift_round(e * R, 5 + k), 0, 4095)``, that is
    :data:`PROB_SCALE` * p: a 12-bit probability. A matrix of them enters a GEMM (attention's
    P V) as two int8 planes of 6-bit digits (:func:`prob_digits`), whose products the
    accelerator adds with the high plane's shifted left by :data:`PROB_DIGIT_BITS`.
layernorm : ``v = sat16(rshift_round((x + bias) * xmul + r * rmul, vshift))`` where ``r`` is the
    int8 residual, ``xmul`` a 16-bit and ``rmul`` a 32-bit unsigned multiplier (the residual's
    scale is often thousands of times the accumulator's). Over the ``row_len`` valid columns
    ``S1 = sum(v)``, ``S2 = sum(v*v)``; then
    ``D = N*S2 - S1**2 + eps_n2`` (``eps_n2`` = eps in v units squared, times N**2) is exact.
    ``D = m * 4**j`` with ``m`` in [256, 1024) and ``RSQRT_TABLE[m - 256]`` (= 2**23 / sqrt(m))
    give ``z = rshift_round((N*v - S1) * rsq, 11 + j)``, the normalised value with 12 fraction
    bits. ``y = sat8(rshift_round(z * gamma + beta * 2**(gshift - 8), gshift))``, with ``gamma``
    an int16 in units of 2**(12 - gshift) output LSBs and ``beta`` an int16 in 1/256 output LSBs.
"""

import functools
import math

import torch

__all__ = [
    "EXP2_TABLE", "RECIP_TABLE", "RSQRT_TABLE", "PHI_TABLE",
    "MUL_BITS", "SHIFT_MAX", "MAX_ROW", "GSHIFT_MAX", "SOFTMAX_FRAC", "EXP2_BITS", "EXP2_GUARD",
    "EXP2_CUTOFF", "RECIP_BITS", "RECIP_SHIFT", "PROB_SCALE", "PROB_BITS", "PROB_DIGIT_BITS",
    "rshift_round", "quantize_scale", "ScaleError",
    "requant", "gelu", "softmax", "prob_digits", "layernorm",
]

#: Width of every unsigned scale multiplier.
MUL_BITS = 16
#: Largest shift of a scale.
SHIFT_MAX = 63
#: Longest softmax or LayerNorm row the hardware takes.
MAX_ROW = 1024
#: Largest LayerNorm ``gshift``: any the 6-bit SHIFT1 register holds.
GSHIFT_MAX = 63

#: Fraction bits of the softmax's logit ``t`` (log2 units): its steps of 2**-12 change an
#: exponential by at most 8.5e-5 of itself, which keeps the 12-bit output within a fraction of
#: its LSB (a step of 2**-8 costs up to 2.4 LSB, docs/accuracy.md).
SOFTMAX_FRAC = 12
#: Bits of an EXP2_TABLE entry's scale: 2**(-f/4096) in units of 2**-EXP2_BITS.
EXP2_BITS = 17
#: Guard bits of the exponentials below the table's LSB, which the rounding shift keeps.
EXP2_GUARD = 4
#: The shift of an exponential from which it is 0: ``rshift_round(v, 23)`` is 0 for every
#: ``v <= 2**21``, so the cutoff drops nothing the rounding would keep.
EXP2_CUTOFF = EXP2_BITS + EXP2_GUARD + 2
#: 2**(-f/4096) in units of 2**-17, f in [0, 4096): values in (65536, 131072].
EXP2_TABLE = [round(2 ** EXP2_BITS * 2 ** (-f / 2 ** SOFTMAX_FRAC))
              for f in range(2 ** SOFTMAX_FRAC)]
#: Full scale of the softmax's output: ``y = round(PROB_SCALE * p)``, a 12-bit probability.
PROB_SCALE = 4095
#: Bits of the softmax's output.
PROB_BITS = PROB_SCALE.bit_length()
#: Bits of each of the two digits a probability is split into for a GEMM (:func:`prob_digits`),
#: and the shift of the high digit's products.
PROB_DIGIT_BITS = PROB_BITS // 2
#: Fraction bits of the mantissa of the softmax's sum, which index RECIP_TABLE.
RECIP_BITS = 13
#: RECIP_TABLE's extra scale, 2**RECIP_SHIFT: the most that keeps its entries below 2**17.
RECIP_SHIFT = 5
#: PROB_SCALE * 2**(13 + 5) / (mantissa + 1/2) for mantissas 8192..16383 (13 fraction bits).
RECIP_TABLE = [round(PROB_SCALE * 2 ** (RECIP_BITS + RECIP_SHIFT) / (2 ** RECIP_BITS + i + 0.5))
               for i in range(2 ** RECIP_BITS)]
#: 2**23 / sqrt(m + 1/2) for m in [256, 1024).
RSQRT_TABLE = [round(2 ** 23 / math.sqrt(256 + i + 0.5)) for i in range(768)]
#: Phi(x) = (1 + erf(x / sqrt 2)) / 2 in units of 2**-16, for x = (i - 256) / 64.
PHI_TABLE = [min(65535, round(2 ** 16 * 0.5 * (1 + math.erf((i - 256) / 64 / math.sqrt(2)))))
             for i in range(512)]


class ScaleError(ValueError):
    """A real scale that no 16-bit multiplier and shift can represent."""


def quantize_scale(scale, *, name="scale"):
    """The ``(mul, shift)`` with ``mul < 2**16`` that best represents ``scale > 0``."""
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not math.isfinite(scale) \
            or scale <= 0:
        raise ScaleError(f"{name} must be a finite number above 0, not {scale!r}")
    if scale >= (1 << MUL_BITS) - 0.5:
        raise ScaleError(f"{name} {scale!r} is too large: a scale must be below {1 << MUL_BITS}")
    shift = 0
    while shift < SHIFT_MAX and round(scale * 2 ** (shift + 1)) < (1 << MUL_BITS):
        shift += 1
    mul = round(scale * 2 ** shift)
    if mul == 0:
        raise ScaleError(f"{name} {scale!r} is too small: the smallest scale is "
                         f"2**-{SHIFT_MAX + 1}")
    return mul, shift


def _i64(value):
    return torch.as_tensor(value, dtype=torch.int64)


def rshift_round(v, s):
    """``(v + (2**s >> 1)) >> s``, elementwise; ``s`` may be a tensor.

    The half is formed as ``2**(s-1)``, never as ``2**s``, which would wrap in int64 at
    ``s == 63`` (the hardware computes ``((2v >> s) + 1) >> 1``, the same value)."""
    v = v.clone() if isinstance(v, torch.Tensor) else _i64(v)
    if not isinstance(s, torch.Tensor):
        s = int(s)
        v += (1 << s) >> 1
        return v >> s
    s = _i64(s)
    v += torch.where(s > 0, torch.ones_like(s) << (s - 1).clamp(min=0), torch.zeros_like(s))
    return v >> s


def _shift_f_(v, s):
    """:func:`rshift_round` in place on the float64 tensor ``v`` of integers below 2**51 in
    magnitude: ``v``. ``s`` is an int or a tensor that broadcasts against ``v``.

    Exact: ``v + 2**(s-1)`` stays an integer below 2**52, multiplying by ``2**-s`` and taking
    the floor are exact, and from a shift of 52 up every such ``v`` rounds to 0, as at 52.
    Float64 carries the epilogues' wide products because CPUs multiply it in vector lanes, and
    int64 they do not."""
    if isinstance(s, torch.Tensor):
        s = s.to(torch.float64).clamp(max=_F64_SHIFT_MAX)
        half = torch.where(s > 0, torch.pow(2.0, s - 1), 0.0)
        return v.add_(half).mul_(torch.pow(2.0, -s)).floor_()
    s = min(int(s), _F64_SHIFT_MAX)
    if s:
        v.add_(2.0 ** (s - 1)).mul_(2.0 ** -s).floor_()
    return v


#: The largest shift :func:`_shift_f_` needs: every integer below 2**51 rounds to 0 from here.
_F64_SHIFT_MAX = 52


def _sat(v, bits):
    """``v`` (float64, in place) saturated to a signed ``bits``-bit integer, as int32."""
    return v.clamp_(-(1 << (bits - 1)), (1 << (bits - 1)) - 1).to(torch.int32)


def _check_rows(x):
    if not isinstance(x, torch.Tensor) or x.dim() != 2:
        raise ValueError(f"x must be a 2-D tensor of accumulator rows, not {type(x).__name__}"
                         f"{tuple(x.shape) if isinstance(x, torch.Tensor) else ''}")


def _rows(x):
    """The accumulator rows ``x`` (int32 values) as a new float64 tensor."""
    _check_rows(x)
    return x.to(torch.float64, copy=True)


def _column(v, n, name):
    """A per-column operand: a Python number for a scalar, else a float64 ``(n,)`` tensor."""
    if not isinstance(v, torch.Tensor) or v.dim() == 0:
        return float(v)
    if v.shape != (n,):
        raise ValueError(f"{name} must be a scalar or have shape ({n},), not {tuple(v.shape)}")
    return v.to(torch.float64)


def requant(x, *, bias=0, mul, shift):
    """int8 of ``(x + bias) * mul / 2**shift``, rounded half up and saturated."""
    x = _rows(x)
    n = x.shape[1]
    v = x.add_(_column(bias, n, "bias")).mul_(_column(mul, n, "mul"))
    if isinstance(shift, torch.Tensor) and shift.dim():
        _column(shift, n, "shift")
    return _sat(_shift_f_(v, shift), 8)


#: golden's PHI lookup with its two saturations folded in: index clamp(t + 257, 0, 513) reads 0
#: (t < -256), PHI_TABLE[t + 256], or 2**16 (t >= 256).
_PHI_ROM = torch.tensor([0, *PHI_TABLE, 1 << 16], dtype=torch.float64)


def gelu(x, *, bias=0, gmul, gshift, omul, oshift):
    """int8 GELU (erf form) of ``x + bias``; see the module docstring for the scales."""
    _check_rows(x)
    bias = _column(bias, x.shape[1], "bias")
    lo, table = _gelu_table(gmul, gshift, omul, oshift)
    offset = None if table is None else torch.as_tensor(bias - lo, dtype=torch.float64)
    if offset is None or offset.abs().max() > _INDEX_OFFSET_MAX:
        return _gelu_of(_rows(x).add_(bias), gmul, gshift, omul, oshift)
    # The table index clamp(x + bias - lo, 0, len - 1), in int32: with |bias - lo| at most
    # 2**29 and x clamped to +-2**30 first, every index that was past an end still is.
    index = x.to(torch.int32).clamp(-(1 << 30), 1 << 30).add_(offset.to(torch.int32))
    index.clamp_(0, table.numel() - 1)
    return table.index_select(0, index.view(-1)).view(x.shape)


#: The largest ``|bias - lo|`` that :func:`gelu`'s int32 table index takes.
_INDEX_OFFSET_MAX = 1 << 29


def _gelu_of(x, gmul, gshift, omul, oshift):
    """GELU of ``x' = x + bias`` (float64 integers, overwritten), as int32."""
    t = _shift_f_(x * gmul, gshift).add_(257).clamp_(0, 513).to(torch.int32)
    phi = _PHI_ROM.index_select(0, t.view(-1)).view(x.shape)
    z = _shift_f_(x.mul_(omul), oshift).clamp_(-(1 << 23), (1 << 23) - 1)
    return _sat(_shift_f_(z.mul_(phi), 24), 8)


#: The widest GELU table :func:`_gelu_table` builds (entries, int32).
GELU_TABLE_MAX = 1 << 20
#: ``x' = x + bias`` of an int32 accumulator and an int32 bias.
_X_RANGE = (-(1 << 32), (1 << 32) - 2)


@functools.lru_cache(maxsize=64)
def _gelu_table(gmul, gshift, omul, oshift):
    """``(lo, table)``: GELU of every ``x'`` from ``lo`` on, ``table[i] = y(lo + i)``, such that
    every ``x'`` below ``lo`` gives ``table[0]`` and every one past the end the last entry;
    ``(None, None)`` where that takes more than :data:`GELU_TABLE_MAX` entries.

    Below the first ``x'`` whose index ``t`` reaches -256, phi is 0 and so is ``y``. From the
    first whose ``t`` reaches 256 on, phi is 2**16 and ``y`` a non-decreasing function of ``x'``
    (``z`` is, ``omul`` being unsigned), so past the first ``x'`` where it equals its value at
    the top of the range it stays there. Both ends are found by bisection.
    """
    def y(value):
        return int(_gelu_of(torch.tensor([[float(value)]], dtype=torch.float64),
                            gmul, gshift, omul, oshift))

    def t(value):
        return int(_shift_f_(torch.tensor([float(value) * gmul]), gshift))

    def first(low, high, reached):
        while low < high:
            middle = (low + high) // 2
            low, high = (low, middle) if reached(middle) else (middle + 1, high)
        return low

    bottom, top = _X_RANGE
    lo = first(bottom, top, lambda v: t(v) >= -256) - 1
    start = first(bottom, top, lambda v: t(v) >= 256)
    y_top = y(top)
    hi = first(start, top, lambda v: y(v) == y_top)
    if lo < bottom or hi - lo + 1 > GELU_TABLE_MAX:
        return None, None
    span = torch.arange(lo, hi + 1, dtype=torch.float64).unsqueeze(0)
    return lo, _gelu_of(span, gmul, gshift, omul, oshift).view(-1)


def _bit_length(v):
    """Exact bit length of each non-negative int64 (a priority encoder in the hardware)."""
    return ((v.unsqueeze(-1) >> torch.arange(63)) > 0).sum(dim=-1)


_RECIP = torch.tensor(RECIP_TABLE, dtype=torch.int64)
_RSQRT = torch.tensor(RSQRT_TABLE, dtype=torch.int64)
#: The exponential of every ``u = 4096 * M - t``, the table read, guard bits and rounded shift
#: folded in: ``rshift_round(EXP2_TABLE[u & 4095] << EXP2_GUARD, u >> 12)`` below the cutoff
#: and 0 at ``_U_CUTOFF`` (which every larger ``u`` reads).
_U_CUTOFF = EXP2_CUTOFF << SOFTMAX_FRAC
_EXP2_OF_U = torch.cat([
    rshift_round(torch.tensor(EXP2_TABLE * EXP2_CUTOFF) << EXP2_GUARD,
                 torch.arange(_U_CUTOFF) >> SOFTMAX_FRAC),
    torch.zeros(1, dtype=torch.int64)]).to(torch.int32)


def _exp2(t, m):
    """The exponentials of the logits ``t`` against the maxima ``m`` (int32, broadcast), by
    one lookup of ``u = 4096 * m - t`` (at least 0 wherever ``m`` covers ``t``)."""
    u = (m << SOFTMAX_FRAC) - t
    return _EXP2_OF_U.index_select(0, u.clamp_(max=_U_CUTOFF).view(-1)).view(u.shape)


def _logits(x, mask, mul, shift):
    """``t = clamp24(rshift_round(sat32(x + mask) * mul, shift))``, int32."""
    rows, n = x.shape
    x = _rows(x)
    mask = mask.to(torch.float64) if isinstance(mask, torch.Tensor) and mask.shape == (rows, n) \
        else _column(mask, n, "mask")
    a = x.add_(mask).clamp_(-(1 << 31), (1 << 31) - 1).mul_(mul)
    return _shift_f_(a, shift).clamp_(-(1 << 23), (1 << 23) - 1).to(torch.int32)


def _row_sums(e, m):
    """The running sums ``S = (S >> dM) + sum(e)`` over the beats of each row, int64: ``e``
    ``(rows, beats, cols)`` against the running maxima ``m`` ``(rows, beats + 1)``."""
    beat_sums = e.sum(dim=2)
    grow = (m[:, 1:] - m[:, :-1]).clamp_(max=63)
    total = beat_sums[:, 0]
    for beat in range(1, e.shape[1]):
        total = (total >> grow[:, beat]) + beat_sums[:, beat]
    return total


def softmax(x, *, mask=0, mul, shift, cols, row_len=None):
    """``PROB_SCALE * softmax`` (12 bits) over each row of ``x + mask``, a beat of ``cols``
    columns at a time.

    Columns at or past ``row_len`` (default: all ``N``) are padding: no probability, no effect.
    ``mask`` is a scalar, one value a column, or one row a row (``(rows, N)``: rows of programs
    with masks of their own, stacked).
    """
    _check_rows(x)
    rows, n = x.shape
    row_len = n if row_len is None else row_len
    if not 1 <= row_len <= min(n, MAX_ROW):
        raise ValueError(f"row_len must be from 1 to {min(n, MAX_ROW)}, not {row_len!r}")
    t = _logits(x, mask, mul, shift)
    # Beats of ``cols`` columns: the last one is filled with padding, which the hardware's
    # narrower last beat does not have but which changes no maximum and adds no exponential.
    beats = -(-n // cols)
    t = torch.nn.functional.pad(t, (0, beats * cols - n))
    t[:, row_len:] = -(1 << 23)
    t = t.view(rows, beats, cols)
    # The running maximum after each beat, then the sum of each beat's exponentials against
    # it, then the sum rescaled beat by beat.
    first = torch.full((rows, 1), -(1 << 15), dtype=torch.int32)
    one = 1 << SOFTMAX_FRAC
    m = torch.cummax(torch.cat([first, (t.amax(dim=2) + one - 1) >> SOFTMAX_FRAC], dim=1),
                     dim=1).values
    e = _exp2(t, m[:, 1:].unsqueeze(2))
    e.view(rows, -1)[:, row_len:] = 0
    total = _row_sums(e, m)
    # S holds the row's largest exponential, above 2**20, so k >= RECIP_BITS: the mantissa is
    # S shifted right (S < 2**32: its float64 exponent is its bit length).
    k = torch.frexp(total.to(torch.float64)).exponent.to(torch.int64) - 1
    mant = torch.where(k >= RECIP_BITS, total >> (k - RECIP_BITS).clamp(min=0),
                       total << (RECIP_BITS - k).clamp(min=0))
    recip = _RECIP[mant - (1 << RECIP_BITS)]
    e = _exp2(t, m[:, -1:].unsqueeze(2)).view(rows, -1)
    e[:, row_len:] = 0
    y = _shift_f_(e.to(torch.float64).mul_(recip.to(torch.float64).unsqueeze(1)),
                  (RECIP_SHIFT + k).unsqueeze(1))
    return y.clamp_(0, PROB_SCALE)[:, :n].to(torch.int32)


def prob_digits(y):
    """The two int8 digit planes ``(high, low)`` of softmax outputs ``y`` (0 to PROB_SCALE):
    ``y = high * 2**PROB_DIGIT_BITS + low``, each digit from 0 to 63."""
    y = torch.as_tensor(y)
    if y.numel() and (int(y.min()) < 0 or int(y.max()) > PROB_SCALE):
        raise ValueError(f"softmax outputs must be from 0 to {PROB_SCALE}, not "
                         f"{int(y.min())} to {int(y.max())}")
    y = y.to(torch.int64)
    return ((y >> PROB_DIGIT_BITS).to(torch.int8),
            (y & ((1 << PROB_DIGIT_BITS) - 1)).to(torch.int8))


def _rsqrt(d):
    """``(rsq, j)`` of each row's ``D`` (int64): ``D = m * 4**j`` with ``m`` in [256, 1024) and
    ``rsq = RSQRT_TABLE[m - 256]``; both 0 where ``D <= 0``."""
    j = torch.div(_bit_length(d) - 9, 2, rounding_mode="floor")
    m = torch.where(j >= 0, d >> (2 * j).clamp(min=0), d << (-2 * j).clamp(min=0))
    rsq = _RSQRT[(m - 256).clamp(0, 767)]
    return torch.where(d > 0, rsq, 0), torch.where(d > 0, j, 0)


def layernorm(x, *, bias=0, residual=None, xmul, rmul=0, vshift, gamma, beta, gshift, eps_n2,
              row_len=None):
    """int8 LayerNorm of ``(x + bias) + residual`` over each row, with per-column gamma, beta.

    Columns at or past ``row_len`` (default: all ``N``) are padding: they take no part in the
    statistics and their outputs are 0.
    """
    x = _rows(x)
    rows, n = x.shape
    row_len = n if row_len is None else row_len
    if not 1 <= row_len <= min(n, MAX_ROW):
        raise ValueError(f"row_len must be from 1 to {min(n, MAX_ROW)}, not {row_len!r}")
    if not 8 <= gshift <= GSHIFT_MAX:
        raise ValueError(f"gshift must be from 8 to {GSHIFT_MAX}, not {gshift!r}")
    if residual is not None and tuple(residual.shape) != (rows, n):
        raise ValueError(f"residual must have shape {(rows, n)}, not {tuple(residual.shape)}")
    v = x.add_(_column(bias, n, "bias")).mul_(xmul)
    if residual is not None and rmul:
        v.add_(residual.to(torch.float64).mul_(rmul))
    v = _shift_f_(v, vshift).clamp_(-(1 << 15), (1 << 15) - 1)
    v[:, row_len:] = 0
    s1 = v.sum(dim=1)
    s2 = (v * v).sum(dim=1)
    d = row_len * s2.to(torch.int64) - s1.to(torch.int64) ** 2 + int(eps_n2)
    rsq, j = _rsqrt(d)
    z = _shift_f_(v.mul_(row_len).sub_(s1.unsqueeze(1)).mul_(rsq.to(torch.float64).unsqueeze(1)),
                  (11 + j).unsqueeze(1))
    # rshift_round(z * gamma + beta * 2**(gshift - 8), gshift), whose addend can pass 2**53:
    # with z * gamma = q * 2**(gshift - 8) + r (0 <= r < 2**(gshift - 8)) the sum is
    # (q + beta + 128) * 2**(gshift - 8) + r, and r cannot carry it past a multiple of 2**gshift.
    q = z.mul_(_column(gamma, n, "gamma")).mul_(2.0 ** (8 - gshift)).floor_()
    y = q.add_(_column(beta, n, "beta")).add_(128).mul_(2.0 ** -8).floor_()
    y = _sat(y, 8)
    y[:, row_len:] = 0
    return y
