"""Pure-Python tests of the BERT compiler: spec reading, bad input, joined programs, the
channel-split quantisation, a tiny random BertModel and all-MiniLM-L6-v2 on the software device.

Everything runs offline (``HF_HUB_OFFLINE=1``) on one torch thread: the software device runs many
small GEMMs, which extra threads only slow down on a busy machine. Seeds are fixed and printed.
"""

import os
import random

os.environ["HF_HUB_OFFLINE"] = "1"

import pytest  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from bertaccel import golden  # noqa: E402
from bertaccel.golden import bert_ref, sentences  # noqa: E402
from bertaccel.hw import isa  # noqa: E402
from bertaccel.hw.config import PRESETS, AccelConfig  # noqa: E402
from bertaccel.sw import Program, SoftwareDevice, compile_gemm  # noqa: E402
from bertaccel.sw import epilogue as ep_mod  # noqa: E402
from bertaccel.sw.bert import (  # noqa: E402
    STAGES,
    BertError,
    BertSpec,
    compile_bert,
    load_bert,
    run_bert,
)
from bertaccel.sw.bert.quant import (  # noqa: E402
    _split, act_quant, fit_weight, split_rows, weight_ints, weight_scales)
from bertaccel.sw.tiler import k_tiles  # noqa: E402
from bertaccel.sw.sequence import barrier, concat  # noqa: E402
from bertaccel.sw.tiler import rebind  # noqa: E402
from verif.helpers import tiny_bert_folder  # noqa: E402


SEED = 2024
INTERLEAVINGS = [None, "load-first", "store-last", *range(8)]


pytestmark = pytest.mark.usefixtures("one_thread")


# -- the model spec ---------------------------------------------------------------------------

def tiny_config(**changes):
    fields = dict(vocab_size=100, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, max_position_embeddings=40, type_vocab_size=2)
    fields.update(changes)
    return transformers.BertConfig(**fields)


def test_spec_of_minilm_config():
    config = transformers.AutoConfig.from_pretrained(bert_ref.minilm_path(),
                                                     local_files_only=True)
    spec = BertSpec.from_config(config)
    assert (spec.layers, spec.hidden, spec.heads, spec.head_dim, spec.intermediate,
            spec.max_positions, spec.type_vocab_size) == (6, 384, 12, 32, 1536, 512, 2)
    assert spec.eps == 1e-12 and spec.hidden_act == "gelu"


def test_spec_of_any_bert_config():
    spec = BertSpec.from_config(tiny_config(num_hidden_layers=3, hidden_size=96,
                                            num_attention_heads=3, intermediate_size=200,
                                            max_position_embeddings=77, type_vocab_size=4))
    assert (spec.layers, spec.hidden, spec.heads, spec.head_dim, spec.intermediate,
            spec.max_positions, spec.type_vocab_size) == (3, 96, 3, 32, 200, 77, 4)


@pytest.mark.parametrize("config, message", [
    (lambda: transformers.GPT2Config(), "not a BERT model: model_type is 'gpt2'"),
    (lambda: transformers.DebertaV2Config(), "model_type is 'deberta-v2' .* no relative-position"),
    (lambda: tiny_config(hidden_act="relu"), "activation is 'relu'"),
    (lambda: tiny_config(hidden_size=2048, num_attention_heads=16), "longer than the LayerNorm"),
    (lambda: tiny_config(is_decoder=True), "decoder"),
])
def test_spec_refuses(config, message):
    with pytest.raises(BertError, match=message):
        BertSpec.from_config(config())


# -- bad input --------------------------------------------------------------------------------

def test_missing_model_path(tmp_path):
    with pytest.raises(BertError, match="does not exist"):
        load_bert(tmp_path / "no-such-model")
    with pytest.raises(BertError, match="no config.json"):
        load_bert(tmp_path)


def test_non_bert_model_folder(tmp_path):
    transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2).save_pretrained(tmp_path)
    with pytest.raises(BertError, match="not a BERT model: model_type is 'gpt2'"):
        load_bert(tmp_path)
    with pytest.raises(BertError, match="does not exist"):
        compile_bert(tmp_path / "missing", PRESETS["8x8"])


def test_non_bert_model_object():
    gpt2 = transformers.GPT2Model(transformers.GPT2Config(n_layer=1, n_embd=32, n_head=2))
    with pytest.raises(BertError, match="not a BERT model: model_type is 'gpt2'"):
        compile_bert(gpt2, PRESETS["8x8"], calibration=[{}])


