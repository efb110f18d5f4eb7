"""Pure-Python tests of the bit-exact integer epilogue ops (golden/intops.py).

The ops are checked against float references (``torch.softmax``, ``F.layer_norm``, ``F.gelu``) in
units of the output LSB (1/4095 for the softmax's 12-bit probabilities). Rounding to the output
grid alone costs up to 0.5 LSB; the tolerances below are what was measured on these inputs plus a
small margin, and each says where the extra comes from.
"""

import itertools
import math
import random

import pytest
import torch
import torch.nn.functional as F

from bertaccel.golden.intops import (EXP2_TABLE, MAX_ROW, MUL_BITS, PHI_TABLE, PROB_DIGIT_BITS,
                                     PROB_SCALE, RECIP_TABLE, RSQRT_TABLE, SHIFT_MAX,
                                     SOFTMAX_FRAC, ScaleError, gelu, layernorm, prob_digits,
                                     quantize_scale, requant, rshift_round, softmax)

SEED = 1234
INT32_MIN, INT32_MAX = -2 ** 31, 2 ** 31 - 1
LOG2E = math.log2(math.e)


pytestmark = pytest.mark.usefixtures("one_thread")


def rows(values):
    return torch.tensor(values, dtype=torch.int64)


def gen(offset=0):
    print(f"seed {SEED + offset}")
    return torch.Generator().manual_seed(SEED + offset)


def round_half_up(v):
    return math.floor(v + 0.5)


# -- tables ------------------------------------------------------------------------------------

def test_exp2_table():
    assert len(EXP2_TABLE) == 4096 == 1 << SOFTMAX_FRAC
    assert EXP2_TABLE[0] == 2 ** 17
    assert all(a > b for a, b in itertools.pairwise(EXP2_TABLE))      # strictly decreasing
    assert all(2 ** 16 < e <= 2 ** 17 for e in EXP2_TABLE)
    assert all(abs(e - 2 ** 17 * 2 ** (-f / 4096)) <= 0.5 for f, e in enumerate(EXP2_TABLE))


def test_recip_table():
    assert len(RECIP_TABLE) == 8192
    assert all(a > b for a, b in itertools.pairwise(RECIP_TABLE))
    # 4095 * 2**18 / mant for mant in (8192, 16384): 17 bits, one MULT18X18D operand.
    assert 4095 * 2 ** 4 < RECIP_TABLE[-1] < RECIP_TABLE[0] < 4095 * 2 ** 5 < 2 ** 17
    assert all(abs(r - 4095 * 2 ** 18 / (8192 + i + 0.5)) <= 0.5
               for i, r in enumerate(RECIP_TABLE))


def test_rsqrt_table():
    assert len(RSQRT_TABLE) == 768
    assert all(a > b for a, b in itertools.pairwise(RSQRT_TABLE))
    assert 2 ** 18 < RSQRT_TABLE[-1] < RSQRT_TABLE[0] < 2 ** 19
    assert all(abs(r - 2 ** 23 / math.sqrt(256 + i + 0.5)) <= 0.5
               for i, r in enumerate(RSQRT_TABLE))


def test_phi_table():
    assert len(PHI_TABLE) == 512
    assert all(a <= b for a, b in itertools.pairwise(PHI_TABLE))         # non-decreasing
    assert PHI_TABLE[0] == 2                  # Phi(-4) * 2**16 = 2.08
    assert PHI_TABLE[256] == 2 ** 15          # Phi(0) = 1/2
    assert PHI_TABLE[-1] <= 2 ** 16 - 1
    # Phi(x) + Phi(-x) = 1, within the rounding of each entry.
    assert all(abs(PHI_TABLE[256 + i] + PHI_TABLE[256 - i] - 2 ** 16) <= 1 for i in range(1, 256))


def test_constants():
    assert MUL_BITS == 16 and SHIFT_MAX == 63 and MAX_ROW == 1024


# -- rshift_round ------------------------------------------------------------------------------

