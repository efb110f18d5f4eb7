"""The edges of the command line: every bad input is one line on stderr, ``bertaccel: error:
...``, with exit status 2, found before any work (nothing compiled, profiled, simulated or
written); long work says what it does on stderr.

Output paths are checked by :mod:`bertaccel.sw.paths`, which every command uses; config files
must name every field or a base preset; a GEMM that needs more memory than the machine (or
``--max-memory``) allows is refused with the figure.
"""

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from bertaccel import cli
from bertaccel.hw.config import PRESETS, load_config
from bertaccel.sw import checked_gemm
from bertaccel.sw.paths import PathError, check_file, check_folder
from verif.helpers import tiny_bert_folder

ROOT = Path(__file__).resolve().parents[2]


def one_line_error(capsys, *messages):
    """The stderr of a command that just failed: one ``bertaccel: error:`` line holding every
    one of ``messages``."""
    err = capsys.readouterr().err
    assert err.startswith("bertaccel: error: ") and err.count("\n") == 1, err
    for message in messages:
        assert message in err, (message, err)
    return err


@pytest.fixture
def a_file(tmp_path):
    path = tmp_path / "a_file"
    path.write_text("")
    return path


# -- output paths ---------------------------------------------------------------------------------

def test_check_folder(tmp_path, a_file):
    made = check_folder(tmp_path / "new" / "deeper")
    assert made.is_dir() and not list(made.iterdir())      # the probe file is gone
    for path, message in ((a_file, "is a file, not a folder"),
                          (a_file / "below", f"{str(a_file)!r} is a file, not a folder"),
                          ("/dev/null/sub", "'/dev/null' is not a folder"),
                          ("/proc/bertaccel-x", "cannot be made in '/proc'")):
        with pytest.raises(PathError, match="^output folder .*" + message.replace("(", ".")):
            check_folder(path)


def test_check_file(tmp_path, a_file):
    assert check_file(tmp_path / "new" / "plot.png") == tmp_path / "new" / "plot.png"
    assert (tmp_path / "new").is_dir() and not (tmp_path / "new" / "plot.png").exists()
    cases = [(dict(path=tmp_path), "is a folder"),
             (dict(path=a_file / "p.png"), "its folder"),
             (dict(path="/proc/bertaccel-x/p.png"), "cannot be made in '/proc'"),
             (dict(path=tmp_path / "x.csv", suffixes=(".npy",)), "must end in .npy"),
             (dict(path=tmp_path / "no" / "x.npy", make_folder=False), "does not exist")]
    for kwargs, message in cases:
        with pytest.raises(PathError, match=message):
            check_file(what="--png", **kwargs)
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("output", ["/proc/bertaccel-x", "{file}", "/dev/null/sub",
                                    "{file}/below"])
def test_verilog_refuses_an_output_it_cannot_write(capsys, a_file, output):
    output = output.format(file=a_file)
    assert cli.main(["verilog", "--config", "2x2", "-o", output]) == 2
    one_line_error(capsys, f"output folder {output!r}")
    assert sorted(path.name for path in a_file.parent.iterdir()) == ["a_file"]


@pytest.mark.parametrize("argv", [
    ["gemm", "--m", "8", "--k", "8", "--n", "8", "--device", "rtl", "--build-root", "{bad}"],
    ["run", "--text", "x", "--device", "rtl", "--build-root", "{bad}"],
    ["synth", "--config", "2x2", "--build-root", "{bad}"],
    ["demo", "-o", "{bad}"],
    ["demo", "-o", "{tmp}/demo", "--build-root", "{bad}"],
], ids=["gemm", "run", "synth", "demo", "demo-build"])
def test_build_folders_are_checked_first(capsys, monkeypatch, a_file, argv):
    """A build folder that cannot be made: refused before Verilator, yosys or the model."""
    from bertaccel.sw.bert import text
    from bertaccel.fpga import synth
    monkeypatch.setattr(synth, "synthesize", lambda *a, **k: pytest.fail("synthesised"))
    monkeypatch.setattr(text, "run_texts", lambda *a, **k: pytest.fail("ran"))
    argv = [arg.format(bad=a_file / "below", tmp=a_file.parent) for arg in argv]
    assert cli.main(argv) == 2
    one_line_error(capsys, f"{str(a_file)!r} is a file, not a folder")
    assert sorted(path.name for path in a_file.parent.iterdir()) == ["a_file"]


