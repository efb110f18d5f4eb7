"""What a new batch shape costs to time: the stage timer against compiling and running the model.

::

    python bench/stage_timing.py [--configs 8x8 16x16] [--before-max-tokens 2048] [--no-seqpoint]

all-MiniLM-L6-v2 is compiled for each config; then, for each batch shape ``(B, L)``:

* *before*: what timing a new shape took with the stage programs written out: compile the six
  stage programs of a layer (:func:`bertaccel.sw.bert.run.layer_programs`) and run
  :class:`bertaccel.sw.cycles.CycleModel` on each (every layer of MiniLM has the same shapes, so
  one layer is timed; shapes of more than ``--before-max-tokens`` tokens are left out: minutes
  each);
* *after, cold*: a new :class:`bertaccel.sw.bert.timing.StageTimer` times the shape (every
  layer), remembering nothing yet;
* *after, warm*: one timer that has timed the shapes before it in the list.

The cycles of the three must be equal; the script stops if they are not. Then it runs
``bertaccel seqpoint --config 8x8 --json`` and takes its wall and CPU time. Wall times on a
shared machine depend on its load: the CPU time of this process (and of the seqpoint run) is
printed beside each. Writes ``bench/results/stage_timing.json``.
"""

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
SHAPES = [(1, 32), (1, 128), (16, 32), (1, 512), (32, 64), (8, 256), (32, 512)]


def _clock():
    return time.perf_counter(), time.process_time()


def _since(start):
    wall, cpu = _clock()
    return {"wall_s": wall - start[0], "cpu_s": cpu - start[1]}


def _before(bert, batch, seq):
    import torch

    from bertaccel.sw.bert import STAGES
    from bertaccel.sw.bert.run import layer_programs
    from bertaccel.sw.cycles import CycleModel

    start = _clock()
    programs = layer_programs(bert, 0, torch.ones((batch, seq), dtype=torch.bool))
    model = CycleModel(bert.cfg)
    cycles = sum(model.run(programs[stage]).cycles for stage in STAGES)
    instructions = sum(len(programs[stage].instrs) for stage in STAGES)
    return dict(_since(start), cycles=cycles * bert.spec.layers, instructions=instructions)


def _config(name, before_max_tokens, log):
    from bertaccel.hw.config import load_config
    from bertaccel.sw.bert import MINILM, compile_bert
    from bertaccel.sw.bert.timing import StageTimer

    start = _clock()
    bert = compile_bert(MINILM, load_config(name))
    log(f"{name}: compiled in {_since(start)['wall_s']:.1f} s")
    warm = StageTimer(bert)
    rows = []
    for batch, seq in SHAPES:
        row = {"batch": batch, "seq": seq}
        if batch * seq <= before_max_tokens:
            row["before"] = _before(bert, batch, seq)
        start = _clock()
        cycles, _ = StageTimer(bert).model(batch, seq)
        row["cold"] = dict(_since(start), cycles=cycles)
        start = _clock()
        cycles, _ = warm.model(batch, seq)
        row["warm"] = dict(_since(start), cycles=cycles)
        found = {row[way]["cycles"] for way in ("before", "cold", "warm") if way in row}
        if len(found) != 1:
            raise SystemExit(f"{name} B={batch} L={seq}: the timings differ: {row}")
        rows.append(row)
        log(_line(name, row))
    return rows


def _line(name, row):
    def cell(way):
        part = row.get(way)
        if part is None:
            return f"{'-':>17}"
        return f"{part['wall_s']:8.2f} ({part['cpu_s']:5.2f})"

    return (f"{name:>6} {row['batch']:>3} {row['seq']:>4} {row['cold']['cycles']:>15,} "
            f"{cell('before')} {cell('cold')} {cell('warm')}")


def _seqpoint(config):
    start = time.perf_counter()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "bertaccel.cli", "seqpoint", "--config",
                           config, "--json"], capture_output=True, text=True,
                          env=dict(os.environ, HF_HUB_OFFLINE="1"))
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        raise SystemExit(f"bertaccel seqpoint failed: {done.stderr.strip()[-400:]}")
    report = json.loads(done.stdout)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"config": config, "wall_s": wall, "cpu_s": cpu,
            "distinct_lengths": report["distinct_lengths"],
            "timed_lengths_wall_s": report["reference"]["measured_wall_s"],
            "reference_cycles": report["reference"]["cycles"]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configs", nargs="+", default=["8x8", "16x16"])
    parser.add_argument("--before-max-tokens", type=int, default=2048)
    parser.add_argument("--no-seqpoint", action="store_true")
    parser.add_argument("--output", type=Path, default=RESULTS / "stage_timing.json")
    args = parser.parse_args(argv)
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    from _record import record  # bench/ is on sys.path

    def log(text):
        print(text, flush=True)

    log("new-shape cost, s wall (s CPU); before: write the programs and run the model on them")
    log(f"{'config':>6} {'B':>3} {'L':>4} {'cycles (model)':>15} {'before':>17} "
        f"{'after, cold':>17} {'after, warm':>17}")
    result = {"shapes": {name: _config(name, args.before_max_tokens, log)
                         for name in args.configs},
              "load_average": os.getloadavg()}
    if not args.no_seqpoint:
        seqpoint = result["seqpoint"] = _seqpoint("8x8")
        log(f"bertaccel seqpoint --config 8x8 --json: {seqpoint['wall_s']:.1f} s wall, "
            f"{seqpoint['cpu_s']:.1f} s CPU ({seqpoint['distinct_lengths']} distinct lengths "
            f"timed in {seqpoint['timed_lengths_wall_s']:.1f} s wall; "
            f"{seqpoint['reference_cycles']:,} cycles)")
    log(f"load average {result['load_average'][0]:.1f} on {os.cpu_count()} CPUs")
    record(result, args.output, __file__, argv)
    log(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
