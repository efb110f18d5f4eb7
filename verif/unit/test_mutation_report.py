"""The mutation run's report (:func:`bertaccel.cluster.mutation.summarize`): survivors proved
equivalent by yosys and those listed equivalent in context are counted apart, both leave the
kill rate's denominator, and every other survivor is a test gap; and the table of
``bench/mutation.py`` gives every listed survivor a reason."""

import importlib.util
from pathlib import Path
from types import SimpleNamespace

from bertaccel.cluster.mutation import format_mutation, summarize
from bertaccel.hw.config import PRESETS

__all__ = []

ROOT = Path(__file__).resolve().parents[2]


def _row(index, status, *, proved=None):
    return {"index": index, "id": f"store:$cell{index}.Y[0]:inv", "status": status,
            "module": "bertaccel_harness.core.store", "src": "hw/store.py:1",
            "describe": f"inv $cell{index}.Y[0]", "proved": proved}


def _report(rows, equivalent):
    plan = SimpleNamespace(cfg=PRESETS["2x2"], seed=1, min_per_module=3, key="mut-0", seconds=0)
    case = SimpleNamespace(name="case", exact=True, program=SimpleNamespace(instrs=[]))
    return summarize(plan, rows, [case], wall_s=1.0, golden_s=0.5, equivalent=equivalent,
                     gaps=lambda row: "a gap")


def test_equivalents_are_counted_apart_and_leave_the_denominator():
    rows = [_row(1, "killed"), _row(2, "timed_out"), _row(3, "survived", proved=True),
            _row(4, "survived", proved=False), _row(5, "survived", proved=False),
            _row(6, "killed")]
    listed = {rows[3]["id"]: "no reader", rows[5]["id"]: "listed but killed"}
    report = _report(rows, listed)
    assert (report["proved_equivalent"], report["context_equivalent"]) == (1, 1)
    assert report["equivalent"] == 2 and report["test_gaps"] == 1
    assert report["kill_rate"] == 3 / 4
    by_index = {row["index"]: row for row in report["rows"]}
    assert by_index[4]["equivalent"] == "no reader" and by_index[5]["gap"] == "a gap"
    assert by_index[6]["equivalent"] is None         # a killed mutant is never equivalent
    text = format_mutation(report)
    assert "1 proved equivalent, 1 equivalent in context, 1 test gaps" in text


def test_the_bench_table_gives_reasons():
    spec = importlib.util.spec_from_file_location("mutation_bench", ROOT / "bench/mutation.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert bench.EQUIVALENT
    for key, reason in bench.EQUIVALENT.items():
        assert key.count(":") >= 2 and key.rsplit(":", 1)[1].split("^")[0] in (
            "inv", "const0", "const1", "cnot0", "cnot1"), key
        assert len(reason) > 40, key


def test_step_cases_sweep_scales_and_headrooms():
    import torch

    from bertaccel.cluster.mutation import STEP_HEADROOMS, STEP_SCALES, step_cases

    cases = step_cases(PRESETS["2x2"], torch.Generator().manual_seed(1))
    assert len(cases) == len(STEP_SCALES) + len(STEP_HEADROOMS)
    assert len({case.name for case in cases}) == len(cases)
    for case in cases:
        assert case.exact and torch.equal(case.inputs["a"], torch.eye(8, dtype=torch.int8))
        case.program.validate()
    # each headroom is another int16 format: another program
    programs = {tuple(int(word) for word in case.program.words())
                for case in cases if "layernorm" in case.name}
    assert len(programs) == len(STEP_HEADROOMS)
