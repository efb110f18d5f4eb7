"""Embedding a text file over Ray: windows of texts shared out to actors that each hold the
compiled model once, the embeddings written in input order.

::

    stream = ShardedStream("minilm", workers=4)        # in place of encode_stream
    report = run_texts("minilm", cfg=cfg, text_file="texts.txt", output="out.npy",
                       stream=stream)

:func:`bertaccel.sw.bert.stream.encode_stream` reads a file a window of texts at a time and
sorts each window into batches. :class:`ShardedStream` cuts the same windows and hands each to
an actor (:class:`EncoderActor`: an :class:`~bertaccel.sw.bert.encoder.Encoder`, loaded from the
compile cache when the actor starts), which runs ``encode_stream`` on it: the batches are the
single process's, so are the embeddings and the cycles, bit for bit. The driver keeps a few
windows a worker in flight, writes the results in input order as they become contiguous, and
adds up the figures.

An actor whose process dies is started again and its window run again, up to ``retries``
times; a window that fails every time stops the run with a :class:`ClusterError` naming its
lines (the output file is not written).
"""

import numpy as np

from .connect import ClusterError, connect
from .tasks import DEFAULT_RETRIES, failure_of

__all__ = ["EncoderActor", "ShardedStream", "IN_FLIGHT"]

#: Windows in flight per actor: one running, one waiting, so an actor never idles for the driver.
IN_FLIGHT = 2
#: The counters of :class:`~bertaccel.sw.bert.encoder.RunStats` that windows add up, by the
#: key of its ``finish()``.
_COUNTS = {"cycles": "cycles", "macs": "macs", "model_macs": "model_macs",
           "batches": "batches", "texts": "texts", "tokens": "tokens", "padded": "padded_tokens"}


class EncoderActor:
    """An :class:`~bertaccel.sw.bert.encoder.Encoder` in a Ray actor (the arguments are the
    encoder's); :meth:`encode` embeds one window."""

    def __init__(self, model, *, config, device, cache, cache_dir, build_root,
                 max_seq_length=None):
        import os
        os.environ["HF_HUB_OFFLINE"] = "1"
        from ..sw.bert.encoder import Encoder
        self.encoder = Encoder(model, config=config, device=device, cache=cache,
                               cache_dir=cache_dir, build_root=build_root,
                               max_seq_length=max_seq_length)

    def encode(self, window, batch_size, compare_fp32):
        """``encode_stream`` of one window of ``(line, text)``: its figures, embeddings and
        cosines."""
        from ..sw.bert.stream import encode_stream
        return encode_stream(self.encoder, window, total=len(window), batch_size=batch_size,
                             window=len(window), compare_fp32=compare_fp32, keep=True)