@pytest.mark.parametrize("v, s, expected", [
    (5, 0, 5), (-5, 0, -5),
    (1, 1, 1), (-1, 1, 0),          # +-0.5: half up
    (3, 1, 2), (-3, 1, -1),         # +-1.5
    (5, 1, 3), (-5, 1, -2),         # +-2.5: half up, not to even
    (2, 2, 1), (-2, 2, 0),          # +-0.5
    (6, 2, 2), (-6, 2, -1),         # +-1.5
    (1, 2, 0), (-1, 2, 0), (3, 2, 1), (-3, 2, -1),
    (2 ** 40 + 2 ** 19, 20, 2 ** 20 + 1), (-(2 ** 40) - 2 ** 19, 20, -(2 ** 20)),
    (2 ** 61, 62, 1), (2 ** 61 - 1, 62, 0), (-(2 ** 61), 62, 0), (-(2 ** 61) - 1, 62, -1),
])
def test_rshift_round_half_up(v, s, expected):
    assert rshift_round(rows([v]), s).item() == expected
    assert rshift_round(rows([v]), rows([s])).item() == expected


def test_rshift_round_matches_python():
    rng = random.Random(SEED)
    vs = [rng.randrange(-2 ** 62, 2 ** 62) >> rng.randrange(0, 62) for _ in range(2000)]
    ss = [rng.randrange(0, 63) for _ in vs]
    got = rshift_round(rows(vs), rows(ss)).tolist()
    assert got == [(v + ((1 << s) >> 1)) >> s for v, s in zip(vs, ss)]


def test_rshift_round_shift_63():
    # The half is 2**(s-1): s == 63 does not wrap (a half of 2**63 >> 1 formed in int64 would).
    assert rshift_round(rows([0, 5, 2 ** 61]), 63).tolist() == [0, 0, 0]


# -- quantize_scale ----------------------------------------------------------------------------

@pytest.mark.parametrize("scale, words", [
    (0, "above 0"), (0.0, "above 0"), (-1.0, "above 0"), (-1e-9, "above 0"),
    (float("nan"), "above 0"), (float("inf"), "above 0"), (float("-inf"), "above 0"),
    (True, "above 0"), ("1.0", "above 0"), (None, "above 0"),
    (65535.5, "too large"), (1e6, "too large"),
    (1e-30, "too small"), (2.0 ** -65, "too small"), (2.0 ** -64, "too small"),
])
def test_quantize_scale_errors(scale, words):
    with pytest.raises(ScaleError, match=words) as info:
        quantize_scale(scale, name="my scale")
    assert isinstance(info.value, ValueError)
    assert "my scale" in str(info.value) and repr(scale) in str(info.value)


def test_quantize_scale_precision():
    rng = random.Random(SEED)
    worst = 0.0
    for _ in range(5000):
        scale = 10 ** rng.uniform(-15, math.log10(65535))
        mul, shift = quantize_scale(scale)
        assert 0 < mul < 2 ** MUL_BITS and 0 <= shift <= SHIFT_MAX
        error = abs(mul / 2 ** shift - scale) / scale
        if 0 < shift < SHIFT_MAX:
            assert mul >= 2 ** 15            # normalised: all 16 bits used
            worst = max(worst, error)
        else:
            # Above 2**15 the shift is 0; below 2**-48 it stops at 63 and bits are lost.
            assert error <= 0.5 / mul
    # Half a unit of a 16-bit mantissa at worst (measured 1.5e-5).
    assert worst <= 2 ** -16


