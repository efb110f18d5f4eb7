"""docs/fpga_results.md is what ``fpga/results_page.py`` writes from the committed JSON.

No synthesis runs: the page is rendered from ``bench/results/`` and compared with the committed
page, so a JSON file rewritten by a bench without the page (or a page edited by hand) fails.
"""

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

from bertaccel.fpga import results_page

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "bench" / "results"
PAGE = ROOT / "docs" / "fpga_results.md"


def test_committed_page_equals_the_generated_one():
    assert PAGE.read_text() == results_page.render(RESULTS), (
        "docs/fpga_results.md is stale: run python -m bertaccel.fpga.results_page")


def test_synth_md_equals_the_tables_of_synth_json():
    summary = json.loads((RESULTS / "synth.json").read_text())
    assert (RESULTS / "synth.md").read_text() == results_page.synth_markdown(summary)


def _copy_results(tmp_path):
    folder = tmp_path / "results"
    folder.mkdir()
    for name in ("synth.json", "netlist_8x8.json", *(p.name for p in RESULTS.glob("ulx3s-*"))):
        shutil.copy(RESULTS / name, folder / name)
    return folder


def test_page_follows_its_json_and_its_stamp(tmp_path):
    folder = _copy_results(tmp_path)
    before = results_page.render(folder)
    board = json.loads((folder / "ulx3s-2x2-85F.json").read_text())
    changed = copy.deepcopy(board)
    changed["fmax_mhz"] = 12.34
    changed.update(commit="abc123", date="2026-01-02 03:04 UTC",
                   machine={"cpu": "AMD EPYC", "isa": "AVX2", "cores": 2})
    (folder / "ulx3s-2x2-85F.json").write_text(json.dumps(changed))
    after = results_page.render(folder)
    assert after != before
    assert "| 12.3 MHz (25 MHz) |" in after
    assert "`bench/results/ulx3s-2x2-85F.json`: commit abc123, 2026-01-02 03:04 UTC, AMD EPYC, " \
           "AVX2, 2 cores;" in after


def test_check_flag_reports_a_stale_page(tmp_path):
    folder = _copy_results(tmp_path)
    page = tmp_path / "page.md"
    run = [sys.executable, "-m", "bertaccel.fpga.results_page", "--results", str(folder),
           "--output", str(page)]
    assert subprocess.run(run, capture_output=True).returncode == 0
    assert subprocess.run([*run, "--check"], capture_output=True).returncode == 0
    page.write_text(page.read_text() + "edited\n")
    stale = subprocess.run([*run, "--check"], capture_output=True, text=True)
    assert stale.returncode == 1
    assert "differs" in stale.stderr


def test_bad_folder_is_a_one_line_error(tmp_path):
    done = subprocess.run([sys.executable, "-m", "bertaccel.fpga.results_page",
                           "--results", str(tmp_path / "none"),
                           "--output", str(tmp_path / "page.md")],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "--results must be a folder" in done.stderr


def test_lut_core_section_follows_synth_lut_json(tmp_path):
    folder = _copy_results(tmp_path)
    assert "multiplying in the fabric" not in results_page.render(folder)
    run = {"config": "16x8 (custom: t)", "seed": 1, "lut4": 31000, "ff": 40000,
           "mult18x18d": 156, "dp16kd": 168, "fmax_mhz": 126.44, "yosys_s": 600,
           "nextpnr_s": 2400, "critical_path": {"from": "a.Q", "to": "b.DI", "delay_ns": 7.91,
                                                "routing_ns": 5.5}}
    stopped = {"config": "16x8 (custom: t)", "seed": 2, "lut4": 31000, "ff": 40000,
               "mult18x18d": 156, "dp16kd": 168, "error": "stopped after 80 min"}
    (folder / "synth_lut.json").write_text(json.dumps(
        {"config": "16x8 (custom: t)", "lut_pes": 23, "target": "ecp5-85k",
         "part": "LFE5U-85F-6BG381C", "freq_mhz": 150.0, "runs": [run, stopped]}))
    page = results_page.render(folder)
    assert "| 16x8 (custom: t) | 31,000 | 40,000 | 156 | 168 | 126.4 | **126.4** |" in page
    assert "* seed 1: a.Q -> b.DI (7.91 ns, 5.50 of it routing); yosys 10 min" in page
    assert "* seed 2: not routed, stopped after 80 min" in page
    assert "`lut_pes` 23" in page
