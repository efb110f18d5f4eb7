"""The Python API for inference over text: load a model for a config and a device, then
``encode``, in the spirit of sentence-transformers::

    from bertaccel import Encoder

    model = Encoder("minilm", config="8x8")              # compiled once, cached on disk
    emb = model.encode(["A sentence.", "Another one."], batch_size=32)
    emb.shape, emb.cycles, emb.utilization, emb.latency_s  # (2, 384) float32, and the run

Devices: ``"ref"`` (default) runs the compiled model at the tensor level
(:class:`~bertaccel.sw.bert.fast.FastModel`), bit-exact with the instruction-level software
device, which ``"isa"`` runs (instruction by instruction: the reference the RTL is checked
against); ``"rtl"`` runs the Verilated RTL and checks every batch against the fast path. Every
run reports the cycles the accelerator takes, from the cycle model (equal to the RTL's) on
``"ref"`` and ``"isa"`` and from the simulation on ``"rtl"``.

Texts are tokenised in windows, sorted by length within a window so that a batch pads little,
and the embeddings come back in input order.
"""

import math
import time

import numpy as np
import torch

from ...golden import bert_ref
from ...hw.config import AccelConfig, load_config
from .cache import CompileCache
from .compile import BertProgram, compile_bert, model_macs
from .fast import FastModel
from .load import MINILM, BertError, load_bert
from .run import run_bert
from .timing import StageTimer

__all__ = ["Encoder", "Embeddings", "RunStats", "DEVICES", "CALIBRATION",
           "check_batch_size"]

#: The devices :class:`Encoder` runs on.
DEVICES = ("ref", "isa", "rtl")
#: The calibration settings of :func:`compile_bert` that the encoder uses (and caches by).
CALIBRATION = {"method": "percentile", "percentile": 99.99, "outliers": 8, "budget": 16}


class Embeddings(np.ndarray):
    """``(texts, hidden)`` float32 sentence embeddings, with the run's figures.

    Members
    -------
    stats : dict
        ``cycles`` (accelerator cycles of every batch), ``ideal_cycles`` (MACs run over the
        array's MACs a cycle), ``model_macs``, ``utilization``, ``model_utilization``,
        ``latency_s`` (at ``cfg.clock_mhz``), ``batches``, ``tokens``, ``padded_tokens``,
        ``device``, ``wall_s``; with ``compare_fp32``, ``cosine_fp32`` (one per text).
    """

    def __new__(cls, array, stats):
        out = np.asarray(array, dtype=np.float32).view(cls)
        out.stats = stats
        return out

    def __array_finalize__(self, obj):
        self.stats = getattr(obj, "stats", {})

    def __reduce__(self):
        return np.asarray, (np.asarray(self),)

    cycles = property(lambda self: self.stats.get("cycles"))
    utilization = property(lambda self: self.stats.get("utilization"))
    latency_s = property(lambda self: self.stats.get("latency_s"))
    cosine_fp32 = property(lambda self: self.stats.get("cosine_fp32"))


def load_compiled(model, cfg, *, cache=None):
    """``(bert, float_model)``: ``model`` (:data:`MINILM` or a folder) compiled for ``cfg``,
    from ``cache`` (a :class:`CompileCache`) when it holds the entry, else compiled and kept
    there. ``cache=None`` compiles without a cache."""
    tokenizer, float_model, max_length = load_bert(model)
    name = "all-MiniLM-L6-v2" if model == MINILM else str(model)
    key = None
    if cache is not None:
        key = cache.key(bert_ref.model_path(model), cfg, CALIBRATION)
        state = cache.load(key)
        if state is not None:
            bert = BertProgram(cfg, state["spec"], state["layers"], x_embed=state["x_embed"],
                               calibration=state["calibration"],
                               embeddings=float_model.embeddings, tokenizer=tokenizer,
                               name=name, max_length=max_length)
            return bert, float_model, key
    bert = compile_bert(float_model, cfg, tokenizer=tokenizer, name=name, **CALIBRATION)
    bert.max_length = max_length
    if cache is not None:
        cache.save(key, {"spec": bert.spec, "layers": bert.layers, "x_embed": bert.x_embed,
                         "calibration": bert.calibration})
    return bert, float_model, key


