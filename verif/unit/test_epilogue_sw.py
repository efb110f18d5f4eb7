"""Pure-Python tests of the fused epilogues: the compiler, the program rules and the software
device.

Every fused program, run on the bit-exact software device (in program order and in adversarial
interleavings of the three units), must equal golden.intops applied to golden.gemm; the PMEM
gearbox packs beats the way hw/load.py does; bad parameters and bad programs are refused with
messages that name the culprit; and row-wise epilogues get whole-row tiles with a small last
tile.
"""

import dataclasses
import math
import random

import numpy as np
import pytest
import torch

from bertaccel import golden
from bertaccel.golden import intops
from bertaccel.hw import isa
from bertaccel.hw.config import PRESETS
from bertaccel.sw import (DeviceError, Gelu, LayerNorm, OperandError, Program, ProgramError,
                          Requant, ScaleError, SoftwareDevice, Softmax, compile_gemm, gemm,
                          plan_gemm)
from bertaccel.sw import epilogue as ep_mod
from bertaccel.sw import tiler
from bertaccel.sw.cycles import CycleModel

__all__ = []

SEED = 4321
OPS = ["requant", "gelu", "softmax", "layernorm"]
CONFIGS = ["2x2", "4x8", "8x8"]
P = isa.Param


def operands(m, k, n, gen):
    a = torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8)
    b = torch.randint(-128, 128, (k, n), generator=gen, dtype=torch.int8)
    r = torch.randint(-128, 128, (m, n), generator=gen, dtype=torch.int8)
    return a, b, r


def check(cfg, m, k, n, epilogue, gen, *, interleave=None, plan=None):
    """Compile, run on the software device, compare with golden; returns (program, output)."""
    a, b, r = operands(m, k, n, gen)
    program = compile_gemm(cfg, m, k, n, epilogue=epilogue, plan=plan)
    inputs = {"a": a, "b": b}
    if "r" in program.inputs:
        inputs["r"] = r
    out = SoftwareDevice(cfg, interleave=interleave).run(program, **inputs).outputs["c"]
    want = ep_mod.apply_integer(program.meta["epilogue"], golden.gemm(a, b), inputs.get("r"),
                                cols=cfg.ep_lanes)
    assert out.dtype == torch.int32 and out.shape == (m, n)
    assert torch.equal(out, want), (cfg.name, m, k, n, type(epilogue).__name__, interleave,
                                    program.meta["plan"])
    low, high = (0, intops.PROB_SCALE) if program.meta["epilogue"].op == isa.EpOp.SOFTMAX \
        else (-128, 127)
    assert out.min() >= low and out.max() <= high
    return program, out


def shapes_for(cfg, rng):
    r, c = cfg.rows, cfg.cols
    fixed = [(1, 1, 1), (3, 5, 7), (r, r, c), (2 * r + c + 1, 3 * r - 1, 2 * c + 1),
             (37, 2 * r + 1, 3 * c - 1)]
    return fixed + [(rng.randint(1, 70), rng.randint(1, 70), rng.randint(1, 70))
                    for _ in range(3)]


@pytest.mark.parametrize("name", CONFIGS)
@pytest.mark.parametrize("op", OPS)
def test_every_op_matches_golden(name, op):
    seed = SEED + 10 * CONFIGS.index(name) + OPS.index(op)
    print(f"seed {seed}")
    cfg = PRESETS[name]
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    for m, k, n in shapes_for(cfg, rng):
        epilogue = ep_mod.random_epilogue(op, k=k, n=n, generator=gen)
        program, _ = check(cfg, m, k, n, epilogue, gen)
        program.validate()
        counts = program.counts()
        assert counts["SET"] == len(program.meta["epilogue"].sets)
        stores = [i for i in program.instrs if isinstance(i, isa.Store)]
        assert {s.op for s in stores} == {epilogue.op}


