"""Real BERT models on the accelerator: the compiler, and running it.

::

    bert = compile_bert("minilm", preset("8x8"))            # calibrate, quantise, check fit
    batch = bert.encode(["A sentence.", "Another, longer sentence."])
    with SoftwareDevice(bert.cfg) as device:
        result = run_bert(device, bert, **batch)
    result.embedding, result.last_hidden_state, result.stats["cycles"]

Where each op runs (per encoder layer, on ``B x L`` tokens, ``H`` hidden, ``A`` heads of ``d``,
``I`` intermediate; ``K'`` is a GEMM depth with the few rows that channel splitting adds, see
:mod:`bertaccel.sw.bert.quant`):

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
(2) S = Q_bh K_bh^T, scale, mask, softmax accelerator: per sequence, one batch of ``A`` GEMMs
                                          ``L x d x L`` (the heads), the ``B`` batches joined
                                          into one program, fused SOFTMAX (scale ``s_q s_k /
                                          sqrt d``, the attention mask as the PMEM mask)
(3) context_bh = P_bh V_bh                accelerator: per sequence, one batch of ``A`` GEMMs
                                          ``L x 2L x d``, joined,
                                          fused REQUANT: the 12-bit probabilities as two int8
                                          digit planes ``[P_high | P_low]`` times ``[V; V]``,
                                          the high plane's products shifted (``k_high = L``)
join heads                                host
(4) LayerNorm(ctx Wo + bo + X)            accelerator: GEMM ``BL x K' x H``, fused LAYERNORM
                                          with the residual X
(5) GELU(X1 W1 + b1)                      accelerator: GEMM ``BL x K' x I``, fused GELU; the
                                          ``o`` outlier columns last, with their own output
                                          scale (a ``Tail``: their strips stored again)
(6) LayerNorm(H W2 + b2 + X1)             accelerator: GEMM ``BL x K' x H``, fused LAYERNORM
                                          with the residual X1
dequantise the last layer, mean pool      host, float32 (attention-masked mean)
========================================  ====================================================

Between the stages the host only moves data: it slices heads, transposes K, joins heads, cuts
the 12-bit probabilities into their two 6-bit digits (:func:`bertaccel.golden.intops.
prob_digits`), and gathers the columns of each GEMM's A operand (``A' = [sources][:, index]``:
channel splitting repeats a few columns). Every add, multiply, scale, bias, mask, exponential,
normalisation and GELU of an encoder layer runs on the accelerator.

Each stage is one compiled program (stages 2 and 3 join their GEMMs with
:func:`bertaccel.sw.sequence.concat`), so a layer is six device calls. A sequence's heads are one
batched GEMM (``batch`` of :func:`~bertaccel.sw.tiler.compile_gemm`): the heads overlap their
loads, compute and drains as tiles of one GEMM do, where joined GEMMs would run each in turn.
Every program is tiled for the device's :class:`~bertaccel.hw.config.AccelConfig` by
:func:`compile_gemm`: a model larger than the memories streams through them. The quantisation
scheme is in :mod:`bertaccel.sw.bert.quant` and docs/bert.md.

Errors are :class:`BertError` (a ``ValueError``) with a message that names the problem: a model
that is not BERT, a missing model folder, an empty text, a sequence longer than the model's
positions (:meth:`BertProgram.encode` truncates with a warning instead), and a config that cannot
hold one tile of some stage.
"""

import dataclasses
import os
import warnings

import torch

from ...golden.intops import MAX_ROW
from ...hw.config import AccelConfig
from ..epilogue import Requant, Softmax, Tail
from ..program import ProgramError
from ..sequence import concat
from ..tiler import compile_gemm, plan_gemm, rebind
from .load import MINILM, BertError, BertSpec, bert_model, check_tokens, load_bert
from .quant import BUDGET, OUTLIERS, act_quant, calibrate, quantize_layer

__all__ = ["BertProgram", "compile_bert", "model_macs", "stage_macs", "STAGES",
           "WEIGHT_STAGES"]

