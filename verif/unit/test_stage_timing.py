"""The fast exact timer (sw/timing.py, sw/bert/timing.py) against the cycle model on whole
programs.

:class:`~bertaccel.sw.timing.GemmTimer` skips the steps whose state and content it met before,
so every test here compares it with ``CycleModel(cfg).run(program).cycles`` on the program
written out in full: GEMMs with every epilogue over random shapes (many identical tiles, odd
tails), joined programs of identical and of mixed parts, and the stage programs of
all-MiniLM-L6-v2 and of small random BERT models at several batch shapes. The parts it is built
from are checked too: the cycle model run piece by piece with its state read and set again, the
instruction fields the model reads, and the tiler's keys. And a timer with a key or a state
that leaves out something that matters is shown to go wrong, so that these comparisons are seen
to be able to fail.
"""

import dataclasses
import random

import numpy as np
import pytest
import torch

from bertaccel.golden import bert_ref, sentences
from bertaccel.hw import isa
from bertaccel.hw.config import PRESETS
from bertaccel.sw import compile_gemm
from bertaccel.sw import epilogue as ep_mod
from bertaccel.sw.bert import STAGES, compile_bert
from bertaccel.sw.bert.run import layer_programs
from bertaccel.sw.bert.timing import StageTimer
from bertaccel.sw.cycles import TIMED_FIELDS, CycleModel, CycleStepper, timing_view
from bertaccel.sw.cycles import units as cycle_units
from bertaccel.sw.sequence import concat
from bertaccel.sw.tiler import GemmGroups
from bertaccel.sw.timing import GemmTimer
from verif.helpers import random_float_bert

SEED = 11
CONFIGS = ["2x2", "4x8", "8x8", "16x16"]
OPS = [None, "requant", "gelu", "softmax", "layernorm"]


def _epilogue(op, k, n, gen):
    return None if op is None else ep_mod.random_epilogue(op, k=k, n=n, generator=gen)


def _model_cycles(program):
    return CycleModel(program.cfg).run(program).cycles


def _shapes(rng, count):
    """Random GEMM shapes: small ones, tall ones with many identical M blocks, and ones with
    ragged K and N edges."""
    shapes = []
    for _ in range(count):
        kind = rng.randrange(3)
        if kind == 0:
            shapes.append((rng.randint(1, 40), rng.randint(1, 40), rng.randint(1, 40)))
        elif kind == 1:
            shapes.append((rng.randint(100, 700), rng.randint(1, 24), rng.randint(1, 24)))
        else:
            shapes.append((rng.randint(20, 120), rng.randint(33, 150), rng.randint(33, 150)))
    return shapes


# -- GEMMs and joined programs ----------------------------------------------------------------

@pytest.mark.parametrize("config", CONFIGS)
def test_gemms_with_every_epilogue(config):
    cfg = PRESETS[config]
    rng = random.Random(f"{SEED}{config}")
    gen = torch.Generator().manual_seed(SEED)
    timer = GemmTimer(cfg)                  # one timer: what it learns carries over
    for m, k, n in _shapes(rng, 12):
        for op in OPS:
            epilogue = _epilogue(op, k, n, gen)
            try:
                program = compile_gemm(cfg, m, k, n, epilogue=epilogue)
            except ValueError:              # a row too long for the config's softmax
                continue
            assert timer.gemm(m, k, n, epilogue=epilogue) == _model_cycles(program), \
                (config, m, k, n, op)


@pytest.mark.parametrize("config", ["4x8", "16x16"])
def test_many_identical_tiles(config):
    """Tall GEMMs (hundreds of identical tiles, K blocks inside them) and their tails: the
    timer runs a small part of the program and still counts every cycle."""
    cfg = PRESETS[config]
    gen = torch.Generator().manual_seed(SEED)
    timer = GemmTimer(cfg)
    written = 0
    for m, k, n, op in [(3000, 40, 24, None), (2999, 200, 8, "requant"),
                        (1501, 96, 40, "layernorm"), (777, 130, 20, "gelu")]:
        epilogue = _epilogue(op, k, n, gen)
        program = compile_gemm(cfg, m, k, n, epilogue=epilogue)
        assert timer.gemm(m, k, n, epilogue=epilogue) == _model_cycles(program)
        written += len(program.instrs)
    assert timer.stats["instructions_run"] < written / 3


