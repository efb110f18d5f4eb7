"""golden/intops.py's epilogue ops equal their straight int64 transcription
(``verif/intops_int64.py``) bit for bit, on random operands over the whole range of every
register and field: int32 accumulators and biases, 16-bit multipliers, every shift, per-column
and per-row operands, padding, every beat width, and the extremes."""

import pytest
import torch

from bertaccel.golden import intops
from bertaccel.golden.intops import GSHIFT_MAX, SHIFT_MAX

from .. import intops_int64 as oracle

pytestmark = pytest.mark.usefixtures("one_thread")

INT32 = (-(1 << 31), (1 << 31) - 1)
CASES = range(40)


def draw(g, low, high, shape=()):
    return torch.randint(low, high + 1, shape, generator=g, dtype=torch.int64)


def accumulators(g, rows, n):
    """int32 values at every magnitude: each row drawn at a scale 2**0 to 2**31, some columns
    pinned at the int32 extremes."""
    scale = 2.0 ** draw(g, 0, 31, (rows, 1)).double()
    x = (torch.rand(rows, n, generator=g, dtype=torch.float64) * 2 - 1) * scale
    x = x.round().clamp(*INT32).to(torch.int64)
    pins = torch.rand(rows, n, generator=g) < 0.02
    return torch.where(pins, torch.where(torch.rand(rows, n, generator=g) < 0.5, *INT32), x)


def column_or_scalar(g, low, high, n):
    return draw(g, low, high, (n,)) if bool(draw(g, 0, 1)) else int(draw(g, low, high))


def same(fast, slow):
    assert fast.dtype == torch.int32
    assert torch.equal(fast.to(torch.int64), slow.to(torch.int64))


@pytest.mark.parametrize("case", CASES)
def test_requant(case):
    g = torch.Generator().manual_seed(case)
    n = int(draw(g, 1, 70))
    x = accumulators(g, 9, n)
    args = dict(bias=column_or_scalar(g, *INT32, n), mul=column_or_scalar(g, 0, (1 << 16) - 1, n),
                shift=column_or_scalar(g, 0, SHIFT_MAX, n))
    same(intops.requant(x, **args), oracle.requant(x, **args))


@pytest.mark.parametrize("case", CASES)
def test_gelu(case):
    g = torch.Generator().manual_seed(100 + case)
    n = int(draw(g, 1, 70))
    x = accumulators(g, 9, n)
    args = dict(bias=column_or_scalar(g, *INT32, n), gmul=int(draw(g, 0, (1 << 16) - 1)),
                gshift=int(draw(g, 0, SHIFT_MAX)), omul=int(draw(g, 0, (1 << 16) - 1)),
                oshift=int(draw(g, 0, SHIFT_MAX)))
    same(intops.gelu(x, **args), oracle.gelu(x, **args))


@pytest.mark.parametrize("case", CASES)
def test_gelu_in_range(case):
    # Scales as compiled (a window of a few thousand to a million accumulator values), biases
    # small enough for the table's int32 index, and accumulators at every magnitude.
    g = torch.Generator().manual_seed(150 + case)
    n = int(draw(g, 1, 70))
    x = accumulators(g, 9, n)
    gshift = int(draw(g, 16, 40))
    args = dict(bias=column_or_scalar(g, -(1 << 24), 1 << 24, n), gmul=int(draw(g, 1, 1 << 16)),
                gshift=gshift, omul=int(draw(g, 1, (1 << 16) - 1)),
                oshift=gshift + int(draw(g, -12, 4)))
    same(intops.gelu(x, **args), oracle.gelu(x, **args))


@pytest.mark.parametrize("case", CASES)
def test_softmax(case):
    g = torch.Generator().manual_seed(200 + case)
    rows, n = int(draw(g, 1, 12)), int(draw(g, 1, 300))
    x = accumulators(g, rows, n)
    kind = case % 3
    mask = (int(draw(g, *INT32)) if kind == 0 else
            draw(g, *INT32, (n,)) * (torch.rand(n, generator=g) < 0.3) if kind == 1 else
            draw(g, *INT32, (rows, n)) * (torch.rand(rows, n, generator=g) < 0.3))
    # Shifts that keep a spread of logits in range as well as ones that saturate them.
    args = dict(mask=mask, mul=int(draw(g, 0, (1 << 16) - 1)),
                shift=int(draw(g, 20, 40)) if case % 4 else int(draw(g, 0, SHIFT_MAX)),
                cols=int(draw(g, 1, 40)), row_len=int(draw(g, 1, n)))
    same(intops.softmax(x, **args), oracle.softmax(x, **args))


@pytest.mark.parametrize("case", CASES)
def test_softmax_of_logits_in_range(case):
    # Logits of a few octaves' spread, the rows a real attention produces, at every length.
    g = torch.Generator().manual_seed(300 + case)
    rows, n = 16, int(draw(g, 1, 1024))
    x = (torch.randn(rows, n, generator=g, dtype=torch.float64) * 4000 * (1 + case % 5)).round()
    args = dict(mul=int(draw(g, 1 << 15, (1 << 16) - 1)), shift=16, cols=(1, 4, 8, 16)[case % 4])
    same(intops.softmax(x.to(torch.int64), **args), oracle.softmax(x.to(torch.int64), **args))


@pytest.mark.parametrize("case", CASES)
def test_layernorm(case):
    g = torch.Generator().manual_seed(400 + case)
    rows, n = int(draw(g, 1, 9)), int(draw(g, 1, 400))
    x = accumulators(g, rows, n)
    args = dict(bias=column_or_scalar(g, *INT32, n), xmul=int(draw(g, 0, (1 << 16) - 1)),
                rmul=int(draw(g, 0, (1 << 32) - 1)), vshift=int(draw(g, 0, SHIFT_MAX)),
                gamma=draw(g, -(1 << 15), (1 << 15) - 1, (n,)),
                beta=draw(g, -(1 << 15), (1 << 15) - 1, (n,)),
                gshift=int(draw(g, 8, GSHIFT_MAX)), eps_n2=int(draw(g, 0, 1 << 40)) * (case % 2),
                row_len=int(draw(g, 1, n)),
                residual=draw(g, -128, 127, (rows, n)) if case % 3 else None)
    same(intops.layernorm(x, **args), oracle.layernorm(x, **args))


def test_layernorm_in_range():
    # Statistics that normalise (vshift chosen so v spreads over the 16 bits, as compiled).
    g = torch.Generator().manual_seed(500)
    x = (torch.randn(64, 384, generator=g, dtype=torch.float64) * 2 ** 20).round()
    for gshift in (8, 20, 33, GSHIFT_MAX):
        args = dict(xmul=40000, vshift=22, gamma=draw(g, -(1 << 15), (1 << 15) - 1, (384,)),
                    beta=draw(g, -(1 << 15), (1 << 15) - 1, (384,)), gshift=gshift, eps_n2=7)
        same(intops.layernorm(x.to(torch.int64), **args),
             oracle.layernorm(x.to(torch.int64), **args))