class ShardedStream:
    """A stand-in for :func:`~bertaccel.sw.bert.stream.encode_stream` that runs the windows on
    Ray actors.

    Parameters
    ----------
    model, cache, cache_dir
        As :class:`~bertaccel.sw.bert.encoder.Encoder` takes them; each actor makes its own
        encoder with them (the config, device, build folder and text limit are the calling
        encoder's).
        With ``cache=False`` every actor compiles the model itself.
    address : str, optional
        The cluster (see :func:`~bertaccel.cluster.connect.connect`); Ray embedded without.
    workers : int, optional
        Actors; by default one per CPU of the cluster, at most one per window.
    retries : int
        Restarts of an actor whose process died, and runs again of its window.
    """

    def __init__(self, model, *, cache=True, cache_dir=None, address=None, workers=None,
                 retries=DEFAULT_RETRIES):
        self.model, self.cache, self.cache_dir = model, cache, cache_dir
        self.address, self.workers, self.retries = address, workers, retries

    def __call__(self, encoder, texts, *, total, batch_size=32, window=None, writer=None,
                 compare_fp32=False, progress=None, keep=False):
        """What :func:`~bertaccel.sw.bert.stream.encode_stream` does and returns, on Ray."""
        from ..sw.bert.encoder import RunStats, check_batch_size
        from ..sw.bert.stream import windows

        check_batch_size(batch_size)
        window = window or 16 * batch_size
        with connect(self.address, workers=self.workers) as where:
            run = RunStats(encoder)
            actors = self._actors(encoder, min(where["cpus"] or 1, -(-total // window)))
            merged = _Merge(run, writer, compare_fp32, keep)
            self._drive(actors, windows(texts, window), merged, batch_size, compare_fp32,
                        progress, total)
            return merged.finish()

    def _actors(self, encoder, count):
        import ray

        actor = ray.remote(EncoderActor).options(
            num_cpus=1, max_restarts=self.retries, max_task_retries=self.retries)
        return [actor.remote(self.model, config=encoder.cfg, device=encoder.device,
                             cache=self.cache, cache_dir=self.cache_dir,
                             build_root=encoder.build_root,
                             max_seq_length=encoder.max_seq_length)
                for _ in range(max(1, count))]

    def _drive(self, actors, chunks, merged, batch_size, compare_fp32, progress, total):
        """Keep :data:`IN_FLIGHT` windows an actor running; merge them in input order. No window
        starts more than twice as many windows ahead of the first unmerged one, so a slow
        window (its actor restarting) holds back a bounded number of results."""
        import ray

        pending, lines = {}, {}     # ref -> (window number, actor); window number -> lines
        free = [actor for actor in actors for _ in range(IN_FLIGHT)]
        ahead = 2 * len(free)
        number = 0
        chunks = iter(chunks)
        while True:
            while free and number < merged.next + ahead:
                chunk = next(chunks, None)
                if chunk is None:
                    break
                actor = free.pop()
                pending[actor.encode.remote(chunk, batch_size, compare_fp32)] = (number, actor)
                lines[number] = [line for line, _ in chunk]
                number += 1
            if not pending:
                return
            [ref], _ = ray.wait(list(pending), num_returns=1)
            index, actor = pending.pop(ref)
            try:
                stats = ray.get(ref)
            except ray.exceptions.RayError as error:
                first, last = lines[index][0], lines[index][-1]
                raise ClusterError(f"texts {first}..{last} (window {index}) failed: "
                                   f"{failure_of(error, self.retries).line}") from None
            free.append(actor)
            merged.add(index, lines.pop(index), stats)
            if progress is not None:
                progress(merged.run.texts, total)


class _Merge:
    """Windows' results put back in input order: written, kept and added up."""

    def __init__(self, run, writer, compare_fp32, keep):
        self.run, self.writer, self.compare_fp32, self.keep = run, writer, compare_fp32, keep
        self.waiting, self.next = {}, 0
        self.kept, self.kept_cos = [], []
        self.cos_min, self.cos_sum = None, 0.0

    def add(self, index, lines, stats):
        run = self.run
        for attribute, key in _COUNTS.items():
            setattr(run, attribute, getattr(run, attribute) + stats[key])
        if stats["bit_exact"] is not None:
            run.bit_exact = stats["bit_exact"] and run.bit_exact is not False
        self.waiting[index] = (lines, stats["embeddings"], stats["cosines"])
        while self.next in self.waiting:
            self._emit(*self.waiting.pop(self.next))
            self.next += 1

    def _emit(self, lines, out, cos):
        if self.writer is not None:
            self.writer.write(lines, out, cos)
        if self.compare_fp32:
            low = float(cos.min())
            self.cos_min = low if self.cos_min is None else min(self.cos_min, low)
            self.cos_sum += float(cos.sum())
        if self.keep:
            self.kept.append(out)
            self.kept_cos.append(cos)

    def finish(self):
        stats = self.run.finish()
        if self.compare_fp32:
            stats["cosine_fp32"] = {"min": self.cos_min,
                                    "mean": self.cos_sum / max(self.run.texts, 1)}
        if self.keep:
            stats["embeddings"] = np.concatenate(self.kept)
            stats["cosines"] = np.concatenate(self.kept_cos) if self.compare_fp32 else None
        return stats
