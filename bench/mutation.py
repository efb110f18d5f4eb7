"""Mutation testing of the 2x2 core: yosys ``mutate`` mutants, each run on the RTL as a Ray task.

::

    python bench/mutation.py [--json] [--mutants 300] [--seed 1] [--workers 2] [--only 5,17]

About ``--mutants`` mutants are sampled over every module of the core (at least
``--min-per-module`` each) and applied into one Verilated harness whose ``mutsel`` input picks
one (:mod:`bertaccel.sim.mutate`); every mutant runs the fixed selection of programs, free and
stalled, and is killed, timed out or survives (:mod:`bertaccel.cluster.mutation`). Survivors
that no program can observe are listed in :data:`EQUIVALENT` with the reason; the kill rate is
(killed + timed out) / (mutants - equivalent). Writes ``bench/results/mutation.json`` (every
mutant's row, the machine); ``--only`` reruns some mutants and writes nothing.
"""

import argparse
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import record  # noqa: E402

from bertaccel.cluster.connect import connect  # noqa: E402
from bertaccel.cluster.mutation import format_mutation, mutation_run, plan_mutants  # noqa: E402
from bertaccel.hw.config import PRESETS  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results" / "mutation.json"

#: Survivors that no program can tell apart from the design and that yosys cannot prove so
#: (their module's inputs are not free where it sits), by
#: :func:`bertaccel.cluster.mutation.mutant_id`, with the reason. A generator change renames
#: cells: a survivor whose name is not here is a test gap until examined.
EQUIVALENT = {}

#: The test gap of a survivor that is neither proved nor listed equivalent, by where it is:
#: ``(test, description)``; the first that matches the mutant's module and source wins.
GAPS = (
    (lambda module, src: ".epilogue" in module,
     "a bit of the epilogue's arithmetic or tables that the selection's random epilogue "
     "parameters never reach (range limits: saturation, LayerNorm variance and shift "
     "extremes, softmax exponent entries); the epilogue block tests drive such edges in the "
     "Amaranth simulator, not on this harness: GEMMs with edge-case epilogue parameters"),
    (lambda module, src: src.startswith(("hw/queue.py", "amaranth/lib/memory.py"))
     or "queue." in module or "slot" in src,
     "a bit of an instruction queue (its storage, its second slot, a copy of its room or "
     "fill state): an instruction field value or a fill and drain pattern the selection "
     "never makes; random instruction fields and queue-full runs under stalls"),
    (lambda module, src: ".checker" in module,
     "a bit of the instruction checker's range sums, held instruction or program counter that "
     "the illegal programs never reach (fields near 2**16, programs past 1,024 instructions): "
     "illegal programs with fields over their whole range"),
    (lambda module, src: module.rsplit(".", 1)[-1] in ("l2e", "e2l", "e2s", "s2e"),
     "a token channel's room or count bit: a channel filled to its limit in the direction "
     "and stall setting the selection does not (tokens_full fills load-to-execute only)"),
    (lambda module, src: True,
     "an instruction field or control bit of a unit that the compiled GEMMs and hand "
     "programs never exercise (high or odd addresses, strides, shifts, multi-strip stores); "
     "random instruction fields"),
)


def gap(row):
    """The test gap :data:`GAPS` names for the survivor ``row``."""
    for test, text in GAPS:
        if test(row["module"], row["src"] or ""):
            return text
    return "not examined"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", action="store_true", help="print the JSON report")
    parser.add_argument("--config", default="2x2", choices=sorted(PRESETS),
                        help="preset to mutate (default 2x2)")
    parser.add_argument("--mutants", type=int, default=300, metavar="N",
                        help="mutants of yosys's even sampling (default 300)")
    parser.add_argument("--min-per-module", type=int, default=3, metavar="K",
                        help="at least K mutants in every module (default 3)")
    parser.add_argument("--seed", type=int, default=1, help="yosys's sampling seed (default 1)")
    parser.add_argument("--workers", type=int, default=None, metavar="W",
                        help="embedded Ray's CPUs (default: all); $RAY_ADDRESS joins a cluster")
    parser.add_argument("--only", default=None, metavar="I,J",
                        help="run only these mutant indices; nothing is written")
    parser.add_argument("--build-root", default=str(ROOT / "build" / "sim"),
                        help="build folder root (default build/sim)")
    args = parser.parse_args(argv)
    if args.mutants < 1 or args.min_per_module < 0:
        parser.error("--mutants must be at least 1 and --min-per-module at least 0")
    indices = None
    if args.only:
        try:
            indices = [int(word) for word in args.only.split(",")]
        except ValueError:
            parser.error(f"--only takes indices separated by commas, not {args.only!r}")

    def log(line):
        print(line, file=sys.stderr, flush=True)

    cfg = PRESETS[args.config]
    plan = plan_mutants(cfg, count=args.mutants, seed=args.seed,
                        min_per_module=args.min_per_module)
    log(f"{len(plan.mutants)} mutants of {cfg.name} in {plan.seconds:.0f} s ({plan.key})")
    if indices is not None and not set(indices) <= {m.index for m in plan.mutants}:
        parser.error(f"--only: the mutants are 1 to {len(plan.mutants)}")
    with connect(workers=args.workers) as where:
        report = mutation_run(plan, build_root=args.build_root, indices=indices,
                              equivalent=EQUIVALENT, gaps=gap, log=log)
    report["cluster"] = where
    report["workers"] = where["cpus"]
    if indices is None:
        record(report, RESULTS, __file__, argv)
    print(json.dumps(report, indent=2) if args.json else format_mutation(report))


if __name__ == "__main__":
    main()
