"""BERT on the accelerator in seconds: cycles, utilization and where they go, from the cycle model.

::

    bert = compile_shape("bert-base", preset("16x16"))      # random weights, calibrated
    report = bench_bert(bert, seq=128, batch=1)
    report["cycles"], report["utilization"], report["breakdown"]

A BERT-base run at seq 128 is ~11 G MACs: tens of millions of cycles, hours under Verilator. The
cycle model (:mod:`bertaccel.sw.cycles`, exact against the RTL on every program of the test
suite) times the same programs that :func:`bertaccel.sw.bert.run_bert` runs, stage by stage,
without running any data: the programs of a model depend on its shape, the token count and (a
few split rows) on its weights, never on the input.

What is timed is what the device runs: the six stage programs of every encoder layer (see
:mod:`bertaccel.sw.bert`), each started on an idle accelerator (so each pays its pipeline fill
and drain), run as one program each (as through the AXI shell and the simulation harness).
The host's work between stages (slicing heads, the embeddings) is not counted.

Figures (:func:`bench_bert`):

``ideal_cycles``
    the model's MACs (``B L layers (4 H^2 + 2 H I + 2 L H)``) over ``rows * cols``: the cycles
    of a machine that does nothing but useful MACs;
``utilization``
    ``ideal_cycles / cycles``: end to end, with the nonlinear ops, data movement and the extra
    rows that channel splitting adds;
``breakdown``
    every cycle in exactly one of :data:`CLASSES`: the operand rows each GEMM streams (by
    stage: Q/K/V, attention, output projection, FFN), the cycles that the SOFTMAX, LAYERNORM and
    GELU drains expose, loads and stores that compute does not hide, and stalls of the execute
    unit (weight-preload bubbles, dispatch, program fill and drain). They sum to ``cycles``.
    The streamed rows include tile padding and split rows, so the GEMM classes together exceed
    ``ideal_cycles`` by those.
"""

import dataclasses
import math
import time

import numpy as np

from ..hw import isa
from ..hw.config import AccelConfig
from ..sw.bert import (
    STAGES,
    BertError,
    BertProgram,
    compile_bert,
    layer_programs,
    model_macs,
)
from ..sw.cycles import EPILOGUE_CLASS, OP_CLASSES, STAGE_CLASSES, CycleModel

__all__ = ["SHAPES", "CLASSES", "CLASS_LABELS", "GEMM_CLASS", "STALL_CLASSES", "BertShape",
           "bert_config", "random_model", "compile_shape", "compile_model", "retarget",
           "model_macs", "time_layer", "bench_bert", "format_report"]


@dataclasses.dataclass(frozen=True)
class BertShape:
    """The shape of a BERT encoder (what timing depends on)."""

    layers: int
    hidden: int
    heads: int
    intermediate: int


#: Named shapes. ``minilm`` is the shape of all-MiniLM-L6-v2 (its real weights are in
#: :data:`bertaccel.sw.bert.MINILM`).
SHAPES = {
    "bert-base": BertShape(layers=12, hidden=768, heads=12, intermediate=3072),
    "bert-large": BertShape(layers=24, hidden=1024, heads=16, intermediate=4096),
    "minilm": BertShape(layers=6, hidden=384, heads=12, intermediate=1536),
}

#: The classes of :func:`bench_bert`'s ``breakdown``, in report order.
CLASSES = ("qkv_gemm", "attention_gemm", "output_gemm", "ffn_gemm", "softmax", "layernorm",
           "gelu", "loads_stores", "stalls")

#: Human-readable names of :data:`CLASSES`.
CLASS_LABELS = {
    "qkv_gemm": "Q/K/V GEMMs", "attention_gemm": "attention GEMMs (QK^T, PV)",
    "output_gemm": "output-projection GEMM", "ffn_gemm": "FFN GEMMs",
    "softmax": "softmax (exposed)", "layernorm": "LayerNorm (exposed)", "gelu": "GELU (exposed)",
    "loads_stores": "loads/stores (exposed)", "stalls": "stalls",
}

#: The GEMM class of each stage's streamed operand rows.
GEMM_CLASS = {"qkv": "qkv_gemm", "qk": "attention_gemm", "pv": "attention_gemm",
              "wo": "output_gemm", "w1": "ffn_gemm", "w2": "ffn_gemm"}

