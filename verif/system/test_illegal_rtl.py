"""Illegal programs on the RTL and the software device: the same fault, the same instruction.

Random compiled programs (GEMMs with each epilogue) each get one instruction broken or one
illegal instruction inserted (:func:`bertaccel.sw.illegal_programs.break_program`), aimed at
every rule of :mod:`bertaccel.hw.legal`. The core's checker (:mod:`bertaccel.hw.checker`) and
the software device's :func:`~bertaccel.hw.legal.first_fault` must raise
:class:`IllegalProgram` naming the same :class:`~bertaccel.hw.legal.Fault` and index,
free-running and stalled; after each fault the next legal run is bit-exact. ``python
bench/illegal.py`` runs more over 2x2, 4x8 and 8x8.
"""

import pytest
import torch

from bertaccel.golden.intops import MAX_ROW
from bertaccel.hw import legal
from bertaccel.hw.config import PRESETS
from bertaccel.sw.devices.base import IllegalProgram
from bertaccel.sw.devices.software import SoftwareDevice

from bertaccel.sw.illegal_programs import illegal_cases


N_PROGRAMS = 96


def fault_of(device, program, beats):
    with pytest.raises(IllegalProgram) as raised:
        device.execute(program, beats)
    return raised.value.fault, raised.value.index


@pytest.mark.parametrize("stalls", [(0, 0), (77, 102)], ids=["free", "stalled"])
def test_rtl_names_the_fault_the_software_device_names(rtl_device, stalls):
    cfg = PRESETS["2x2"]
    rtl = rtl_device(cfg, seed=7, src_idle=stalls[0], sink_stall=stalls[1])
    software = SoftwareDevice(cfg)
    cases, legal_ones = illegal_cases(cfg, N_PROGRAMS, seed=sum(stalls) + 1)
    seen = set()
    for number, (intended, program, beats) in enumerate(cases):
        expected = fault_of(software, program, beats)
        assert fault_of(rtl, program, beats) == expected, (number, intended)
        seen.add(expected[0])
        if number % 8 == 7:     # after a fault, a legal run is bit-exact
            good, inputs = legal_ones[number % len(legal_ones)]
            want = software.run(good, **inputs)
            got = rtl.run(good, **inputs)
            assert all(torch.equal(got.outputs[k], want.outputs[k]) for k in want.outputs)
            if stalls == (0, 0):   # the cycle model counts free-running runs
                assert got.cycles == want.cycles
    # Every rule but the opcode's is reached (test_rtl_device.py has an illegal opcode), and
    # ROW_WIDTH's, which on the 2x2 needs more PMEM rows than there are (STORE_PARAM first).
    unreached = {legal.Fault.NONE, legal.Fault.OPCODE, legal.Fault.ROW_WIDTH}
    assert MAX_ROW // cfg.cols >= cfg.pmem_depth
    assert seen == set(legal.Fault) - unreached, sorted(seen)
