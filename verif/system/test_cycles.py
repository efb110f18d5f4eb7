"""The cycle model (sw/cycles/) against the cycles the RTL counts, and the RTL's outputs against
the software device's.

Hand-written programs (which must agree exactly), MATMUL chains, overlapping accumulation, GEMMs
of many shapes with every epilogue on 2x2, 4x8 and 8x8, large programs, and a full
all-MiniLM-L6-v2 encoder layer; the model against RTL cycles is printed at
the end. Every free-running run's cycles must equal the model's, and every run's outputs the
software device's, bit for bit. ``test_gemm_rtl.py`` and ``test_epilogue_rtl.py`` check every
free-running run they make with :func:`verif.helpers.check_model_cycles` too; the model's
closed forms and properties are tested in pure Python in ``verif/unit/test_cycle_model.py``.
"""

import os
import random

import numpy as np
import pytest
import torch

from bertaccel.hw import isa
from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice
from bertaccel.sw import cycles as cm
from bertaccel.sw.cycles import CycleModel
from bertaccel.sw.devices.rtl import RtlDevice
from verif.helpers import check_model_cycles, check_outputs, matmul
from verif.tb.programs import gemm_case, hand_programs, raw_inputs, raw_program

__all__ = []

CONFIGS = ["2x2", "4x8", "8x8"]
OPS = [None, "requant", "gelu", "softmax", "layernorm"]


# -- against the RTL ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def table():
    """Rows of (case, RTL cycles, model cycles), printed at the end of the module."""
    rows = []
    yield rows
    if rows:
        lines = [f"{'case':<52}{'RTL':>10}{'model':>10}"]
        lines += [f"{what:<52}{rtl:>10}{model:>10}" for what, rtl, model in rows]
        print("\n" + "\n".join(lines))


def _compare(table, device, program, inputs, what, *, reference=None):
    """Run ``program`` on the free-running RTL ``device``: its outputs must equal those of
    ``reference`` (a fresh software device by default) bit for bit, and its cycles the model's.
    Returns the RTL result."""
    result = device.run(program, **inputs)
    want = (reference or SoftwareDevice(device.cfg)).run(program, **inputs)
    check_outputs(result, want, what=f"{what} on {device.cfg.name}")
    model = check_model_cycles(device, program, result, what=what)
    table.append((f"{device.cfg.name} {what}", result.cycles, model))
    return result


@pytest.fixture(scope="module", params=CONFIGS)
def free_device(request, rtl_device):
    cfg = PRESETS[request.param]
    return rtl_device(cfg, seed=1)   # the free-running device test_epilogue_rtl.py uses too


def test_rtl_hand_programs(free_device, sim_root, table):
    """Small programs: the model must agree exactly.

    They read memory they never write (scratchpad B, the accumulator), so they run on a fresh
    simulator, and the software device that checks their outputs runs every one before them
    too: both start with zeroed memories and keep what each program leaves.
    """
    cfg = free_device.cfg
    reference = SoftwareDevice(cfg)
    with RtlDevice(cfg, build_root=sim_root) as device:
        for name, instrs in hand_programs(cfg).items():
            program = raw_program(cfg, instrs)
            _compare(table, device, program, raw_inputs(program), name, reference=reference)


def test_rtl_matmuls_of_rows_rows_have_no_bubbles(free_device, table):
    """The weight wave: MATMULs of ``rows`` operand rows each stream back to back.

    The preload of every MATMUL hides behind the stream of the one before, whichever weight
    rows it reads, and no weight bank waits to drain. The results must equal the software
    device's, and the RTL's cycles the model's.
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
    _compare(table, free_device, program, inputs, f"{count} MATMULs of {r} rows")
    report = CycleModel(cfg).run(program)
    first = 2
    streams = report.stream[first:first + count]
    assert np.all(np.diff(streams) == r), streams          # no cycle between the MATMULs
    assert report.breakdown["compute"] == count * r
    assert report.breakdown["preload"] <= r + 1            # the first preload alone
    print(f"{cfg.name}: {count} MATMULs of {r} rows stream in {streams[-1] + r - streams[0]} "
          f"cycles; {report.summary()}")


def _check_free_and_stalled(table, free_device, stalled, program, what):
    """Run a raw program free-running (cycle-exact with the model) and on the ``stalled``
    device; both outputs must equal the software device's."""
    inputs = raw_inputs(program)
    want = SoftwareDevice(program.cfg).run(program, **inputs)
    _compare(table, free_device, program, inputs, what)
    check_outputs(stalled.run(program, **inputs), want, what=f"{what}, stalled")


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


@pytest.mark.parametrize("op", OPS, ids=lambda op: op or "raw")
def test_rtl_gemms(free_device, table, op):
    """GEMMs of many shapes with every epilogue (and none): bit-exact with the software
    device, cycle-exact with the model."""
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
        program, inputs = gemm_case(cfg, m, k, n, op, gen)
        _compare(table, free_device, program, inputs, f"{op or 'raw'} {m}x{k}x{n}")


def test_rtl_large_programs(rtl_device, table):
    """Programs of 14 000 to 50 000 instructions and 50 000 to 100 000 data beats, with and
    without a two-pass epilogue, each run in one piece: the model counts them whole. The
    outputs are the software device's."""
    cfg = PRESETS["2x2"]
    device = rtl_device(cfg)
    gen = torch.Generator().manual_seed(21)
    for m, k, n, op in ((96, 96, 96, None), (64, 96, 64, "softmax"), (64, 64, 96, "layernorm")):
        program, inputs = gemm_case(cfg, m, k, n, op, gen)
        assert len(program.instrs) > 10_000 and program.n_data_beats > 50_000
        _compare(table, device, program, inputs, f"large {op or 'raw'} {m}x{k}x{n}")


def test_rtl_minilm_layer(rtl_device, table):
    """A full all-MiniLM-L6-v2 encoder layer (its six programs) on the 8x8 RTL: each program's
    outputs equal the software device's, and its cycles the model's."""
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
            check_outputs(result, SoftwareDevice(cfg).run(program, **inputs),
                          what=f"MiniLM program {len(self.runs)} on {cfg.name}")
            self.runs.append((program, result))
            return result

    recorder = Recorder()
    run_layer(recorder, bert, 0, x, mask)
    assert len(recorder.runs) == len(STAGES)
    rtl_total = model_total = 0
    classes = dict.fromkeys(cm.OP_CLASSES, 0)
    for stage, (program, result) in zip(STAGES, recorder.runs):
        model = check_model_cycles(device, program, result, what=f"MiniLM {stage}")
        report = CycleModel(cfg).run(program, default_class=cm.STAGE_CLASSES[stage])
        for cls, value in report.by_class.items():
            classes[cls] += value
        table.append((f"8x8 MiniLM layer 0 {stage}", result.cycles, model))
        rtl_total += result.cycles
        model_total += model
    table.append((f"8x8 MiniLM layer 0, B x L = {tuple(mask.shape)}", rtl_total, model_total))
    assert model_total == rtl_total
    print(f"MiniLM layer 0 on 8x8 by op class: {classes}")
    assert sum(classes.values()) == model_total
    assert classes["gemm"] > classes["attn_matmul"] > 0
    assert classes["softmax"] > 0 and classes["layernorm"] > 0 and classes["gelu"] > 0
