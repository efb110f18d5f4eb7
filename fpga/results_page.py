"""docs/fpga_results.md, written from the FPGA benches' JSON in bench/results/.

::

    python -m bertaccel.fpga.results_page [--results bench/results]
                                          [--output docs/fpga_results.md] [--check]

The page holds every figure of the last runs that wrote ``synth.json`` (``make fpga``, through
``bench/synth.py``), ``synth_lut.json`` (``bench/synth_lut.py``), ``ulx3s-<config>-85F.json``
(``make bitstream``, ``bench/ulx3s.py``) and ``netlist_<config>.json`` (``bench/netlist.py``),
each table under the stamp of the file it comes from (commit, date, machine, command) or a line
saying the file has none. ``make fpga`` and ``make bitstream`` run this after their bench;
``--check`` writes nothing and exits with 1 where the page differs from what it would write
(``verif/unit/test_fpga_results.py`` checks the committed page so). docs/fpga.md says what the
flows and the columns are.
"""

import argparse
import json
import re
import sys
from pathlib import Path

from .tables import format_seed_table, format_table

__all__ = ["render", "synth_markdown", "main"]

SYNTH_COMMAND = "make fpga"


def _load(path):
    return json.loads(path.read_text())


def _machine(machine):
    if isinstance(machine, dict):
        parts = [machine.get("cpu"), machine.get("isa"),
                 f"{machine['cores']} cores" if machine.get("cores") else None]
        return ", ".join(str(p) for p in parts if p)
    return str(machine)


def _stamp(name, report, command):
    """One line: the file, its stamp or that it has none, and the command that writes it."""
    run = report.get("command", command)
    if report.get("commit") and report.get("machine"):
        return (f"`bench/results/{name}`: commit {report['commit']}, {report.get('date', '?')}, "
                f"{_machine(report['machine'])}; `{run}`.")
    missing = [key for key in ("commit", "date", "machine") if not report.get(key)]
    return f"`bench/results/{name}`: no {', '.join(missing)} recorded; `{run}`."


def synth_markdown(summary):
    """The tables of one ``bench/synth.py`` summary (``synth.json``): the cores, then the PE
    arrays and the datapaths over their seeds, as ``bench/results/synth.md`` holds them."""
    part = summary["part"]
    heading = (f"{summary['target']} ({part}, speed grade {part.split('-')[-1][0]}), "
               f"nextpnr seed {summary['seed']}, clock constraint {summary['freq_mhz']:g} MHz")
    reports = summary["reports"]
    tools = next((r["tools"] for r in reports if r.get("tools")), {})
    versions = ", ".join(f"{k} {v}" for k, v in tools.items() if k in ("yosys", "nextpnr"))
    text = (f"{heading}; {versions}. Fmax is nextpnr's estimate after routing; the critical "
            f"path runs between the named cells (see docs/fpga.md).\n\n"
            f"{format_table(reports, seed=summary['seed'])}\n")
    if summary["meshes"]:
        text += (f"\nThe PE array alone (`--design mesh`), same part and constraint, one run per "
                 f"seed:\n\n{format_seed_table(summary['meshes'])}\n")
    if summary["datapaths"]:
        text += (f"\nThe datapath (`--design datapath`: the execute unit, its PE array, both "
                 f"scratchpads and the accumulator), same part and constraint, one run per "
                 f"seed:\n\n{format_seed_table(summary['datapaths'])}\n")
    return text


def _synth_section(summary):
    lines = ["## The synthesis flow's runs", "",
             _stamp("synth.json", summary, SYNTH_COMMAND), "", synth_markdown(summary).rstrip()]
    paths = [r["critical_path"] for r in summary["reports"] if r.get("critical_path")]
    if paths:
        shares = [100 * p["routing_ns"] / p["delay_ns"] for p in paths if p["delay_ns"]]
        lines += ["", f"Routing is {min(shares):.0f} to {max(shares):.0f} % of the cores' "
                  f"critical paths ({len(shares)} cores)."]
    for name, runs in (("PE-array", summary["meshes"]), ("Datapath", summary["datapaths"])):
        if runs:
            met = sum(bool(r.get("meets_target")) for r in runs)
            lines.append(f"{name} runs meeting the constraint: {met} of {len(runs)}.")
    return lines + ["", f"(`{SYNTH_COMMAND}`, which runs `python bench/synth.py --target "
                        f"{summary['target']}`.)"]


def _lut_section(summary):
    """The seeds of ``bench/synth_lut.py`` (``synth_lut.json``): a core with ``lut_pes`` of its
    PEs multiplying in the fabric."""
    runs = summary["runs"]
    routed = [r for r in runs if "fmax_mhz" in r]
    lines = ["## A core with PEs multiplying in the fabric", "",
             _stamp("synth_lut.json", summary, "python bench/synth_lut.py"), "",
             f"{summary['config']}, `lut_pes` {summary['lut_pes']}, on {summary['target']} "
             f"({summary['part']}), clock constraint {summary['freq_mhz']:g} MHz, yosys's "
             f"classic abc and nextpnr's static placer:", ""]
    if routed:
        lines += [format_seed_table(routed), ""]
        for r in routed:
            path = r["critical_path"]
            lines.append(f"* seed {r['seed']}: {path['from']} -> {path['to']} "
                         f"({path['delay_ns']:.2f} ns, {path['routing_ns']:.2f} of it routing); "
                         f"yosys {r['yosys_s'] / 60:.0f} min, nextpnr {r['nextpnr_s'] / 60:.0f} "
                         f"min.")
    for r in runs:
        if "fmax_mhz" not in r:
            lines.append(f"* seed {r['seed']}: not routed, {r['error']} ({r['lut4']:,} LUT4, "
                         f"{r['ff']:,} FF, {r['mult18x18d']} MULT18X18D, {r['dp16kd']} DP16KD).")
    return lines


