"""The cycle model against the core in the Amaranth simulator: the quick tier's check of every
latency the model reads (:class:`bertaccel.hw.latencies.Latencies`).

Short programs run on the simulation harness (:class:`verif.tb.harness.AmaranthDevice`, no
Verilator build): each hand-written program of :func:`verif.tb.programs.hand_programs`, whose
timing turns on one latency or another (a queue's, a token's, the preload's, the accumulator's
drain, the store unit's read to the epilogue, the epilogue's schedule and two-pass gap, the
harness's first word and ``done``), and a small GEMM with each epilogue. A free-running run
must take exactly the model's cycles, a stalled run at least as many, and every output must
equal the software device's. So a latency changed in the gateware and not in its attribute
(or the other way round) fails here, without the slow tier's Verilator builds.
"""

import pytest
import torch

from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice
from verif.helpers import check_model_cycles, check_outputs
from verif.tb.harness import AmaranthDevice
from verif.tb.programs import gemm_case, hand_programs, raw_inputs, raw_program

__all__ = []

CFG = PRESETS["2x2"]
#: The hand programs too long for the Amaranth simulator (hundreds of tokens); the slow tier's
#: ``verif/system/test_cycles.py`` runs them on the Verilated RTL.
LONG = ("tokens_full", "exec_to_load_full", "exec_to_store_full")
#: Idle cycles on the sources and backpressure on the sink, in 256ths.
STALLS = {"src_idle": 77, "sink_stall": 102}
GEMMS = [(5, 6, 4, None), (3, 4, 6, "requant"), (4, 2, 4, "gelu"), (3, 6, 5, "softmax"),
         (4, 4, 6, "layernorm")]


@pytest.fixture(scope="module")
def devices():
    """A free-running and a stalled device, each a simulation for the whole module."""
    return AmaranthDevice(CFG, seed=1), AmaranthDevice(CFG, seed=2, **STALLS)


def _check(devices, reference, program, inputs, what):
    want = reference.run(program, **inputs)
    for device in devices:
        result = device.run(program, **inputs)
        check_outputs(result, want, what=f"{what}, stalls {device.src_idle}/{device.sink_stall}")
        check_model_cycles(device, program, result, what=what)


def test_hand_programs(devices):
    """Every short hand-written program, in one order on both devices and on the software
    device that checks them (the programs read memory they never write, so all three keep
    what the ones before left)."""
    reference = SoftwareDevice(CFG)
    for name, instrs in hand_programs(CFG).items():
        if name not in LONG:
            program = raw_program(CFG, instrs)
            _check(devices, reference, program, raw_inputs(program), name)


def test_gemms(devices):
    """A small GEMM with each epilogue (and none): the tiler's programs, tokens and SETs."""
    gen = torch.Generator().manual_seed(7)
    for m, k, n, op in GEMMS:
        program, inputs = gemm_case(CFG, m, k, n, op, gen)
        _check(devices, SoftwareDevice(CFG), program, inputs, f"{op or 'raw'} {m}x{k}x{n}")


def test_a_latency_off_by_one_is_caught(devices, monkeypatch):
    """The check is live: a model that takes the queue's latency one cycle longer than the
    gateware does disagrees with the simulated core."""
    from bertaccel.hw.latencies import Latencies
    from bertaccel.sw.cycles import CycleModel

    program = raw_program(CFG, hand_programs(CFG)["chain"])
    inputs = raw_inputs(program)
    result = devices[0].run(program, **inputs)
    assert CycleModel(CFG).run(program).cycles == result.cycles
    wrong = Latencies.of(CFG)
    monkeypatch.setattr(Latencies, "of", classmethod(
        lambda cls, cfg: cls(**{**wrong.__dict__, "queue": wrong.queue + 1})))
    with pytest.raises(AssertionError, match="cycle model"):
        check_model_cycles(devices[0], program, result, what="chain")
