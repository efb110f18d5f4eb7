"""``bertaccel demo``: what ``make demo`` runs first."""

import argparse

from ..sw.checked_gemm import print_report, run_gemm
from . import common

__all__ = ["Demo"]


class Demo:
    """Verilog for 8x8, then a 256^3 GEMM on the software device and on the RTL."""

    name = "demo"
    help = "Verilog for 8x8, then a 256^3 GEMM on ref and rtl"

    def add_arguments(self, parser):
        parser.add_argument("-o", "--output", default="build/demo")
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--build-root", default="build/sim", help=argparse.SUPPRESS)

    def run(self, args):
        from ..fpga.ip import write_core
        from ..hw.config import preset
        cfg = preset("8x8")
        common.build_root(args.build_root)
        out_dir = common.output_dir(args.output)
        print(f"== Verilog for {cfg.name} into {out_dir}")
        for path in write_core(cfg, out_dir, log=common.log):
            print(path)
        ok = True
        for device in ("ref", "rtl"):
            print(f"\n== 256 x 256 x 256 GEMM on the {device} device")
            report = run_gemm(cfg, 256, 256, 256, device=device, seed=args.seed,
                              build_root=args.build_root, log=common.log)
            print_report(report)
            ok &= report["bit_exact"]
        return 0 if ok else 1