#: The stages of an encoder layer, in order.
STAGES = ("qkv", "qk", "pv", "wo", "w1", "w2")
#: The stages whose B operand is a weight matrix.
WEIGHT_STAGES = ("qkv", "wo", "w1", "w2")

_STAGE_TEXT = {
    "qkv": "Q, K, V projections + bias, per-channel requantise",
    "qk": "per-head Q K^T, scale, mask, softmax",
    "pv": "per-head P V, requantise",
    "wo": "output projection + bias + residual, LayerNorm",
    "w1": "FFN1 + bias, GELU",
    "w2": "FFN2 + bias + residual, LayerNorm",
}


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
        The quantised layers. With :attr:`one_depth`, every layer's B operand of a stage has
        the same rows (``k``); without, each layer keeps its own (:meth:`depth`).
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
        that channel splitting adds: the deepest layer's (every layer's with
        :attr:`one_depth`).
    k_high : dict
        The high rows of each weight stage's depth (the digits of split rows, see
        :func:`bertaccel.sw.bert.quant.split_rows`), the most of any layer.
    max_seq : int
        The longest sequence the config and the model take.
    max_length : int or None
        The most tokens a text keeps by the model's own word (sentence-transformers'
        ``max_seq_length``, 256 for all-MiniLM-L6-v2); ``None``: the model's positions.
        Settable, as ``SentenceTransformer.max_seq_length`` is; :attr:`seq_limit` is what
        applies.
    """

    #: Pad every layer of a weight stage to the deepest layer's depth: one GEMM shape a stage,
    #: compiled once and rebound to each layer's epilogue. Worth it where the layers' depths
    #: differ by a few split rows; a class whose layers differ by more keeps each its own.
    one_depth = True

    def __init__(self, cfg, spec, layers, *, x_embed, calibration, embeddings, tokenizer=None,
                 name="bert", max_length=None):
        self.cfg = cfg
        self.spec = spec
        self.x_embed = x_embed
        self.calibration = calibration
        self.embeddings = embeddings
        self.tokenizer = tokenizer
        self.name = name
        self.k_high = {stage: max(getattr(layer, stage).k_high for layer in layers)
                       for stage in WEIGHT_STAGES}
        self.k = {stage: self.k_high[stage] + max(getattr(layer, stage).k
                                                  - getattr(layer, stage).k_high
                                                  for layer in layers)
                  for stage in WEIGHT_STAGES}
        self.layers = list(layers)
        if self.one_depth:
            self.layers = [dataclasses.replace(layer, **{
                stage: getattr(layer, stage).padded(self.k_high[stage], k)
                for stage, k in self.k.items()}) for layer in self.layers]
        self.operands = [self._layer_operands(number, layer)
                         for number, layer in enumerate(self.layers)]
        self._base = {}       # (stage, m, k, n) -> the first program compiled for that shape
        self._programs = {}   # (layer, stage, m) -> Program
        self._programs_m = None
        self.max_seq = self._longest_sequence()
        self.max_length = max_length

    @property
    def seq_limit(self):
        """The most tokens a text keeps: :attr:`max_length` (or the model's positions), at
        most :attr:`max_seq`."""
        own = self.spec.max_positions if self.max_length is None else self.max_length
        return min(own, self.max_seq)

    def check_length(self, length):
        """``length`` as a text limit: :class:`BertError` unless it is an int from 3 (the two
        special tokens and one of the text) to :attr:`max_seq` (at most the model's
        positions)."""
        if isinstance(length, bool) or not isinstance(length, int) \
                or not 3 <= length <= self.max_seq:
            why = ("the model's max_position_embeddings" if self.max_seq == self.spec.max_positions
                   else "the longest sequence whose softmax rows fit the accumulator")
            raise BertError(f"max_seq_length must be an int from 3 to {self.max_seq} "
                            f"({self.name} on {self.cfg.name}: {why}), not {length!r}")
        return length

    def __repr__(self):
        s = self.spec
        return (f"<BertProgram {self.name}: {s.layers} layers, hidden {s.hidden}, {s.heads} "
                f"heads, intermediate {s.intermediate}; for {self.cfg.name} ({self.cfg.tag})>")

    def depth(self, layer, stage):
        """``(k, k_high)``: the GEMM depth of weight stage ``stage`` of ``layer`` (with the
        rows that channel splitting adds) and its high rows."""
        split = getattr(self.layers[layer], stage)
        return split.k, split.k_high

    def _layer_operands(self, number, layer):
        """The B operands of layer ``number`` (its padded :class:`QuantLayer` ``layer``) by
        name: ``qkv``, ``wo``, ``w1`` (the kept columns, then the outlier columns of ``H``) and
        ``w2``."""
        return {"qkv": layer.qkv.b, "wo": layer.wo.b, "w2": layer.w2.b,
                "w1": layer.w1.b[:, layer.h_order].contiguous()}

    # -- what runs where ----------------------------------------------------------------------

    def describe(self):
        """The stages of a layer, one line each, with their GEMM shapes for ``B x L`` tokens
        (the deepest layer's depths)."""
        s, k = self.spec, self.k
        n_out = max(layer.h.outliers.numel() for layer in self.layers)
        rows = [("qkv", f"BL x {k['qkv']} x {3 * s.hidden}"),
                ("qk", f"{s.heads}B x (L x {s.head_dim} x L)"),
                ("pv", f"{s.heads}B x (L x 2L x {s.head_dim})"),
                ("wo", f"BL x {k['wo']} x {s.hidden}"),
                ("w1", f"BL x {k['w1']} x ({s.intermediate - n_out} + {n_out})"),
                ("w2", f"BL x {k['w2']} x {s.hidden}")]
        return [f"({n + 1}) {stage:<4}{shape:<28}{_STAGE_TEXT[stage]}"
                for n, (stage, shape) in enumerate(rows)]

    # -- compiling ---------------------------------------------------------------------------

    def _compile(self, stage, m, k, n, epilogue, what, k_high=0, batch=1):
        """The program of a ``m x k x n`` GEMM with ``epilogue`` (and ``k_high`` high rows), a
        batch of ``batch``: compiled once per shape, then rebound to the other layers'
        epilogues."""
        key = (stage, m, k, n)
        base = self._base.get(key)
        try:
            if base is None:
                base = self._base[key] = compile_gemm(self.cfg, m, k, n, epilogue=epilogue,
                                                      k_high=k_high, batch=batch)
                return base
            return rebind(base, epilogue, k, n) or compile_gemm(
                self.cfg, m, k, n, epilogue=epilogue, k_high=k_high, batch=batch)
        except ProgramError as error:
            shape = f"{m} x {k} x {n}" if batch == 1 else f"{batch} x {m} x {k} x {n}"
            raise BertError(f"{self.name} on {self.cfg.name} ({self.cfg.tag}): {what} "
                            f"({shape}): {error}") from None

    def stage_gemms(self, layer, stage, mask):
        """The GEMMs of stage ``stage`` of ``layer`` for a batch with the valid-token ``mask``
        (``(B, L)`` bool), in program order: ``[(name, m, k, n, epilogue, k_high, batch),
        ...]`` (``batch``: that many GEMMs of the shape as one, see
        :func:`~bertaccel.sw.tiler.compile_gemm`). The stage's program is their
        :func:`~bertaccel.sw.sequence.concat` for ``qk`` and ``pv``, the one GEMM for the
        others (:meth:`epilogue`). ``qk`` and ``pv`` have one batch of the heads per sequence.
        ``pv`` is ``L x 2L x d`` with ``k_high = L`` (the probabilities' two digit planes). The
        weight stages read only the token count ``B * L``."""
        batch, seq = mask.shape
        if stage in ("qk", "pv"):
            return self._attention_gemms(layer, stage, mask)
        return self._weight_gemms(layer, stage, batch * seq)

    def _weight_gemms(self, layer, stage, m):
        s, q, (k, high) = self.spec, self.layers[layer], self.depth(layer, stage)
        n = {"qkv": 3 * s.hidden, "w1": s.intermediate}.get(stage, s.hidden)
        return [(stage, m, k, n, self.epilogue(layer, stage), high, 1)]

    def epilogue(self, layer, stage):
        """The epilogue of weight stage ``stage`` of ``layer``; ``w1``'s a
        :class:`~bertaccel.sw.epilogue.Tail` when ``H`` has outlier columns (they come last,
        with their own output scale)."""
        q = self.layers[layer]
        if stage == "w1":
            n_out = q.h.outliers.numel()
            return Tail(q.w1_ep, q.w1_out_ep, n_out) if n_out else q.w1_ep
        return {"qkv": q.qkv_ep, "wo": q.wo_ep, "w2": q.w2_ep}[stage]

    def _attention_gemms(self, layer, stage, mask):
        s, q = self.spec, self.layers[layer]
        batch, seq = mask.shape
        d = s.head_dim
        if stage == "pv":
            # The probabilities' two digit planes [P_high | P_low] times [V; V].
            return [("pv", seq, 2 * seq, d, q.pv_ep, seq, s.heads)] * batch
        return [("qk", seq, d, seq, Softmax(in_scale=q.qk_scale, mask=~mask[b].numpy()), 0,
                 s.heads) for b in range(batch)]

    def _compile_all(self, layer, stage, gemms):
        """The programs of ``gemms``: each distinct GEMM (its name, shape and epilogue
        object) compiled once."""
        what = f"layer {layer} stage {stage}"
        programs, last = [], None
        for name, m, k, n, epilogue, k_high, batch in gemms:
            if last is None or last[0] != (name, m, k, n, id(epilogue)):
                last = ((name, m, k, n, id(epilogue)),
                        self._compile(name, m, k, n, epilogue, what, k_high, batch))
            programs.append(last[1])
        return programs

    def weight_program(self, layer, stage, m):
        """The program of weight stage ``stage`` (``"qkv"``, ``"wo"``, ``"w1"``, ``"w2"``) of
        ``layer`` for ``m`` tokens: inputs ``a``, ``b`` and, with LayerNorm, ``r``."""
        if self._programs_m != m:      # keep the programs of one token count only
            self._programs.clear()
            self._base = {key: p for key, p in self._base.items() if key[0] in ("qk", "pv")}
            self._programs_m = m
        key = (layer, stage, m)
        program = self._programs.get(key)
        if program is not None:
            return program
        program, = self._compile_all(layer, stage, self._weight_gemms(layer, stage, m))
        self._programs[key] = program
        return program

    def attention_programs(self, layer, mask):
        """The programs of stages ``qk`` and ``pv`` of ``layer`` for a batch with ``mask``
        (``(B, L)`` bool, True on valid tokens), each the sequences' batches of heads joined:
        ``(qk, pv, prefixes)``. Sequence ``b``'s inputs and output are prefixed
        ``prefixes[b]``, its heads stacked along their rows (head ``h``'s ``a`` rows
        ``h * L ...``)."""
        batch, _ = mask.shape
        prefixes = [f"b{b}." for b in range(batch)]
        return tuple(concat(self._compile_all(layer, stage,
                                              self._attention_gemms(layer, stage, mask)),
                            prefixes=prefixes) for stage in ("qk", "pv")) + (prefixes,)

    def _longest_sequence(self):
        """The longest sequence whose attention stages fit the config (at most the model's
        positions and the hardware's softmax row)."""
        top = min(self.spec.max_positions, MAX_ROW)
        d = self.spec.head_dim

        def fits(seq):
            try:
                plan_gemm(self.cfg, 1, d, seq, epilogue=Softmax(in_scale=1.0))
                plan_gemm(self.cfg, 1, 2 * seq, d, epilogue=Requant(scale=1.0), k_high=seq)
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
        for stage, kk, n in (("qkv", k["qkv"], 3 * s.hidden), ("wo", k["wo"], s.hidden),
                             ("w1", k["w1"], s.intermediate), ("w2", k["w2"], s.hidden)):
            why = self._why(1, kk, n, self.epilogue(0, stage), self.k_high[stage])
            if why:
                raise BertError(f"the {cfg.name} config ({cfg.tag}) cannot run {self.name}: "
                                f"stage {stage} ({_STAGE_TEXT[stage]}, 1 x {kk} x {n}): {why}")

    def _why(self, m, k, n, epilogue, k_high=0):
        try:
            plan_gemm(self.cfg, m, k, n, epilogue=epilogue, k_high=k_high)
        except ProgramError as error:
            return str(error)
        return ""

    # -- inputs --------------------------------------------------------------------------------

    def encode(self, texts, *, max_length=None):
        """Tokenise ``texts`` into one padded batch for :func:`run_bert`: :meth:`pad` of
        :meth:`token_ids`.

        Returns
        -------
        dict
            ``input_ids``, ``attention_mask``, ``token_type_ids``: ``(B, L)`` int64 tensors.
        """
        return self.pad(self.token_ids(texts, max_length=max_length))

    def token_ids(self, texts, *, max_length=None):
        """The token ids of each text, with the special tokens (``list of list of int``).

        Text longer than :attr:`seq_limit` (``max_length`` when given and smaller) is
        truncated, with a ``UserWarning`` that says which text and how long it was.

        Raises
        ------
        BertError
            If there is no tokenizer, no text, or a text is not a str, is empty, or holds
            nothing the vocabulary keeps (white space and control characters only): such a
            text would embed nothing but the special tokens, and is refused like empty text.
        """
        texts = [texts] if isinstance(texts, str) else list(texts)
        ids = self._checked_ids(texts)
        limit = self.seq_limit if max_length is None else min(self.seq_limit, max_length)
        long = [number for number, row in enumerate(ids) if len(row) > limit]
        if long:
            cut = self.tokenizer([texts[i] for i in long], truncation=True, max_length=limit,
                                 verbose=False)["input_ids"]
            why = ("max_length" if max_length is not None and limit == max_length
                   else "max_seq_length" if limit == self.max_length
                   else "the model's max_position_embeddings"
                   if limit == self.spec.max_positions
                   else f"the longest sequence on {self.cfg.name}")
            for number, row in zip(long, cut):
                warnings.warn(f"text {number} has {len(ids[number])} tokens, more than {limit} "
                              f"({why}); it is truncated to {limit} tokens", stacklevel=3)
                ids[number] = row
        return ids

    def _checked_ids(self, texts):
        """The token ids of ``texts`` (a list), untruncated, after the checks of
        :meth:`token_ids`."""
        if self.tokenizer is None:
            raise BertError(f"{self.name} has no tokenizer: give input_ids to run_bert")
        if not texts:
            raise BertError("no text given")
        for number, text in enumerate(texts):
            if not isinstance(text, str):
                raise BertError(f"text {number} is a {type(text).__name__}, not a str")
            if not text.strip():
                raise BertError(f"text {number} is empty" + (" (only white space)" if text
                                                              else ""))
        return check_tokens(self.tokenizer, texts)

    def encode_pairs(self, pairs, *, max_length=None):
        """Tokenise text pairs ``[(first, second), ...]`` into one padded batch, as a
        cross-encoder reads them: ``[CLS] first [SEP] second [SEP]``, ``token_type_ids`` 1 on
        the second segment where the tokenizer gives them (0 elsewhere), the longer text
        trimmed first to :attr:`seq_limit` (``max_length`` when given and smaller).

        Raises
        ------
        BertError
            As :meth:`token_ids`, for either text of a pair.
        """
        pairs = [tuple(pair) for pair in pairs]
        if any(len(pair) != 2 for pair in pairs):
            raise BertError("a pair is two texts: (first, second)")
        firsts, seconds = [p[0] for p in pairs], [p[1] for p in pairs]
        self._checked_ids(firsts)
        self._checked_ids(seconds)
        limit = self.seq_limit if max_length is None else min(self.seq_limit, max_length)
        batch = dict(self.tokenizer(firsts, seconds, padding=True, truncation="longest_first",
                                    max_length=limit, return_tensors="pt"))
        batch.setdefault("token_type_ids", torch.zeros_like(batch["input_ids"]))
        return {name: batch[name].long() for name in ("input_ids", "attention_mask",
                                                      "token_type_ids")}

    def pad(self, ids):
        """One batch of the token-id lists ``ids``, padded on the right: ``input_ids``,
        ``attention_mask``, ``token_type_ids`` (zeros), ``(B, L)`` int64 tensors."""
        seq = max(len(row) for row in ids)
        pad = self.tokenizer.pad_token_id if self.tokenizer is not None else 0
        input_ids = torch.full((len(ids), seq), pad, dtype=torch.int64)
        attention_mask = torch.zeros((len(ids), seq), dtype=torch.int64)
        for number, row in enumerate(ids):
            input_ids[number, :len(row)] = torch.as_tensor(row, dtype=torch.int64)
            attention_mask[number, :len(row)] = 1
        return {"input_ids": input_ids, "attention_mask": attention_mask,
                "token_type_ids": torch.zeros_like(input_ids)}

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
        How a range is taken from the calibration (:func:`bertaccel.sw.bert.quant.tensor_range`).
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
    max_length = None
    if isinstance(model, (str, os.PathLike)):
        label = str(model)
        tok, model, max_length = load_bert(model)
        tokenizer = tokenizer or tok
        name = name or ("all-MiniLM-L6-v2" if label == MINILM else label)
    bert = bert_model(model)
    spec = BertSpec.from_config(bert.config)
    name = name or getattr(bert.config, "name_or_path", "") or "bert"
    bert = bert.eval()

    if calibration is None:
        if tokenizer is None:
            raise BertError("calibration needs sample text and a tokenizer, or tokenised "
                            "batches (calibration=[{'input_ids': ..., 'attention_mask': ...}])")
        from ...golden.sentences import calibration_sentences
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

    ln = getattr(bert.embeddings, "LayerNorm", None)    # none after a projection (ELECTRA)
    x = x_embed = act_quant(cal.site(-1, "x2"), outliers=outliers, method=method,
                            percentile=percentile,
                            beta=None if ln is None else ln.bias.detach().double(),
                            what="the embeddings")
    layers = []
    for number, layer in enumerate(bert.encoder.layer):
        quant = quantize_layer(layer, cal, number, x, head_dim=spec.head_dim, eps=spec.eps,
                               method=method, percentile=percentile, outliers=outliers,
                               budget=budget, tile=cfg.rows)
        layers.append(quant)
        x = quant.x2
    facts = {"method": method, "percentile": percentile if method == "percentile" else None,
             "sentences": cal.sentences, "tokens": cal.tokens, "outliers": outliers,
             "budget": budget}
    program = BertProgram(cfg, spec, layers, x_embed=x_embed, calibration=facts,
                          embeddings=bert.embeddings, tokenizer=tokenizer, name=name,
                          max_length=max_length)
    program.check_fit()
    return program


def stage_macs(spec, seq, batch=1):
    """The MACs of each stage of one encoder layer of ``spec`` on ``batch`` sequences of ``seq``
    tokens (the model's own: no rows that channel splitting adds, P V once), ``{stage:
    macs}`` in :data:`STAGES` order."""
    tokens, h, i = batch * seq, spec.hidden, spec.intermediate
    return {"qkv": tokens * h * 3 * h, "qk": tokens * seq * h, "pv": tokens * seq * h,
            "wo": tokens * h * h, "w1": tokens * h * i, "w2": tokens * i * h}


def model_macs(spec, seq, batch=1):
    """The MACs of ``spec``'s encoder on ``batch`` sequences of ``seq`` tokens (the model's own,
    without the rows that channel splitting adds): :func:`stage_macs` over every layer."""
    return spec.layers * sum(stage_macs(spec, seq, batch).values())
