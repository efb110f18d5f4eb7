"""Compiled models on disk: calibration and quantisation once per checkpoint, config and
settings, then seconds to start.

A :class:`CompileCache` entry holds what :func:`~bertaccel.sw.bert.compile.compile_bert` derives
from a checkpoint (the quantised layers, the embedding scales, the calibration facts) and,
beside it, the stage timings of :class:`~bertaccel.sw.bert.timing.StageTimer`. Its key hashes
the checkpoint's files, the config, the calibration settings and the compiler's own source, so
a changed model, setting or compiler never reads a stale entry. Entries are written to a
temporary file and renamed into place: a reader sees a whole entry or none.

An entry is plain data: tensors, numbers, strings, lists and dicts, with the compiler's
dataclasses (an allowlist, :func:`_classes`) and numpy arrays tagged, read back with
``torch.load(weights_only=True)``, so loading a file runs no code from it; a sha256 of the
bytes heads the file, and an entry whose bytes do not match it is a :class:`CacheError`.

The folder is ``$BERTACCEL_CACHE`` when set, else ``$XDG_CACHE_HOME/bertaccel`` (by default
``~/.cache/bertaccel``), made with mode 0700.
"""

import dataclasses
import functools
import hashlib
import io
import json
import os
import tempfile
from pathlib import Path

import numpy as np
import torch

from ..paths import PathError, check_folder

__all__ = ["CompileCache", "default_root", "CacheError", "code_digest"]

#: The sources whose change invalidates a compiled entry (relative to the package's parent).
_COMPILER_SOURCES = ("sw/bert/compile.py", "sw/bert/quant.py", "sw/bert/load.py",
                     "sw/bert/cache.py", "sw/epilogue.py", "sw/tiler/", "golden/intops.py",
                     "golden/sentences.py")
#: ... and a timing entry: the cycle model and its timer, the tiler, and the hardware it models.
_TIMING_SOURCES = ("sw/cycles/", "hw/latencies.py", "sw/tiler/", "sw/sequence.py",
                   "sw/timing.py", "sw/bert/run.py", "sw/bert/timing.py",
                   "hw/epilogue/schedule.py")


class CacheError(OSError):
    """The cache folder cannot be used; the message names it and why."""