@pytest.mark.parametrize("op", OPS)
def test_interleaved_unit_orders(op):
    """Tiny memories force many tiles, so the residual and PMEM slots are reused; the load unit
    running ahead as far as its tokens allow (and random orders) must not overwrite them."""
    seed = SEED + 100 + OPS.index(op)
    print(f"seed {seed}")
    gen = torch.Generator().manual_seed(seed)
    configs = [dataclasses.replace(PRESETS["2x2"], spad_depth=128, acc_depth=64, pmem_depth=16),
               dataclasses.replace(PRESETS["4x8"], spad_depth=256, acc_depth=64, pmem_depth=16)]
    for cfg in configs:
        tiles = []
        for m, k, n in [(60, 2, 6), (70, 5, 7), (50, 16, 5), (45, 3 * cfg.rows, 2 * cfg.cols)]:
            epilogue = ep_mod.random_epilogue(op, k=k, n=n, generator=gen)
            for interleave in (None, "load-first", "store-last", seed):
                program, _ = check(cfg, m, k, n, epilogue, gen, interleave=interleave)
            tiles.append((program.meta["plan"].n_tiles, program.meta["layout"].slots))
        assert max(t for t, _ in tiles) >= 3, tiles          # accumulator halves reused
        if op == "layernorm":
            assert any(t > slots for t, slots in tiles), tiles  # residual slots reused


@pytest.mark.parametrize("op", ["requant", "gelu"])
def test_tail_takes_its_own_registers(op):
    """A Tail: the last columns with the tail's registers, the others with the head's, in
    program order and interleaved; its strips stored twice, SETs between and back; a LayerNorm
    tail or a tail of every column is refused."""
    seed = SEED + 200 + (op == "gelu")
    print(f"seed {seed}")
    gen = torch.Generator().manual_seed(seed)
    cfg = dataclasses.replace(PRESETS["2x2"], spad_depth=128, acc_depth=64, pmem_depth=16)
    for m, k, n, columns in [(9, 5, 7, 1), (30, 6, 45, 5), (40, 4, 12, 4)]:
        head = ep_mod.random_epilogue(op, k=k, n=n - columns, generator=gen)
        tail = ep_mod.random_epilogue(op, k=k, n=columns, generator=gen)
        epilogue = ep_mod.Tail(head, tail, columns)
        for interleave in (None, "load-first", "store-last", seed):
            program, out = check(cfg, m, k, n, epilogue, gen, interleave=interleave)
        a, b, _ = operands(m, k, n, torch.Generator().manual_seed(1))
        c = golden.gemm(a, b)
        want = torch.cat([ep_mod.apply_integer(ep_mod.lower(head, cfg, n=n - columns, k=k),
                                               c[:, :n - columns], cols=cfg.ep_lanes),
                          ep_mod.apply_integer(ep_mod.lower(tail, cfg, n=columns, k=k),
                                               c[:, n - columns:], cols=cfg.ep_lanes)], dim=1)
        got = SoftwareDevice(cfg).run(program, a=a, b=b).outputs["c"]
        assert torch.equal(got, want)
        tail_stores = program.counts()["STORE"] - program.meta["plan"].n_tiles
        assert tail_stores >= 1
        other = ep_mod.Tail(ep_mod.random_epilogue(op, k=k, n=n - columns, generator=gen),
                            ep_mod.random_epilogue(op, k=k, n=columns, generator=gen), columns)
        rebound = tiler.rebind(program, other, k, n)
        assert torch.equal(SoftwareDevice(cfg, interleave="load-first").run(
            rebound, a=a, b=b).outputs["c"], ep_mod.apply_integer(
            ep_mod.lower(other, cfg, n=n, k=k), c, cols=cfg.ep_lanes))
    with pytest.raises(ValueError, match="Tail.columns must be an int from 1 to n - 1"):
        ep_mod.lower(ep_mod.Tail(head, tail, n), cfg, n=n, k=k)
    with pytest.raises(TypeError, match="both Requant or both Gelu"):
        ep_mod.lower(ep_mod.Tail(head, Softmax(in_scale=1.0), 1), cfg, n=n, k=k)


def test_too_few_slots_would_be_caught(monkeypatch):
    """The interleaved device notices when the residual slots are one too few: the token
    argument of the tiler is what keeps the results right."""
    from bertaccel.sw.tiler import layout
    cfg = dataclasses.replace(PRESETS["2x2"], spad_depth=128, acc_depth=64, pmem_depth=16)
    gen = torch.Generator().manual_seed(SEED)
    real = layout._aux_slots
    monkeypatch.setattr(layout, "_aux_slots", lambda n_kb, n_tiles: real(n_kb, n_tiles) - 1)
    wrong = 0
    for m, k, n in [(20, 2, 6), (20, 8, 6), (40, 16, 5)]:
        epilogue = ep_mod.random_epilogue("layernorm", k=k, n=n, generator=gen)
        try:
            check(cfg, m, k, n, epilogue, gen, interleave="load-first")
        except AssertionError:
            wrong += 1
    assert wrong == 3


