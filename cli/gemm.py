"""``bertaccel gemm``: a random int8 GEMM on a device, checked."""

import argparse
import json

from ..sw.checked_gemm import print_report, run_gemm
from . import common
from .common import UsageError

__all__ = ["Gemm"]


def _check_gemm_memory(cfg, m, k, n, args):
    """Refuse a GEMM that needs more memory than it may have, before its operands exist. The
    epilogue's parameters here are a stand-in of the same op: the memory depends on the op."""
    import torch

    from ..sw.budget import gemm_memory
    from ..sw.epilogue import random_epilogue
    need = gemm_memory(cfg, m, k, n)
    if args.epilogue is not None:   # the fused GEMM, and the plain one beside it
        stand_in = random_epilogue(args.epilogue, k=k, n=n,
                                   generator=torch.Generator().manual_seed(0))
        need += gemm_memory(cfg, m, k, n, epilogue=stand_in)
    common.check_memory(need, args, f"a {m} x {k} x {n} GEMM on {cfg.label}")


class Gemm:
    """Run a random GEMM (with a fused epilogue, if asked) and check it bit for bit."""

    name = "gemm"
    help = "run a random int8 GEMM and check it"

    def add_arguments(self, parser):
        parser.add_argument("--config", default="8x8", help="a preset or a .json (8x8)")
        parser.add_argument("--m", type=int, required=True)
        parser.add_argument("--k", type=int, required=True)
        parser.add_argument("--n", type=int, required=True)
        parser.add_argument("--device", choices=("ref", "rtl"), default="ref",
                            help="ref: the bit-exact software device; rtl: the RTL, simulated")
        parser.add_argument("--seed", type=int, default=0,
                            help="seeds the operands and the RTL stall generator (0)")
        parser.add_argument("--src-idle", type=float, metavar="P",
                            help="rtl: probability of an idle cycle on the input streams")
        parser.add_argument("--sink-stall", type=float, metavar="P",
                            help="rtl: probability of backpressure on the output stream")
        parser.add_argument("--simulator", choices=("verilator", "icarus"),
                            help="rtl: the simulator (verilator); icarus needs iverilog on PATH "
                                 "and runs a small GEMM bit- and cycle-exact with verilator, "
                                 "far slower")
        parser.add_argument("--icarus-std", choices=("2005", "2012"),
                            help="icarus: the language generation, iverilog -g2005 or -g2012 "
                                 "(2012)")
        parser.add_argument("--netlist", action="store_true",
                            help="rtl: simulate the core's ECP5 netlist (yosys synth_ecp5, "
                                 "gate level) in the harness instead of its RTL; verilator")
        parser.add_argument("--epilogue",
                            choices=("requant", "gelu", "softmax", "layernorm"),
                            help="fuse this epilogue (random realistic parameters from --seed; "
                                 "layernorm adds a residual) and also run the plain GEMM to "
                                 "compare cycles")
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument("--max-memory", metavar="SIZE",
                            help="refuse a GEMM estimated to need more memory than SIZE (4G, "
                                 "512M); by default, more than the machine has available")
        parser.add_argument("--build-root", default="build/sim", help=argparse.SUPPRESS)

    def run(self, args):
        cfg = common.config(args.config)
        m, k, n = (common.dimension(name, getattr(args, name)) for name in ("m", "k", "n"))
        src_idle = common.probability("src_idle", args.src_idle)
        sink_stall = common.probability("sink_stall", args.sink_stall)
        if args.device == "ref" and (args.src_idle or args.sink_stall):
            raise UsageError("--src-idle and --sink-stall apply to --device rtl only")
        if args.device == "ref" and (args.simulator or args.icarus_std):
            raise UsageError("--simulator and --icarus-std apply to --device rtl only")
        if args.netlist and (args.device != "rtl" or args.simulator == "icarus"):
            raise UsageError("--netlist applies to --device rtl on verilator only")
        if args.icarus_std and args.simulator != "icarus":
            raise UsageError("--icarus-std applies to --simulator icarus only")
        if args.simulator == "icarus":
            from ..sim.build import SimulationError, iverilog_bin
            try:
                iverilog_bin()
            except SimulationError as error:
                raise UsageError(str(error)) from None
        if not 0 <= args.seed < 1 << 32:
            raise UsageError(f"--seed must be from 0 to 2**32-1, not {args.seed}")
        if args.device == "rtl":
            common.build_root(args.build_root)
        from ..sw.program import ProgramError
        try:
            _check_gemm_memory(cfg, m, k, n, args)      # also a GEMM the config cannot hold
            report = run_gemm(cfg, m, k, n, device=args.device, seed=args.seed, src_idle=src_idle,
                              sink_stall=sink_stall, build_root=args.build_root,
                              epilogue=args.epilogue, simulator=args.simulator or "verilator",
                              icarus_std=args.icarus_std or "2012", netlist=args.netlist,
                              log=common.log)
        except ProgramError as error:  # ScaleError is a ValueError, never raised by the seeded ones
            raise UsageError(str(error)) from None
        if args.json:
            print(json.dumps(report, indent=2))
        else:
            print_report(report)
        return 0 if report["bit_exact"] else 1
