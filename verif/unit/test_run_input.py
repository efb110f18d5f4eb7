"""``bertaccel run``'s bad input: each case one line on stderr, exit status 2, before any work
(no model compiled, nothing written)."""

import pytest

from bertaccel.cli import main


@pytest.fixture
def files(tmp_path):
    good = tmp_path / "good.txt"
    good.write_text("One text.\nTwo texts.\n")
    binary = tmp_path / "binary.txt"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    latin = tmp_path / "latin.txt"
    latin.write_bytes("caf\xe9 au lait\n".encode("latin-1"))
    nul = tmp_path / "nul.txt"
    nul.write_bytes(b"text\x00more\n")
    empty = tmp_path / "empty.txt"
    empty.write_text("")
    blank = tmp_path / "blank.txt"
    blank.write_text("\n   \n\t\n")
    control = tmp_path / "control.txt"
    control.write_text("A fine line.\n\x07\x08\x01\n")
    folder = tmp_path / "folder"
    folder.mkdir()
    readonly = tmp_path / "readonly.jsonl"
    readonly.write_text("kept\n")
    readonly.chmod(0o444)
    return tmp_path, good


CASES = [
    (["--text-file", "{tmp}/missing.txt"], "cannot read --text-file"),
    (["--text-file", "{tmp}/binary.txt"], "is not UTF-8 text"),
    (["--text-file", "{tmp}/latin.txt"], "is not UTF-8 text"),
    (["--text-file", "{tmp}/nul.txt"], "line 1 holds a NUL byte"),
    (["--text-file", "{tmp}/empty.txt"], "holds no text"),
    (["--text-file", "{tmp}/blank.txt"], "holds no text (3 blank lines)"),
    (["--text-file", "{tmp}/control.txt"], "line 2 has no token but the special ones"),
    (["--text-file", "{tmp}/folder"], "cannot read --text-file"),
    (["--text", "x", "--output", "/proc/no/such.npy"], "does not exist"),
    (["--text", "x", "--output", "{tmp}/folder"], "must end in .npy or .jsonl"),
    (["--text", "x", "--output", "{tmp}/out.csv"], "must end in .npy or .jsonl"),
    (["--text", "x", "--output", "/proc/out.npy"], "is not writable"),
    (["--text", "x", "--output", "{tmp}/readonly.jsonl"], "exists and is read-only"),
    (["--text", "x", "--batch-size", "0"], "--batch-size must be at least 1"),
    (["--text", "x", "--cache-dir", "/proc/cache"], "cache folder '/proc/cache' cannot be made"),
    (["--text", "x", "--device", "gpu"], "invalid choice: 'gpu'"),
]


@pytest.mark.parametrize("argv, message", CASES, ids=[message for _, message in CASES])
def test_bad_input(files, capsys, argv, message):
    tmp, _ = files
    argv = [arg.format(tmp=tmp) for arg in argv]
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertaccel: error: ") and message in err, err
    assert err.count("\n") == 1, err
    assert not list(tmp.glob(".*.npy")) and not list(tmp.glob("*.npy"))
    assert (tmp / "readonly.jsonl").read_text() == "kept\n"


def test_an_output_keeps_the_mode_of_the_file_it_replaces(tmp_path):
    import os
    import stat

    import numpy as np

    from bertaccel.sw.bert.stream import EmbeddingWriter

    old = tmp_path / "old.npy"
    np.save(old, np.zeros((1, 2), dtype=np.float32))
    old.chmod(0o640)
    for path in (old, tmp_path / "new.jsonl"):
        writer = EmbeddingWriter(path, 1, 2)
        writer.write([1], np.ones((1, 2), dtype=np.float32))
        writer.commit()
    assert stat.S_IMODE(old.stat().st_mode) == 0o640
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "new.jsonl").stat().st_mode) == 0o666 & ~umask