# -- joined programs --------------------------------------------------------------------------

def random_parts(cfg, gen, shapes):
    """Programs (with every epilogue) and their inputs and expected outputs."""
    programs, inputs, want = [], {}, {}
    for number, (m, k, n, op) in enumerate(shapes):
        epilogue = ep_mod.random_epilogue(op, k=k, n=n, generator=gen) if op else None
        program = compile_gemm(cfg, m, k, n, epilogue=epilogue)
        a = torch.randint(-128, 128, (m, k), generator=gen, dtype=torch.int8)
        b = torch.randint(-128, 128, (k, n), generator=gen, dtype=torch.int8)
        r = torch.randint(-128, 128, (m, n), generator=gen, dtype=torch.int8)
        inputs.update({f"{number}.a": a, f"{number}.b": b})
        if "r" in program.inputs:
            inputs[f"{number}.r"] = r
        c = golden.gemm(a, b)
        want[f"{number}.c"] = (ep_mod.apply_integer(program.meta["epilogue"], c,
                                                    r if "r" in program.inputs else None,
                                                    cols=cfg.ep_lanes) if epilogue else c)
        programs.append(program)
    return programs, inputs, want


@pytest.mark.parametrize("name", ["2x2", "4x8", "8x8"])
def test_concat_barrier_under_interleavings(name):
    seed = SEED + list(PRESETS).index(name)
    print(f"seed {seed}")
    cfg = PRESETS[name]
    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    shapes = [(rng.randint(1, 40), rng.randint(1, 40), rng.randint(1, 40), op)
              for op in ("softmax", "layernorm", None, "gelu", "requant", "layernorm",
                         "softmax")]
    programs, inputs, want = random_parts(cfg, gen, shapes)
    joined = concat(programs)
    joined.validate()
    assert list(joined.inputs) == [n for i, p in enumerate(programs) for n in
                                   (f"{i}.{x}" for x in p.inputs)]
    assert len(joined.meta["parts"]) == len(programs)
    barriers = [i for i in joined.instrs if i == barrier()]
    assert len(barriers) == len(programs) - 1
    for interleave in INTERLEAVINGS:
        out = SoftwareDevice(cfg, interleave=interleave).run(joined, **inputs).outputs
        for key, value in want.items():
            assert torch.equal(out[key], value), (name, interleave, key)


def test_concat_needs_the_barrier():
    """Joined without the barrier, the programs are still legal in program order, but the next
    program's loads overtake the previous one's reads in some interleaving."""
    cfg = AccelConfig(rows=4, cols=4, spad_depth=64, acc_depth=64, pmem_depth=16)
    gen = torch.Generator().manual_seed(SEED)
    programs, inputs, want = random_parts(cfg, gen, [(24, 40, 12, None), (20, 36, 16, "gelu"),
                                                     (24, 40, 12, None)])
    joined = concat(programs)
    naive = Program(cfg, [i for p in programs for i in p.instrs], inputs=joined.inputs,
                    outputs=joined.outputs, pack_index=joined.pack_index,
                    unpack_index=joined.unpack_index, constants=joined.constants)
    naive.validate()
    wrong = 0
    for interleave in INTERLEAVINGS:
        out = SoftwareDevice(cfg, interleave=interleave).run(naive, **inputs).outputs
        wrong += any(not torch.equal(out[k], v) for k, v in want.items())
        out = SoftwareDevice(cfg, interleave=interleave).run(joined, **inputs).outputs
        assert all(torch.equal(out[k], v) for k, v in want.items()), interleave
    assert wrong, "the naive join never failed: the test no longer shows the hazard"


