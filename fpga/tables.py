"""Markdown tables of synthesis reports (as :func:`~bertaccel.fpga.synth.synthesize` and
:func:`~bertaccel.fpga.reports.not_routed_report` give them), for docs/fpga_results.md and the
bench."""

from .reports import short_name

__all__ = ["format_table", "format_seed_table"]


def format_seed_table(reports):
    """A Markdown table of place-and-route runs of one design over several seeds: a row per
    config with the resources (the same for every seed) and each seed's Fmax."""
    seeds = sorted({r["seed"] for r in reports})
    rams = any(r["dp16kd"] for r in reports)     # the DP16KD column only where there are any
    lines = ["| config | LUT4 | FF | MULT18X18D | " + ("DP16KD | " if rams else "")
             + " | ".join(f"Fmax seed {s} (MHz)" for s in seeds) + " | lowest |",
             "|---|---:|---:|---:|" + ("---:|" if rams else "") + "---:|" * (len(seeds) + 1)]
    for config in dict.fromkeys(r["config"] for r in reports):
        runs = {r["seed"]: r for r in reports if r["config"] == config}
        first = next(iter(runs.values()))
        fmax = [runs[s]["fmax_mhz"] if s in runs else None for s in seeds]
        cells = [f"{f:.1f}" if f is not None else "-" for f in fmax]
        lowest = min((f for f in fmax if f is not None), default=None)
        lines.append(f"| {config} | {first['lut4']:,} | {first['ff']:,} | {first['mult18x18d']} | "
                     + (f"{first['dp16kd']} | " if rams else "")
                     + " | ".join(cells)
                     + f" | {'-' if lowest is None else f'**{lowest:.1f}**'} |")
    return "\n".join(lines)


def format_table(reports, seed=1):
    """A Markdown table of synthesis reports (dicts from :func:`synthesize`, or ``{"config",
    "target", "error"}`` for configs that did not fit). A row names its LUT mapper unless it is
    abc9, its placer unless it is heap, its router unless it is router1, and its placement seed
    unless it is ``seed``."""
    lines = ["| config | LUT4 | FF | MULT18X18D | DP16KD | Fmax (MHz) | critical path |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for r in reports:
        if "error" in r and "lut4" not in r:
            lines.append(f"| {r['config']} | - | - | - | - | - | {r['error']} |")
            continue
        t = r["totals"]
        mapper = r.get("lut_mapper", "abc9").split(" (")[0]
        placer, router = r.get("placer", "heap"), r.get("router", "router1")
        notes = ([] if mapper == "abc9" else [f"LUTs by {mapper}"]) + \
            ([] if placer == "heap" else [f"{placer} placer"]) + \
            ([] if router == "router1" else [router]) + \
            ([] if r.get("seed", seed) == seed else [f"seed {r['seed']}"])
        label = r["config"] + (f" ({'; '.join(notes)})" if notes else "")
        if "error" in r:
            placed = r.get("placed_fmax_mhz")
            iteration = r.get("router_iteration")
            lines.append(
                f"| {label} | {r['lut4']:,} / {t['lut4']:,} | {r['ff']:,} / {t['ff']:,} | "
                f"{r['mult18x18d']} / {t['mult18x18d']} | {r['dp16kd']} / {t['dp16kd']} | - | "
                f"not routed: {r['error']}"
                + (f" at router2 iteration {iteration['iteration']} "
                   f"({iteration['overused_wires']:,} wires overused)" if iteration else "")
                + (f"; estimate after placement {placed:.1f} MHz" if placed else "") + " |")
            continue
        path = r["critical_path"] or {}
        where = (f"{short_name(path.get('from', '?'), 3)} -> {short_name(path.get('to', '?'), 3)} "
                 f"({path.get('delay_ns', 0):.2f} ns)")
        lines.append(
            f"| {label} | {r['lut4']:,} / {t['lut4']:,} | {r['ff']:,} / {t['ff']:,} | "
            f"{r['mult18x18d']} / {t['mult18x18d']} | {r['dp16kd']} / {t['dp16kd']} | "
            f"{r['fmax_mhz']:.1f} | {where} |")
    return "\n".join(lines)
