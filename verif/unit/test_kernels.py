"""The exact int8 GEMM kernels (golden/kernels.py): every kernel equal, bit for bit, to the int64
product wrapped to int32 and to each other, on random shapes, on extreme operands and for ``K``
up to 4096 and past int32's range; the instruction-level software device equal to the golden GEMM
on each; and the choice by environment variable or measurement."""

import os
import subprocess
import sys

import pytest
import torch

from bertaccel.golden import kernels, ops
from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice, gemm

SEED = 11


def _wrapped(a, b):
    """The int64 product of ``a`` and ``b``, wrapped to int32 as an int32 accumulator does."""
    exact = a.long() @ b.long()
    return ((exact + (1 << 31)) % (1 << 32) - (1 << 31)).int()


@pytest.fixture
def use_kernel(monkeypatch):
    """Select a kernel for one test by the environment variable, as a user would."""
    def use(name):
        monkeypatch.setenv(kernels.ENV, name)
        monkeypatch.setattr(kernels, "_chosen", None)
        assert kernels.kernel() == name
    yield use


SHAPES = [(1, 1, 1), (3, 5, 7), (17, 1023, 9), (16, 1024, 16), (5, 1025, 3), (33, 2049, 31),
          (4, 4096, 6), (128, 384, 64)]


@pytest.mark.parametrize("name", list(kernels.KERNELS))
@pytest.mark.parametrize("m,k,n", SHAPES)
def test_random_operands(name, m, k, n):
    gen = torch.Generator().manual_seed(SEED + m * k * n)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=gen)
    b = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=gen)
    assert torch.equal(kernels.KERNELS[name](a, b), _wrapped(a, b))


@pytest.mark.parametrize("name", list(kernels.KERNELS))
@pytest.mark.parametrize("k", [1, 1024, 1025, 4096])
@pytest.mark.parametrize("low,high", [(-128, -128), (127, 127), (-128, 127)])
def test_extreme_operands(name, k, low, high):
    """All -128 times all -128 gives the largest partial sums (``k * 2**14``), the float32
    chunk's exact limit at ``k = 1024``."""
    a = torch.full((3, k), low, dtype=torch.int8)
    b = torch.full((k, 2), high, dtype=torch.int8)
    got = kernels.KERNELS[name](a, b)
    assert got.dtype == torch.int32
    assert torch.equal(got, torch.full((3, 2), k * low * high, dtype=torch.int32))


@pytest.mark.parametrize("name", list(kernels.KERNELS))
def test_sums_wrap_modulo_2_32(name):
    """Past ``2**31`` the sum wraps as the accumulator's does: 140,000 products of 2**14."""
    k = 140_000
    a = torch.full((2, k), -128, dtype=torch.int8)
    b = torch.full((k, 2), -128, dtype=torch.int8)
    want = (k << 14) - (1 << 32)
    assert torch.equal(kernels.KERNELS[name](a, b), torch.full((2, 2), want, dtype=torch.int32))


def test_batched_float32_kernel():
    gen = torch.Generator().manual_seed(SEED)
    a = torch.randint(-128, 128, (3, 5, 1500), dtype=torch.int8, generator=gen)
    b = torch.randint(-128, 128, (3, 1500, 4), dtype=torch.int8, generator=gen)
    want = torch.stack([_wrapped(x, y) for x, y in zip(a, b)])
    assert torch.equal(kernels.KERNELS["float32"](a, b), want)


@pytest.mark.parametrize("name", list(kernels.KERNELS))
@pytest.mark.parametrize("config", ["2x2", "4x8"])
def test_software_device_on_each_kernel(use_kernel, name, config):
    """The instruction-level device (its tiles through the kernel) equals the golden GEMM of the
    int64 reference, with ``K`` past one float32 chunk."""
    use_kernel(name)
    gen = torch.Generator().manual_seed(SEED)
    a = torch.randint(-128, 128, (9, 1100), dtype=torch.int8, generator=gen)
    b = torch.randint(-128, 128, (1100, 6), dtype=torch.int8, generator=gen)
    want = _wrapped(a, b)
    assert torch.equal(ops.gemm(a, b), want)
    assert torch.equal(gemm(SoftwareDevice(PRESETS[config]), a, b).outputs["c"], want)