def default_root():
    """The cache folder when none is given (see the module docstring)."""
    if os.environ.get("BERTACCEL_CACHE"):
        return Path(os.environ["BERTACCEL_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "bertaccel"


def _source_root():
    return Path(__file__).resolve().parents[2]


def _hash_files(digest, paths, root):
    for path in paths:
        digest.update(str(Path(path).relative_to(root)).encode())
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)


def checkpoint_digest(folder):
    """sha256 of every file of a model folder (names and contents)."""
    folder = Path(folder)
    digest = hashlib.sha256()
    _hash_files(digest, sorted(p for p in folder.rglob("*") if p.is_file()), folder)
    return digest.hexdigest()


def _sources_digest(names):
    """sha256 of the named sources; a name ending in ``/`` is every Python file below it."""
    root = _source_root()
    paths = []
    for name in names:
        paths += sorted((root / name).rglob("*.py")) if name.endswith("/") else [root / name]
    digest = hashlib.sha256()
    _hash_files(digest, paths, root)
    return digest.hexdigest()


@functools.lru_cache(maxsize=1)
def code_digest():
    """sha256 of every Python source of the packages that compute results (``golden``, ``hw``,
    ``sw``): the key part of a cached result that any change of the code must invalidate."""
    root = _source_root()
    return _sources_digest(sorted(str(path.relative_to(root)) for package in ("golden", "hw", "sw")
                                  for path in (root / package).rglob("*.py")))


class CompileCache:
    """Compiled models under ``root`` (see the module docstring).

    Parameters
    ----------
    root : path, optional
        The folder; :func:`default_root` by default. Made on first write.

    Raises
    ------
    CacheError
        From :meth:`check`: the folder cannot be made or written.
    """

    def __init__(self, root=None):
        self.root = Path(root) if root is not None else default_root()

    def check(self):
        """Make the folder if needed (mode 0700) and check that it can be written, before any
        work."""
        try:
            check_folder(self.root, what="cache folder", mode=0o700)
        except PathError as error:
            raise CacheError(str(error)) from None
        return self

    def key(self, checkpoint, cfg, settings):
        """The entry key of ``checkpoint`` (a model folder) compiled for ``cfg`` with the
        calibration ``settings`` (a JSON-able dict)."""
        digest = hashlib.sha256()
        for part in (checkpoint_digest(checkpoint), cfg.to_json(),
                     json.dumps(settings, sort_keys=True), _sources_digest(_COMPILER_SOURCES)):
            digest.update(part.encode())
        return digest.hexdigest()[:32]

    def _path(self, key, suffix):
        return self.root / f"{key}{suffix}"

    def load(self, key):
        """The entry ``key`` (a dict), or ``None`` if there is none.

        Raises
        ------
        CacheError
            If the entry's bytes do not match the sha256 it was written with, or it holds
            anything but plain data (it was changed since it was written).
        """
        path = self._path(key, ".pt")
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        digest, _, payload = data.partition(b"\n")
        if hashlib.sha256(payload).hexdigest().encode() != digest:
            raise CacheError(f"the cache entry {path} does not match its checksum: it changed "
                             f"after it was written; delete it (or the folder) to recompile")
        try:
            return _decode(torch.load(io.BytesIO(payload), weights_only=True))
        except Exception as error:  # noqa: BLE001 - unpickling refused, or not our layout
            raise CacheError(f"the cache entry {path} holds more than plain data "
                             f"({type(error).__name__}); delete it to recompile") from None

    def save(self, key, state):
        """Write the entry ``key`` atomically: its sha256, a newline, its bytes."""
        buffer = io.BytesIO()
        torch.save(_encode(state), buffer)
        payload = buffer.getvalue()
        digest = hashlib.sha256(payload).hexdigest().encode()
        self._atomic(self._path(key, ".pt"), lambda file: file.write(digest + b"\n" + payload))

    def _atomic(self, path, write):
        self.root.mkdir(mode=0o700, parents=True, exist_ok=True)
        handle, temp = tempfile.mkstemp(dir=self.root, prefix=".tmp-")
        try:
            with os.fdopen(handle, "wb") as file:
                write(file)
            os.replace(temp, path)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise

    def timings(self, key):
        """A persistent ``dict`` of stage timings for entry ``key`` (see :class:`Timings`)."""
        digest = hashlib.sha256((key + _sources_digest(_TIMING_SOURCES)).encode())
        from ...hw.verilog import source_key
        digest.update(source_key().encode())
        return Timings(self, self._path(digest.hexdigest()[:32], ".timings.json"))


@functools.cache
def _classes():
    """The dataclasses an entry may hold, by qualified name."""
    from ..epilogue import Gelu, LayerNorm, Requant, Softmax
    from .load import BertSpec
    from .quant import ActQuant, QuantLayer, SplitB
    return {f"{cls.__module__}.{cls.__qualname__}": cls
            for cls in (BertSpec, ActQuant, QuantLayer, SplitB, Requant, Gelu, Softmax,
                        LayerNorm)}


def _encode(value):
    """``value`` as plain data (see the module docstring)."""
    if isinstance(value, (torch.Tensor, str, int, float, bool)) or value is None:
        return value
    if isinstance(value, np.ndarray):
        return {"ndarray": torch.from_numpy(np.ascontiguousarray(value))}
    if isinstance(value, (list, tuple)):
        items = [_encode(item) for item in value]
        return items if isinstance(value, list) else {"tuple": items}
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {"dict": {k: _encode(v) for k, v in value.items()}}
    name = f"{type(value).__module__}.{type(value).__qualname__}"
    if dataclasses.is_dataclass(value) and _classes().get(name) is type(value):
        return {"dataclass": name, "fields": {field.name: _encode(getattr(value, field.name))
                                              for field in dataclasses.fields(value)}}
    raise TypeError(f"a cache entry cannot hold a {name}")


def _decode(value):
    """The value :func:`_encode` gave ``value`` for."""
    if isinstance(value, list):
        return [_decode(item) for item in value]
    if not isinstance(value, dict):
        return value
    if "ndarray" in value:
        return value["ndarray"].numpy()
    if "tuple" in value:
        return tuple(_decode(item) for item in value["tuple"])
    if "dict" in value:
        return {k: _decode(v) for k, v in value["dict"].items()}
    obj = object.__new__(_classes()[value["dataclass"]])    # as unpickling does: no __init__
    for name, field in value["fields"].items():
        object.__setattr__(obj, name, _decode(field))
    return obj


class Timings(dict):
    """A dict saved to a JSON file on every new entry (atomically)."""

    def __init__(self, cache, path):
        super().__init__()
        self._cache, self._path = cache, path
        try:
            self.update(json.loads(path.read_text()))
        except (OSError, ValueError):
            pass

    def __setitem__(self, key, value):
        super().__setitem__(key, value)
        text = json.dumps(dict(self), sort_keys=True).encode()
        try:
            self._cache._atomic(self._path, lambda file: file.write(text))
        except OSError:
            pass  # timings are recomputed when they cannot be kept
