"""Where the host's time goes: PyTorch BERT under ``torch.profiler``, grouped into op classes.

::

    bertaccel profile --model minilm --seq 128 --batch 1 --mode both
    bertaccel profile --model bert-base --mode inference --json
    bertaccel profile --model minilm --png build/profile.png \\
        --accel-breakdown build/cycles_minilm.json

``bertaccel profile`` (:mod:`bertaccel.cli.profile`) runs :func:`profile`. The model runs
eagerly on this machine's CPU (eager attention, so softmax and the attention matmuls are separate
operators) for a few warm-up iterations, then for ``iterations`` profiled ones. Each profiled
iteration is one inference (``torch.inference_mode``) or one training step (forward with dropout
on, a sequence-classification loss, backward, an AdamW step). The self CPU time of every ATen
operator is put into one of :data:`OP_CLASSES`; the class times reported are medians over the
iterations, and the shares are those medians over their sum. See ``docs/profile.md``.

Classification (self time, so nothing is counted twice; :mod:`.profile_events`):

* forward: an operator inside ``aten::linear`` (``nn.Linear``: ``addmm``, ``mm``, ``t``, ``view``)
  is ``gemm``; otherwise the innermost enclosing operator that names a class decides
  (``aten::matmul``/``bmm``/``baddbmm``/``mm`` -> ``attn_matmul``, ``aten::softmax``/``_softmax``
  -> ``softmax``, ``aten::layer_norm``/``native_layer_norm`` -> ``layernorm``, ``aten::gelu`` ->
  ``gelu``, ``aten::dropout``/``native_dropout`` -> ``dropout``, so ``bernoulli_`` inside a dropout
  is dropout); anything else (embedding, residual adds, the attention scale and mask, copies,
  the loss) is ``other``.
* backward: the operators under an autograd node (``autograd::engine::evaluate_function:
  AddmmBackward0`` and its ``aten::mm``, ``aten::sum``, ...) take the class of the forward operator
  that made the node, found by the node's sequence number. ``AccumulateGrad`` is ``other``.
* the optimizer step (``Optimizer.step#AdamW.step``) is ``other``; its share is also reported on
  its own (``optimizer_ms``).

Time outside ATen operators (Python between ops, autograd-engine and profiler bookkeeping) is in
no class; it is reported as ``framework_ms``. The accelerator's cycle breakdown, when given
(:func:`load_accel_breakdown`), uses the same classes.
"""

import json
import os
import platform
import statistics
import textwrap
import time
from collections import defaultdict
from pathlib import Path

from ..sw.cycles import OP_CLASSES
from .profile_events import STEP_SCOPE, classify_events

__all__ = [
    "OP_CLASSES", "CLASS_LABELS", "MEMORY_INTENSIVE", "MODES", "SCHEMA", "ProfileError",
    "bert_base_config", "load_model", "classify_events", "profile_model", "profile",
    "other_runnable", "busy_warning", "threads_text", "accel_breakdown",
    "accelerator_side", "load_accel_breakdown", "format_table", "import_pyplot", "plot_shares",
    "report_bars", "accel_bar",
]

#: Human-readable names of :data:`OP_CLASSES`.
CLASS_LABELS = {
    "gemm": "GEMM/linear",
    "attn_matmul": "attention matmuls",
    "softmax": "softmax",
    "layernorm": "LayerNorm",
    "gelu": "GELU",
    "dropout": "dropout",
    "other": "elementwise/other",
}

#: The memory-intensive (non-matmul) classes: what the accelerator fuses into GEMM epilogues.
MEMORY_INTENSIVE = ("softmax", "layernorm", "gelu", "dropout", "other")

#: ``schema`` of the report :func:`profile` returns (and ``--json`` prints).
SCHEMA = "bertaccel-profile/1"

#: What :func:`profile_model` can run.
MODES = ("inference", "training")

_TOP_OPS = 5


class ProfileError(Exception):
    """Bad input to the profiler: an unknown model, a bad shape, a malformed breakdown file."""


# -- models ---------------------------------------------------------------------------------------

def bert_base_config():
    """The BERT-base shape: 12 layers, hidden 768, 12 heads, intermediate 3072, eager
    attention."""
    from .perf import bert_config
    return bert_config("bert-base", attn_implementation="eager")