def test_pmem_per_tile_slots_when_the_strips_do_not_fit():
    """More N strips than PMEM rows: single-pass ops reload PMEM rows per tile, in slots."""
    cfg = dataclasses.replace(PRESETS["2x2"], spad_depth=256, acc_depth=128, pmem_depth=16)
    gen = torch.Generator().manual_seed(SEED + 7)
    for op in ("requant", "gelu"):
        for interleave in (None, "load-first", 3):
            m, k, n = 9, 6, 45                     # 23 strips > 16 PMEM rows
            epilogue = ep_mod.random_epilogue(op, k=k, n=n, generator=gen)
            program, _ = check(cfg, m, k, n, epilogue, gen, interleave=interleave)
            layout = program.meta["layout"]
            assert not layout.pmem_whole and layout.slots * program.meta["plan"].nb <= 16
    with pytest.raises(ProgramError, match=r"needs 23 parameter rows, more than PMEM holds"):
        compile_gemm(cfg, 4, 4, 45, epilogue=Softmax(in_scale=0.01))


def test_float_accuracy():
    """Measured tolerance of the integer epilogues against float torch: within one output LSB
    everywhere (rounding alone is half an LSB)."""
    cfg = PRESETS["4x8"]
    gen = torch.Generator().manual_seed(SEED + 3)
    for op in OPS:
        m, k, n = 40, 64, 48
        epilogue = ep_mod.random_epilogue(op, k=k, n=n, generator=gen)
        a, b, r = operands(m, k, n, gen)
        inputs = {"r": r} if op == "layernorm" else {}
        out = gemm(SoftwareDevice(cfg), a, b, epilogue=epilogue, **inputs).outputs["c"]
        error = (out.double() - ep_mod.apply_float(epilogue, golden.gemm(a, b), r)).abs()
        print(f"{op}: max {error.max():.3f} LSB, mean {error.mean():.3f} LSB")
        assert error.max() <= 1.0, op


# -- the software device's epilogue semantics -------------------------------------------------

def _bare(cfg, instrs, *, data=None, outputs=None):
    data = torch.zeros((0, cfg.lanes), dtype=torch.int8) if data is None else data
    n_elems = data.numel()
    pack = torch.arange(n_elems).view(-1, cfg.lanes) if n_elems else \
        torch.zeros((0, cfg.lanes), dtype=torch.int64)
    n_out = sum(i.count for i in instrs if isinstance(i, isa.Store))
    return Program(cfg, instrs, inputs={"x": (n_elems,)},
                   outputs=outputs or {"y": (n_out * cfg.cols,)}, pack_index=pack,
                   unpack_index=torch.arange(n_out * cfg.cols).view(-1, cfg.cols)), data


@pytest.mark.parametrize("cfg", [PRESETS["2x2"], PRESETS["8x8"], PRESETS["4x8"],
                                 dataclasses.replace(PRESETS["2x2"], rows=64, cols=2,
                                                     spad_depth=128)],
                         ids=["2x2", "8x8", "4x8", "64x2"])
def test_pmem_gearbox_packing(cfg):
    """``pmem_beats_per_row`` beats make a PMEM row, the first beat in the lowest bits: byte
    ``j`` of the row is lane ``j % beat_bytes`` of beat ``j // beat_bytes``."""
    per_row = cfg.pmem_beats_per_row
    row_bytes = cfg.cols * 8
    beat_bytes = min(cfg.lanes, row_bytes)
    assert per_row * beat_bytes == row_bytes
    gen = torch.Generator().manual_seed(SEED)
    data = torch.randint(-128, 128, (3 * per_row, cfg.lanes), generator=gen, dtype=torch.int8)
    program, data = _bare(cfg, [isa.Load(target=isa.Target.PMEM, addr=5, count=3 * per_row)],
                          data=data)
    program.validate()
    device = SoftwareDevice(cfg)
    device.run(program, x=data.reshape(-1))
    raw = data[:, :beat_bytes].reshape(3, row_bytes).view(torch.uint8)
    assert torch.equal(device.pmem[5:8], raw)
    assert not device.pmem[:5].any() and not device.pmem[8:].any()
    # The fields, column by column, read off the little-endian 64-bit words.
    bias, p1, p2 = device.pmem_fields(slice(5, 8))
    words = [int.from_bytes(bytes(raw[r, 8 * c:8 * c + 8].tolist()), "little")
             for r in range(3) for c in range(cfg.cols)]
    assert p1.reshape(-1).tolist() == [(w >> 32) & 0xFFFF for w in words]
    assert p2.reshape(-1).tolist() == [w >> 48 for w in words]
    assert bias.reshape(-1).tolist() == [(w & 0xFFFFFFFF) - ((w & 0x80000000) << 1)
                                         for w in words]


