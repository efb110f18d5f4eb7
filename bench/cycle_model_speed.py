"""How fast the cycle model runs: instructions a second on a long program.

::

    python bench/cycle_model_speed.py [--config 4x8] [--blocks 20000] [--repeats 3]

Times :class:`bertaccel.sw.cycles.CycleModel` on a program of ``--blocks`` copies of a
five-instruction block (two LOADs, two MATMULs, a STORE of two strips, with the tokens of a
double-buffered loop), best of ``--repeats``. Prints the figure and writes
``bench/results/cycle_model_speed.json``. ``verif/unit/test_cycle_model.py`` checks what the
model computes for the same program; how long it takes is only measured here.
"""

import argparse
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="4x8")
    parser.add_argument("--blocks", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RESULTS / "cycle_model_speed.json")
    args = parser.parse_args(argv)
    from bertaccel.sw.paths import check_args
    check_args(parser, files={"--output": args.output})
    if args.blocks < 1 or args.repeats < 1:
        parser.error(f"--blocks and --repeats must be at least 1, not {args.blocks} and "
                     f"{args.repeats}")

    from _record import record  # bench/ is on sys.path
    from bertaccel.hw import isa
    from bertaccel.hw.config import load_config
    from bertaccel.sw.cycles import CycleModel

    cfg = load_config(args.config)
    load = dict(target=isa.Target.SPAD_A, addr=0)
    matmul = dict(a_addr=0, b_addr=0, acc_addr=0, m_len=12, accumulate=False)
    block = [isa.Load(**load, count=12, push_next=True), isa.Load(**load, count=8),
             isa.Matmul(**matmul, pop_prev=True), isa.Matmul(**matmul, push_next=True),
             isa.Store(acc_addr=0, rows=12, strips=2, stride=12, op=isa.EpOp.RAW,
                       pop_prev=True)]
    instrs = block * args.blocks
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        report = CycleModel(cfg).run(instrs)
        times.append(time.perf_counter() - start)
    best = min(times)
    result = {"config": cfg.label, "instructions": len(instrs), "seconds": times,
              "instructions_per_s": len(instrs) / best, "cycles": report.cycles}
    record(result, args.output, __file__, argv)
    print(f"{len(instrs):,} instructions on {cfg.name} in {best:.2f} s (best of "
          f"{args.repeats}): {result['instructions_per_s']:,.0f} instructions/s; "
          f"{report.summary()}")
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
