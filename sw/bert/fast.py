"""The fast functional path: a compiled BERT model run at the tensor level, bit-exact with the
stage programs that the devices run.

A stage program tiles a GEMM onto the array and drains it through a fused epilogue. Its int32
accumulator rows are the exact products of its int8 operands (a tile's partial sums add in the
accumulator, and integer addition does not care about the order), and its epilogue applies
:mod:`bertaccel.golden.intops` with the integers that the compiler lowered the epilogue to
(:func:`bertaccel.sw.epilogue.lower`: SET values and parameter-memory rows). So each stage here
is one whole-matrix int8 GEMM (the CPU's fastest exact kernel, :mod:`bertaccel.golden.kernels`;
the per-head attention GEMMs batched over batch and heads) followed by
:func:`bertaccel.sw.epilogue.apply_integer` with the same lowered epilogue, including what depends on the config (SOFTMAX's running maximum advances
``cfg.ep_lanes`` columns at a time). The instruction-level software device stays the
reference: the tests prove this path equal to it at every stage.
"""

import torch

from ...golden.intops import prob_digits
from ...golden.kernels import KERNELS
from ...golden.ops import gemm
from ...hw.isa import MATMUL_SHIFT, EpOp
from ..epilogue import Softmax, apply_integer, apply_registers, lower
from .compile import STAGES, WEIGHT_STAGES

__all__ = ["FastModel", "int_gemm", "batched_int_gemm"]

#: Score elements (batch x heads x L x L) the attention works on at once.
ATTENTION_ELEMENTS = 1 << 20
#: Elements (rows x columns) an epilogue works on at once.
EPILOGUE_ELEMENTS = 1 << 19

def int_gemm(a, b, k_high=0):
    """``a @ b`` of int8 matrices as int32, exactly (the CPU's fastest exact kernel), the
    products of the first ``k_high`` rows of ``b`` shifted left by 6
    (:func:`bertaccel.golden.ops.gemm`)."""
    return gemm(a, b, k_high=k_high)


def batched_int_gemm(a, b):
    """``a @ b`` over a batch of int8 matrices ``(P, m, k) @ (P, k, n)`` as int32, exactly.

    ``torch._int_mm`` has no batched form, so this is always the float32 kernel
    (:data:`bertaccel.golden.kernels.KERNELS`): exact chunks of at most 1024 rows of ``k``.
    """
    return KERNELS["float32"](a, b)


def _mask_bias(in_scale, valid, cfg, k):
    """The PMEM bias a SOFTMAX program of one batch row carries: its padding mask, lowered."""
    seq = valid.numel()
    lowered = lower(Softmax(in_scale=in_scale, mask=~valid.numpy()), cfg, n=seq, k=k)
    return torch.from_numpy(lowered.bias[:seq].copy())


class _Kept(dict):
    """A dict that forgets everything once it holds :data:`KEPT` entries."""

    def get_or_make(self, key, make):
        value = self.get(key)
        if value is None:
            if len(self) >= KEPT:
                self.clear()
            value = self[key] = make()
        return value


#: Lowerings per sequence length and padding masks per batch row that a FastModel keeps.
KEPT = 4096