def load_model(spec, *, seed=0):
    """Return ``(model, weights)`` for ``spec``: ``"minilm"`` (the real all-MiniLM-L6-v2
    weights), ``"bert-base"`` (random weights from ``torch.manual_seed(seed)``) or a folder that
    ``BertModel.from_pretrained`` loads offline. ``weights`` is ``"pretrained"`` or ``"random"``.

    Raises
    ------
    ProfileError
        ``spec`` is neither a known name nor a loadable folder.
    """
    import torch
    from transformers import BertModel

    from ..golden import bert_ref

    if spec == "bert-base":
        torch.manual_seed(seed)
        return BertModel(bert_base_config()), "random"
    try:
        _, model = bert_ref.load(spec)
    except bert_ref.ModelError as error:
        raise ProfileError(f"--model must be minilm, bert-base or a BERT model folder: "
                           f"{error}") from None
    return model, "pretrained"


def _model_info(model, name, weights):
    cfg = model.config
    return {
        "name": name, "weights": weights,
        "layers": cfg.num_hidden_layers, "hidden": cfg.hidden_size,
        "heads": cfg.num_attention_heads, "intermediate": cfg.intermediate_size,
        "vocab": cfg.vocab_size, "hidden_act": cfg.hidden_act,
        "attention": cfg._attn_implementation,
        "parameters": sum(p.numel() for p in model.parameters()),
    }


# -- running --------------------------------------------------------------------------------------

def _step_fn(model, mode, batch, seq, seed):
    import torch

    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=gen)
    mask = torch.ones_like(ids)
    if mode == "inference":
        model.eval()

        def step():
            with torch.inference_mode():
                model(input_ids=ids, attention_mask=mask)
        return step

    # One fine-tuning step of a sequence classifier (BertForSequenceClassification's head:
    # dropout and a linear layer on the pooled output), cross-entropy loss, AdamW.
    model.train()
    torch.manual_seed(seed)
    head = torch.nn.Sequential(torch.nn.Dropout(model.config.hidden_dropout_prob),
                               torch.nn.Linear(model.config.hidden_size, 2)).train()
    labels = torch.randint(0, 2, (batch,), generator=gen)
    optimizer = torch.optim.AdamW([*model.parameters(), *head.parameters()], lr=1e-5)

    def step():
        pooled = model(input_ids=ids, attention_mask=mask).pooler_output
        loss = torch.nn.functional.cross_entropy(head(pooled), labels)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def _median(values):
    return statistics.median(values) if values else 0.0


def profile_model(model, *, mode="inference", batch=1, seq=128, iterations=5, warmup=2, seed=0,
                  threads=2):
    """Profile ``iterations`` inferences or training steps of a ``transformers`` BertModel.

    Parameters
    ----------
    model : transformers.BertModel
        Eager attention for a meaningful split; training changes its weights.
    mode : {"inference", "training"}
    batch, seq : int
        Input shape (random token ids from ``seed``, no padding).
    iterations, warmup : int
        Profiled and unprofiled warm-up iterations. ``iterations`` more run unprofiled first to
        measure ``wall_ms``.
    threads : int
        ``torch.set_num_threads`` for the run (restored afterwards).

    Returns
    -------
    dict
        ``mode``, ``iterations``, ``warmup``, ``wall_ms`` (median unprofiled iteration),
        ``profiled_ms`` (median profiled iteration), ``op_ms`` (sum of ``class_ms``),
        ``framework_ms``, ``class_ms`` and ``shares`` (by :data:`OP_CLASSES`),
        ``memory_intensive_share``, ``optimizer_ms``, ``unlinked_backward_ms`` and ``top_ops``
        (class -> the few operators with most self time, ``{"op", "ms"}``, per iteration).

    Raises
    ------
    ProfileError
        A bad mode, shape or count.
    """
    import torch
    from torch.profiler import ProfilerActivity, record_function
    from torch.profiler import profile as torch_profile

    if mode not in MODES:
        raise ProfileError(f"mode must be one of {', '.join(MODES)}, not {mode!r}")
    max_seq = model.config.max_position_embeddings
    if not 1 <= seq <= max_seq:
        raise ProfileError(f"seq must be from 1 to {max_seq}, not {seq!r}")
    for name, value, low in (("batch", batch, 1), ("iterations", iterations, 1),
                             ("warmup", warmup, 0), ("threads", threads, 1)):
        if value < low:
            raise ProfileError(f"{name} must be at least {low}, not {value!r}")

    saved_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        step = _step_fn(model, mode, batch, seq, seed)
        for _ in range(warmup):
            step()
        wall = []
        for _ in range(iterations):
            begin = time.perf_counter()
            step()
            wall.append(time.perf_counter() - begin)
        with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(iterations):
                with record_function(STEP_SCOPE):
                    step()
        steps = classify_events(prof.events())
    finally:
        torch.set_num_threads(saved_threads)
    if len(steps) != iterations:
        raise RuntimeError(f"expected {iterations} profiled steps, found {len(steps)}")

    class_ms = {cls: _median([s["class_us"][cls] for s in steps]) / 1e3 for cls in OP_CLASSES}
    op_ms = sum(class_ms.values())
    profiled_ms = _median([s["step_us"] for s in steps]) / 1e3
    top_ops = {}
    for cls in OP_CLASSES:
        totals = defaultdict(float)
        for s in steps:
            for op, us in s["op_us"][cls].items():
                totals[op] += us / 1e3 / len(steps)
        ranked = sorted(totals.items(), key=lambda item: -item[1])[:_TOP_OPS]
        top_ops[cls] = [{"op": op, "ms": round(ms, 4)} for op, ms in ranked]
    shares = {cls: class_ms[cls] / op_ms if op_ms else 0.0 for cls in OP_CLASSES}
    return {
        "mode": mode, "iterations": iterations, "warmup": warmup,
        "wall_ms": _median(wall) * 1e3,
        "profiled_ms": profiled_ms,
        "op_ms": op_ms,
        "framework_ms": _median([s["step_us"] - sum(s["class_us"].values())
                                 for s in steps]) / 1e3,
        "class_ms": class_ms,
        "shares": shares,
        "memory_intensive_share": sum(shares[cls] for cls in MEMORY_INTENSIVE),
        "optimizer_ms": _median([s["optimizer_us"] for s in steps]) / 1e3,
        "unlinked_backward_ms": _median([s["unlinked_us"] for s in steps]) / 1e3,
        "top_ops": top_ops,
    }