def test_concat_when_the_tokens_are_taken():
    """A program whose last STORE already pushes store->execute, and one whose first LOAD already
    pops execute->load: the barrier adds a zero-row STORE and a zero-count LOAD instead."""
    cfg = PRESETS["4x4"]
    gen = torch.Generator().manual_seed(SEED + 7)
    programs, inputs, want = random_parts(cfg, gen, [(9, 13, 11, "gelu"), (12, 8, 9, None)])
    first, second = programs
    instrs = list(first.instrs)
    last = max(i for i, instr in enumerate(instrs) if isinstance(instr, isa.Store))
    instrs[last] = instrs[last].with_deps(push_prev=True)
    instrs.append(barrier().with_deps(push_prev=False))        # takes that token back
    taken = Program(cfg, instrs, inputs=first.inputs, outputs=first.outputs,
                    pack_index=first.pack_index, unpack_index=first.unpack_index,
                    constants=first.constants)
    instrs = [isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=0, accumulate=False,
                         push_prev=True)] + list(second.instrs)
    number = next(i for i, instr in enumerate(instrs) if isinstance(instr, isa.Load))
    instrs[number] = instrs[number].with_deps(pop_next=True)
    popping = Program(cfg, instrs, inputs=second.inputs, outputs=second.outputs,
                      pack_index=second.pack_index, unpack_index=second.unpack_index)
    for program in (taken, popping):
        program.validate()
    joined = concat([taken, popping, taken])
    joined.validate()
    inputs.update({f"2.{k[2:]}": v for k, v in inputs.items() if k.startswith("0.")})
    want["2.c"] = want["0.c"]
    for interleave in INTERLEAVINGS:
        out = SoftwareDevice(cfg, interleave=interleave).run(joined, **inputs).outputs
        assert all(torch.equal(out[k], v) for k, v in want.items()), interleave


def test_concat_refuses():
    cfg = PRESETS["4x4"]
    program = compile_gemm(cfg, 3, 3, 3)
    with pytest.raises(ValueError, match="at least one"):
        concat([])
    with pytest.raises(ValueError, match="one prefix per program"):
        concat([program, program], prefixes=["x."])
    with pytest.raises(ValueError, match="both named"):
        concat([program, program], prefixes=["x.", "x."])
    with pytest.raises(ValueError, match="compiled for"):
        concat([program, compile_gemm(PRESETS["2x2"], 3, 3, 3)])


def test_rebind_equals_a_fresh_compile():
    cfg = PRESETS["4x8"]
    gen = torch.Generator().manual_seed(SEED)
    for op in ("requant", "gelu", "softmax", "layernorm"):
        m, k, n = 21, 37, 29
        first = ep_mod.random_epilogue(op, k=k, n=n, generator=gen)
        second = ep_mod.random_epilogue(op, k=k, n=n, generator=gen)
        base = compile_gemm(cfg, m, k, n, epilogue=first)
        rebound = rebind(base, second, k, n)
        fresh = compile_gemm(cfg, m, k, n, epilogue=second)
        assert rebound.instrs == fresh.instrs, op
        assert torch.equal(rebound.pack_index, fresh.pack_index)
        assert torch.equal(rebound.constants["params"], fresh.constants["params"])


# -- quantisation pieces ----------------------------------------------------------------------

def test_split_rows_is_exact():
    gen = torch.Generator().manual_seed(SEED)
    q = torch.randint(-127, 128, (30, 11), generator=gen, dtype=torch.int64)
    q[3, 4] = 1000                                                  # digits: 2 rows, not 8
    q[7] = torch.randint(-5000, 5000, (11,), generator=gen)         # digits: 2 rows, not 40
    q[9, 0] = -127 * 3                                              # digits: 2 rows, not 3
    q[11, 5] = 200                                                  # halves: 2 rows
    q[12, :] = 127 * 64 * 3                                         # digits: 1 + 3 high rows
    split = split_rows(q, torch.arange(30))
    b, index, high = split.b, split.index, split.k_high
    assert b.dtype == torch.int8 and b.shape[0] == index.numel() == 30 + 4 + 3
    assert high == 6 and sorted(index[:high].tolist()) == [3, 7, 9, 12, 12, 12]
    a = torch.randint(-128, 128, (13, 30), generator=gen, dtype=torch.int8)
    want = (a.long() @ q).to(torch.int32)
    assert torch.equal(golden.gemm(a[:, index], b, k_high=high), want)
    # Padding keeps the high rows first and changes no product.
    padded = split.padded(high + 3, b.shape[0] + 5)
    assert padded.k_high == high + 3 and padded.k == b.shape[0] + 5
    assert torch.equal(golden.gemm(a[:, padded.index], padded.b, k_high=padded.k_high), want)
    with pytest.raises(ValueError, match="cannot pad"):
        split.padded(high - 1, b.shape[0])


