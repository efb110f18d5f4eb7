"""The ``bertaccel`` command.

::

    bertaccel verilog --config 8x8 -o build/          # IP package: Verilog, FuseSoC core, CSRs
    bertaccel gemm --config 8x8 --m 256 --k 256 --n 256 --device rtl [--json]
    bertaccel gemm --config 8x8 --m 128 --k 64 --n 128 --device rtl --epilogue softmax --json
    bertaccel demo                                     # Verilog, then a GEMM on ref and rtl
    bertaccel synth --config 8x8 --target ecp5-85k [--json]   # yosys + nextpnr: resources, Fmax
    bertaccel soc --config 2x2 --m 9 --k 21 --n 11 [--uart] [--json]  # C firmware on a RISC-V SoC
    bertaccel run --model minilm --text "..." [--device ref|rtl] [--json]  # BERT embedding
    bertaccel classify --model F --pair "..." "..." [--device ref|rtl] [--json]  # a task head
    bertaccel bench bert --shape bert-base --seq 128 --batch 1 --config 16x16 [--json]
    bertaccel profile --model minilm [--config 8x8] [--png P] [--json]  # host vs accelerator
    bertaccel eval stsb [--configs 8x8,16x16] [--split dev,test] [--json]  # STS-B Spearman
    bertaccel seqpoint [--model minilm] [--config 8x8] [--k 10] [--json]
    bertaccel sweep --model minilm --seq 32,128 --configs 4x4,8x8 [--synth] [--address A]  # Ray
    bertaccel regress --configs 2x2,4x8,8x8 --programs 200 [--seed S] [--address A]     # Ray
    bertaccel multitask build [--task T ...]          # fine-tune, compress: docs/multitask.md
    bertaccel multitask eval [--task T ...] [--json]  # FP32, int8, int8 base+delta, cycles
    bertaccel multitask run --task T --text "..."     # the label by base + the task's delta

Bad input gives one line on stderr, ``bertaccel: error: ...``, and exit status 2 before
anything is built, compiled or simulated: an unknown preset, a config file that leaves fields
out without a base, a dimension below 1, a stall probability out of range, an output path or
build folder that cannot be written (:mod:`bertaccel.sw.paths`), a GEMM (or ``run``'s largest
batch, or a ``bench bert`` shape) estimated to need more memory than the machine has available
or than ``--max-memory`` (:mod:`bertaccel.sw.budget`); for ``synth`` also an unknown target, or
a config that does not fit the part. Long work says what it does on stderr: a GEMM of many
instructions its stages, an RTL simulator its build (announced as it starts). Ctrl-C stops
the command (exit status 130) and leaves no half-written output. ``gemm`` exits with 1 when
the result is not bit-exact, or when the device fails. With ``--json``, a failure also prints
a JSON object on stdout, ``{"error": "<the message>", "status": 2}`` (or 1), so a script
reading the output always reads JSON.

Each command is an applet (Glasgow's shape): a class in a module of its own with ``name``,
``help``, ``add_arguments(parser)`` and ``run(args)``, listed once in :data:`APPLETS`; the work
itself is in the library (``bertaccel.sw``, ``bertaccel.analysis``, ``bertaccel.fpga``,
``bertaccel.cluster``), where Ray tasks and bench scripts call it too.
"""

import json
import sys
import warnings

from ..sw.paths import PathError
from .bench import Bench
from .classify import Classify
from .common import Parser, UsageError
from .demo import Demo
from .eval import Eval
from .gemm import Gemm
from .multitask import Multitask
from .profile import Profile
from .regress import Regress
from .run import Run
from .seqpoint import Seqpoint
from .soc import Soc
from .sweep import Sweep
from .synth import Synth
from .verilog import Verilog

__all__ = ["APPLETS", "main", "parser"]

#: Every command, in the order ``bertaccel --help`` lists them.
APPLETS = (Verilog, Gemm, Demo, Synth, Soc, Run, Classify, Bench, Eval, Seqpoint, Sweep, Regress,
           Multitask, Profile)


def parser():
    """The ``bertaccel`` argument parser: one subparser an applet, each knowing its applet."""
    from .. import __version__

    top = Parser(prog="bertaccel",
                 description="int8 BERT accelerator generator: Verilog, GEMMs, demo")
    top.add_argument("--version", action="version", version=f"bertaccel {__version__}")
    commands = top.add_subparsers(dest="command", required=True, parser_class=Parser)
    for cls in APPLETS:
        applet = cls()
        sub = commands.add_parser(applet.name, help=applet.help, description=applet.help)
        applet.add_arguments(sub)
        sub.set_defaults(applet=applet)
    return top


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"bertaccel: warning: {message}", file=sys.stderr)


def _fail(error, status, argv):
    """Report ``error`` in one line on stderr (and, under ``--json``, as JSON on stdout)."""
    print(f"bertaccel: error: {error}", file=sys.stderr)
    if "--json" in argv:
        print(json.dumps({"error": str(error), "status": status}))
    return status


def main(argv=None):
    """Entry point of the ``bertaccel`` console script; returns the exit status."""
    from ..golden.kernels import KernelError, requested

    argv = sys.argv[1:] if argv is None else list(argv)
    warnings.showwarning = _show_warning
    try:
        args = parser().parse_args(argv)
        requested()                                # a bad $BERTACCEL_GEMM_KERNEL: before any work
        return args.applet.run(args)
    except (UsageError, PathError, KernelError) as error:
        return _fail(error, 2, argv)
    except KeyboardInterrupt:
        # On a terminal a progress bar may hold the line (and the ^C after it): start afresh.
        fresh = "\n" if sys.stderr.isatty() else ""
        print(f"{fresh}bertaccel: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - a device or build failure: report, exit 1
        from ..cluster.connect import ClusterError
        from ..fpga.errors import SynthError
        from ..sim.build import SimulationError
        from ..sw.devices.base import DeviceError
        if isinstance(error, (DeviceError, SimulationError, SynthError, ClusterError)):
            return _fail(error, 1, argv)
        raise
