"""Random bit-exact regressions of the RTL, as Ray tasks.

::

    cases = draw_cases(["2x2", "4x8", "8x8"], programs=200, seed=1)
    with connect():
        report = regress(cases, build_root="build/sim")
    print(format_regress(report))          # every failure with the command that reproduces it

Each case is a GEMM of a random shape, with one of the epilogues (none, requant, GELU, softmax,
LayerNorm with its residual), free-running or with idle cycles on the sources and backpressure on
the sink, and runs as one task: :func:`bertaccel.sw.checked_gemm.run_gemm` on the Verilated core, checked
bit for bit against the software device and the golden integer reference, which is what
``bertaccel gemm ... --device rtl`` runs. So a failure's command line reproduces it alone. A
free-running case is also checked cycle for cycle against the cycle model (``--device ref``).

Configs, epilogues and stall settings take turns, so every config meets every epilogue and every
stall setting; shapes and seeds are drawn from ``random.Random(seed)``.

Simulator builds: the first task of a config on a node builds its simulator into
``build_root`` (cached per design; the build is locked, so the node's other tasks of that config
wait for it rather than build it again) and every worker then runs that build read-only. Each
simulator writes its log beside the build under its own name and its cocotb results into a
temporary folder of its own, so tasks share nothing they write.
"""

import dataclasses
import random
import shlex
import time

from .tasks import DEFAULT_RETRIES, Failure, run_tasks

__all__ = ["EPILOGUES", "STALLS", "SHAPE_LIMITS", "SCHEMA", "Case", "draw_cases", "check_case",
           "regress", "format_regress"]

SCHEMA = "bertaccel-regress/1"
#: The epilogues a case may have (None: the plain GEMM).
EPILOGUES = (None, "requant", "gelu", "softmax", "layernorm")
#: ``(src_idle, sink_stall)``: free-running, idle cycles, backpressure, both. Multiples of
#: 1/256, which is the device's unit, so the command line's probability is the run's exactly.
STALLS = ((0.0, 0.0), (0.25, 0.0), (0.0, 0.375), (0.25, 0.5))
#: The largest m, k and n drawn (from 1).
SHAPE_LIMITS = (48, 96, 48)


@dataclasses.dataclass(frozen=True)
class Case:
    """One random GEMM on one config (``config`` as ``--config`` takes it)."""

    config: str
    m: int
    k: int
    n: int
    epilogue: str | None
    seed: int
    src_idle: float = 0.0
    sink_stall: float = 0.0

    @property
    def free_running(self):
        return not (self.src_idle or self.sink_stall)

    def command(self, device="rtl"):
        """The ``bertaccel gemm`` command line that runs this case alone."""
        words = ["bertaccel", "gemm", "--config", shlex.quote(self.config), "--m", str(self.m),
                 "--k", str(self.k), "--n", str(self.n), "--device", device,
                 "--seed", str(self.seed)]
        if self.epilogue:
            words += ["--epilogue", self.epilogue]
        if device == "rtl" and self.src_idle:
            words += ["--src-idle", repr(self.src_idle)]
        if device == "rtl" and self.sink_stall:
            words += ["--sink-stall", repr(self.sink_stall)]
        return " ".join(words)


def draw_cases(configs, programs, seed=0):
    """``programs`` cases over ``configs`` (see the module docstring)."""
    rng = random.Random(seed)
    cases = []
    for index in range(programs):
        turn, config = divmod(index, len(configs))
        turn, epilogue = divmod(turn, len(EPILOGUES))
        src_idle, sink_stall = STALLS[turn % len(STALLS)]
        m, k, n = (rng.randint(1, limit) for limit in SHAPE_LIMITS)
        cases.append(Case(configs[config], m, k, n, EPILOGUES[epilogue],
                          rng.randrange(1 << 32), src_idle, sink_stall))
    return cases