def _environment(threads):
    import torch
    import transformers

    from ..golden.kernels import cpu_model

    cpu = cpu_model()
    return {
        "torch": torch.__version__, "transformers": transformers.__version__,
        "python": platform.python_version(), "cpu": cpu, "cores": os.cpu_count(),
        "threads": threads,
    }


def _loadavg():
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def other_runnable(samples=10, interval_s=0.05):
    """Mean number of runnable tasks other than this one (``/proc/loadavg``'s fourth field, less
    one), sampled ``samples`` times; ``None`` where there is no ``/proc/loadavg``.

    When this plus the torch threads exceeds the cores, a parallel operator waits at its barrier
    for a core held by another process, and short operators take milliseconds: the class shares
    then measure the scheduler, not the model.
    """
    counts = []
    for i in range(samples):
        try:
            with open("/proc/loadavg") as f:
                running = int(f.read().split()[3].split("/")[0])
        except (OSError, IndexError, ValueError):
            return None
        counts.append(max(running - 1, 0))
        if i + 1 < samples:
            time.sleep(interval_s)
    return sum(counts) / len(counts)


def threads_text(environment):
    """``"1 thread"`` or ``"N threads"`` for an ``environment`` of a report."""
    threads = environment["threads"]
    return f"{threads} thread{'' if threads == 1 else 's'}"



def busy_warning(environment):
    """A line saying the measurement shared its cores with other work, or ``None``."""
    others = environment.get("other_runnable")
    if others is None or others + environment["threads"] <= environment["cores"]:
        return None
    busy = (f"warning: the machine was busy ({others:.1f} other runnable tasks on "
            f"{environment['cores']} cores, torch on {threads_text(environment)})")
    if environment["threads"] == 1:
        return f"{busy}: times include preemption, which stretches all operators alike"
    return (f"{busy}: parallel operators waited at their barriers for a core, which stretches "
            f"short operators most; use a quiet machine or --threads 1")


