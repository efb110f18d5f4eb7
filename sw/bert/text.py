"""What ``bertaccel run`` does: embed text with a BERT model on a device and report it.

::

    report = run_texts("minilm", ["A sentence."], cfg=preset("8x8"), device="ref")
    print(format_report(report))

The model is compiled for the config (calibrated on the project's calibration sentences), the
texts are tokenised into one padded batch (a text longer than the model's positions is truncated,
with a warning), run on the device, and compared with FP32 PyTorch. On the RTL the same batch
also runs on the software device, and the result must be bit-exact.
"""

import time
import warnings

import torch

from .compile import compile_bert
from .load import MINILM, BertError, load_bert
from .progress import TextProgress
from .run import run_bert

__all__ = ["run_texts", "format_report", "read_text_file"]

#: Values of the embedding printed.
FIRST = 8


def read_text_file(path):
    """The texts of a file: one a line, blank lines skipped. :class:`BertError` if the file
    cannot be read."""
    try:
        with open(path, encoding="utf-8") as file:
            lines = file.read().splitlines()
    except OSError as error:
        raise BertError(f"cannot read --text-file {str(path)!r}: "
                        f"{error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise BertError(f"--text-file {str(path)!r} is not UTF-8 text: {error}") from None
    texts = [line for line in lines if line.strip()]
    if not texts:
        raise BertError(f"--text-file {str(path)!r} holds no text")
    return texts


def run_texts(model, texts, *, cfg, device="ref", build_root="build/sim", progress=None,
              warn=None):
    """Embed ``texts`` with ``model`` on ``device`` (``"ref"`` or ``"rtl"``); return a report.

    Parameters
    ----------
    model : str
        :data:`bertaccel.sw.bert.MINILM` or a local model folder.
    texts : list of str
    cfg : AccelConfig
    device : str
    build_root : path
        Where the RTL simulator builds go.
    progress : callable, optional
        :func:`run_bert`'s progress callback (for the RTL run); a :class:`TextProgress` on
        stderr when ``True``.
    warn : callable, optional
        Called with the text of every warning (a truncated text); they are raised as
        ``UserWarning`` when not given.

    Raises
    ------
    BertError
        A model that is not BERT or cannot be found, an empty text, a config that cannot hold
        one tile.
    """
    if device not in ("ref", "rtl"):
        raise BertError(f"device must be 'ref' or 'rtl', not {device!r}")
    texts = list(texts)
    if not texts:
        raise BertError("no text given")
    for number, text in enumerate(texts):         # before the model loads
        if not isinstance(text, str) or not text.strip():
            raise BertError(f"text {number} is empty" + (" (only white space)" if text else ""))
    start = time.perf_counter()
    tokenizer, float_model = load_bert(model)
    name = "all-MiniLM-L6-v2" if model == MINILM else str(model)
    bert = compile_bert(float_model, cfg, tokenizer=tokenizer, name=name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        batch = bert.encode(texts)
    for item in caught:
        if warn is None:
            warnings.warn(str(item.message), stacklevel=2)
        else:
            warn(str(item.message))
    compiled = time.perf_counter()

    from ..devices.software import SoftwareDevice
    bit_exact = None
    with SoftwareDevice(cfg) as software:
        result = reference = run_bert(software, bert, **batch)
    if device == "rtl":
        from ..devices.rtl import RtlDevice
        if progress is True:
            progress = TextProgress()
        with RtlDevice(cfg, build_root=build_root) as rtl:
            result = run_bert(rtl, bert, **batch, progress=progress)
        bit_exact = bool(torch.equal(result.hidden_int8, reference.hidden_int8))
    ran = time.perf_counter()

    with torch.no_grad():
        hidden = float_model(**batch).last_hidden_state
    mask = batch["attention_mask"]
    weights = mask.to(hidden.dtype).unsqueeze(-1)
    ref = (hidden * weights).sum(dim=1) / weights.sum(dim=1)
    cos = torch.nn.functional.cosine_similarity(result.embedding.double(), ref.double(), dim=1)

    stats = result.stats
    cycles = stats["cycles"]
    s = bert.spec
    per_text = []
    for number, text in enumerate(texts):
        vector = result.embedding[number]
        per_text.append({"text": text, "tokens": int(mask[number].sum()),
                         "norm": float(vector.norm()),
                         "first": [float(v) for v in vector[:FIRST]],
                         "cosine_fp32": float(cos[number]),
                         "embedding": [float(v) for v in vector]})
    used = cycles if cycles is not None else stats["est_cycles"]
    return {
        "model": name,
        "spec": {"layers": s.layers, "hidden": s.hidden, "heads": s.heads,
                 "intermediate": s.intermediate, "max_positions": s.max_positions},
        "config": cfg.name, "tag": cfg.tag, "clock_mhz": cfg.clock_mhz, "device": device,
        "batch": stats["batch"], "seq": stats["seq"],
        "texts": per_text,
        "cycles": cycles, "est_cycles": stats["est_cycles"],
        "ideal_cycles": stats["ideal_cycles"],
        "cycles_from": ("tiler estimate" if cycles is None else "RTL simulation"
                        if device == "rtl" else "cycle model"),
        "model_cycles": reference.stats["cycles"] if device == "rtl" else cycles,
        "utilization": stats["ideal_cycles"] / used if used else None,
        "model_utilization": stats["model_macs"] / (cfg.macs_per_cycle * used) if used
        else None,
        "latency_ms": 1e3 * used / (cfg.clock_mhz * 1e6),
        "macs": stats["macs"], "model_macs": stats["model_macs"],
        "device_calls": stats["device_calls"], "instructions": stats["instructions"],
        "data_beats": stats["data_beats"],
        "bit_exact": bit_exact,
        "quantization": bert.calibration,
        "wall_s": {"compile": compiled - start, "run": ran - compiled,
                   "total": time.perf_counter() - start},
    }


def format_report(report):
    """The report as lines of text."""
    lines = []

    def line(key, value):
        lines.append(f"{key:<13}{value}")

    s = report["spec"]
    line("model", f"{report['model']} ({s['layers']} layers, hidden {s['hidden']}, "
                  f"{s['heads']} heads, intermediate {s['intermediate']})")
    line("config", f"{report['config']} ({report['tag']})")
    line("device", report["device"])
    line("input", f"{len(report['texts'])} text(s), padded batch {report['batch']} x "
                  f"{report['seq']} tokens")
    for number, text in enumerate(report["texts"]):
        prefix = f"[{number}] " if len(report["texts"]) > 1 else ""
        first = " ".join(f"{v:+.4f}" for v in text["first"])
        line("embedding", f"{prefix}norm {text['norm']:.4f}, first {first} ...")
        line("vs FP32", f"{prefix}cosine similarity {text['cosine_fp32']:.5f} "
                        f"({text['tokens']} tokens)")
    when = report["cycles_from"]
    if report["cycles"] is None:
        line("cycles", f"- (the device does not count cycles); tiler estimate "
                       f"{report['est_cycles']:,}, ideal {report['ideal_cycles']:,}")
    elif when == "RTL simulation":
        line("cycles", f"{report['cycles']:,} on the RTL (cycle model "
                       f"{report['model_cycles']:,}, ideal {report['ideal_cycles']:,})")
    else:
        line("cycles", f"{report['cycles']:,} from the cycle model (ideal "
                       f"{report['ideal_cycles']:,}, tiler estimate {report['est_cycles']:,})")
    line("latency", f"{report['latency_ms']:.2f} ms at {report['clock_mhz']:g} MHz")
    line("utilization", f"{100 * report['utilization']:.1f} % of the MACs run, "
                        f"{100 * report['model_utilization']:.1f} % counting only the "
                        f"model's MACs")
    line("programs", f"{report['device_calls']} device calls, {report['instructions']:,} "
                     f"instructions, {report['data_beats']:,} data beats")
    wall = report["wall_s"]
    line("wall", f"{wall['total']:.1f} s (compile {wall['compile']:.1f} s, run "
                 f"{wall['run']:.1f} s)")
    if report["bit_exact"] is not None:
        lines.append(f"bit-exact with the ref device: {'yes' if report['bit_exact'] else 'NO'}")
    return "\n".join(lines)
