"""Helpers shared by the tests (the fixtures are in conftest.py).

Test files import from here, never from one another.
"""

import dataclasses
import os

import numpy as np
import pytest
import torch
from bertaccel.hw import isa
from bertaccel.sw.bert import BertProgram, compile_bert
from bertaccel.sw.bert.quant import SplitB, split_rows
from bertaccel.sw.cycles import CycleModel
from bertaccel.sw.multitask.ondevice import base_ints, delta_columns, task_epilogues
from bertaccel.sw.multitask.rowdelta import (WEIGHT_STAGES, RowDelta, TaskDelta,
                                             base_fingerprint, stage_shape)

__all__ = ["REQUIRE_TOOLS", "missing_tool", "check_model_cycles", "check_outputs", "load",
           "matmul", "store", "two_pass_sets",
           "pass_order", "token_batch", "random_bert", "random_task_delta", "merged_program"]


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

def load(count, **flags):
    """A LOAD of ``count`` beats into scratchpad A at row 0."""
    return isa.Load(target=isa.Target.SPAD_A, addr=0, count=count, **flags)


def matmul(m_len, **flags):
    """A MATMUL of ``m_len`` operand rows from row 0 of both scratchpads into accumulator row 0."""
    return isa.Matmul(a_addr=0, b_addr=0, acc_addr=0, m_len=m_len, accumulate=False, **flags)


def store(rows, strips=1, op=isa.EpOp.RAW, **flags):
    """A STORE of ``rows`` x ``strips`` accumulator rows from row 0 through the epilogue ``op``."""
    return isa.Store(acc_addr=0, rows=rows, strips=strips, stride=rows, op=op, **flags)


def two_pass_sets(cfg, strips):
    """SETs that make a SOFTMAX / LAYERNORM STORE of ``strips`` strips legal."""
    return [isa.Set(index=isa.Param.ROW_LEN, value=strips * cfg.cols),
            isa.Set(index=isa.Param.SHIFT1, value=8)]


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

def token_batch(gen, lengths, vocab):
    """A padded batch of random token ids, one sequence of each of ``lengths``."""
    seq = max(lengths)
    ids = torch.randint(1, vocab, (len(lengths), seq), generator=gen)
    mask = (torch.arange(seq)[None] < torch.tensor(lengths)[:, None]).long()
    return {"input_ids": ids * mask, "attention_mask": mask,
            "token_type_ids": torch.zeros_like(ids)}


def random_bert(cfg, *, seed, hidden=40, heads=4, intermediate=72, layers=2, lengths=(11, 6)):
    """A random ``transformers`` BertModel compiled for ``cfg`` (calibrated on random tokens),
    and a padded batch of random tokens with ``lengths``: ``(bert, batch)``."""
    import transformers

    torch.manual_seed(seed)
    model = transformers.BertModel(transformers.BertConfig(
        vocab_size=90, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
        intermediate_size=intermediate, max_position_embeddings=48, type_vocab_size=2),
        add_pooling_layer=False).eval()
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


def _perturbed(gen, value, spread):
    value = np.asarray(value, dtype=np.float64)
    noise = torch.randn(value.shape, generator=gen, dtype=torch.float64).numpy()
    return value * (1 + spread * noise)


def _task_vectors(bert, gen, layer):
    """The base's epilogue vectors of ``layer``, each moved by a few per cent."""
    q = bert.layers[layer]
    w1_bias = np.zeros(bert.spec.intermediate)
    w1_bias[q.h_keep.numpy()] = q.w1_ep.bias
    if q.w1_out_ep is not None:
        w1_bias[q.h.outliers.numpy()] = q.w1_out_ep.bias
    return {
        (layer, "qkv"): {"bias": _perturbed(gen, q.qkv_ep.bias, 0.05)},
        (layer, "wo"): {name: _perturbed(gen, getattr(q.wo_ep, name), 0.05)
                        for name in ("bias", "gamma", "beta")},
        (layer, "w1"): {"bias": _perturbed(gen, w1_bias, 0.05)},
        (layer, "w2"): {name: _perturbed(gen, getattr(q.w2_ep, name), 0.05)
                        for name in ("bias", "gamma", "beta")},
    }