def test_compiled_pmem_holds_the_lowered_parameters():
    cfg = PRESETS["4x8"]
    gen = torch.Generator().manual_seed(SEED)
    n = 21
    epilogue = ep_mod.random_epilogue("layernorm", k=16, n=n, generator=gen)
    a, b, r = operands(5, 16, n, gen)
    device = SoftwareDevice(cfg)
    program = compile_gemm(cfg, 5, 16, n, epilogue=epilogue)
    device.run(program, a=a, b=b, r=r)
    lowered = program.meta["epilogue"]
    bias, p1, p2 = device.pmem_fields(slice(0, 3))
    assert bias.reshape(-1).tolist() == lowered.bias.tolist()
    assert p1.reshape(-1).tolist() == lowered.p1.tolist()
    assert p2.reshape(-1).tolist() == lowered.p2.tolist()
    assert all(device.params[index] == value for index, value in lowered.sets)


def test_set_truncates_and_registers_persist():
    cfg = PRESETS["2x2"]
    device = SoftwareDevice(cfg)
    instrs = [isa.Set(index=P.MUL0, value=0x12345), isa.Set(index=P.SHIFT0, value=64 + 5),
              isa.Set(index=P.EPS, value=(1 << 64) - 1)]
    program, data = _bare(cfg, instrs)
    with pytest.raises(ProgramError, match=r"instruction 0 \(SET\): MUL0 is a 16-bit register"):
        program.validate()
    device._execute(program, data)  # no validation: the registers keep the low bits
    assert device.params[P.MUL0] == 0x2345 and device.params[P.SHIFT0] == 5
    assert device.params[P.EPS] == (1 << 64) - 1
    device.reset()
    assert set(device.params.values()) == {0}


def test_store_requant_by_hand():
    """A hand-written REQUANT STORE: two strips of two rows, per-column parameters from PMEM."""
    cfg = dataclasses.replace(PRESETS["2x2"], spad_depth=64, acc_depth=64, pmem_depth=16)
    device = SoftwareDevice(cfg)
    device.acc[10:14] = torch.tensor([[1000, -1000], [50, 7], [300, -300], [0, 1]],
                                     dtype=torch.int32)
    words = np.array([[(5 & 0xFFFFFFFF) | (3 << 32) | (1 << 48), 0 | (1 << 32) | (0 << 48)],
                      [(-7 & 0xFFFFFFFF) | (1 << 32) | (2 << 48), 2 | (5 << 32) | (1 << 48)]],
                     dtype="<u8")
    device.pmem[4:6] = torch.from_numpy(words.view(np.uint8).reshape(2, 16).copy())
    for flags, want in ((1, [[127, -128, 73, -128], [83, 7, -2, 8]]),
                        (0, [[126, -125, 37, -37], [7, 1, -1, 0]])):
        instrs = [isa.Set(index=P.MUL0, value=1), isa.Set(index=P.SHIFT0, value=3),
                  isa.Set(index=P.FLAGS, value=flags),
                  # beat (m, s) = acc[10 + 2*s + m]
                  isa.Store(acc_addr=10, rows=2, strips=2, stride=2, op=isa.EpOp.REQUANT,
                            param_addr=4)]
        program, data = _bare(cfg, instrs)
        program.validate()
        out = device.run(program, x=data.reshape(-1)).outputs["y"].view(2, 4)
        x = torch.tensor([[1000, -1000, 300, -300], [50, 7, 0, 1]])
        bias = torch.tensor([5, 0, -7, 2])
        mul, shift = (torch.tensor([3, 1, 1, 5]), torch.tensor([1, 0, 2, 1])) if flags else (1, 3)
        assert torch.equal(out, intops.requant(x, bias=bias, mul=mul, shift=shift))
        assert out.tolist() == want


