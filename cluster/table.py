"""A sweep's table: the files it writes (JSON, CSV, the Pareto plot) and its text."""

import csv
import json
from pathlib import Path

from .grid import FIELDS
from .pareto import axes, fronts, plot

__all__ = ["CSV_COLUMNS", "flat_row", "write_sweep", "format_sweep"]

#: The columns of the CSV table, one row per point.
CSV_COLUMNS = ("label", "tag", *FIELDS, "clock_mhz", "model", "seq", "batch", "status",
               "cycles", "ideal_cycles", "utilization", "latency_us", "array_dsp", "lut4", "ff",
               "dsp", "bram", "fmax_mhz", "latency_us_fmax", "reason")


def flat_row(point):
    """A point as the CSV's columns (what a point lacks is empty)."""
    merged = {**point.get("config", {}), **point.get("workload", {}), **point}
    return {column: merged.get(column) for column in CSV_COLUMNS}


def write_sweep(report, folder):
    """Write ``sweep.json``, ``sweep.csv`` and ``pareto.png`` of ``report`` into ``folder``
    (made if missing); put their paths in ``report["files"]`` and return them."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    files = {"json": str(folder / "sweep.json"), "csv": str(folder / "sweep.csv"),
             "png": str(folder / "pareto.png")}
    report["files"] = files
    report["pareto"] = {key: [p["config"]["label"] for p in front]
                        for key, front in fronts(report["points"]).items()}
    with open(files["csv"], "w", newline="") as file:
        writer = csv.DictWriter(file, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(flat_row(point) for point in report["points"])
    plot(report["points"], files["png"])
    Path(files["json"]).write_text(json.dumps(report, indent=2) + "\n")
    return files


def _number(value, form):
    return "-" if value is None else format(value, form)


def _ms(us):
    return None if us is None else us / 1e3


def format_sweep(report):
    """The report as a table of text, the front and the files."""
    synth = report.get("synth") is not None
    points = report["points"]
    width = max([len("config")] + [len(p["config"]["label"]) for p in points]) + 2
    head = f"{'config':<{width}}{'workload':<22}{'cycles':>14}{'util':>7}{'latency ms':>12}"
    if synth:
        head += f"{'LUT4':>8}{'FF':>8}{'DSP':>5}{'BRAM':>5}{'Fmax':>7}{'at Fmax ms':>12}"
    lines = [head]
    for p in points:
        w = p["workload"]
        workload = f"{w['model']} seq {w['seq']} x{w['batch']}"
        line = (f"{p['config']['label']:<{width}}{workload:<22}"
                f"{_number(p.get('cycles'), ',d'):>14}{_number(p.get('utilization'), '.1%'):>7}"
                f"{_number(_ms(p.get('latency_us')), ',.3f'):>12}")
        if synth:
            line += (f"{_number(p.get('lut4'), 'd'):>8}{_number(p.get('ff'), 'd'):>8}"
                     f"{_number(p.get('dsp'), 'd'):>5}{_number(p.get('bram'), 'd'):>5}"
                     f"{_number(p.get('fmax_mhz'), '.1f'):>7}"
                     f"{_number(_ms(p.get('latency_us_fmax')), ',.3f'):>12}")
        if p["status"] != "ok":
            line += f"  {p['reason'].splitlines()[0]}"
        lines.append(line)
    failed = sum(p["status"] != "ok" for p in points)
    cpus = report.get("cluster", {}).get("cpus")
    lines.append(f"{len(points)} points, {failed} failed, in {report['wall_s']:.1f} s"
                 + (f" on {cpus} CPU(s)" if cpus else "")
                 + (f"; the tasks took {report['task_s']:.1f} s, "
                    f"{report['task_s'] / report['wall_s']:.2f} at a time on average"
                    if report.get("task_s") else ""))
    _, _, x_label, y_label = axes(points)
    for key, labels in report.get("pareto", {}).items():
        lines.append(f"front of {key} ({y_label} against {x_label}): {', '.join(labels)}")
    for kind, path in report.get("files", {}).items():
        lines.append(f"{kind:<5}{path}")
    return "\n".join(lines)
