"""bertaccel.cluster on a two-node Ray cluster on this machine: sweeps, sharded inference and RTL
regressions, undisturbed and with workers killed.

``ray.cluster_utils.Cluster`` starts a head and a second node, one CPU each, for the module.
Each test joins it as a Ray job of its own; a job's ``worker_process_setup_hook`` (made here,
in the test) can patch the code its workers run: kill the worker in a chosen call (once, by a
marker file, or every time), or break the software device. The commands under test find Ray
joined and use it as it is.
"""

import contextlib
import json
import logging
import os
import re
import signal

import pytest
import ray

from bertaccel.cluster.grid import Workload, config_grid
from bertaccel.cluster.sweep import compile_base, point_row, sweep, time_point
from bertaccel.hw.config import PRESETS
from bertaccel.cli import main
from verif.helpers import tiny_bert_folder

#: The sequence length of the point whose worker dies every time.
PICKED_SEQ = 24


@pytest.fixture(scope="module")
def cluster():
    from ray.cluster_utils import Cluster

    nodes = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    nodes.add_node(num_cpus=1)
    yield nodes
    nodes.shutdown()


@contextlib.contextmanager
def job(cluster, hook=None):
    """This process joined to ``cluster`` as a new job, its workers set up by ``hook``."""
    env = {"env_vars": {"HF_HUB_OFFLINE": "1"}}
    if hook is not None:
        env["worker_process_setup_hook"] = hook
    ray.init(address=cluster.address, logging_level=logging.ERROR, log_to_driver=False,
             runtime_env=env)
    try:
        assert len([node for node in ray.nodes() if node["Alive"]]) == 2
        yield
    finally:
        ray.shutdown()


def command_json(out):
    """The one JSON object that a command printed on ``out``.

    A command that starts Ray stops it before it prints, so its standard output is that object
    alone. Here the test process is the Ray driver, joined before the command runs and still
    joined after it: its error listener prints the raylet's notices about the workers the test
    killed on standard output when they arrive, which can be around the command's print: what
    surrounds the object, if anything, begins with such a notice."""
    start = out.index("{")
    report, end = json.JSONDecoder().raw_decode(out, start)
    for around in (out[:start].strip(), out[end:].strip()):
        assert not around or "(raylet)" in around.splitlines()[0], around
    return report


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    """A small random BERT saved with MiniLM's tokenizer: compiled and run in seconds."""
    return tiny_bert_folder(tmp_path_factory.mktemp("tiny-bert"), seed=0, positions=64)


def kill_in_stage_timer(*, always, once, marker):
    """A setup hook: the worker kills itself when it times a ``(rows, seq)`` point: ``always``
    every time, ``once`` the first time only (the ``marker`` file says it did)."""
    def hook():
        from bertaccel.sw.bert import timing

        model = timing.StageTimer.model

        def dying(self, batch, seq):
            point = (self.bert.cfg.rows, seq)
            if point == always or (point == once and not os.path.exists(marker)):
                if point == once:
                    open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            return model(self, batch, seq)

        timing.StageTimer.model = dying
    return hook


# -- sweeps -------------------------------------------------------------------------------------

SWEEP_CONFIGS = ["4x4", "8x8", "16x16"]


@pytest.fixture(scope="module")
def tiny_bert(tiny_folder):
    """The tiny model compiled here, as the sweep's compile task compiles it."""
    return compile_base(str(tiny_folder))


def sweep_grid(folder):
    configs, _ = config_grid(SWEEP_CONFIGS, {})
    return configs, [Workload(str(folder), seq) for seq in (16, PICKED_SEQ)]


