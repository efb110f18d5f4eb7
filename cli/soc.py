"""``bertaccel soc``: a random GEMM, or a BERT encoder layer, run by C firmware on the RISC-V
SoC, in Verilator."""


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
        parser.add_argument("--build-dir", default="build/sim",
                            help="the model is built in DIR/soc-<tag> (build/sim)")
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
        common.add_cache_options(parser)
        parser.add_argument("--json", action="store_true", help="one JSON object on stdout")

    def run(self, args):
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

