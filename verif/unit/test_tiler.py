"""Pure-Python tests of the GEMM tiler: every program it emits is valid and, run on the
bit-exact software device (in program order and in adversarial interleavings of the three
units), equals golden.gemm and an int64 matmul."""

import dataclasses
import itertools
import random

import pytest
import torch

from bertaccel import golden
from bertaccel.hw import isa
from bertaccel.hw.config import PRESETS
from bertaccel.sw import Program, ProgramError, SoftwareDevice, TilePlan, compile_gemm, plan_gemm
from bertaccel.sw.cycles import CycleModel

ARRAYS = ["2x2", "4x4", "4x8", "8x8"]
SEED = 1234


def small(name, spad_depth=64, acc_depth=64):
    """A preset with tiny memories, so that even small GEMMs take many steps and tiles."""
    return dataclasses.replace(PRESETS[name], spad_depth=spad_depth, acc_depth=acc_depth)


def operands(m, k, n, seed, low=-128, high=128):
    gen = torch.Generator().manual_seed(seed)
    a = torch.randint(low, high, (m, k), generator=gen, dtype=torch.int8)
    b = torch.randint(low, high, (k, n), generator=gen, dtype=torch.int8)
    return a, b


def check(cfg, a, b, *, interleave=None, plan=None):
    """Compile, validate, run and compare; returns the program."""
    (m, k), n = a.shape, b.shape[1]
    program = compile_gemm(cfg, m, k, n, plan=plan)
    program.validate()
    result = SoftwareDevice(cfg, interleave=interleave).run(program, a=a, b=b)
    c = result.outputs["c"]
    expected = golden.gemm(a, b)
    assert c.dtype == torch.int32 and c.shape == (m, n)
    assert torch.equal(c, expected), (cfg.name, m, k, n, interleave, program.meta["plan"])
    assert torch.equal(expected.long(), a.long() @ b.long())  # no wrap at these sizes
    return program


def shapes_for(name, seed):
    cfg = PRESETS[name]
    r, c = cfg.rows, cfg.cols
    fixed = [(1, 1, 1), (1, 1, 9), (9, 1, 1), (1, 9, 1), (3, 5, 7), (r, r, c),
             (r - 1, r + 1, c + 1), (2 * r + c + 1, 3 * r - 1, 2 * c + 1), (4, 37 * r + 3, 6),
             (64, 64, 64)]
    rng = random.Random(seed)
    return fixed + [(rng.randint(1, 150), rng.randint(1, 150), rng.randint(1, 150))
                    for _ in range(6)]


@pytest.mark.parametrize("name", ARRAYS)
def test_random_shapes_match_golden(name):
    seed = SEED + ARRAYS.index(name)
    print(f"seed {seed}")
    cfg = PRESETS[name]
    for number, (m, k, n) in enumerate(shapes_for(name, seed)):
        a, b = operands(m, k, n, seed + number)
        check(cfg, a, b)


@pytest.mark.parametrize("name", ARRAYS)
def test_extreme_values(name):
    cfg = PRESETS[name]
    a = torch.full((3, 4096), -128, dtype=torch.int8)
    b = torch.full((4096, 5), -128, dtype=torch.int8)
    program = check(cfg, a, b)
    c = SoftwareDevice(cfg).run(program, a=a, b=b).outputs["c"]
    assert bool((c == 67108864).all())
    # Signs mixed at the extremes of int8.
    a, b = operands(7, 300, 11, SEED)
    check(cfg, torch.where(a < 0, -128, 127).to(torch.int8),
          torch.where(b < 0, -128, 127).to(torch.int8))


@pytest.mark.parametrize("name", ARRAYS)
def test_all_zero_inputs(name):
    cfg = PRESETS[name]
    a = torch.zeros((13, 21), dtype=torch.int8)
    b = torch.zeros((21, 17), dtype=torch.int8)
    check(cfg, a, b)


