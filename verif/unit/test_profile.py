"""Pure-Python tests of ``bertaccel.analysis.profile``: a small random BertModel (2 layers, hidden 64)
is profiled for inference and for one training step, and every op class must turn up with the
operators we expect in it.

The runs use one torch thread: on a shared two-core machine a second thread waits for a core at
every parallel operator, which makes a tiny model take seconds and says nothing about the
classification under test.
"""

import json
import math

import pytest
import torch

from bertaccel.analysis import profile as prof
from bertaccel.analysis.profile import MEMORY_INTENSIVE, OP_CLASSES, SCHEMA, ProfileError
from bertaccel.cli import main as cli_main

RUN_KEYS = {"mode", "iterations", "warmup", "wall_ms", "profiled_ms", "op_ms", "framework_ms",
            "class_ms", "shares", "memory_intensive_share", "optimizer_ms",
            "unlinked_backward_ms", "top_ops"}
MODEL_KEYS = {"name", "weights", "layers", "hidden", "heads", "intermediate", "vocab",
              "hidden_act", "attention", "parameters"}


def tiny_model():
    from transformers import BertConfig, BertModel
    torch.manual_seed(1234)
    return BertModel(BertConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=128, vocab_size=1000,
                                max_position_embeddings=64, attn_implementation="eager"))


@pytest.fixture(scope="module")
def report():
    # Every operator of a class in its top_ops, not the five slowest: the tests below ask which
    # operators a class holds, never which ran longest (that follows the machine's load).
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(prof, "_TOP_OPS", 10_000)
        return prof.profile((tiny_model(), "tiny"), seq=32, iterations=2, warmup=1, threads=1)


def top(run, cls):
    return [entry["op"] for entry in run["top_ops"][cls]]


def check_schema(report):
    assert report["schema"] == SCHEMA
    assert report["classes"] == list(OP_CLASSES)
    assert set(report["class_labels"]) == set(OP_CLASSES)
    assert set(report["model"]) == MODEL_KEYS
    for key in ("torch", "transformers", "cpu", "cores", "threads", "loadavg_begin",
                "other_runnable"):
        assert key in report["environment"]
    for mode, run in report["runs"].items():
        assert set(run) == RUN_KEYS and run["mode"] == mode
        assert list(run["class_ms"]) == list(OP_CLASSES) == list(run["shares"])
        assert math.isclose(sum(run["shares"].values()), 1.0, abs_tol=1e-9)
        assert math.isclose(sum(run["class_ms"].values()), run["op_ms"], rel_tol=1e-9)
        assert math.isclose(run["memory_intensive_share"],
                            sum(run["shares"][c] for c in MEMORY_INTENSIVE), abs_tol=1e-12)
        assert all(v >= 0 for v in run["class_ms"].values())
    assert json.loads(json.dumps(report)) == report


def test_schema(report):
    check_schema(report)
    assert list(report["runs"]) == ["inference", "training"]
    assert report["model"]["layers"] == 2 and report["model"]["hidden"] == 64


def test_inference_classes(report):
    run = report["runs"]["inference"]
    # Dropout is off in eval mode: aten::dropout returns its input at once, so only a trace.
    for cls in OP_CLASSES:
        if cls != "dropout":
            assert run["class_ms"][cls] > 0, cls
    assert run["shares"]["gemm"] > 0
    assert "aten::addmm" in top(run, "gemm")          # nn.Linear, under aten::linear
    assert "aten::bmm" in top(run, "attn_matmul")     # torch.matmul of Q K^T and P V
    assert "aten::_softmax" in top(run, "softmax")
    assert "aten::native_layer_norm" in top(run, "layernorm")
    assert top(run, "gelu") == ["aten::gelu"]
    assert not any(op in top(run, "other") for op in ("aten::addmm", "aten::bmm", "aten::mm"))
    assert run["optimizer_ms"] == 0 and run["unlinked_backward_ms"] == 0