def test_split_rows_room():
    # Rows of two halves take the low rows' room first, then become digits (a high row each);
    # rows of three parts or more are digits whatever the room. Every split is exact.
    gen = torch.Generator().manual_seed(SEED)
    q = torch.randint(-127, 128, (20, 7), generator=gen, dtype=torch.int64)
    q[[2, 5, 8], 1] = torch.tensor([200, -254, 130])               # two halves each
    q[11, 3] = 1000                                                 # digits
    a = torch.randint(-128, 128, (9, 20), generator=gen, dtype=torch.int8)
    want = (a.long() @ q).to(torch.int32)
    for room, k_high, k in ((None, 1, 24), (5, 1, 24), (2, 2, 24), (0, 4, 24), (-3, 4, 24)):
        split = split_rows(q, torch.arange(20), room=room)
        assert (split.k_high, split.k) == (k_high, k), room
        assert split.k - split.k_high == 20 + (3 - (k_high - 1))
        assert torch.equal(golden.gemm(a[:, split.index], split.b, k_high=split.k_high), want)


def test_fit_weight_saves_k_tiles_within_its_bound():
    """A per-tensor scale grows (up to ``coarsen`` times the budget's) only where that takes
    the split rows into fewer K tiles, and then to the finest scale that does; the integers
    stay exact at the scale chosen."""
    gen = torch.Generator().manual_seed(SEED)
    w = torch.randn((32, 6), generator=gen, dtype=torch.float64) * 0.1
    w[[3, 7, 11, 19, 23], 2] = torch.tensor([0.48, 0.5, 0.52, 0.55, 0.9],  # past int8
                                            dtype=torch.float64)
    ones = torch.ones(32)

    def split_of(q, _):
        return _split([(q, torch.arange(32))], 8)

    budget_scale = weight_scales(w, ones, budget=2)[0]
    tiles = {}
    for coarsen in (1.0, 1.1, 2.0):
        scale, split = fit_weight(w, ones, split_of, budget=2, tile=8, coarsen=coarsen)
        assert budget_scale <= scale <= coarsen * budget_scale
        q, _ = weight_ints(w, ones, per_channel=False, w_scale=scale)
        a = torch.randint(-128, 128, (5, 32), generator=gen, dtype=torch.int8)
        assert torch.equal(golden.gemm(a[:, split.index], split.b, k_high=split.k_high),
                           (a.long() @ q).to(torch.int32))
        tiles[coarsen] = k_tiles(8, split.k, split.k_high)
    assert fit_weight(w, ones, split_of, budget=2, tile=8)[0] == budget_scale
    assert tiles[1.0] == 5 and tiles[2.0] == 4      # four rows of 8, and the split rows
    # The finest scale of the fewest tiles: a little coarser would do no better.
    scale, _ = fit_weight(w, ones, split_of, budget=2, tile=8, coarsen=2.0)
    assert scale == pytest.approx(0.9 / 127)


def test_act_quant_outliers():
    gen = torch.Generator().manual_seed(SEED)
    values = torch.randn(500, 128, generator=gen)
    values[:, 5] *= 20
    values[:, 77] *= 8
    quant = act_quant(values, outliers=2)
    assert quant.outliers.tolist() == [5, 77]
    assert quant.scale[5] > quant.scale[77] > quant.base
    assert torch.equal(quant.scale[[0, 1, 127]], torch.full((3,), quant.base,
                                                            dtype=torch.float64))
    shared = act_quant(values, outliers=2, shared=True)
    assert shared.scale[5] == shared.scale[77]
    # A LayerNorm beta the base scale cannot hold makes its channel an outlier.
    beta = torch.zeros(128)
    beta[9] = 1000.0
    assert 9 in act_quant(values, outliers=2, beta=beta).outliers.tolist()
    back = quant.dequantize(quant.quantize(values))
    assert float((back - values).abs().max()) <= float(quant.scale.max()) / 2 + 1e-9


# -- a tiny random BERT -----------------------------------------------------------------------

def token_batch(gen, batch, seq, lengths, vocab=100):
    ids = torch.randint(1, vocab, (batch, seq), generator=gen)
    mask = (torch.arange(seq)[None] < torch.tensor(lengths)[:, None]).long()
    types = torch.randint(0, 2, (batch, seq), generator=gen) * mask
    return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": types}


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(SEED)
    model = transformers.BertModel(tiny_config(), add_pooling_layer=False).eval()
    gen = torch.Generator().manual_seed(SEED)
    calibration = [token_batch(gen, 4, 24, [24, 20, 13, 7]) for _ in range(4)]
    return model, calibration, gen


