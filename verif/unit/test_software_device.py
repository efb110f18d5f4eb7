"""Pure-Python tests of the device protocol on the bit-exact software device: the gemm()
convenience, operand errors, persistent state, stream accounting and int32 wrap-around."""

import dataclasses

import numpy as np
import pytest
import torch

from bertaccel import golden
from bertaccel.hw import isa
from bertaccel.hw.config import PRESETS
from bertaccel.sw import (Device, DeviceError, OperandError, Program, RunResult, SoftwareDevice,
                          TilePlan, compile_gemm, gemm)

SEED = 99


def operands(m, k, n, seed):
    gen = torch.Generator().manual_seed(seed)
    return (torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8),
            torch.randint(-128, 128, (k, n), generator=gen, dtype=torch.int8))


@pytest.mark.parametrize("name", ["2x2", "4x8", "8x8"])
def test_gemm_convenience(name):
    print(f"seed {SEED}")
    cfg = PRESETS[name]
    a, b = operands(19, 33, 10, SEED)
    with SoftwareDevice(cfg) as device:
        assert device.cfg is cfg
        result = gemm(device, a, b)
        assert isinstance(result, RunResult)
        assert torch.equal(result.outputs["c"], golden.gemm(a, b))
        assert result.cycles > 0 and result.wall_s > 0
        assert result.stats["macs"] > 0 and result.stats["instructions"] > 0
        # numpy and other integer dtypes work when the values are int8.
        again = gemm(device, a.numpy().astype(np.int64), b.to(torch.int16))
        assert torch.equal(again.outputs["c"], result.outputs["c"])


def test_gemm_operand_errors():
    device = SoftwareDevice(PRESETS["4x4"])
    a, b = operands(3, 4, 2, SEED)
    with pytest.raises(OperandError, match=r"do not chain: a is \(3, 4\) and b is \(5, 2\)"):
        gemm(device, a, torch.zeros((5, 2), dtype=torch.int8))
    with pytest.raises(OperandError, match=r"operand 'a' must be a 2-D matrix, not of shape "
                                           r"\(4,\)"):
        gemm(device, torch.zeros(4, dtype=torch.int8), b)
    with pytest.raises(OperandError, match=r"operand 'b' must be a 2-D matrix.*\(4, 2, 1\)"):
        gemm(device, a, torch.zeros((4, 2, 1), dtype=torch.int8))
    with pytest.raises(OperandError, match=r"input 'a' .* dtype torch.float32"):
        gemm(device, a.float(), b)
    with pytest.raises(OperandError, match=r"input 'b' .* lie in \[-300, 1\]"):
        gemm(device, a, torch.tensor([[-300, 1]] * 4))
    with pytest.raises(OperandError, match="GEMM dimension m must be at least 1"):
        gemm(device, torch.zeros((0, 4), dtype=torch.int8), b)


def test_state_persists_across_runs_until_reset():
    cfg = dataclasses.replace(PRESETS["2x2"], spad_depth=64, acc_depth=64)
    device = SoftwareDevice(cfg)
    a, b = operands(2, 2, 2, SEED)
    # One C tile of both rows, in accumulator rows 0 and 1.
    plan = TilePlan(m=2, k=2, n=2, mb=2, kb=1, nb=1, order="m", n_steps=1, n_tiles=1,
                    est_cycles=1, macs_per_cycle=4)
    compiled = compile_gemm(cfg, 2, 2, 2, plan=plan)
    device.run(compiled, a=a, b=b)
    # A program that only stores reads what the previous run left in the accumulator.
    store_only = Program(cfg, [isa.Store(acc_addr=0, rows=2)], inputs={}, outputs={"c": (2, 2)},
                         pack_index=torch.zeros((0, cfg.lanes), dtype=torch.int64),
                         unpack_index=[[0, 1], [2, 3]])
    assert torch.equal(device.run(store_only).outputs["c"], golden.gemm(a, b))
    device.reset()
    assert not device.spad_a.any() and not device.spad_b.any() and not device.acc.any()
    assert not device.run(store_only).outputs["c"].any()


