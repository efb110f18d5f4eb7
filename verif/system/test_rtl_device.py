"""The RTL device end to end: the driver on the Verilated harness.

The same program and operands on the RTL device and on the software device must give the same
bits, free-running and with idle cycles and backpressure on the streams; a large program runs
in one piece; an illegal instruction, a run past its cycle limit, a stream file that ends
early and a run the watchdog finds stuck raise :class:`~bertaccel.sw.DeviceError`, and the device works again after each.
"""

import pytest
import torch

from bertaccel.golden import ops
from bertaccel.hw import isa, legal
from bertaccel.hw.config import preset
from bertaccel.hw.harness import STREAM_FILES
from bertaccel.sw import DeviceError, SoftwareDevice, compile_gemm, gemm
from bertaccel.sw.devices import rtl
from bertaccel.sw.devices.base import IllegalProgram

__all__ = []


def _operands(m, k, n, seed):
    generator = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), generator=generator, dtype=torch.int8)
    b = torch.randint(-128, 128, (k, n), generator=generator, dtype=torch.int8)
    return a, b


@pytest.mark.parametrize("stall", [{}, {"src_idle": 0.25, "sink_stall": 0.5}],
                         ids=["free", "stalled"])
def test_rtl_device_gemm(rtl_device, stall):
    cfg = preset("4x8")  # not square: lanes (8) != rows (4)
    device = rtl_device(cfg, seed=7, **stall)
    a, b = _operands(37, 29, 19, seed=3)
    result = gemm(device, a, b)
    expected = gemm(SoftwareDevice(cfg), a, b)
    assert torch.equal(result.outputs["c"], expected.outputs["c"])
    assert torch.equal(result.outputs["c"], ops.gemm(a, b))
    assert result.cycles >= 37 * 29 * 19 / cfg.macs_per_cycle
    assert result.stats["sim_cycles_per_s"] > 0


@pytest.fixture
def small_rtl(rtl_device):
    return rtl_device(preset("2x2"))


def test_rtl_device_large_program(small_rtl):
    """Some 17 000 instructions, 67 000 data beats and 263 000 cycles: one run, whose cycles
    the model counts for the program as a whole."""
    a, b = _operands(64, 264, 64, seed=5)
    program = compile_gemm(small_rtl.cfg, 64, 264, 64)
    assert len(program.instrs) > 16_000 and program.n_data_beats > 66_000
    result = small_rtl.run(program, a=a, b=b)
    assert torch.equal(result.outputs["c"], ops.gemm(a, b))
    assert result.cycles == SoftwareDevice(small_rtl.cfg).run(program, a=a, b=b).cycles


def test_rtl_device_errors(small_rtl, monkeypatch):
    class Illegal:  # _execute's view of a program: one word with the illegal opcode 0
        cfg = small_rtl.cfg
        instrs = [isa.Store(acc_addr=0, rows=0)]

        def words(self):
            return [0]

    with pytest.raises(IllegalProgram, match="instruction 0 is not an ISA instruction") as bad:
        small_rtl._execute(Illegal(), torch.zeros((0, small_rtl.cfg.lanes), dtype=torch.int8))
    assert (bad.value.fault, bad.value.index) == (legal.Fault.OPCODE, 0)

    # A STORE of 65535 x 65535 beats: refused before the simulator sees it (the output cap).
    class Huge(Illegal):
        instrs = [isa.Store(acc_addr=0, rows=isa.FIELD_MAX, strips=isa.FIELD_MAX)]

        def words(self):
            return [isa.encode(instr) for instr in self.instrs]

    with pytest.raises(DeviceError, match=r"a \d+\.\d GiB output file, over the 2 GiB"):
        small_rtl._execute(Huge(), torch.zeros((0, small_rtl.cfg.lanes), dtype=torch.int8))

    a, b = _operands(8, 8, 8, seed=1)
    small_rtl.max_cycles = 5
    try:
        with pytest.raises(DeviceError, match="not done after 5 cycles"):
            gemm(small_rtl, a, b)
    finally:
        small_rtl.max_cycles = None
    # A data file one beat short: the source reads past its end.
    write = rtl._write_stream
    with monkeypatch.context() as patch:
        patch.setattr(rtl, "_write_stream", lambda path, data: write(
            path, data[:-small_rtl.cfg.lanes] if path.name == STREAM_FILES["data"] else data))
        with pytest.raises(DeviceError, match="could not open a stream file .* or read"):
            gemm(small_rtl, a, b)
    # Half the data: the load unit waits for beats that never come; the watchdog ends it.
    program = compile_gemm(small_rtl.cfg, 8, 8, 8)
    beats = program.pack(a=a, b=b)
    small_rtl.watchdog = 5_000
    try:
        with pytest.raises(DeviceError, match="stuck: no progress for 5000 cycles; "
                                              ".*the load unit waits for input data"):
            small_rtl._execute(program, beats[:beats.shape[0] // 2])
    finally:
        small_rtl.watchdog = rtl.DEFAULT_LIMIT
    # The harness was reset after each failure: the device still works.
    assert torch.equal(gemm(small_rtl, a, b).outputs["c"], ops.gemm(a, b))
