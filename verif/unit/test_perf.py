"""Pure-Python tests of the performance tools: ``bertaccel bench bert`` (analysis/perf.py) and
SeqPoint (analysis/seqpoint.py), on a small random BERT shape (2 layers, hidden 64, 2 heads).

The cycle model itself is checked against the RTL in verif/system/test_cycles.py; here the
question is whether the tools add its figures up right: the breakdown covers every cycle once, a
model timed without data takes the cycles that running it on the software device reports, and
SeqPoint's projection is exact when every length is its own point.
"""

import json
import math

import pytest
import torch

from bertaccel.hw.config import PRESETS
from bertaccel import cli
from bertaccel.sw.bert import BertError, run_bert
from bertaccel.sw import SoftwareDevice
from bertaccel.analysis.perf import (CLASSES, STALL_CLASSES, BertShape, bench_bert, compile_shape,
                               model_macs, retarget)
from bertaccel.analysis.seqpoint import choose_points, compare, seqpoint

TINY = BertShape(layers=2, hidden=64, heads=2, intermediate=128)


@pytest.fixture(scope="module")
def tiny():
    return compile_shape(TINY, PRESETS["4x4"], calibration_seq=32, calibration_batch=2)


def test_bench_adds_up(tiny):
    report = bench_bert(tiny, seq=24, batch=2)
    assert report["macs"] == model_macs(tiny.spec, 24, 2) == 2 * 24 * 2 * (
        4 * 64 * 64 + 2 * 64 * 128 + 2 * 24 * 64)
    assert report["ideal_cycles"] == math.ceil(report["macs"] / 16)
    assert report["utilization"] == report["ideal_cycles"] / report["cycles"]
    assert list(report["breakdown"]) == list(CLASSES)
    assert sum(report["breakdown"].values()) == report["cycles"]
    assert sum(report["model_breakdown"].values()) == report["cycles"]
    assert sum(report["by_op_class"].values()) == report["cycles"]
    assert sum(part["cycles"] for part in report["stages"].values()) == report["cycles"]
    assert math.isclose(sum(report["shares"].values()), 1.0)
    # The stalls are the execute unit's: they cannot exceed what the model charged to them.
    assert report["breakdown"]["stalls"] >= sum(report["stalls"][c] for c in STALL_CLASSES
                                                if c != "mesh_drain") - 1
    # Every operand row streamed is in a GEMM class: at least the ideal cycles.
    gemm = sum(report["breakdown"][c] for c in CLASSES if c.endswith("_gemm"))
    assert gemm >= report["ideal_cycles"]
    assert report["breakdown"]["softmax"] > 0 and report["breakdown"]["layernorm"] > 0
    assert report["latency_s"] == report["cycles"] / (PRESETS["4x4"].clock_mhz * 1e6)
    assert json.loads(json.dumps(report)) == report


def test_bench_equals_running_the_model(tiny):
    """Timing without data gives the cycles of running the model on the software device."""
    report = bench_bert(tiny, seq=12)
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(1000, 30000, (1, 12), generator=generator)
    with SoftwareDevice(tiny.cfg) as device:
        result = run_bert(device, tiny, ids)
    assert result.stats["cycles"] == report["cycles"]
    assert result.stats["device_calls"] == report["device_calls"]


def test_one_layer_counts_every_layer(tiny):
    every = bench_bert(tiny, seq=16)
    one = bench_bert(tiny, seq=16, every_layer=False)
    assert one["timed_layers"] == 1 and every["timed_layers"] == TINY.layers
    assert one["cycles"] == every["cycles"] and one["breakdown"] == every["breakdown"]


def test_retarget_and_utilization_falls_at_short_sequences(tiny):
    bert = retarget(tiny, PRESETS["8x8"])
    assert bert.cfg is PRESETS["8x8"] and bert.layers is not tiny.layers
    short, long = (bench_bert(bert, seq=seq, every_layer=False) for seq in (4, 64))
    assert short["utilization"] < long["utilization"]
    assert (short["stalls"]["preload"] / short["cycles"]
            > long["stalls"]["preload"] / long["cycles"])


