"""A task model on the accelerator path: compiled int8 encoder on the fast path, float head.

Two ways to run a task's classifier (:class:`~.model.Classifier`) on the accelerator:

* separately: the task's whole fine-tuned encoder compiled for the config
  (:func:`compile_separate`), and
* from the shared compiled base plus the task's row delta (:func:`task_delta`, a
  :class:`~.rowdelta.TaskDelta` made once from the row-sparse checkpoint with
  :func:`~.fromweights.delta_from_model` on the rows that checkpoint changes, cached as an
  ``.npz`` whose name holds the base's fingerprint and the config), applied on the device side
  with :func:`~.ondevice.apply_task`.

Either program runs on the fast path (:class:`~bertaccel.sw.bert.fast.FastModel`, bit-exact
with the software device and the RTL); its int8 last hidden state is dequantised at the last
layer's output scale and mean-pooled as :class:`~bertaccel.sw.bert.encoder.Encoder` does, and
the task's float head gives the logits on the host. The host never adds a delta to a weight.
"""

import copy
import pathlib

import torch

from ...golden import bert_ref
from ..bert.compile import compile_bert
from ..bert.encoder import CALIBRATION
from ..bert.fast import FastModel
from ..bert.timing import StageTimer
from .fromweights import delta_from_model
from .ondevice import apply_task
from .rowdelta import base_fingerprint, load_delta

__all__ = ["TIMED_BATCH", "TIMED_SEQ", "AccelTask", "checkpoint_rows", "task_encoder",
           "compile_separate", "task_delta", "delta_file", "cycles"]

#: The inference the cycle figures are for: one sequence of 128 tokens.
TIMED_BATCH, TIMED_SEQ = 1, 128

_STAGE_MODULES = {"qkv": ("attention.self.query", "attention.self.key", "attention.self.value"),
                  "wo": ("attention.output.dense",), "w1": ("intermediate.dense",),
                  "w2": ("output.dense",)}


def _bare(state):
    return {(n[len("bert."):] if n.startswith("bert.") else n): v for n, v in state.items()}


def checkpoint_rows(base_state, task_state, layers):
    """``{(layer, stage): (r,) int64}``: the K-rows (input features) where a row-sparse task
    model's weight matrices differ from the base's (one ``qkv`` row covers Q, K and V), for
    :func:`~.fromweights.delta_from_model`. State dicts with or without ``bert.``."""
    base, task = _bare(base_state), _bare(task_state)
    rows = {}
    for layer in range(layers):
        for stage, modules in _STAGE_MODULES.items():
            changed = None
            for module in modules:
                name = f"encoder.layer.{layer}.{module}.weight"
                moved = (task[name] != base[name]).any(dim=0)        # (K,): torch is (N, K)
                changed = moved if changed is None else changed | moved
            if bool(changed.any()):
                rows[(layer, stage)] = changed.nonzero().flatten().long()
    return rows


def task_encoder(base_model, state):
    """A copy of the ``transformers`` BertModel ``base_model`` holding the encoder weights of
    the classifier state dict ``state`` (``bert.*``)."""
    model = copy.deepcopy(base_model)
    model.load_state_dict({n[len("bert."):]: v for n, v in state.items()
                           if n.startswith("bert.")})
    return model.eval()


def compile_separate(base_model, state, cfg, *, tokenizer=None, calibration=None, name="task"):
    """The task's whole fine-tuned encoder (classifier state dict ``state``) compiled for
    ``cfg`` with the calibration settings the base is compiled with (``calibration``: sample
    text or batches, :func:`~bertaccel.sw.bert.compile.compile_bert`'s default with None)."""
    return compile_bert(task_encoder(base_model, state), cfg, tokenizer=tokenizer, name=name,
                        calibration=calibration, **CALIBRATION)


def task_delta(bert, base_model, state, path):
    """The :class:`~.rowdelta.TaskDelta` of the row-sparse classifier state dict ``state``
    against the compiled base ``bert``, kept in ``path`` (an ``.npz``; written atomically when
    missing, checked against ``bert`` when present).

    Raises
    ------
    DeltaError
        The file at ``path`` is damaged or made for another base or config.
    """
    path = pathlib.Path(path)
    if path.is_file():
        return load_delta(path).check(bert)
    rows = checkpoint_rows(base_model.state_dict(), state, bert.spec.layers)
    delta, _ = delta_from_model(bert, task_encoder(base_model, state), rows, name=path.stem)
    path.parent.mkdir(parents=True, exist_ok=True)
    delta.save(path)
    return delta


def cycles(program):
    """Cycles of one inference of :data:`TIMED_BATCH` x :data:`TIMED_SEQ` tokens
    (:class:`~bertaccel.sw.bert.timing.StageTimer`, equal to the RTL's count)."""
    return StageTimer(program).model(TIMED_BATCH, TIMED_SEQ)[0]


class AccelTask:
    """A task classifier on the accelerator's fast path: a compiled program and a float head.

    Parameters
    ----------
    program : BertProgram
        The compiled encoder (a separate model, or a :class:`~.ondevice.TaskProgram`).
    state : dict
        The task's classifier state dict; its ``head.weight`` and ``head.bias`` are used.
    """

    def __init__(self, program, state):
        self.program = program
        self.fast = FastModel(program)
        self.weight = state["head.weight"].detach().float()
        self.bias = state["head.bias"].detach().float()

    @classmethod
    def from_delta(cls, bert, delta, state):
        """The task as the base ``bert`` plus ``delta`` (:func:`~.ondevice.apply_task`)."""
        return cls(apply_task(bert, delta), state)

    def pooled(self, batch):
        """The mean-pooled, dequantised int8 last hidden state ``(B, hidden)`` float32 of a
        padded batch (``input_ids``, ``attention_mask``, ``token_type_ids``)."""
        bert = self.program
        mask = batch["attention_mask"].bool()
        x = self.fast.encoder(bert.embed_input(batch["input_ids"], batch["token_type_ids"]),
                              mask)
        hidden = bert.layers[-1].x2.dequantize(x.view(*mask.shape, bert.spec.hidden)).float()
        return bert_ref.mean_pool(hidden, mask)

    def logits_of(self, batch):
        """The logits ``(B, labels)`` of a padded batch."""
        return self.pooled(batch) @ self.weight.t() + self.bias

    def logits(self, texts, *, batch_size=32):
        """The logits ``(len(texts), labels)`` of ``texts``, in length-sorted batches."""
        ids = self.program.token_ids(list(texts))
        order = sorted(range(len(ids)), key=lambda i: (len(ids[i]), i))
        out = torch.empty((len(ids), self.weight.shape[0]))
        with torch.no_grad():
            for lo in range(0, len(order), batch_size):
                rows = order[lo:lo + batch_size]
                out[rows] = self.logits_of(self.program.pad([ids[i] for i in rows]))
        return out

    def accuracy(self, texts, labels):
        """The fraction of ``texts`` whose arg-max logit is their label."""
        predicted = self.logits(texts).argmax(dim=1)
        return float((predicted == torch.as_tensor(labels)).double().mean())


def delta_file(folder, checkpoint, bert):
    """Where a task delta of ``checkpoint`` (a folder name) on ``bert`` is cached:
    ``<folder>/<checkpoint>-<config tag>-<base fingerprint[:16]>.npz``."""
    return pathlib.Path(folder) / f"{checkpoint}-{bert.cfg.tag}-{base_fingerprint(bert)[:16]}.npz"

