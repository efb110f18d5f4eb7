"""Block RAM registers for ECP5: two passes over yosys's netlist before nextpnr.

Output registers
----------------

A DP16KD's data leaves its RAM array 5.8 ns after the clock in nextpnr's model of speed grade
6, so a register right after the RAM, in the fabric, has less than 1 ns of a 150 MHz cycle left
for the route to it. The DP16KD has an output register of its own (``REGMODE = OUTREG``), whose
clock-to-output is short; but yosys's ECP5 flow never uses it.

The RTL already registers every read the units need fast: the store unit's beat register, the
mesh's first skew registers after the scratchpads (``hw/store.py``, ``hw/mesh.py``). This pass
moves such a register into the RAM. A read port's flip-flops are moved when every data bit the
port drives feeds exactly one flip-flop and nothing else, each of them clocked by the port's
clock, always enabled and with no set or reset (reset-less in the RTL); the port then gets
``REGMODE = OUTREG``, its data pins drive what the flip-flops drove, and the flip-flops are
removed. That register holds the same value in the same cycle as the flip-flops did, so the
design's behaviour and cycle counts do not change. A port where any bit fails the test is left
alone.

Address registers
-----------------
A wide memory is many DP16KDs side by side (the 8x8 accumulator's 256-bit rows are 29 RAMs per
read port), and one flip-flop of an address, write-enable or chip-select register drove that
pin of every one of them: one net across the chip, whose farthest arc was the critical path of
the 8x8 core with two epilogue lanes (15.3 ns of routing, one route).
:func:`replicate_ram_drivers` gives each group of ``group`` RAMs its own copy of every such
flip-flop (same data input, clock, enable and reset, so the same value in every cycle). The
first group keeps the original unless it has a sink that is not a RAM's control pin (the 8x8
accumulator's read address is also compared with the rows ahead of it): then every group gets a
copy and the original keeps only those sinks, so no RAM's address waits on a flip-flop that
other logic pulls away (8.2 ns of routing to one RAM of the 8x8 datapath when the first group
kept it). The groups follow the RAMs' names in natural order (yosys names a memory's slices
``mem.<port>.<slice>``, so a group is neighbouring data bits, whose consumers sit together). A
flip-flop drives its copies' data inputs from its own source net, so the long route moves to a
register-to-register arc with a handful of sinks.

The group size is the caller's (``group``). For the datapath it is 2 RAMs: with 8, and again
with 4, the placer left a copy 6.1-6.8 ns of routing from one of its RAMs on some seeds of the
8x8 datapath, because the RAMs it served were far apart. With 1, the source of the 29 copies of
an accumulator address was 8.3 ns from the farthest. So where a copied flip-flop's data comes
from a plain flip-flop that nothing else reads (the execute unit's row addresses travel down a
delay line, ``meta`` in ``hw/execute/accumulate.py``), that flip-flop is copied too, one copy per
``fanout`` (4) copies: a tree of two levels, each arc with a cycle of its own and a handful of
sinks.

For the whole core the group is 8 (:data:`bertaccel.fpga.synth.RAM_COPY_GROUP`): the cores'
limits are their handshakes, not these routes, and copies cost routing. With 2, the 8x8 core's
1,456 copies left its router with some 15,000 overused wires at iterations 5 to 7. With 8 (335
copies) the 8x8 core routes with placement seed 2 (44 iterations); on seed 1 the overuse stalls
near 900 wires (docs/fpga.md).

Both flows run both passes: ``bertaccel synth`` (:func:`bertaccel.fpga.synth.synthesize`) on the
netlist between yosys and nextpnr, and the ULX3S board build (``bench/ulx3s.py``) through
``python -m bertaccel.fpga.ramreg NETLIST --group 8``, which rewrites the file in place.
"""

import argparse
import copy
import json
import re
import sys
from collections import defaultdict

__all__ = ["absorb_output_registers", "replicate_ram_drivers", "rewrite_for_nextpnr"]

#: Data output pins per DP16KD port.
_PORT_BITS = 18


def _int(value):
    """A parameter of yosys's JSON: a binary string of 32 digits, or a number."""
    return int(value, 2) if isinstance(value, str) else int(value)


def _plain(ff, clock):
    """Whether the TRELLIS_FF ``ff`` is a plain register of ``clock``: rising edge, always
    enabled, no set or reset."""
    params, conns = ff["parameters"], ff["connections"]
    if params.get("CLKMUX", "CLK").strip() != "CLK" or conns.get("CLK") != clock:
        return False
    if params.get("CEMUX", "1").strip() != "1" and conns.get("CE", ["1"]) != ["1"]:
        return False
    lsr = conns.get("LSR")
    if lsr is not None and lsr != ["0"] and params.get("LSRMUX", "LSR").strip() != "0":
        return False
    return True


