"""Logic depth in a mapped ECP5 netlist: how many LUTs lie between flip-flops and each wide
enable, or each register.

nextpnr's Fmax moves by 10 to 20 % from one placement to the next on a small design, so a
check built on it alone needs a wide margin. What made the cores slow is structural and can be
counted without placing anything: a handshake decision, several LUTs deep, driving the clock
enable of a wide register (one net to hundreds of flip-flops across the chip). :func:`wide_enables`
finds every net that enables at least ``min_fanout`` flip-flops in a ``synth_ecp5`` netlist and
counts the LUT levels in front of it; :func:`deep_registers` lists every register with many
levels in front of an input, the paths that a faster clock must cut whatever the placement.

Counting: a ``LUT4`` is one level; so is each wide-function multiplexer (``PFUMX``,
``L6MUX21``: a LUT5 or LUT6 is two or three levels), a carry chain (``CCU2C``: the chain counts
once, whichever cell its input enters) and a LUT RAM's read (``TRELLIS_DPR16X4``, after its read
address). Flip-flops, block RAMs, DSPs, ports and constants start at zero.
"""

import argparse
import functools
import json
import os
import re
import sys

from .designs import TOP_NAME

__all__ = ["deep_registers", "wide_enables", "main"]

#: Cells whose outputs are a logic level after their inputs, and the inputs that count.
_LOGIC = {
    "LUT4": ("A", "B", "C", "D"),
    "PFUMX": ("ALUT", "BLUT", "C0"),
    "L6MUX21": ("D0", "D1", "SD"),
    "CCU2C": ("A0", "B0", "C0", "D0", "A1", "B1", "C1", "D1", "CIN"),
    "TRELLIS_DPR16X4": ("RAD",),
}
#: Inputs through which a cell adds no level of its own (the rest of a carry chain).
_SAME_LEVEL = {("CCU2C", "CIN")}


def _levels(cells):
    """``depth(bit)``: the LUT levels in front of net ``bit`` among ``cells``, from the nearest
    flip-flops (module docstring)."""
    driver = {}
    for name, cell in cells.items():
        for port, bits in cell["connections"].items():
            if cell["port_directions"].get(port) == "output":
                driver.update((bit, (name, port)) for bit in bits if isinstance(bit, int))

    @functools.cache
    def depth(bit):
        if not isinstance(bit, int) or bit not in driver:
            return 0
        name, _ = driver[bit]
        cell = cells[name]
        inputs = _LOGIC.get(cell["type"])
        if inputs is None:
            return 0
        levels = [depth(b) + ((cell["type"], port) not in _SAME_LEVEL)
                  for port, bits in cell["connections"].items()
                  if port in inputs
                  for b in bits]
        return max(levels, default=0)
    return depth


