"""Running a compiled BERT model on a device, stage program by stage program."""

import dataclasses
import math
import time

import torch

from ...golden.intops import prob_digits
from .compile import STAGES, model_macs
from .load import BertError

__all__ = ["BertResult", "Runner", "layer_programs", "run_layer", "run_bert", "embed_texts"]


@dataclasses.dataclass
class BertResult:
    """What :func:`run_bert` returns.

    Members
    -------
    last_hidden_state : torch.Tensor
        ``(batch, seq, hidden)`` float32: the last layer's int8 output, dequantised.
    embedding : torch.Tensor
        ``(batch, hidden)`` float32: its attention-masked mean over the sequence.
    hidden_int8 : torch.Tensor
        ``(batch, seq, hidden)`` int8: the last layer's output as the accelerator made it.
    stats : dict
        ``cycles`` (the sum over the device calls: the RTL's count, or the software device's
        cycle model; ``None`` when the device counts none), ``est_cycles`` (the tiler's
        estimate), ``macs``, ``ideal_cycles``
        (``macs / (rows * cols)``), ``utilization`` (``ideal_cycles / cycles``),
        ``latency_s`` (cycles at ``cfg.clock_mhz``; from ``est_cycles`` when ``cycles`` is
        ``None``, then flagged by ``latency_from``), ``device_calls``, ``instructions``,
        ``data_beats``, ``out_beats``, ``wall_s``, ``device_wall_s``.
    trace : dict or None
        With ``trace=True``: every stage's output, by ``(layer, stage)``: int8, but the 12-bit
        probabilities of ``qk``.
    """

    last_hidden_state: torch.Tensor
    embedding: torch.Tensor
    hidden_int8: torch.Tensor
    stats: dict
    trace: dict | None = None



def _check_batch(bert, input_ids, attention_mask, token_type_ids):
    spec = bert.spec
    if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2 \
            or input_ids.dtype not in (torch.int64, torch.int32):
        raise BertError(f"input_ids must be a (batch, seq) integer tensor, not "
                        f"{getattr(input_ids, 'shape', type(input_ids).__name__)}")
    batch, seq = input_ids.shape
    if batch < 1 or seq < 1:
        raise BertError(f"input_ids must hold at least one token, not shape {(batch, seq)}")
    if seq > spec.max_positions:
        raise BertError(f"the sequence has {seq} tokens, more than the model's "
                        f"max_position_embeddings ({spec.max_positions}); truncate it "
                        f"(BertProgram.encode does, with a warning)")
    if seq > bert.max_seq:
        raise BertError(f"the sequence has {seq} tokens, more than the {bert.cfg.name} config "
                        f"takes ({bert.max_seq}: whole softmax rows must fit the accumulator)")
    if int(input_ids.min()) < 0 or int(input_ids.max()) >= spec.vocab_size:
        raise BertError(f"input_ids must be from 0 to {spec.vocab_size - 1}")
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    if tuple(attention_mask.shape) != (batch, seq):
        raise BertError(f"attention_mask must have the shape of input_ids {(batch, seq)}, "
                        f"not {tuple(attention_mask.shape)}")
    if not bool(((attention_mask == 0) | (attention_mask == 1)).all()):
        raise BertError("attention_mask must hold only 0 and 1")
    empty = [b for b in range(batch) if not bool(attention_mask[b].any())]
    if empty:
        raise BertError(f"sequence(s) {empty} have no valid token (an all-zero attention mask)")
    if token_type_ids is not None:
        if tuple(token_type_ids.shape) != (batch, seq):
            raise BertError(f"token_type_ids must have the shape of input_ids {(batch, seq)}, "
                            f"not {tuple(token_type_ids.shape)}")
        if int(token_type_ids.min()) < 0 or int(token_type_ids.max()) >= spec.type_vocab_size:
            raise BertError(f"token_type_ids must be from 0 to {spec.type_vocab_size - 1}")
    return attention_mask.bool()