@pytest.mark.parametrize("name", ARRAYS + ["16x16", "32x32"])
def test_double_buffering_under_interleavings(name):
    """With 64-row memories the tiler needs many steps and C tiles, so every token channel
    is used; the units then run in orders the hardware may choose."""
    cfg = small(name)
    seed = SEED + 17
    print(f"seed {seed}")
    for number, (m, k, n) in enumerate([(37, 50, 29), (70, 9, 40), (5, 130, 3)]):
        a, b = operands(m, k, n, seed + number)
        program = check(cfg, a, b)
        plan = program.meta["plan"]
        if (m, k, n) == (37, 50, 29) and cfg.rows <= 8:
            assert plan.n_steps >= 3 and plan.n_tiles >= 3, plan
        for interleave in ("load-first", "store-last", seed, seed + 1):
            check(cfg, a, b, interleave=interleave)


def test_every_blocking_is_correct():
    """Force each blocking of a small GEMM, both loop orders, under a random interleaving."""
    cfg = small("4x8", spad_depth=128, acc_depth=64)
    m, k, n = 11, 13, 21      # 4 K tiles, 3 N strips
    a, b = operands(m, k, n, SEED)
    for mb in (1, 3, 11):
        for kb in (1, 2, 4):
            for nb in (1, 2, 3):
                for order in ("m", "n"):
                    if mb * kb > 64 or kb * nb * cfg.rows > 64 or mb * nb > 32:
                        continue
                    plan = TilePlan(m=m, k=k, n=n, mb=mb, kb=kb, nb=nb, order=order,
                                    n_steps=0, n_tiles=0, est_cycles=1, macs_per_cycle=32)
                    check(cfg, a, b, plan=plan, interleave=SEED + mb + kb + nb)
                    check(cfg, a, b, plan=plan, interleave="load-first")


def test_resident_operands_are_loaded_once():
    cfg = small("4x4", spad_depth=128, acc_depth=64)
    m, k, n = 8, 16, 16       # 4 K tiles, 4 N strips
    a, b = operands(m, k, n, SEED)
    # M outer, all of K in one step: the A tile stays while the B tiles stream past it.
    plan = TilePlan(m=m, k=k, n=n, mb=8, kb=4, nb=2, order="m", n_steps=0, n_tiles=0,
                    est_cycles=1, macs_per_cycle=16)
    program = check(cfg, a, b, plan=plan, interleave="load-first")
    assert program.n_data_beats == m * 4 + 4 * 4 * cfg.rows
    assert loaded(program, isa.Target.SPAD_A) == m * 4          # once, in the first step
    # N outer: the B tile stays while the A tiles stream past it.
    plan = dataclasses.replace(plan, mb=2, kb=4, nb=4, order="n")
    program = check(cfg, a, b, plan=plan, interleave="load-first")
    assert program.n_data_beats == m * 4 + 4 * 4 * cfg.rows
    assert loaded(program, isa.Target.SPAD_B) == 4 * 4 * cfg.rows


def loaded(program, target):
    """The beats ``program`` loads into ``target``."""
    return sum(instr.count for instr in program.instrs
               if isinstance(instr, isa.Load) and instr.target == target)


def test_first_step_loads_in_chunks():
    """The first step's loads come in chunks, each pushing a token that the MATMUL of its first
    weight block pops: the first MATMUL waits for one chunk, not the step. The chunks leave the
    load queue room for the operand rows."""
    cfg = small("4x4", spad_depth=1024, acc_depth=512)
    m, k, n = 8, 16, 64                         # 4 K tiles, 16 N strips: 64 blocks
    a, b = operands(m, k, n, SEED)
    plan = TilePlan(m=m, k=k, n=n, mb=8, kb=4, nb=16, order="m", n_steps=0, n_tiles=0,
                    est_cycles=1, macs_per_cycle=16)
    program = check(cfg, a, b, plan=plan, interleave="load-first")
    head = list(itertools.takewhile(lambda instr: isinstance(instr, isa.Load), program.instrs))
    pushes = [instr for instr in head if instr.push_next]
    assert len(pushes) == cfg.queue_depth - 1 and len(head) <= cfg.queue_depth + 3
    assert all(instr.target == isa.Target.SPAD_B for instr in pushes)
    first = next(instr for instr in program.instrs if isinstance(instr, isa.Matmul))
    assert first.pop_prev
    pops = sum(instr.pop_prev for instr in program.instrs if isinstance(instr, isa.Matmul))
    pushed = sum(instr.push_next for instr in program.instrs if isinstance(instr, isa.Load))
    assert pops == pushed
    joined = unsplit(program, 4 * 16)
    assert CycleModel(cfg).run(program).cycles < CycleModel(cfg).run(joined).cycles


