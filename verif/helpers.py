"""Helpers shared by the tests (the fixtures are in conftest.py).

Test files import from here, never from one another.
"""

import os

import pytest
import torch
from bertaccel.hw import isa
from bertaccel.sw.bert import compile_bert
from bertaccel.sw.cycles import CycleModel
from bertaccel.sw.hand_programs import load, matmul, store, two_pass_sets

__all__ = ["REQUIRE_TOOLS", "missing_tool", "check_model_cycles", "check_outputs", "load",
           "matmul", "store", "two_pass_sets", "pass_order", "token_batch", "random_float_bert",
           "random_bert", "random_float_model"]


#: Set to 1 (``.ci/run`` does), a test that needs a tool which is not installed fails instead
#: of skipping, so a broken install cannot pass for a green suite.
REQUIRE_TOOLS = "BERTACCEL_REQUIRE_TOOLS"


def missing_tool(message):
    """Skip this test for a tool that is not installed, saying ``message``; fail it instead
    where :data:`REQUIRE_TOOLS` is 1."""
    if os.environ.get(REQUIRE_TOOLS) == "1":
        pytest.fail(f"{message}, and {REQUIRE_TOOLS}=1 requires it", pytrace=False)
    pytest.skip(message)


def check_model_cycles(device, program, result, *, what=""):
    """Assert what the cycle model guarantees of an RTL run, and return the model's cycles.

    ``device`` is the device (:class:`~bertaccel.sw.devices.rtl.RtlDevice` or
    :class:`verif.tb.harness.AmaranthDevice`) that ran ``program`` and returned ``result``. A
    free-running run takes exactly the model's cycles. A run with idle source cycles or sink
    backpressure takes at least as many: every constraint of the model is a "not before", and
    a stall only moves a cycle later.
    """
    report = CycleModel(device.cfg).run(program)
    where = f"{what or repr(program)} on {device.cfg.name}"
    if device.src_idle or device.sink_stall:
        assert result.cycles >= report.cycles, (
            f"a stalled run took {result.cycles} cycles, fewer than the model's free-running "
            f"{report.cycles}, for {where}")
    else:
        assert report.cycles == result.cycles, (
            f"cycle model {report.cycles} vs RTL {result.cycles} for {where}: "
            f"{report.summary()}")
    return report.cycles


def check_outputs(result, reference, *, what=""):
    """Assert that every output of ``result`` equals the same output of ``reference``, bit for bit.

    Both are :class:`~bertaccel.sw.devices.base.RunResult` objects of the same program, typically
    from the RTL and the software device. The message names the output, how many values differ
    and the first of them.
    """
    assert result.outputs.keys() == reference.outputs.keys(), \
        f"outputs {sorted(result.outputs)} vs {sorted(reference.outputs)} for {what}"
    for name, want in reference.outputs.items():
        got = result.outputs[name]
        if torch.equal(got, want):
            continue
        if got.shape != want.shape or got.dtype != want.dtype:
            raise AssertionError(f"output {name!r} for {what}: {got.dtype} {tuple(got.shape)}, "
                                 f"not {want.dtype} {tuple(want.shape)}")
        bad = (got != want).nonzero()
        first = tuple(bad[0].tolist())
        raise AssertionError(f"output {name!r} for {what}: {len(bad)} of {got.numel()} values "
                             f"differ, the first at {first}: {int(got[first])}, not "
                             f"{int(want[first])}")


# Instructions for hand-written programs: every operand at address 0, so that only the counts
# and the token flags shape the timing.

def pass_order(rows, two_pass):
    """``(row, second)`` in the order the store unit sends a STORE's rows to the epilogue:
    once each, or for a two-pass op P1(0), P1(1), P2(0), P1(2), P2(1), ..., P2(R-1)."""
    if not two_pass:
        return [(r, True) for r in range(rows)]
    order = [(0, False)] + ([(1, False)] if rows > 1 else [])
    for r in range(rows):
        order.append((r, True))
        if r + 2 < rows:
            order.append((r + 2, False))
    return order


# Multi-task: a random task on a compiled base, and the merged-weight model it must equal.

def token_batch(gen, lengths, vocab, *, types=False):
    """A padded batch of random token ids, one sequence of each of ``lengths``; with
    ``types``, random token types (0 or 1) too, else all 0."""
    seq = max(lengths)
    ids = torch.randint(1, vocab, (len(lengths), seq), generator=gen)
    mask = (torch.arange(seq)[None] < torch.tensor(lengths)[:, None]).long()
    kinds = torch.randint(0, 2, (len(lengths), seq), generator=gen) * mask if types \
        else torch.zeros_like(ids)
    return {"input_ids": ids * mask, "attention_mask": mask, "token_type_ids": kinds}


def random_float_bert(seed, *, hidden, heads, intermediate, layers, vocab=90, positions=48,
                      pooler=False):
    """A random float ``transformers`` BertModel (in eval mode; no pooler unless ``pooler``),
    its weights drawn after ``torch.manual_seed(seed)``."""
    import transformers

    torch.manual_seed(seed)
    return transformers.BertModel(transformers.BertConfig(
        vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers,
        num_attention_heads=heads, intermediate_size=intermediate,
        max_position_embeddings=positions, type_vocab_size=2), add_pooling_layer=pooler).eval()


def tiny_bert_folder(folder, *, seed, hidden=64, heads=4, intermediate=128, layers=2,
                     positions=40, pooler=False):
    """A model folder of a random BERT (:func:`random_float_bert`) over MiniLM's vocabulary,
    saved with MiniLM's tokenizer: compiled and run in seconds. Returns ``folder``."""
    from bertaccel.golden import bert_ref

    tokenizer = bert_ref.load_tokenizer()
    random_float_bert(seed, hidden=hidden, heads=heads, intermediate=intermediate,
                      layers=layers, vocab=tokenizer.vocab_size, positions=positions,
                      pooler=pooler).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def random_bert(cfg, *, seed, hidden=40, heads=4, intermediate=72, layers=2, lengths=(11, 6)):
    """A random ``transformers`` BertModel compiled for ``cfg`` (calibrated on random tokens),
    and a padded batch of random tokens with ``lengths``: ``(bert, batch)``."""
    model = random_float_bert(seed, hidden=hidden, heads=heads, intermediate=intermediate,
                              layers=layers)
    gen = torch.Generator().manual_seed(seed)
    calibration = [token_batch(gen, [21, 17, 9, 3], 90) for _ in range(3)]
    bert = compile_bert(model, cfg, calibration=calibration, name="small")
    return bert, token_batch(gen, list(lengths), 90)


def random_float_model(bert, *, seed):
    """The float model :func:`random_bert` compiled into ``bert`` with ``seed``, rebuilt."""
    import transformers

    torch.manual_seed(seed)
    s = bert.spec
    return transformers.BertModel(transformers.BertConfig(
        vocab_size=s.vocab_size, hidden_size=s.hidden, num_hidden_layers=s.layers,
        num_attention_heads=s.heads, intermediate_size=s.intermediate,
        max_position_embeddings=s.max_positions, type_vocab_size=s.type_vocab_size),
        add_pooling_layer=False).eval()
