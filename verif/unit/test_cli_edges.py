"""The edges of the command line: every bad input is one line on stderr, ``bertaccel: error:
...``, with exit status 2, found before any work (nothing compiled, profiled, simulated or
written); long work says what it does on stderr.

Output paths are checked by :mod:`bertaccel.sw.paths`, which every command uses; config files
must name every field or a base preset; a GEMM that needs more memory than the machine (or
``--max-memory``) allows is refused with the figure.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bertaccel.hw.config import PRESETS, AccelConfig, ConfigError, load_config
from bertaccel.sw import cli
from bertaccel.sw.paths import PathError, check_file, check_folder

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


def test_verilog_writes_complete_config_files(tmp_path, capsys):
    """The JSON ``bertaccel verilog`` writes names every field and reads back as the config."""
    assert cli.main(["verilog", "--config", "4x8", "-o", str(tmp_path)]) == 0
    written = next(tmp_path.glob("bertaccel_core_*.json"))
    fields = json.loads(written.read_text())
    assert set(fields) == {field for field in AccelConfig.__dataclass_fields__}
    assert load_config(str(written)) == PRESETS["4x8"]
