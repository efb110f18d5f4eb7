"""bertaccel.cluster without Ray: the sweep's grid, rows, front and files, the regression's
cases and commands, and the commands' bad input (refused before Ray starts)."""

import csv
import json
import shlex

import pytest

from bertaccel.cluster.connect import check_workers, resolve_address
from bertaccel.cluster.grid import (GridError, Workload, config_grid, config_label, int_list,
                                    name_list, workload_grid)
from bertaccel.cluster.pareto import fronts
from bertaccel.cluster.regress import EPILOGUES, STALLS, Case, draw_cases
from bertaccel.cluster.sweep import invalid_row, point_row
from bertaccel.cluster.table import CSV_COLUMNS, format_sweep, write_sweep
from bertaccel.cluster.tasks import Failure, failure_of
from bertaccel.hw.config import PRESETS, AccelConfig
from bertaccel.cli import main


def test_lists():
    assert int_list("--seq", "32, 128,32") == [32, 128]
    assert name_list("--configs", "4x4,8x8") == ["4x4", "8x8"]
    for text, message in (("32,x", "takes integers, not 'x'"), ("0", "at least 1, not 0"),
                          ("4,,8", "without empty items")):
        with pytest.raises(GridError, match=message):
            int_list("--seq", text)


def test_config_grid_crosses_presets_with_fields():
    configs, invalid = config_grid(["4x4", "8x8"], {"acc_depth": [512, 2048],
                                                     "epilogue_lanes": [4, 8]})
    # 4x4 refuses 8 lanes; 8x8 takes both
    assert [(c.name, c.acc_depth, c.ep_lanes) for c in configs] == [
        ("4x4", 512, 4), ("4x4", 2048, 4), ("8x8", 512, 4), ("8x8", 512, 8),
        ("8x8", 2048, 4), ("8x8", 2048, 8)]
    assert [point for point, _ in invalid] == [
        {"base": "4x4", "acc_depth": 512, "epilogue_lanes": 8},
        {"base": "4x4", "acc_depth": 2048, "epilogue_lanes": 8}]
    assert "epilogue_lanes must be" in invalid[0][1]
    assert config_grid(["8x8", "8x8"], {})[0] == [PRESETS["8x8"]]
    assert config_grid([], {"rows": [4]})[0] == [AccelConfig(rows=4)]


def test_config_grid_refuses():
    with pytest.raises(GridError, match="unknown preset '9x9'"):
        config_grid(["9x9"], {})
    with pytest.raises(GridError, match="--rows 3 makes no valid config .* power of two"):
        config_grid(["4x4"], {"rows": [4, 3]})
    with pytest.raises(GridError, match="unknown config field"):
        config_grid(["4x4"], {"queue": [4]})


def test_config_labels():
    assert [config_label(cfg) for cfg in PRESETS.values()] == list(PRESETS)
    configs, _ = config_grid(["16x16", "8x8"], {"cols": [8], "acc_depth": [1024]})
    # 16x8 is no preset: named against the default config of its shape
    assert [config_label(cfg) for cfg in configs] == ["16x8", "8x8 acc1024"]
    assert config_label(AccelConfig(rows=2, cols=4)) == "2x4"


def test_workload_grid():
    assert workload_grid(["minilm", "bert-base"], [32], [1, 2]) == [
        Workload("minilm", 32, 1), Workload("minilm", 32, 2), Workload("bert-base", 32, 1),
        Workload("bert-base", 32, 2)]


def sweep_report(synthesised):
    cfgs = [PRESETS[name] for name in ("4x4", "8x8", "16x16")]
    synths = [{"lut4": 20000, "ff": 15000, "dsp": 65, "bram": 40, "fmax_mhz": 80.0,
               "synth_wall_s": 300.0, "synth_cached": False},
              {"lut4": 40000, "ff": 30000, "dsp": 113, "bram": 60, "fmax_mhz": 60.0,
               "synth_wall_s": 600.0, "synth_cached": True},
              Failure("DoesNotFit", "config 16x16 does not fit ecp5-85k")]
    points = []
    for cfg, synth, cycles in zip(cfgs, synths, (4000, 1000, 300)):
        timing = {"cycles": cycles, "ideal_cycles": 250, "utilization": 250 / cycles,
                  "latency_us": cycles / cfg.clock_mhz, "stages": {"qkv": cycles}}
        points.append(point_row(cfg, Workload("minilm", 32), timing,
                                synth if synthesised else None))
    points.append(point_row(PRESETS["2x2"], Workload("minilm", 32),
                            Failure("BertError", "cannot hold one tile\nsecond line")))
    points.append(invalid_row({"base": "4x4", "epilogue_lanes": 8}, "epilogue_lanes must be",
                              Workload("minilm", 32)))
    return {"schema": "bertaccel-sweep/1", "points": points,
            "synth": {"target": "ecp5-85k"} if synthesised else None, "wall_s": 1.5,
            "cluster": {"cpus": 2}}


