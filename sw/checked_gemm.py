"""A random GEMM on a device, checked: the operands from a seed, the program compiled for the
config, the result compared with the software device and with the golden GEMM, and a report of
its cycles, utilization and (with a fused epilogue) the distance from the float epilogue.

``bertaccel gemm`` and ``bertaccel demo`` print it; ``bertaccel regress`` runs it as Ray tasks.
"""

import math
import sys
import time

__all__ = ["LARGE", "print_report", "run_gemm"]


def run_gemm(cfg, m, k, n, *, device="ref", seed=0, src_idle=0.0, sink_stall=0.0,
             build_root="build/sim", epilogue=None, simulator="verilator", icarus_std="2012",
             netlist=False, log=None):
    """Run a random ``m x k x n`` GEMM on ``device`` and check it; return a report dict.

    ``simulator`` and ``icarus_std`` choose the simulator of the ``"rtl"`` device
    (:class:`~bertaccel.sw.devices.rtl.RtlDevice`; ``netlist``: the core's ECP5 netlist in
    its place), which is started (its simulator built, on first use) before anything else,
    announced on ``log``. With ``log``, a GEMM of
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
                simulator=simulator, icarus_std=icarus_std, netlist=netlist))
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
        result = expected  # its cycles come from the cycle model (sw/cycles/)
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
        "netlist": stats.get("netlist") if device == "rtl" else None,
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


def print_report(report, file=sys.stdout):
    """Print a :func:`run_gemm` report to ``file`` as lines of text."""

    def line(key, value):
        print(f"{key:<13}{value}", file=file)

    line("config", f"{report['config']} ({report['tag']})")
    line("gemm", f"{report['m']} x {report['k']} x {report['n']} ({report['macs']} MACs), "
                 f"seed {report['seed']}")
    device = report["device"]
    if device == "rtl":
        device += f", {report['simulator']}" + (f" -g{report['icarus_std']}"
                                                if report["icarus_std"] else "")
        device += ", the core's ECP5 netlist" if report["netlist"] else ""
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


