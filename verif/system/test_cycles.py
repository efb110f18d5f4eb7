"""The cycle model (sw/cycles.py): closed forms and properties in pure Python, then the model
against the cycles the RTL counts.

The pure-Python tests check the model on programs whose timing can be worked out by hand from the
gateware (one LOAD, one MATMUL, one STORE, back-to-back MATMULs, a SET behind a STORE, a
one-row SOFTMAX that waits for its statistics), that it is monotonic in the work, that overlap
is really counted, that its reports add up, and that it is fast.

The RTL tests run hand-written programs (which must agree exactly), GEMMs of many shapes with
every epilogue on 2x2, 4x8 and 8x8, a program split into chunks by a small harness, and a full
all-MiniLM-L6-v2 encoder layer, and print model against RTL cycles. Every one must be equal.
``test_gemm_rtl.py`` and ``test_epilogue_rtl.py`` check every free-running run they make with
:func:`verif.helpers.check_model_cycles` too.
"""

import os
import random
import time

import numpy as np
import pytest
import torch

from bertaccel.hw import isa
from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice, compile_gemm
from bertaccel.sw import cycles as cm
from bertaccel.sw import epilogue as ep_mod
from bertaccel.sw.cycles import CycleModel, rtl_chunks
from bertaccel.sw.program import Program, ProgramError
from bertaccel.sw.sequence import concat
from verif.helpers import check_model_cycles

CONFIGS = ["2x2", "4x8", "8x8"]
OPS = [None, "requant", "gelu", "softmax", "layernorm"]


# -- hand-written programs ------------------------------------------------------------------------

def raw_program(cfg, instrs):
    """``instrs`` as a program with one flat input ``x`` (every LOAD beat) and output ``y``."""
    n_in = sum(i.count for i in instrs if isinstance(i, isa.Load))
    n_out = sum(i.count for i in instrs if isinstance(i, isa.Store))
    return Program(cfg, instrs, inputs={"x": (max(n_in, 1) * cfg.lanes,)},
                   outputs={"y": (n_out * cfg.cols,)},
                   pack_index=np.arange(n_in * cfg.lanes).reshape(n_in, cfg.lanes),
                   unpack_index=np.arange(n_out * cfg.cols).reshape(n_out, cfg.cols))


def raw_inputs(program):
    cfg = program.cfg
    gen = torch.Generator().manual_seed(len(program.instrs))
    size = max(program.n_data_beats, 1) * cfg.lanes
    return {"x": torch.randint(-128, 128, (size,), generator=gen, dtype=torch.int8)}


def load(count, **flags):
    return isa.Load(target=isa.Target.SPAD_A, addr=0, count=count, **flags)


def matmul(m_len, **flags):
    return isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=m_len, accumulate=False, **flags)


def store(rows, strips=1, op=isa.EpOp.RAW, **flags):
    return isa.Store(acc_addr=0, rows=rows, strips=strips, stride=rows, op=op, **flags)


def two_pass_sets(cfg, strips):
    """SETs that make a SOFTMAX / LAYERNORM STORE of ``strips`` strips legal."""
    return [isa.Set(index=isa.Param.ROW_LEN, value=strips * cfg.cols),
            isa.Set(index=isa.Param.SHIFT1, value=8)]


