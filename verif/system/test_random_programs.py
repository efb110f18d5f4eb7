"""Random legal programs (:mod:`bertaccel.sw.random_programs`) on the RTL: every field of every
instruction over its legal range, SETs of every register with values of every width, on the
2x2, the non-square 4x8 and the 8x8 cores, free-running and with idle input cycles and output
backpressure. Each run's outputs equal the software device's bit for bit and its cycles keep the
cycle model's relation (exactly the model's when free-running)."""

import pytest
import torch

from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice
from bertaccel.sw.random_programs import random_program
from verif.helpers import check_model_cycles, check_outputs

__all__ = []

#: ``{name: (stall seed, src_idle, sink_stall)}``.
STALLS = {"free": (0, 0, 0), "stalled": (7, 77, 102)}
#: Programs a config and stall setting runs, and the first one's seed.
PROGRAMS = {"2x2": (64, 1000), "4x8": (24, 2000), "8x8": (12, 3000)}


@pytest.mark.parametrize("stall", list(STALLS))
@pytest.mark.parametrize("config", list(PROGRAMS))
def test_random_programs(rtl_device, config, stall):
    cfg = PRESETS[config]
    seed, src_idle, sink_stall = STALLS[stall]
    device = rtl_device(cfg, seed=seed, src_idle=src_idle, sink_stall=sink_stall)
    count, first = PROGRAMS[config]
    for program_seed in range(first, first + count):
        program = random_program(cfg, program_seed)
        gen = torch.Generator().manual_seed(program_seed)
        x = torch.randint(-128, 128, program.inputs["x"], generator=gen, dtype=torch.int8)
        what = f"random program {program_seed} ({len(program.instrs)} instructions)"
        result = device.run(program, x=x)
        check_outputs(result, SoftwareDevice(cfg).run(program, x=x), what=what)
        check_model_cycles(device, program, result, what=what)