def test_two_pass_row_len_pads_with_zero():
    """Columns at or past ROW_LEN are padding: softmax over the first 3 of 4 columns, 0 after."""
    cfg = dataclasses.replace(PRESETS["2x2"], spad_depth=64, acc_depth=64, pmem_depth=16)
    device = SoftwareDevice(cfg)
    device.acc[0:2] = torch.tensor([[100, 200], [300, 9999]], dtype=torch.int32)
    instrs = [isa.Set(index=P.MUL0, value=369), isa.Set(index=P.SHIFT0, value=8),
              isa.Set(index=P.ROW_LEN, value=3),
              isa.Store(acc_addr=0, rows=1, strips=2, stride=1, op=isa.EpOp.SOFTMAX)]
    program, data = _bare(cfg, instrs)
    program.validate()
    out = device.run(program, x=data.reshape(-1)).outputs["y"]
    want = intops.softmax(torch.tensor([[100, 200, 300, 9999]]), mul=369, shift=8, cols=2,
                          row_len=3)
    assert out.tolist() == want.reshape(-1).tolist() and out[3] == 0
    assert abs(out[:3].sum() - intops.PROB_SCALE) <= 2


# -- validation -----------------------------------------------------------------------------

SMALL = dataclasses.replace(PRESETS["2x2"], spad_depth=64, acc_depth=64, pmem_depth=16)


def _store(**fields):
    return isa.Store(**{"acc_addr": 0, "rows": 2, "strips": 2, "stride": 2, **fields})


@pytest.mark.parametrize("instrs, message", [
    ([isa.Load(target=isa.Target.PMEM, addr=0, count=7)],
     r"instruction 0 \(LOAD\): a LOAD into PMEM must move whole rows of 8 beats, but count = 7"),
    ([isa.Load(target=isa.Target.PMEM, addr=14, count=24)],
     r"instruction 0 \(LOAD\): addr \+ count / beats_per_row = 17 runs past the parameter "
     r"memory \(PMEM\) \(16 rows\)"),
    ([isa.Set(index=P.ROW_LEN, value=1 << 16)],
     r"instruction 0 \(SET\): ROW_LEN is a 16-bit register, so its value must be below 2\*\*16"),
    ([isa.Set(index=P.SHIFT1, value=64)], r"SHIFT1 is a 6-bit register"),
    ([isa.Set(index=P.EPS, value=-1)], r"instruction 0 \(SET\): value must be an int from 0"),
    ([isa.Set(index=4, value=1)], r"instruction 0 \(SET\): index must be an isa.Param"),
    ([_store(op=isa.EpOp.GELU, param_addr=15)],
     r"instruction 0 \(STORE\): param_addr \+ strips = 17 runs past the parameter memory"),
    ([isa.Set(index=P.SHIFT1, value=8), isa.Set(index=P.ROW_LEN, value=4),
      _store(op=isa.EpOp.LAYERNORM, aux_addr=61)],
     r"instruction 2 \(STORE\): aux_addr \+ strips\*rows = 65 runs past scratchpad B"),
    ([isa.Set(index=P.ROW_LEN, value=4), _store(op=isa.EpOp.LAYERNORM)],
     r"LAYERNORM needs SHIFT1 \(gshift\) from 8 to 63, but the SETs before it leave 0"),
    ([_store(op=isa.EpOp.SOFTMAX)],
     r"instruction 0 \(STORE\): SOFTMAX needs ROW_LEN from 1 to strips \* cols = 4, but the "
     r"SETs before it leave 0 \(no SET of ROW_LEN\)"),
    ([isa.Set(index=P.ROW_LEN, value=5), _store(op=isa.EpOp.SOFTMAX)],
     r"instruction 1 \(STORE\): SOFTMAX needs ROW_LEN from 1 to strips \* cols = 4, but the "
     r"SETs before it leave 5"),
    ([isa.Set(index=P.ROW_LEN, value=3), _store(op=isa.EpOp.SOFTMAX),
      isa.Set(index=P.ROW_LEN, value=0), _store(op=isa.EpOp.SOFTMAX)],
     r"instruction 3 \(STORE\): SOFTMAX needs ROW_LEN .* leave 0 \(no SET"),
    ([isa.Set(index=P.ROW_LEN, value=3), isa.Set(index=P.SHIFT1, value=8),
      isa.Store(acc_addr=0, rows=1, strips=513, stride=0, op=isa.EpOp.LAYERNORM)],
     r"instruction 2 \(STORE\): a LAYERNORM row of strips \* cols = 513 \* 2 = 1026 columns "
     r"is longer than the hardware supports \(1024 columns\)"),
    ([_store(dest=1)], r"instruction 0 \(STORE\): dest must be isa.Dest.HOST"),
    ([_store(op=3)], r"instruction 0 \(STORE\): op must be an isa.EpOp"),
])
def test_validate_names_the_broken_epilogue_rule(instrs, message):
    cfg = SMALL if not any(getattr(i, "strips", 0) > 100 for i in instrs) else \
        dataclasses.replace(SMALL, pmem_depth=1024, spad_depth=1024)
    n_beats = sum(i.count for i in instrs if isinstance(i, isa.Load))
    program, _ = _bare(cfg, instrs, data=torch.zeros((n_beats, cfg.lanes), dtype=torch.int8))
    with pytest.raises(ProgramError, match=message):
        program.validate()