def unsplit(program, blocks):
    """The instructions of ``program`` with its first step (``blocks`` weight blocks) loaded
    by one LOAD of A and one of B, and one token for its MATMULs (for timing only: the data
    stream's order is not kept)."""
    head = list(itertools.takewhile(lambda instr: isinstance(instr, isa.Load), program.instrs))
    a = [instr for instr in head if instr.target == isa.Target.SPAD_A]
    b = [instr for instr in head if instr.target == isa.Target.SPAD_B]
    out = [dataclasses.replace(a[0], count=sum(i.count for i in a), push_next=False),
           dataclasses.replace(b[0], count=sum(i.count for i in b), push_next=True)]
    matmuls = 0
    for instr in program.instrs[len(head):]:
        if isinstance(instr, isa.Matmul):
            if matmuls and matmuls < blocks:
                instr = instr.with_deps(pop_prev=False)
            matmuls += 1
        out.append(instr)
    return out


def test_token_stripped_program_is_caught():
    """The interleaving device is a real check: without the e2l or s2e tokens the tiler's
    program still validates (the channels balance) but computes garbage when the load unit
    runs ahead or the store unit lags."""
    cfg = small("8x8")
    a, b = operands(37, 50, 29, SEED)
    program = compile_gemm(cfg, 37, 50, 29)
    expected = golden.gemm(a, b)
    for strip in ({isa.Load: "pop_next", isa.Matmul: "push_prev"},
                  {isa.Store: "push_prev", isa.Matmul: "pop_next"}):
        instrs = [instr.with_deps(**{strip[type(instr)]: False}) if type(instr) in strip
                  else instr for instr in program.instrs]
        stripped = Program(cfg, instrs, inputs=program.inputs, outputs=program.outputs,
                           pack_index=program.pack_index, unpack_index=program.unpack_index)
        stripped.validate()
        in_order = SoftwareDevice(cfg).run(stripped, a=a, b=b).outputs["c"]
        assert torch.equal(in_order, expected)
        racy = SoftwareDevice(cfg, interleave="load-first").run(stripped, a=a, b=b).outputs["c"]
        assert not torch.equal(racy, expected)