def _size(name):
    """Sort key of a file named after a config (``ulx3s-4x8-85F.json``): rows, then columns."""
    found = re.search(r"(\d+)x(\d+)", name)
    return (int(found[1]), int(found[2]), name) if found else (0, 0, name)


def _board_section(files):
    lines = ["## The ULX3S-85F board builds", "",
             "| board build | logic cells | FF | MULT18X18D | DP16KD | RAM output registers "
             "(read ports taken, left) | bitstream | nextpnr Fmax (board clock) | wall |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    stamps = []
    for path in files:
        r = _load(path)
        use = r["utilization"]
        regs = r.get("ram_output_registers", {})
        mapper = "yosys's classic abc" if r["lut_mapper"] == "abc" else r["lut_mapper"]
        lines.append(
            f"| {r['config']} ({mapper}, {r['placer']} placer, seed {r['seed']}) | "
            f"{use['TRELLIS_COMB'][0]:,} | {use['TRELLIS_FF'][0]:,} | {use['MULT18X18D'][0]} | "
            f"{use['DP16KD'][0]} | {regs.get('ports', '-')}, {regs.get('ports_left', '-')} | "
            f"{r['bitstream_bytes']:,} bytes | {r['fmax_mhz']:.1f} MHz ({r['clock_mhz']:g} MHz) "
            f"| {r['wall_s']:.0f} s |")
        run = (f"python bench/ulx3s.py --config {r['config']} --board 85F"
               + (" --lut-mapper abc" if r["lut_mapper"] == "abc" else "")
               + (f" --seed {r['seed']}" if r["seed"] != 1 else ""))
        stamps.append(_stamp(path.name, r, run))
    return lines + [""] + [f"* {s}" for s in stamps]


def _netlist_section(files):
    lines = ["## Gate-level simulation of the netlist", "",
             "| design | build, netlist / RTL | GEMM | cycles, netlist / RTL | model layer | "
             "cycles, netlist / RTL | simulated cycles/s, netlist / RTL |",
             "|---|---:|---|---:|---|---:|---:|"]
    stamps = []
    for path in files:
        r = _load(path)
        gemm, layer = r["gemm"], r["layer"]
        speed = gemm["sim_cycles_per_s"]
        exact = {True: "bit-exact", False: "differs"}
        lines.append(
            f"| {r['config']} | {r['build_s']['netlist']:.0f} s / {r['build_s']['rtl']:.0f} s | "
            f"{'x'.join(map(str, gemm['shape']))}, {exact[gemm['bit_exact']]} | "
            f"{gemm['cycles']['netlist']:,} / {gemm['cycles']['rtl']:,} | "
            f"{layer['model']} layer {layer['layer'] + 1}, seq {layer['seq']}, "
            f"{exact[layer['bit_exact']]} | "
            f"{layer['cycles']['netlist']:,} / {layer['cycles']['rtl']:,} | "
            f"{speed['netlist'] / 1000:.1f} k / {speed['rtl'] / 1000:.0f} k |")
        stamps.append(_stamp(path.name, r, f"python bench/netlist.py --config {r['config']}"))
    return lines + [""] + [f"* {s}" for s in stamps]


def render(results):
    """The page, as text, from the JSON files in the folder ``results``."""
    results = Path(results)
    lines = ["# FPGA results", "",
             "Written by `python -m bertaccel.fpga.results_page` (`fpga/results_page.py`) from "
             "the JSON in `bench/results/`, which `make fpga` and `make bitstream` run after "
             "their benches; do not edit it by hand. [fpga.md](fpga.md) says what the flows, "
             "designs and columns are. Each table names the file it comes from, that file's "
             "stamp and the command that writes it.", ""]
    if (results / "synth.json").exists():
        lines += _synth_section(_load(results / "synth.json")) + [""]
    if (results / "synth_lut.json").exists():
        lines += _lut_section(_load(results / "synth_lut.json")) + [""]
    boards = sorted(results.glob("ulx3s-*.json"), key=lambda p: _size(p.name))
    if boards:
        lines += _board_section(boards) + [""]
    netlists = sorted(results.glob("netlist_*.json"), key=lambda p: _size(p.name))
    if netlists:
        lines += _netlist_section(netlists) + [""]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bertaccel.fpga.results_page",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("bench/results"),
                        help="the folder of the benches' JSON (bench/results)")
    parser.add_argument("--output", type=Path, default=Path("docs/fpga_results.md"),
                        help="the page to write (docs/fpga_results.md)")
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 where the page differs from its JSON")
    args = parser.parse_args(argv)
    if not args.results.is_dir():
        parser.error(f"--results must be a folder, not {str(args.results)!r}")
    try:
        text = render(args.results)
    except (KeyError, TypeError, ValueError) as error:
        parser.error(f"a JSON file in {args.results} lacks what the page needs: {error!r}")
    if args.check:
        current = args.output.read_text() if args.output.exists() else None
        if current != text:
            print(f"{args.output} differs from what {args.results} gives; run "
                  f"python -m bertaccel.fpga.results_page", file=sys.stderr)
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
