"""What ``bertaccel run`` does: embed texts with a BERT model on a device and report the run.

::

    report = run_texts("minilm", texts=["A sentence."], cfg=preset("8x8"), device="ref")
    print(format_report(report))

The model is compiled for the config (or read from the compile cache), the texts run in sorted
batches through an :class:`~bertaccel.sw.bert.encoder.Encoder`, and each embedding is compared
with FP32 PyTorch. Texts come from the command line or, streamed, from a file
(:mod:`bertaccel.sw.bert.stream`); embeddings go into the report or, streamed, to a file.
"""

import time

from ...golden import bert_ref, kernels
from ..budget import bert_memory, check_memory
from .cache import CompileCache
from .encoder import Encoder
from .load import BertError, check_model, check_tokens
from .stream import EmbeddingWriter, TextFile, check_output, windows, encode_stream

__all__ = ["run_texts", "format_report", "read_text_file", "check_texts", "SHOWN"]

#: Values of an embedding that the text report shows; texts it shows one by one.
FIRST = 8
SHOWN = 8


def read_text_file(path):
    """The texts of a file, one a line, blank lines skipped (see
    :class:`~bertaccel.sw.bert.stream.TextFile`)."""
    return [text for _, text in TextFile(path).texts()]


def check_texts(texts):
    """Refuse an empty list or an empty text, before the model loads."""
    if not texts:
        raise BertError("no text given")
    for number, text in enumerate(texts):
        if not isinstance(text, str) or not text.strip():
            raise BertError(f"text {number} is empty" + (" (only white space)" if text else ""))


def run_texts(model, *, cfg, texts=None, text_file=None, device="ref", batch_size=32,
              output=None, compare_fp32=True, cache=True, cache_dir=None,
              build_root="build/sim", progress=None, log=None, stream=None,
              max_memory=None, max_seq_length=None):
    """Embed ``texts`` (a list) or the texts of ``text_file`` with ``model`` on ``device``;
    return a report (a JSON-able dict).

    Parameters
    ----------
    model : str
        ``"minilm"`` or a local model folder.
    cfg : AccelConfig
    texts : list of str, optional
    text_file : path, optional
        One text a line (read after ``texts``).
    device : str
        ``"ref"``, ``"isa"`` or ``"rtl"`` (see :mod:`bertaccel.sw.bert.encoder`).
    batch_size : int
    output : path, optional
        Write the embeddings there (``.npy`` or ``.jsonl``) instead of into the report.
    compare_fp32 : bool
        Compare each embedding with the FP32 model's.
    cache, cache_dir, build_root
        See :class:`~bertaccel.sw.bert.encoder.Encoder`.
    progress : callable, optional
        ``progress(done, total)`` after every batch.
    log : callable, optional
        ``log(text)`` for what happens before the run (compiling, building the simulator).
    stream : callable, optional
        What embeds the texts: :func:`~bertaccel.sw.bert.stream.encode_stream` by default;
        :class:`bertaccel.cluster.shard.ShardedStream` shares the windows out over Ray.
    max_memory : int, optional
        Bytes the run may take (by default what the machine has available): a run estimated
        to need more (:func:`~bertaccel.sw.budget.bert_memory` of its largest batch) is
        refused after the model is compiled, before the device starts.
    max_seq_length : int, optional
        The most tokens a text keeps (see :class:`~bertaccel.sw.bert.encoder.Encoder`).

    Raises
    ------
    BertError
        Bad input, found before the model loads: no text, an empty text, an unreadable or
        binary text file, an output path that cannot be written.
    BudgetError
        The run needs more memory than ``max_memory`` or the machine has.
    """
    start = time.perf_counter()
    texts = list(texts or [])
    if texts:
        check_texts(texts)
    source = TextFile(text_file) if text_file is not None else None
    if not texts and source is None:
        raise BertError("give the text to embed with --text or --text-file")
    if output is not None:
        check_output(output)
    total = len(texts) + (source.count if source else 0)
    check_model(model)
    try:
        tokenizer = bert_ref.load_tokenizer(model)
    except bert_ref.ModelError as error:
        raise BertError(str(error)) from None
    longest = max((len(row) for row in check_tokens(tokenizer, texts)), default=0)
    if source is not None:
        longest = max(longest, _check_file_tokens(tokenizer, source))
    if cache:
        CompileCache(cache_dir).check()
    if log:
        log(f"compiling {model} for {cfg.label} (or reading it from the compile cache)")
    encoder = Encoder(model, config=cfg, device=device, cache=cache, cache_dir=cache_dir,
                      build_root=build_root, max_seq_length=max_seq_length)
    loaded = time.perf_counter()
    with encoder:
        _check_memory(encoder, min(batch_size, total), longest, max_memory)
        encoder.start_device(log)
        if hasattr(progress, "restart"):
            progress.restart()      # the ETA counts the run, not the build before it
        report = _run(encoder, texts, source, total, batch_size=batch_size, output=output,
                      compare_fp32=compare_fp32, progress=progress,
                      stream=stream or encode_stream)
    report["blank_lines"] = source.blank if source else 0
    report["wall_s"] = {"load": loaded - start, "run": time.perf_counter() - loaded,
                        "total": time.perf_counter() - start}
    return report