def test_rows_and_front_without_synthesis():
    report = sweep_report(False)
    points = report["points"]
    assert points[0]["status"] == "ok" and points[0]["latency_us"] == 4000 / 200
    assert points[3]["status"] == "failed" and points[3]["failure"] == "BertError"
    assert points[3]["reason"] == "BertError: cannot hold one tile"
    assert points[4]["failure"] == "ConfigError"
    # array DSPs 16, 64, 256 and falling latency: all three on the front
    assert [p["config"]["label"] for p in fronts(points)["minilm seq 32 batch 1"]] == [
        "4x4", "8x8", "16x16"]


def test_rows_and_front_with_synthesis(tmp_path):
    report = sweep_report(True)
    points = report["points"]
    assert points[1]["latency_us_fmax"] == 1000 / 60.0 and points[1]["dsp"] == 113
    assert points[2]["status"] == "failed" and points[2]["failure"] == "DoesNotFit"
    assert points[2]["cycles"] == 300 and points[2]["fmax_mhz"] is None
    assert [p["config"]["label"] for p in fronts(points)["minilm seq 32 batch 1"]] == [
        "4x4", "8x8"]
    files = write_sweep(report, tmp_path / "out")
    with open(files["csv"]) as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == list(CSV_COLUMNS) and len(rows) == 5
    assert rows[1]["dsp"] == "113" and rows[2]["reason"].startswith("DoesNotFit: ")
    assert json.loads(open(files["json"]).read())["pareto"] == {
        "minilm seq 32 batch 1": ["4x4", "8x8"]}
    assert open(files["png"], "rb").read(8) == b"\x89PNG\r\n\x1a\n"
    text = format_sweep(report)
    assert "BertError: cannot hold one tile" in text and "second line" not in text
    assert "5 points, 3 failed" in text and "Fmax" in text


def test_cases_take_turns():
    cases = draw_cases(["2x2", "4x8", "8x8"], 200, seed=5)
    assert cases == draw_cases(["2x2", "4x8", "8x8"], 200, seed=5)
    assert cases != draw_cases(["2x2", "4x8", "8x8"], 200, seed=6)
    combos = {(c.config, c.epilogue, (c.src_idle, c.sink_stall)) for c in cases}
    assert len(combos) == 3 * len(EPILOGUES) * len(STALLS)
    for stall in (c.src_idle for c in cases):
        assert stall * 256 == int(stall * 256)     # a whole number of 1/256