def profile(model="minilm", *, modes=MODES, batch=1, seq=128, iterations=5, warmup=2, seed=0,
            threads=2, accel=None, log=None):
    """Profile one model in each of ``modes``; return the report (``schema`` :data:`SCHEMA`).

    ``model`` is a spec for :func:`load_model` or a ``(BertModel, name)`` pair. ``accel`` is a
    breakdown from :func:`load_accel_breakdown` (or ``None``), copied into the report. Each mode
    gets a freshly loaded model when ``model`` is a spec (training changes the weights).
    """
    import torch

    report = {"schema": SCHEMA, "classes": list(OP_CLASSES), "class_labels": dict(CLASS_LABELS),
              "memory_intensive": list(MEMORY_INTENSIVE), "batch": batch, "seq": seq,
              "seed": seed, "environment": _environment(threads), "runs": {},
              "accelerator": accel}
    report["environment"]["loadavg_begin"] = _loadavg()
    report["environment"]["other_runnable"] = other_runnable()
    for mode in modes:
        if isinstance(model, str):
            module, weights = load_model(model, seed=seed)
            name = model if model in ("minilm", "bert-base") else Path(model).name
        else:
            (module, name), weights = model, "given"
        report["model"] = _model_info(module, name, weights)
        if log:
            log(f"{name}: {mode}, batch {batch}, seq {seq}, {iterations} iterations")
        torch.manual_seed(seed)
        report["runs"][mode] = profile_model(module, mode=mode, batch=batch, seq=seq,
                                             iterations=iterations, warmup=warmup, seed=seed,
                                             threads=threads)
    report["environment"]["loadavg_end"] = _loadavg()
    return report


# -- the accelerator's side -----------------------------------------------------------------------

def accel_breakdown(cycles, *, label="accelerator", **extra):
    """Check a cycle breakdown by :data:`OP_CLASSES` and add its shares.

    Parameters
    ----------
    cycles : dict of str to number
        Cycles by class; a class left out counts 0 (the accelerator fuses it away).
    label : str
        What the plot and table call it.
    extra
        Copied into the result (``model``, ``config``, ...).

    Raises
    ------
    ProfileError
        An unknown class, a negative or non-numeric count, or no cycles at all.
    """
    if not isinstance(cycles, dict):
        raise ProfileError(f"cycles must be an object of class -> cycles, not {cycles!r}")
    unknown = sorted(set(cycles) - set(OP_CLASSES))
    if unknown:
        raise ProfileError(f"unknown op classes {', '.join(map(repr, unknown))}; "
                           f"the classes are {', '.join(OP_CLASSES)}")
    full = {}
    for cls in OP_CLASSES:
        value = cycles.get(cls, 0)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ProfileError(f"cycles of {cls!r} must be a number of at least 0, not {value!r}")
        full[cls] = value
    total = sum(full.values())
    if total <= 0:
        raise ProfileError("the accelerator breakdown has no cycles")
    return dict(extra, label=str(label), cycles=full, total_cycles=total,
                shares={cls: full[cls] / total for cls in OP_CLASSES},
                memory_intensive_share=sum(full[cls] for cls in MEMORY_INTENSIVE) / total)


def accelerator_side(model="minilm", *, config="8x8", seq=128, batch=1, seed=0):
    """The accelerator's cycles for ``model`` on ``batch`` x ``seq`` tokens, by
    :data:`OP_CLASSES`, from the cycle model (:func:`bertaccel.analysis.perf.bench_bert`): inference,
    every layer, the same shape the host runs.

    ``model`` is ``"minilm"`` (the real weights, calibrated on its sample text), ``"bert-base"``
    (random weights from ``seed``) or a model folder (both calibrated on random token ids:
    cycles do not depend on the scales); ``config`` a preset or a config JSON. The matmul classes hold
    the GEMMs' streamed rows and their stalls; softmax, LayerNorm and GELU hold only the cycles
    their fused epilogues expose; dropout is an inference no-op and the rest (embeddings,
    residual adds, scales, biases) run on the host or inside the fused epilogues.

    Raises
    ------
    ProfileError
        A bad config, or a model or sequence the config cannot run.
    """
    from ..hw.config import ConfigError, load_config
    from ..sw.bert import BertError, compile_bert
    from .perf import bench_bert, compile_model

    try:
        cfg = load_config(config)
        if model == "minilm":
            bert = compile_bert(model, cfg)
        else:
            bert = compile_model(load_model(model, seed=seed)[0], cfg, seed=seed,
                                 name=Path(model).name if model != "bert-base" else model)
        report = bench_bert(bert, seq=seq, batch=batch)
    except (ConfigError, BertError) as error:
        raise ProfileError(f"the accelerator side ({model} on {config}): {error}") from None
    name = _DISPLAY_NAMES.get(model, Path(str(model)).name)
    return accel_breakdown(report["by_op_class"], label=f"{name}\naccelerator {cfg.label}",
                           model=model, config=cfg.label, tag=cfg.tag, seq=seq, batch=batch,
                           mode="inference", source="cycle model (bertaccel bench bert)",
                           utilization=report["utilization"], latency_us=report["latency_us"],
                           breakdown=report["breakdown"])