@pytest.mark.parametrize("scale, expected", [
    (1.0, (32768, 15)), (0.5, (32768, 16)), (2.0 ** -40, (32768, 55)), (3.0, (49152, 14)),
    (65535.0, (65535, 0)), (65535.49, (65535, 0)), (40000.0, (40000, 0)), (32768.0, (32768, 0)),
    (2.0 ** -48, (65536 // 2, 63)), (2.0 ** -64 * 1.01, (1, 63)), (2.0 ** -63, (1, 63)),
])
def test_quantize_scale_exact(scale, expected):
    assert quantize_scale(scale) == expected


# -- requant -----------------------------------------------------------------------------------

def test_requant_saturates_at_both_ends():
    x = rows([[INT32_MAX, INT32_MIN, 2 ** 20, -(2 ** 20), 0]])
    assert requant(x, mul=65535, shift=0).tolist() == [[127, -128, 127, -128, 0]]
    # 127.5 rounds up to 128 and saturates; -128.5 rounds up to -128 and stays.
    assert requant(rows([[255, 256, -257, -258]]), mul=1, shift=1).tolist() == \
        [[127, 127, -128, -128]]
    assert requant(rows([[253, -255, -256]]), mul=1, shift=1).tolist() == [[127, -127, -128]]


def test_requant_rounds_half_up():
    x = rows([[1, -1, 3, -3, 5, -5, 2, -2]])
    assert requant(x, mul=1, shift=1).tolist() == [[1, 0, 2, -1, 3, -2, 1, -1]]
    assert requant(x, bias=1, mul=1, shift=1).tolist() == [[1, 0, 2, -1, 3, -2, 2, 0]]


def test_requant_matches_python():
    rng = random.Random(SEED)
    m, n = 8, 16
    x = [[rng.randrange(-2 ** 31, 2 ** 31) for _ in range(n)] for _ in range(m)]
    bias = [rng.randrange(-2 ** 20, 2 ** 20) for _ in range(n)]
    mul = [rng.randrange(1, 2 ** 16) for _ in range(n)]
    shift = [rng.randrange(20, 48) for _ in range(n)]
    got = requant(rows(x), bias=rows(bias), mul=rows(mul), shift=rows(shift)).tolist()
    want = [[max(-128, min(127, round_half_up((v + b) * k / 2 ** s)))
             for v, b, k, s in zip(row, bias, mul, shift)] for row in x]
    assert got == want
    assert requant(rows(x), mul=mul[0], shift=shift[0]).dtype == torch.int32


def test_requant_bad_shapes():
    with pytest.raises(ValueError, match="2-D"):
        requant(rows([1, 2]), mul=1, shift=0)
    with pytest.raises(ValueError, match="mul"):
        requant(rows([[1, 2]]), mul=rows([1, 2, 3]), shift=0)


# -- GELU --------------------------------------------------------------------------------------

def gelu_params(s_in, s_out):
    gmul, gshift = quantize_scale(s_in * 64)
    omul, oshift = quantize_scale(s_in / s_out * 256)
    return {"gmul": gmul, "gshift": gshift, "omul": omul, "oshift": oshift}


def gelu_ref(x, s_in, s_out):
    return (F.gelu(x.double() * s_in) / s_out).clamp(-128, 127)


def test_gelu_saturates_at_both_ends():
    s_in, s_out = 1e-3, 0.02
    x = rows([[INT32_MAX, 10 ** 6, 2 ** 20, INT32_MIN, -(10 ** 6), -(2 ** 20)]])
    assert gelu(x, **gelu_params(s_in, s_out)).tolist() == [[127, 127, 127, 0, 0, 0]]
    # GELU's minimum, -0.17 at x = -0.75, is below -128 LSB once the output LSB is under 1/750.
    x = rows([[-750, -1000, -500]])
    assert gelu(x, **gelu_params(1e-3, 1e-3)).tolist() == [[-128, -128, -128]]


def test_gelu_near_zero():
    s_in, s_out = 1 / 4096, 1 / 1024
    x = torch.arange(-64, 65).view(1, -1)         # |x| <= 1/64: GELU(x) ~ x / 2
    y = gelu(x, **gelu_params(s_in, s_out))
    assert y[0, 64] == 0
    assert (y - gelu_ref(x, s_in, s_out)).abs().max() <= 0.5 + 1e-3


@pytest.mark.parametrize("s_in, s_out, tol", [
    # Coarse output LSBs (as in a real network, max|GELU| / 127): rounding only (measured 0.53).
    (1e-4, 0.05, 0.55),
    (3e-5, 0.1, 0.55),
    # Finer output LSBs expose the 1/64 step of the Phi table index: up to |x| phi(x) / 128 /
    # s_out more (measured 0.58, 0.77).
    (1e-3, 0.02, 0.62),
    (1e-2, 0.005, 0.8),
])
def test_gelu_matches_float(s_in, s_out, tol):
    x = (torch.randn(32, 512, generator=gen(), dtype=torch.float64) * 3 / s_in).round()
    x = x.clamp(INT32_MIN, INT32_MAX).to(torch.int64)
    y = gelu(x, **gelu_params(s_in, s_out))
    assert y.dtype == torch.int32
    assert (y - gelu_ref(x, s_in, s_out)).abs().max() <= tol


def test_gelu_sweep_fine_output():
    # Every accumulator value in [-8, 8) at 1/1024, output LSB 1/256: worst case of the Phi
    # index step (measured 0.947 at x = -1.24, where |x| phi(x) is largest).
    s_in, s_out = 1 / 1024, 1 / 256
    x = torch.arange(-8 * 1024, 8 * 1024).view(1, -1)
    y = gelu(x, **gelu_params(s_in, s_out))
    assert (y - gelu_ref(x, s_in, s_out)).abs().max() <= 0.96
    assert y.max() == 127 and y.min() == round(-0.17 * 256)


def test_gelu_bias():
    p = gelu_params(1e-3, 0.02)
    x = rows([[0, 100, -100, 5000]])
    bias = rows([1000, -100, 2000, 0])
    assert torch.equal(gelu(x, bias=bias, **p), gelu(x + bias, **p))


# -- softmax -----------------------------------------------------------------------------------

def softmax_params(s_x):
    mul, shift = quantize_scale(s_x * LOG2E * (1 << SOFTMAX_FRAC))
    return {"mul": mul, "shift": shift}


def softmax_ref(x, s_x, row_len=None):
    row_len = x.shape[1] if row_len is None else row_len
    return torch.softmax(x[:, :row_len].double() * s_x, dim=-1) * PROB_SCALE


@pytest.mark.parametrize("n", [1, 2, 3, 4, 7, 8, 9, 16, 127, 128, 1000, 1024])
def test_softmax_all_equal_is_uniform(n):
    for value in (0, 12345, INT32_MIN, INT32_MAX):
        y = softmax(torch.full((2, n), value), cols=32, **softmax_params(1e-3))
        assert (y == y[0, 0]).all()
        assert abs(y[0, 0].item() - PROB_SCALE / n) <= 0.5 + 1e-9


def test_softmax_one_huge_logit():
    x = torch.zeros(3, 40, dtype=torch.int64)
    for row, col in enumerate((0, 17, 39)):
        x[row, col] = 20_000                       # 20 nats above the rest at s_x = 1e-3
    y = softmax(x, cols=8, **softmax_params(1e-3))
    expected = torch.zeros_like(y)
    expected[[0, 1, 2], [0, 17, 39]] = PROB_SCALE
    assert torch.equal(y, expected)


def test_softmax_every_position_masked_but_one():
    x = torch.randint(-10 ** 6, 10 ** 6, (4, 24), generator=gen())
    for keep in (0, 5, 23):
        mask = torch.full((24,), INT32_MIN)
        mask[keep] = 0
        y = softmax(x, mask=mask, cols=8, **softmax_params(1e-4))
        assert (y[:, keep] == PROB_SCALE).all()
        assert y.sum() == 4 * PROB_SCALE


def test_softmax_row_length_one():
    x = torch.randint(INT32_MIN, INT32_MAX, (5, 16), generator=gen())
    y = softmax(x, cols=8, row_len=1, **softmax_params(1e-3))
    assert (y[:, 0] == PROB_SCALE).all() and (y[:, 1:] == 0).all()
    y = softmax(x[:, :1], cols=8, **softmax_params(1e-3))
    assert (y == PROB_SCALE).all()


def test_softmax_extreme_int32_inputs():
    p = softmax_params(1e-3)
    y = softmax(rows([[INT32_MAX, INT32_MIN, 0, INT32_MIN]]), cols=2, **p)
    assert y.tolist() == [[PROB_SCALE, 0, 0, 0]]
    # The mask saturates into int32 and cannot wrap a very negative logit to a positive one.
    y = softmax(rows([[INT32_MIN, INT32_MAX, INT32_MAX]]), mask=rows([INT32_MIN, 0, INT32_MIN]),
                cols=8, **p)
    assert y.tolist() == [[0, PROB_SCALE, 0]]
    # Logits within the clamp of t (2**11 log2 units, 1419 nats) keep their differences ...
    x = rows([[10 ** 6, 10 ** 6 - 2000]])
    assert torch.allclose(softmax(x, cols=8, **p).double(), softmax_ref(x, 1e-3), atol=0.5)
    # ... and beyond it they saturate and tie (softmax is shift-invariant, t is not).
    assert softmax(rows([[10 ** 9, 10 ** 9 - 2000]]), cols=8, **p).tolist() == [[2047, 2047]]


@pytest.mark.parametrize("cols", [1, 3, 8, 32])
def test_softmax_padding_columns(cols):
    x = torch.randint(-5000, 5000, (6, 50), generator=gen(cols), dtype=torch.int64)
    p = softmax_params(1e-3)
    y = softmax(x, cols=cols, row_len=37, **p)
    assert (y[:, 37:] == 0).all()
    # Padding takes no part: what is there does not matter ...
    x2 = x.clone()
    x2[:, 37:] = INT32_MAX
    assert torch.equal(softmax(x2, cols=cols, row_len=37, **p), y)
    # ... and a mask of -2**31 on the same columns is the same thing.
    mask = torch.where(torch.arange(50) < 37, 0, INT32_MIN)
    assert torch.equal(softmax(x, mask=mask, cols=cols, **p), y)


def test_softmax_bad_row_len():
    x = torch.zeros(1, 8, dtype=torch.int64)
    for row_len in (0, 9):
        with pytest.raises(ValueError, match="row_len"):
            softmax(x, cols=8, row_len=row_len, mul=1, shift=0)
    with pytest.raises(ValueError, match="row_len"):
        softmax(torch.zeros(1, MAX_ROW + 1, dtype=torch.int64), cols=8, mul=1, shift=0)


@pytest.mark.parametrize("n", [2, 7, 9, 64, 128, 384, 512, 1024])
def test_softmax_matches_float_and_invariants(n):
    # Measured at most 0.64 LSB (of 1/4095) on these rows: the 0.5 of rounding, the logit's
    # 2**-12 steps and the reciprocal's 13-bit mantissa.
    s_x = 1e-3
    g = gen(n)
    for sd in (0.5, 2.0, 5.0):                     # logit spread, in nats
        x = (torch.randn(32, n, generator=g, dtype=torch.float64) * sd / s_x).round()
        x = x.to(torch.int64)
        y = softmax(x, cols=8, **softmax_params(s_x))
        ref = softmax_ref(x, s_x)
        assert y.dtype == torch.int32
        assert y.min() >= 0 and y.max() <= PROB_SCALE
        assert (y - ref).abs().max() <= 0.7
        # Row sums: 4095 give or take each element's rounding.
        assert ((y.sum(dim=1) - PROB_SCALE).abs() <= 0.1 * n + 2).all()


def test_softmax_cols_barely_matter():
    s_x = 1e-3
    x = (torch.randn(64, 200, generator=gen(), dtype=torch.float64) * 3 / s_x).round()
    x = x.to(torch.int64)
    one_beat = softmax(x, cols=256, **softmax_params(s_x))
    for cols in (1, 2, 8, 16, 32):
        y = softmax(x, cols=cols, **softmax_params(s_x))
        # The online maximum only loses the low bits of the running sum when it grows.
        assert (y - one_beat).abs().max() <= 1
        assert (y != one_beat).double().mean() < 0.01


def long_tail_row(gap):
    """One key, then 1023 keys ``gap + 1/2`` octaves below it (logits in log2 units / 4096)."""
    one = 1 << SOFTMAX_FRAC
    return rows([[0] + [-gap * one - one // 2] * 1023])


@pytest.mark.parametrize("gap", range(10, 24))
def test_softmax_long_tail(gap):
    # A long tail of tiny probabilities adds up: 1023 keys 12 octaves down hold 20 % of the
    # row. The exponentials keep 4 guard bits below the table's and are rounded, not
    # truncated, down to 23 octaves, so the sum and with it the largest probability hold:
    # measured at most 0.85 LSB over these gaps.
    x = long_tail_row(gap)
    y = softmax(x, cols=8, mul=1, shift=0)
    ref = torch.softmax(x.double() / (1 << SOFTMAX_FRAC) * math.log(2), dim=-1) * PROB_SCALE
    assert (y - ref).abs().max() <= 0.9


def test_prob_digits():
    y = torch.arange(PROB_SCALE + 1).view(64, 64)
    high, low = prob_digits(y)
    assert high.dtype == low.dtype == torch.int8
    assert 0 <= int(high.min()) and int(high.max()) == 63 and int(low.max()) == 63
    assert torch.equal((high.long() << PROB_DIGIT_BITS) + low.long(), y)
    for bad in (-1, PROB_SCALE + 1):
        with pytest.raises(ValueError, match="softmax outputs"):
            prob_digits(torch.tensor([[0, bad]]))


# -- LayerNorm ---------------------------------------------------------------------------------

def ln_params(g, n, gamma_lsb, beta_lsb):
    """int16 gamma with the largest gshift that fits it, and beta in 1/256 LSB."""
    gshift = 8
    while (gamma_lsb * 2.0 ** (gshift + 1 - 12)).round().abs().max() < 2 ** 15:
        gshift += 1
    gamma = (gamma_lsb * 2.0 ** (gshift - 12)).round().to(torch.int64)
    beta = (beta_lsb * 256).round().to(torch.int64)
    return gamma, beta, gshift


def ln_ref(v, gamma, beta, gshift, eps=0.0):
    n = v.shape[1]
    return F.layer_norm(v.double(), (n,), gamma.double() * 2.0 ** (12 - gshift),
                        beta.double() / 256, eps=eps).clamp(-128, 127)


@pytest.mark.parametrize("eps_n2", [0, 10 ** 6])
def test_layernorm_constant_row_is_beta(eps_n2):
    n = 16
    beta = torch.arange(-8, 8) * 2000 + 77         # -62.7 .. 54.4 LSB
    x = torch.full((3, n), 123_456)
    x[1] = INT32_MIN
    x[2] = 0
    y = layernorm(x, xmul=1, vshift=8, gamma=1000, beta=beta, gshift=16, eps_n2=eps_n2)
    want = [round_half_up(b / 256) for b in beta.tolist()]
    assert y.tolist() == [want] * 3


def test_layernorm_extreme_inputs():
    n = 8
    gamma = torch.full((n,), 2 ** 14)               # 2**14 * 2**(12 - 22) = 16 LSB per unit
    beta = torch.full((n,), 3 * 256)
    x = rows([[INT32_MAX, INT32_MIN] * (n // 2)])
    r = rows([[127, -128] * (n // 2)])
    # x * xmul and r * rmul both saturate v to the int16 limits: normalised +-1 (almost: the
    # limits are 32767 and -32768).
    y = layernorm(x, residual=r, xmul=2 ** 16 - 1, rmul=2 ** 32 - 1, vshift=0, gamma=gamma,
                  beta=beta, gshift=22, eps_n2=0)
    assert y.tolist() == [[19, -13] * (n // 2)]
    v = rows([[32767, -32768] * (n // 2)])
    assert (y - ln_ref(v, gamma, beta, 22)).abs().max() <= 0.5 + 1e-3
    # Large gamma saturates at both ends.
    y = layernorm(x, xmul=1, vshift=0, gamma=2 ** 15 - 1, beta=0, gshift=8, eps_n2=0)
    assert y.tolist() == [[127, -128] * (n // 2)]


@pytest.mark.parametrize("row_len", [1, 2, 5, 96])
def test_layernorm_row_len(row_len):
    n = 96
    g = gen(row_len)
    x = torch.randint(-10 ** 6, 10 ** 6, (4, n), generator=g)
    r = torch.randint(-128, 128, (4, n), generator=g)
    gamma = torch.randint(-3000, 3000, (n,), generator=g)
    beta = torch.randint(-5000, 5000, (n,), generator=g)
    kw = {"xmul": 3000, "rmul": 10 ** 6, "vshift": 16, "gshift": 14, "eps_n2": 5}
    y = layernorm(x, bias=7, residual=r, gamma=gamma, beta=beta, row_len=row_len, **kw)
    assert (y[:, row_len:] == 0).all()
    short = layernorm(x[:, :row_len], bias=7, residual=r[:, :row_len], gamma=gamma[:row_len],
                      beta=beta[:row_len], **kw)
    assert torch.equal(y[:, :row_len], short)
    if row_len == 1:                               # a row of one is constant: beta
        assert y[:, 0].tolist() == [round_half_up(beta[0].item() / 256)] * 4


@pytest.mark.parametrize("n, spread", [(16, 3000), (64, 50), (384, 1000), (768, 20000),
                                       (1024, 5)])
def test_layernorm_matches_float(n, spread):
    g = gen(n)
    v = (torch.randn(32, n, generator=g, dtype=torch.float64) * spread).round()
    v = v.clamp(-32768, 32767).to(torch.int64)
    gamma, beta, gshift = ln_params(g, n, torch.rand(n, generator=g, dtype=torch.float64) * 2 + 0.2,
                                    torch.randn(n, generator=g, dtype=torch.float64) * 10)
    y = layernorm(v, xmul=1, vshift=0, gamma=gamma, beta=beta, gshift=gshift, eps_n2=0)
    assert y.dtype == torch.int32
    # Rounding to the grid, plus the 8-bit mantissa of RSQRT_TABLE's index (measured 0.502).
    assert (y - ln_ref(v, gamma, beta, gshift)).abs().max() <= 0.52


def test_layernorm_eps():
    # A row whose variance is comparable to eps: eps_n2 = eps (in v units squared) * N**2.
    n = 64
    v = (torch.randn(8, n, generator=gen(), dtype=torch.float64) * 4).round().to(torch.int64)
    gamma, beta, gshift = ln_params(None, n, torch.full((n,), 40.0), torch.zeros(n))
    eps = 16.0
    y = layernorm(v, xmul=1, vshift=0, gamma=gamma, beta=beta, gshift=gshift,
                  eps_n2=round(eps * n * n))
    assert (y - ln_ref(v, gamma, beta, gshift, eps=eps)).abs().max() <= 0.52


def test_layernorm_bad_arguments():
    x = torch.zeros(2, 8, dtype=torch.int64)
    kw = {"xmul": 1, "vshift": 0, "gamma": 1, "beta": 0, "eps_n2": 0}
    for row_len in (0, 9):
        with pytest.raises(ValueError, match="row_len"):
            layernorm(x, gshift=8, row_len=row_len, **kw)
    with pytest.raises(ValueError, match="gshift"):
        layernorm(x, gshift=7, **kw)
    with pytest.raises(ValueError, match="residual"):
        layernorm(x, gshift=8, residual=torch.zeros(2, 7, dtype=torch.int64), **kw)
    with pytest.raises(ValueError, match="gamma"):
        layernorm(x, gshift=8, **dict(kw, gamma=rows([1, 2])))


def test_layernorm_large_gshift():
    # Every gshift the 6-bit SHIFT1 register holds: beta * 2**(gshift - 8) passes int64 at
    # 57 and float64's integers far sooner, and the result is still exact.
    x = rows([[1000, -1000, 500, -500]])
    with pytest.raises(ValueError, match="gshift must be from 8 to 63"):
        layernorm(x, xmul=1, vshift=0, gamma=1, beta=2 ** 15 - 1, gshift=64, eps_n2=0)
    for gshift in (48, 57, 63):
        y = layernorm(x, xmul=1, vshift=0, gamma=1, beta=2 ** 15 - 1, gshift=gshift, eps_n2=0)
        assert y.tolist() == [[127] * 4]            # beta = 128 LSB; gamma is negligible
        y = layernorm(x, xmul=1, vshift=0, gamma=-(2 ** 15), beta=-(2 ** 15), gshift=gshift,
                      eps_n2=0)
        assert y.tolist() == [[-128] * 4]