def test_compiler_refuses_what_the_hardware_cannot_do():
    cfg = PRESETS["8x8"]
    with pytest.raises(ProgramError, match=r"a SOFTMAX row of n = 1025 columns is longer than "
                                           r"the hardware supports \(1024 columns\)"):
        compile_gemm(cfg, 4, 8, 1025, epilogue=Softmax(in_scale=0.01))
    with pytest.raises(ProgramError, match=r"LAYERNORM row of n = 2000"):
        plan_gemm(cfg, 4, 8, 2000, epilogue=LayerNorm(1e-3, 1.0, 0.0, 0.03, 1e-12, 0.01))
    # A row that fits the hardware but not this build's accumulator half.
    tiny = dataclasses.replace(PRESETS["2x2"], acc_depth=64, pmem_depth=64)
    with pytest.raises(ProgramError, match=r"needs 50 accumulator rows, more than half of the "
                                           r"accumulator \(32 rows\)"):
        compile_gemm(tiny, 4, 4, 100, epilogue=Softmax(in_scale=0.01))
    # Single-pass ops take any width.
    compile_gemm(cfg, 2, 8, 3000, epilogue=Requant(0.001)).validate()
    # A plan that cuts rows is refused for a row-wise op.
    plan = plan_gemm(cfg, 16, 16, 32)
    with pytest.raises(ProgramError, match=r"a SOFTMAX tile must hold whole rows: plan nb "
                                           r"must be 4"):
        compile_gemm(cfg, 16, 16, 32, epilogue=Softmax(in_scale=0.01),
                     plan=dataclasses.replace(plan, nb=2))
    with pytest.raises(TypeError, match="epilogue must be"):
        compile_gemm(cfg, 4, 4, 4, epilogue="softmax")


@pytest.mark.parametrize("epilogue, message", [
    (Softmax(in_scale=1e30), r"Softmax.in_scale \(x log2\(e\) x 4096\) .* is too large"),
    (Softmax(in_scale=0.0), r"Softmax.in_scale .* must be a finite number above 0"),
    (Requant(scale=1e-30), r"Requant.scale 1e-30 is too small"),
    (Requant(scale=0.1, per_channel_scale=[1.0, 1e-25, 1.0, 1.0]),
     r"Requant.scale \* Requant.per_channel_scale\[1\] .* is too small"),
    (Requant(scale=0.1, bias=[0, 0, 3e9, 0]), r"Requant.bias\[2\] = 3000000000.0 is "
                                              r"3000000000 accumulator units, outside int32"),
    (Gelu(in_scale=1e-3, out_scale=1e-12), r"Gelu.in_scale / Gelu.out_scale \(x 256\) .* too "
                                           r"large"),
    (Gelu(in_scale=math.nan, out_scale=0.1), r"Gelu.in_scale must be a finite number"),
    (Softmax(in_scale=0.1, mask=[0.0, math.nan, 0.0, 0.0]), r"Softmax.mask must not hold NaN"),
    (Softmax(in_scale=0.1, mask=[True, False]), r"Softmax.mask must have shape \(4,\)"),
    (LayerNorm(1e-3, [1e9] * 4, 0.0, 0.03, 1e-12, 0.01), r"LayerNorm.gamma / "
                                                          r"LayerNorm.out_scale reaches"),
    (LayerNorm(1e-3, 1.0, [0, 5.0, 0, 0], 0.03, 1e-12, 0.01), r"LayerNorm.beta\[1\]"),
    (LayerNorm(1e-3, 1.0, 0.0, 0.03, 1e-12, -0.01), r"LayerNorm.residual_scale must be above "
                                                    r"0"),
    (LayerNorm(1e-9, 1.0, 0.0, 0.03, 1e-12, 1e3), r"LayerNorm.residual_scale / "
                                                  r"LayerNorm.in_scale = .* is too large"),
    (LayerNorm(1e-3, 1.0, 0.0, 0.03, 1e20, 0.01), r"LayerNorm.eps 1e\+20 is too large"),
])
def test_unrepresentable_parameters_are_named(epilogue, message):
    with pytest.raises(ScaleError, match=message):
        compile_gemm(PRESETS["2x2"], 3, 4, 4, epilogue=epilogue)
    assert issubclass(ScaleError, ValueError)


