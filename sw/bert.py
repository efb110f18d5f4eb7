"""Real BERT models on the accelerator: the compiler, and running it.

::

    bert = compile_bert("minilm", preset("8x8"))            # calibrate, quantise, check fit
    batch = bert.encode(["A sentence.", "Another, longer sentence."])
    with SoftwareDevice(bert.cfg) as device:
        result = run_bert(device, bert, **batch)
    result.embedding, result.last_hidden_state, result.stats["cycles"]

Where each op runs (per encoder layer, on ``B x L`` tokens, ``H`` hidden, ``A`` heads of ``d``,
``I`` intermediate; ``K'`` is a GEMM depth with the few rows that channel splitting adds, see
:mod:`bertaccel.sw.bert_quant`):

========================================  ====================================================
op                                        where
========================================  ====================================================
tokenisation                              host (the model's tokenizer)
word + position + token-type embeddings,  host, float32 (``model.embeddings``), then quantised
embedding LayerNorm                       to int8 with calibrated scales
(1) Q, K, V = X [Wq|Wk|Wv] + bias         accelerator: one GEMM ``BL x K' x 3H``, fused REQUANT
                                          (per column: per-channel weight scales and the Q,
                                          K, V output scales)
split heads, K^T per head                 host (slicing and a transpose of int8 tensors)
(2) S = Q_bh K_bh^T, scale, mask, softmax accelerator: ``B A`` GEMMs ``L x d x L`` joined into
                                          one program, fused SOFTMAX (scale ``s_q s_k /
                                          sqrt d``, the attention mask as the PMEM mask)
(3) context_bh = P_bh V_bh                accelerator: ``B A`` GEMMs ``L x L x d`` joined,
                                          fused REQUANT
join heads                                host
(4) LayerNorm(ctx Wo + bo + X)            accelerator: GEMM ``BL x K' x H``, fused LAYERNORM
                                          with the residual X
(5) GELU(X1 W1 + b1)                      accelerator: GEMMs ``BL x K' x (I - o)`` and
                                          ``BL x K' x o`` (the ``o`` outlier columns, their own
                                          output scale), joined, fused GELU
(6) LayerNorm(H W2 + b2 + X1)             accelerator: GEMM ``BL x K' x H``, fused LAYERNORM
                                          with the residual X1
dequantise the last layer, mean pool      host, float32 (attention-masked mean)
========================================  ====================================================

Between the stages the host only moves int8 data: it slices heads, transposes K, joins heads,
and gathers the columns of each GEMM's A operand (``A' = [sources][:, index]``: channel splitting
repeats a few columns). Every add, multiply, scale, bias, mask, exponential, normalisation and
GELU of an encoder layer runs on the accelerator.

Each stage is one compiled program (stages 2, 3 and 5 join their GEMMs with
:func:`bertaccel.sw.sequence.concat`), so a layer is six device calls. Every program is tiled
for the device's :class:`~bertaccel.hw.config.AccelConfig` by :func:`compile_gemm`: a model
larger than the memories streams through them. The quantisation scheme is in
:mod:`bertaccel.sw.bert_quant` and docs/bert.md.

Errors are :class:`BertError` (a ``ValueError``) with a message that names the problem: a model
that is not BERT, a missing model folder, an empty text, a sequence longer than the model's
positions (:meth:`BertProgram.encode` truncates with a warning instead), and a config that cannot
hold one tile of some stage.
"""

import dataclasses
import math
import os
import time
import warnings
from pathlib import Path

import numpy as np
import torch

from ..golden.intops import MAX_ROW
from ..hw import isa
from ..hw.config import AccelConfig
from .bert_quant import BUDGET, OUTLIERS, act_quant, calibrate, quantize_layer
from .epilogue import Requant, Softmax, lower, pmem_bytes
from .program import Program, ProgramError
from .sequence import concat
from .tiler import compile_gemm, plan_gemm

