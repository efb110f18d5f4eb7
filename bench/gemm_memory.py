"""The memory estimate of ``bertaccel gemm`` (:func:`bertaccel.sw.budget.gemm_memory`) against
the peak resident set of the real run, over shapes from 8 x 8 x 8 to 2048 x 2048 x 2048 on the
presets, with and without epilogues; writes ``bench/results/gemm_memory.json``.

Each GEMM runs in a process of its own (:func:`bertaccel.sw.checked_gemm.run_gemm` on the ref
device, as ``bertaccel gemm`` runs it); its cost is the peak ``ru_maxrss`` less the one after the
imports.
The estimate should be at least the cost (it refuses rather than runs out) and not far above it.

    python bench/gemm_memory.py [--quick]
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "gemm_memory.json"

#: (config, m, k, n, epilogue)
SHAPES = [
    ("8x8", 8, 8, 8, None), ("8x8", 512, 512, 512, None), ("8x8", 1024, 1024, 1024, None),
    ("8x8", 2048, 2048, 2048, None), ("2x2", 512, 512, 512, None),
    ("4x4", 1024, 1024, 1024, None), ("16x16", 2048, 512, 1024, None),
    ("16x16", 2048, 2048, 2048, None), ("32x32", 1024, 1024, 1024, None),
    ("4x8", 3000, 700, 900, None), ("8x8", 4096, 256, 4096, None),
    ("8x8", 8192, 64, 8192, None), ("8x8", 64, 8192, 64, None),
    ("8x8", 1024, 512, 512, "softmax"), ("8x8", 2048, 1024, 384, "layernorm"),
    ("8x8", 2048, 2048, 1024, "requant"),
]
QUICK = [shape for shape in SHAPES if shape[1] * shape[2] * shape[3] <= 1 << 30]

_CHILD = """
import json, resource, sys
import torch
from bertaccel.hw.config import preset
from bertaccel.sw.checked_gemm import run_gemm
from bertaccel.sw.budget import gemm_memory
from bertaccel.sw.epilogue import random_epilogue
name, m, k, n, ep = json.loads(sys.argv[1])
cfg = preset(name)
need = gemm_memory(cfg, m, k, n)
if ep:
    need += gemm_memory(cfg, m, k, n, epilogue=random_epilogue(
        ep, k=k, n=n, generator=torch.Generator().manual_seed(0)))
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
report = run_gemm(cfg, m, k, n, epilogue=ep)
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"estimate": need, "measured": (after - before) * 1024,
                  "imports": before * 1024, "wall_s": report["wall_s"],
                  "instructions": report["instructions"]}))
"""


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="only the shapes up to 1024^3")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    from bertaccel.sw.paths import check_args
    check_args(parser, files={"--output": args.output})
    from _record import record  # bench/ is on sys.path
    from bertaccel.sw.budget import format_size
    rows = []
    for shape in QUICK if args.quick else SHAPES:
        done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(shape)],
                              capture_output=True, text=True, check=True)
        row = {"config": shape[0], "m": shape[1], "k": shape[2], "n": shape[3],
               "epilogue": shape[4], **json.loads(done.stdout.splitlines()[-1])}
        row["ratio"] = row["estimate"] / row["measured"]
        rows.append(row)
        print(f"{shape[0]:>6} {shape[1]:>5} x {shape[2]:>5} x {shape[3]:>5} {shape[4] or '':<10}"
              f"measured {format_size(row['measured']):>10}, estimate "
              f"{format_size(row['estimate']):>10}: {row['ratio']:.2f}x", flush=True)
    ratios = [row["ratio"] for row in rows]
    doc = {"schema": "bertaccel-gemm-memory/1", "ratio_min": min(ratios),
           "ratio_max": max(ratios), "runs": rows}
    record(doc, args.output, __file__, argv)     # its "date" is the stamp's
    print(f"estimate / measured from {min(ratios):.2f} to {max(ratios):.2f}; wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