class FastModel:
    """A :class:`~bertaccel.sw.bert.compile.BertProgram` run stage by stage at the tensor level.

    Parameters
    ----------
    bert : BertProgram

    Notes
    -----
    The epilogues of the weight stages are lowered once; SOFTMAX's (its mask is the batch's
    padding) and P.V's (its depth is the sequence length) per batch.
    """

    def __init__(self, bert):
        self.bert = bert
        self.cfg = bert.cfg
        self.lanes = bert.cfg.ep_lanes
        spec = bert.spec
        self._lowered = []
        columns = {"qkv": 3 * spec.hidden, "wo": spec.hidden, "w1": spec.intermediate,
                   "w2": spec.hidden}
        for number in range(len(bert.layers)):
            self._lowered.append({
                stage: lower(bert.epilogue(number, stage), self.cfg, n=columns[stage],
                             k=bert.depth(number, stage)[0]) for stage in WEIGHT_STAGES})
        self._kept = _Kept()        # the lowerings and masks of batch shapes met

    def _epilogue(self, lowered, c, r=None):
        # Rows are independent: a block of them at a time bounds the 8-byte intermediates.
        step = max(1, EPILOGUE_ELEMENTS // c.shape[1])
        return torch.cat([apply_integer(lowered, c[lo:lo + step],
                                        None if r is None else r[lo:lo + step],
                                        cols=self.lanes).to(torch.int8)
                          for lo in range(0, c.shape[0], step)])

    def _attention(self, layer, q, k, v, mask):
        """Stages ``qk`` and ``pv`` of every head: ``(probs (B*A, L, L), ctx (B*A, L, d))``,
        the 12-bit probabilities (int32) and the int8 context, in (batch, head) order."""
        bert, cfg = self.bert, self.cfg
        quant = bert.layers[layer]
        batch, seq = mask.shape
        heads, d = bert.spec.heads, bert.spec.head_dim
        scores = batched_int_gemm(q.reshape(-1, seq, d), k.reshape(-1, seq, d).transpose(1, 2))
        scores = scores.view(batch, heads * seq, seq)
        kept = self._kept.get_or_make
        masks = torch.stack([kept(("mask", quant.qk_scale, mask[b].numpy().tobytes()),
                                  lambda: _mask_bias(quant.qk_scale, mask[b], cfg, d))
                             for b in range(batch)])
        softmax = kept(("softmax", layer, seq),
                       lambda: lower(Softmax(in_scale=quant.qk_scale), cfg, n=seq, k=d))
        bias = masks.unsqueeze(1).expand(batch, heads * seq, seq).reshape(-1, seq)
        probs = apply_registers(EpOp.SOFTMAX, scores.reshape(-1, seq), regs=dict(softmax.sets),
                                bias=bias, p1=None, p2=None, lanes=self.lanes).to(torch.int32)
        probs = probs.view(batch * heads, seq, seq)
        pv = kept(("pv", layer, seq), lambda: lower(quant.pv_ep, cfg, n=d, k=2 * seq))
        # The digit planes' products, each exact, added as the accumulator does (mod 2**32).
        high, low = (batched_int_gemm(plane, v.reshape(-1, seq, d)).to(torch.int64)
                     for plane in prob_digits(probs))
        ctx = ((high << MATMUL_SHIFT) + low).to(torch.int32)
        ctx = self._epilogue(pv, ctx.reshape(-1, d)).view(batch * heads, seq, d)
        return probs, ctx

    def layer(self, layer, x, mask, *, trace=None):
        """Encoder layer ``layer`` on the int8 input ``x`` ``(B*L, hidden)`` with the valid-token
        ``mask`` ``(B, L)`` bool: its int8 output ``(B*L, hidden)``, as
        :func:`~bertaccel.sw.bert.run.run_layer` computes it on a device. With ``trace`` (a
        dict), every stage's int8 output is kept under ``(layer, stage)``."""
        spec = self.bert.spec
        quant, ops, lowered = (self.bert.layers[layer], self.bert.operands[layer],
                               self._lowered[layer])
        batch, seq = mask.shape
        heads, d, hid = spec.heads, spec.head_dim, spec.hidden
        high = {stage: self.bert.depth(layer, stage)[1] for stage in WEIGHT_STAGES}
        x = x.to(torch.int8)
        out = {}
        out["qkv"] = qkv = self._epilogue(lowered["qkv"], int_gemm(x[:, quant.qkv.index],
                                                                   ops["qkv"], high["qkv"]))
        per_head = qkv.view(batch, seq, 3, heads, d).permute(2, 0, 3, 1, 4)   # (3, B, A, L, d)
        # The attention's intermediates grow as B * A * L**2: a few batch rows at a time bound
        # them (each row is independent of the others), and the int32 probabilities are kept
        # only for a trace.
        step = max(1, ATTENTION_ELEMENTS // (heads * seq * seq))
        probs, ctx = [], []
        for lo in range(0, batch, step):
            p, c = self._attention(layer, *per_head[:, lo:lo + step], mask[lo:lo + step])
            probs += [p] if trace is not None else []
            ctx.append(c)
        ctx = torch.cat(ctx)
        if trace is not None:
            out["qk"] = torch.cat(probs)
        out["pv"] = ctx = ctx.view(batch, heads, seq, d).permute(0, 2, 1, 3).reshape(-1, hid)
        a = torch.cat([ctx, x], dim=1)[:, quant.wo.index]
        out["wo"] = x1 = self._epilogue(lowered["wo"], int_gemm(a, ops["wo"], high["wo"]), x)
        a = x1[:, quant.w1.index]
        out["w1"] = h = self._epilogue(lowered["w1"], int_gemm(a, ops["w1"], high["w1"]))
        a = torch.cat([h, x1], dim=1)[:, quant.w2.index]
        out["w2"] = x2 = self._epilogue(lowered["w2"], int_gemm(a, ops["w2"], high["w2"]), x1)
        if trace is not None:
            for stage in STAGES:
                trace[(layer, stage)] = out[stage]
        return x2

    def encoder(self, x, mask, *, trace=None):
        """Every encoder layer on the int8 embeddings ``x`` ``(B*L, hidden)``: the last
        layer's int8 output ``(B*L, hidden)``."""
        for layer in range(self.bert.spec.layers):
            x = self.layer(layer, x, mask, trace=trace)
        return x