__all__ = ["BertError", "BertSpec", "BertProgram", "BertResult", "MINILM", "load_bert",
           "model_macs",
           "compile_bert", "run_bert", "run_layer", "layer_programs", "embed_texts", "Runner",
           "TextProgress", "STAGES"]

#: The name that stands for sentence-transformers/all-MiniLM-L6-v2 (the local copy).
MINILM = "minilm"

#: The stages of an encoder layer, in order.
STAGES = ("qkv", "qk", "pv", "wo", "w1", "w2")

_STAGE_TEXT = {
    "qkv": "Q, K, V projections + bias, per-channel requantise",
    "qk": "per-head Q K^T, scale, mask, softmax",
    "pv": "per-head P V, requantise",
    "wo": "output projection + bias + residual, LayerNorm",
    "w1": "FFN1 + bias, GELU",
    "w2": "FFN2 + bias + residual, LayerNorm",
}

#: Supported activations: the hardware's GELU is the erf form; the tanh forms differ from it by
#: under 1e-3 (well under one int8 step).
_GELUS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "gelu_python")


class BertError(ValueError):
    """A model, an input or a config that the BERT compiler cannot take; the message says why."""


@dataclasses.dataclass(frozen=True)
class BertSpec:
    """The shape of a BERT model, read from its config.

    Members
    -------
    layers, hidden, heads, intermediate, max_positions, type_vocab_size, vocab_size : int
    eps : float
        LayerNorm epsilon.
    hidden_act : str
    """

    layers: int
    hidden: int
    heads: int
    intermediate: int
    max_positions: int
    type_vocab_size: int
    vocab_size: int
    eps: float
    hidden_act: str

    @property
    def head_dim(self):
        return self.hidden // self.heads

    @classmethod
    def from_config(cls, config):
        """The spec of a ``transformers`` config; :class:`BertError` if it is not a BERT
        encoder the accelerator runs."""
        model_type = getattr(config, "model_type", None)
        if model_type != "bert":
            arch = ", ".join(getattr(config, "architectures", None) or []) or "unknown"
            raise BertError(f"not a BERT model: model_type is {model_type!r} (architectures: "
                            f"{arch}); the compiler takes BERT-family models (model_type "
                            f"'bert', transformers.BertModel)")
        act = getattr(config, "hidden_act", None)
        if act not in _GELUS:
            raise BertError(f"the model's activation is {act!r}; the accelerator's FFN "
                            f"epilogue is GELU ({', '.join(_GELUS)})")
        position = getattr(config, "position_embedding_type", "absolute") or "absolute"
        if position != "absolute":
            raise BertError(f"position_embedding_type {position!r} is not supported (absolute "
                            f"only: relative positions add a term to QK^T)")
        if getattr(config, "is_decoder", False) or getattr(config, "add_cross_attention", False):
            raise BertError("a BERT decoder or cross-attention model is not supported (the "
                            "encoder only)")
        hidden, heads = config.hidden_size, config.num_attention_heads
        if hidden % heads:
            raise BertError(f"hidden_size {hidden} is not a multiple of num_attention_heads "
                            f"{heads}")
        if hidden > MAX_ROW:
            raise BertError(f"hidden_size {hidden} is longer than the LayerNorm rows the "
                            f"hardware takes ({MAX_ROW} columns)")
        return cls(layers=config.num_hidden_layers, hidden=hidden, heads=heads,
                   intermediate=config.intermediate_size,
                   max_positions=config.max_position_embeddings,
                   type_vocab_size=config.type_vocab_size, vocab_size=config.vocab_size,
                   eps=float(config.layer_norm_eps), hidden_act=act)


