"""The compile cache holds plain data: a round trip, a changed byte, a file that would run code.

An entry is read with ``torch.load(weights_only=True)`` after its sha256 is checked, so a
damaged entry is a one-line CacheError, and an entry someone else wrote that would run code
when unpickled (here: one that creates a file) is refused without running it.
"""

import hashlib
import io
import os
import pickle
import stat

import numpy as np
import pytest
import torch

from bertaccel.sw.bert.cache import CacheError, CompileCache
from bertaccel.sw.epilogue import Requant


class _Creates:
    """Unpickled, creates ``path``: what a hostile cache entry could do."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def test_an_entry_round_trips_as_plain_data(tmp_path):
    cache = CompileCache(tmp_path / "cache").check()
    assert stat.S_IMODE(os.stat(tmp_path / "cache").st_mode) == 0o700
    state = {"layers": [Requant(scale=0.5, bias=np.arange(3.0))],
             "x": torch.arange(4, dtype=torch.int8), "pair": (1, 2.5), "name": None}
    cache.save("k", state)
    back = cache.load("k")
    assert isinstance(back["layers"][0], Requant) and back["layers"][0].scale == 0.5
    assert np.array_equal(back["layers"][0].bias, np.arange(3.0))
    assert torch.equal(back["x"], state["x"]) and back["pair"] == (1, 2.5)
    assert back["name"] is None and cache.load("missing") is None


def test_a_changed_entry_is_refused(tmp_path):
    cache = CompileCache(tmp_path).check()
    cache.save("k", {"x": torch.zeros(8)})
    path = tmp_path / "k.pt"
    data = bytearray(path.read_bytes())
    data[-3] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(CacheError, match="does not match its checksum"):
        cache.load("k")


def test_an_entry_that_would_run_code_is_refused_unrun(tmp_path):
    cache = CompileCache(tmp_path).check()
    marker = tmp_path / "ran"
    payload = io.BytesIO()
    torch.save({"x": _Creates(str(marker))}, payload, pickle_module=pickle)
    body = payload.getvalue()
    (tmp_path / "k.pt").write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    with pytest.raises(CacheError, match="holds more than plain data"):
        cache.load("k")
    assert not marker.exists()


def test_an_object_outside_the_allowlist_is_not_written(tmp_path):
    with pytest.raises(TypeError, match="cannot hold a"):
        CompileCache(tmp_path).save("k", {"x": _Creates("never")})
    assert not list(tmp_path.glob("*.pt"))
