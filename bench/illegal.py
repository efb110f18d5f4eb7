"""The random illegal-program regression: RTL and software device name the same fault.

::

    python bench/illegal.py [--json] [--configs 2x2,4x8,8x8] [--programs 80] [--seed 1]

For each config, ``--programs`` compiled programs with one instruction broken or one illegal
instruction inserted (:func:`bertaccel.sw.illegal_programs.illegal_cases`, aimed at every rule of
:mod:`bertaccel.hw.legal`) run on the RTL (Verilator, half free-running, half with idle cycles
and backpressure) and on the software device; each must raise ``IllegalProgram`` with the same
fault and index on both, and a legal run after every eighth fault must be bit-exact. Prints a
row per config (programs, agreements, rules reached) and writes ``bench/results/illegal.json``
(with the machine).
"""

import argparse
import json
import os
import sys
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
sys.path.insert(0, str(ROOT))
from _record import record  # noqa: E402

import torch  # noqa: E402

from bertaccel.hw.config import PRESETS  # noqa: E402
from bertaccel.sw.devices.base import IllegalProgram  # noqa: E402
from bertaccel.sw.devices.rtl import RtlDevice  # noqa: E402
from bertaccel.sw.devices.software import SoftwareDevice  # noqa: E402
from bertaccel.sw.illegal_programs import illegal_cases  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "illegal.json"
STALLS = ((0, 0), (77, 102))


def _fault(device, program, beats):
    try:
        device.execute(program, beats)
    except IllegalProgram as error:
        return error.fault.name, error.index
    return None, None


def run_config(name, programs, seed):
    """One config's row: every case on both devices, and the legal reruns."""
    cfg = PRESETS[name]
    software = SoftwareDevice(cfg)
    cases, legal_ones = illegal_cases(cfg, programs, seed)
    agree, reruns, faults, mismatches = 0, 0, Counter(), []
    begin = time.perf_counter()
    for half, (idle, stall) in enumerate(STALLS):
        with RtlDevice(cfg, build_root=str(ROOT / "build" / "sim"), seed=seed + half,
                       src_idle=idle, sink_stall=stall) as rtl:
            for number, (_, program, beats) in enumerate(cases[half::2]):
                want, got = _fault(software, program, beats), _fault(rtl, program, beats)
                faults[want[0]] += 1
                agree += want == got
                if want != got:
                    mismatches.append({"software": want, "rtl": got})
                if number % 8 == 7:
                    good, inputs = legal_ones[number % len(legal_ones)]
                    expect = software.run(good, **inputs).outputs
                    out = rtl.run(good, **inputs).outputs
                    reruns += all(torch.equal(out[k], expect[k]) for k in expect)
    return {"config": name, "programs": len(cases), "agree": agree, "legal_reruns_exact": reruns,
            "faults": dict(sorted(faults.items())), "mismatches": mismatches,
            "wall_s": round(time.perf_counter() - begin, 1)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", default="2x2,4x8,8x8")
    parser.add_argument("--programs", type=int, default=80)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args(argv)
    names = args.configs.split(",")
    unknown = [name for name in names if name not in PRESETS]
    if unknown or args.programs < 1:
        parser.exit(2, f"illegal.py: error: unknown config {unknown[0]!r}\n" if unknown
                    else "illegal.py: error: --programs must be at least 1\n")
    rows = [run_config(name, args.programs, args.seed) for name in names]
    report = {"rows": rows,
              "all_agree": all(row["agree"] == row["programs"] for row in rows)}
    record(report, RESULTS, __file__, argv)
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"machine: {report['machine']['cpu']} ({report['machine']['cores']} cores)")
    for row in rows:
        print(f"{row['config']:>5}: {row['agree']}/{row['programs']} programs name the same "
              f"fault and index on RTL and software; {len(row['faults'])} rules reached; "
              f"{row['legal_reruns_exact']} legal reruns bit-exact ({row['wall_s']} s)")


if __name__ == "__main__":
    main()