def hand_programs(cfg):
    """``{name: instructions}``: small programs whose timing the tests know exactly."""
    r = cfg.rows
    soft, norm = isa.EpOp.SOFTMAX, isa.EpOp.LAYERNORM
    chain = [load(2 * r, push_next=True), matmul(3, pop_prev=True, push_next=True),
             store(3, pop_prev=True)]
    progs = {
        "load": [load(5)],
        "load0": [load(0)],
        "loads": [load(5), load(0), load(3)],
        "matmul": [matmul(10)],
        "matmul0": [matmul(0)],
        "matmuls_short": [matmul(3)] * 5,
        "matmuls_rows": [matmul(r)] * 6,
        "matmuls_long": [matmul(2 * r + 5)] * 4,
        "matmuls_mixed": [matmul(1), matmul(r + 3), matmul(0), matmul(r), matmul(2), matmul(0)],
        "store": [store(10)],
        "store0": [store(0)],
        "store_set_store": [store(4, 2), isa.Set(index=isa.Param.MUL0, value=3), store(4)],
        "chain": chain,
        "chain_x3": chain * 3,
        "dispatch_blocked": [load(40, push_next=True)] * (cfg.queue_depth + 3)
        + [matmul(2, pop_prev=True)] * (cfg.queue_depth + 3),
        "serial": [load(r, push_next=True), matmul(5, pop_prev=True, push_prev=True),
                   load(r, pop_next=True, push_next=True), matmul(5, pop_prev=True)],
        "softmax_1x1": two_pass_sets(cfg, 1) + [store(1, 1, soft)],
        "softmax_3x1": two_pass_sets(cfg, 1) + [store(3, 1, soft)],
        "softmax_5x2": two_pass_sets(cfg, 2) + [store(5, 2, soft), store(2, 2, soft)],
        "layernorm_4x3": two_pass_sets(cfg, 3) + [store(4, 3, norm)],
        "layernorm_2x9": two_pass_sets(cfg, 9) + [store(2, 9, norm), store(1, 1, isa.EpOp.GELU)],
        "barrier": [store(0, push_prev=True), matmul(0, pop_next=True, push_prev=True),
                    load(0, pop_next=True)],
        "tokens_full": [load(0, push_next=True)] * 255 + [matmul(0, pop_prev=True)] * 255,
        # The execute unit's pushes wait for room (its room checks are registers): a long LOAD
        # or STORE ahead keeps the unit that pops busy past the execute unit's 255th push.
        "exec_to_load_full": [load(300 * r)] + [matmul(0, push_prev=True)] * 255
        + [load(0, pop_next=True), matmul(1, push_prev=True)] * 3 + [load(0, pop_next=True)] * 255,
        "exec_to_store_full": [store(cfg.acc_depth)] * (300 * r // cfg.acc_depth + 1)
        + [matmul(0, push_next=True)] * 255 + [store(0, pop_prev=True), matmul(1, push_next=True)] * 3
        + [store(0, pop_prev=True)] * 255,
    }
    return progs


# -- pure Python ----------------------------------------------------------------------------------

@pytest.mark.parametrize("name", CONFIGS)
def test_timing_is_read_from_the_gateware(name):
    from bertaccel.hw.epilogue import Epilogue
    from bertaccel.hw.execute import ExecuteUnit
    from bertaccel.hw.store import StoreUnit

    assert cm.ACC_WRITE_EXTRA == ExecuteUnit.OPERAND_DELAY + ExecuteUnit.WRITE_DELAY - 1
    cfg = PRESETS[name]
    timing = CycleModel(cfg).timing
    epilogue = Epilogue(cfg)
    epilogue._MustUse__silence = True   # read, never elaborated
    schedule = epilogue.schedule
    assert timing["mesh_latency"] == cfg.mesh_latency
    assert timing["fifo_depth"] == StoreUnit.FIFO_DEPTH
    assert timing["ep_latency"] == schedule.latency
    assert timing["ep_ratio"] == schedule.ratio == cfg.ep_ratio
    assert timing["gap"][isa.EpOp.SOFTMAX] == schedule.gap[isa.EpOp.SOFTMAX]


@pytest.mark.parametrize("name", CONFIGS)
def test_closed_forms(name):
    """Single instructions and steady streams, worked out from the gateware by hand."""
    cfg = PRESETS[name]
    model = CycleModel(cfg)
    timing = model.timing
    r = cfg.rows
    # The first instruction is in its queue's output register in this cycle; a unit takes it.
    taken = cm.FIRST_INSTRUCTION + cm.QUEUE_LATENCY
    done = cm.DONE_CYCLES

    def cycles(instrs):
        return model.run(instrs).cycles

    # LOAD: beats in the count cycles after the accept.
    for count in (0, 1, 5, 100):
        assert cycles([load(count)]) == taken + count + done
    # MATMUL: preload (rows reads, hand-over with the last), m_len rows, the last row's sums
    # written mesh_latency + 1 cycles after its read.
    for m_len in (1, 10, 77):
        assert cycles([matmul(m_len)]) == (taken + r + cm.PRELOAD_EXTRA + m_len
                                           + cfg.mesh_latency + cm.ACC_WRITE_EXTRA + done)
    # A MATMUL of m_len 0 holds the stream stage for one slot and writes nothing.
    assert cycles([matmul(0)]) == taken + r + cm.PRELOAD_EXTRA + 1 + done
    # STORE (RAW): one read a cycle from the cycle after the accept, the epilogue takes the
    # first STORE_READ_TO_FIFO cycles later and the others ep_ratio cycles apart (the reads
    # wait for room in the beat FIFO, never long enough to delay an accept), the last leaves
    # ep_latency after that.
    for beats in (1, 10, 64):
        assert cycles([store(beats)]) == (taken + 1 + cm.STORE_READ_TO_FIFO
                                          + timing["ep_ratio"] * (beats - 1)
                                          + timing["ep_latency"] + done)
    assert cycles([store(4, 3)]) == cycles([store(12)])
    # A SET waits until the epilogue is empty: one cycle after the last beat left.
    assert cycles([store(7), isa.Set(index=isa.Param.MUL0, value=1)]) == cycles([store(7)]) + 1
    # Back-to-back MATMULs: the stream stage takes m_len cycles (a slot for m_len 0), the
    # preload stage rows + PRELOAD_EXTRA (it takes the next MATMUL in the cycle it hands one
    # over), and no weight bank waits to drain (the mesh's weight wave): each MATMUL costs
    # max(m_len, rows) in steady state, whatever the bank.
    assert cm.PRELOAD_EXTRA == 0
    for m_len in (0, 1, 2, r - 1, r, r + 1, 2 * r + cfg.cols, 3 * r + 9):
        one = cycles([matmul(m_len)] * 10) - cycles([matmul(m_len)] * 9)
        assert one == max(m_len, 1, r + cm.PRELOAD_EXTRA), (m_len, one)
    # A one-row SOFTMAX of one strip: the second pass waits gap cycles for its statistics.
    gap = timing["gap"][isa.EpOp.SOFTMAX]
    one = cycles(two_pass_sets(cfg, 1)[:1] + [store(1, 1, isa.EpOp.SOFTMAX)])
    set_cycles = 1   # the SET goes first through the store queue: the STORE comes one later
    last_first_pass = taken + set_cycles + 1 + cm.STORE_READ_TO_FIFO
    assert one == last_first_pass + gap + timing["ep_latency"] + done


def _random_program(rng, cfg, steps):
    """A legal random program: steps of LOADs, MATMULs and STOREs with tokens between them."""
    instrs = []
    for step in range(steps):
        for _ in range(rng.randint(0, 2)):
            instrs.append(load(rng.randint(0, 3 * cfg.rows)))
        instrs.append(load(rng.randint(1, 3 * cfg.rows), push_next=True,
                           pop_next=step >= 2))
        m = rng.randint(1, 4 * cfg.rows)
        for j in range(rng.randint(1, 4)):
            instrs.append(matmul(m if j else rng.choice([0, m]), pop_prev=j == 0,
                                 pop_next=j == 0 and step >= 2))
        instrs[-1] = instrs[-1].with_deps(push_next=True, push_prev=step + 2 < steps)
        op = rng.choice([isa.EpOp.RAW, isa.EpOp.GELU, isa.EpOp.SOFTMAX, isa.EpOp.LAYERNORM])
        instrs.append(store(rng.randint(1, m), rng.randint(1, 3), op, pop_prev=True,
                            push_prev=step + 2 < steps))
    return instrs


def test_monotonic_in_work():
    """More beats, rows or instructions never take fewer cycles."""
    rng = random.Random(11)
    for name in CONFIGS:
        cfg = PRESETS[name]
        model = CycleModel(cfg)
        for _ in range(20):
            instrs = _random_program(rng, cfg, rng.randint(1, 8))
            base = model.run(instrs).cycles
            for _ in range(5):
                i = rng.randrange(len(instrs))
                ins = instrs[i]
                if isinstance(ins, isa.Load):
                    bigger = isa.Load(**{**vars(ins), "count": ins.count + rng.randint(1, 9)})
                elif isinstance(ins, isa.Matmul):
                    bigger = isa.Matmul(**{**vars(ins), "m_len": ins.m_len + rng.randint(1, 9)})
                else:
                    bigger = isa.Store(**{**vars(ins), "rows": ins.rows + rng.randint(1, 3)})
                more = model.run(instrs[:i] + [bigger] + instrs[i + 1:]).cycles
                assert more >= base, (name, i, ins, bigger, base, more)
            assert model.run(instrs + instrs[:1]).cycles >= base


def test_overlap_is_counted():
    """The tiler's double buffering hides loads and stores behind compute; a program whose
    tokens serialise the units hides nothing."""
    cfg = PRESETS["8x8"]
    model = CycleModel(cfg)
    program = compile_gemm(cfg, 256, 512, 256)
    report = model.run(program)
    load_beats = program.n_data_beats
    rows = sum(i.m_len for i in program.instrs if isinstance(i, isa.Matmul))
    serial = load_beats + rows + program.n_out_beats
    print(f"256x512x256 on 8x8: {report.summary()}; serial sum {serial}")
    assert report.cycles < rows + 0.1 * (load_beats + program.n_out_beats)   # all but hidden
    assert report.breakdown["compute"] == rows
    assert report.overlap["load_busy"] == load_beats
    assert report.overlap["load_hidden_share"] > 0.8
    assert report.overlap["store_hidden_share"] > 0.8
    assert report.breakdown["load_wait"] < 0.1 * load_beats

    # Load, compute, load again only once the compute is done: nothing is hidden.
    instrs = []
    for step in range(6):
        instrs.append(load(50, push_next=True, pop_next=step > 0))
        instrs.append(matmul(50, pop_prev=True, push_prev=step < 5))
    serial = model.run(instrs)
    assert serial.overlap["load_hidden"] == 0
    assert serial.breakdown["load_wait"] >= 5 * 50
    # The same work with free buffers overlaps: fewer cycles, loads hidden.
    free = model.run([load(50, push_next=True)] * 6 + [matmul(50, pop_prev=True)] * 6)
    assert free.cycles < serial.cycles - 4 * 50
    assert free.overlap["load_hidden"] > 3 * 50


@pytest.mark.parametrize("name", CONFIGS)
def test_reports_add_up(name):
    cfg = PRESETS[name]
    model = CycleModel(cfg)
    rng = random.Random(CONFIGS.index(name))
    for _ in range(10):
        instrs = _random_program(rng, cfg, rng.randint(1, 10))
        report = model.run(instrs)
        assert sum(report.breakdown.values()) == report.cycles
        assert sum(report.by_class.values()) == report.cycles
        assert int(report.charged.sum()) == report.cycles
        assert set(report.breakdown) == set(cm.BREAKDOWN)
        assert (report.dispatch >= cm.FIRST_INSTRUCTION).all()
        assert (report.start >= report.dispatch + cm.QUEUE_LATENCY).all()
        assert (report.end >= report.start).all()
        assert (report.end < report.cycles).all()
        mm = np.array([isinstance(i, isa.Matmul) for i in instrs])
        assert (report.stream[mm] >= report.start[mm] + cfg.rows + 1).all()
        assert (report.stream[~mm] == -1).all()
        for unit in ("load", "exec", "store"):
            mine = [n for n, i in enumerate(instrs) if isa.unit_of(i) == unit]
            assert (np.diff(report.start[mine]) >= 1).all()       # in order, one at a time


def test_chunks_carry_tokens():
    cfg = PRESETS["2x2"]
    model = CycleModel(cfg)
    instrs = [load(4, push_next=True), load(4, push_next=True), matmul(6, pop_prev=True),
              matmul(6, pop_prev=True, push_next=True), store(6, pop_prev=True)]
    whole = model.run(instrs)
    # Split between the LOADs' pushes and the MATMULs' pops: the tokens wait in their
    # channels, and every chunk starts with empty pipelines.
    split = model.run(instrs, chunks=[(0, 2), (2, 4), (4, 5)])
    alone = [[load(4, push_next=True), load(4, push_next=True)],     # tokens already there
             [matmul(6), matmul(6, push_next=True)], [store(6)]]
    assert split.chunk_cycles == [model.run(part).cycles for part in alone]
    assert split.cycles == sum(split.chunk_cycles) > whole.cycles
    assert sum(split.breakdown.values()) == split.cycles
    assert split.start[2] >= split.chunk_cycles[0]
    with pytest.raises(ValueError, match="cover the program"):
        model.run(instrs, chunks=[(0, 2), (3, 5)])
    # rtl_chunks is the RTL device's split.
    from bertaccel.hw.harness import harness_chunks
    program = compile_gemm(cfg, 24, 40, 12)
    depths = (64, 256, 64)
    assert rtl_chunks(program, depths) == [(f, e) for f, e, _, _ in harness_chunks(
        program.instrs, depths)]
    assert len(rtl_chunks(program, depths)) > 2 and rtl_chunks(program) == [(0, len(program))]


def test_illegal_program_is_refused():
    model = CycleModel(PRESETS["2x2"])
    with pytest.raises(ProgramError, match=r"instruction 1 \(MATMUL\) pops channel l2e"):
        model.run([load(1), matmul(1, pop_prev=True)])


def test_classes_by_region():
    """Labelled regions go to their op class; what a nonlinear STORE exposes to its op."""
    cfg = PRESETS["4x8"]
    gen = torch.Generator().manual_seed(3)
    qk = compile_gemm(cfg, 16, 16, 16,
                      epilogue=ep_mod.random_epilogue("softmax", k=16, n=16, generator=gen))
    ffn = compile_gemm(cfg, 16, 32, 24)
    joined = concat([qk, ffn])
    (_, a0, a1), (_, b0, b1) = joined.meta["parts"]
    report = CycleModel(cfg).run(joined, regions=[(a0, a1, "attn_matmul"), (b0, b1, "gemm")])
    assert sum(report.by_class.values()) == report.cycles
    assert report.by_class["attn_matmul"] > 0 and report.by_class["gemm"] > 0
    assert report.by_class["softmax"] > 0
    assert report.by_class["layernorm"] == report.by_class["gelu"] == 0
    from bertaccel.analysis.profile import OP_CLASSES, accel_breakdown
    assert cm.OP_CLASSES == OP_CLASSES
    assert accel_breakdown(report.by_class)["total_cycles"] == report.cycles
    with pytest.raises(ValueError, match="op class"):
        CycleModel(cfg).run(joined, regions=[(0, 1, "matmul")])


def test_speed():
    """A 100 000-instruction program in a few seconds."""
    cfg = PRESETS["4x8"]
    block = [load(12, push_next=True), load(8), matmul(12, pop_prev=True),
             matmul(12, push_next=True), store(12, 2, pop_prev=True)]
    instrs = block * 20_000
    start = time.perf_counter()
    report = CycleModel(cfg).run(instrs)
    elapsed = time.perf_counter() - start
    print(f"{len(instrs)} instructions in {elapsed:.2f} s ({len(instrs) / elapsed:,.0f} "
          f"instructions/s): {report.summary()}")
    assert elapsed < 10
    assert report.breakdown["compute"] == 24 * 20_000


def test_software_device_reports_model_cycles():
    cfg = PRESETS["4x8"]
    gen = torch.Generator().manual_seed(8)
    a = torch.randint(-128, 128, (21, 30), generator=gen, dtype=torch.int8)
    b = torch.randint(-128, 128, (30, 19), generator=gen, dtype=torch.int8)
    program = compile_gemm(cfg, 21, 30, 19)
    result = SoftwareDevice(cfg).run(program, a=a, b=b)
    report = CycleModel(cfg).run(program)
    assert result.cycles == report.cycles
    assert result.stats["cycle_breakdown"] == report.breakdown
    assert result.stats["cycle_report"].cycles == report.cycles
    interleaved = SoftwareDevice(cfg, interleave=5).run(program, a=a, b=b)
    assert interleaved.cycles == result.cycles
    assert torch.equal(interleaved.outputs["c"], result.outputs["c"])
    off = SoftwareDevice(cfg, cycle_model=False).run(program, a=a, b=b)
    assert off.cycles is None and "cycle_breakdown" not in off.stats
    assert torch.equal(off.outputs["c"], result.outputs["c"])
    depths = (64, 256, 64)
    chunked = SoftwareDevice(cfg, harness_depths=depths).run(program, a=a, b=b)
    assert chunked.cycles == CycleModel(cfg).run(program,
                                                 chunks=rtl_chunks(program, depths)).cycles
    assert chunked.cycles > result.cycles


# -- against the RTL ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def table():
    """Rows of model-against-RTL figures, printed at the end of the module."""
    rows = []
    yield rows
    if rows:
        worst = max(rows, key=lambda row: abs(row[-1]))
        lines = [f"{'case':<44}{'RTL':>10}{'model':>10}{'error':>10}"]
        lines += [f"{what:<44}{rtl:>10}{model:>10}{error:>+10.3%}"
                  for what, rtl, model, error in rows]
        lines.append(f"all {len(rows)} runs exact" if worst[-1] == 0 else
                     f"worst: {worst[0]} {worst[-1]:+.3%} over {len(rows)} runs")
        print("\n" + "\n".join(lines))


def _compare(table, device, program, inputs, what):
    result = device.run(program, **inputs)
    model = check_model_cycles(device, program, result, what=what)
    table.append((f"{device.cfg.name} {what}", result.cycles, model, 0.0))
    return result


@pytest.fixture(scope="module", params=CONFIGS)
def free_device(request, rtl_device):
    cfg = PRESETS[request.param]
    return rtl_device(cfg, seed=1)   # the free-running device test_epilogue_rtl.py uses too


def test_rtl_hand_programs(free_device, table):
    """Small programs: the model must agree exactly."""
    cfg = free_device.cfg
    for name, instrs in hand_programs(cfg).items():
        program = raw_program(cfg, instrs)
        _compare(table, free_device, program, raw_inputs(program), name)


def test_rtl_matmuls_of_rows_rows_have_no_bubbles(free_device, table):
    """The weight wave: MATMULs of ``rows`` operand rows each stream back to back.

    Before it, a weight bank had to drain ``rows + cols - 2`` cycles behind its last operand
    row, and a pair of such MATMULs cost ``3 * rows + cols`` cycles; now the preload of every
    MATMUL hides behind the stream of the one before, whichever weight rows it reads. The
    results must equal the software device's, and the RTL's cycles the model's.
    """
    cfg = free_device.cfg
    r = cfg.rows
    rng = random.Random(31 + CONFIGS.index(cfg.name))
    count = 24
    instrs = [isa.Load(target=isa.Target.SPAD_B, addr=0, count=2 * r),
              isa.Load(target=isa.Target.SPAD_A, addr=0, count=4 * r, push_next=True)]
    for j in range(count):
        # Pairs accumulate into the same rows; the weight rows start anywhere in scratchpad B.
        instrs.append(isa.Matmul(a_addr=rng.randrange(3 * r + 1), b_addr=rng.randrange(r + 1),
                                 acc_addr=(j // 2) * r, m_len=r, accumulate=j % 2 == 1,
                                 pop_prev=j == 0, push_next=j == count - 1))
    rows_out = count // 2 * r
    instrs.append(isa.Store(acc_addr=0, rows=rows_out, strips=1, stride=rows_out,
                            op=isa.EpOp.RAW, pop_prev=True))
    program = raw_program(cfg, instrs)
    inputs = raw_inputs(program)
    result = _compare(table, free_device, program, inputs, f"{count} MATMULs of {r} rows")
    ref = SoftwareDevice(cfg).run(program, **inputs)
    assert torch.equal(result.outputs["y"], ref.outputs["y"])
    report = CycleModel(cfg).run(program)
    first = 2
    streams = report.stream[first:first + count]
    assert np.all(np.diff(streams) == r), streams          # no cycle between the MATMULs
    assert report.breakdown["compute"] == count * r
    assert report.breakdown["preload"] <= r + 1            # the first preload alone
    old_pair = 3 * r + cfg.cols                            # max(2m, 2(rows + 2), m + 2 rows + cols)
    print(f"{cfg.name}: {count} MATMULs of {r} rows stream in {streams[-1] + r - streams[0]} "
          f"cycles (was {count // 2 * old_pair}); {report.summary()}")


def _check_free_and_stalled(table, free_device, stalled, program, what):
    """Run a raw program free-running (cycle-exact with the model) and on the ``stalled``
    device; both outputs must equal the software device's."""
    inputs = raw_inputs(program)
    ref = SoftwareDevice(program.cfg).run(program, **inputs)
    result = _compare(table, free_device, program, inputs, what)
    assert torch.equal(result.outputs["y"], ref.outputs["y"])
    result = stalled.run(program, **inputs)
    assert torch.equal(result.outputs["y"], ref.outputs["y"])


def test_rtl_random_matmul_chains(free_device, rtl_device, table):
    """Chains of MATMULs of random lengths (0 to 3 * rows, so the preload is sometimes hidden and
    sometimes not) on random weight rows, pairs accumulating: bit-exact with the software
    device, free-running (cycle-exact with the model) and with stalled streams."""
    cfg = free_device.cfg
    r = cfg.rows
    seed = 41 + CONFIGS.index(cfg.name)
    print(f"seed {seed}")
    rng = random.Random(seed)
    stalled = rtl_device(cfg, seed=2, src_idle=77, sink_stall=102)
    for trial in range(3):
        instrs = [isa.Load(target=isa.Target.SPAD_B, addr=0, count=2 * r),
                  isa.Load(target=isa.Target.SPAD_A, addr=0, count=4 * r, push_next=True)]
        stores = []
        pairs = rng.randint(3, 12)
        for q in range(pairs):
            first = rng.randint(1, 3 * r)
            for m_len, accumulate in ((first, False), (rng.randint(0, first), True)):
                instrs.append(isa.Matmul(a_addr=rng.randrange(4 * r - m_len + 1),
                                         b_addr=rng.randrange(r + 1), acc_addr=q * 3 * r,
                                         m_len=m_len, accumulate=accumulate,
                                         pop_prev=len(instrs) == 2))
                if rng.random() < 0.2:
                    instrs.append(matmul(0))
            stores.append(isa.Store(acc_addr=q * 3 * r, rows=first, strips=1, stride=first,
                                    op=isa.EpOp.RAW, pop_prev=q == 0))
        instrs[-1] = instrs[-1].with_deps(push_next=True)
        _check_free_and_stalled(table, free_device, stalled, raw_program(cfg, instrs + stores),
                                f"random MATMUL chain {trial} ({pairs} pairs)")


def test_rtl_accumulator_forwarding(free_device, rtl_device, table):
    """MATMULs that accumulate into overlapping rows, so that a row is read while the rows two to
    ``ExecuteUnit.FORWARDED`` cycles ahead of it still have their writes in flight (the execute
    unit forwards those), and MATMULs whose first row accumulates onto the last row of the one
    before (the hand-over waits a cycle: no row is one cycle behind a write to its row).

    Compiled GEMMs only revisit a row ``rows`` or more cycles later; here each MATMUL starts at a
    random row of a small window, so every distance occurs, and a few rows are read with nothing
    accumulated (``accumulate`` off) in between. Bit-exact with the software device, free-running
    (cycle-exact with the model) and with stalled streams.
    """
    from bertaccel.hw.execute import ExecuteUnit

    cfg = free_device.cfg
    r = cfg.rows
    seed = 61 + CONFIGS.index(cfg.name)
    print(f"seed {seed}")
    rng = random.Random(seed)
    stalled = rtl_device(cfg, seed=2, src_idle=77, sink_stall=102)
    window = 2 * r + 2
    distances = set()
    hazards = 0
    for trial in range(2):
        instrs = [isa.Load(target=isa.Target.SPAD_B, addr=0, count=2 * r),
                  isa.Load(target=isa.Target.SPAD_A, addr=0, count=4 * r, push_next=True)]
        # The first MATMUL writes every row of the window, so each later one may accumulate.
        # Half the others start a few rows before the end of the one before.
        spans = [(0, window, False)]
        for _ in range(30):
            addr, m_len, _ = spans[-1]
            if rng.random() < 0.5:
                addr = max(addr + m_len - rng.randint(1, ExecuteUnit.FORWARDED), 0)
            else:
                addr = rng.randrange(window)
            m_len = min(rng.randint(r, r + 2), window - addr)
            spans.append((addr, m_len, rng.random() < 0.9))
        for addr, m_len, accumulate in spans:
            instrs.append(isa.Matmul(a_addr=rng.randrange(4 * r - m_len + 1),
                                     b_addr=rng.randrange(r + 1), acc_addr=addr, m_len=m_len,
                                     accumulate=accumulate, pop_prev=len(instrs) == 2))
        instrs[-1] = instrs[-1].with_deps(push_next=True)
        instrs.append(isa.Store(acc_addr=0, rows=window, strips=1, stride=window,
                                op=isa.EpOp.RAW, pop_prev=True))
        program = raw_program(cfg, instrs)
        _check_free_and_stalled(table, free_device, stalled, program,
                                f"overlapping accumulation {trial}")
        # Which read-after-write distances (in stream cycles) the trial produced.
        report = CycleModel(cfg).run(program)
        hazards += report.breakdown["acc_hazard"]
        last_write = {}
        for start, instr in zip(report.stream[2:], instrs[2:-1]):
            for row in range(instr.m_len):
                cycle = start + row
                if instr.accumulate and instr.acc_addr + row in last_write:
                    distances.add(cycle - last_write[instr.acc_addr + row])
                last_write[instr.acc_addr + row] = cycle
    assert 1 not in distances and set(range(2, ExecuteUnit.FORWARDED + 1)) <= distances, \
        sorted(distances)
    assert hazards > 0


def _gemm_case(cfg, m, k, n, op, gen):
    a = torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8)
    b = torch.randint(-128, 128, (k, n), generator=gen, dtype=torch.int8)
    inputs = {"a": a, "b": b}
    epilogue = None if op is None else ep_mod.random_epilogue(op, k=k, n=n, generator=gen)
    if op == "layernorm":
        inputs["r"] = torch.randint(-128, 128, (m, n), generator=gen, dtype=torch.int8)
    return compile_gemm(cfg, m, k, n, epilogue=epilogue), inputs


@pytest.mark.parametrize("op", OPS, ids=lambda op: op or "raw")
def test_rtl_gemms(free_device, table, op):
    """GEMMs of many shapes with every epilogue (and none)."""
    cfg = free_device.cfg
    seed = 500 + 10 * CONFIGS.index(cfg.name) + OPS.index(op)
    print(f"seed {seed}")
    rng = random.Random(seed)
    gen = torch.Generator().manual_seed(seed)
    r, c = cfg.rows, cfg.cols
    shapes = [(1, 1, 1), (r, r, c), (2 * r + c, 3 * r + 1, 2 * c - 1), (3, 20 * r + 3, c + 1),
              (70, r, 3 * c)]
    shapes += [(rng.randint(1, 8 * r), rng.randint(1, 8 * r), rng.randint(1, 8 * c))
               for _ in range(4)]
    for m, k, n in shapes:
        program, inputs = _gemm_case(cfg, m, k, n, op, gen)
        _compare(table, free_device, program, inputs, f"{op or 'raw'} {m}x{k}x{n}")


def test_rtl_chunked(rtl_device, table):
    """A program larger than a small harness runs in chunks; the model splits it the same way."""
    cfg = PRESETS["2x2"]
    device = rtl_device(cfg, instr_depth=64, data_depth=256, out_depth=64)  # test_build's
    gen = torch.Generator().manual_seed(21)
    for m, k, n, op in ((24, 40, 12, None), (8, 40, 12, "softmax"), (10, 20, 10, "layernorm")):
        program, inputs = _gemm_case(cfg, m, k, n, op, gen)
        result = _compare(table, device, program, inputs, f"chunked {op or 'raw'} {m}x{k}x{n}")
        assert result.stats["chunks"] > 1


def test_rtl_minilm_layer(rtl_device, table):
    """A full all-MiniLM-L6-v2 encoder layer (its six programs) on the 8x8 RTL."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from bertaccel.golden.sentences import calibration_sentences
    from bertaccel.sw.bert import STAGES, compile_bert, run_layer

    cfg = PRESETS["8x8"]
    device = rtl_device(cfg, seed=1)
    bert = compile_bert("minilm", cfg, calibration=calibration_sentences()[:2])
    batch = bert.encode(["A short sentence.", "Another one, a little longer than that."])
    mask = batch["attention_mask"].bool()
    x = bert.embed_input(batch["input_ids"], batch["token_type_ids"])

    class Recorder:          # the device protocol, remembering each program and its result
        def __init__(self):
            self.cfg, self.runs = cfg, []

        def run(self, program, **inputs):
            result = device.run(program, **inputs)
            self.runs.append((program, result))
            return result

    recorder = Recorder()
    run_layer(recorder, bert, 0, x, mask)
    assert len(recorder.runs) == len(STAGES)
    rtl_total = model_total = 0
    classes = dict.fromkeys(cm.OP_CLASSES, 0)
    for stage, (program, result) in zip(STAGES, recorder.runs):
        model = check_model_cycles(device, program, result, what=f"MiniLM {stage}")
        report = CycleModel(cfg).run(program, chunks=rtl_chunks(program, device.depths),
                                     default_class=cm.STAGE_CLASSES[stage])
        for cls, value in report.by_class.items():
            classes[cls] += value
        table.append((f"8x8 MiniLM layer 0 {stage} ({result.stats['chunks']} runs)",
                      result.cycles, model, 0.0))
        rtl_total += result.cycles
        model_total += model
    table.append((f"8x8 MiniLM layer 0, B x L = {tuple(mask.shape)}", rtl_total, model_total,
                  0.0))
    assert model_total == rtl_total
    print(f"MiniLM layer 0 on 8x8 by op class: {classes}")
    assert sum(classes.values()) == model_total
    assert classes["gemm"] > classes["attn_matmul"] > 0
    assert classes["softmax"] > 0 and classes["layernorm"] > 0 and classes["gelu"] > 0
