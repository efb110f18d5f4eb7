"""End to end: GEMMs compiled by the real driver, run on the RTL under Verilator.

Every result is compared bit for bit with the software device and with torch. Each config has
its own build folder; each runs free (to check cycle counts) and with idle cycles on both source
streams and backpressure on the output stream. Seeds are printed; rerun one test with
``pytest verif/system/test_gemm_rtl.py -k <id> -s`` to replay it.
"""

import dataclasses
import random

import pytest
import torch

from bertaccel.golden.ops import gemm as golden_gemm
from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice, compile_gemm
from bertaccel.sw.devices.rtl import RtlDevice
from verif.helpers import check_model_cycles

__all__ = []

#: The small core with a full-width epilogue, and two whose epilogue is narrow (4 lanes over
#: 8 columns). The 4x4 core, of the 2x2's kind, has its stages checked in the Amaranth
#: simulator (block/test_execute_stages.py) and its programs on the software device.
#: And the 2x2 core with three of its four PEs multiplying in the fabric (``lut_pes``: the
#: last column whole, a top and an inner PE, and the inner PE of the first), which must give
#: the same results in the same cycles.
CONFIGS = {**{name: PRESETS[name] for name in ("2x2", "4x8", "8x8")},
           "2x2-lut3": dataclasses.replace(PRESETS["2x2"], lut_pes=3)}
# (src_idle, sink_stall) out of 256: free-running, and about 30% idle / 40% backpressure.
STALLS = {"free": (0, 0), "stalled": (77, 102)}


@pytest.fixture(scope="module", params=list(CONFIGS))
def devices(request):
    cfg = CONFIGS[request.param]
    with RtlDevice(cfg, seed=1) as free, \
            RtlDevice(cfg, seed=2, src_idle=STALLS["stalled"][0],
                      sink_stall=STALLS["stalled"][1]) as stalled:
        yield cfg, {"free": free, "stalled": stalled}


def _operands(gen, m, k, n, kind="random"):
    if kind == "zeros":
        return torch.zeros(m, k, dtype=torch.int8), torch.zeros(k, n, dtype=torch.int8)
    if kind == "min":
        return torch.full((m, k), -128, dtype=torch.int8), torch.full((k, n), -128,
                                                                      dtype=torch.int8)
    a = torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8)
    b = torch.randint(-128, 128, (k, n), generator=gen, dtype=torch.int8)
    return a, b


def _check(cfg, device, m, k, n, a, b):
    program = compile_gemm(cfg, m, k, n)
    rtl = device.run(program, a=a, b=b)
    ref = SoftwareDevice(cfg).run(program, a=a, b=b)
    want = golden_gemm(a, b)
    assert torch.equal(ref.outputs["c"], want), f"software device != torch for {m}x{k}x{n}"
    assert torch.equal(rtl.outputs["c"], ref.outputs["c"]), \
        f"RTL != software device for {m}x{k}x{n} on {cfg.name}"
    assert rtl.cycles >= m * k * n / cfg.macs_per_cycle
    check_model_cycles(device, program, rtl, what=f"{m}x{k}x{n}")
    return program, rtl


def test_special_shapes(devices):
    cfg, devs = devices
    gen = torch.Generator().manual_seed(5)
    k_many = 37 * cfg.rows + 3                       # K spanning many tiles
    cases = [
        (1, 1, 1, "random"),
        (cfg.rows + 1, cfg.rows - 1, cfg.cols + 1, "random"),   # non-multiples everywhere
        (3, k_many, 2 * cfg.cols + 1, "random"),
        (2, 4096, 3, "min"),                          # -128 x -128 over K = 4096
        (cfg.rows * 3, cfg.rows * 2, cfg.cols * 2, "zeros"),
    ]
    for stall, device in devs.items():
        for m, k, n, kind in cases:
            a, b = _operands(gen, m, k, n, kind)
            _, result = _check(cfg, device, m, k, n, a, b)
            if kind == "min":
                assert torch.all(result.outputs["c"] == 4096 * 128 * 128)


@pytest.mark.parametrize("stall", list(STALLS))
def test_random_gemms(devices, stall):
    cfg, devs = devices
    seed = {"free": 100, "stalled": 200}[stall] + list(CONFIGS.values()).index(cfg)
    print(f"seed {seed}")
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    count = 40 if stall == "free" else 15
    for _ in range(count):
        limit = 6 * max(cfg.rows, cfg.cols)
        m, k, n = (rng.randint(1, limit) for _ in range(3))
        a, b = _operands(gen, m, k, n)
        _check(cfg, devs[stall], m, k, n, a, b)


def test_cycles_are_deterministic(devices):
    """A free-running run of the same program takes the same cycles every time."""
    cfg, devs = devices
    gen = torch.Generator().manual_seed(17)
    m, k, n = 3 * cfg.rows + 1, 4 * cfg.rows, 3 * cfg.cols - 1
    a, b = _operands(gen, m, k, n)
    program, first = _check(cfg, devs["free"], m, k, n, a, b)
    second = devs["free"].run(program, a=a, b=b)
    assert second.cycles == first.cycles
    stalled = devs["stalled"].run(program, a=a, b=b)
    assert torch.equal(stalled.outputs["c"], first.outputs["c"])
    assert stalled.cycles > first.cycles, "the stalled run should have lost cycles to stalls"