def test_case_command_runs_the_case(capsys):
    """A case's command line is a ``bertaccel gemm`` command that runs the case (on the
    software device here)."""
    case = Case("4x4", 5, 9, 6, "layernorm", 12345, 0.25, 0.5)
    assert case.command() == ("bertaccel gemm --config 4x4 --m 5 --k 9 --n 6 --device rtl "
                              "--seed 12345 --epilogue layernorm --src-idle 0.25 "
                              "--sink-stall 0.5")
    argv = shlex.split(case.command("ref"))
    assert main(argv[1:] + ["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["m"], report["k"], report["n"], report["seed"], report["epilogue"]) == (
        5, 9, 6, 12345, "layernorm")


def test_failures():
    import ray.exceptions

    failure = failure_of(ray.exceptions.WorkerCrashedError(), retries=2)
    assert failure.kind == "WorkerCrashedError" and failure.reason.endswith(
        "(gave up after 3 tries)")
    assert Failure("NotRouted", "did not route\nlog: x").line == "NotRouted: did not route"


def test_addresses_and_workers(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert resolve_address() is None and check_workers(2) == 2
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")
    assert resolve_address() == "10.0.0.1:6379" and resolve_address("auto") == "auto"
    with pytest.raises(ValueError, match="limits embedded Ray only"):
        check_workers(2)
    with pytest.raises(ValueError, match="at least 1, not 0"):
        check_workers(0)


@pytest.mark.parametrize("argv, message", [
    (["sweep", "--model", "minilm"], "give the configs to sweep"),
    (["sweep", "--configs", "9x9"], "unknown preset '9x9'"),
    (["sweep", "--configs", "4x4", "--rows", "3"], "--rows 3 makes no valid config"),
    (["sweep", "--configs", "4x4", "--seq", "600"], "--seq must be at most 512"),
    (["sweep", "--configs", "4x4", "--seq", "0"], "--seq values must be at least 1"),
    (["sweep", "--configs", "4x4", "--model", "nope"], "--model must be minilm"),
    (["sweep", "--configs", "4x4", "--target", "ecp5-85k"], "--target applies to --synth"),
    (["sweep", "--configs", "4x4", "--synth", "--target", "xc7"], "xc7"),
    (["sweep", "--configs", "4x4", "--workers", "0"], "--workers must be an int"),
    (["sweep", "--configs", "4x4", "--workers", "2", "--address", "10.0.0.1:6379"],
     "--workers limits embedded Ray only"),
    (["sweep", "--configs", "4x4", "--retries", "-1"], "--retries must be at least 0"),
    (["synth", "--config", "2x2", "--seeds", "1,x"], "--seeds takes integers, not 'x'"),
    (["synth", "--config", "2x2", "--seeds", "1,-1"], "--seeds values must be at least 0"),
    (["synth", "--config", "2x2", "--seeds", "2,1,2"], "--seeds names a seed twice"),
    (["synth", "--config", "2x2", "--seeds", "1,2147483648"], "--seeds must be from 0"),
    (["synth", "--config", "16x16", "--seeds", "1,2"], "does not fit ecp5-85k"),
    (["synth", "--config", "2x2", "--seeds", "1", "--workers", "0"], "--workers must be an int"),
    (["synth", "--config", "2x2", "--workers", "2"], "apply to --seeds only"),
    (["regress", "--configs", "2x2,9x9"], "unknown preset '9x9'"),
    (["regress", "--programs", "0"], "--programs must be at least 1"),
    (["run", "--text", "a", "--workers", "2"], "--address, --workers and --retries apply to"),
    (["run", "--text", "a", "--retries", "1"], "--address, --workers and --retries apply to"),
    (["run", "--text", "a", "--ray", "--workers", "0"], "--workers must be an int"),
])
def test_bad_input(argv, message, capsys, monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("bertaccel: error: ") and message in err, err
    assert err.count("\n") == 1


def test_seed_sweep_text():
    # Routed seeds form the seed table with their lowest; a seed that did not route is a line
    # with its reason; the last line counts the seeds that meet the constraint.
    from bertaccel.cluster.seeds import format_seed_sweep

    run = {"config": "8x8", "lut4": 23502, "ff": 30452, "mult18x18d": 113, "dp16kd": 151}
    report = {"config": "8x8", "design": "core", "target": "ecp5-85k", "lut_mapper": "abc",
              "placer": "static", "router": "router2", "freq_mhz": 75.0, "seeds": [1, 2, 3], "met": 1,
              "lowest_mhz": 70.76, "wall_s": 1312.4,
              "runs": [dict(run, seed=1, fmax_mhz=70.76), dict(run, seed=2, fmax_mhz=79.02),
                       {"seed": 3, "failure": "NotRouted", "reason": "did not finish\nlog"}]}
    text = format_seed_sweep(report)
    assert "| 8x8 | 23,502 | 30,452 | 113 | 151 | 70.8 | 79.0 | **70.8** |" in text, text
    assert "seed 3: NotRouted: did not finish\n" in text
    assert text.endswith("8x8 core on ecp5-85k (abc LUT mapper, static placer, router2): 1 of 3 "
                         "seeds meet 75 MHz; lowest Fmax 70.8 MHz; 1312 s")