#: The parts of ``stalls`` (classes of :attr:`bertaccel.sw.cycles.CycleReport.breakdown`).
STALL_CLASSES = ("preload", "dispatch", "zero_slots", "acc_hazard", "mesh_drain")

# -- models -------------------------------------------------------------------------------------

def _shape(shape):
    if isinstance(shape, BertShape):
        return shape
    try:
        return SHAPES[shape]
    except (KeyError, TypeError):
        raise BertError(f"unknown shape {shape!r}; the shapes are "
                        f"{', '.join(SHAPES)}") from None


def bert_config(shape, **options):
    """A ``transformers.BertConfig`` of ``shape`` (a :data:`SHAPES` key or a
    :class:`BertShape`), BERT's defaults otherwise (512 positions, its vocabulary); ``options``
    are passed on (``attn_implementation="eager"``, ...)."""
    from transformers import BertConfig

    s = _shape(shape)
    return BertConfig(hidden_size=s.hidden, num_hidden_layers=s.layers,
                      num_attention_heads=s.heads, intermediate_size=s.intermediate, **options)


def random_model(shape, *, seed=0):
    """A ``transformers.BertModel`` of ``shape`` (see :func:`bert_config`) with random weights
    from ``torch.manual_seed(seed)``."""
    import torch
    from transformers import BertModel

    torch.manual_seed(seed)
    return BertModel(bert_config(shape)).eval()


def compile_shape(shape, cfg, *, seed=0, calibration_seq=128, calibration_batch=8):
    """Compile a random-weight model of ``shape`` (from :func:`random_model`) for ``cfg``; see
    :func:`compile_model`.

    Returns
    -------
    BertProgram
    """
    return compile_model(random_model(shape, seed=seed), cfg, seed=seed,
                         calibration_seq=calibration_seq, calibration_batch=calibration_batch,
                         name=shape if isinstance(shape, str) else "bert")


