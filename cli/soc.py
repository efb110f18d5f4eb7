"""``bertaccel soc``: a random GEMM, or a BERT encoder layer, run by C firmware on the RISC-V
SoC, in Verilator; with ``--board ulx3s --bitstream``, the SoC's bitstream for a ULX3S-85F."""

import json

from . import common
from .common import UsageError

__all__ = ["Soc"]


class Soc:
    """Build the SoC of a config (cached), run a random GEMM (or, with ``--model``, one encoder
    layer) through its firmware, and check the outputs it printed against the software device,
    bit for bit."""

    name = "soc"
    help = ("run a random int8 GEMM, or one BERT encoder layer, on the accelerator from C "
            "firmware on a RISC-V CPU in a LiteX SoC (Verilator), checked against the software "
            "device")

    def add_arguments(self, parser):
        parser.add_argument("--config", default="2x2", help="a preset or a .json (2x2)")
        parser.add_argument("--m", type=int, default=9)
        parser.add_argument("--k", type=int, default=21)
        parser.add_argument("--n", type=int, default=11)
        parser.add_argument("--seed", type=int, default=1, help="seeds the operands (1)")
        parser.add_argument("--build-dir", default=None,
                            help="the model is built in DIR/soc-<tag> (build/sim); with "
                                 "--board, the bitstream in DIR/soc-ulx3s-<tag> (build/board)")
        parser.add_argument("--uart", action="store_true",
                            help="also print what the firmware printed on the UART")
        parser.add_argument("--model", default=None,
                            help="run one encoder layer of this model instead of a GEMM: "
                                 "'minilm' (all-MiniLM-L6-v2, offline) or a local model folder")
        parser.add_argument("--layer", type=int, default=1,
                            help="with --model: the layer, from 1 (1)")
        parser.add_argument("--seq", type=int, default=8,
                            help="with --model: tokens of the sentence, padded or truncated "
                                 "(8)")
        parser.add_argument("--optimize", action="store_true",
                            help="build the model with -O2 in DIR/soc-<tag>-O2: a longer build, "
                                 "a run several times faster (for --model)")
        parser.add_argument("--board", choices=["ulx3s"], default=None,
                            help="with --bitstream: build the SoC for this board (ulx3s: the "
                                 "ULX3S-85F, its SDRAM as main RAM) instead of simulating it")
        parser.add_argument("--bitstream", action="store_true",
                            help="with --board: synthesise, place and route the SoC with the "
                                 "GEMM's firmware in its ROM (yosys, nextpnr-ecp5; minutes)")
        parser.add_argument("--seed-pnr", type=int, default=1, help="nextpnr's seed (1)")
        parser.add_argument("--sys-clk-mhz", type=float, default=40.0,
                            help="with --board: the system clock from the PLL, MHz (40)")
        common.add_cache_options(parser)
        parser.add_argument("--json", action="store_true", help="one JSON object on stdout")

    def run(self, args):
        if (args.board is None) != (not args.bitstream):
            raise UsageError("--board and --bitstream go together")
        if args.board is not None:
            if args.model is not None or args.optimize:
                raise UsageError("--board builds the GEMM's firmware only (no --model)")
            return _bitstream(args)
        args.build_dir = args.build_dir or "build/sim"
        if args.model is not None:
            from .soc_layer import run_layer
            return run_layer(args)
        if args.optimize:
            raise UsageError("--optimize applies to --model only")
        return self._gemm(args)

    def _gemm(self, args):
        from ..soc.build import missing_tools
        from ..soc.firmware import check_image
        from ..soc.run import gemm_image, run_image
        from ..sw import SoftwareDevice
        from ..sw.cycles import CycleModel
        from .soc_layer import finish

        cfg = common.config(args.config)
        m, k, n = (common.dimension(name, getattr(args, name)) for name in "mkn")
        missing = missing_tools()
        if missing:
            raise UsageError("the SoC needs " + ", ".join(missing))
        folder = common.build_root(args.build_dir) / f"soc-{cfg.tag}"
        image, inputs = gemm_image(cfg, m, k, n, seed=args.seed)
        try:
            check_image(image)
        except ValueError as error:
            raise UsageError(str(error)) from None
        log = common.stderr_log(args) or (lambda text: None)
        soc = run_image(image, folder=folder, log=log)
        reference = SoftwareDevice(cfg).run(image.program, **inputs)
        exact = soc.outputs.keys() == reference.outputs.keys() and all(
            soc.outputs[name].equal(want) for name, want in reference.outputs.items())
        model = CycleModel(cfg).run(image.program).cycles
        result = {"config": cfg.name, "tag": cfg.tag, "m": m, "k": k, "n": n,
                  "seed": args.seed, "bit_exact": exact, "cycles": soc.cycles,
                  "model_cycles": model, "wake": soc.report.wake,
                  "checksum": soc.report.facts["checksum"], "build_s": round(soc.build_s, 1),
                  "firmware_s": round(soc.firmware_s, 2), "run_s": round(soc.run_s, 2)}
        verdict = "bit-exact with" if exact else "DIFFERENT from"
        summary = (f"{cfg.name} SoC: gemm {m}x{k}x{n} (seed {args.seed}) {verdict} the "
                   f"software device; CYCLES {soc.cycles} (the cycle model's core: {model}), "
                   f"woken by {soc.report.wake}; checksum {result['checksum']:#010x}; build "
                   f"{soc.build_s:.0f} s, firmware {soc.firmware_s:.1f} s, run "
                   f"{soc.run_s:.1f} s")
        return finish(args, soc, result, summary,
                      None if exact else f"the outputs of gemm {m}x{k}x{n} on the {cfg.name} "
                                         f"SoC differ from the software device's")