class Encoder:
    """A BERT model compiled for an accelerator config, ready to embed text.

    Parameters
    ----------
    model : str or path
        ``"minilm"`` (sentence-transformers/all-MiniLM-L6-v2, shipped offline) or a local
        BERT model folder.
    config : str or AccelConfig
        A preset (``"8x8"``), a config JSON file, or a config.
    device : str
        One of :data:`DEVICES` (see the module docstring).
    cache : bool
        Keep the compiled model and the stage timings on disk (:class:`CompileCache`).
    cache_dir : path, optional
        The cache folder (:func:`~bertaccel.sw.bert.cache.default_root` by default).
    build_root : path
        Where the RTL device builds its simulator.
    max_seq_length : int, optional
        The most tokens a text keeps (longer text is truncated, with a warning); by default
        the model's own (``sentence_bert_config.json``: 256 for all-MiniLM-L6-v2, as
        sentence-transformers reads it), else its positions. Settable later, as
        ``SentenceTransformer.max_seq_length`` is.

    Raises
    ------
    BertError
        A model that is not BERT or cannot be found, a config that cannot hold one tile.
    ConfigError
        A bad config.
    CacheError
        A cache folder that cannot be written.
    """

    def __init__(self, model=MINILM, *, config="8x8", device="ref", cache=True, cache_dir=None,
                 build_root="build/sim", max_seq_length=None):
        if device not in DEVICES:
            raise BertError(f"device must be one of {', '.join(DEVICES)}, not {device!r}")
        self.cfg = config if isinstance(config, AccelConfig) else load_config(config)
        self.device = device
        self.build_root = build_root
        store = CompileCache(cache_dir).check() if cache else None
        self.bert, self.float_model, key = load_compiled(model, self.cfg, cache=store)
        if max_seq_length is not None:
            self.max_seq_length = max_seq_length
        self.fast = FastModel(self.bert)
        self.timer = StageTimer(self.bert, store.timings(key) if store else None)
        self._device = None

    @property
    def hidden(self):
        return self.bert.spec.hidden

    @property
    def max_seq_length(self):
        """The most tokens a text keeps (see the class's parameter)."""
        return self.bert.seq_limit

    @max_seq_length.setter
    def max_seq_length(self, length):
        self.bert.max_length = self.bert.check_length(length)

    def __repr__(self):
        return f"<Encoder {self.bert.name} on {self.cfg.name} ({self.cfg.tag}), {self.device}>"

    # -- one batch ----------------------------------------------------------------------------

    def _backend(self):
        if self._device is None and self.device != "ref":
            if self.device == "isa":
                from ..devices.software import SoftwareDevice
                self._device = SoftwareDevice(self.cfg)
            else:
                from ..devices.rtl import RtlDevice
                self._device = RtlDevice(self.cfg, build_root=self.build_root)
        return self._device

    def start_device(self, log=None):
        """Start the device behind the encoder now, ``log`` announcing what takes long: the
        RTL simulator is built on first use (minutes, then cached), announced before the build
        begins and timed after it (:func:`~bertaccel.sw.devices.base.start_announced`)."""
        from ..devices.base import start_announced
        device = self._backend()
        return device if device is None else start_announced(device, log)

    def run_batch(self, batch, progress=None):
        """Run one tokenised batch (``input_ids``, ``attention_mask``, ``token_type_ids``):
        ``(embeddings (B, hidden) float32, int8 last hidden state (B, L, hidden), stats)``.

        ``progress(fraction)``, on the ``"isa"`` and ``"rtl"`` devices, after every device
        call: the fraction of the batch's estimated work done."""
        bert = self.bert
        ids, types = batch["input_ids"], batch["token_type_ids"]
        mask = batch["attention_mask"].bool()
        batch_size, seq = ids.shape
        if self.device == "ref":
            x = self.fast.encoder(bert.embed_input(ids, types), mask)
            hidden_int8 = x.view(batch_size, seq, bert.spec.hidden)
            cycles, _ = self.timer.model(batch_size, seq)
            stats = {"cycles": cycles, "bit_exact": None}
        else:
            within = None if progress is None else (lambda done, total, _: progress(done / total))
            result = run_bert(self._backend(), bert, **batch, progress=within)
            hidden_int8, stats = result.hidden_int8, {"cycles": result.stats["cycles"]}
            stats["bit_exact"] = None
            if self.device == "rtl":
                fast = self.fast.encoder(bert.embed_input(ids, types), mask)
                stats["bit_exact"] = bool(torch.equal(fast.view_as(hidden_int8), hidden_int8))
        hidden = bert.layers[-1].x2.dequantize(hidden_int8).float()
        return bert_ref.mean_pool(hidden, mask), hidden_int8, stats

    # -- many texts ---------------------------------------------------------------------------

    def tokenize(self, texts):
        """Token ids of each text (``list of list of int``), truncated to what the model and
        the config take (with a ``UserWarning`` naming the text).

        Raises
        ------
        BertError
            A text that is not a str, is empty, or holds nothing but white space and control
            characters (it would embed only the special tokens).
        """
        return self.bert.token_ids(texts)

    def batches(self, ids, batch_size):
        """Cut token-id lists into padded batches, shortest first: ``[(positions, batch)]``
        where ``positions`` are the indices into ``ids`` of the batch's rows."""
        order = sorted(range(len(ids)), key=lambda i: (len(ids[i]), i))
        out = []
        for lo in range(0, len(order), batch_size):
            rows = order[lo:lo + batch_size]
            out.append((rows, self.bert.pad([ids[i] for i in rows])))
        return out

    def encode(self, texts, *, batch_size=32, compare_fp32=False, progress=None):
        """Sentence embeddings of ``texts`` (a str or a list of str), in input order.

        Parameters
        ----------
        texts : str or list of str
        batch_size : int
            Texts a batch (sorted by length, so that a batch pads little).
        compare_fp32 : bool
            Also run the FP32 model and put each text's cosine similarity in
            ``stats["cosine_fp32"]``.
        progress : callable, optional
            ``progress(done_texts, total_texts)`` after every batch.

        Returns
        -------
        Embeddings
            ``(len(texts), hidden)`` float32, with the run's figures in ``.stats``.
        """
        if isinstance(texts, str):
            texts = [texts]
        check_batch_size(batch_size)
        run = RunStats(self)
        ids = self.tokenize(list(texts))
        out = np.empty((len(ids), self.hidden), dtype=np.float32)
        cosines = np.empty(len(ids)) if compare_fp32 else None
        for rows, batch in self.batches(ids, batch_size):
            emb = run.batch(batch)
            out[rows] = emb.numpy()
            if compare_fp32:
                cosines[rows] = self.cosine_fp32(batch, emb).numpy()
            if progress is not None:
                progress(run.texts, len(ids))
        stats = run.finish()
        if compare_fp32:
            stats["cosine_fp32"] = cosines.tolist()
        return Embeddings(out, stats)

    def cosine_fp32(self, batch, emb):
        """Cosine similarity of ``emb`` with the FP32 model's embedding of ``batch``."""
        hidden = bert_ref.forward(self.float_model, batch["input_ids"], batch["attention_mask"],
                                  batch["token_type_ids"])
        ref = bert_ref.mean_pool(hidden, batch["attention_mask"])
        return torch.nn.functional.cosine_similarity(emb.double(), ref.double(), dim=1)

    def close(self):
        """Stop the device behind the encoder (the RTL simulator), if any."""
        if self._device is not None:
            self._device.close()
            self._device = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()
        return False