def test_high_rows_on_each_kernel(use_kernel):
    """``k_high`` rows shift their products by the probability digit's bits on every kernel."""
    gen = torch.Generator().manual_seed(SEED)
    a = torch.randint(-128, 128, (6, 40), dtype=torch.int8, generator=gen)
    b = torch.randint(-128, 128, (40, 5), dtype=torch.int8, generator=gen)
    results = []
    for name in kernels.KERNELS:
        use_kernel(name)
        results.append(ops.gemm(a, b, k_high=15))
    high = _wrapped(a[:, :15], b[:15]).long() << 6
    assert torch.equal(results[0], (high + _wrapped(a[:, 15:], b[15:])).int())
    assert all(torch.equal(r, results[0]) for r in results)


def test_choice_by_measurement(monkeypatch):
    """Unset (or ``auto``), the kernel is the one the probe measured fastest, chosen once."""
    monkeypatch.setattr(kernels, "_chosen", None)
    monkeypatch.setenv(kernels.ENV, "auto")
    monkeypatch.setattr(kernels, "probe",
                        lambda: {"int_mm": 3.0, "float32": 1.0, "float64": 2.0})
    assert kernels.kernel() == "float32"
    monkeypatch.setattr(kernels, "probe", lambda: pytest.fail("the probe ran twice"))
    assert kernels.kernel() == "float32"
    assert kernels.describe()["gemm_kernel"] == "float32"


def test_probe_times_every_kernel():
    seconds = kernels.probe(repeats=1)
    assert set(seconds) == set(kernels.KERNELS)
    assert all(s > 0 for s in seconds.values())


def test_bad_kernel_name(monkeypatch):
    monkeypatch.setattr(kernels, "_chosen", None)
    monkeypatch.setenv(kernels.ENV, "int4")
    with pytest.raises(kernels.KernelError, match="BERTACCEL_GEMM_KERNEL must be auto or one of "
                                                  "int_mm, float32, float64, not 'int4'"):
        kernels.kernel()


def test_describe_names_the_cpu():
    info = kernels.describe()
    assert set(info) == {"cpu", "isa", "cores", "threads", "gemm_kernel"}
    assert info["cpu"] and info["isa"]
    assert info["gemm_kernel"] in kernels.KERNELS


def test_cli_refuses_a_bad_kernel_name():
    """One line and exit status 2, before any work."""
    env = {**os.environ, kernels.ENV: "int4"}
    result = subprocess.run([sys.executable, "-m", "bertaccel.cli", "gemm", "--config", "2x2",
                             "--m", "2", "--k", "2", "--n", "2"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 2
    assert result.stderr == ("bertaccel: error: BERTACCEL_GEMM_KERNEL must be auto or one of "
                             "int_mm, float32, float64, not 'int4'\n")
    assert result.stdout == ""


def test_gemm_report_names_the_machine():
    from bertaccel.sw.checked_gemm import run_gemm
    report = run_gemm(PRESETS["2x2"], 3, 4, 5)
    assert report["bit_exact"]
    assert report["machine"]["gemm_kernel"] == kernels.kernel()


def test_select(monkeypatch):
    monkeypatch.setattr(kernels, "_chosen", None)
    monkeypatch.setenv(kernels.ENV, "float64")
    kernels.select("float32")
    assert kernels.kernel() == "float32"
    kernels.select(None)
    assert kernels.kernel() == "float64"
    with pytest.raises(kernels.KernelError, match="must be one of int_mm, float32, float64, "
                                                  "not 'int16'"):
        kernels.select("int16")