def _register_of(cells, sinks, conns, side):
    """``[(bit, flip-flop name)]`` for the used data pins of one DP16KD side when each feeds one
    plain flip-flop and nothing else (``[]``: no pin used), else None."""
    if conns.get(f"RST{side}", ["0"]) != ["0"]:
        return None
    moves = []
    for i in range(_PORT_BITS):
        bit = conns.get(f"DO{side}{i}", [None])[0]
        if not isinstance(bit, int) or not sinks.get(bit):
            continue
        uses = sinks[bit]
        ff = cells[uses[0][0]] if len(uses) == 1 else None
        if (ff is None or ff["type"] != "TRELLIS_FF" or uses[0][1] != "DI"
                or not _plain(ff, conns[f"CLK{side}"])):
            return None
        moves.append((i, uses[0][0]))
    return moves


def absorb_output_registers(netlist, top):
    """Move the flip-flops that register a DP16KD read port into the RAM (module docstring).

    Parameters
    ----------
    netlist : dict
        yosys's ``write_json`` output after ``synth_ecp5``; changed in place.
    top : str
        The module to rewrite.

    Returns
    -------
    dict
        ``ports`` (read ports given their output register), ``flip_flops`` (flip-flops
        removed), ``ports_left`` (read ports driving anything else, left as they were).
    """
    cells = netlist["modules"][top]["cells"]
    sinks = defaultdict(list)
    for name, cell in cells.items():
        for pin, bits in cell["connections"].items():
            if cell["port_directions"].get(pin) == "input":
                for bit in bits:
                    if isinstance(bit, int):
                        sinks[bit].append((name, pin))
    ports = flip_flops = ports_left = 0
    for ram in [cell for cell in cells.values() if cell["type"] == "DP16KD"]:
        conns = ram["connections"]
        # 36 bits wide (yosys's PDPW16KD mapping), one read port comes out on both sides' pins:
        # its register is both sides' or neither.
        wide = any(_int(ram["parameters"].get(f"DATA_WIDTH_{side}", 0)) == 36 for side in "AB")
        groups = [("A", "B")] if wide else [("A",), ("B",)]
        for group in groups:
            moves = []
            for side in group:
                side_moves = _register_of(cells, sinks, conns, side)
                if side_moves is None:
                    moves = None
                    break
                moves += [(side, i, ff) for i, ff in side_moves]
            if not moves:
                ports_left += moves is None
                continue
            for side, i, ff_name in moves:
                conns[f"DO{side}{i}"] = cells.pop(ff_name)["connections"]["Q"]
            for side in group:
                ram["parameters"][f"REGMODE_{side}"] = "OUTREG"
                conns[f"OCE{side}"] = ["1"]
            ports += 1
            flip_flops += len(moves)
    return {"ports": ports, "flip_flops": flip_flops, "ports_left": ports_left}


#: The DP16KD inputs that :func:`replicate_ram_drivers` serves: address, write enable, clock
#: enable and chip select, of either side.
_CONTROL_PIN = re.compile(r"(AD|WE|CE|CS)[AB]\d*")