@pytest.mark.parametrize("config", CONFIGS)
def test_joined_programs(config):
    """concat of identical parts (as the attention stages join one GEMM per head), of mixed
    parts, and of programs given whole."""
    cfg = PRESETS[config]
    rng = random.Random(f"{SEED}join{config}")
    gen = torch.Generator().manual_seed(SEED)
    timer = GemmTimer(cfg)
    for m, k, n in _shapes(rng, 3):
        op = rng.choice(OPS)
        epilogue = _epilogue(op, k, n, gen)
        try:
            program = compile_gemm(cfg, m, k, n, epilogue=epilogue)
        except ValueError:
            continue
        for count in (1, 2, 7):
            want = _model_cycles(concat([program] * count))
            assert timer.concat([(m, k, n, epilogue)] * count) == want, (m, k, n, op, count)
            assert timer.concat([program] * count) == want
        other = compile_gemm(cfg, n, m, k)
        mixed = [(m, k, n, epilogue), (n, m, k, None), program, (m, k, n, epilogue)]
        assert timer.concat(mixed) == _model_cycles(concat([program, other, program, program]))


@pytest.mark.parametrize("config", CONFIGS)
def test_batches(config):
    """Batches of GEMMs as one program (attention's heads), alone and joined."""
    cfg = PRESETS[config]
    rng = random.Random(f"{SEED}batch{config}")
    gen = torch.Generator().manual_seed(SEED)
    timer = GemmTimer(cfg)
    for m, k, n in _shapes(rng, 3) + [(32, 32, 32)]:
        op, batch = rng.choice(OPS), rng.randint(2, 12)
        epilogue = _epilogue(op, k, n, gen)
        k_high = rng.randint(0, k) if op in (None, "requant") else 0
        program = compile_gemm(cfg, m, k, n, epilogue=epilogue, k_high=k_high, batch=batch)
        part = (m, k, n, epilogue, k_high, batch)
        assert timer.concat([part]) == _model_cycles(program), (m, k, n, op, batch)
        assert timer.concat([part] * 2) == _model_cycles(concat([program] * 2))


@pytest.mark.parametrize("config", ["2x2", "8x8"])
def test_high_rows(config):
    """GEMMs with high rows (attention's P V on two digit planes): the high rows are tiled
    apart, so the K tiles, the plan and the groups differ from the plain GEMM's."""
    cfg = PRESETS[config]
    rng = random.Random(f"{SEED}high{config}")
    gen = torch.Generator().manual_seed(SEED)
    timer = GemmTimer(cfg)
    for m, k, n in _shapes(rng, 6) + [(128, 256, 32)]:
        k_high = rng.randint(1, k)
        for op in (None, "requant"):
            epilogue = _epilogue(op, k, n, gen)
            program = compile_gemm(cfg, m, k, n, epilogue=epilogue, k_high=k_high)
            want = _model_cycles(program)
            assert timer.gemm(m, k, n, epilogue=epilogue, k_high=k_high) == want, \
                (m, k, n, k_high, op)
            assert timer.concat([(m, k, n, epilogue, k_high)] * 3) == \
                _model_cycles(concat([program] * 3))


def test_concat_needs_a_part():
    with pytest.raises(ValueError, match="at least one part"):
        GemmTimer(PRESETS["4x8"]).concat([])


# -- what the timer is made of -------------------------------------------------------------------

@pytest.mark.parametrize("config", ["4x8", "8x8"])
def test_stepper_in_pieces_with_state_set_again(config):
    """The model run in random pieces, its state read and set again (shifted) between them,
    gives the model's cycles on the whole program."""
    cfg = PRESETS[config]
    rng = random.Random(SEED)
    gen = torch.Generator().manual_seed(SEED)
    for m, k, n in _shapes(rng, 4):
        epilogue = _epilogue(rng.choice(OPS[:4]), k, n, gen)
        program = compile_gemm(cfg, m, k, n, epilogue=epilogue)
        program = concat([program, program])
        stepper, shift, done = CycleStepper(cfg), 0, 0
        while done < len(program.instrs):
            end = min(len(program.instrs), done + rng.randint(0, 40))
            stepper.run(program.instrs[done:end])
            done = end
            if rng.random() < 0.5:
                key, ref = stepper.state()
                move = rng.randint(-100, 5000)
                stepper = CycleStepper(cfg)
                stepper.resume(key, ref + move)
                shift += move
        assert stepper.cycles() - shift == _model_cycles(program)