def compile_model(model, cfg, *, seed=0, calibration_seq=128, calibration_batch=8, name=None):
    """Compile the float BERT ``model`` for ``cfg``, calibrated on one batch of random token
    ids (``calibration_batch`` x ``calibration_seq``, from ``seed``): timing does not depend on
    the scales, only on the shape and on the few rows that channel splitting adds.

    Returns
    -------
    BertProgram
    """
    import torch

    config = getattr(model, "config", None)
    vocab = getattr(config, "vocab_size", 0)
    seq = min(calibration_seq, getattr(config, "max_position_embeddings", calibration_seq))
    generator = torch.Generator().manual_seed(seed)
    calibration = [{
        "input_ids": torch.randint(min(1000, vocab // 2), vocab, (calibration_batch, seq),
                                   generator=generator),
        "attention_mask": torch.ones(calibration_batch, seq, dtype=torch.long),
    }]
    return compile_bert(model, cfg, calibration=calibration, name=name)


def retarget(bert, cfg):
    """The compiled model ``bert`` for another config: the same quantised layers (their split
    rows packed, and W1's scale fitted, for ``bert``'s K tiles: exact on any config, and on
    ``cfg`` a few K tiles from what compiling for it gives), programs tiled for ``cfg``."""
    if not isinstance(cfg, AccelConfig):
        raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
    program = BertProgram(cfg, bert.spec, bert.layers, x_embed=bert.x_embed,
                          calibration=bert.calibration, embeddings=bert.embeddings,
                          tokenizer=bert.tokenizer, name=bert.name)
    program.check_fit()
    return program


# -- timing ---------------------------------------------------------------------------------------

def _kinds(program):
    """Per instruction: ``(kind, m_len, class)`` arrays. kind 0 LOAD, 1 MATMUL, 2 STORE
    (class: the index of its epilogue's class in :data:`CLASSES`, else loads_stores), 3 SET."""
    n = len(program.instrs)
    kind = np.zeros(n, dtype=np.int64)
    rows = np.zeros(n, dtype=np.int64)
    cls = np.full(n, CLASSES.index("loads_stores"), dtype=np.int64)
    for i, ins in enumerate(program.instrs):
        t = type(ins)
        if t is isa.Matmul:
            kind[i], rows[i] = 1, ins.m_len
        elif t is isa.Store:
            kind[i] = 2
            if ins.op in EPILOGUE_CLASS:
                cls[i] = CLASSES.index(EPILOGUE_CLASS[ins.op])
        elif t is not isa.Load:
            kind[i] = 3
    return kind, rows, cls


def _time_stage(model, program, stage):
    """Time one stage program: ``(report, classes)``, ``classes`` by :data:`CLASSES`."""
    report = model.run(program, default_class=STAGE_CLASSES[stage])
    kind, rows, cls = _kinds(program)
    charged = report.charged
    out = dict.fromkeys(CLASSES, 0)
    matmul = kind == 1
    compute = int(rows[matmul].sum())
    out[GEMM_CLASS[stage]] = compute
    out["stalls"] = int(charged[matmul].sum()) - compute + int(charged[kind == 3].sum())
    out["loads_stores"] = int(charged[kind == 0].sum())
    stores = kind == 2
    for index, total in zip(*_class_sums(cls[stores], charged[stores])):
        out[CLASSES[index]] += total
    assert sum(out.values()) == report.cycles, (out, report.cycles)
    return report, out


def _class_sums(labels, values):
    sums = np.bincount(labels, weights=values, minlength=len(CLASSES))
    nonzero = np.flatnonzero(sums)
    return nonzero, [int(round(sums[i])) for i in nonzero]


def _stage_macs(spec, stage, seq, batch):
    """The model's MACs of one stage of one layer."""
    h, i, tokens = spec.hidden, spec.intermediate, batch * seq
    return {"qkv": tokens * h * 3 * h, "qk": tokens * seq * h, "pv": tokens * seq * h,
            "wo": tokens * h * h, "w1": tokens * h * i, "w2": tokens * i * h}[stage]


def time_layer(bert, layer, mask, model=None):
    """Time the six stage programs of encoder ``layer`` for a batch with the valid-token ``mask``
    (``(B, L)`` bool).

    Returns
    -------
    dict
        ``{stage: {"cycles", "classes", "breakdown", "by_op_class", "overlap", "instructions"}}``
        in :data:`bertaccel.sw.bert.STAGES` order; ``classes`` by :data:`CLASSES`,
        ``breakdown`` by the cycle model's classes, ``by_op_class`` by
        :data:`bertaccel.sw.cycles.OP_CLASSES`.
    """
    model = model or CycleModel(bert.cfg)
    out = {}
    for stage, program in layer_programs(bert, layer, mask).items():
        report, classes = _time_stage(model, program, stage)
        out[stage] = {"cycles": report.cycles, "classes": classes,
                      "breakdown": dict(report.breakdown), "by_op_class": dict(report.by_class),
                      "overlap": dict(report.overlap), "instructions": len(program.instrs)}
    return out


def _add(total, part, times=1):
    for key, value in part.items():
        total[key] = total.get(key, 0) + times * value


def bench_bert(bert, *, seq, batch=1, every_layer=True, log=None):
    """Time ``bert`` on ``batch`` sequences of ``seq`` tokens (no padding) with the cycle model.

    Parameters
    ----------
    bert : BertProgram
    seq, batch : int
    every_layer : bool
        Time every layer (default), or time layer 0 and count it ``layers`` times: the same
        cycles when every layer's programs have the same shape (they do for the random models
        of :func:`compile_shape`, whose layers pad to the same depths).
    log : callable, optional
        ``log(text)`` after each layer.

    Returns
    -------
    dict
        See the module docstring; ``stages`` has each stage's cycles, classes and utilization
        summed over the layers.

    Raises
    ------
    BertError
        ``seq`` or ``batch`` below 1, or ``seq`` longer than the model or the config takes.
    """
    spec, cfg = bert.spec, bert.cfg
    for name, value in (("seq", seq), ("batch", batch)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise BertError(f"{name} must be an int of at least 1, not {value!r}")
    if seq > min(spec.max_positions, bert.max_seq):
        raise BertError(f"seq {seq} is longer than {bert.name} on {cfg.name} takes "
                        f"({min(spec.max_positions, bert.max_seq)} tokens: the model's positions "
                        f"and whole softmax rows in the accumulator)")
    import torch

    begin = time.perf_counter()
    model = CycleModel(cfg)
    mask = torch.ones(batch, seq, dtype=torch.bool)
    timed = range(spec.layers) if every_layer else range(1)
    times = 1 if every_layer else spec.layers
    stages = {stage: {"cycles": 0, "classes": {}, "breakdown": {}, "by_op_class": {},
                      "instructions": 0} for stage in STAGES}
    hidden = {"load_busy": 0, "load_hidden": 0, "store_busy": 0, "store_hidden": 0}
    for layer in timed:
        for stage, part in time_layer(bert, layer, mask, model).items():
            into = stages[stage]
            into["cycles"] += times * part["cycles"]
            into["instructions"] += times * part["instructions"]
            for key in ("classes", "breakdown", "by_op_class"):
                _add(into[key], part[key], times)
            _add(hidden, {key: part["overlap"][key] for key in hidden}, times)
        if log:
            log(f"{bert.name} seq {seq} on {cfg.name}: layer {layer + 1}/{len(timed)} timed")

    cycles = sum(part["cycles"] for part in stages.values())
    macs = model_macs(spec, seq, batch)
    ideal = math.ceil(macs / cfg.macs_per_cycle)
    breakdown, model_breakdown, by_op_class = {}, {}, {}
    for part in stages.values():
        _add(breakdown, part["classes"])
        _add(model_breakdown, part["breakdown"])
        _add(by_op_class, part["by_op_class"])
    breakdown = {cls: breakdown.get(cls, 0) for cls in CLASSES}
    by_op_class = {cls: by_op_class.get(cls, 0) for cls in OP_CLASSES}
    for stage, part in stages.items():
        part["ideal_cycles"] = _stage_macs(spec, stage, seq, batch) * spec.layers \
            / cfg.macs_per_cycle
        part["utilization"] = part["ideal_cycles"] / part["cycles"]
        part["classes"] = {cls: part["classes"].get(cls, 0) for cls in CLASSES}
    latency = cycles / (cfg.clock_mhz * 1e6)
    return {
        "schema": "bertaccel-bench-bert/1",
        "model": bert.name,
        "shape": {"layers": spec.layers, "hidden": spec.hidden, "heads": spec.heads,
                  "intermediate": spec.intermediate},
        "config": cfg.label, "tag": cfg.tag, "rows": cfg.rows, "cols": cfg.cols,
        "clock_mhz": cfg.clock_mhz, "seq": seq, "batch": batch,
        "cycles": cycles, "ideal_cycles": ideal, "utilization": ideal / cycles,
        "latency_s": latency, "latency_us": latency * 1e6, "macs": macs,
        "breakdown": breakdown,
        "shares": {cls: value / cycles for cls, value in breakdown.items()},
        "stalls": {cls: model_breakdown.get(cls, 0) for cls in STALL_CLASSES},
        "model_breakdown": model_breakdown,
        "by_op_class": by_op_class,
        "stages": stages,
        "hidden": {"loads": hidden["load_hidden"] / hidden["load_busy"]
                   if hidden["load_busy"] else 1.0,
                   "stores": hidden["store_hidden"] / hidden["store_busy"]
                   if hidden["store_busy"] else 1.0},
        "device_calls": len(STAGES) * spec.layers,
        "instructions": sum(part["instructions"] for part in stages.values()),
        "timed_layers": len(timed),
        "wall_s": time.perf_counter() - begin,
    }


def format_report(report):
    """``bertaccel bench bert``'s text output."""
    r = report
    s = r["shape"]
    lines = [
        f"model        {r['model']} ({s['layers']} layers, hidden {s['hidden']}, {s['heads']} "
        f"heads, intermediate {s['intermediate']})",
        f"config       {r['config']} ({r['tag']}), {r['clock_mhz']:g} MHz",
        f"input        batch {r['batch']} x seq {r['seq']}",
        f"cycles       {r['cycles']:,}",
        f"ideal        {r['ideal_cycles']:,} ({r['macs']:,} MACs / {r['rows'] * r['cols']})",
        f"utilization  {r['utilization']:.1%}",
        f"latency      {r['latency_us']:,.1f} us",
        "",
        f"{'where the cycles go':<34}{'cycles':>14}{'share':>8}",
    ]
    for cls in CLASSES:
        lines.append(f"  {CLASS_LABELS[cls]:<32}{r['breakdown'][cls]:>14,}"
                     f"{r['shares'][cls]:>8.1%}")
    stalls = ", ".join(f"{name} {value:,}" for name, value in r["stalls"].items() if value)
    lines += [f"  (stalls: {stalls or 'none'})", "",
              f"{'stage':<8}{'cycles':>14}{'utilization':>13}"]
    for stage, part in r["stages"].items():
        lines.append(f"  {stage:<6}{part['cycles']:>14,}{part['utilization']:>13.1%}")
    return "\n".join(lines)