@pytest.mark.parametrize("option, message", [
    ("99", "lut_pes must be an int from 0 to rows * cols (4), not 99"),
    ("two", "--lut-pes must be a number or auto, not 'two'"),
])
def test_synth_lut_pes_is_checked_first(capsys, monkeypatch, option, message):
    from bertaccel.fpga import synth
    monkeypatch.setattr(synth, "synthesize", lambda *a, **k: pytest.fail("synthesised"))
    assert cli.main(["synth", "--config", "2x2", "--lut-pes", option]) == 2
    one_line_error(capsys, message)


def test_synth_names_the_lut_pes_that_fit(capsys, monkeypatch, tmp_path):
    """A core with more MACs than the part's DSPs: refused with the lut_pes that fits, which
    ``--lut-pes auto`` then takes."""
    from bertaccel.fpga import synth
    seen = []
    monkeypatch.setattr(synth, "synthesize", lambda cfg, *a, **k: seen.append(cfg) or 1 / 0)
    config = tmp_path / "16x8.json"
    config.write_text(json.dumps({"base": "8x8", "rows": 16}))
    assert cli.main(["synth", "--config", str(config), "--build-root", str(tmp_path)]) == 2
    one_line_error(capsys, "needs 179 MULT18X18D > 156", "lut_pes 23 would fit")
    assert not seen
    with pytest.raises(ZeroDivisionError):
        cli.main(["synth", "--config", str(config), "--lut-pes", "auto",
                  "--build-root", str(tmp_path)])
    assert [cfg.lut_pes for cfg in seen] == [23]


def test_profile_png_is_checked_before_profiling(capsys, monkeypatch):
    from bertaccel.analysis import profile as prof
    monkeypatch.setattr(prof, "profile", lambda *a, **k: pytest.fail("profiled"))
    assert cli.main(["profile", "--model", "minilm", "--png", "/proc/bertaccel-x/p.png"]) == 2
    one_line_error(capsys, "--png '/proc/bertaccel-x/p.png'", "cannot be made in '/proc'")


@pytest.mark.parametrize("script, option", [("seqpoint", "--output"), ("synth", "--output"),
                                            ("profile_host", "--png"),
                                            ("ulx3s", "--build-dir")])
def test_bench_scripts_check_their_outputs(a_file, script, option):
    """The bench scripts' JSON, PNG and build paths: one line, exit 2, before any work."""
    bad = str(a_file / "out.json")
    done = subprocess.run([sys.executable, str(ROOT / "bench" / f"{script}.py"), option, bad],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and "error: " + option in done.stderr, done.stderr
    assert "is a file, not a folder" in done.stderr



def test_version_comes_from_the_package_metadata(capsys):
    import importlib.metadata

    with pytest.raises(SystemExit) as exit_info:
        cli.main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out == f"bertaccel {importlib.metadata.version('bertaccel')}\n"

# -- config files ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fields, missing", [({}, "rows, cols, in_width"),
                                             ({"rows": 16}, "cols, in_width, acc_width")])
def test_a_partial_config_file_is_refused(tmp_path, capsys, fields, missing):
    path = tmp_path / "c.json"
    path.write_text(json.dumps(fields))
    assert cli.main(["gemm", "--config", str(path), "--m", "8", "--k", "8", "--n", "8"]) == 2
    one_line_error(capsys, f"config file {str(path)!r}: the config leaves out {missing}",
                   '"base": "8x8"')


