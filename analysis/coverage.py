"""The code coverage report of the suite's Verilator simulations, by Verilog module and by
Amaranth source line.

Runs made with ``BERTACCEL_COVERAGE=1`` (:mod:`bertaccel.sim.coverage`; ``make coverage``)
leave their counts under ``build/coverage/dat/<design>/``. This merges them per design and
writes, under ``build/coverage/``::

    report.txt, report.json       line (block and branch points), branch, expression and toggle
                                  coverage per Verilog module, per subtree and in total, before
                                  and after waivers; coverage by Python source line; the
                                  uncovered points, each with the hw/*.py lines behind it
    <design>/merged.dat.gz        the merged counts (Verilator's format, gzipped: gunzipped,
                                  verilator_coverage reads it)
    <design>/coverage.info        lcov: Verilog lines (DA) from the line and branch points,
                                  branches (BRDA) from the branch and expression points
    <design>/toggle.info          lcov: each signal declaration as a line, hit when every bit
                                  went both ways
    <design>/python.info          lcov over hw/*.py: a Python line is hit when every line,
    <design>/python-toggle.info   branch and expression (or toggle) point behind it is
    html/<design>/<the same four names>/index.html   (genhtml, when it is on PATH)

Waived points are left out of the lcov files, so that the HTML shows what is still to do.

Run it as ``python -m bertaccel.analysis.coverage [--data DIR] [--waivers FILE]``.

Each design's report is made from the runs of the newest version of its Verilog (a run's counts
are kept beside the Verilog they were counted on); older runs are left out and counted. A point
that is the converter's scaffolding, not design logic (yosys's trigger of ``always @*`` blocks,
``initial`` blocks) is left out of every figure (:meth:`~bertaccel.analysis.coverage_data.
VerilogMap.artefact`). The Python line of a point is the first location of
:meth:`~bertaccel.analysis.coverage_data.VerilogMap.sources` in a file of the repository.

How to read the figures: Verilator counts the toggles of a port in every module it passes
through, so a bus that never toggles counts once a level. A statement of an ``m.If``/``m.Switch``
body has no location of its own in yosys's output: its point is reported under the signal it
tests or assigns (a port's line, or the line of an ``m.If`` condition that is an operator), and a
signal made by a helper function (``Signal(...)`` in ``hw/epilogue/lanes.py``) under the helper's
line; ``Signal(src_loc_at=1)`` there would name the caller.

Waivers
-------
One file (``verif/coverage_waivers.txt`` by default), one waiver a line, ``PATTERN -- REASON``;
``#`` starts a comment line. ``PATTERN`` (``*`` and ``?`` are wildcards, nothing else is) is
matched against each uncovered point's Python locations (``hw/axi/shell.py:88``), the same with
its kind before it (``toggle:hw/axi/shell.py:88``), and its id ``<design>/<module>/<kind>/
<comment>`` (``axi_shell-*/axi_shell.core/toggle/o_error:1->0``). A waived point counts in the
"after waivers" figures as neither covered nor uncovered; a waiver that matches nothing is
reported as unused.
"""

import argparse
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from ..hw.verilog import REPO_ROOT
from ..sim.coverage import data_root
from .coverage_data import TYPES, VerilogMap, merge, points, read_dat, write_dat

__all__ = ["Waiver", "read_waivers", "DesignReport", "design_report", "collect", "report",
           "write_report", "figure", "main", "WAIVERS", "FIGURES"]

#: The default waiver file.
WAIVERS = REPO_ROOT / "verif" / "coverage_waivers.txt"
#: The figures of a report: ``line`` is every point of ``--coverage-line`` (blocks and
#: branches), ``branch`` the branch points alone.
FIGURES = ("line", "branch", "expr", "toggle")
_DETAIL_LIMIT = 20000


@dataclass
class Waiver:
    """One line of the waiver file: ``pattern -- reason``; ``used`` counts the points waived."""
    pattern: str
    reason: str
    where: str
    used: int = 0

    def __post_init__(self):
        parts = (re.escape(part) for part in re.split(r"([*?])", self.pattern))
        self._regex = re.compile("".join(".*" if p == r"\*" else "." if p == r"\?" else p
                                         for p in parts))

    def matches(self, keys):
        return any(self._regex.fullmatch(key) for key in keys)