def _figures(program):
    """``(macs, est_cycles)`` of a compiled GEMM, or of joined ones (``meta["figures"]``)."""
    if "figures" in program.meta:
        return program.meta["figures"]
    plan = program.meta["plan"]
    return plan.batch * plan.m * plan.k * plan.n, plan.est_cycles


def _joined(program, parts):
    """Record the summed figures of ``parts`` on the joined ``program``."""
    figures = [_figures(part) for part in parts]
    program.meta["figures"] = (sum(f[0] for f in figures), sum(f[1] for f in figures))
    return program


def _work(program, est):
    """A rough measure of a device call's time, for progress: words moved plus cycles (on the
    RTL device a word costs about as much wall time as 4 simulated cycles)."""
    return len(program.instrs) + program.n_data_beats + program.n_out_beats + est / 4


class Runner:
    """Runs stage programs on a device, adding up the figures and reporting progress.

    Parameters
    ----------
    device : Device
    total : float
        The work of every call to come (see :func:`layer_programs`), for ``progress``.
    progress : callable or None
        ``progress(done, total, label)`` after each call.

    Members
    -------
    stats : dict
        ``device_calls``, ``instructions``, ``data_beats``, ``out_beats``, ``macs``,
        ``est_cycles``, ``device_wall_s`` so far; ``sim_run_s`` on the RTL device.
    cycles : int
        Cycles so far (meaningful when :attr:`counted`).
    counted : bool
        Every call so far returned cycles.
    """

    def __init__(self, device, total=1.0, progress=None):
        self.device = device
        self.total = total
        self.progress = progress
        self.done = 0.0
        self.cycles = 0
        self.counted = True
        self.stats = dict(device_calls=0, instructions=0, data_beats=0, out_beats=0, macs=0,
                          est_cycles=0, device_wall_s=0.0)

    def run(self, program, label, **inputs):
        result = self.device.run(program, **inputs)
        macs, est = _figures(program)
        stats = self.stats
        stats["device_calls"] += 1
        stats["instructions"] += len(program.instrs)
        stats["data_beats"] += program.n_data_beats
        stats["out_beats"] += program.n_out_beats
        stats["macs"] += macs
        stats["est_cycles"] += est
        stats["device_wall_s"] += result.wall_s
        if "sim_run_s" in result.stats:     # the RTL device: seconds the simulator ran
            stats["sim_run_s"] = stats.get("sim_run_s", 0.0) + result.stats["sim_run_s"]
        if result.cycles is None:
            self.counted = False
        else:
            self.cycles += result.cycles
        self.done += _work(program, est)
        if self.progress is not None:
            self.progress(self.done, self.total, label)
        return result.outputs


def layer_programs(bert, layer, mask):
    """The six programs of encoder layer ``layer`` for a batch with the valid-token ``mask``
    ``(B, L)`` bool: ``{stage: Program}`` in :data:`STAGES` order. The joined ones (``qk``,
    ``pv``) carry their summed MACs and estimated cycles in ``meta["figures"]``."""
    batch, seq = mask.shape
    m = batch * seq
    programs = {}
    qk, pv, _ = bert.attention_programs(layer, mask)
    d = bert.spec.head_dim
    for stage in STAGES:
        if stage == "qk":
            base = bert._base[("qk", seq, d, seq)]
            programs[stage] = _joined(qk, [base] * (len(qk.meta["parts"])))
        elif stage == "pv":
            base = bert._base[("pv", seq, 2 * seq, d)]
            programs[stage] = _joined(pv, [base] * (len(pv.meta["parts"])))
        else:
            programs[stage] = bert.weight_program(layer, stage, m)
    return programs


