"""Block RAM output registers for ECP5: a pass over yosys's netlist before nextpnr.

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

Both flows run it: ``bertaccel synth`` (:func:`bertaccel.hw.synth.synthesize`) on the netlist
between yosys and nextpnr, and the ULX3S board build (``bench/ulx3s.py``) through
``python -m bertaccel.hw.ramreg NETLIST``, which rewrites the file in place.
"""

import json
import sys
from collections import defaultdict

__all__ = ["absorb_output_registers"]

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


def main(argv=None):
    """``python -m bertaccel.hw.ramreg NETLIST [TOP]``: rewrite a yosys JSON netlist in place
    (the top module is the one yosys marked ``top`` unless named); the counts go to stdout as
    JSON and to stderr as a sentence."""
    args = sys.argv[1:] if argv is None else argv
    if not 1 <= len(args) <= 2:
        print("usage: python -m bertaccel.hw.ramreg NETLIST.json [TOP]", file=sys.stderr)
        return 2
    with open(args[0]) as file:
        netlist = json.load(file)
    if len(args) == 2:
        top = args[1]
    else:
        tops = [name for name, module in netlist["modules"].items()
                if _int(module.get("attributes", {}).get("top", 0))]
        if len(tops) != 1:
            print(f"ramreg: name the top module of {args[0]} (candidates: {tops})",
                  file=sys.stderr)
            return 2
        top = tops[0]
    counts = absorb_output_registers(netlist, top)
    with open(args[0], "w") as file:
        json.dump(netlist, file)
    print(json.dumps(counts))
    print(f"ramreg: {counts['ports']} block RAM read ports took their output register "
          f"({counts['flip_flops']} flip-flops moved); {counts['ports_left']} left as they were",
          file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