def load_accel_breakdown(path):
    """Read an accelerator breakdown: a JSON object ``{"label": ..., "cycles": {class: n}}``
    (other keys, such as ``model`` or ``config``, are kept). See :func:`accel_breakdown`."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as error:
        raise ProfileError(f"cannot read the accelerator breakdown {str(path)!r}: "
                           f"{error.strerror}") from None
    except json.JSONDecodeError as error:
        raise ProfileError(f"{str(path)!r} is not JSON: {error}") from None
    if not isinstance(data, dict) or "cycles" not in data:
        raise ProfileError(f"{str(path)!r} must hold an object with a \"cycles\" member "
                           f"(class -> cycles)")
    extra = {k: v for k, v in data.items() if k not in ("cycles", "label", "total_cycles",
                                                         "shares", "memory_intensive_share")}
    return accel_breakdown(data["cycles"], label=data.get("label", "accelerator"), **extra)


# -- output ---------------------------------------------------------------------------------------

def _describe(model):
    return (f"{model['name']} ({model['layers']} layers, hidden {model['hidden']}, "
            f"{model['heads']} heads, intermediate {model['intermediate']}, "
            f"{model['weights']} weights)")


def format_table(report):
    """The class table of one report as text: share and median ms per mode, accelerator share and
    cycles when the report has a breakdown."""
    runs = report["runs"]
    accel = report.get("accelerator")
    env = report["environment"]
    lines = [f"model        {_describe(report['model'])}",
             f"input        batch {report['batch']}, seq {report['seq']}",
             f"host         {env['cpu']}, {threads_text(env)}, torch {env['torch']}"
             + (f", load average {env['loadavg_begin'][0]}" if env.get("loadavg_begin") else ""),
             ""]
    head = f"{'class':<20}" + "".join(f"{mode:>20}" for mode in runs)
    if accel:
        head += f"{accel['label'].replace(chr(10), ' ')[:30]:>32}"
    lines.append(head)
    for cls in OP_CLASSES:
        row = f"{CLASS_LABELS[cls]:<20}"
        for run in runs.values():
            row += f"{100 * run['shares'][cls]:>9.1f} %{run['class_ms'][cls]:>8.2f} ms"
        if accel:
            row += f"{100 * accel['shares'][cls]:>11.1f} %{accel['cycles'][cls]:>14,.0f} cyc"
        lines.append(row)
    row = f"{'non-matmul':<20}"
    for run in runs.values():
        row += f"{100 * run['memory_intensive_share']:>9.1f} %{'':>11}"
    if accel:
        row += f"{100 * accel['memory_intensive_share']:>11.1f} %"
    lines.append(row)
    row = f"{'ATen op time':<20}"
    for run in runs.values():
        row += f"{run['op_ms']:>17.2f} ms"
    if accel:
        row += f"{accel['total_cycles']:>26,.0f} cyc"
    lines.append(row)
    for key, name in (("framework_ms", "framework"), ("wall_ms", "wall (unprofiled)")):
        lines.append(f"{name:<20}" + "".join(f"{run[key]:>17.2f} ms" for run in runs.values()))
    if "training" in runs:
        t = runs["training"]
        lines.append("")
        lines.append(f"training: the AdamW step is {t['optimizer_ms']:.2f} ms of "
                     f"elementwise/other ({100 * t['optimizer_ms'] / t['op_ms']:.1f} % of op "
                     f"time)")
    if not accel:
        lines.append("accelerator: none (--config none); host only")
    warning = busy_warning(env)
    if warning:
        lines.append(warning)
    if runs:
        lines.append(f"shares: median self CPU time of ATen operators per class over "
                     f"{next(iter(runs.values()))['iterations']} iterations")
    return "\n".join(lines)


def import_pyplot():
    """matplotlib's pyplot on the Agg back end (a :class:`ProfileError` without matplotlib)."""
    try:
        import matplotlib
    except ImportError:
        raise ProfileError("--png needs matplotlib (pip install matplotlib)") from None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


#: Plot colours: matmul classes in blues, memory-intensive classes in warm colours, other grey.
_COLOURS = {"gemm": "#1f4e9c", "attn_matmul": "#6b9bd8", "softmax": "#e8a33d",
            "layernorm": "#d9622b", "gelu": "#b8342f", "dropout": "#8c4f9f", "other": "#9a9a9a"}