def _bert_model(model):
    """The ``BertModel`` inside ``model`` (itself, or a ``Bert*For*``'s ``.bert``)."""
    import transformers

    if isinstance(model, transformers.BertModel):
        return model
    inner = getattr(model, "bert", None)
    if isinstance(inner, transformers.BertModel):
        return inner
    config = getattr(model, "config", None)
    if config is not None:
        BertSpec.from_config(config)  # names the architecture when it is not BERT
    raise BertError(f"not a BERT model: {type(model).__name__}; the compiler takes a "
                    f"transformers.BertModel (or a model whose .bert is one), a local model "
                    f"folder, or {MINILM!r}")


def load_bert(spec):
    """``(tokenizer, model)`` of ``spec``: :data:`MINILM` or a local model folder.

    The model is a float32 ``transformers.BertModel`` in eval mode (eager attention); nothing
    is downloaded (``HF_HUB_OFFLINE=1``).

    Raises
    ------
    BertError
        If the folder does not exist, holds no ``config.json``, or is not a BERT model.
    """
    os.environ["HF_HUB_OFFLINE"] = "1"
    if isinstance(spec, str) and spec == MINILM:
        from ..golden.bert_ref import minilm_path
        path = Path(minilm_path())
    else:
        path = Path(spec)
    if not path.exists():
        raise BertError(f"model path {str(path)!r} does not exist (give {MINILM!r} or a local "
                        f"folder with config.json and the weights)")
    if not path.is_dir() or not (path / "config.json").is_file():
        raise BertError(f"model path {str(path)!r} is not a model folder: it has no "
                        f"config.json")
    import transformers

    transformers.utils.logging.disable_progress_bar()
    try:
        config = transformers.AutoConfig.from_pretrained(path, local_files_only=True)
    except (OSError, ValueError, KeyError) as error:
        raise BertError(f"cannot read the model config in {str(path)!r}: {error}") from None
    BertSpec.from_config(config)
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(path, local_files_only=True)
        model = transformers.BertModel.from_pretrained(path, attn_implementation="eager",
                                                       local_files_only=True,
                                                       dtype=torch.float32)
    except (OSError, ValueError) as error:
        raise BertError(f"cannot load the BERT model in {str(path)!r}: {error}") from None
    return tokenizer, model.eval()


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
        With ``trace=True``: every stage's int8 output, by ``(layer, stage)``.
    """

    last_hidden_state: torch.Tensor
    embedding: torch.Tensor
    hidden_int8: torch.Tensor
    stats: dict
    trace: dict | None = None


def _rebind(base, epilogue, k, n):
    """``base`` (a compiled epilogue GEMM) with another epilogue of the same op: the same tiles,
    new SET values and PMEM bytes. The index tensors are shared, not copied. ``None`` when the
    epilogues do not lower to the same SETs."""
    cfg = base.cfg
    lowered = lower(epilogue, cfg, n=n, k=k)
    old = base.meta["epilogue"]
    sets = [number for number, instr in enumerate(base.instrs) if isinstance(instr, isa.Set)]
    if (lowered.op != old.op or [index for index, _ in lowered.sets]
            != [base.instrs[number].index for number in sets]):
        return None
    instrs = list(base.instrs)
    for number, (_, value) in zip(sets, lowered.sets):
        instrs[number] = dataclasses.replace(instrs[number], value=int(value))
    params = torch.from_numpy(pmem_bytes(lowered, cfg.cols).reshape(-1).view(np.int8).copy())
    if tuple(params.shape) != tuple(base.constants["params"].shape):
        return None
    return Program(cfg, instrs, inputs=base.inputs, outputs=base.outputs,
                   pack_index=base.pack_index, unpack_index=base.unpack_index,
                   constants={"params": params}, meta={**base.meta, "epilogue": lowered})


class BertProgram:
    """A BERT model compiled for one :class:`AccelConfig`: int8 weights (channel-split B
    operands), scales and epilogues per layer, and the stage programs, compiled per token count
    on first use and cached.

    Made by :func:`compile_bert`; run by :func:`run_bert`.

    Members
    -------
    cfg : AccelConfig
    spec : BertSpec
    layers : list of bert_quant.QuantLayer
        The quantised layers; every layer's B operand of a stage has the same rows (``k``).
    x_embed : bert_quant.ActQuant
        Scales of the int8 embedding output (the first layer's input).
    calibration : dict
        Facts about the calibration (``method``, ``percentile``, ``sentences``, ``tokens``,
        ``outliers``, ``budget``).
    embeddings : torch.nn.Module
        The model's float embedding module (runs on the host).
    tokenizer : object or None
    name : str
    k : dict
        The GEMM depth of each weight stage (``qkv``, ``wo``, ``w1``, ``w2``), with the rows
        that channel splitting adds.
    max_seq : int
        The longest sequence the config and the model take.
    """

    def __init__(self, cfg, spec, layers, *, x_embed, calibration, embeddings, tokenizer=None,
                 name="bert"):
        self.cfg = cfg
        self.spec = spec
        self.x_embed = x_embed
        self.calibration = calibration
        self.embeddings = embeddings
        self.tokenizer = tokenizer
        self.name = name
        self.k = {stage: max(getattr(layer, stage).k for layer in layers)
                  for stage in ("qkv", "wo", "w1", "w2")}
        self.layers = [dataclasses.replace(layer, **{stage: getattr(layer, stage).padded(k)
                                                     for stage, k in self.k.items()})
                       for layer in layers]
        self._operands = []
        for layer in self.layers:
            keep = layer.h_keep
            self._operands.append({
                "qkv": layer.qkv.b, "wo": layer.wo.b, "w2": layer.w2.b,
                "w1_main": layer.w1.b[:, keep].contiguous(),
                "w1_out": layer.w1.b[:, layer.h.outliers].contiguous()})
        self._base = {}       # (stage, m, k, n) -> the first program compiled for that shape
        self._programs = {}   # (layer, stage, m) -> Program
        self._programs_m = None
        self.max_seq = self._longest_sequence()

    def __repr__(self):
        s = self.spec
        return (f"<BertProgram {self.name}: {s.layers} layers, hidden {s.hidden}, {s.heads} "
                f"heads, intermediate {s.intermediate}; for {self.cfg.name} ({self.cfg.tag})>")

    # -- what runs where ----------------------------------------------------------------------

    def describe(self):
        """The stages of a layer, one line each, with their GEMM shapes for ``B x L`` tokens."""
        s, k = self.spec, self.k
        n_out = max(layer.h.outliers.numel() for layer in self.layers)
        rows = [("qkv", f"BL x {k['qkv']} x {3 * s.hidden}"),
                ("qk", f"{s.heads}B x (L x {s.head_dim} x L)"),
                ("pv", f"{s.heads}B x (L x L x {s.head_dim})"),
                ("wo", f"BL x {k['wo']} x {s.hidden}"),
                ("w1", f"BL x {k['w1']} x ({s.intermediate - n_out} + {n_out})"),
                ("w2", f"BL x {k['w2']} x {s.hidden}")]
        return [f"({n + 1}) {stage:<4}{shape:<28}{_STAGE_TEXT[stage]}"
                for n, (stage, shape) in enumerate(rows)]

    # -- compiling ---------------------------------------------------------------------------

    def _compile(self, stage, m, k, n, epilogue, what):
        """The program of a ``m x k x n`` GEMM with ``epilogue``: compiled once per shape, then
        rebound to the other layers' epilogues."""
        key = (stage, m, k, n)
        base = self._base.get(key)
        try:
            if base is None:
                base = self._base[key] = compile_gemm(self.cfg, m, k, n, epilogue=epilogue)
                return base
            return _rebind(base, epilogue, k, n) or compile_gemm(self.cfg, m, k, n,
                                                                 epilogue=epilogue)
        except ProgramError as error:
            raise BertError(f"{self.name} on {self.cfg.name} ({self.cfg.tag}): {what} "
                            f"({m} x {k} x {n}): {error}") from None

    def weight_program(self, layer, stage, m):
        """The program of weight stage ``stage`` (``"qkv"``, ``"wo"``, ``"w1"``, ``"w2"``) of
        ``layer`` for ``m`` tokens. ``w1`` joins two GEMMs (inputs ``main.a``, ``main.b``,
        ``out.a``, ``out.b``); the others take ``a``, ``b`` and, with LayerNorm, ``r``."""
        if self._programs_m != m:      # keep the programs of one token count only
            self._programs.clear()
            self._base = {key: p for key, p in self._base.items() if key[0] in ("qk", "pv")}
            self._programs_m = m
        key = (layer, stage, m)
        program = self._programs.get(key)
        if program is not None:
            return program
        s, q, k = self.spec, self.layers[layer], self.k[stage]
        what = f"layer {layer} stage {stage}"
        if stage == "w1":
            n_out = q.h.outliers.numel()
            parts = [self._compile("w1", m, k, s.intermediate - n_out, q.w1_ep, what)]
            if n_out:
                parts.append(self._compile("w1_out", m, k, n_out, q.w1_out_ep, what))
            program = concat(parts, prefixes=["main.", "out."][:len(parts)])
        else:
            n = 3 * s.hidden if stage == "qkv" else s.hidden
            epilogue = {"qkv": q.qkv_ep, "wo": q.wo_ep, "w2": q.w2_ep}[stage]
            program = self._compile(stage, m, k, n, epilogue, what)
        self._programs[key] = program
        return program

    def attention_programs(self, layer, mask):
        """The joined per-head programs of stages ``qk`` and ``pv`` of ``layer`` for a batch
        with ``mask`` (``(B, L)`` bool, True on valid tokens): ``(qk, pv, prefixes)``."""
        s, q = self.spec, self.layers[layer]
        batch, seq = mask.shape
        d = s.head_dim
        qk_parts, pv_parts, prefixes = [], [], []
        pv = self._compile("pv", seq, seq, d, q.pv_ep, f"layer {layer} stage pv")
        for b in range(batch):
            softmax = Softmax(in_scale=q.qk_scale, mask=~mask[b].numpy())
            qk = self._compile("qk", seq, d, seq, softmax, f"layer {layer} stage qk")
            for h in range(s.heads):
                qk_parts.append(qk)
                pv_parts.append(pv)
                prefixes.append(f"b{b}h{h}.")
        return (concat(qk_parts, prefixes=prefixes), concat(pv_parts, prefixes=prefixes),
                prefixes)

    def _longest_sequence(self):
        """The longest sequence whose attention stages fit the config (at most the model's
        positions and the hardware's softmax row)."""
        top = min(self.spec.max_positions, MAX_ROW)
        d = self.spec.head_dim

        def fits(seq):
            try:
                plan_gemm(self.cfg, 1, d, seq, epilogue=Softmax(in_scale=1.0))
                plan_gemm(self.cfg, 1, seq, d, epilogue=Requant(scale=1.0))
            except ProgramError:
                return False
            return True

        if fits(top):
            return top
        lo, hi = 0, top          # fits(lo) (or lo == 0), not fits(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if fits(mid) else (lo, mid)
        return lo

    def check_fit(self):
        """Raise :class:`BertError` unless one token of every stage fits the config."""
        cfg, s, q, k = self.cfg, self.spec, self.layers[0], self.k
        if self.max_seq < 1:
            raise BertError(f"the {cfg.name} config ({cfg.tag}) cannot hold one tile of "
                            f"{self.name}'s attention (head size {s.head_dim}): "
                            f"{self._why(1, s.head_dim, 1, Softmax(in_scale=1.0))}")
        for stage, kk, n, epilogue in (("qkv", k["qkv"], 3 * s.hidden, q.qkv_ep),
                                       ("wo", k["wo"], s.hidden, q.wo_ep),
                                       ("w1", k["w1"], s.intermediate, q.w1_ep),
                                       ("w2", k["w2"], s.hidden, q.w2_ep)):
            if stage == "w1":
                n -= q.h.outliers.numel()
            why = self._why(1, kk, n, epilogue)
            if why:
                raise BertError(f"the {cfg.name} config ({cfg.tag}) cannot run {self.name}: "
                                f"stage {stage} ({_STAGE_TEXT[stage]}, 1 x {kk} x {n}): {why}")

    def _why(self, m, k, n, epilogue):
        try:
            plan_gemm(self.cfg, m, k, n, epilogue=epilogue)
        except ProgramError as error:
            return str(error)
        return ""

    # -- inputs --------------------------------------------------------------------------------

    def encode(self, texts, *, max_length=None):
        """Tokenise ``texts`` into one padded batch for :func:`run_bert`.

        Text longer than the longest sequence (the model's positions, or a shorter limit of
        the config; ``max_length`` when given and smaller) is truncated, with a
        ``UserWarning`` that says which text and how long it was.

        Returns
        -------
        dict
            ``input_ids``, ``attention_mask``, ``token_type_ids``: ``(B, L)`` int64 tensors.

        Raises
        ------
        BertError
            If there is no tokenizer, no text, or a text is empty (or only white space).
        """
        if self.tokenizer is None:
            raise BertError(f"{self.name} has no tokenizer: give input_ids to run_bert")
        if isinstance(texts, str):
            texts = [texts]
        texts = list(texts)
        if not texts:
            raise BertError("no text given")
        for number, text in enumerate(texts):
            if not isinstance(text, str):
                raise BertError(f"text {number} is a {type(text).__name__}, not a str")
            if not text.strip():
                raise BertError(f"text {number} is empty" + (" (only white space)" if text
                                                              else ""))
        limit = self.max_seq if max_length is None else min(self.max_seq, max_length)
        full = self.tokenizer(texts, padding=False, truncation=False, verbose=False)["input_ids"]
        for number, ids in enumerate(full):
            if len(ids) > limit:
                why = ("the model's max_position_embeddings" if limit == self.spec.max_positions
                       else f"the longest sequence on {self.cfg.name}" if limit == self.max_seq
                       else "max_length")
                warnings.warn(f"text {number} has {len(ids)} tokens, more than {limit} "
                              f"({why}); it is truncated to {limit} tokens", stacklevel=2)
        batch = self.tokenizer(texts, padding=True, truncation=True, max_length=limit,
                               return_tensors="pt")
        out = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
        out["token_type_ids"] = batch.get("token_type_ids",
                                          torch.zeros_like(batch["input_ids"]))
        return out

    def embed_input(self, input_ids, token_type_ids=None):
        """The int8 input of the first layer: host embeddings, quantised. ``(B*L, hidden)``."""
        with torch.no_grad():
            emb = self.embeddings(input_ids=input_ids, token_type_ids=token_type_ids)
        return self.x_embed.quantize(emb.reshape(-1, self.spec.hidden))


def _batches(tokenizer, texts, batch_size, max_length):
    texts = list(texts)
    for lo in range(0, len(texts), batch_size):
        yield dict(tokenizer(texts[lo:lo + batch_size], padding=True, truncation=True,
                             max_length=max_length, return_tensors="pt"))


def compile_bert(model, cfg, *, tokenizer=None, calibration=None, method="percentile",
                 percentile=99.99, outliers=OUTLIERS, budget=BUDGET, name=None):
    """Compile a BERT model for ``cfg``: calibrate, quantise to int8, check that it fits.

    Parameters
    ----------
    model : str or path or transformers.BertModel
        :data:`MINILM`, a local model folder, or a float model (or a model whose ``.bert`` is
        one).
    cfg : AccelConfig
    tokenizer : optional
        The model's tokenizer (loaded with a folder); needed to calibrate on text and by
        :meth:`BertProgram.encode`.
    calibration : list of str, or list of dict, optional
        Sample text (default: :func:`bertaccel.golden.sentences.calibration_sentences`, which
        the accuracy figures never use), or tokenised batches (``input_ids``,
        ``attention_mask``, optionally ``token_type_ids``).
    method, percentile : str, float
        How a range is taken from the calibration (:func:`bertaccel.sw.bert_quant.tensor_range`).
    outliers : int
        Channels of each LayerNorm and GELU output with their own scale.
    budget : int
        Elements of each per-tensor weight allowed beyond its scale's int8 range (split).
    name : str, optional
        For messages; the model's ``name_or_path`` by default.

    Returns
    -------
    BertProgram

    Raises
    ------
    BertError
        If the model is not a BERT model or cannot be loaded, the calibration is missing, or the
        config cannot hold one tile of some stage.
    """
    if not isinstance(cfg, AccelConfig):
        raise TypeError(f"cfg must be an AccelConfig, not {type(cfg).__name__}")
    if isinstance(model, (str, os.PathLike)):
        label = str(model)
        tok, model = load_bert(model)
        tokenizer = tokenizer or tok
        name = name or ("all-MiniLM-L6-v2" if label == MINILM else label)
    bert = _bert_model(model)
    spec = BertSpec.from_config(bert.config)
    name = name or getattr(bert.config, "name_or_path", "") or "bert"
    bert = bert.eval()

    if calibration is None:
        if tokenizer is None:
            raise BertError("calibration needs sample text and a tokenizer, or tokenised "
                            "batches (calibration=[{'input_ids': ..., 'attention_mask': ...}])")
        from ..golden.sentences import calibration_sentences
        calibration = calibration_sentences()
    calibration = list(calibration)
    if not calibration:
        raise BertError("calibration is empty")
    if all(isinstance(item, str) for item in calibration):
        if tokenizer is None:
            raise BertError("calibration text needs the model's tokenizer")
        batches = list(_batches(tokenizer, calibration, 16, spec.max_positions))
    elif all(isinstance(item, dict) for item in calibration):
        batches = calibration
    else:
        raise BertError("calibration must be a list of str or a list of tokenised batches")
    cal = calibrate(bert, batches)

    ln = bert.embeddings.LayerNorm
    x = x_embed = act_quant(cal.site(-1, "x2"), outliers=outliers, method=method,
                            percentile=percentile, beta=ln.bias.detach().double(),
                            what="the embeddings")
    layers = []
    for number, layer in enumerate(bert.encoder.layer):
        quant = quantize_layer(layer, cal, number, x, head_dim=spec.head_dim, eps=spec.eps,
                               method=method, percentile=percentile, outliers=outliers,
                               budget=budget)
        layers.append(quant)
        x = quant.x2
    facts = {"method": method, "percentile": percentile if method == "percentile" else None,
             "sentences": cal.sentences, "tokens": cal.tokens, "outliers": outliers,
             "budget": budget}
    program = BertProgram(cfg, spec, layers, x_embed=x_embed, calibration=facts,
                          embeddings=bert.embeddings, tokenizer=tokenizer, name=name)
    program.check_fit()
    return program


# -- running ----------------------------------------------------------------------------------

def model_macs(spec, seq, batch=1):
    """The MACs of ``spec``'s encoder on ``batch`` sequences of ``seq`` tokens (the model's own,
    without the rows that channel splitting adds)."""
    return batch * seq * spec.layers * (4 * spec.hidden * spec.hidden
                                        + 2 * spec.hidden * spec.intermediate
                                        + 2 * seq * spec.hidden)


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
    return plan.m * plan.k * plan.n, plan.est_cycles


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
    ``pv``, ``w1``) carry their summed MACs and estimated cycles in ``meta["figures"]``."""
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
            base = bert._base[("pv", seq, seq, d)]
            programs[stage] = _joined(pv, [base] * (len(pv.meta["parts"])))
        else:
            program = bert.weight_program(layer, stage, m)
            if stage == "w1":
                n_out = bert.layers[layer].h.outliers.numel()
                k = bert.k["w1"]
                parts = [bert._base[("w1", m, k, bert.spec.intermediate - n_out)]]
                if n_out:
                    parts.append(bert._base[("w1_out", m, k, n_out)])
                _joined(program, parts)
            programs[stage] = program
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
    q, ops = bert.layers[layer], bert._operands[layer]
    hid, heads, d = s.hidden, s.heads, s.head_dim
    prefixes = [f"b{b}h{h}." for b in range(batch) for h in range(heads)]

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
    # (2) softmax(Q K^T) per head: B = K^T
    inputs = {}
    for number, prefix in enumerate(prefixes):
        b, h = divmod(number, heads)
        inputs[prefix + "a"] = qh[b, :, h]
        inputs[prefix + "b"] = kh[b, :, h].t()
    out = stage("qk", **inputs)
    probs = keep("qk", torch.stack([out[p + "c"] for p in prefixes]).to(torch.int8))
    # (3) P V per head
    inputs = {}
    for number, prefix in enumerate(prefixes):
        b, h = divmod(number, heads)
        inputs[prefix + "a"] = probs[number]
        inputs[prefix + "b"] = vh[b, :, h]
    out = stage("pv", **inputs)
    ctx = torch.stack([out[p + "c"] for p in prefixes]).to(torch.int8)     # (B*A, L, d)
    ctx = ctx.view(batch, heads, seq, d).permute(0, 2, 1, 3).reshape(-1, hid)
    keep("pv", ctx)
    # (4) LayerNorm(ctx Wo + bo + X)
    a = torch.cat([ctx, x], dim=1)[:, q.wo.index]
    x1 = keep("wo", stage("wo", a=a, b=ops["wo"], r=x)["c"].to(torch.int8))
    # (5) GELU(X1 W1 + b1): the outlier columns are the second GEMM
    a = x1[:, q.w1.index]
    inputs = {"main.a": a, "main.b": ops["w1_main"]}
    if q.h.outliers.numel():
        inputs.update({"out.a": a, "out.b": ops["w1_out"]})
    out = stage("w1", **inputs)
    parts = [out["main.c"]] + ([out["out.c"]] if "out.c" in out else [])
    h = torch.cat(parts, dim=1).to(torch.int8)     # kept columns, then outliers
    keep("w1", h)
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


class TextProgress:
    """A plain-text progress bar with an ETA, for :func:`run_bert`'s ``progress``.

    On a terminal the bar is redrawn in place; otherwise a line is written at every tenth of the
    work, so that logs stay readable. The ETA extrapolates the elapsed time over the fraction of
    the estimated work done.

    Parameters
    ----------
    file : text stream
        Where the bar goes (``sys.stderr`` by default).
    width : int
        Characters of the bar.
    """

    def __init__(self, file=None, *, width=30):
        import sys
        self.file = sys.stderr if file is None else file
        self.width = width
        self.start = time.monotonic()
        self.tty = bool(getattr(self.file, "isatty", lambda: False)())
        self.shown = -1

    @staticmethod
    def _clock(seconds):
        seconds = int(round(seconds))
        return f"{seconds // 60}:{seconds % 60:02d}"

    def __call__(self, done, total, label):
        fraction = min(1.0, done / total) if total else 1.0
        elapsed = time.monotonic() - self.start
        eta = elapsed * (1 - fraction) / fraction if fraction > 0 else 0.0
        filled = int(round(fraction * self.width))
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {100 * fraction:5.1f} %  "
                f"{label:<18} elapsed {self._clock(elapsed)}  ETA {self._clock(eta)}")
        if self.tty:
            end = "\n" if fraction >= 1.0 else ""
            print(f"\r{line}", end=end, file=self.file, flush=True)
        else:
            tenth = int(fraction * 10)
            if tenth > self.shown:
                self.shown = tenth
                print(line, file=self.file, flush=True)