def test_bench_bad_input(tiny):
    for seq in (0, -1, 1.5, True):
        with pytest.raises(BertError, match="seq must be an int of at least 1"):
            bench_bert(tiny, seq=seq)
    with pytest.raises(BertError, match="batch must be"):
        bench_bert(tiny, seq=4, batch=0)
    with pytest.raises(BertError, match="seq 513 is longer than"):
        bench_bert(tiny, seq=513)
    with pytest.raises(BertError, match="unknown shape 'bert-huge'"):
        compile_shape("bert-huge", PRESETS["4x4"])


# -- SeqPoint -------------------------------------------------------------------------------------

def test_choose_points():
    lengths = [5] * 10 + [6] * 5 + [40] * 3 + [41, 90, 100, 100]
    for k in range(1, 8):
        points = choose_points(lengths, k)
        assert len(points) == min(k, 6)             # six distinct lengths
        assert sum(p["weight"] for p in points) == len(lengths)
        assert [p["low"] for p in points] == sorted(p["low"] for p in points)
        for before, after in zip(points, points[1:]):
            assert before["high"] < after["low"]           # contiguous bins, no overlap
        for p in points:
            assert p["low"] <= p["length"] <= p["high"] and p["length"] in lengths
    assert [p["length"] for p in choose_points(lengths, 3)] == [5, 40, 100]
    assert choose_points(lengths, 1)[0]["mean"] == pytest.approx(sum(lengths) / len(lengths))
    with pytest.raises(ValueError, match="k must be an int of at least 1"):
        choose_points(lengths, 0)


def test_seqpoint(tiny):
    lengths = [3, 3, 3, 5, 9, 9, 17, 30, 30, 30, 30]
    report = seqpoint(tiny, lengths, ks=[1, 2, 5])
    reference = sum(bench_bert(tiny, seq=n, every_layer=False)["cycles"] for n in lengths)
    assert report["reference"]["cycles"] == reference
    assert report["inputs"] == 11 and report["distinct_lengths"] == 5
    assert report["ks"][5]["error"] == 0.0                # every length its own point: exact
    cycles = report["cycles_by_length"]
    for row in report["ks"].values():
        assert row["cycles"] == sum(p["weight"] * cycles[p["length"]] for p in row["points"])
        assert row["error"] == (row["cycles"] - reference) / reference
    assert [p["length"] for p in report["ks"][1]["points"]] == [17]      # nearest the mean
    for row in report["ks"].values():
        assert row["speedup_rtl"] >= 1.0 and row["cycles"] > 0
    with pytest.raises(BertError, match="input lengths must be from 1 to"):
        seqpoint(tiny, [4, 600])
    with pytest.raises(BertError, match="no inputs"):
        seqpoint(tiny, [])