def test_a_config_on_a_base_is_labelled_custom(tmp_path, capsys):
    path = tmp_path / "c.json"
    path.write_text('{"base": "8x8", "acc_depth": 4096}')
    assert cli.main(["gemm", "--config", str(path), "--m", "8", "--k", "8", "--n", "8",
                     "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["config"] == "8x8 (custom: acc_depth 4096)"
    assert report["tag"] == load_config(str(path)).tag


# -- big work: bounded and visible ----------------------------------------------------------------

def test_program_size_is_the_compiled_size():
    """The closed form that the memory estimate rests on counts what the compiler writes (or
    refuses what it refuses), with and without epilogues, over edge tiles and loop orders."""
    import itertools

    import torch

    from bertaccel.sw.epilogue import Tail, random_epilogue
    from bertaccel.sw.program import ProgramError
    from bertaccel.sw.tiler import compile_gemm, plan_gemm, program_size

    shapes = ((1, 1, 1), (7, 33, 5), (300, 70, 129), (1000, 8, 8), (8, 700, 8), (97, 65, 40))
    # High rows (k_high) are tiled apart from the others: more K tiles than ceil(k / rows).
    # A Tail stores the strips of its last columns again.
    for name, (m, k, n), ep, third in itertools.product(
            ("2x2", "4x8", "16x16"), shapes, (None, "requant", "softmax", "layernorm", "tail"),
            (0, 1)):
        cfg = PRESETS[name]
        k_high = third * (k // 3)
        if third and not k_high or ep == "tail" and n < 2:
            continue
        if name == "2x2" and m * k * n > 10**6:
            continue  # 340,000 tiles to compile; (97, 65, 40) has its edges on 2x2
        gen = torch.Generator().manual_seed(m)
        if ep == "tail":
            columns = max(1, n // 5)
            epilogue = Tail(random_epilogue("gelu", k=k, n=n - columns, generator=gen),
                            random_epilogue("gelu", k=k, n=columns, generator=gen), columns)
        else:
            epilogue = None if ep is None else random_epilogue(ep, k=k, n=n, generator=gen)
        try:
            program = compile_gemm(cfg, m, k, n, epilogue=epilogue, k_high=k_high)
        except ProgramError:
            with pytest.raises(ProgramError):
                plan_gemm(cfg, m, k, n, epilogue=epilogue, k_high=k_high)
            continue
        assert program_size(cfg, program.meta["plan"], epilogue=epilogue) == {
            "instructions": len(program.instrs), "matmuls": program.counts()["MATMUL"],
            "data_beats": program.n_data_beats, "out_beats": program.n_out_beats}, \
            (name, m, k, n, ep, k_high)


def test_sizes():
    from bertaccel.sw.budget import BudgetError, format_size, parse_size
    assert parse_size("4G") == 4 << 30 and parse_size("512m") == 512 << 20
    assert parse_size("1.5GiB") == 3 << 29 and parse_size("1000") == 1000
    for bad in ("", "4X", "-1G", "0", "G"):
        with pytest.raises(BudgetError, match="--max-memory must be a size such as 4G"):
            parse_size(bad)
    assert format_size(3 << 29) == "1.5 GiB" and format_size(100) == "100 bytes"


def test_gemm_memory_grows_with_the_program():
    from bertaccel.sw.budget import available_memory, check_memory, gemm_memory, BudgetError
    cfg = PRESETS["8x8"]
    small, big = gemm_memory(cfg, 64, 64, 64), gemm_memory(cfg, 2048, 2048, 2048)
    assert 32 << 20 <= small < 64 << 20 and 3 << 30 < big < 5 << 30
    assert gemm_memory(PRESETS["2x2"], 512, 512, 512) > gemm_memory(cfg, 512, 512, 512)
    check_memory(small, limit=small)
    with pytest.raises(BudgetError, match=r"needs about 3\.\d GiB of memory, more than "
                                          r"--max-memory 1\.0 GiB"):
        check_memory(big, limit=1 << 30, what="it")
    assert available_memory() > 0


@pytest.mark.parametrize("argv, message", [
    (["--m", "100000", "--k", "100000", "--n", "100000"],
     "a 100000 x 100000 x 100000 GEMM on 8x8 needs about "),
    (["--m", "512", "--k", "512", "--n", "512", "--max-memory", "64M"],
     "more than --max-memory 64.0 MiB"),
    (["--m", "512", "--k", "512", "--n", "512", "--epilogue", "softmax", "--max-memory", "1G",
      "--config", "2x2"], "a SOFTMAX row of n = 512 columns needs 256 accumulator rows"),
    (["--m", "8", "--k", "8", "--n", "8", "--max-memory", "lots"], "--max-memory must be"),
], ids=["machine", "max-memory", "no-fit", "bad-size"])
def test_gemm_beyond_its_memory_is_refused(capsys, monkeypatch, argv, message):
    """Refused before the operands exist: ``run_gemm`` is never called."""
    monkeypatch.setattr(cli.gemm, "run_gemm", lambda *a, **k: pytest.fail("ran"))
    assert cli.main(["gemm", *argv]) == 2
    err = one_line_error(capsys, message)
    if "100000" in message:
        assert "TiB of memory, more than this machine has available" in err


def test_run_beyond_its_memory_is_refused(capsys, tiny_model):
    """``bertaccel run``: refused once the model is compiled, before the device starts."""
    assert cli.main(["run", "--model", str(tiny_model), "--text", "A text of some words.",
                     "--text", "Two.", "--config", "4x4", "--no-cache", "--quiet", "--max-memory",
                     "1M"]) == 2
    one_line_error(capsys, "a batch of 2 texts of 8 tokens on 4x4 needs about ",
                   "more than --max-memory 1.0 MiB")


def test_a_json_command_that_fails_prints_a_json_error(capsys):
    assert cli.main(["gemm", "--m", "0", "--k", "4", "--n", "4", "--json"]) == 2
    out, err = capsys.readouterr()
    assert json.loads(out) == {"error": "--m must be at least 1, not 0", "status": 2}
    assert err == "bertaccel: error: --m must be at least 1, not 0\n"
    assert cli.main(["gemm", "--m", "0", "--k", "4", "--n", "4"]) == 2
    assert capsys.readouterr().out == ""          # without --json: stderr alone


@pytest.mark.slow
def test_bench_bert_beyond_its_memory_is_refused(capsys):
    assert cli.main(["bench", "bert", "--shape", "minilm", "--seq", "64", "--batch", "2",
                     "--config", "8x8", "--max-memory", "100M", "--json"]) == 2
    one_line_error(capsys, "minilm with 2 x 64 tokens on 8x8 needs about ",
                   "more than --max-memory 100.0 MiB")

def test_a_large_gemm_says_what_it_does(capsys, monkeypatch):
    monkeypatch.setattr(checked_gemm, "LARGE", 1)
    assert cli.main(["gemm", "--m", "40", "--k", "40", "--n", "40", "--epilogue", "gelu"]) == 0
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("bertaccel: 40 x 40 x 40 GEMM on 8x8: ") and "instructions" \
        in lines[0]
    assert lines[1] == "bertaccel: compiling"
    assert lines[2].startswith("bertaccel: done in ") and lines[2].endswith(
        "; running it on the software device and the cycle model")
    assert lines[-1].startswith("bertaccel: done in ") and len(lines) == 6, lines


def test_a_simulator_build_is_announced_before_it_starts():
    from bertaccel.sw.devices.base import start_announced

    class Device:
        cfg = PRESETS["8x8"]
        build = None

        def start(self):
            said.append("started")
            self.build = type("Build", (), {"rebuilt": True, "seconds": 93.2,
                                            "build_dir": Path("b")})()

    said = []
    start_announced(Device(), said.append)
    assert said == ["building the RTL simulator for 8x8 unless it is built (not built on this "
                    "machine before: minutes, timed; cached after) and starting it", "started",
                    "the RTL simulator was built in 93 s"]
    Device.last_build_seconds = lambda self: 156.4   # the estimate is the last measured build
    said.clear()
    start_announced(Device(), said.append)
    assert said[0] == ("building the RTL simulator for 8x8 unless it is built (its last build "
                       "here took 156 s; cached after) and starting it")


def test_rate_progress_counts_part_of_a_batch():
    import io

    from bertaccel.sw.bert.progress import RateProgress

    out = io.StringIO()
    bar = RateProgress(out)
    bar(0.25, 12)
    bar(6, 12)
    bar(12, 12)
    lines = out.getvalue().splitlines()
    assert " 0.2/12 texts " in lines[0] and " 6/12 texts " in lines[1]
    assert " 12/12 texts " in lines[2] and lines[2].endswith("ETA 0:00")


# -- interrupts -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    """A small random BERT with MiniLM's tokenizer, saved as a model folder (with its pooler:
    loading it warns of nothing)."""
    return tiny_bert_folder(tmp_path_factory.mktemp("tiny-bert"), seed=7, pooler=True)


def test_an_interrupted_run_leaves_no_output(tmp_path, capsys, monkeypatch, tiny_model):
    """Ctrl-C in the middle of ``bertaccel run --output F.npy``: exit status 130, one line,
    no F.npy and no temporary file beside it."""
    from bertaccel.sw.bert import progress

    texts = tmp_path / "texts.txt"
    texts.write_text("".join(f"Text number {i}.\n" for i in range(8)))
    calls = []

    def interrupt(self, done, total):
        calls.append(done)
        if len(calls) == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(progress.RateProgress, "__call__", interrupt)
    out = tmp_path / "out.npy"
    assert cli.main(["run", "--model", str(tiny_model), "--text-file", str(texts), "--output",
                     str(out), "--config", "4x4", "--batch-size", "2", "--no-cache",
                     "--no-fp32"]) == 130
    assert capsys.readouterr().err.splitlines()[-1] == "bertaccel: interrupted"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["texts.txt"]


def test_ctrl_c_stops_the_whole_run(tmp_path, tiny_model):
    """SIGINT to the process group, as a terminal sends it, once the run shows progress: exit
    status 130, ``bertaccel: interrupted``, nothing written, no process left behind."""
    import os
    import signal

    texts = tmp_path / "texts.txt"
    texts.write_text("".join(f"Text number {i} of many.\n" for i in range(5000)))
    out = tmp_path / "out.jsonl"
    run = subprocess.Popen(
        [sys.executable, "-m", "bertaccel.cli", "run", "--model", str(tiny_model),
         "--text-file", str(texts), "--output", str(out), "--config", "4x4", "--batch-size",
         "1", "--no-cache", "--no-fp32"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
        text=True, start_new_session=True, env=dict(os.environ, HF_HUB_OFFLINE="1"),
        # A terminal's child takes SIGINT: undo an ignored SIGINT this process may hand down
        # (Ray's driver, started by other tests, ignores it).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = ""                       # by character: a line iterator reads ahead and blocks
    while not ("texts/s" in seen and seen.endswith("\n")):     # a whole line of progress
        char = run.stderr.read(1)
        assert char, f"the run ended before it showed progress: {seen}"
        seen += char
    os.killpg(run.pid, signal.SIGINT)
    rest = run.stderr.read()
    assert run.wait(timeout=120) == 130, rest
    assert rest.splitlines()[-1] == "bertaccel: interrupted", rest
    assert sorted(path.name for path in tmp_path.iterdir()) == ["texts.txt"]
    with pytest.raises(ProcessLookupError):
        os.killpg(run.pid, 0)                   # the group is empty


@pytest.mark.parametrize("damage", ["truncated", "garbage", "garbage_bin"])
def test_damaged_weights_are_one_line(tmp_path, capsys, damage):
    """Truncated or garbage ``model.safetensors``, or a garbage ``pytorch_model.bin``: one
    line naming the folder, exit status 2, no traceback."""
    tiny_bert_folder(tmp_path, seed=1, hidden=32, heads=2, intermediate=64, layers=1,
                     positions=32)
    weights = tmp_path / "model.safetensors"
    good = weights.read_bytes()
    if damage == "truncated":
        weights.write_bytes(good[:len(good) // 2])
    else:
        weights.unlink()
        target = weights if damage == "garbage" else tmp_path / "pytorch_model.bin"
        target.write_bytes(random.Random(1).randbytes(4096))
    capsys.readouterr()
    assert cli.main(["run", "--model", str(tmp_path), "--text", "a text", "--config", "2x2",
                     "--device", "ref", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("bertaccel: error:"), err
    assert "cannot load the BERT model" in err and str(tmp_path) in err, err