def read_waivers(path):
    """The :class:`Waiver` objects of ``path`` (none if it does not exist).

    Raises
    ------
    ValueError
        A line without `` -- `` and a reason.
    """
    path = Path(path)
    if not path.is_file():
        return []
    out = []
    for number, line in enumerate(path.read_text().splitlines(), 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        pattern, sep, reason = text.partition(" -- ")
        if not sep or not pattern.strip() or not reason.strip():
            raise ValueError(f"{path}:{number}: a waiver is 'PATTERN -- REASON', not {text!r}")
        out.append(Waiver(pattern.strip(), reason.strip(), f"{path.name}:{number}"))
    return out


_in_repo_cache = {}


def _in_repo(location):
    """Whether a source location names a file of the repository (``hw/queue.py:12``)."""
    path = location.rpartition(":")[0] or location
    if path not in _in_repo_cache:
        full = REPO_ROOT / path
        _in_repo_cache[path] = (not Path(path).is_absolute() and ".venv" not in Path(path).parts
                                and full.is_file())
    return _in_repo_cache[path]


@dataclass
class DesignReport:
    """The merged coverage of one design.

    Members
    -------
    design : str
        Its name (the build folder's, without ``-cov``).
    verilog : Path
        The Verilog the counts were made on.
    runs : int
        Runs merged; ``stale_runs`` runs of older Verilog were left out.
    points : list of Point
        Every point but the converter's artefacts (``excluded`` of them), each with ``src``.
    waived : set of int
        Indexes in ``points`` of the uncovered points that a waiver matches.
    """
    design: str
    verilog: Path
    runs: int
    stale_runs: int
    points: list
    excluded: int
    table: dict = field(repr=False, default_factory=dict)
    waived: set = field(default_factory=set)
    waiver_of: dict = field(default_factory=dict)

    def python_line(self, point):
        """The repository source line a point is reported under, or ``(no source)``."""
        for location in point.src:
            if _in_repo(location):
                return location
        return point.src[0] if point.src else "(no source)"


def figure(pts, kind, waived=()):
    """``(covered, total)`` of the points of ``kind`` in ``pts`` (``(index, point)`` pairs),
    leaving out the indexes in ``waived``."""
    covered = total = 0
    for index, point in pts:
        if not _of_kind(point, kind) or index in waived:
            continue
        total += 1
        covered += point.covered
    return covered, total


def _of_kind(point, kind):
    return point.kind in ("line", "branch") if kind == "line" else point.kind == kind


def design_report(design, verilog, dats, waivers=(), stale_runs=0):
    """The :class:`DesignReport` of the counts ``dats`` (paths) made on ``verilog`` (a path)."""
    verilog = Path(verilog)
    vmap = VerilogMap(verilog.read_text())
    table = merge(read_dat(path) for path in dats)
    kept, excluded = [], 0
    cache = {}
    for point in points(table):
        if vmap.artefact(point):
            excluded += 1
            continue
        key = (point.line, point.signal)
        if key not in cache:
            cache[key] = vmap.sources(point.line, point.signal, prefer=_in_repo)
        point.src = cache[key]
        kept.append(point)
    result = DesignReport(design, verilog, len(dats), stale_runs, kept, excluded, table)
    for index, point in enumerate(kept):
        if point.covered:
            continue
        keys = [f"{design}/{point.module}/{point.kind}/{point.comment}"]
        for location in point.src:
            keys += [location, f"{point.kind}:{location}"]
        for waiver in waivers:
            if waiver.matches(keys):
                waiver.used += 1
                result.waived.add(index)
                result.waiver_of[index] = waiver
                break
    return result


def collect(root=None):
    """``[(design, verilog path, [dat paths], stale runs)]`` under ``<root>/dat``: per design
    the runs of its newest Verilog."""
    root = Path(root or data_root())
    out = []
    for folder in sorted((root / "dat").glob("*/")):
        groups = {}
        for path in [*folder.glob("*.dat"), *folder.glob("*.dat.gz")]:
            groups.setdefault(path.name.split("-", 1)[0], []).append(path)
        groups = {key: dats for key, dats in groups.items() if (folder / f"{key}.v").is_file()}
        if not groups:
            continue
        newest = max(groups, key=lambda key: max(path.stat().st_mtime for path in groups[key]))
        stale = sum(len(dats) for key, dats in groups.items() if key != newest)
        out.append((folder.name, folder / f"{newest}.v", sorted(groups[newest]), stale))
    return out


# -- figures ------------------------------------------------------------------------------------

def _percent(covered, total):
    return f"{100.0 * covered / total:6.2f}%" if total else "     - "


def _cell(covered, total):
    return f"{_percent(covered, total)} {total - covered:>6}" if total else f"{'-':>7} {'':>6}"


def _figures(pts, waived=()):
    return {kind: figure(pts, kind, waived) for kind in FIGURES}


def _modules(rep):
    """``{module: [(index, point)]}`` and the subtree of each module (itself and below)."""
    own = {}
    for index, point in enumerate(rep.points):
        own.setdefault(point.module, []).append((index, point))
    subtree = {}
    for module in own:
        subtree[module] = [item for other, items in own.items()
                           if other == module or other.startswith(module + ".")
                           for item in items]
    return own, subtree


def _python_table(rep):
    """``{python line: {kind: [covered, total]}}`` over the unwaived points."""
    out = {}
    for index, point in enumerate(rep.points):
        if index in rep.waived:
            continue
        row = out.setdefault(rep.python_line(point), {kind: [0, 0] for kind in TYPES})
        row[point.kind][0] += point.covered
        row[point.kind][1] += 1
    return out


def _verilog_text(rep, line):
    lines = _verilog_lines(rep)
    return lines[line - 1].strip() if 0 < line <= len(lines) else ""


def _verilog_lines(rep):
    if not hasattr(rep, "_lines"):
        rep._lines = rep.verilog.read_text().splitlines()
    return rep._lines


def _design_json(rep):
    items = list(enumerate(rep.points))
    own, subtree = _modules(rep)
    uncovered = [(i, p) for i, p in items if not p.covered]
    return {
        "verilog": str(rep.verilog), "runs": rep.runs, "stale_runs": rep.stale_runs,
        "points": len(rep.points), "excluded_artefacts": rep.excluded,
        "total": _figures(items), "after_waivers": _figures(items, rep.waived),
        "modules": {module: {"own": _figures(own[module]), "subtree": _figures(subtree[module]),
                             "subtree_after_waivers": _figures(subtree[module], rep.waived)}
                    for module in sorted(own)},
        "python": dict(sorted(_python_table(rep).items())),
        "uncovered": [{"module": p.module, "kind": p.kind, "line": p.line, "comment": p.comment,
                       "src": list(p.src), "python": rep.python_line(p),
                       "waiver": rep.waiver_of[i].where if i in rep.waived else None}
                      for i, p in uncovered[:_DETAIL_LIMIT]],
        "uncovered_listed": min(len(uncovered), _DETAIL_LIMIT),
    }


def _text_figures(label, figs, width):
    return f"  {label:<{width}} " + "  ".join(_cell(*figs[kind]) for kind in FIGURES)


def _design_text(rep, top):
    items = list(enumerate(rep.points))
    own, subtree = _modules(rep)
    width = max([len(m) + 2 for m in own] + [24])
    out = [f"== {rep.design}: {rep.runs} run(s) on {rep.verilog.name}"
           + (f", {rep.stale_runs} run(s) of older Verilog left out" if rep.stale_runs else "")
           + f"; {len(rep.points)} points ({rep.excluded} converter artefacts left out)",
           f"  {'':<{width}} " + "  ".join(f"{kind + ' % uncov':>14}" for kind in FIGURES),
           _text_figures("total", _figures(items), width),
           _text_figures("total after waivers", _figures(items, rep.waived), width),
           "  per module (own points; a module with submodules also as 'module.*', its subtree)"]
    for module in sorted(own):
        out.append(_text_figures(module, _figures(own[module]), width))
        if len(subtree[module]) != len(own[module]):
            out.append(_text_figures(module + ".*", _figures(subtree[module]), width))
    table, examples = _python_table(rep), _examples(rep)
    out += _python_rows(rep, table, examples, ("line", "branch"), top,
                        "uncovered line and branch points")
    out += _python_rows(rep, table, examples, TYPES, top, "uncovered points of every kind")
    return out


def _examples(rep):
    """``{python line: the first unwaived uncovered point of each kind there}``."""
    out = {}
    for index, point in enumerate(rep.points):
        if not point.covered and index not in rep.waived:
            out.setdefault(rep.python_line(point), {}).setdefault(point.kind, point)
    return out


def _python_rows(rep, table, examples, kinds, top, what):
    """The lines of the text report listing the Python lines with the most uncovered points
    of ``kinds``, each with an example point and its Verilog."""
    rows = []
    for line, counts in table.items():
        missing = sum(counts[kind][1] - counts[kind][0] for kind in kinds)
        if missing:
            rows.append((missing, line))
    rows.sort(key=lambda row: (-row[0], row[1]))
    out = [f"  {what} by Python source line ({len(rows)} lines; the top {top}):"]
    for _, line in rows[:top]:
        detail = "  ".join(f"{kind} {total - covered}/{total}"
                           for kind, (covered, total) in table[line].items()
                           if kind in kinds and covered < total)
        example = next(examples[line][kind] for kind in TYPES
                       if kind in kinds and kind in examples[line])
        text = _verilog_text(rep, example.line)[:60]
        out.append(f"    {line:<34} {detail}   e.g. {example.module} v{example.line} "
                   f"{example.kind} {example.comment[:30]!r}: {text}")
    return out


def _report_text(reports, waivers, top):
    out = ["Code coverage of the Verilator simulations (covered %, uncovered points)", ""]
    for rep in reports:
        out += _design_text(rep, top) + [""]
    unused = [w for w in waivers if not w.used]
    out.append(f"waivers: {len(waivers)}, {sum(w.used for w in waivers)} point(s) waived"
               + (f"; unused: {', '.join(w.where for w in unused)}" if unused else ""))
    return "\n".join(out) + "\n"


# -- lcov and HTML ------------------------------------------------------------------------------

def _lcov_record(name, path, lines, branches=()):
    """One lcov record: ``lines`` ``{line: count}``, ``branches`` ``[(line, block, count)]``."""
    out = [f"TN:{re.sub(r'[^A-Za-z0-9_]', '_', name)}", f"SF:{path}"]
    index = {}
    for line, block, count in branches:
        number = index[line, block] = index.get((line, block), -1) + 1
        out.append(f"BRDA:{line},{block},{number},{count}")
    if branches:
        out += [f"BRF:{len(branches)}", f"BRH:{sum(1 for *_, c in branches if c)}"]
    out += [f"DA:{line},{count}" for line, count in sorted(lines.items())]
    out += [f"LF:{len(lines)}", f"LH:{sum(1 for c in lines.values() if c)}", "end_of_record"]
    return "\n".join(out) + "\n"


def _lcov(rep, copy):
    """The text of the four lcov files of a design: Verilog lines and toggles, Python ones."""
    kept = [p for i, p in enumerate(rep.points) if i not in rep.waived]
    lines, toggles, branches = {}, {}, []
    for point in kept:
        if point.kind in ("line", "branch"):
            for line in point.lines:
                lines[line] = max(lines.get(line, 0), point.count)
        if point.kind in ("branch", "expr"):
            branches.append((point.line, 0 if point.kind == "branch" else 1, point.count))
        if point.kind == "toggle":
            toggles[point.line] = min(toggles.get(point.line, point.count), point.count)
    python = {"python": {}, "python-toggle": {}}
    for point in kept:
        location = rep.python_line(point)
        if not _in_repo(location):
            continue
        path, _, line = location.rpartition(":")
        table = python["python-toggle" if point.kind == "toggle" else "python"]
        per_file = table.setdefault(path, {})
        per_file[int(line)] = min(per_file.get(int(line), point.count), point.count)
    out = {"coverage": _lcov_record(rep.design, copy, lines, sorted(branches)),
           "toggle": _lcov_record(rep.design, copy, toggles)}
    for name, table in python.items():
        out[name] = "".join(_lcov_record(rep.design, REPO_ROOT / path, table[path])
                            for path in sorted(table))
    return out


def _genhtml(info, folder, title):
    """HTML of ``info`` in ``folder`` with genhtml; a note why not, or None."""
    genhtml = shutil.which("genhtml")
    if genhtml is None:
        return "genhtml is not on PATH (Debian package lcov): no HTML"
    if not info.read_text().strip():
        return None
    result = subprocess.run([genhtml, "-q", "--branch-coverage", "--prefix", str(REPO_ROOT),
                             "--ignore-errors", "source", "-t", title, "-o", str(folder),
                             str(info)], capture_output=True, text=True, check=False)
    if result.returncode:
        return f"genhtml failed on {info}: {result.stderr.strip()[-300:]}"
    return None


# -- the report ---------------------------------------------------------------------------------

def report(root=None, waivers=None):
    """The :class:`DesignReport` of every design with counts under ``root`` (the data root of
    :mod:`bertaccel.sim.coverage` by default), and the waivers (:data:`WAIVERS` by default)."""
    waivers = read_waivers(WAIVERS if waivers is None else waivers)
    reports = [design_report(design, verilog, dats, waivers, stale)
               for design, verilog, dats, stale in collect(root)]
    return reports, waivers


def write_report(reports, waivers, out, *, top=40, html=True):
    """Write the files of the module docstring under ``out``; return the text report."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    notes = []
    for rep in reports:
        folder = out / rep.design
        folder.mkdir(exist_ok=True)
        copy = folder / f"{rep.design}.v"
        shutil.copyfile(rep.verilog, copy)
        write_dat(rep.table, folder / "merged.dat.gz")
        for name, text in _lcov(rep, copy).items():
            (folder / f"{name}.info").write_text(text)
            if html:
                note = _genhtml(folder / f"{name}.info", out / "html" / rep.design / name,
                                f"{rep.design} {name}")
                if note and note not in notes:
                    notes.append(note)
    text = _report_text(reports, waivers, top) + "".join(f"{note}\n" for note in notes)
    (out / "report.txt").write_text(text)
    data = {"designs": {rep.design: _design_json(rep) for rep in reports},
            "waivers": [{"pattern": w.pattern, "reason": w.reason, "where": w.where,
                         "used": w.used} for w in waivers]}
    (out / "report.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return text


def main(argv=None):
    """``python -m bertaccel.analysis.coverage``: write the report, print the text."""
    parser = argparse.ArgumentParser(prog="python -m bertaccel.analysis.coverage",
                                     description="Merge the coverage counts of the Verilator "
                                                 "runs and write the report.")
    parser.add_argument("--data", type=Path, default=None,
                        help="the coverage folder (build/coverage, or BERTACCEL_COVERAGE_DIR)")
    parser.add_argument("--out", type=Path, default=None, help="where the report goes "
                        "(the coverage folder by default)")
    parser.add_argument("--waivers", type=Path, default=WAIVERS, help="the waiver file")
    parser.add_argument("--top", type=int, default=40,
                        help="uncovered Python lines listed per design")
    parser.add_argument("--no-html", action="store_true", help="skip genhtml")
    args = parser.parse_args(argv)
    root = (args.data or data_root()).resolve()
    try:
        reports, waivers = report(root, args.waivers)
    except ValueError as error:
        print(f"coverage: error: {error}", file=sys.stderr)
        return 2
    if not reports:
        print(f"coverage: error: no coverage counts under {root / 'dat'}; run the tests with "
              f"BERTACCEL_COVERAGE=1 first (make coverage)", file=sys.stderr)
        return 2
    text = write_report(reports, waivers, args.out or root, top=args.top, html=not args.no_html)
    sys.stdout.write(text)
    where = (args.out or root).resolve() / "report.txt"
    if where.is_relative_to(Path.cwd()):
        where = where.relative_to(Path.cwd())
    print(f"(report: {where}; lcov and HTML beside it)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
