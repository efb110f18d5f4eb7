"""``bertaccel verilog``: the IP package of each config."""


from . import common

__all__ = ["Verilog"]


class Verilog:
    """Write the IP package of each ``--config``: Verilog, FuseSoC core, register maps."""

    name = "verilog"
    help = ("write the IP package of a config: the core's and the AXI4 shell's Verilog, the "
            "config JSON, a FuseSoC core, the register map as C and Python, the shell's ports")

    def add_arguments(self, parser):
        parser.add_argument("--config", action="append", required=True,
                            help="a preset (2x2, 4x4, 4x8, 8x8, 16x16, 32x32) or a .json written "
                                 "by this command; may be repeated")
        parser.add_argument("-o", "--output", default="build", help="output folder (build/)")
        parser.add_argument("--quiet", action="store_true", help="no progress on stderr")

    def run(self, args):
        from ..fpga.ip import write_ip
        configs = [common.config(spec) for spec in args.config]
        out_dir = common.output_dir(args.output)
        for cfg in configs:
            for path in write_ip(cfg, out_dir, log=None if args.quiet else common.log):
                print(path)
        return 0