def test_the_model_reads_only_the_timed_fields():
    """Changing every field outside TIMED_FIELDS (addresses, a SET's value) leaves the whole
    report as it was; changing a timed one changes the cycles."""
    cfg = PRESETS["4x8"]
    gen = torch.Generator().manual_seed(SEED)
    program = compile_gemm(cfg, 37, 50, 41,
                           epilogue=_epilogue("layernorm", 50, 41, gen))
    rng = random.Random(SEED)
    untimed = {isa.Load: {"addr": 3}, isa.Matmul: {"a_addr": 5, "b_addr": 7},
               isa.Store: {"acc_addr": 9, "stride": 2, "param_addr": 1, "aux_addr": 4,
                           "dest_addr": 6},
               isa.Set: {"value": 12345}}
    for kind, fields in untimed.items():
        assert not set(fields) & set(TIMED_FIELDS[kind])
    moved = [dataclasses.replace(instr, **{name: value + rng.randrange(50)
                                           for name, value in untimed[type(instr)].items()})
             for instr in program.instrs]
    model = CycleModel(cfg)
    before, after = model.run(program.instrs), model.run(moved)
    assert [timing_view(i) for i in moved] == [timing_view(i) for i in program.instrs]
    assert (after.cycles, after.breakdown, list(after.end)) == \
        (before.cycles, before.breakdown, list(before.end))
    longer = [dataclasses.replace(i, count=i.count + 1) if isinstance(i, isa.Load) else i
              for i in program.instrs]
    assert model.run(longer).cycles != before.cycles


@pytest.mark.parametrize("config", ["4x8", "8x8"])
def test_gemm_groups_are_the_program(config):
    """GemmGroups writes compile_gemm's instructions, and pieces with equal keys differ only
    in placement."""
    cfg = PRESETS[config]
    rng = random.Random(SEED)
    gen = torch.Generator().manual_seed(SEED)
    for m, k, n in _shapes(rng, 8):
        op = rng.choice(OPS)
        epilogue = _epilogue(op, k, n, gen)
        try:
            program = compile_gemm(cfg, m, k, n, epilogue=epilogue)
        except ValueError:
            continue
        groups = GemmGroups(cfg, m, k, n, epilogue=epilogue)
        assert groups.instrs() == program.instrs
        seen = {}
        for g in range(len(groups)):
            group = groups.group(g)
            pieces = [(("loads", groups.loads_key(group)), groups.loads(group))]
            pieces += [(("row", groups.row_key(group, kt)), groups.row(group, kt))
                       for kt in range(group.ktlen)]
            if group.store:
                pieces.append((("store", groups.store_key(group)), groups.stores(group)))
            for key, instrs in pieces:
                view = [timing_view(instr) for instr in instrs]
                assert seen.setdefault(key, view) == view, (key, op)


# -- shortcuts that leave something out go wrong -------------------------------------------------

def test_a_key_that_misses_a_field_is_caught(monkeypatch):
    """A STORE key that leaves out the s2e push: the last tiles' STOREs share a key with the
    others, and the timer notices when it writes one."""
    def wrong(self, group):
        return group.store and (group.mlen, group.ntlen, group.c_base)

    monkeypatch.setattr(GemmGroups, "store_key", wrong)
    with pytest.raises(RuntimeError, match="misses a field"):
        GemmTimer(PRESETS["4x8"]).gemm(200, 24, 24)


def test_a_state_that_misses_a_token_goes_wrong(monkeypatch):
    """A normalised state without the pending tokens of the token channels: the timer takes
    states that differ in when the next MATMUL may start for one and skips wrongly; the
    comparison with the model shows it."""
    real = cycle_units.Channel.snapshot

    def wrong(self, floor):
        return (), real(self, floor)[1]

    cfg = PRESETS["4x8"]
    gen = torch.Generator().manual_seed(SEED)
    cases = [(m, k, n, _epilogue(op, k, n, gen))
             for m, k, n, op in [(200, 24, 24, None), (97, 64, 40, "softmax"),
                                 (300, 40, 16, "layernorm"), (150, 120, 60, "requant")]]
    want = [_model_cycles(compile_gemm(cfg, m, k, n, epilogue=ep)) for m, k, n, ep in cases]
    assert [GemmTimer(cfg).gemm(m, k, n, epilogue=ep) for m, k, n, ep in cases] == want
    monkeypatch.setattr(cycle_units.Channel, "snapshot", wrong)
    got = []
    for m, k, n, ep in cases:
        try:
            got.append(GemmTimer(cfg).gemm(m, k, n, epilogue=ep))
        except Exception:      # noqa: BLE001 - a token popped before it is pushed, say
            got.append(None)
    assert got != want


