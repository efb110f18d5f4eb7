"""Programs that close the functional coverage (verif/funcov.py) on the whole core.

The rest of the suite runs its programs free-running or with idle input cycles and output
backpressure together; here a GEMM with each epilogue runs with only one of the two, and a
hand-written program reaches the corners the compiler never emits: scratchpad rows at the end
of the memory, MATMULs with ``shift`` (accumulating and not), and the store-to-execute
channel filled to its limit. Each run is bit-exact with the software device and keeps the
cycle model's relation.
"""

import pytest
import torch

from bertaccel.hw import isa
from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice, compile_gemm
from bertaccel.sw import epilogue as ep_mod
from bertaccel.sw.hand_programs import raw_program
from verif.helpers import check_model_cycles, check_outputs

__all__ = []

CFG = PRESETS["2x2"]
#: ``{name: (seed, src_idle, sink_stall)}``: each stall alone, and free-running.
STALLS = {"free": (3, 0, 0), "idle source": (4, 96, 0), "backpressure": (5, 0, 128)}
OPS = (None, "requant", "gelu", "softmax", "layernorm")


def corners(cfg):
    """A legal program of the instructions and fields the compiled programs never use."""
    r, top = cfg.rows, cfg.spad_depth - cfg.rows
    load = dict(addr=top, count=r)
    matmul = dict(a_addr=top, b_addr=top, acc_addr=0, m_len=r, shift=True)
    return ([isa.Load(target=isa.Target.SPAD_A, **load),
             isa.Load(target=isa.Target.SPAD_B, push_next=True, **load),
             isa.Matmul(accumulate=False, pop_prev=True, **matmul),
             isa.Matmul(accumulate=True, push_next=True, **matmul),
             isa.Store(acc_addr=0, rows=r, strips=1, stride=r, op=isa.EpOp.RAW, pop_prev=True)]
            + [isa.Store(acc_addr=0, rows=0, strips=1, stride=0, op=isa.EpOp.RAW,
                         push_prev=True)] * isa.TOKEN_MAX
            + [isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=0, accumulate=False,
                          pop_next=True)] * isa.TOKEN_MAX)


@pytest.fixture(scope="module", params=list(STALLS))
def device(request, rtl_device):
    seed, src_idle, sink_stall = STALLS[request.param]
    return rtl_device(CFG, seed=seed, src_idle=src_idle, sink_stall=sink_stall)


def _check(device, program, inputs, what):
    result = device.run(program, **inputs)
    check_outputs(result, SoftwareDevice(CFG).run(program, **inputs), what=what)
    check_model_cycles(device, program, result, what=what)


def test_every_epilogue_under_each_stall(device):
    gen = torch.Generator().manual_seed(61)
    for op in OPS:
        inputs, epilogue = ep_mod.random_gemm(5, 7, 6, op, generator=gen)
        _check(device, compile_gemm(CFG, 5, 7, 6, epilogue=epilogue), inputs, op or "raw")


def test_corners(device):
    program = raw_program(CFG, corners(CFG))
    program.validate()
    gen = torch.Generator().manual_seed(62)
    x = torch.randint(-128, 128, program.inputs["x"], generator=gen, dtype=torch.int8)
    _check(device, program, {"x": x}, "the corners program")
