"""Each latency the cycle model reads, one cycle longer: which quick-tier test fails.

::

    python bench/latency_mutants.py

For every latency attribute that :class:`bertaccel.hw.latencies.Latencies` gathers, a fresh
process adds one to it and runs ``verif/block/test_core_cycles.py`` (the core in the Amaranth
simulator against the cycle model). Where the gateware builds its timing from its structure
and the attribute only says what it is, the changed attribute misleads the model and the test
fails. Where the gateware reads the attribute itself (the epilogue's ``Schedule``), both move
together and the test passes: that figure is one source by construction. Prints a line a
mutant and writes ``bench/results/latency_mutants.json``; takes about a minute.
"""

import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
TEST = "verif/block/test_core_cycles.py"

#: (module, class, attribute): the attributes behind each field of Latencies.
ATTRIBUTES = [("bertaccel.hw.harness", "SimHarness", "FIRST_WORD"),
              ("bertaccel.hw.harness", "SimHarness", "DONE_CYCLES"),
              ("bertaccel.hw.queue", "Queue", "LATENCY"),
              ("bertaccel.hw.controller", "TokenChannel", "DELAY"),
              ("bertaccel.hw.execute.preload", "PreloadStage", "HANDOVER_DELAY"),
              ("bertaccel.hw.execute.unit", "ExecuteUnit", "DRAIN"),
              ("bertaccel.hw.store", "StoreUnit", "READ_TO_FIFO"),
              ("bertaccel.hw.epilogue.schedule", "Schedule", "latency"),
              ("bertaccel.hw.epilogue.schedule", "Schedule", "gap")]

#: Runs in the child: make the mutant, then the test.
_CHILD = """
import importlib, sys, pytest
owner = getattr(importlib.import_module(sys.argv[1]), sys.argv[2])
name = sys.argv[3]
old = getattr(owner, name)
if isinstance(old, property):
    def longer(self, get=old.fget):
        value = get(self)
        return {key: v + 1 for key, v in value.items()} if isinstance(value, dict) else value + 1
    setattr(owner, name, property(longer))
else:
    setattr(owner, name, old + 1)
sys.exit(pytest.main(["-q", "-x", "-p", "no:xdist", "-p", "no:cacheprovider", sys.argv[4]]))
"""


def mutant(module, owner, name):
    """``{"caught": bool, "failed": [test ids]}`` for ``owner.name`` one cycle longer."""
    child = subprocess.run([sys.executable, "-c", _CHILD, module, owner, name, TEST],
                           cwd=ROOT, capture_output=True, text=True)
    failed = [line.split()[1] for line in child.stdout.splitlines() if line.startswith("FAILED")]
    return {"caught": child.returncode != 0, "failed": failed}


def main():
    report = {"test": TEST, "mutants": {}}
    for module, owner, name in ATTRIBUTES:
        result = mutant(module, owner, name)
        report["mutants"][f"{owner}.{name}"] = result
        verdict = f"caught by {', '.join(result['failed'])}" if result["caught"] else "passes"
        print(f"{owner}.{name} + 1: {verdict}", flush=True)
    record(report, RESULTS / "latency_mutants.json", __file__)


if __name__ == "__main__":
    main()