def test_gemm_convenience_with_epilogues():
    cfg = PRESETS["4x8"]
    gen = torch.Generator().manual_seed(SEED)
    a, b, r = operands(6, 10, 12, gen)
    device = SoftwareDevice(cfg)
    ln = ep_mod.random_epilogue("layernorm", k=10, n=12, generator=gen)
    out = gemm(device, a, b, epilogue=ln, r=r.numpy()).outputs["c"]
    lowered = ep_mod.lower(ln, cfg, n=12, k=10)
    assert torch.equal(out, ep_mod.apply_integer(lowered, golden.gemm(a, b), r,
                                                 cols=cfg.ep_lanes))
    with pytest.raises(OperandError, match=r"LayerNorm epilogue needs the residual r, of shape "
                                           r"\(6, 12\)"):
        gemm(device, a, b, epilogue=ln)
    with pytest.raises(OperandError, match="only taken with the LayerNorm epilogue"):
        gemm(device, a, b, epilogue=Softmax(in_scale=0.01), r=r)
    with pytest.raises(OperandError, match=r"input 'r' must be .* of shape \(6, 12\)"):
        gemm(device, a, b, epilogue=ln, r=r[:, :5])
    # Without an epilogue the program and its output are the plain GEMM's.
    assert torch.equal(gemm(device, a, b).outputs["c"], golden.gemm(a, b))
    plain = compile_gemm(cfg, 6, 10, 12)
    assert all(i.op == isa.EpOp.RAW for i in plain.instrs if isinstance(i, isa.Store))
    assert plain.counts().get("SET", 0) == 0 and not plain.constants


def test_softmax_masks():
    cfg = PRESETS["2x2"]
    gen = torch.Generator().manual_seed(SEED + 1)
    m, k, n = 5, 6, 7
    a, b, _ = operands(m, k, n, gen)
    c = golden.gemm(a, b)
    scale = 2.0 / c.double().std().item()
    keep = torch.tensor([False, False, True, False, True, False, True])
    as_float = torch.where(keep, torch.tensor(-math.inf), torch.tensor(0.0)).double()
    outs = []
    for mask in (keep, as_float, as_float.numpy()):
        out = gemm(SoftwareDevice(cfg), a, b, epilogue=Softmax(in_scale=scale, mask=mask))
        outs.append(out.outputs["c"])
    assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], outs[2])
    assert not outs[0][:, keep].any()
    assert (outs[0].sum(dim=1) - intops.PROB_SCALE).abs().max() <= 4
    # A finite additive mask moves the logits by mask / in_scale accumulator units.
    lowered = ep_mod.lower(Softmax(in_scale=0.5, mask=[0.0, -1.0, 2.0, 0, 0, 0, 0]), cfg,
                           n=n, k=k)
    assert lowered.bias[:3].tolist() == [0, -2, 4]


# -- the fusion tiling --------------------------------------------------------------------

@pytest.mark.parametrize("op, shape", [("softmax", (128, 64, 128)),
                                       ("layernorm", (128, 256, 256)),
                                       ("gelu", (128, 256, 256))])