def _bitstream(args):
    """``--board ulx3s --bitstream``: the board SoC's bitstream, and its figures."""
    from ..soc.build import missing_tools
    from ..soc.firmware import check_image
    from ..soc.run import gemm_image

    cfg = common.config(args.config)
    m, k, n = (common.dimension(name, getattr(args, name)) for name in "mkn")
    missing = [tool for tool in missing_tools()
               if "verilator" not in tool and "/usr/include" not in tool]
    try:
        import litedram  # noqa: F401 - the board's SDRAM controller
    except ImportError:
        missing.append("the Python package litedram (pip install litedram==2024.12)")
    if missing:
        raise UsageError("the board SoC needs " + ", ".join(missing))
    from ..soc.board import build_bitstream

    image, _ = gemm_image(cfg, m, k, n, seed=args.seed)
    try:
        check_image(image)
    except ValueError as error:
        raise UsageError(str(error)) from None
    folder = common.build_root(args.build_dir or "build/board") / f"soc-ulx3s-{cfg.tag}"
    log = common.stderr_log(args) or (lambda text: None)
    if not 10 <= args.sys_clk_mhz <= 100:
        raise UsageError(f"--sys-clk-mhz must be from 10 to 100, not {args.sys_clk_mhz:g}")
    figures = build_bitstream(cfg, folder, image, sys_clk_hz=round(args.sys_clk_mhz * 1e6),
                              seed=args.seed_pnr, log=log)
    if args.json:
        print(json.dumps(figures))
        return 0
    use = figures["utilization"]
    cells = ", ".join(f"{name} {use[name][0]:,}/{use[name][1]:,}"
                      for name in ("TRELLIS_COMB", "TRELLIS_FF", "DP16KD", "MULT18X18D")
                      if name in use)
    clocks = "; ".join(f"{name} {clock['mhz']:.1f} MHz ({'PASS' if clock['pass'] else 'FAIL'} "
                       f"at {clock['target_mhz']:.1f})" for name, clock in
                       figures["fmax"].items())
    print(f"{cfg.name} SoC on the ULX3S-85F ({figures['device']}): Fmax {clocks}; {cells}; "
          f"gemm {m}x{k}x{n} firmware {figures['firmware_bytes']:,} bytes; "
          f"{figures['seconds']:.0f} s; {figures['bitstream']}")
    return 0