def run_layer(device, bert, layer, x, mask, *, programs=None, runner=None, trace=None):
    """Run encoder layer ``layer`` on the int8 input ``x`` ``(B*L, hidden)`` with the valid-token
    ``mask`` ``(B, L)`` bool; returns the int8 output ``(B*L, hidden)``.

    ``programs`` (from :func:`layer_programs`) and ``runner`` are :func:`run_bert`'s; given
    neither, the layer runs on its own.
    """
    s = bert.spec
    batch, seq = mask.shape
    if programs is None:
        programs = layer_programs(bert, layer, mask)
    if runner is None:
        runner = Runner(device)
    q, ops = bert.layers[layer], bert.operands[layer]
    hid, heads, d = s.hidden, s.heads, s.head_dim
    prefixes = [f"b{b}." for b in range(batch)]

    def stage(name, **inputs):
        return runner.run(programs[name], f"layer {layer + 1}/{s.layers} {name}", **inputs)

    def keep(name, value):
        if trace is not None:
            trace[(layer, name)] = value.clone()
        return value

    x = x.to(torch.int8)
    # (1) Q, K, V
    qkv = stage("qkv", a=x[:, q.qkv.index], b=ops["qkv"])["c"].to(torch.int8)
    keep("qkv", qkv)
    heads_of = qkv.view(batch, seq, 3, heads, d)
    qh, kh, vh = heads_of[:, :, 0], heads_of[:, :, 1], heads_of[:, :, 2]     # (B, L, A, d)
    # (2) softmax(Q K^T) per head: B = K^T; a sequence's heads are one batch, stacked by rows
    inputs = {}
    for b, prefix in enumerate(prefixes):
        inputs[prefix + "a"] = qh[b].transpose(0, 1).reshape(heads * seq, d)
        inputs[prefix + "b"] = kh[b].permute(1, 2, 0).reshape(heads * d, seq)
    out = stage("qk", **inputs)
    probs = keep("qk", torch.stack([out[p + "c"] for p in prefixes]).to(torch.int32)
                 .view(batch * heads, seq, seq))
    # (3) P V per head: [P_high | P_low] @ [V; V], the high plane's products shifted
    high, low = prob_digits(probs)
    a = torch.cat([high, low], dim=2).view(batch, heads * seq, 2 * seq)
    v = vh.permute(0, 2, 1, 3)                                              # (B, A, L, d)
    v = torch.cat([v, v], dim=2).reshape(batch, heads * 2 * seq, d)
    out = stage("pv", **{name: value for b, prefix in enumerate(prefixes)
                         for name, value in ((prefix + "a", a[b]), (prefix + "b", v[b]))})
    ctx = torch.stack([out[p + "c"] for p in prefixes]).to(torch.int8).view(
        batch * heads, seq, d)
    ctx = ctx.view(batch, heads, seq, d).permute(0, 2, 1, 3).reshape(-1, hid)
    keep("pv", ctx)
    # (4) LayerNorm(ctx Wo + bo + X)
    a = torch.cat([ctx, x], dim=1)[:, q.wo.index]
    x1 = keep("wo", stage("wo", a=a, b=ops["wo"], r=x)["c"].to(torch.int8))
    # (5) GELU(X1 W1 + b1): the kept columns, then the outliers (their own output scale)
    h = keep("w1", stage("w1", a=x1[:, q.w1.index], b=ops["w1"])["c"].to(torch.int8))
    # (6) LayerNorm(H W2 + b2 + X1)
    a = torch.cat([h, x1], dim=1)[:, q.w2.index]
    x2 = keep("w2", stage("w2", a=a, b=ops["w2"], r=x1)["c"].to(torch.int8))
    return x2