def plot_shares(bars, path, *, title="Where the time goes, by op class", subtitle=None):
    """Draw 100 % stacked bars of class shares and write them to ``path`` (PNG).

    Parameters
    ----------
    bars : list of dict or None
        One per bar: ``label``, ``shares`` (by class), optional ``note`` (under the label) and
        ``optimizer_share`` (the part of ``other`` that is the optimizer step, drawn lighter).
        ``None`` leaves a gap.
    path : str or Path
    title, subtitle : str

    Raises
    ------
    ProfileError
        matplotlib is not installed.
    """
    plt = import_pyplot()
    xs, shown, x = [], [], 0.0
    for bar in bars:
        if bar is None:
            x += 0.6
            continue
        xs.append(x)
        shown.append(bar)
        x += 1.0

    def hatch(cls):
        return "//" if cls in MEMORY_INTENSIVE and cls != "other" else None

    fig, ax = plt.subplots(figsize=(max(6.0, 1.3 * len(xs) + 3.2), 5.4), dpi=120)
    optimizer_drawn = False
    for xi, bar in zip(xs, shown):
        shares, bottom = bar["shares"], 0.0
        optimizer = 100 * (bar.get("optimizer_share") or 0.0)
        for cls in OP_CLASSES:
            share = 100 * shares[cls]
            ax.bar(xi, share, bottom=bottom, width=0.7, color=_COLOURS[cls], edgecolor="white",
                   linewidth=0.5, hatch=hatch(cls))
            shown_share = share - optimizer if cls == "other" else share
            if shown_share >= 4:
                ax.text(xi, bottom + shown_share / 2, f"{shown_share:.0f}%", ha="center",
                        va="center", fontsize=8, color="black" if cls == "other" else "white")
            bottom += share
        if optimizer > 0:
            # The optimizer is the top of "other": a lighter band with its own label.
            ax.bar(xi, optimizer, bottom=100 - optimizer, width=0.7, color=_OPTIMIZER_COLOUR,
                   edgecolor="white", linewidth=0.5)
            if optimizer >= 4:
                ax.text(xi, 100 - optimizer / 2, f"AdamW\n{optimizer:.0f}%", ha="center",
                        va="center", fontsize=7)
            optimizer_drawn = True
        memory = 100 * sum(shares[cls] for cls in MEMORY_INTENSIVE)
        ax.text(xi, 101.5, f"{memory:.0f}% non-matmul", ha="center", va="bottom", fontsize=7,
                fontweight="bold")
    ax.set_xticks(xs, [f"{bar['label']}\n{bar['note']}" if bar.get("note") else bar["label"]
                       for bar in shown], fontsize=8)
    ax.set_xlim(xs[0] - 0.6, xs[-1] + 0.6)
    ax.set_ylim(0, 108)
    ax.set_yticks(range(0, 101, 20))
    ax.set_ylabel("share of time (%)")
    fig.suptitle(title, fontsize=10)
    if subtitle:
        subtitle = "\n".join(textwrap.fill(line, 100) for line in subtitle.splitlines())
        ax.set_title(subtitle, fontsize=8, color="#555555", pad=14)
    handles = [plt.Rectangle((0, 0), 1, 1, facecolor=_COLOURS[cls], hatch=hatch(cls),
                             edgecolor="white") for cls in reversed(OP_CLASSES)]
    names = [CLASS_LABELS[cls] for cls in reversed(OP_CLASSES)]
    if optimizer_drawn:
        handles.insert(1, plt.Rectangle((0, 0), 1, 1, facecolor=_OPTIMIZER_COLOUR))
        names.insert(1, "  of which optimizer step")
    ax.legend(handles, names, fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0),
              frameon=False)
    ax.spines[["top", "right"]].set_visible(False)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return Path(path)


_OPTIMIZER_COLOUR = "#cfcfcf"
_DISPLAY_NAMES = {"minilm": "MiniLM", "bert-base": "BERT-base"}


def accel_bar(accel):
    """The bar of an accelerator breakdown for :func:`plot_shares`."""
    return {"label": accel["label"], "shares": accel["shares"],
            "note": f"{accel['total_cycles']:,.0f} cycles"}


def report_bars(report, *, with_accel=True):
    """The bars of one report for :func:`plot_shares`: its runs, then its accelerator."""
    name = _DISPLAY_NAMES.get(report["model"]["name"], report["model"]["name"])
    bars = [{"label": f"{name}\nhost {mode}", "shares": run["shares"],
             "note": f"{run['op_ms']:,.0f} ms",
             "optimizer_share": run["optimizer_ms"] / run["op_ms"] if run["op_ms"] else 0.0}
            for mode, run in report["runs"].items()]
    accel = report.get("accelerator")
    if with_accel and accel:
        bars.append(accel_bar(accel))
    return bars