def _natural(name):
    """A sort key that orders ``mem.0.10`` after ``mem.0.9``."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part)
            for part in re.split(r"(\d+)", name)]


def replicate_ram_drivers(netlist, top, group=2, fanout=4):
    """Give every group of ``group`` DP16KDs its own copy of each flip-flop that drives their
    control pins, and every ``fanout`` of those copies a copy of the flip-flop before it
    (module docstring).

    Parameters
    ----------
    netlist : dict
        yosys's ``write_json`` output after ``synth_ecp5``; changed in place.
    top : str
        The module to rewrite.
    group : int
        The most RAMs one copy serves.
    fanout : int
        The most copies one copy of the flip-flop before them serves.

    Returns
    -------
    dict
        ``flip_flops`` (flip-flops that were copied, at either level), ``copies``
        (flip-flops added).
    """
    if group < 1 or fanout < 1:
        raise ValueError(f"group and fanout must be at least 1, not {group} and {fanout}")
    module = netlist["modules"][top]
    cells = module["cells"]
    driver = {}
    ram_pins = defaultdict(lambda: defaultdict(list))     # net bit -> RAM -> its pins
    other_sinks = {bit for port in module.get("ports", {}).values()
                   if port.get("direction") != "input" for bit in port["bits"]}
    uses = defaultdict(int, {bit: 1 for bit in other_sinks})  # net bit -> sinks, ports too
    top_bit = 0
    for name, cell in cells.items():
        for pin, bits in cell["connections"].items():
            nets = [b for b in bits if isinstance(b, int)]
            top_bit = max([top_bit, *nets])
            if cell["type"] == "TRELLIS_FF" and pin == "Q" and isinstance(bits[0], int):
                driver[bits[0]] = name
            if cell.get("port_directions", {}).get(pin) == "output":
                continue
            for b in nets:
                uses[b] += 1
            if (cell["type"] == "DP16KD" and _CONTROL_PIN.fullmatch(pin)
                    and isinstance(bits[0], int)):
                ram_pins[bits[0]][name].append(pin)
            else:
                other_sinks.update(nets)
    netnames = module.setdefault("netnames", {})
    names = {bits[0]: name for name, net in netnames.items()
             for bits in [net["bits"]] if len(bits) == 1 and isinstance(bits[0], int)}
    for name, net in netnames.items():
        for i, bit in enumerate(net["bits"]):
            if isinstance(bit, int) and bit not in names:
                names[bit] = f"{name}[{i}]"
    flip_flops = copies = 0

    def duplicate(bit, k):
        """Copy ``k`` of the flip-flop driving ``bit``, on a net of its own: (net, name)."""
        nonlocal top_bit, copies
        top_bit += 1
        name = f"{driver[bit]}$ram_copy{k}"
        cells[name] = dup = copy.deepcopy(cells[driver[bit]])
        dup["connections"]["Q"] = [top_bit]
        netnames[f"{names.get(bit, driver[bit])}$ram_copy{k}"] = {
            "hide_name": 0, "bits": [top_bit], "attributes": {}}
        copies += 1
        return top_bit, name

    for bit, rams in ram_pins.items():
        if bit not in driver or len(rams) <= group:
            continue
        ordered = sorted(rams, key=_natural)
        original = cells[driver[bit]]
        first = 0 if bit in other_sinks else group
        level = [driver[bit]] if first else []         # the flip-flops serving the RAMs
        for k, start in enumerate(range(first, len(ordered), group), 1):
            net, name = duplicate(bit, k)
            level.append(name)
            for ram in ordered[start:start + group]:
                for pin in rams[ram]:
                    cells[ram]["connections"][pin] = [net]
        flip_flops += 1
        # The level before: when the flip-flop's data input comes from a plain flip-flop of
        # its own (nothing else reads it), that one is copied too, one per `fanout` copies.
        before = original["connections"].get("DI", [None])[0]
        if (isinstance(before, int) and before in driver and uses[before] == 1
                and len(level) > fanout):
            for k, start in enumerate(range(fanout, len(level), fanout), 1):
                net, _ = duplicate(before, k)
                for name in level[start:start + fanout]:
                    cells[name]["connections"]["DI"] = [net]
            flip_flops += 1
    return {"flip_flops": flip_flops, "copies": copies}


def rewrite_for_nextpnr(netlist, top, group=2):
    """Both passes, in the order both flows run them: the output registers move into the RAMs,
    then the address registers are copied per ``group`` RAMs. Returns the two passes' counts
    (:func:`absorb_output_registers`, :func:`replicate_ram_drivers`)."""
    return (absorb_output_registers(netlist, top),
            replicate_ram_drivers(netlist, top, group=group))


def main(argv=None):
    """``python -m bertaccel.fpga.ramreg NETLIST [TOP] [--group N]``: rewrite a yosys JSON
    netlist in place (the top module is the one yosys marked ``top`` unless named; address
    copies per ``N`` RAMs, 2 unless given); the counts go to stdout as JSON and to stderr as a
    sentence."""
    parser = argparse.ArgumentParser(
        prog="python -m bertaccel.fpga.ramreg",
        description="move block RAM output registers into the DP16KDs and copy their address "
                    "registers per group of RAMs, in a yosys JSON netlist (rewritten in place)")
    parser.add_argument("netlist", help="yosys write_json output after synth_ecp5")
    parser.add_argument("top", nargs="?", help="the module to rewrite (default: yosys's top)")
    parser.add_argument("--group", type=int, default=2,
                        help="the most RAMs one copy of an address register serves (default 2)")
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exit_:
        return exit_.code
    if args.group < 1:
        print(f"ramreg: --group must be at least 1, not {args.group}", file=sys.stderr)
        return 2
    with open(args.netlist) as file:
        netlist = json.load(file)
    top = args.top
    if top is None:
        tops = [name for name, module in netlist["modules"].items()
                if _int(module.get("attributes", {}).get("top", 0))]
        if len(tops) != 1:
            print(f"ramreg: name the top module of {args.netlist} (candidates: {tops})",
                  file=sys.stderr)
            return 2
        top = tops[0]
    counts, copies = rewrite_for_nextpnr(netlist, top, group=args.group)
    with open(args.netlist, "w") as file:
        json.dump(netlist, file)
    print(json.dumps(dict(counts, address_copies=copies, group=args.group)))
    print(f"ramreg: {counts['ports']} block RAM read ports took their output register "
          f"({counts['flip_flops']} flip-flops moved); {counts['ports_left']} left as they were; "
          f"{copies['copies']} copies of {copies['flip_flops']} flip-flops driving RAM control "
          f"pins, one per {args.group} RAMs", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