def test_seqpoint_compare(tiny):
    """The speed-up of 8x8 over 4x4, projected from the k points and against every input."""
    wide = compile_shape(TINY, PRESETS["8x8"], calibration_seq=32, calibration_batch=2)
    lengths = [3, 3, 3, 5, 9, 9, 17, 30, 30, 30, 30]
    report = compare([tiny, wide], lengths, ks=[1, 2, 5])
    assert (report["baseline"], report["configs"]) == ("4x4", ["4x4", "8x8"])
    each = [sum(bench_bert(bert, seq=n, every_layer=False)["cycles"] for n in lengths)
            for bert in (tiny, wide)]
    reference = report["reference"]
    assert [reference[cfg]["cycles"] for cfg in ("4x4", "8x8")] == each
    assert reference["8x8"]["speedup"] == each[0] / each[1] and reference["4x4"]["speedup"] == 1
    row = report["ks"][5]["configs"]["8x8"]            # every length its own point: exact
    assert row["projected_speedup"] == pytest.approx(reference["8x8"]["speedup"], rel=1e-12)
    assert row["error"] == pytest.approx(0, abs=1e-12)
    assert row["profiled_error"] == pytest.approx(0, abs=1e-12)
    cycles = report["cycles_by_length"]
    one = report["ks"][1]            # one point: every input read as the representative
    rep = one["points"][0]["length"]
    assert one["configs"]["8x8"]["profiled_speedup"] == pytest.approx(
        each[0] / (len(lengths) * cycles["8x8"][rep]), rel=1e-12)
    for row in report["ks"].values():              # representatives chosen on the baseline
        points = row["points"]
        assert all(p["low"] <= p["length"] <= p["high"] for p in points)
        projected = [sum(p["weight"] * cycles[cfg][p["length"]] for p in points)
                     for cfg in ("4x4", "8x8")]
        assert row["configs"]["8x8"]["projected_speedup"] == projected[0] / projected[1]
    mean = sum(cycles["4x4"][n] for n in lengths) / len(lengths)
    nearest = min(set(lengths), key=lambda n: (abs(cycles["4x4"][n] - mean), n))
    assert [p["length"] for p in report["ks"][1]["points"]] == [nearest]


def test_cli_seqpoint_compare_bad_input(capsys):
    assert cli.main(["seqpoint", "--compare", "8x8"]) == 2
    assert "--compare needs at least two configs, not '8x8'" in capsys.readouterr().err
    assert cli.main(["seqpoint", "--compare", "8x8,3x3"]) == 2
    assert "3x3" in capsys.readouterr().err


# -- the command line -----------------------------------------------------------------------------

@pytest.mark.slow
def test_cli_bench_bert(capsys):
    assert cli.main(["bench", "bert", "--shape", "minilm", "--seq", "8", "--config", "8x8",
                     "--one-layer", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["model"] == "minilm" and report["shape"]["hidden"] == 384
    assert report["seq"] == 8 and report["config"] == "8x8" and 0 < report["utilization"] < 1


def test_cli_bench_bert_bad_input(capsys):
    for argv, message in ((["--seq", "0"], "--seq must be at least 1"),
                          (["--seq", "513"], "--seq must be at most 512"),
                          (["--shape", "gpt"], "--shape must be one of"),
                          (["--config", "3x3"], "3x3")):
        assert cli.main(["bench", "bert", *argv]) == 2
        assert message in capsys.readouterr().err


def test_cli_seqpoint_and_profile_bad_input(tmp_path, capsys):
    assert cli.main(["seqpoint", "--k", "0"]) == 2
    assert "--k must be at least 1" in capsys.readouterr().err
    assert cli.main(["seqpoint", "--texts", str(tmp_path / "none.txt")]) == 2
    assert "--texts must be stdlib, sentences, stsb or a text file" in capsys.readouterr().err
    assert cli.main(["profile", "--config", "3x3"]) == 2
    assert "3x3" in capsys.readouterr().err


def test_profile_accelerator_side(tmp_path):
    """``bertaccel profile``'s accelerator column: the cycle model's breakdown of the same model,
    by the host's op classes; the fused nonlinear ops take a small share."""
    from bertaccel.analysis import profile as prof
    from bertaccel.analysis.perf import random_model

    folder = tmp_path / "tiny"
    random_model(TINY).save_pretrained(folder)
    accel = prof.accelerator_side(str(folder), config="4x4", seq=16)
    assert accel["config"] == "4x4" and accel["mode"] == "inference"
    assert set(accel["cycles"]) == set(prof.OP_CLASSES)
    assert sum(accel["cycles"].values()) == accel["total_cycles"]
    assert accel["cycles"]["dropout"] == 0 and accel["cycles"]["other"] == 0
    assert accel["memory_intensive_share"] < 0.2
    assert sum(accel["breakdown"].values()) == accel["total_cycles"]
    with pytest.raises(prof.ProfileError, match="cannot run|longer than"):
        prof.accelerator_side(str(folder), config="4x4", seq=600)