def test_sweep_cli(cluster, tiny_folder, tiny_bert, tmp_path, capsys):
    """``bertaccel sweep --json`` over a grid with an invalid combination and configs that do
    not fit the part: every point a row, the cycles those of the cycle model run here."""
    out = tmp_path / "sweep"
    with job(cluster):
        status = main(["sweep", "--model", str(tiny_folder), "--seq", f"16,{PICKED_SEQ}",
                       "--configs", "16x16,32x32", "--epilogue-lanes", "4,32", "--synth",
                       "-o", str(out), "--json"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    report = command_json(captured.out)
    points = report["points"]
    # 16x16 and 32x32, each with 4 lanes and with 32 (which 16x16 refuses), times two seqs
    assert len(points) == 8
    invalid = [p for p in points if p["failure"] == "ConfigError"]
    assert len(invalid) == 2 and "epilogue_lanes" in invalid[0]["reason"]
    timed = [p for p in points if p["failure"] != "ConfigError"]
    configs = {cfg.tag: cfg for cfg in config_grid(["16x16", "32x32"],
                                                   {"epilogue_lanes": [4, 32]})[0]}
    assert [p["config"]["label"] for p in timed] == ["16x16 el4"] * 2 + ["32x32 el4"] * 2 \
        + ["32x32"] * 2
    for point in timed:
        assert point["failure"] == "DoesNotFit" and "does not fit ecp5-85k" in point["reason"]
        local = time_point(tiny_bert, configs[point["config"]["tag"]],
                           Workload(**point["workload"]))
        assert point["cycles"] == local["cycles"] and point["stages"] == local["stages"]
    assert sorted(path.name for path in out.iterdir()) == ["pareto.png", "sweep.csv",
                                                           "sweep.json"]
    assert json.loads((out / "sweep.json").read_text())["points"] == points


def test_sweep_survives_killed_workers(cluster, tiny_folder, tiny_bert, tmp_path):
    """Two points' workers are killed: one the first time (its task runs again, on a new
    worker, and gives what an undisturbed run gives), one every time (after its retry it is a
    failed row); every other point is there, as the same computation gives it here."""
    configs, workloads = sweep_grid(tiny_folder)
    undisturbed = [point_row(cfg, w, time_point(tiny_bert, cfg, w))
                   for cfg in configs for w in workloads]
    assert all(p["status"] == "ok" for p in undisturbed), undisturbed
    marker = tmp_path / "killed"
    hook = kill_in_stage_timer(always=(4, PICKED_SEQ), once=(8, 16), marker=str(marker))
    with job(cluster, hook):
        points = sweep(configs, workloads, retries=1)["points"]
    assert marker.exists()                    # the once-killed worker did die
    dead = [index for index, p in enumerate(points) if p["status"] != "ok"]
    assert len(dead) == 1, points
    point = points[dead[0]]
    assert (point["config"]["label"], point["workload"]["seq"]) == ("4x4", PICKED_SEQ)
    assert point["failure"] == "WorkerCrashedError" and "2 tries" in point["reason"]
    assert point["cycles"] is None
    assert points[:dead[0]] + points[dead[0] + 1:] == \
        undisturbed[:dead[0]] + undisturbed[dead[0] + 1:]


# -- sharded inference ---------------------------------------------------------------------------

def kill_in_run_batch(marker):
    """A setup hook: an encoder's first batch kills its actor, once (or every time without
    ``marker``)."""
    def hook():
        from bertaccel.sw.bert import encoder

        run_batch = encoder.Encoder.run_batch

        def dying(self, batch, *args, **kwargs):
            if not (marker and os.path.exists(marker)):
                if marker:
                    open(marker, "w").close()
                os.kill(os.getpid(), signal.SIGKILL)
            return run_batch(self, batch, *args, **kwargs)

        encoder.Encoder.run_batch = dying
    return hook


@pytest.fixture(scope="module")
def texts(tmp_path_factory):
    path = tmp_path_factory.mktemp("texts") / "texts.txt"
    words = "the array runs every layer in int8 with fused epilogues and sorted batches".split()
    lines = [" ".join(words[(i * 7) % len(words):][:3 + i % 9] + words[:i % 5])
             for i in range(70)]
    lines[10] = "   "                            # a blank line, skipped
    path.write_text("\n".join(lines) + "\n")
    return path


def run_cli(folder, texts, output, *extra):
    return main(["run", "--model", str(folder), "--text-file", str(texts), "--config", "4x4",
                 "--batch-size", "2", "--output", str(output), "--quiet", "--json", *extra])


def test_run_on_ray_equals_one_process(cluster, tiny_folder, texts, tmp_path, capsys):
    """Windows of 32 texts over two actors, one of them killed in its first batch: the same
    embeddings, cosines and cycles as one process, in input order."""
    assert run_cli(tiny_folder, texts, tmp_path / "one.jsonl") == 0
    one = json.loads(capsys.readouterr().out)
    marker = tmp_path / "killed"
    with job(cluster, kill_in_run_batch(str(marker))):
        assert run_cli(tiny_folder, texts, tmp_path / "ray.jsonl", "--ray") == 0
    sharded = command_json(capsys.readouterr().out)
    assert marker.exists()
    assert (tmp_path / "ray.jsonl").read_text() == (tmp_path / "one.jsonl").read_text()
    for key in ("texts", "batches", "cycles", "tokens", "padded_tokens", "cosine_fp32",
                "utilization", "blank_lines"):
        assert sharded[key] == one[key], key
    assert one["texts"] == 69 and one["batches"] == 35


def test_run_on_ray_reports_a_window_that_fails(cluster, tiny_folder, texts, tmp_path,
                                               capsys):
    """An actor that dies in every batch, with no retries: the run stops with one line naming
    the texts of the window, and writes no output."""
    with job(cluster, kill_in_run_batch(None)):
        status = run_cli(tiny_folder, texts, tmp_path / "out.npy", "--ray", "--retries", "0")
    err = capsys.readouterr().err
    assert status == 1
    assert re.search(r"bertaccel: error: texts \d+\.\.\d+ \(window \d\) failed: "
                     r"ActorDiedError: .* \(gave up after 1 try\)\n$", err), err
    assert not (tmp_path / "out.npy").exists()


# -- RTL regressions -----------------------------------------------------------------------------

def break_software_device():
    """A setup hook: the software device gets the first output wrong for odd ``m``."""
    def hook():
        from bertaccel.sw.devices import software

        run = software.SoftwareDevice.run

        def wrong(self, program, **inputs):
            result = run(self, program, **inputs)
            c = result.outputs["c"]
            if c.shape[0] % 2:
                c[0, 0] ^= 1
            return result

        software.SoftwareDevice.run = wrong
    return hook


def test_regress_bit_exact(cluster, sim_root, capsys):
    argv = ["regress", "--configs", "2x2", "--programs", "6", "--seed", "7",
            "--build-root", str(sim_root), "--json"]
    with job(cluster):
        assert main(argv) == 0
    report = command_json(capsys.readouterr().out)
    assert len(report["cases"]) == 6 and not report["failures"]
    assert {case["epilogue"] for case in report["cases"]} == {None, "requant", "gelu",
                                                              "softmax", "layernorm"}
    assert report["cases"][-1]["src_idle"] > 0


def test_regress_reports_failing_seeds(cluster, sim_root, capsys):
    """With the software device broken for odd m, exactly those programs fail, each printed
    with its seed and the command that runs it alone."""
    from bertaccel.cluster.regress import draw_cases

    with job(cluster, break_software_device()):
        status = main(["regress", "--configs", "2x2", "--programs", "6", "--seed", "7",
                       "--build-root", str(sim_root)])
    out = capsys.readouterr().out
    assert status == 1
    odd = [case for case in draw_cases(["2x2"], 6, 7) if case.m % 2]
    assert odd and out.count("FAIL seed ") == len(odd), out
    for case in odd:
        assert f"FAIL seed {case.seed}: " in out and f"  {case.command()}\n" in out
    assert f"6 programs, {len(odd)} failed" in out


def test_seed_sweep_equals_single_runs(cluster, tmp_path, capsys):
    """``bertaccel synth --seeds`` on the 2x2 PE array: each seed's run is the one that
    ``synthesize`` keeps for that seed (read back from its cache: the same Fmax and path), the
    lowest and the count that meets the constraint follow from them; runs stopped by the time
    limit are rows with their reason, and the command exits with 1."""
    from bertaccel.fpga import synth

    argv = ["synth", "--config", "2x2", "--design", "mesh", "--seeds", "3,1",
            "--build-root", str(tmp_path), "--json"]
    with job(cluster):
        assert main(argv) == 0
    report = command_json(capsys.readouterr().out)
    assert report["seeds"] == [3, 1] and [run["seed"] for run in report["runs"]] == [3, 1]
    for run in report["runs"]:
        single = synth.synthesize(PRESETS["2x2"], design="mesh", seed=run["seed"],
                                  build_root=tmp_path)
        assert single["cached"] and single["fmax_mhz"] == run["fmax_mhz"]
        assert single["critical_path"] == run["critical_path"]
    fmax = [run["fmax_mhz"] for run in report["runs"]]
    assert report["lowest_mhz"] == min(fmax)
    assert report["met"] == sum(f >= report["freq_mhz"] for f in fmax)

    with job(cluster):
        status = main(argv[:-1] + ["--timeout", "0.0005", "--force"])
    out = capsys.readouterr().out
    assert status == 1
    assert out.count("NotRouted: config 2x2") == 2 and "0 of 2 seeds meet 150 MHz" in out, out
