"""Functional coverage: what the suite has seen the whole core and the AXI shell do.

Every program that an RTL device of the suite runs to completion is sampled (the session fixture
in ``verif/conftest.py``), with the device's stall mode: free-running, idle input cycles,
output backpressure, or both. The coverpoints are the instruction set's own cases, from the
layouts of :mod:`bertaccel.hw.isa` and the channels of :mod:`bertaccel.hw.legal`:

* ``opcode x stall`` and ``STORE op x stall``, ``LOAD target x stall`` (crosses);
* ``dependency flag``: every flag of every opcode that names a channel;
* ``MATMUL mode``: ``accumulate`` x ``shift``; ``MATMUL m_len``: 0, 1, below the rows, the rows,
  above; ``STORE shape``: empty, one row, two rows, one strip, several strips;
* ``SET index``: every parameter register;
* ``address edge``: the first and the last row of scratchpad A, scratchpad B and the
  accumulator, each reached by an instruction;
* ``token channel``: each channel's program-order count back at zero after a pop, and at its
  limit of :data:`~bertaccel.hw.isa.TOKEN_MAX`;
* ``wait``: each kind of wait the cycle model counts in a free-running run (which takes exactly
  the model's cycles, so its waits are the core's): an instruction queue full with the
  dispatch blocked, each unit waiting for a token, a SET waiting for the epilogue to drain;
* ``AXI shell``: what the shell's cocotb testbench saw on its buses (``verif/block/
  test_axi_shell.py`` counts :data:`AXI_SHELL` and writes them to the same folder): bursts of
  one word, of ``max_burst`` words and up to a 4 KiB boundary, both read IDs, every error
  response, every fault, a soft reset in the middle of a run, runs back to back, START while
  busy, CSR writes to read-only registers and accesses at unmapped offsets.

Each worker writes its hits to ``build/coverage/functional/<worker>.json`` when the session
ends (each shell simulation to ``axi_shell-<tag>.json``); ``python -m verif.funcov`` merges
them and prints every coverpoint's bins and hits.
"""

import json
import sys
from collections import Counter
from pathlib import Path

from bertaccel.hw import isa
from bertaccel.hw.axi import csr
from bertaccel.hw.legal import CHANNELS
from bertaccel.sw.cycles import CycleModel

__all__ = ["STALLS", "FOLDER", "AXI_SHELL", "bins", "stall_mode", "sample", "write", "merged",
           "report", "main"]

#: The stall modes of a device: ``(src_idle > 0, sink_stall > 0)`` -> name.
STALLS = {(False, False): "free", (True, False): "idle source",
          (False, True): "backpressure", (True, True): "idle and backpressure"}
#: Where the workers write their hits, below the repository.
FOLDER = Path("build") / "coverage" / "functional"
_MEMORIES = ("scratchpad A", "scratchpad B", "accumulator")
_TOKENS = ("l2e", "e2l", "e2s", "s2e")
#: The cycle model's waits (``CycleReport.stalls``), by the names the report gives them.
_WAITS = {"dispatch_blocked": "a queue full, dispatch blocked",
          "load_on_e2l": "load unit waits for an e2l token",
          "exec_on_l2e": "execute unit waits for an l2e token",
          "exec_on_s2e": "execute unit waits for an s2e token",
          "store_on_e2s": "store unit waits for an e2s token",
          "set_on_drain": "a SET waits for the epilogue to drain"}


#: The AXI shell's bins, as its testbench counts them.
AXI_SHELL = tuple(
    [f"{kind} burst {what}" for kind in ("read", "write")
     for what in ("of 1 word", "of max_burst words", "up to a 4 KiB boundary")]
    + ["instruction read (ARID 0)", "data read (ARID 1)"]
    + [f"{resp} on {ch}" for ch in ("R", "B") for resp in ("SLVERR", "DECERR")]
    + [f"fault {name}" for code, name in csr.FAULT_CODES.items() if code]
    + ["soft reset with a run in flight", "back-to-back runs", "START while BUSY",
       "CSR write to a read-only register", "CSR access at an unmapped offset"])


def bins():
    """``{coverpoint: [bin, ...]}``: every bin the suite must hit."""
    stalls = list(STALLS.values())
    return {
        "opcode x stall": [f"{op.name} / {s}" for op in isa.Opcode for s in stalls],
        "STORE op x stall": [f"{op.name} / {s}" for op in isa.EpOp for s in stalls],
        "LOAD target x stall": [f"{t.name} / {s}" for t in isa.Target for s in stalls],
        "dependency flag": [f"{op.name} {flag}" for op, flags in CHANNELS.items()
                            for flag, channel in flags.items() if channel],
        "MATMUL mode": [f"accumulate {a} shift {s}" for a in (0, 1) for s in (0, 1)],
        "MATMUL m_len": ["0", "1", "below rows", "rows", "above rows"],
        "STORE shape": ["empty", "one row", "two rows", "one strip", "several strips"],
        "SET index": [p.name for p in isa.Param],
        "address edge": [f"{mem} {end} row" for mem in _MEMORIES for end in ("first", "last")],
        "token channel": [f"{ch} {at}" for ch in _TOKENS for at in ("back at 0", "at limit")],
        "wait": list(_WAITS.values()),
        "AXI shell": list(AXI_SHELL),
    }


