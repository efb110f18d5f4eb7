"""Text files of any length through an :class:`~bertaccel.sw.bert.encoder.Encoder`, in bounded
memory: the file is read a window of texts at a time, each window is sorted by length into
batches, and its embeddings are written, in input order, as they are made.

A text file holds one text a line, UTF-8. Blank lines (empty or white space only) are skipped:
the embeddings are those of the other lines, in order, and a JSON Lines output names each
one's line number. A file that cannot be read, is not UTF-8 text (or holds NUL bytes) or holds
no text is refused before any work. An output file is written beside its final name and renamed
into place when the run ends, so an interrupted or failed run leaves nothing half-written.
"""

import json
import os
import stat
import tempfile
from pathlib import Path

import numpy as np

from ..paths import PathError, check_file
from .load import BertError

__all__ = ["TextFile", "EmbeddingWriter", "OUTPUT_SUFFIXES", "check_output", "encode_stream",
           "windows"]

#: Output formats by file suffix.
OUTPUT_SUFFIXES = (".npy", ".jsonl")


class TextFile:
    """A text file checked in one streaming pass: :attr:`count` texts, :attr:`blank` blank
    lines; :meth:`texts` reads them again, one at a time.

    Raises
    ------
    BertError
        The file cannot be read, is not UTF-8 text, holds a NUL byte, or holds no text.
    """

    def __init__(self, path):
        self.path = Path(path)
        self.count = self.blank = 0
        for _, text in self._lines():
            if text.strip():
                self.count += 1
            else:
                self.blank += 1
        if not self.count:
            raise BertError(f"--text-file {str(path)!r} holds no text"
                            + (f" ({self.blank} blank lines)" if self.blank else ""))

    def _lines(self):
        where = f"--text-file {str(self.path)!r}"
        try:
            with open(self.path, encoding="utf-8", newline=None) as file:
                for number, line in enumerate(file, 1):
                    if "\x00" in line:
                        raise BertError(f"{where} is not a text file: line {number} holds a "
                                        f"NUL byte")
                    yield number, line.rstrip("\n")
        except OSError as error:
            raise BertError(f"cannot read {where}: {error.strerror or error}") from None
        except UnicodeDecodeError as error:
            raise BertError(f"{where} is not UTF-8 text: {error.reason} at byte "
                            f"{error.start}") from None

    def texts(self):
        """``(line number, text)`` of every line that is not blank, in order."""
        return ((number, text) for number, text in self._lines() if text.strip())


def check_output(path):
    """Refuse an output path that cannot be written, before any work: one line naming it
    (:func:`bertaccel.sw.paths.check_file`; its folder must exist)."""
    try:
        return check_file(path, what="--output", suffixes=OUTPUT_SUFFIXES, make_folder=False)
    except PathError as error:
        raise BertError(str(error)) from None


