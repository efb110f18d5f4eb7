"""Place and route a core that needs PEs multiplying in the fabric, seed after seed.

::

    python bench/synth_lut.py [--config fpga/configs/16x8-lut.json] [--target ecp5-85k]
                              [--lut-pes auto|N] [--seeds 1 2] [--timeout 80] [--force]

A core with more MACs than the part has MULT18X18D to spare for them (16x8: 128 MACs, and the
epilogue's and checker's 51) fits only with ``lut_pes`` of its PEs multiplying in the fabric
(``AccelConfig.lut_pes``, hw/lutmul.py). ``--lut-pes auto`` (the default) takes the fewest with
which the core's multipliers fit ``--target`` (:func:`bertaccel.fpga.targets.fit_lut_pes`).
Each seed goes through :func:`bertaccel.fpga.synth.synthesize` with the 8x8 core's flow
(yosys's classic abc, nextpnr's static placer, router1, the 150 MHz constraint), one after
another (a seed sweep on Ray runs them side by side: ``bertaccel synth --seeds``); runs are
cached as ``bertaccel synth``'s are. Writes ``bench/results/synth_lut.json`` and prints the
seed table (docs/fpga.md).
"""

import argparse
import dataclasses
import sys
import time
from pathlib import Path

from _record import record  # bench/ is on sys.path
from bertaccel.fpga.errors import NotRouted, SynthError
from bertaccel.fpga.reports import not_routed_report
from bertaccel.fpga.synth import synthesize
from bertaccel.fpga.tables import format_seed_table
from bertaccel.fpga.targets import fit_lut_pes, target
from bertaccel.hw.config import ConfigError, load_config

RESULTS = Path(__file__).resolve().parent / "results" / "synth_lut.json"
CONFIG = "fpga/configs/16x8-lut.json"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=CONFIG, help=f"a preset or a .json ({CONFIG})")
    parser.add_argument("--target", default="ecp5-85k")
    parser.add_argument("--lut-pes", default="auto",
                        help="fabric PEs: auto (the fewest that fit --target) or a number")
    parser.add_argument("--seeds", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--freq", type=float, default=150.0)
    parser.add_argument("--timeout", type=float, default=80.0,
                        help="minutes a place-and-route run may take (80)")
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--output", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    from bertaccel.sw.paths import check_args
    check_args(parser, files={"--output": args.output})
    try:
        cfg = load_config(args.config)
        tgt = target(args.target)
        lut_pes = (fit_lut_pes(cfg, tgt) if args.lut_pes == "auto"
                   else int(args.lut_pes) if args.lut_pes.isdigit() else None)
        if lut_pes is None:
            parser.error(f"--lut-pes must be auto or a number, not {args.lut_pes!r}")
        cfg = dataclasses.replace(cfg, lut_pes=lut_pes)
    except (ConfigError, SynthError) as error:    # DoesNotFit is a SynthError
        parser.error(str(error))

    def say(text):
        print(f"bench: {text}", file=sys.stderr)

    begin = time.monotonic()
    runs = []
    for seed in args.seeds:
        try:
            report = synthesize(cfg, tgt.name, seed=seed, freq_mhz=args.freq, force=args.force,
                                log=say, timeout_s=60 * args.timeout, lut_mapper="abc",
                                placer="static")
            report.pop("utilization")
        except NotRouted as error:
            say(str(error))
            report = not_routed_report(cfg, tgt, error, f"stopped after {args.timeout:g} min")
        runs.append(dict(report, seed=seed))
    record({"config": cfg.label, "tag": cfg.tag, "lut_pes": cfg.lut_pes, "target": tgt.name,
            "part": tgt.part, "freq_mhz": args.freq, "runs": runs}, args.output, __file__, argv)
    routed = [r for r in runs if "fmax_mhz" in r]
    print(format_seed_table(routed) if routed else "no seed routed")
    for r in routed:
        path = r["critical_path"]
        print(f"seed {r['seed']}: {path['from']} -> {path['to']} ({path['delay_ns']:.2f} ns, "
              f"routing {path['routing_ns']:.2f}); yosys {r['yosys_s']:.0f} s, "
              f"nextpnr {r['nextpnr_s']:.0f} s")
    print(f"\nwrote {args.output} ({time.monotonic() - begin:.0f} s)")
    return 0 if len(routed) == len(runs) else 1


if __name__ == "__main__":
    sys.exit(main())