def stall_mode(device):
    """The :data:`STALLS` name of an RTL device's settings."""
    return STALLS[(device.src_idle > 0, device.sink_stall > 0)]


def _m_len(m_len, rows):
    if m_len <= 1:
        return str(m_len)
    return "below rows" if m_len < rows else "rows" if m_len == rows else "above rows"


def _store_shape(store):
    if store.rows == 0 or store.strips == 0:
        return ["empty"]
    shape = {1: ["one row"], 2: ["two rows"]}.get(store.rows, [])
    return shape + ["one strip" if store.strips == 1 else "several strips"]


def _edges(cfg, instr):
    """The ``address edge`` bins of one instruction: ``(memory, first row, last row)``."""
    if isinstance(instr, isa.Load) and instr.target != isa.Target.PMEM and instr.count:
        memory = "scratchpad A" if instr.target == isa.Target.SPAD_A else "scratchpad B"
        return [(memory, instr.addr, instr.addr + instr.count - 1, cfg.spad_depth)]
    if isinstance(instr, isa.Matmul) and instr.m_len:
        return [("accumulator", instr.acc_addr, instr.acc_addr + instr.m_len - 1, cfg.acc_depth)]
    if isinstance(instr, isa.Store) and instr.rows and instr.strips:
        last = instr.acc_addr + (instr.strips - 1) * instr.stride + instr.rows - 1
        return [("accumulator", instr.acc_addr, last, cfg.acc_depth)]
    return []


def _instruction_hits(cfg, instr, mode, hits):
    hits["opcode x stall"][f"{instr.opcode.name} / {mode}"] += 1
    if isinstance(instr, isa.Load):
        hits["LOAD target x stall"][f"{instr.target.name} / {mode}"] += 1
    elif isinstance(instr, isa.Matmul):
        hits["MATMUL mode"][f"accumulate {int(instr.accumulate)} shift {int(instr.shift)}"] += 1
        hits["MATMUL m_len"][_m_len(instr.m_len, cfg.rows)] += 1
    elif isinstance(instr, isa.Store):
        hits["STORE op x stall"][f"{instr.op.name} / {mode}"] += 1
        for shape in _store_shape(instr):
            hits["STORE shape"][shape] += 1
    else:
        hits["SET index"][instr.index.name] += 1
    for memory, first, last, depth in _edges(cfg, instr):
        if first == 0:
            hits["address edge"][f"{memory} first row"] += 1
        if last == depth - 1:
            hits["address edge"][f"{memory} last row"] += 1


def sample(hits, cfg, program, mode):
    """Add the hits of ``program``, run on ``cfg`` in stall ``mode``, to ``hits``
    (``{coverpoint: Counter}``)."""
    if mode == STALLS[(False, False)]:
        for name, cycles in CycleModel(cfg).run(program).stalls.items():
            if cycles:
                hits["wait"][_WAITS[name]] += 1
    count = dict.fromkeys(_TOKENS, 0)
    for instr in program.instrs:
        _instruction_hits(cfg, instr, mode, hits)
        for flag, channel in CHANNELS[instr.opcode].items():
            if not (channel and getattr(instr, flag)):
                continue
            hits["dependency flag"][f"{instr.opcode.name} {flag}"] += 1
            count[channel] += 1 if flag.startswith("push") else -1
            if count[channel] == 0:
                hits["token channel"][f"{channel} back at 0"] += 1
            if count[channel] == isa.TOKEN_MAX:
                hits["token channel"][f"{channel} at limit"] += 1


def write(hits, path):
    """Write ``hits`` as JSON to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({point: dict(counter) for point, counter in hits.items()},
                               indent=1, sort_keys=True) + "\n")


def merged(folder):
    """The hits of every worker's file in ``folder``, added up."""
    hits = {point: Counter() for point in bins()}
    for path in sorted(Path(folder).glob("*.json")):
        for point, counter in json.loads(path.read_text()).items():
            hits.setdefault(point, Counter()).update(counter)
    return hits


def report(hits):
    """The bins of every coverpoint with their hits, each coverpoint's share of bins hit, and
    the total; ``(text, bins hit, bins)``."""
    lines, hit_all, total = [], 0, 0
    for point, names in bins().items():
        hit = sum(1 for name in names if hits[point][name])
        hit_all, total = hit_all + hit, total + len(names)
        lines.append(f"{point}: {hit} of {len(names)} bins ({100 * hit / len(names):.0f} %)")
        lines += [f"  {'MISS' if not hits[point][name] else '    '} {name}: "
                  f"{hits[point][name]}" for name in names]
    lines.append(f"functional coverage: {hit_all} of {total} bins "
                 f"({100 * hit_all / total:.1f} %)")
    return "\n".join(lines), hit_all, total


def main(argv=None):
    """``python -m verif.funcov [FOLDER]``: print the report of the suite's last run."""
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else FOLDER
    if not any(folder.glob("*.json")):
        print(f"no functional coverage in {folder}: run the suite first (make test)",
              file=sys.stderr)
        return 2
    print(report(merged(folder))[0])
    return 0


if __name__ == "__main__":
    sys.exit(main())