def _mode_for(path):
    """The permission bits a file written to ``path`` gets: those of the file there, else
    0666 less the umask."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


class EmbeddingWriter:
    """Writes ``count`` embeddings of ``hidden`` values to ``path`` (``.npy`` or ``.jsonl``)
    through a temporary file; :meth:`commit` renames it into place, with the mode of the file
    it replaces (a new one's from the umask, as ``open`` would make it); :meth:`abort` removes
    it."""

    def __init__(self, path, count, hidden):
        self.path = check_output(path)
        handle, temp = tempfile.mkstemp(dir=self.path.parent, prefix=f".{self.path.name}.",
                                        suffix=self.path.suffix)
        os.close(handle)
        self.temp = Path(temp)
        self.npy = self.path.suffix == ".npy"
        if self.npy:
            self.array = np.lib.format.open_memmap(self.temp, mode="w+", dtype=np.float32,
                                                   shape=(count, hidden))
        else:
            self.file = open(self.temp, "w", encoding="utf-8")
        self.written = 0

    def write(self, lines, embeddings, cosines=None):
        """Append the embeddings of consecutive texts (their line numbers ``lines``)."""
        if self.npy:
            self.array[self.written:self.written + len(lines)] = embeddings
        else:
            for row, (line, vector) in enumerate(zip(lines, embeddings)):
                record = {"line": line, "embedding": [round(float(v), 7) for v in vector]}
                if cosines is not None:
                    record["cosine_fp32"] = float(cosines[row])
                self.file.write(json.dumps(record) + "\n")
        self.written += len(lines)

    def commit(self):
        if self.npy:
            self.array.flush()
            del self.array
        else:
            self.file.close()
        os.chmod(self.temp, _mode_for(self.path))
        os.replace(self.temp, self.path)

    def abort(self):
        if self.npy:
            self.__dict__.pop("array", None)
        else:
            self.file.close()
        self.temp.unlink(missing_ok=True)


def windows(items, size):
    """``items`` in lists of ``size`` (the last may be shorter)."""
    window = []
    for item in items:
        window.append(item)
        if len(window) == size:
            yield window
            window = []
    if window:
        yield window


def _shares(encoder, batches, texts):
    """Each batch's share of a window's ``texts``, by the MACs it runs (sorted shortest first,
    the batches grow: counting them by texts would promise too early an end)."""
    from .encoder import _macs_run

    macs = [_macs_run(encoder.bert, *batch["input_ids"].shape) for _, batch in batches]
    return [texts * m / sum(macs) for m in macs]


def encode_stream(encoder, texts, *, total, batch_size=32, window=None, writer=None,
                  compare_fp32=False, progress=None, keep=False):
    """Embed ``texts`` (an iterable of ``(line, text)``) a window at a time.

    Parameters
    ----------
    encoder : Encoder
    texts : iterable of (int, str)
    total : int
        How many texts ``texts`` yields (for progress).
    batch_size : int
    window : int, optional
        Texts read, tokenised and sorted at a time; ``16 * batch_size`` by default. Memory is
        bounded by the window, not by the number of texts.
    writer : EmbeddingWriter, optional
        Where each window's embeddings go, in input order.
    compare_fp32 : bool
        Also measure each text's cosine similarity with the FP32 model.
    progress : callable, optional
        ``progress(done, total)`` after every batch.
    keep : bool
        Also return every embedding (``(total, hidden)`` float32) and cosine, in input order.

    Returns
    -------
    dict
        The run's figures (see :class:`~bertaccel.sw.bert.encoder.RunStats`), ``lines``,
        ``cosine_fp32`` (min, mean) with ``compare_fp32``; with ``keep``, ``embeddings`` and
        ``cosines``.
    """
    from .encoder import RunStats, check_batch_size

    check_batch_size(batch_size)
    run = RunStats(encoder)
    kept, kept_cos, cos_min, cos_sum = [], [], None, 0.0
    window = window or 16 * batch_size
    for chunk in windows(texts, window):
        lines = [line for line, _ in chunk]
        ids = encoder.tokenize([text for _, text in chunk])
        out = np.empty((len(chunk), encoder.hidden), dtype=np.float32)
        cos = np.empty(len(chunk)) if compare_fp32 else None
        batches = encoder.batches(ids, batch_size)
        shares = _shares(encoder, batches, len(chunk))
        done = run.texts
        for number, ((rows, batch), share) in enumerate(zip(batches, shares)):
            within = None if progress is None else (
                lambda fraction, done=done, share=share: progress(done + fraction * share,
                                                                  total))
            emb = run.batch(batch, within)
            done = run.texts if number == len(batches) - 1 else done + share
            out[rows] = emb.numpy()
            if compare_fp32:
                cos[rows] = encoder.cosine_fp32(batch, emb).numpy()
            if progress is not None:
                progress(done, total)
        if writer is not None:
            writer.write(lines, out, cos)
        if compare_fp32:
            cos_min = float(cos.min()) if cos_min is None else min(cos_min, float(cos.min()))
            cos_sum += float(cos.sum())
        if keep:
            kept.append(out)
            kept_cos.append(cos)
    stats = run.finish()
    if compare_fp32:
        stats["cosine_fp32"] = {"min": cos_min, "mean": cos_sum / max(run.texts, 1)}
    if keep:
        stats["embeddings"] = np.concatenate(kept)
        stats["cosines"] = np.concatenate(kept_cos) if compare_fp32 else None
    return stats