def random_task_delta(bert, gen, *, fraction=0.1, spread=20, fits=True, vectors=True,
                      uneven=False, name="random"):
    """A random task on the compiled ``bert``: ``fraction`` of the K-rows of every weight
    matrix (at least one) get int8 values of about ``spread``. With ``fits``, the values are
    cut so that every changed weight ``base_q + value`` stays in ``[-127, 127]`` where
    ``base_q`` does (the merged weight fits int8); without, some leave it. With ``uneven``,
    the layers' fractions rise from half of ``fraction`` in the first layer to one and a half
    times it in the last, so the layers' GEMM depths differ."""
    rows, vecs = {}, {}
    layers = bert.spec.layers
    for layer in range(layers):
        share = 0.5 + layer / max(1, layers - 1) if uneven else 1.0
        for stage in WEIGHT_STAGES:
            k, n = stage_shape(bert.spec, stage)
            r = max(1, round(fraction * share * k))
            picked = torch.randperm(k, generator=gen)[:r]
            values = torch.randint(-spread, spread + 1, (r, n), generator=gen)
            if fits:
                base = base_ints(bert, layer, stage)[picked]
                inside = base.abs() <= 127
                values = torch.where(inside, (base + values).clamp(-127, 127) - base, values)
            else:
                values[0, 0] = 127 if int(base_ints(bert, layer, stage)[picked[0], 0]) >= 0 \
                    else -127
            rows[(layer, stage)] = RowDelta(rows=picked.numpy().astype(np.int64),
                                            values=values.numpy().astype(np.int8))
        if vectors:
            vecs.update(_task_vectors(bert, gen, layer))
    return TaskDelta(base=base_fingerprint(bert), config=bert.cfg.tag, rows=rows, vectors=vecs,
                     name=name)


def _in_order(q, columns):
    """The rows of ``q`` (the float weight's order) in the order of the A columns."""
    out = torch.empty_like(q)
    out[columns] = q
    return out


def merged_program(bert, delta):
    """The reference for a task: the base with the delta added to its integer weights
    (``base_q + delta``, split into int8 rows as the compiler splits any weight) and the
    task's epilogue vectors. Returns ``(program, extra)``: ``extra`` counts the rows that
    splitting the merged weights added beyond the base's own split rows."""
    layers, extra = [], 0
    for layer in range(bert.spec.layers):
        quant = bert.layers[layer]
        changes = {}
        for stage in WEIGHT_STAGES:
            if delta.vectors.get((layer, stage)):
                changes.update(task_epilogues(quant, stage, delta.vectors[(layer, stage)]))
            part = delta.rows.get((layer, stage))
            if part is None:
                continue
            base = base_ints(bert, layer, stage)
            q = base.clone()
            q[torch.from_numpy(part.rows)] += torch.from_numpy(part.values).long()
            k = q.shape[0]
            columns = delta_columns(quant, stage, torch.arange(k))
            ours = split_rows(_in_order(q, columns), torch.arange(k))
            extra += ours.k - split_rows(_in_order(base, columns), torch.arange(k)).k
            split = getattr(quant, stage)
            high = torch.arange(split.k) < split.k_high
            other_high = (split.index >= k) & high          # rows of other A sources
            other_low = (split.index >= k) & ~high
            changes[stage] = SplitB(
                b=torch.cat([ours.b[:ours.k_high], split.b[other_high], ours.b[ours.k_high:],
                             split.b[other_low]]),
                index=torch.cat([ours.index[:ours.k_high], split.index[other_high],
                                 ours.index[ours.k_high:], split.index[other_low]]),
                k_high=ours.k_high + int(other_high.sum()))
        layers.append(dataclasses.replace(quant, **changes))
    program = BertProgram(bert.cfg, bert.spec, layers, x_embed=bert.x_embed,
                          calibration=bert.calibration, embeddings=bert.embeddings,
                          tokenizer=bert.tokenizer, name=f"{bert.name} merged {delta.name}")
    return program, extra