def test_stream_must_be_consumed_exactly():
    cfg = PRESETS["4x4"]
    program = compile_gemm(cfg, 5, 6, 7)
    device = SoftwareDevice(cfg)
    beats = program.pack(a=torch.ones((5, 6), dtype=torch.int8),
                         b=torch.ones((6, 7), dtype=torch.int8))
    with pytest.raises(DeviceError, match="but the stream has"):
        device._execute(program, beats[:-1])
    with pytest.raises(DeviceError, match="1 left over"):
        device._execute(program, torch.cat([beats, beats[:1]]))
    with pytest.raises(DeviceError, match="torch.int8"):
        device._execute(program, beats.int())


def test_device_refuses_program_for_another_build():
    program = compile_gemm(PRESETS["4x4"], 4, 4, 4)
    with pytest.raises(DeviceError, match="compiled for r4c4.*this device is r8c8"):
        SoftwareDevice(PRESETS["8x8"]).run(program, a=torch.zeros((4, 4), dtype=torch.int8),
                                           b=torch.zeros((4, 4), dtype=torch.int8))
    with pytest.raises(TypeError, match="must be a Program"):
        SoftwareDevice(PRESETS["8x8"]).run("program")


def test_base_device_protocol():
    with Device(PRESETS["2x2"]) as device:
        with pytest.raises(NotImplementedError, match="Device does not implement _execute"):
            device.run(compile_gemm(device.cfg, 1, 1, 1), a=[[1]], b=[[2]])
    with pytest.raises(TypeError, match="AccelConfig"):
        SoftwareDevice("8x8")
    with pytest.raises(ValueError, match="interleave must be"):
        SoftwareDevice(PRESETS["2x2"], interleave="random")


def test_interleaved_device_reports_deadlock():
    cfg = PRESETS["2x2"]
    stuck = Program(cfg, [isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=1, accumulate=False,
                                     pop_prev=True)],
                    inputs={}, outputs={}, pack_index=torch.zeros((0, 2), dtype=torch.int64),
                    unpack_index=torch.zeros((0, 2), dtype=torch.int64))
    with pytest.raises(DeviceError, match="deadlocks"):
        SoftwareDevice(cfg, interleave=0)._execute(stuck, torch.zeros((0, 2), dtype=torch.int8))


def test_accumulator_wraps_like_int32():
    """2049 accumulating MATMULs of -128 x -128 over 64 rows add 2049 * 2**20 = 2**31 + 2**20,
    which wraps to -2**31 + 2**20, exactly as golden.gemm does over the same K."""
    cfg = dataclasses.replace(PRESETS["2x2"], rows=64, cols=2, spad_depth=128, acc_depth=64)
    repeats = 2049
    instrs = [isa.Load(target=isa.Target.SPAD_A, addr=0, count=1),
              isa.Load(target=isa.Target.SPAD_B, addr=0, count=64, push_next=True)]
    instrs += [isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=1, accumulate=index > 0,
                          pop_prev=index == 0, push_next=index == repeats - 1)
               for index in range(repeats)]
    instrs.append(isa.Store(acc_addr=0, rows=1, pop_prev=True))
    program = Program(cfg, instrs, inputs={"x": (1,)}, outputs={"c": (1, 2)},
                      pack_index=torch.zeros((65, 64), dtype=torch.int64),
                      unpack_index=[[0, 1]])
    c = SoftwareDevice(cfg).run(program, x=torch.tensor([-128])).outputs["c"]
    expected = (repeats * 64 * 128 * 128 + 2 ** 31) % 2 ** 32 - 2 ** 31
    assert expected == -2 ** 31 + 2 ** 20
    assert c.tolist() == [[expected, expected]]
    a = torch.full((1, 64 * repeats), -128, dtype=torch.int8)
    b = torch.full((64 * repeats, 2), -128, dtype=torch.int8)
    assert torch.equal(golden.gemm(a, b), c)


def test_golden_gemm_checks_its_operands():
    a, b = operands(2, 3, 4, SEED)
    assert torch.equal(golden.gemm(a, b), (a.long() @ b.long()).int())
    with pytest.raises(TypeError, match="dtype torch.int8, not torch.int32"):
        golden.gemm(a.int(), b)
    with pytest.raises(TypeError, match="must be a torch.Tensor"):
        golden.gemm(a.numpy(), b)
    with pytest.raises(ValueError, match="2-D"):
        golden.gemm(a, b[0])
    with pytest.raises(ValueError, match=r"inner dimensions 3 and 2 differ"):
        golden.gemm(a, b[:2])
    assert golden.gemm(a[:, :0], b[:0]).tolist() == [[0] * 4] * 2
