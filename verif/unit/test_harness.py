"""How the simulation harness splits a program into runs that fit its memories
(:func:`bertaccel.hw.harness.harness_chunks`), in pure Python."""

import pytest

from bertaccel.hw import isa
from bertaccel.hw.harness import harness_chunks

__all__ = []


def test_harness_chunks_fit_the_memories():
    instrs = [isa.Load(target=isa.Target.SPAD_A, addr=0, count=300)]
    assert harness_chunks(instrs * 3, (64, 1024, 64)) == [(0, 3, 900, 0)]
    assert harness_chunks(instrs * 3, (2, 1024, 64)) == [(0, 2, 600, 0), (2, 3, 300, 0)]


def test_harness_refuses_an_oversized_instruction():
    instrs = [isa.Load(target=isa.Target.SPAD_A, addr=0, count=300)]
    with pytest.raises(ValueError, match="data-in 256"):
        harness_chunks(instrs, (64, 256, 64))