def test_programs_that_differ_in_one_timed_field_time_apart():
    """Two joined programs, equal but in one part's epilogue op (two-pass SOFTMAX instead of
    REQUANT): the timer, warm with the first, times the second as the model does."""
    cfg = PRESETS["8x8"]
    gen = torch.Generator().manual_seed(SEED)
    timer = GemmTimer(cfg)
    m, k, n = 60, 32, 60
    results = []
    for op in ("requant", "softmax"):
        epilogue = _epilogue(op, k, n, gen)
        program = compile_gemm(cfg, m, k, n, epilogue=epilogue)
        want = _model_cycles(concat([program] * 4))
        assert timer.concat([(m, k, n, epilogue)] * 4) == want
        results.append(want)
    assert results[0] != results[1]


# -- BERT stage programs --------------------------------------------------------------------------

def _check_stages(bert, shapes):
    timer = StageTimer(bert)
    for batch, seq in shapes:
        mask = torch.ones((batch, seq), dtype=torch.bool)
        for layer in sorted({0, bert.spec.layers - 1}):
            programs = layer_programs(bert, layer, mask)
            want = {stage: _model_cycles(programs[stage]) for stage in STAGES}
            assert timer.layer(layer, batch, seq) == want, (batch, seq, layer)
        total, by_stage = timer.model(batch, seq)
        assert total == sum(by_stage.values())


@pytest.fixture(scope="module")
def minilm():
    return bert_ref.load()


@pytest.mark.parametrize("config", ["8x8", "16x16"])
def test_minilm_stages(minilm, config):
    tokenizer, model = minilm
    bert = compile_bert(model, PRESETS[config], tokenizer=tokenizer,
                        calibration=sentences.calibration_sentences()[:4])
    _check_stages(bert, [(1, 9), (3, 20)])


@pytest.mark.parametrize("config", ["4x4", "4x8", "8x8"])
@pytest.mark.parametrize("shape", [(40, 4, 72, 2), (30, 5, 50, 1)],
                         ids=lambda s: f"h{s[0]}a{s[1]}i{s[2]}")
def test_random_bert_stages(config, shape):
    hidden, heads, intermediate, layers = shape
    model = random_float_bert(SEED, hidden=hidden, heads=heads, intermediate=intermediate,
                              layers=layers, positions=64)
    gen = torch.Generator().manual_seed(SEED)
    ids = torch.randint(1, 90, (3, 21), generator=gen)
    calibration = [{"input_ids": ids, "attention_mask": torch.ones_like(ids)}]
    bert = compile_bert(model, PRESETS[config], calibration=calibration)
    _check_stages(bert, [(1, 1), (1, 17), (3, 13), (5, 64)])


def test_stage_timer_store():
    """Timings persist in the store by batch shape and what decides the cycles: a second timer
    on the same store reads them, and layers of the same shape share an entry."""
    model = random_float_bert(SEED, hidden=32, heads=2, intermediate=48, layers=3, vocab=50,
                              positions=32)
    ids = torch.randint(1, 50, (2, 16), generator=torch.Generator().manual_seed(SEED))
    bert = compile_bert(model, PRESETS["4x8"],
                        calibration=[{"input_ids": ids, "attention_mask": torch.ones_like(ids)}])
    store = {}
    first = StageTimer(bert, store).model(2, 11)
    assert 1 <= len(store) <= bert.spec.layers
    assert all(key.startswith("b2l11-") for key in store)
    poisoned = {key: dict.fromkeys(STAGES, 1) for key in store}
    assert StageTimer(bert, poisoned).model(2, 11) == (len(STAGES) * bert.spec.layers,
                                                      dict.fromkeys(STAGES, bert.spec.layers))
    assert StageTimer(bert, dict(store)).model(2, 11) == first
    np.testing.assert_equal(first[0], sum(first[1].values()))