@pytest.mark.parametrize("name", ARRAYS + ["16x16", "32x32"])
def test_plans_fit_and_programs_are_lean(name):
    cfg = PRESETS[name]
    rng = random.Random(SEED)
    r, c = cfg.rows, cfg.cols   # sizes grow with the array, to keep the programs small
    shapes = [(1, 1, 1), (16 * r, 48 * r, 48 * c), (32 * r, 32 * r, 32 * c)] + \
        [(rng.randint(1, 60 * r), rng.randint(1, 60 * r), rng.randint(1, 60 * c))
         for _ in range(3)]
    for m, k, n in shapes:
        plan = plan_gemm(cfg, m, k, n)
        half_spad, half_acc = cfg.spad_depth // 2, cfg.acc_depth // 2
        assert plan.mb * plan.kb <= half_spad and plan.kb * plan.nb * cfg.rows <= half_spad
        assert plan.mb * plan.nb <= half_acc and plan.mb <= isa.FIELD_MAX
        program = compile_gemm(cfg, m, k, n)
        program.validate()
        counts = program.counts()
        kt, nt = -(-k // cfg.rows), -(-n // cfg.cols)
        assert counts["MATMUL"] == -(-m // plan.mb) * kt * nt
        assert counts["LOAD"] <= 2 * plan.n_steps + 2 * cfg.queue_depth   # first-step chunks
        assert counts["STORE"] == plan.n_tiles
        assert program.n_out_beats == m * nt
        assert program.inputs == {"a": (m, k), "b": (k, n)} and program.outputs == {"c": (m, n)}


def test_plan_256_cubed_on_8x8():
    cfg = PRESETS["8x8"]
    program = compile_gemm(cfg, 256, 256, 256)
    plan = program.meta["plan"]
    counts = program.counts()
    print(plan, f"utilization {plan.utilization:.3f}", counts, len(program))
    assert plan.est_cycles >= 256 ** 3 // cfg.macs_per_cycle
    assert plan.utilization > 0.95
    assert plan.mb >= cfg.rows
    assert counts["MATMUL"] == -(-256 // plan.mb) * 32 * 32
    # The loads of step 1 are issued before the MATMULs of step 0, so the load unit is not
    # starved by a full execute queue while step 0 computes.
    first_matmul = next(number for number, instr in enumerate(program.instrs)
                        if isinstance(instr, isa.Matmul))
    assert all(isinstance(instr, isa.Load) for instr in program.instrs[:first_matmul])
    assert first_matmul >= 3 and plan.n_steps >= 2


@pytest.mark.parametrize("dims, name", [
    ((0, 4, 4), "m"), ((4, -1, 4), "k"), ((4, 4, 2.5), "n"), ((True, 4, 4), "m"),
    ((4, "4", 4), "k"), ((4, 4, None), "n"),
])
def test_bad_dimension_is_named(dims, name):
    with pytest.raises(ValueError, match=f"GEMM dimension {name} must be an int"):
        compile_gemm(PRESETS["4x4"], *dims)
    with pytest.raises(ValueError, match=f"GEMM dimension {name}"):
        plan_gemm(PRESETS["4x4"], *dims)


def high_rows(m, k, n, k_high, seed):
    """Operands of a GEMM with ``k_high`` high rows: ``A = [P_high | P_low]`` (the 6-bit digits
    of 12-bit values ``P``) and ``B = [B_high; B_low]``, with ``C = P @ B`` when both halves of
    ``B`` are the same; here they differ, and ``C = (A_h @ B_h << 6) + A_l @ B_l``."""
    a, b = operands(m, k, n, seed)
    want = (a[:, :k_high].long() @ b[:k_high].long() << isa.MATMUL_SHIFT) \
        + a[:, k_high:].long() @ b[k_high:].long()
    return a, b, want


@pytest.mark.parametrize("name", ARRAYS)
def test_high_rows_are_shifted(name):
    # High rows of any count (a multiple of rows or not, all of K, none), in tiny memories
    # (many steps and K blocks) and full ones, in program order and interleaved.
    rng = random.Random(SEED)
    for cfg in (PRESETS[name], small(name)):
        for m, k, n, k_high in [(7, 10, 5, 3), (20, 2 * cfg.rows, 9, cfg.rows),
                                (33, 41, 17, 41), (5, 9, 3, 0), (1, 1, 1, 1),
                                (rng.randint(1, 80), 90, rng.randint(1, 40), rng.randint(1, 89))]:
            a, b, want = high_rows(m, k, n, k_high, rng.randrange(1000))
            program = compile_gemm(cfg, m, k, n, k_high=k_high)
            program.validate()
            assert program.meta["plan"].k_high == k_high
            for interleave in (None, rng.randrange(1000)):
                c = SoftwareDevice(cfg, interleave=interleave).run(program, a=a, b=b)
                assert torch.equal(c.outputs["c"].long(), want), (cfg, m, k, n, k_high)
            # The high K tiles are those of the first ceil(k_high / rows) and only they shift.
            kt_high = -(-k_high // cfg.rows)
            matmuls = [i for i in program.instrs if isinstance(i, isa.Matmul)]
            assert any(i.shift for i in matmuls) == (k_high > 0)
            assert sum(i.shift for i in matmuls) == len(matmuls) * kt_high // (
                kt_high + -(-(k - k_high) // cfg.rows))


def test_bad_k_high_is_refused():
    for k_high in (-1, 9, 2.0, True):
        with pytest.raises(ValueError, match="k_high must be an int from 0 to k = 8"):
            compile_gemm(PRESETS["4x4"], 4, 8, 4, k_high=k_high)
    plan = plan_gemm(PRESETS["4x4"], 4, 8, 4, k_high=3)
    with pytest.raises(ProgramError, match="8x4 GEMM with 3 high rows, not 4x8x4 with 5 high"):
        compile_gemm(PRESETS["4x4"], 4, 8, 4, k_high=5, plan=plan)


def test_bad_plans_are_refused():
    cfg = small("4x4")
    plan = TilePlan(m=8, k=8, n=8, mb=8, kb=2, nb=2, order="m", n_steps=0, n_tiles=0,
                    est_cycles=1, macs_per_cycle=16)
    compile_gemm(cfg, 8, 8, 8, plan=plan).validate()
    with pytest.raises(ProgramError, match="plan is for a 8x8x8 GEMM, not 8x8x9"):
        compile_gemm(cfg, 8, 8, 9, plan=plan)
    with pytest.raises(ProgramError, match=r"mb \* kb = 64 does not fit half of scratchpad A"):
        compile_gemm(cfg, 8, 8, 8, plan=dataclasses.replace(plan, mb=32))
    with pytest.raises(ProgramError, match=r"kb \* nb \* rows = 64 does not fit half of "
                                           r"scratchpad B"):
        compile_gemm(cfg, 8, 8, 8, plan=dataclasses.replace(plan, nb=8))
    with pytest.raises(ProgramError, match=r"mb \* nb = 64 does not fit half of the accum"):
        compile_gemm(cfg, 8, 8, 8, plan=dataclasses.replace(plan, mb=16, kb=1, nb=4))
    with pytest.raises(ProgramError, match="order must be 'm' or 'n'"):
        compile_gemm(cfg, 8, 8, 8, plan=dataclasses.replace(plan, order="k"))
    with pytest.raises(ProgramError, match="plan kb must be an int of at least 1, not 0"):
        compile_gemm(cfg, 8, 8, 8, plan=dataclasses.replace(plan, kb=0))


@pytest.mark.parametrize("name", ["2x2", "4x8"])
def test_batches_equal_their_members(name):
    """A batch of GEMMs compiled as one (small memories: many steps and tiles per member, every
    token channel crossing from member to member) equals each member compiled alone, under
    interleavings of the units; its program is no bigger than the members' together."""
    cfg = small(name)
    gen = torch.Generator().manual_seed(SEED + 3)
    for m, k, n, batch, k_high in [(37, 50, 29, 3, 0), (5, 9, 3, 4, 4), (1, 1, 1, 2, 0)]:
        a = torch.randint(-128, 128, (batch * m, k), generator=gen, dtype=torch.int8)
        b = torch.randint(-128, 128, (batch * k, n), generator=gen, dtype=torch.int8)
        program = compile_gemm(cfg, m, k, n, batch=batch, k_high=k_high)
        program.validate()
        plan = program.meta["plan"]
        assert plan.batch == batch and program.inputs == {"a": (batch * m, k),
                                                          "b": (batch * k, n)}
        want = torch.cat([golden.gemm(a_i, b_i, k_high=k_high)
                          for a_i, b_i in zip(a.chunk(batch), b.chunk(batch))])
        for interleave in (None, "load-first", "store-last", SEED):
            got = SoftwareDevice(cfg, interleave=interleave).run(program, a=a, b=b)
            assert torch.equal(got.outputs["c"], want), (name, m, k, n, batch, interleave)
        alone = compile_gemm(cfg, m, k, n, k_high=k_high, plan=dataclasses.replace(plan, batch=1))
        assert program.counts()["MATMUL"] == batch * alone.counts()["MATMUL"]
        assert len(program.instrs) <= batch * len(alone.instrs)


def test_bad_batch_is_refused():
    for batch in (0, -2, 1.5, True):
        with pytest.raises(ValueError, match="batch must be an int of at least 1"):
            compile_gemm(PRESETS["4x4"], 4, 8, 4, batch=batch)
    plan = plan_gemm(PRESETS["4x4"], 4, 8, 4, batch=3)
    with pytest.raises(ProgramError, match="plan is for a 3 x 4x8x4 GEMM, not 2 x 4x8x4"):
        compile_gemm(PRESETS["4x4"], 4, 8, 4, batch=2, plan=plan)
