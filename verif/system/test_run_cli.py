"""``bertaccel run`` end to end on every device and every output format: a small random BERT
saved with all-MiniLM-L6-v2's tokenizer, run from the command line on the tensor-level
reference, the instruction-level device and the Verilated RTL, printing text or JSON and
writing .npy or .jsonl, and every run's embeddings the same bit for bit."""

import json

import numpy as np
import pytest

from bertaccel.cli import main
from verif.helpers import tiny_bert_folder


DEVICES = ("ref", "isa", "rtl")
FORMATS = ("text", "json", "npy", "jsonl")
TEXTS = ["A short text.", "", "Another text, with a few more words in it than the first.",
         "Third."]


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory):
    folder = tiny_bert_folder(tmp_path_factory.mktemp("tiny-bert"), seed=3, hidden=32,
                              heads=2, intermediate=64, layers=1, positions=32)
    texts = folder / "texts.txt"
    texts.write_text("\n".join(TEXTS) + "\n")
    return folder, texts


@pytest.fixture(scope="module")
def runs(model_folder, tmp_path_factory, sim_root):
    """Every device x format: ``{(device, format): (status, stdout, embeddings or None)}``."""
    folder, texts = model_folder
    out_dir = tmp_path_factory.mktemp("run-out")
    results = {}
    for device in DEVICES:
        for fmt in FORMATS:
            argv = ["run", "--model", str(folder), "--text-file", str(texts), "--config", "2x2",
                    "--device", device, "--batch-size", "2", "--quiet",
                    "--build-root", str(sim_root)]
            target = out_dir / f"{device}.{fmt}"
            if fmt in ("npy", "jsonl"):
                argv += ["--output", str(target)]
            if fmt != "text":
                argv.append("--json")
            capture = _Capture()
            with capture:
                status = main(argv)
            results[device, fmt] = (status, capture.out, capture.err, target)
    return results


class _Capture:
    def __enter__(self):
        import contextlib
        import io
        self._out, self._err = io.StringIO(), io.StringIO()
        self._stack = contextlib.ExitStack()
        self._stack.enter_context(contextlib.redirect_stdout(self._out))
        self._stack.enter_context(contextlib.redirect_stderr(self._err))

    def __exit__(self, *exc):
        self._stack.close()
        self.out, self.err = self._out.getvalue(), self._err.getvalue()
        return False


def _embeddings(result, fmt):
    status, out, err, target = result
    assert status == 0, err
    if fmt == "json":
        return np.array([t["embedding"] for t in json.loads(out)["per_text"]], dtype=np.float32)
    if fmt == "npy":
        return np.load(target)
    if fmt == "jsonl":
        records = [json.loads(line) for line in target.read_text().splitlines()]
        assert [r["line"] for r in records] == [1, 3, 4]       # line 2 is blank: skipped
        return np.array([r["embedding"] for r in records], dtype=np.float32)
    assert "embedding" in out and "cycles" in out
    return None


@pytest.mark.parametrize("device", DEVICES)
def test_every_format_runs(runs, device):
    embeddings = {fmt: _embeddings(runs[device, fmt], fmt) for fmt in FORMATS}
    assert embeddings["npy"].shape == (3, 32)
    assert np.array_equal(embeddings["json"], embeddings["npy"])
    np.testing.assert_allclose(embeddings["jsonl"], embeddings["npy"], rtol=1e-6, atol=1e-7)


def test_devices_agree(runs):
    reference = np.load(runs["ref", "npy"][3])
    for device in ("isa", "rtl"):
        assert np.array_equal(np.load(runs[device, "npy"][3]), reference), device
    reports = {device: json.loads(runs[device, "json"][1]) for device in DEVICES}
    assert reports["rtl"]["bit_exact"] is True
    assert reports["ref"]["cycles"] == reports["isa"]["cycles"] > 0
    assert reports["ref"]["blank_lines"] == 1 and reports["ref"]["texts"] == 3
