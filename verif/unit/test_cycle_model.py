"""The cycle model (sw/cycles/) in pure Python: closed forms and properties.

The model is checked on programs whose timing can be worked out by hand from the gateware (one
LOAD, one MATMUL, one STORE, back-to-back MATMULs, a SET behind a STORE, a one-row SOFTMAX that
waits for its statistics); it is monotonic in the work, overlap is really counted, its reports
add up, chunks carry their tokens, illegal programs are refused, labelled regions go to their op
class, and the software device reports its cycles. ``verif/system/test_cycles.py`` checks it
against the cycles the RTL counts.
"""

import dataclasses
import random

import numpy as np
import pytest
import torch

from bertaccel.hw import isa
from bertaccel.hw.config import PRESETS
from bertaccel.hw.latencies import Latencies
from bertaccel.sw import SoftwareDevice, compile_gemm
from bertaccel.sw import cycles as cm
from bertaccel.sw import epilogue as ep_mod
from bertaccel.sw.cycles import CycleModel
from bertaccel.sw.program import ProgramError
from bertaccel.sw.sequence import concat
from verif.helpers import load, matmul, store, two_pass_sets

__all__ = []

CONFIGS = ["2x2", "4x8", "8x8"]


@pytest.mark.parametrize("name", CONFIGS)
def test_timing_is_read_from_the_gateware(name):
    """The model's latencies are the gateware's attributes and schedule, through Latencies."""
    from bertaccel.hw.controller import TokenChannel
    from bertaccel.hw.epilogue import Epilogue
    from bertaccel.hw.execute import ExecuteUnit, PreloadStage
    from bertaccel.hw.harness import SimHarness
    from bertaccel.hw.queue import Queue
    from bertaccel.hw.store import StoreUnit

    cfg = PRESETS[name]
    lat = CycleModel(cfg).latencies
    assert lat is Latencies.of(cfg)
    epilogue = Epilogue(cfg)
    epilogue._MustUse__silence = True   # read, never elaborated
    schedule = epilogue.schedule
    assert (lat.first_word, lat.done) == (SimHarness.FIRST_WORD, SimHarness.DONE_CYCLES)
    assert (lat.queue, lat.queue_depth, lat.token) == (Queue.LATENCY, cfg.queue_depth,
                                                       TokenChannel.DELAY)
    assert lat.preload == cfg.rows + PreloadStage.HANDOVER_DELAY
    assert lat.acc_drain == cfg.mesh_latency + ExecuteUnit.OPERAND_DELAY \
        + ExecuteUnit.WRITE_DELAY - 1
    assert lat.store_read == StoreUnit.READ_TO_QUEUE + Queue.LATENCY
    assert lat.fifo_depth == StoreUnit.FIFO_DEPTH
    assert lat.epilogue.latency == schedule.latency
    assert lat.epilogue.ratio == schedule.ratio == cfg.ep_ratio
    assert lat.gaps[isa.EpOp.SOFTMAX] == max(1, schedule.gap[isa.EpOp.SOFTMAX])
    with pytest.raises(dataclasses.FrozenInstanceError):
        lat.queue = 3


@pytest.mark.parametrize("name", CONFIGS)
def test_closed_forms(name):
    """Single instructions and steady streams, worked out from the gateware by hand."""
    cfg = PRESETS[name]
    model = CycleModel(cfg)
    lat = model.latencies
    r = cfg.rows
    # The first instruction is in its queue's output register in this cycle; a unit takes it.
    taken = lat.first_word + lat.queue
    done = lat.done

    def cycles(instrs):
        return model.run(instrs).cycles

    # LOAD: beats in the count cycles after the accept.
    for count in (0, 1, 5, 100):
        assert cycles([load(count)]) == taken + count + done
    # MATMUL: preload (rows reads, hand-over with the last), m_len rows, the last row's sums
    # written mesh_latency + 1 cycles after its read.
    for m_len in (1, 10, 77):
        assert cycles([matmul(m_len)]) == taken + lat.preload + m_len + lat.acc_drain + done
    # A MATMUL of m_len 0 holds the stream stage for one slot and writes nothing.
    assert cycles([matmul(0)]) == taken + lat.preload + 1 + done
    # STORE (RAW): one read a cycle from the cycle after the accept, the epilogue takes the
    # first store_read cycles later and the others ep_ratio cycles apart (the reads
    # wait for room in the beat queue, never long enough to delay an accept), the last leaves
    # ep_latency after that.
    for beats in (1, 10, 64):
        assert cycles([store(beats)]) == (taken + 1 + lat.store_read
                                          + lat.epilogue.ratio * (beats - 1)
                                          + lat.epilogue.latency + done)
    assert cycles([store(4, 3)]) == cycles([store(12)])
    # A SET waits until the epilogue is empty: one cycle after the last beat left.
    assert cycles([store(7), isa.Set(index=isa.Param.MUL0, value=1)]) == cycles([store(7)]) + 1
    # Back-to-back MATMULs: the stream stage takes m_len cycles (a slot for m_len 0), the
    # preload stage lat.preload (it takes the next MATMUL in the cycle it hands one
    # over), and no weight bank waits to drain (the mesh's weight wave): each MATMUL costs
    # max(m_len, rows) in steady state, whatever the bank.
    for m_len in (0, 1, 2, r - 1, r, r + 1, 2 * r + cfg.cols, 3 * r + 9):
        one = cycles([matmul(m_len)] * 10) - cycles([matmul(m_len)] * 9)
        assert one == max(m_len, 1, lat.preload), (m_len, one)
    # A one-row SOFTMAX of one strip: the second pass waits gap cycles for its statistics.
    gap = lat.gaps[isa.EpOp.SOFTMAX]
    one = cycles(two_pass_sets(cfg, 1)[:1] + [store(1, 1, isa.EpOp.SOFTMAX)])
    set_cycles = 1   # the SET goes first through the store queue: the STORE comes one later
    last_first_pass = taken + set_cycles + 1 + lat.store_read
    assert one == last_first_pass + gap + lat.epilogue.latency + done


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
        lat = model.latencies
        assert (report.dispatch >= lat.first_word).all()
        assert (report.start >= report.dispatch + lat.queue).all()
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


def test_long_program():
    """100 000 instructions: every MATMUL row is counted once. (How fast the model runs is a
    benchmark: ``python bench/cycle_model_speed.py``.)"""
    cfg = PRESETS["4x8"]
    block = [load(12, push_next=True), load(8), matmul(12, pop_prev=True),
             matmul(12, push_next=True), store(12, 2, pop_prev=True)]
    report = CycleModel(cfg).run(block * 20_000)
    assert report.breakdown["compute"] == 24 * 20_000
    assert sum(report.breakdown.values()) == report.cycles


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
    assert cm.model_cycles(program) == report.cycles