def test_fusion_tiling_of_the_acceptance_shapes(op, shape):
    """Row-wise ops get tiles of whole rows that fit half of the accumulator, a last tile of
    about ``rows`` rows and before it tiles whose drains the next tile's compute hides; the
    fused program takes at most 1.05 times the plain GEMM's cycles (the cycle model's, equal
    to the RTL's: verif/system/test_cycles.py)."""
    cfg = PRESETS["8x8"]
    m, k, n = shape
    gen = torch.Generator().manual_seed(SEED)
    epilogue = ep_mod.random_epilogue(op, k=k, n=n, generator=gen)
    fused = compile_gemm(cfg, m, k, n, epilogue=epilogue)
    plain = compile_gemm(cfg, m, k, n)
    plan = fused.meta["plan"]
    ratio = CycleModel(cfg).run(fused).cycles / CycleModel(cfg).run(plain).cycles
    print(f"{op}: {plan} ; plain {plain.meta['plan']}; ratio {ratio:.3f}")
    assert plan.op == epilogue.op.name
    if op in ("softmax", "layernorm"):
        assert plan.nb == -(-n // cfg.cols)
        assert max([plan.mb] + plan.ends) * plan.nb <= cfg.acc_depth // 2
        last = plan.tail or (m - (-(-m // plan.mb) - 1) * plan.mb)
        assert last <= 2 * cfg.rows and last <= plan.mb
    assert ratio <= 1.05


def test_taper_hides_the_drains_before_the_tail(monkeypatch):
    """On 8x8 a SOFTMAX drain of 128 columns takes 64 cycles a row and the compute of K = 64 128
    a row: the blocks before the tail of 8 rows halve (32, 16), so each drain fits in the next
    tile's compute and only the tail's is exposed. That is the plan the step-by-step estimate
    picks; the cycle model's pick (the planner's for a program this small) is at least as
    fast."""
    cfg = PRESETS["8x8"]
    chosen = compile_gemm(cfg, 128, 64, 128, epilogue=Softmax(in_scale=0.01))
    monkeypatch.setattr(tiler.plan, "_EXACT_MAX_INSTRUCTIONS", 0)
    program = compile_gemm(cfg, 128, 64, 128, epilogue=Softmax(in_scale=0.01))
    plan = program.meta["plan"]
    assert plan.tail == cfg.rows and plan.taper >= 2 and plan.ends[-3:] == [32, 16, 8]
    assert CycleModel(cfg).run(chosen).cycles <= CycleModel(cfg).run(program).cycles
    rows = [s.rows for s in program.instrs if isinstance(s, isa.Store)]
    assert rows[-3:] == [32, 16, 8] and sum(rows) == 128
    report = CycleModel(cfg).run(program)
    assert report.breakdown["store_drain"] <= 2 * cfg.ep_ratio * 8 * 16 + 64
    bad = dataclasses.replace(plan, taper=5)
    with pytest.raises(ProgramError, match="plan taper must be an int"):
        compile_gemm(cfg, 128, 64, 128, epilogue=Softmax(in_scale=0.01), plan=bad)


@pytest.mark.parametrize("name", CONFIGS)
def test_row_wise_plans_hold_whole_rows(name):
    cfg = PRESETS[name]
    rng = random.Random(SEED)
    widest = min(300, cfg.acc_depth // 2 * cfg.cols // 4)   # rows of at least 4 tile rows
    for _ in range(8):
        m, k, n = rng.randint(1, 150), rng.randint(1, 150), rng.randint(1, widest)
        for epilogue in (Softmax(in_scale=0.01),
                         LayerNorm(1e-3, 1.0, 0.0, 0.03, 1e-12, 0.01)):
            program = compile_gemm(cfg, m, k, n, epilogue=epilogue)
            program.validate()
            stores = [i for i in program.instrs if isinstance(i, isa.Store)]
            assert all(s.strips == -(-n // cfg.cols) for s in stores)
            assert sum(s.rows for s in stores) == m


def test_device_reports_bad_epilogue_state():
    """Unvalidated, a two-pass STORE with ROW_LEN 0 stops the software device with an error."""
    program, data = _bare(SMALL, [_store(op=isa.EpOp.SOFTMAX)])
    with pytest.raises(DeviceError, match=r"instruction 0 \(STORE SOFTMAX\): row_len"):
        SoftwareDevice(SMALL)._execute(program, data)