def _deep_recursion(count):
    """Run ``count()`` with room for the recursion of a long carry chain or LUT cone."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 100_000))
    try:
        return count()
    finally:
        sys.setrecursionlimit(limit)


def wide_enables(netlist, top, *, min_fanout=32):
    """The clock-enable nets of ``top`` that drive at least ``min_fanout`` flip-flops.

    Parameters
    ----------
    netlist : dict
        yosys's JSON netlist after ``synth_ecp5``.
    top : str
        The module to look at.
    min_fanout : int

    Returns
    -------
    list of dict
        One per net, deepest first: ``depth`` (LUT levels from the nearest flip-flops),
        ``fanout`` (flip-flops it enables) and ``flip_flop`` (the name of one of them).
    """
    cells = netlist["modules"][top]["cells"]
    depth = _levels(cells)
    enables = {}
    for name, cell in cells.items():
        if cell["type"] == "TRELLIS_FF":
            bit = cell["connections"].get("CE", [None])[0]
            if isinstance(bit, int):
                enables.setdefault(bit, []).append(name)
    found = _deep_recursion(lambda: [
        {"depth": depth(bit), "fanout": len(ffs), "flip_flop": ffs[0]}
        for bit, ffs in enables.items() if len(ffs) >= min_fanout])
    return sorted(found, key=lambda net: (-net["depth"], -net["fanout"]))


#: Cells whose inputs end a path, and the inputs that are clocks rather than paths.
_ENDPOINTS = {"TRELLIS_FF": ("CLK",), "DP16KD": ("CLKA", "CLKB"), "MULT18X18D": ("CLK0",
              "CLK1", "CLK2", "CLK3"), "TRELLIS_DPR16X4": ("WCK",)}


def deep_registers(netlist, top, *, min_depth=5):
    """The registers of ``top`` with ``min_depth`` LUT levels or more in front of an input:
    flip-flops (data, enable, reset), block RAMs, DSPs and LUT RAMs, by name.

    yosys names a register's flip-flops after it with a suffix (``_TRELLIS_FF_Q_7``), which is
    dropped, so one entry is one register of the design however wide (its copies beside the
    block RAMs, ``$ram_copy``, apart).

    Returns
    -------
    list of dict
        Deepest first: ``register`` (the name), ``port`` (the input's name: ``DI``, ``CE``,
        ``ADA``...; digits dropped), ``depth`` (the most levels) and ``cells`` (how many of its
        cells have that input this deep or deeper).
    """
    cells = netlist["modules"][top]["cells"]
    depth = _levels(cells)

    def count():
        found = {}
        for name, cell in cells.items():
            clocks = _ENDPOINTS.get(cell["type"])
            if clocks is None:
                continue
            register = re.sub(r"_TRELLIS_FF_Q(_\d+)?", "", name)
            for port, bits in cell["connections"].items():
                if port in clocks or cell["port_directions"].get(port) != "input":
                    continue
                levels = max((depth(bit) for bit in bits), default=0)
                if levels >= min_depth:
                    entry = found.setdefault((register, port.rstrip("0123456789")),
                                             {"depth": 0, "cells": set()})
                    entry["depth"] = max(entry["depth"], levels)
                    entry["cells"].add(name)
        return found
    found = _deep_recursion(count)
    return sorted(({"register": register, "port": port, "depth": entry["depth"],
                    "cells": len(entry["cells"])}
                   for (register, port), entry in found.items()),
                  key=lambda reg: (-reg["depth"], -reg["cells"], reg["register"]))


def main(argv=None):
    """``python -m bertaccel.fpga.depth NETLIST [--min-fanout N | --registers [--min-depth
    D]]``: print the wide enables (or the deep registers) of a netlist that ``bertaccel synth``
    left (its top is :data:`TOP_NAME`), one JSON object a line, deepest first."""
    parser = argparse.ArgumentParser(
        prog="python -m bertaccel.fpga.depth",
        description="LUT levels in front of every wide clock enable of a synth_ecp5 netlist, "
                    "or in front of every register")
    parser.add_argument("netlist", help="netlist.json of a bertaccel synth run")
    parser.add_argument("--min-fanout", type=int, default=32,
                        help="flip-flops a net must enable to be listed (32)")
    parser.add_argument("--registers", action="store_true",
                        help="list the registers with --min-depth levels in front of an input")
    parser.add_argument("--min-depth", type=int, default=5,
                        help="LUT levels that list a register (5; with --registers)")
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exit_:
        return exit_.code
    problem = None
    if args.min_fanout < 1:
        problem = f"--min-fanout must be at least 1, not {args.min_fanout}"
    elif args.min_depth < 1:
        problem = f"--min-depth must be at least 1, not {args.min_depth}"
    else:
        try:
            with open(args.netlist) as file:
                netlist = json.load(file)
        except (OSError, ValueError) as error:
            problem = f"cannot read {args.netlist}: {error}"
        else:
            if TOP_NAME not in netlist.get("modules", {}):
                problem = f"{args.netlist} has no module {TOP_NAME}: not a bertaccel synth netlist"
    if problem:
        print(f"depth: {problem}", file=sys.stderr)
        return 2
    if args.registers:
        found = deep_registers(netlist, TOP_NAME, min_depth=args.min_depth)
    else:
        found = wide_enables(netlist, TOP_NAME, min_fanout=args.min_fanout)
    try:
        for entry in found:
            print(json.dumps(entry))
        sys.stdout.flush()
    except BrokenPipeError:              # the reader stopped early (``| head``): not an error
        sys.stdout = open(os.devnull, "w")
    return 0


if __name__ == "__main__":
    sys.exit(main())
