"""Logic depth in a mapped ECP5 netlist: how many LUTs lie between flip-flops and each wide enable.

nextpnr's Fmax moves by 10 to 20 % from one placement to the next on a small design, so a
check built on it alone needs a wide margin. What made the cores slow is structural and can be
counted without placing anything: a handshake decision, several LUTs deep, driving the clock
enable of a wide register (one net to hundreds of flip-flops across the chip). :func:`wide_enables`
finds every net that enables at least ``min_fanout`` flip-flops in a ``synth_ecp5`` netlist and
counts the LUT levels in front of it.

Counting: a ``LUT4`` is one level; so is each wide-function multiplexer (``PFUMX``,
``L6MUX21``: a LUT5 or LUT6 is two or three levels), a carry chain (``CCU2C``: the chain counts
once, whichever cell its input enters) and a LUT RAM's read (``TRELLIS_DPR16X4``, after its read
address). Flip-flops, block RAMs, DSPs, ports and constants start at zero.
"""

import argparse
import functools
import json
import sys

from .designs import TOP_NAME

__all__ = ["wide_enables", "main"]

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

    enables = {}
    for name, cell in cells.items():
        if cell["type"] == "TRELLIS_FF":
            bit = cell["connections"].get("CE", [None])[0]
            if isinstance(bit, int):
                enables.setdefault(bit, []).append(name)
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 100_000))
    try:
        found = [{"depth": depth(bit), "fanout": len(ffs), "flip_flop": ffs[0]}
                 for bit, ffs in enables.items() if len(ffs) >= min_fanout]
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found, key=lambda net: (-net["depth"], -net["fanout"]))


def main(argv=None):
    """``python -m bertaccel.fpga.depth NETLIST [--min-fanout N]``: print the wide enables of
    a netlist that ``bertaccel synth`` left (its top is :data:`TOP_NAME`), one JSON object a
    line, deepest first."""
    parser = argparse.ArgumentParser(
        prog="python -m bertaccel.fpga.depth",
        description="LUT levels in front of every wide clock enable of a synth_ecp5 netlist")
    parser.add_argument("netlist", help="netlist.json of a bertaccel synth run")
    parser.add_argument("--min-fanout", type=int, default=32,
                        help="flip-flops a net must enable to be listed (32)")
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exit_:
        return exit_.code
    problem = None
    if args.min_fanout < 1:
        problem = f"--min-fanout must be at least 1, not {args.min_fanout}"
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
    for net in wide_enables(netlist, TOP_NAME, min_fanout=args.min_fanout):
        print(json.dumps(net))
    return 0


if __name__ == "__main__":
    sys.exit(main())
