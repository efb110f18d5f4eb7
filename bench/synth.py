"""Synthesise, place and route every preset for an FPGA and print the resource / Fmax table.

::

    python bench/synth.py [--target ecp5-85k] [--seed 1] [--presets 2x2 4x4 ...]
                          [--mesh-seeds 1 2 3] [--mesh-presets 2x2 ...]
                          [--datapath-seeds 1 2 3] [--datapath-presets 8x8 ...]
                          [--classic-abc 4x8 8x8] [--static-placer 4x8 8x8] [--core-seed 8x8=2 ...]
                          [--jobs 1] [--force]

Each preset goes through :func:`bertaccel.fpga.synth.synthesize` (what ``bertaccel synth`` runs);
results are cached in ``build/synth/<tag>-<target>/``, so a rerun prints at once. A preset that
does not fit the part is listed with the reason instead of being run, and one that outlives
``--timeout`` (minutes) with its yosys counts. A core is placed with ``--seed`` unless
``--core-seed`` names another for its preset (none by default), and with nextpnr's
static placer where ``--static-placer`` names the preset (4x8, 8x8: the heap placer's
placements of them route slowly or not at all, docs/fpga.md); the table names such a seed and
placer. Then the PE array of every preset (or of ``--mesh-presets``) that fits is placed and
routed alone (``--design mesh``), once per seed of ``--mesh-seeds``, because nextpnr's Fmax
moves by several percent from seed to seed; and so is the datapath (``--design datapath``: the
execute unit with its scratchpads and accumulator) of each of ``--datapath-presets`` (8x8),
once per seed of ``--datapath-seeds``. Writes
``bench/results/synth.json`` and the tables as a Markdown snippet, ``bench/results/synth.md``
(``make fpga`` runs this; docs/fpga.md explains the figures).
"""

import argparse
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from _record import record  # bench/ is on sys.path
from bertaccel.hw.config import PRESETS
from bertaccel.fpga.errors import DoesNotFit, NotRouted
from bertaccel.fpga.reports import not_routed_report
from bertaccel.fpga.synth import synthesize
from bertaccel.fpga.results_page import synth_markdown
from bertaccel.fpga.targets import target

RESULTS = Path(__file__).resolve().parent / "results" / "synth.json"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="ecp5-85k")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--freq", type=float, default=150.0)
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), choices=list(PRESETS))
    parser.add_argument("--mesh-seeds", nargs="*", type=int, default=[1, 2, 3],
                        help="seeds for the PE-array-alone runs (none: skip them)")
    parser.add_argument("--mesh-presets", nargs="+", choices=list(PRESETS),
                        help="presets whose PE array is placed alone (default: --presets)")
    parser.add_argument("--datapath-seeds", nargs="*", type=int, default=[1, 2, 3],
                        help="seeds for the datapath runs (none: skip them)")
    parser.add_argument("--datapath-presets", nargs="+", choices=list(PRESETS), default=["8x8"],
                        help="presets whose datapath is placed (8x8)")
    parser.add_argument("--timeout", type=float, default=45.0,
                        help="minutes a place-and-route run may take before it is stopped and "
                             "reported as not routed (45)")
    parser.add_argument("--classic-abc", nargs="*", choices=list(PRESETS),
                        default=["4x8", "8x8"], metavar="PRESET",
                        help="presets whose core is mapped with yosys's classic abc instead of "
                             "abc9 (4x8, 8x8: their abc9 netlists did not finish routing; "
                             "docs/fpga.md)")
    parser.add_argument("--static-placer", nargs="*", choices=list(PRESETS),
                        default=["4x8", "8x8"], metavar="PRESET",
                        help="presets whose core is placed by nextpnr's static placer instead "
                             "of heap (4x8, 8x8: heap's placements route slowly or not at all; "
                             "docs/fpga.md)")
    parser.add_argument("--core-seed", nargs="*", default=[], metavar="PRESET=SEED",
                        help="a placement seed for one preset's core instead of --seed (none)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="place-and-route runs side by side (1); each takes a core and up "
                             "to a few GB")
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--output", type=Path, default=RESULTS,
                        help="the JSON; the Markdown table goes beside it (.md)")
    args = parser.parse_args(argv)
    from bertaccel.sw.paths import check_args
    check_args(parser, files={"--output": args.output,
                              "the table": args.output.with_suffix(".md")})
    tgt = target(args.target)
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, not {args.jobs}")
    core_seeds = {}
    for item in args.core_seed:
        name, _, seed = item.partition("=")
        if name not in PRESETS or not seed.isdigit():
            parser.error(f"--core-seed takes PRESET=SEED with a preset of {', '.join(PRESETS)} "
                         f"and a seed of 0 or more, not {item!r}")
        core_seeds[name] = int(seed)

    begin = time.monotonic()

    def say(text):
        print(f"bench: {text}", file=sys.stderr)

    def core(name):
        cfg = PRESETS[name]
        try:
            report = synthesize(cfg, tgt.name, seed=core_seeds.get(name, args.seed),
                                freq_mhz=args.freq,
                                force=args.force, log=say, timeout_s=60 * args.timeout,
                                lut_mapper="abc" if name in args.classic_abc else "abc9",
                                placer="static" if name in args.static_placer else "heap")
        except DoesNotFit as error:
            say(str(error))
            return {"config": name, "tag": cfg.tag, "target": tgt.name, "fits": False,
                    "error": str(error)}
        except NotRouted as error:
            say(str(error))
            return not_routed_report(cfg, tgt, error, f"stopped after {args.timeout:g} min")
        report = dict(report, fits=True)
        report.pop("utilization")            # per-BEL detail: in build/synth/*/result.json
        return report

    def seed_run(design, name, seed):
        """One seed's report, or None (does not fit, not routed: said in the log)."""
        try:
            report = synthesize(PRESETS[name], tgt.name, design=design, seed=seed,
                                freq_mhz=args.freq, force=args.force, log=say,
                                timeout_s=60 * args.timeout)
        except (DoesNotFit, NotRouted) as error:
            say(str(error))
            return None
        report.pop("utilization")
        return report

    # Every run is a pair of tool processes of its own (its own build folder), so --jobs of
    # them run side by side, started in this order; results keep the order of the runs.
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        cores = [pool.submit(core, name) for name in args.presets]
        meshes = [pool.submit(seed_run, "mesh", name, seed)
                  for name in args.mesh_presets or args.presets for seed in args.mesh_seeds]
        datapaths = [pool.submit(seed_run, "datapath", name, seed)
                     for name in args.datapath_presets for seed in args.datapath_seeds]
    reports = [future.result() for future in cores]
    meshes = [report for future in meshes if (report := future.result())]
    datapaths = [report for future in datapaths if (report := future.result())]

    summary = {"target": tgt.name, "part": tgt.part, "seed": args.seed, "freq_mhz": args.freq,
               "reports": reports, "meshes": meshes, "datapaths": datapaths}
    record(summary, args.output, __file__, argv)
    text = synth_markdown(summary)
    args.output.with_suffix(".md").write_text(text)
    print(text)
    print(f"\nwrote {args.output} ({time.monotonic() - begin:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