def test_training_classes(report):
    run = report["runs"]["training"]
    for cls in OP_CLASSES:
        assert run["class_ms"][cls] > 0, cls
    assert run["shares"]["gemm"] > 0
    # Backward operators take the class of the forward operator that made their node.
    assert "aten::mm" in top(run, "gemm")                    # AddmmBackward0
    assert "aten::bmm" in top(run, "attn_matmul")            # BmmBackward0
    assert "aten::_softmax_backward_data" in top(run, "softmax")
    assert "aten::native_layer_norm_backward" in top(run, "layernorm")
    assert "aten::gelu_backward" in top(run, "gelu")
    assert "aten::bernoulli_" in top(run, "dropout")
    assert run["unlinked_backward_ms"] == 0
    assert 0 < run["optimizer_ms"] <= run["class_ms"]["other"]


def test_accel_breakdown(tmp_path):
    accel = prof.accel_breakdown({"gemm": 900, "attn_matmul": 60, "softmax": 40}, label="8x8",
                                 model="minilm")
    assert accel["cycles"]["layernorm"] == 0 and accel["total_cycles"] == 1000
    assert math.isclose(sum(accel["shares"].values()), 1.0)
    assert math.isclose(accel["memory_intensive_share"], 0.04)
    assert accel["model"] == "minilm"
    with pytest.raises(ProfileError, match="unknown op classes 'fused'"):
        prof.accel_breakdown({"gemm": 1, "fused": 2})
    with pytest.raises(ProfileError, match="'gelu' must be a number of at least 0, not -1"):
        prof.accel_breakdown({"gemm": 1, "gelu": -1})
    with pytest.raises(ProfileError, match="no cycles"):
        prof.accel_breakdown({})
    path = tmp_path / "cycles.json"
    path.write_text(json.dumps({"label": "8x8", "cycles": {"gemm": 3, "other": 1}}))
    assert prof.load_accel_breakdown(path)["shares"]["gemm"] == 0.75
    path.write_text("[1, 2]")
    with pytest.raises(ProfileError, match="cycles"):
        prof.load_accel_breakdown(path)


def test_format_and_plot(report, tmp_path):
    text = prof.format_table(report)
    assert "GEMM/linear" in text and "host only" in text
    accel = prof.accel_breakdown({"gemm": 9, "attn_matmul": 1}, label="8x8 cycle model")
    text = prof.format_table(dict(report, accelerator=accel))
    assert "8x8 cycle model" in text and "host only" not in text
    import matplotlib  # noqa: F401  (a dependency: the plot test must run)
    path = prof.plot_shares(prof.report_bars(dict(report, accelerator=accel)),
                            tmp_path / "shares.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_main(tmp_path, capsys):
    folder = tmp_path / "tiny"
    tiny_model().save_pretrained(folder)
    cycles = tmp_path / "cycles.json"
    cycles.write_text(json.dumps({"label": "8x8", "cycles": {"gemm": 9, "softmax": 1}}))
    argv = ["--model", str(folder), "--seq", "16", "--batch", "2", "--mode", "inference",
            "--iterations", "1", "--warmup", "0", "--threads", "1"]
    assert cli_main(["profile", *argv, "--json", "--accel-breakdown", str(cycles)]) == 0
    report = json.loads(capsys.readouterr().out)
    check_schema(report)
    assert list(report["runs"]) == ["inference"]
    assert (report["batch"], report["seq"]) == (2, 16)
    assert report["accelerator"]["shares"]["gemm"] == 0.9

    assert cli_main(["profile", *argv[:-2], "--threads", "0"]) == 2
    assert "threads must be at least 1, not 0" in capsys.readouterr().err
    assert cli_main(["profile", "--model", str(tmp_path / "missing")]) == 2
    assert "--model must be minilm, bert-base or a BERT model folder" in capsys.readouterr().err
    assert cli_main(["profile", *argv[:2], "--seq", "65"]) == 2
    assert "seq must be from 1 to 64, not 65" in capsys.readouterr().err
    cycles.write_text(json.dumps({"cycles": {"matmul": 1}}))
    assert cli_main(["profile", *argv, "--accel-breakdown", str(cycles)]) == 2
    assert "unknown op classes 'matmul'" in capsys.readouterr().err