def check_case(case, build_root):
    """Run ``case`` on the RTL and check it: ``{"ok", "failure", "reason", "cycles",
    "wall_s"}``."""
    from ..hw.config import load_config
    from ..sim.build import SimulationError
    from ..sw.checked_gemm import run_gemm
    from ..sw.devices.base import DeviceError

    cfg = load_config(case.config)
    options = dict(seed=case.seed, epilogue=case.epilogue)
    try:
        rtl = run_gemm(cfg, case.m, case.k, case.n, device="rtl", build_root=build_root,
                       src_idle=case.src_idle, sink_stall=case.sink_stall, **options)
        model = run_gemm(cfg, case.m, case.k, case.n, **options) if case.free_running else None
    except (ValueError, DeviceError, SimulationError) as error:  # ProgramError is a ValueError
        return {"ok": False, "failure": type(error).__name__, "reason": str(error),
                "cycles": None, "wall_s": None}
    failure = reason = None
    if not rtl["bit_exact"]:
        failure, reason = "mismatch", ("not bit-exact: the RTL, the software device and the "
                                       "golden reference disagree")
    elif model is not None and model["cycles"] != rtl["cycles"]:
        failure, reason = "cycles", (f"the RTL took {rtl['cycles']} cycles, the cycle model "
                                     f"{model['cycles']} (`{case.command('ref')}`)")
    return {"ok": failure is None, "failure": failure, "reason": reason,
            "cycles": rtl["cycles"], "wall_s": rtl["wall_s"]}


def regress(cases, *, build_root, retries=DEFAULT_RETRIES, log=None):
    """Check every case as a Ray task; Ray must be joined
    (:func:`~bertaccel.cluster.connect.connect`).

    Returns
    -------
    dict
        ``schema``; ``cases`` (each case's fields, ``command``, ``ok``, ``failure``,
        ``reason``, ``cycles``), in the order given; ``failures`` (the failed ones);
        ``by_config`` (``{config: {"programs", "failed"}}``), ``wall_s``.
    """
    begin = time.perf_counter()
    finished = []

    def done(index, result):
        finished.append(index)
        if log and (not _ok(result) or len(finished) % 25 == 0 or len(finished) == len(cases)):
            log(f"[{len(finished)}/{len(cases)}] " + (
                f"seed {cases[index].seed} FAILED" if not _ok(result) else "checked"))

    results = run_tasks(check_case, [(case, str(build_root)) for case in cases],
                        retries=retries, on_done=done)
    rows = []
    for case, result in zip(cases, results):
        if isinstance(result, Failure):
            result = {"ok": False, "failure": result.kind, "reason": result.reason,
                      "cycles": None, "wall_s": None}
        rows.append({**dataclasses.asdict(case), "command": case.command(), **result})
    by_config = {}
    for row in rows:
        counts = by_config.setdefault(row["config"], {"programs": 0, "failed": 0})
        counts["programs"] += 1
        counts["failed"] += not row["ok"]
    return {"schema": SCHEMA, "cases": rows, "failures": [r for r in rows if not r["ok"]],
            "by_config": by_config, "wall_s": time.perf_counter() - begin}


def _ok(result):
    return not isinstance(result, Failure) and result["ok"]


def format_regress(report):
    """Every failure with its seed and command, then the counts per config."""
    lines = []
    for row in report["failures"]:
        first = (row["reason"] or "").strip().splitlines()[:1]
        lines += [f"FAIL seed {row['seed']}: {row['config']} {row['m']}x{row['k']}x{row['n']} "
                  f"{row['epilogue'] or 'plain'}, src_idle {row['src_idle']}, sink_stall "
                  f"{row['sink_stall']}: {row['failure']}: {first[0] if first else ''}",
                  f"  {row['command']}"]
    for config, counts in report["by_config"].items():
        lines.append(f"{config:<8}{counts['programs']:>5} programs, {counts['failed']} failed")
    total = len(report["cases"])
    failed = len(report["failures"])
    cpus = report.get("cluster", {}).get("cpus")
    lines.append(f"{total} programs, {failed} failed, in {report['wall_s']:.1f} s"
                 + (f" on {cpus} CPU(s)" if cpus else "")
                 + ("" if failed else ": all bit-exact"))
    return "\n".join(lines)
