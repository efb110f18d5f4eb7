"""A ``torch.profiler`` run's events, split into steps and summed by op class.

:func:`classify_events` is the classification that :mod:`bertaccel.analysis.profile` describes
(self time, so nothing is counted twice): forward operators by the operator that encloses them,
backward ones by the forward operator that made their autograd node, the optimizer step as
``other``.
"""

from collections import defaultdict

from ..sw.cycles import OP_CLASSES

__all__ = ["STEP_SCOPE", "classify_events"]

#: The ``record_function`` scope that wraps each profiled iteration.
STEP_SCOPE = "bertaccel::step"

#: Operators that name a class when no ``aten::linear`` encloses them (innermost wins).
_CLASS_OF_OP = {
    "aten::matmul": "attn_matmul", "aten::bmm": "attn_matmul", "aten::baddbmm": "attn_matmul",
    "aten::mm": "attn_matmul", "aten::addmm": "attn_matmul", "aten::addbmm": "attn_matmul",
    "aten::softmax": "softmax", "aten::_softmax": "softmax", "aten::_safe_softmax": "softmax",
    "aten::_softmax_backward_data": "softmax",
    "aten::layer_norm": "layernorm", "aten::native_layer_norm": "layernorm",
    "aten::native_layer_norm_backward": "layernorm",
    "aten::gelu": "gelu", "aten::gelu_backward": "gelu",
    "aten::dropout": "dropout", "aten::native_dropout": "dropout",
    "aten::native_dropout_backward": "dropout", "aten::feature_dropout": "dropout",
}
_LINEAR = "aten::linear"
_NODE_PREFIX = "autograd::engine::evaluate_function: "
_OPTIMIZER_PREFIX = "Optimizer.step#"
#: Fallback for a backward node whose forward operator was not profiled.
_CLASS_OF_NODE = {
    "AddmmBackward0": "gemm", "LinearBackward0": "gemm", "BmmBackward0": "attn_matmul",
    "SoftmaxBackward0": "softmax", "NativeLayerNormBackward0": "layernorm",
    "GeluBackward0": "gelu", "NativeDropoutBackward0": "dropout",
}


def _chain(event):
    """``event`` and its ancestors, innermost first."""
    while event is not None:
        yield event
        event = event.cpu_parent


def _forward_class(chain):
    if any(e.name == _LINEAR for e in chain):
        return "gemm"
    for e in chain:
        cls = _CLASS_OF_OP.get(e.name)
        if cls is not None:
            return cls
    return "other"


def classify_events(events):
    """Split profiler events into steps and sum ATen self time by class.

    Parameters
    ----------
    events : list of torch.autograd.profiler_util.FunctionEvent
        ``prof.events()`` of a run whose iterations were each wrapped in
        ``record_function("bertaccel::step")``.

    Returns
    -------
    list of dict
        One per step, in order: ``class_us`` (class -> self microseconds), ``op_us`` (class ->
        {operator name -> self microseconds}), ``step_us`` (duration of the step scope),
        ``optimizer_us`` and ``unlinked_us`` (backward time whose forward operator was not
        found and was classified by node name instead).
    """
    events = sorted((e for e in events if not e.is_async), key=lambda e: e.time_range.start)
    chains = {id(e): list(_chain(e)) for e in events}

    # Sequence number -> class of the forward operator that made that autograd node. The creator
    # is the last forward operator to start with that number: the counter moves on as soon as
    # it has made its node, and an enclosing composite operator (aten::linear) starts earlier.
    forward = {}
    for e in events:
        chain = chains[id(e)]
        if e.sequence_nr >= 0 and not any(a.name.startswith(_NODE_PREFIX) for a in chain):
            forward[(e.thread, e.sequence_nr)] = _forward_class(chain)

    steps = {}
    for e in events:
        chain = chains[id(e)]
        root = chain[-1]
        if root.name != STEP_SCOPE:
            continue
        step = steps.get(id(root))
        if step is None:
            step = steps[id(root)] = {
                "start": root.time_range.start, "step_us": root.time_range.elapsed_us(),
                "class_us": dict.fromkeys(OP_CLASSES, 0.0),
                "op_us": {cls: defaultdict(float) for cls in OP_CLASSES},
                "optimizer_us": 0.0, "unlinked_us": 0.0,
            }
        if not e.name.startswith("aten::"):
            continue                    # scopes, autograd nodes, Python: framework time
        self_us = e.self_cpu_time_total
        node = next((a for a in chain if a.name.startswith(_NODE_PREFIX)), None)
        if any(a.name.startswith(_OPTIMIZER_PREFIX) for a in chain):
            cls = "other"
            step["optimizer_us"] += self_us
        elif node is None:
            cls = _forward_class(chain)
        else:
            cls = forward.get((node.fwd_thread, node.sequence_nr))
            if cls is None:
                name = node.name[len(_NODE_PREFIX):]
                cls = _CLASS_OF_NODE.get(name, "other")
                if node.sequence_nr >= 0:
                    step["unlinked_us"] += self_us
        step["class_us"][cls] += self_us
        step["op_us"][cls][e.name] += self_us
    return [dict(s, op_us={c: dict(o) for c, o in s["op_us"].items()})
            for s in sorted(steps.values(), key=lambda s: s["start"])]