def run_bert(device, bert, input_ids, attention_mask=None, token_type_ids=None, *,
             progress=None, trace=False):
    """Run a compiled BERT model on ``device``.

    Parameters
    ----------
    device : Device
        A device for ``bert.cfg`` (the software device or the RTL).
    bert : BertProgram
    input_ids : torch.Tensor
        ``(B, L)`` token ids, ``L`` up to the model's positions.
    attention_mask : torch.Tensor, optional
        ``(B, L)`` of 0 and 1 (1: a valid token); all ones by default.
    token_type_ids : torch.Tensor, optional
        ``(B, L)``; zeros by default.
    progress : callable, optional
        ``progress(done, total, label)`` after every device call; ``done / total`` is the
        fraction of the estimated work done.
    trace : bool
        Keep every stage's int8 output in :attr:`BertResult.trace`.

    Returns
    -------
    BertResult

    Notes
    -----
    torch runs on one thread during the call (and is set back after): the software device runs
    many small GEMMs, which more threads slow down, badly on a busy machine.

    Raises
    ------
    BertError
        On a bad input (shapes, ids out of range, a sequence longer than the model's positions
        or than the config takes, a sequence with no valid token), or a device for another
        config.
    """
    start = time.perf_counter()
    if device.cfg != bert.cfg:
        raise BertError(f"the model is compiled for {bert.cfg.tag}, but the device is "
                        f"{device.cfg.tag}")
    mask = _check_batch(bert, input_ids, attention_mask, token_type_ids)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return _run_bert(device, bert, input_ids, token_type_ids, mask, progress, trace, start)
    finally:
        torch.set_num_threads(threads)


def _run_bert(device, bert, input_ids, token_type_ids, mask, progress, trace, start):
    s = bert.spec
    batch, seq = input_ids.shape
    plans = [layer_programs(bert, layer, mask) for layer in range(s.layers)]
    total = sum(_work(p, _figures(p)[1]) for plan in plans for p in plan.values())
    runner = Runner(device, total, progress)
    traced = {} if trace else None
    x = bert.embed_input(input_ids, token_type_ids)
    for layer in range(s.layers):
        x = run_layer(device, bert, layer, x, mask, programs=plans[layer], runner=runner,
                      trace=traced)
    hidden_int8 = x.view(batch, seq, s.hidden)
    hidden = bert.layers[-1].x2.dequantize(hidden_int8).float()
    weights = mask.to(hidden.dtype).unsqueeze(-1)
    embedding = (hidden * weights).sum(dim=1) / weights.sum(dim=1)

    stats = runner.stats
    cfg = bert.cfg
    ideal = math.ceil(stats["macs"] / cfg.macs_per_cycle)
    cycles = runner.cycles if runner.counted else None
    stats.update(
        cycles=cycles, ideal_cycles=ideal, model_macs=model_macs(s, seq, batch),
        utilization=ideal / cycles if cycles else None,
        est_utilization=ideal / stats["est_cycles"] if stats["est_cycles"] else None,
        latency_s=(cycles if cycles is not None else stats["est_cycles"])
        / (cfg.clock_mhz * 1e6),
        latency_from="cycles" if cycles is not None else "est_cycles",
        clock_mhz=cfg.clock_mhz, batch=batch, seq=seq, tokens=int(mask.sum()),
        wall_s=time.perf_counter() - start)
    return BertResult(last_hidden_state=hidden, embedding=embedding, hidden_int8=hidden_int8,
                      stats=stats, trace=traced)


def embed_texts(device, bert, texts, *, batch_size=8, progress=None):
    """Sentence embeddings of ``texts`` on ``device``, in padded batches of ``batch_size`` in the
    given order: ``(embeddings (N, hidden) float32, batches)``, where ``batches`` lists each
    batch's ``{"seq", "tokens", "stats"}``."""
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise BertError(f"batch_size must be an int of at least 1, not {batch_size!r}")
    texts = list(texts)
    parts, batches = [], []
    for lo in range(0, len(texts), batch_size):
        batch = bert.encode(texts[lo:lo + batch_size])
        result = run_bert(device, bert, **batch, progress=progress)
        parts.append(result.embedding)
        batches.append({"seq": result.stats["seq"], "tokens": result.stats["tokens"],
                        "stats": result.stats})
    return torch.cat(parts), batches