def _check_file_tokens(tokenizer, source, window=1024):
    """Refuse a line of ``source`` that tokenises to nothing, naming it, before any work;
    return the most tokens a line has."""
    longest = 0
    for chunk in windows(source.texts(), window):
        ids = check_tokens(tokenizer, [text for _, text in chunk],
                           names=[f"--text-file {str(source.path)!r} line {line}"
                                  for line, _ in chunk])
        longest = max(longest, max(len(row) for row in ids))
    return longest


def _check_memory(encoder, batch, longest, limit):
    """Refuse a run whose largest batch (``batch`` texts of the ``longest`` text's tokens, as
    far as the model takes them) needs more memory than it may have. The ref device compiles
    one layer's programs at a time to count the cycles; the others hold every layer's."""
    bert = encoder.bert
    seq = min(longest, bert.seq_limit)
    layers = 1 if encoder.device == "ref" else bert.spec.layers
    check_memory(bert_memory(bert, batch, seq, layers=layers), limit=limit,
                 what=f"a batch of {batch} texts of {seq} tokens on {encoder.cfg.label}",
                 hint="; a smaller --batch-size needs less" if batch > 1 else "")


def _numbered(texts, source):
    yield from ((number, text) for number, text in enumerate(texts))
    if source is not None:
        yield from source.texts()


def _run(encoder, texts, source, total, *, batch_size, output, compare_fp32, progress, stream):
    writer = EmbeddingWriter(output, total, encoder.hidden) if output is not None else None
    try:
        stats = stream(encoder, _numbered(texts, source), total=total, batch_size=batch_size,
                       writer=writer, compare_fp32=compare_fp32, progress=progress,
                       keep=writer is None)
    except BaseException:
        if writer is not None:
            writer.abort()
        raise
    if writer is not None:
        writer.commit()
    embeddings, cosines = stats.pop("embeddings", None), stats.pop("cosines", None)
    bert = encoder.bert
    s = bert.spec
    report = {
        "model": bert.name,
        "spec": {"layers": s.layers, "hidden": s.hidden, "heads": s.heads,
                 "intermediate": s.intermediate, "max_positions": s.max_positions},
        **stats,
        "batch_size": batch_size,
        "max_seq_length": encoder.max_seq_length,
        "latency_ms": 1e3 * stats["latency_s"],
        "cycles_from": "RTL simulation" if encoder.device == "rtl" else "cycle model",
        "quantization": bert.calibration,
        "machine": kernels.describe(),
        "output": None if writer is None else str(writer.path),
    }
    if embeddings is not None:
        report["per_text"] = [
            {"text": text, "norm": float((vector ** 2).sum() ** 0.5),
             "first": [float(v) for v in vector[:FIRST]],
             "cosine_fp32": None if cosines is None else float(cosines[number]),
             "embedding": [float(v) for v in vector]}
            for number, ((_, text), vector) in enumerate(zip(_numbered(texts, source),
                                                              embeddings))]
    return report


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
    line("input", f"{report['texts']} text(s) in {report['batches']} batch(es) of up to "
                  f"{report['batch_size']}; {report['tokens']:,} tokens, "
                  f"{report['padded_tokens']:,} with padding"
                  + (f"; {report['blank_lines']} blank line(s) skipped"
                     if report.get("blank_lines") else ""))
    per_text = report.get("per_text") or []
    for number, text in enumerate(per_text[:SHOWN]):
        prefix = f"[{number}] " if len(per_text) > 1 else ""
        first = " ".join(f"{v:+.4f}" for v in text["first"])
        line("embedding", f"{prefix}norm {text['norm']:.4f}, first {first} ...")
        if text["cosine_fp32"] is not None:
            line("vs FP32", f"{prefix}cosine similarity {text['cosine_fp32']:.5f}")
    if len(per_text) > SHOWN:
        line("", f"... {len(per_text) - SHOWN} more (--json or --output for all)")
    if report.get("cosine_fp32"):
        cos = report["cosine_fp32"]
        line("vs FP32", f"cosine similarity min {cos['min']:.5f}, mean {cos['mean']:.5f}")
    if report.get("output"):
        line("output", report["output"])
    line("cycles", f"{report['cycles']:,} from the {report['cycles_from']} (ideal "
                   f"{report['ideal_cycles']:,})")
    line("latency", f"{report['latency_ms']:.2f} ms at {report['clock_mhz']:g} MHz")
    line("utilization", f"{100 * report['utilization']:.1f} % of the MACs run, "
                        f"{100 * report['model_utilization']:.1f} % counting only the "
                        f"model's MACs")
    wall = report["wall_s"]
    line("wall", f"{wall['total']:.1f} s (load and compile {wall['load']:.1f} s, run "
                 f"{wall['run']:.1f} s; {report['texts'] / max(wall['run'], 1e-9):.1f} "
                 f"texts/s)")
    if report["bit_exact"] is not None:
        lines.append(f"bit-exact with the ref device: {'yes' if report['bit_exact'] else 'NO'}")
    return "\n".join(lines)