def test_tiny_bert_close_to_float(tiny):
    model, calibration, gen = tiny
    cfg = PRESETS["4x4"]
    bert = compile_bert(model, cfg, calibration=calibration)
    batch = token_batch(gen, 3, 19, [19, 11, 5])
    calls = []
    result = run_bert(SoftwareDevice(cfg), bert, **batch,
                      progress=lambda done, total, label: calls.append((done, total, label)))
    ref = bert_ref.forward(model, batch["input_ids"], batch["attention_mask"],
                           batch["token_type_ids"])
    valid = batch["attention_mask"].bool()
    per_token = torch.nn.functional.cosine_similarity(result.last_hidden_state[valid],
                                                      ref[valid], dim=-1)
    assert float(per_token.min()) >= 0.99, per_token
    cos = bert_ref.cosine_similarity(result.embedding,
                                     bert_ref.mean_pool(ref, batch["attention_mask"]))
    assert float(cos.min()) >= 0.999, cos
    # Figures and progress: six device calls a layer, counted on the way.
    stats = result.stats
    assert stats["device_calls"] == len(calls) == 6 * 2
    assert [label.split()[-1] for _, _, label in calls[:6]] == list(STAGES)
    assert all(b[0] > a[0] for a, b in zip(calls, calls[1:]))
    assert calls[-1][0] == pytest.approx(calls[-1][1])
    # The software device's cycle model counts cycles (the RTL tests check it against the RTL).
    assert stats["cycles"] >= stats["ideal_cycles"] and stats["latency_from"] == "cycles"
    assert stats["utilization"] == pytest.approx(stats["ideal_cycles"] / stats["cycles"])
    assert stats["macs"] >= stats["model_macs"] > 0 and stats["est_cycles"] > 0
    assert stats["ideal_cycles"] == -(-stats["macs"] // cfg.macs_per_cycle)
    assert len(bert.describe()) == 6


def test_tiny_bert_padding_and_interleaving(tiny):
    """A sentence gives the same integers alone and padded in a batch; any interleaving of
    the units gives the same integers as program order."""
    model, calibration, gen = tiny
    cfg = PRESETS["2x2"]
    bert = compile_bert(model, cfg, calibration=calibration)
    batch = token_batch(gen, 2, 13, [13, 6])
    result = run_bert(SoftwareDevice(cfg), bert, **batch, trace=True)
    alone = run_bert(SoftwareDevice(cfg), bert,
                     **{key: value[1:, :6] for key, value in batch.items()})
    assert torch.equal(result.hidden_int8[1, :6], alone.hidden_int8[0])
    shuffled = run_bert(SoftwareDevice(cfg, interleave=SEED), bert, **batch)
    assert torch.equal(shuffled.hidden_int8, result.hidden_int8)
    assert set(result.trace) == {(layer, stage) for layer in range(2) for stage in STAGES}


def test_tiny_bert_bad_input(tiny):
    model, calibration, gen = tiny
    cfg = PRESETS["4x4"]
    bert = compile_bert(model, cfg, calibration=calibration)
    device = SoftwareDevice(cfg)
    long = token_batch(gen, 1, 41, [41])
    with pytest.raises(BertError, match="more than the model's max_position_embeddings"):
        run_bert(device, bert, **long)
    batch = token_batch(gen, 2, 8, [8, 3])
    empty = dict(batch, attention_mask=batch["attention_mask"] * torch.tensor([[1], [0]]))
    with pytest.raises(BertError, match=r"sequence\(s\) \[1\] have no valid token"):
        run_bert(device, bert, **empty)
    with pytest.raises(BertError, match="from 0 to 99"):
        run_bert(device, bert, **dict(batch, input_ids=batch["input_ids"] + 100))
    with pytest.raises(BertError, match="compiled for"):
        run_bert(SoftwareDevice(PRESETS["2x2"]), bert, **batch)
    with pytest.raises(BertError, match="no tokenizer"):
        bert.encode(["text"])
    with pytest.raises(BertError, match="calibration needs sample text"):
        compile_bert(model, cfg)


def test_config_that_holds_no_tile(tiny):
    model, calibration, _ = tiny
    # LayerNorm needs whole rows in half the accumulator: a row of 128 columns on a 2-column
    # array is 64 strips, more than the 32 rows of half a 64-row accumulator.
    small = AccelConfig(rows=2, cols=2, spad_depth=64, acc_depth=64, pmem_depth=16)
    big = transformers.BertModel(tiny_config(hidden_size=128, num_attention_heads=4),
                                 add_pooling_layer=False).eval()
    with pytest.raises(BertError, match=r"config \(r2c2.*\) cannot"):
        compile_bert(big, small, calibration=calibration)
    del model


# -- all-MiniLM-L6-v2 -------------------------------------------------------------------------

@pytest.fixture(scope="module")
def minilm():
    return bert_ref.load()


def test_minilm_encode_errors(minilm):
    tokenizer, model = minilm
    bert = compile_bert(model, PRESETS["32x32"], tokenizer=tokenizer, name="all-MiniLM-L6-v2")
    with pytest.raises(BertError, match="text 1 is empty"):
        bert.encode(["fine", ""])
    with pytest.raises(BertError, match="only white space"):
        bert.encode(["  \n"])
    with pytest.raises(BertError, match="no text"):
        bert.encode([])
    with pytest.raises(BertError, match="text 0 has no token but the special ones"):
        bert.encode(["\x07\x08\x01"])
    with pytest.warns(UserWarning, match=r"text 0 has \d+ tokens, more than 512 \(the model's "
                                         r"max_position_embeddings\); it is truncated"):
        batch = bert.encode(["word " * 700, "A short one."])
    assert batch["input_ids"].shape == (2, 512)
    bert.max_length = bert_ref.max_seq_length()    # what a model folder's compile sets
    with pytest.warns(UserWarning, match=r"more than 256 \(max_seq_length\); it is truncated"):
        assert bert.encode(["word " * 300])["input_ids"].shape == (1, 256)
    with pytest.warns(UserWarning, match=r"more than 40 \(max_length\)"):
        assert bert.encode(["word " * 300], max_length=40)["input_ids"].shape == (1, 40)
    for bad in (2, 513, 9.5, True):
        with pytest.raises(BertError, match=rf"max_seq_length must be an int from 3 to 512 "
                                            rf".*, not {bad!r}"):
            bert.check_length(bad)
    with pytest.raises(BertError, match=r"config \(r8c8_i8a32_sp4096_acc64_.*\) cannot run"):
        compile_bert(model, AccelConfig(rows=8, cols=8, acc_depth=64), tokenizer=tokenizer)


@pytest.mark.slow
def test_minilm_close_to_fp32(minilm):
    """Eight real sentences of mixed lengths in one padded batch: every embedding within
    cosine 0.99 of FP32 (the bench measures all 64 on 8x8)."""
    tokenizer, model = minilm
    cfg = PRESETS["32x32"]
    bert = compile_bert(model, cfg, tokenizer=tokenizer, name="all-MiniLM-L6-v2")
    texts = sentences.evaluation_sentences()[:8]
    batch = bert.encode(texts)
    assert len(set(batch["attention_mask"].sum(dim=1).tolist())) > 4   # padding cases
    result = run_bert(SoftwareDevice(cfg), bert, **batch)
    ref = bert_ref.embed(model, tokenizer, texts)
    cos = bert_ref.cosine_similarity(result.embedding, ref)
    print("cosine per sentence", [round(float(c), 5) for c in cos])
    assert float(cos.min()) >= 0.99, cos
    assert result.embedding.shape == (8, 384)
    assert isa.FIELD_MAX >= bert.k["w2"]


# -- the command line -------------------------------------------------------------------------

def test_cli_run_bad_input(tmp_path, capsys):
    from bertaccel.cli import main

    cases = [
        (["run", "--model", str(tmp_path / "missing"), "--text", "x"], "does not exist"),
        (["run", "--text", "  "], "text 0 is empty (only white space)"),
        (["run"], "give the text to embed with --text or --text-file"),
        (["run", "--text-file", str(tmp_path / "none.txt")], "cannot read --text-file"),
        (["run", "--text", "\x07\x01"], "text 0 has no token but the special ones"),
        (["run", "--text", "x", "--config", "9x9"], "unknown preset '9x9'"),
    ]
    for argv, message in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert err.startswith("bertaccel: error: ") and message in err, (argv, err)
        assert err.count("\n") == 1


def test_max_seq_length_of_a_model_folder(tmp_path):
    """A folder's ``sentence_bert_config.json`` gives its text limit, as sentence-transformers
    reads it; none without the file; a bad file is a ModelError naming it."""
    assert bert_ref.max_seq_length() == bert_ref.max_seq_length(bert_ref.MINILM) == 256
    (tmp_path / "config.json").write_text("{}")
    assert bert_ref.max_seq_length(tmp_path) is None
    settings = tmp_path / "sentence_bert_config.json"
    for text, message in (("{", "cannot read"), ('{"max_seq_length": 0}', "not a positive"),
                          ('{"max_seq_length": "64"}', "not a positive"), ("[]", "cannot read")):
        settings.write_text(text)
        with pytest.raises(bert_ref.ModelError, match=message) as caught:
            bert_ref.max_seq_length(tmp_path)
        assert "sentence_bert_config.json" in str(caught.value)
    settings.write_text('{"max_seq_length": 64, "do_lower_case": false}')
    assert bert_ref.max_seq_length(tmp_path) == 64


def test_cli_run_keeps_the_models_max_seq_length(tmp_path, capsys, minilm):
    """``bertaccel run`` truncates at the folder's max_seq_length, or at --max-seq-length;
    a limit the model or config cannot take is one line, exit 2, before any run."""
    import json

    from bertaccel.cli import main

    folder = tiny_bert_folder(tmp_path / "model", seed=SEED, positions=24)
    (folder / "sentence_bert_config.json").write_text('{"max_seq_length": 16}')
    argv = ["run", "--model", str(folder), "--text", "many words " * 20, "--config", "4x4",
            "--json", "--no-fp32", "--no-cache", "--quiet"]
    for extra, kept in (([], 16), (["--max-seq-length", "8"], 8), (["--max-seq-length", "24"], 24)):
        assert main(argv + extra) == 0
        captured = capsys.readouterr()
        assert f"truncated to {kept} tokens" in captured.err, captured.err
        report = json.loads(captured.out)
        assert report["max_seq_length"] == kept and report["tokens"] == kept
    for bad in ("2", "25"):
        assert main(argv + ["--max-seq-length", bad]) == 2
        err = capsys.readouterr().err
        assert "max_seq_length must be an int from 3 to 24" in err and err.count("\n") == 1


def test_cli_run_on_a_model_folder(tmp_path, capsys, minilm):
    """``bertaccel run`` end to end on a small random BERT saved with MiniLM's tokenizer."""
    import json

    from bertaccel.cli import main

    tiny_bert_folder(tmp_path, seed=SEED, positions=24)
    texts = tmp_path / "texts.txt"
    texts.write_text("A short text.\n\n" + "many words " * 20 + "\n")
    status = main(["run", "--model", str(tmp_path), "--text", "First text here.",
                   "--text-file", str(texts), "--config", "4x4", "--json"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    assert "text 2 has" in captured.err and "truncated to 24 tokens" in captured.err
    report = json.loads(captured.out)
    assert report["device"] == "ref" and report["config"] == "4x4"
    assert report["texts"] == 3 and report["blank_lines"] == 1
    assert len(report["per_text"]) == 3 and len(report["per_text"][0]["embedding"]) == 64
    assert min(t["cosine_fp32"] for t in report["per_text"]) >= 0.99
    assert report["cycles"] >= report["ideal_cycles"] > 0 and report["latency_ms"] > 0
    assert main(["run", "--model", str(tmp_path), "--text", "Plain output.",
                 "--config", "4x4"]) == 0
    out = capsys.readouterr().out
    for key in ("embedding", "vs FP32", "cycles", "latency", "utilization"):
        assert f"\n{key}" in out


def test_encoder_refuses_text_of_special_tokens_only(tmp_path, minilm):
    """Text that the tokenizer reduces to ``[CLS] [SEP]`` (control characters only) is refused
    like empty text by :meth:`Encoder.encode` and :meth:`BertProgram.encode` alike (and by
    ``bertaccel run``: :func:`test_cli_run_bad_input`)."""
    from bertaccel.sw.bert.encoder import Encoder

    tokenizer, _ = minilm
    torch.manual_seed(SEED)
    transformers.BertModel(tiny_config(vocab_size=tokenizer.vocab_size),
                           add_pooling_layer=False).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    encoder = Encoder(str(tmp_path), config="4x4", cache=False)
    for encode in (encoder.encode, encoder.bert.encode):
        with pytest.raises(BertError, match="text 1 has no token but the special ones"):
            encode(["A fine text.", "\x07\x08"])
    assert encoder.encode("A fine text.").shape == (1, 64)
