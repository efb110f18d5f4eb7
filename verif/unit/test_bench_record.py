"""Every bench script writes its JSON result through ``record`` (bench/_record.py), which stamps
it with the commit, the date, the machine and the command that made it."""

import importlib.util
import json
import re
from pathlib import Path

__all__ = []

BENCH = Path(__file__).resolve().parents[2] / "bench"
#: A JSON file written by hand: ``write_text(json.dumps(...))`` or ``json.dump(...)``.
WRITES_JSON = re.compile(r"write_text\(\s*json\.dumps\(|json\.dump\(")
#: Bench files that may write JSON themselves, each with the reason: what they write is not a
#: result. (gemm_memory's child process prints its figures as JSON to the parent: no file.)
NOT_RESULTS = {
    "_record.py": "record itself",
    "multitask_deltas.py": "the cache of measured points, not the report",
    "timing_probe.py": "rewritten netlists for nextpnr; its results are only printed",
}


def _bench_module(name):
    path = BENCH / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name.strip('_')}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_scripts_write_their_json_through_record():
    writers = [path.name for path in sorted(BENCH.glob("*.py"))
               if WRITES_JSON.search(path.read_text())]
    assert [name for name in writers if name not in NOT_RESULTS] == []
    assert "_record.py" in writers        # the pattern finds a hand-written JSON file


def test_record_stamps_and_writes(tmp_path):
    record = _bench_module("_record").record
    output = tmp_path / "results" / "demo.json"
    record({"figure": 1.5}, output, "/anywhere/bench/demo.py", ["--quick"])
    doc = json.loads(output.read_text())
    assert doc["figure"] == 1.5
    assert doc["commit"] is None or isinstance(doc["commit"], str)
    assert doc["date"].endswith("UTC")
    assert {"cpu", "gemm_kernel"} <= set(doc["machine"])
    assert doc["command"].startswith("python bench/")
    assert doc["command"] == "python bench/demo.py --quick"