def check_batch_size(batch_size):
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise BertError(f"batch_size must be an int of at least 1, not {batch_size!r}")


class RunStats:
    """The figures of one run of many batches: cycles, MACs, tokens, wall time."""

    def __init__(self, encoder):
        self.encoder = encoder
        self.start = time.perf_counter()
        self.cycles = self.macs = self.model_macs = 0
        self.batches = self.texts = self.tokens = self.padded = 0
        self.bit_exact = None

    def batch(self, batch, progress=None):
        """Run one batch on the encoder and count it; its embeddings (``progress``: see
        :meth:`Encoder.run_batch`)."""
        emb, _, stats = self.encoder.run_batch(batch, progress)
        self.count(batch, stats)
        return emb

    def count(self, batch, stats):
        """Count one batch that :meth:`Encoder.run_batch` ran, with its ``stats``."""
        size, seq = batch["input_ids"].shape
        spec = self.encoder.bert.spec
        self.cycles += stats["cycles"]
        self.macs += _macs_run(self.encoder.bert, size, seq)
        self.model_macs += model_macs(spec, seq, size)
        self.batches += 1
        self.texts += size
        self.tokens += int(batch["attention_mask"].sum())
        self.padded += size * seq
        if stats["bit_exact"] is not None:
            self.bit_exact = stats["bit_exact"] and self.bit_exact is not False

    def finish(self):
        cfg = self.encoder.cfg
        ideal = math.ceil(self.macs / cfg.macs_per_cycle)
        cycles = self.cycles
        return {
            "device": self.encoder.device, "config": cfg.label, "tag": cfg.tag,
            "cycles": cycles, "ideal_cycles": ideal, "macs": self.macs,
            "model_macs": self.model_macs,
            "utilization": ideal / cycles if cycles else None,
            "model_utilization": self.model_macs / (cfg.macs_per_cycle * cycles)
            if cycles else None,
            "latency_s": cycles / (cfg.clock_mhz * 1e6), "clock_mhz": cfg.clock_mhz,
            "batches": self.batches, "texts": self.texts, "tokens": self.tokens,
            "padded_tokens": self.padded, "bit_exact": self.bit_exact,
            "wall_s": time.perf_counter() - self.start,
        }


def _macs_run(bert, batch, seq):
    """The MACs the stage programs run for ``batch`` sequences of ``seq`` tokens: the model's,
    plus the rows that channel splitting adds and P V's second digit plane."""
    s = bert.spec
    columns = {"qkv": 3 * s.hidden, "wo": s.hidden, "w1": s.intermediate, "w2": s.hidden}
    weights = batch * seq * sum(bert.depth(layer, stage)[0] * n for layer in range(s.layers)
                                for stage, n in columns.items())
    # Q K^T once, P V twice (its two digit planes).
    attention = 3 * batch * s.heads * seq * seq * s.head_dim
    return weights + s.layers * attention

