"""A task classifier on the accelerator path (sw/multitask/accel.py), on tiny random models.

The evaluation's path -- the compiled base plus the task's row delta (made from a row-sparse
task model, cached as an ``.npz``) on the fast path, dequantised, mean-pooled, float head --
gives the very logits of the task program run on the instruction-level software device, and
the task's separately compiled model runs the same way. The delta cache is keyed by the base
and the config: a file made for another config, or a damaged one, is refused with one line.
"""

import copy

import pytest
import torch
import transformers

from bertaccel.golden import bert_ref
from bertaccel.hw.config import PRESETS
from bertaccel.sw import SoftwareDevice
from bertaccel.sw.bert import run_bert
from bertaccel.sw.multitask import accel
from bertaccel.sw.multitask.rowdelta import DeltaError
from verif.helpers import random_bert, random_float_model, token_batch


SEED = 41
LABELS = 3


def _row_sparse_state(model, gen):
    """A classifier state dict: ``model`` with K-rows 1 and 5 of every query and FFN-out
    weight moved, its vectors moved a little, and a random head."""
    task = copy.deepcopy(model)
    with torch.no_grad():
        for block in task.encoder.layer:
            for w in (block.attention.self.query.weight, block.output.dense.weight):
                w[:, [1, 5]] += 0.5 * w.std() * torch.randn(w.shape[0], 2, generator=gen)
            block.output.LayerNorm.bias += 0.05 * torch.randn(block.output.LayerNorm.bias.shape,
                                                              generator=gen)
    state = {f"bert.{n}": v for n, v in task.state_dict().items()}
    hidden = model.config.hidden_size
    state["head.weight"] = torch.randn((LABELS, hidden), generator=gen)
    state["head.bias"] = torch.randn(LABELS, generator=gen)
    return state


@pytest.fixture(scope="module")
def task():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    bert, batch = random_bert(PRESETS["8x8"], seed=SEED)
    model = random_float_model(bert, seed=SEED)
    state = _row_sparse_state(model, torch.Generator().manual_seed(SEED))
    yield bert, batch, model, state
    torch.set_num_threads(threads)


def _device_logits(program, batch, state):
    """The logits with the encoder run on the software device."""
    out = run_bert(SoftwareDevice(program.cfg), program, **batch)
    mask = batch["attention_mask"].bool()
    hidden = program.layers[-1].x2.dequantize(out.hidden_int8).float()
    return bert_ref.mean_pool(hidden, mask) @ state["head.weight"].t() + state["head.bias"]


def test_checkpoint_rows_are_the_moved_rows(task):
    bert, _, model, state = task
    rows = accel.checkpoint_rows(model.state_dict(), state, bert.spec.layers)
    assert set(rows) == {(layer, stage) for layer in range(bert.spec.layers)
                         for stage in ("qkv", "w2")}
    for picked in rows.values():
        assert picked.tolist() == [1, 5]


def test_base_delta_equals_the_task_program_on_the_software_device(task, tmp_path):
    bert, batch, model, state = task
    path = accel.delta_file(tmp_path, "task-rows", bert)
    delta = accel.task_delta(bert, model, state, path)
    assert path.is_file() and delta.nbytes > 0
    tasked = accel.AccelTask.from_delta(bert, delta, state)
    got = tasked.logits_of(batch)
    assert torch.equal(got, _device_logits(tasked.program, batch, state))
    # The cached file gives the same delta, so the same logits.
    again = accel.AccelTask.from_delta(bert, accel.task_delta(bert, model, state, path), state)
    assert torch.equal(again.logits_of(batch), got)
    # The delta changes the result: the base with the task's head alone differs.
    assert not torch.equal(accel.AccelTask(bert, state).logits_of(batch), got)


def test_separate_model_on_the_fast_path_equals_the_software_device(task):
    bert, batch, model, state = task
    gen = torch.Generator().manual_seed(SEED)
    calibration = [token_batch(gen, [21, 17, 9, 3], bert.spec.vocab_size) for _ in range(3)]
    separate = accel.AccelTask(accel.compile_separate(model, state, bert.cfg,
                                                      calibration=calibration), state)
    got = separate.logits_of(batch)
    assert torch.equal(got, _device_logits(separate.program, batch, state))
    assert accel.cycles(separate.program) > 0


def test_delta_for_another_config_or_damaged_is_refused(task, tmp_path):
    bert, _, model, state = task
    other, _ = random_bert(PRESETS["4x8"], seed=SEED)
    path = accel.delta_file(tmp_path, "task-rows", bert)
    accel.task_delta(other, model, state, path)          # another config's delta at this path
    with pytest.raises(DeltaError) as error:
        accel.task_delta(bert, model, state, path)
    assert "\n" not in str(error.value)
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(DeltaError, match="not a readable delta file") as error:
        accel.task_delta(bert, model, state, path)
    assert "\n" not in str(error.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name]   # nothing half-written
