"""Mutation testing of the core on the RTL, as Ray tasks: how many mutants the programs kill.

::

    plan = plan_mutants(PRESETS["2x2"], count=300, seed=1)   # yosys mutate; one design
    with connect(workers=2):
        report = mutation_run(plan, build_root="build/sim")
    print(format_mutation(report))

:func:`plan_mutants` samples the mutants of the core of the simulation harness (every module
below ``bertaccel_harness.core``, not the harness's own stream engines) with yosys ``mutate``
and applies them all into one harness whose input ``mutsel`` picks the active one
(:mod:`bertaccel.sim.mutate`): one Verilator build for every mutant.

:func:`mutation_run` first runs the unmutated design (``mutsel`` 0) on the fixed selection of
programs (:func:`selection`): every output must equal the software device's, bit for bit, and a
free-running run must take exactly the cycle model's cycles; the stalled runs' cycles are then
the reference. Then each mutant is a Ray task (:func:`check_mutant`) that runs the selection on
the RTL device, free-running and with idle source cycles and sink backpressure, until a run
differs: its outputs (GEMMs), its cycle count, its beat counts, what the core waits for at
the end (``o_wait``), its error flag, or an illegal program's fault, index and cycles. A mutant
is

``killed``
    a run differed;
``timed_out``
    a run was not done within twice its reference cycles (plus 1,000): it hung;
``survived``
    every run was the same as the unmutated design's.

A task's worker keeps its two simulators (free and stalled) for the next mutant; the harness
is reset when ``mutsel`` changes, so no mutant inherits another's state (the hand-written
programs read memory they never write, so only their cycles, beat counts and error flag are
compared; the GEMMs write everything they read, so their outputs are compared too).
"""

import dataclasses
import random
import time

import torch

from .tasks import DEFAULT_RETRIES, Failure, run_tasks

__all__ = ["SCHEMA", "SCOPE", "STALLS", "GEMMS", "Case", "MutantPlan", "selection", "edge_cases",
           "step_cases",
           "hand_programs", "plan_mutants", "golden_run", "check_mutant", "mutation_run",
           "prove_mutant", "PROVED",
           "mutant_id", "summarize", "format_mutation"]

SCHEMA = "bertaccel-mutation/1"
#: The modules that are mutated: the core and everything below it.
SCOPE = "bertaccel_harness.core"
#: ``{name: (seed, src_idle, sink_stall)}`` of the devices every mutant runs on (in 256ths):
#: free-running; about 30 % idle source cycles and 40 % sink backpressure (the suite's
#: stalled runs); a sink that is mostly stalled, so every queue before it fills; sources that
#: are mostly idle, so every queue after them runs dry.
STALLS = {"free": (1, 0, 0), "stalled": (2, 77, 102), "sink_bound": (3, 0, 224),
          "source_bound": (4, 192, 0)}
#: The epilogues of the GEMMs (None: the raw accumulator).
EPILOGUES = (None, "requant", "gelu", "softmax", "layernorm")
#: ``(m, k, n, epilogue, operands)``: the suite's GEMM with each epilogue, one over many
#: tiles, and -128 x -128 ones whose sums reach the accumulator's high bits; then
#: :data:`RANDOM_GEMMS` random shapes for each epilogue (:func:`selection`).
GEMMS = [(5, 6, 4, None, "random"), (3, 4, 6, "requant", "random"), (4, 2, 4, "gelu", "random"),
         (3, 6, 5, "softmax", "random"), (4, 4, 6, "layernorm", "random"),
         (9, 13, 7, None, "random"), (2, 600, 3, None, "min")] + [
         (3, 40, 5, op, "min") for op in EPILOGUES[1:]]
#: Random GEMMs for each epilogue, and the largest m, k and n they are drawn from.
RANDOM_GEMMS = 4
RANDOM_LIMITS = (17, 70, 17)
#: Random GEMMs for each epilogue whose parameters reach the epilogue's range limits
#: (``operands="edge"`` of :func:`bertaccel.sw.epilogue.random_gemm`).
EDGE_GEMMS = 8
#: Random GEMMs for each epilogue whose rows are nearly constant (``operands="flat"``: the
#: smallest LayerNorm variances, uniform softmax rows).
FLAT_GEMMS = 2
#: Random legal programs, every field over its legal range (outputs compared)
#: (:func:`bertaccel.sw.random_programs.random_program`).
RANDOM_PROGRAMS = 48
#: Illegal programs, aimed at every rule of the checker in turn
#: (:func:`bertaccel.sw.illegal_programs.illegal_cases`).
ILLEGAL_PROGRAMS = 24


@dataclasses.dataclass(frozen=True)
class Case:
    """A program of the selection, its inputs, and whether its outputs are compared; an
    illegal program has its packed data stream in ``beats`` instead, and its fault and the
    index of the instruction are compared."""

    name: str
    program: object
    inputs: dict
    exact: bool
    beats: object = None


@dataclasses.dataclass(frozen=True)
class MutantPlan:
    """The mutants of one config and the harness that holds them all.

    Members
    -------
    cfg : AccelConfig
    rtlil : str
        The design that was mutated (:func:`bertaccel.sim.mutate.design_rtlil`).
    mutants : list of bertaccel.sim.mutate.Mutant
    verilog : str
        The harness with every mutant, ``mutsel`` selecting one.
    key : str
        Names its build folder (:func:`bertaccel.sim.mutate.mutants_key`).
    seed, min_per_module : int
        How they were sampled.
    seconds : float
        Time to convert the design and run yosys.
    """

    cfg: object
    rtlil: str
    mutants: list
    verilog: str
    key: str
    seed: int
    min_per_module: int
    seconds: float


# -- the selection --------------------------------------------------------------------------------

#: The programs of :func:`bertaccel.sw.hand_programs.hand_programs` every mutant runs.
HAND_PROGRAMS = ("loads", "matmuls_short", "matmuls_long", "matmuls_mixed", "store_set_store",
                 "chain_x3", "dispatch_blocked", "serial", "softmax_5x2", "layernorm_2x9",
                 "barrier", "tokens_full", "exec_to_load_full", "exec_to_store_full",
                 "store_to_exec_full")


def hand_programs(cfg):
    """``{name: instructions}``: the :data:`HAND_PROGRAMS`, short programs whose timing turns
    on one latency or limit or another (queues, tokens up to their limit of 255, the preload,
    the drain, two-pass stores)."""
    from ..sw.hand_programs import hand_programs as every

    programs = every(cfg)
    return {name: programs[name] for name in HAND_PROGRAMS}


def _gemm_case(cfg, m, k, n, op, operands, gen):
    from ..sw import compile_gemm
    from ..sw import epilogue as ep_mod

    inputs, epilogue = ep_mod.random_gemm(m, k, n, op, generator=gen, operands=operands)
    name = f"gemm_{m}x{k}x{n}_{op or 'raw'}_{operands}"
    return Case(name, compile_gemm(cfg, m, k, n, epilogue=epilogue), inputs, True)


def selection(cfg, seed=5):
    """The fixed programs every mutant runs, in order: the :data:`GEMMS`, the random ones, the
    edge-case ones and the flat ones (outputs compared), the :func:`hand_programs` (cycles
    and beat counts compared), :data:`RANDOM_PROGRAMS` random legal ones (outputs compared),
    :data:`ILLEGAL_PROGRAMS` illegal ones (fault, index and cycles compared), then the
    :func:`edge_cases` and the :func:`step_cases`."""
    from ..sw.hand_programs import raw_program
    from ..sw.illegal_programs import illegal_cases
    from ..sw.random_programs import random_program

    gen = torch.Generator().manual_seed(seed)
    rng = random.Random(seed)
    shapes = list(GEMMS)
    for op in EPILOGUES:
        shapes += [(*(rng.randint(1, top) for top in RANDOM_LIMITS), op, "random")
                   for _ in range(RANDOM_GEMMS)]
    for op in EPILOGUES[1:]:
        shapes += [(*(rng.randint(1, top) for top in RANDOM_LIMITS), op, "edge")
                   for _ in range(EDGE_GEMMS)]
    for op in EPILOGUES[1:]:
        shapes += [(*(rng.randint(1, top) for top in RANDOM_LIMITS), op, "flat")
                   for _ in range(FLAT_GEMMS)]
    cases = [_gemm_case(cfg, *gemm, gen) for gemm in shapes]
    for name, instrs in hand_programs(cfg).items():
        program = raw_program(cfg, instrs)
        size = max(program.n_data_beats, 1) * cfg.lanes
        x = torch.randint(-128, 128, (size,), generator=gen, dtype=torch.int8)
        cases.append(Case(name, program, {"x": x}, False))
    for number in range(RANDOM_PROGRAMS):
        program = random_program(cfg, 1000 * seed + number)
        x = torch.randint(-128, 128, program.inputs["x"], generator=gen, dtype=torch.int8)
        cases.append(Case(f"random_program_{number}", program, {"x": x}, True))
    illegal, _ = illegal_cases(cfg, ILLEGAL_PROGRAMS, seed)
    cases += [Case(f"illegal_{number}_{fault.name.lower()}", program, {}, False, beats)
              for number, (fault, program, beats) in enumerate(illegal)]
    return cases + edge_cases(cfg, gen) + step_cases(cfg, gen)


#: Softmax scales and LayerNorm headrooms of :func:`step_cases`.
STEP_SCALES = (1 / 32, 1 / 8, 1 / 2, 2)
STEP_HEADROOMS = (1, 2, 4, 8, 32, 128)


def step_cases(cfg, gen, *, m=8, n=24):
    """GEMMs whose product is ``b`` itself (``a`` the identity), outputs compared: softmax
    rows of ``b``'s entries times each of :data:`STEP_SCALES`, so that logits lie every
    distance below the row's largest, up to and past the exponent table's cut-off; and
    LayerNorm rows of ``b`` (no residual) in an int16 format with each of
    :data:`STEP_HEADROOMS` times the room their largest value needs, so that the variance
    term D's top bit sweeps over a dozen places."""
    from ..sw import compile_gemm
    from ..sw.epilogue import LayerNorm, Softmax

    a = torch.eye(m, dtype=torch.int8)
    cases = []
    for scale in STEP_SCALES:
        b = torch.randint(-128, 128, (m, n), generator=gen, dtype=torch.int8)
        epilogue = Softmax(in_scale=scale, mask=torch.zeros(n, dtype=torch.bool))
        cases.append(Case(f"steps_softmax_{scale:g}", compile_gemm(cfg, m, m, n,
                                                                   epilogue=epilogue),
                          {"a": a, "b": b}, True))
    in_scale = 1 / 8
    for headroom in STEP_HEADROOMS:
        b = torch.randint(-128, 128, (m, n), generator=gen, dtype=torch.int8)
        gamma = 0.5 + torch.rand(n, generator=gen, dtype=torch.float64)
        beta = 0.2 * torch.randn(n, generator=gen, dtype=torch.float64)
        epilogue = LayerNorm(in_scale=in_scale, gamma=gamma, beta=beta, out_scale=5 / 127,
                             eps=1e-12, residual_scale=1 / 74, absmax=128 * in_scale * headroom)
        inputs = {"a": a, "b": b, "r": torch.zeros(m, n, dtype=torch.int8)}
        cases.append(Case(f"steps_layernorm_{headroom}", compile_gemm(cfg, m, m, n,
                                                                      epilogue=epilogue),
                          inputs, True))
    return cases


def edge_cases(cfg, gen):
    """The programs of :mod:`bertaccel.sw.edge_programs`: the exact ones with random inputs
    (outputs compared), the timed ones (cycles and beats compared), the checker's (fault and
    index compared, run as the illegal programs are)."""
    from ..sw import edge_programs as edges
    from ..sw.hand_programs import raw_program

    cases = []
    for name, instrs in edges.exact_programs(cfg).items():
        program = raw_program(cfg, instrs)
        x = torch.randint(-128, 128, program.inputs["x"], generator=gen, dtype=torch.int8)
        cases.append(Case(f"edge_{name}", program, {"x": x}, True))
    for name, instrs in edges.timed_programs(cfg).items():
        program = raw_program(cfg, instrs)
        x = torch.zeros(program.inputs["x"], dtype=torch.int8)
        cases.append(Case(f"edge_{name}", program, {"x": x}, False))
    for name, instrs in edges.checker_programs(cfg).items():
        program = raw_program(cfg, instrs)
        beats = program.pack(x=torch.zeros(program.inputs["x"], dtype=torch.int8))
        cases.append(Case(f"checker_{name}", program, {}, False, beats))
    return cases


# -- the mutants ----------------------------------------------------------------------------------

def plan_mutants(cfg, *, count, seed=1, min_per_module=3):
    """Sample about ``count`` mutants of the core of ``cfg``'s harness (at least
    ``min_per_module`` in each module) and build the Verilog holding them all."""
    from ..hw.filestream import VERILOG
    from ..hw.harness import SimHarness
    from ..sim import mutate

    begin = time.perf_counter()
    rtlil = mutate.design_rtlil(SimHarness(cfg), name="bertaccel_harness")
    mutants = mutate.list_mutants(rtlil, count=count, seed=seed, scope=SCOPE,
                                  min_per_module=min_per_module, extra=VERILOG)
    verilog = mutate.mutant_verilog(rtlil, mutants, extra=VERILOG)
    return MutantPlan(cfg, rtlil, mutants, verilog, mutate.mutants_key(rtlil, mutants), seed,
                      min_per_module, time.perf_counter() - begin)


def mutant_id(mutant):
    """A mutant's name that holds while the generators do not change: module, cell, port and
    bit, mode (and the other bit of a ``cnot``)."""
    other = "" if mutant.ctrlbit is None else f"^{mutant.ctrlbit}"
    return (f"{mutant.module.removeprefix(SCOPE + '.')}:{mutant.cell}.{mutant.port}"
            f"[{mutant.portbit}]:{mutant.mode}{other}")


# -- running --------------------------------------------------------------------------------------

#: This process's simulators: ``{(build_root, key, stall): RtlDevice}`` (a Ray worker keeps
#: them from one mutant to the next).
_DEVICES = {}


def _device(spec, stall):
    from ..sw.devices.rtl import RtlDevice

    where = (spec["build_root"], spec["key"], stall)
    if where not in _DEVICES:
        seed, src_idle, sink_stall = STALLS[stall]
        text = spec["verilog"]
        _DEVICES[where] = RtlDevice(spec["cfg"], build_root=spec["build_root"], seed=seed,
                                    src_idle=src_idle, sink_stall=sink_stall,
                                    verilog=lambda: text, verilog_key=spec["key"])
    return _DEVICES[where]


def _spec(plan, build_root):
    return {"cfg": plan.cfg, "build_root": str(build_root), "key": plan.key,
            "verilog": plan.verilog}


def _outcome(device, case, index, ref):
    """None if ``case`` ran on mutant ``index`` as on the design, else ``(status, reason)``."""
    from ..sim.mutate import CTRL
    from ..sw.devices.base import DeviceError

    device.ports = {CTRL: index}
    device.max_cycles = 2 * ref["cycles"] + 1000
    device.run_timeout = 120.0
    if case.beats is not None:
        return _illegal_outcome(device, case, ref)
    try:
        result = device.run(case.program, **case.inputs)
    except DeviceError as error:
        message = str(error)
        # RtlDevice's message for a run that was not done within max_cycles.
        status = "timed_out" if "not done after" in message else "killed"
        return status, message.splitlines()[0]
    if case.exact:
        for name, want in ref["outputs"].items():
            got = result.outputs[name]
            if not torch.equal(got, want):
                bad = int((got != want).sum())
                return "killed", f"output {name}: {bad} of {want.numel()} values differ"
    if result.cycles != ref["cycles"]:
        return "killed", f"{result.cycles} cycles, not {ref['cycles']}"
    if result.stats["wait"] != ref["wait"]:
        return "killed", f"waits for {result.stats['wait']:#x} at the end, not {ref['wait']:#x}"
    return None


def _fault(device, case, cycles=None):
    """``(fault, index)`` of the illegal ``case`` on ``device``, or None if it ran to the end;
    a run past its cycles raises DeviceError. ``cycles`` (a list) gets the run's cycles,
    where the device counts them."""
    from ..sw.devices.base import IllegalProgram

    try:
        _, stats = device.execute(case.program, case.beats)
    except IllegalProgram as error:
        if cycles is not None:
            cycles.append(error.cycles)
        return int(error.fault), error.index
    if cycles is not None:
        cycles.append(stats.get("cycles"))
    return None


def _illegal_outcome(device, case, ref):
    """:func:`_outcome` of an illegal program: the same fault at the same instruction, after
    the same cycles."""
    from ..sw.devices.base import DeviceError

    cycles = []
    try:
        got = _fault(device, case, cycles)
    except DeviceError as error:
        status = "timed_out" if "not done after" in str(error) else "killed"
        return status, str(error).splitlines()[0]
    if got != ref["fault"]:
        return "killed", f"fault {got}, not {ref['fault']}"
    if cycles != [ref["cycles"]]:
        return "killed", f"the run ended after {cycles[0]} cycles, not {ref['cycles']}"
    return None


def check_mutant(index, spec, cases, refs):
    """Run the selection on mutant ``index`` until a run differs from ``refs`` (from
    :func:`golden_run`): ``{"index", "status", "by", "reason", "runs", "wall_s"}``."""
    begin = time.perf_counter()
    runs = 0
    for stall in STALLS:
        device = _device(spec, stall)
        for case in cases:
            runs += 1
            found = _outcome(device, case, index, refs[stall][case.name])
            if found is not None:
                return {"index": index, "status": found[0], "by": f"{case.name}/{stall}",
                        "reason": found[1], "runs": runs,
                        "wall_s": time.perf_counter() - begin}
    return {"index": index, "status": "survived", "by": None, "reason": None, "runs": runs,
            "wall_s": time.perf_counter() - begin}


def golden_run(plan, cases, *, build_root):
    """Run the selection on the design with no mutant active (building the simulator); check
    it against the software device and the cycle model; return the references
    ``{stall: {case: {"outputs", "cycles"}}}``.

    Raises
    ------
    AssertionError
        The unmutated design is not bit-exact or not cycle-exact: the flow is broken.
    """
    from ..sim.mutate import CTRL
    from ..sw import SoftwareDevice
    from ..sw.cycles import CycleModel

    cfg = plan.cfg
    spec = _spec(plan, build_root)
    model = CycleModel(cfg)
    refs = {}
    for stall, (_, src_idle, sink_stall) in STALLS.items():
        device = _device(spec, stall)
        device.ports = {CTRL: 0}
        device.max_cycles = device.run_timeout = None
        refs[stall] = {}
        for case in cases:
            if case.beats is not None:
                ran = []
                fault = _fault(device, case, ran)
                soft = _fault(SoftwareDevice(cfg), case)
                assert fault == soft, \
                    f"the unmutated design faults {fault} on {case.name}, the software {soft}"
                # The units finish what they took before the fault (a STORE the checker's
                # late rules fault may have started): the run's cycles are its reference.
                refs[stall][case.name] = {"fault": fault, "cycles": ran[0]}
                continue
            result = device.run(case.program, **case.inputs)
            want = model.run(case.program).cycles
            if case.exact:
                soft = SoftwareDevice(cfg).run(case.program, **case.inputs)
                for name, value in soft.outputs.items():
                    assert torch.equal(result.outputs[name], value), \
                        f"the unmutated design's {name} of {case.name} ({stall}) differs"
            stalled = src_idle or sink_stall
            assert (result.cycles >= want) if stalled else (result.cycles == want), \
                f"the unmutated design took {result.cycles} cycles on {case.name} ({stall}), " \
                f"the cycle model {want}"
            refs[stall][case.name] = {"outputs": result.outputs, "cycles": result.cycles,
                                      "wait": result.stats["wait"]}
        # The workers start their own; this process's simulator is done.
        _DEVICES.pop((spec["build_root"], spec["key"], stall)).close()
    return refs


def mutation_run(plan, *, build_root, cases=None, indices=None, equivalent=None, gaps=None,
                 retries=DEFAULT_RETRIES, log=None):
    """Check every mutant of ``plan`` (or those of ``indices``) as a Ray task; Ray must be
    joined (:func:`~bertaccel.cluster.connect.connect`). Returns the report of
    :func:`summarize` (``equivalent`` goes there)."""
    import ray

    begin = time.perf_counter()
    cases = selection(plan.cfg) if cases is None else cases
    refs = golden_run(plan, cases, build_root=build_root)
    golden_s = time.perf_counter() - begin
    by_index = {m.index: m for m in plan.mutants}
    indices = list(by_index) if indices is None else list(indices)
    shared = [ray.put(_spec(plan, build_root)), ray.put(cases), ray.put(refs)]
    finished = []

    def done(position, result):
        finished.append(position)
        status = getattr(result, "kind", None) or result["status"]
        if log and (status == "survived" or len(finished) % 25 == 0
                    or len(finished) == len(indices)):
            log(f"[{len(finished)}/{len(indices)}] mutant {indices[position]}: {status}")

    results = run_tasks(check_mutant, [(index, *shared) for index in indices],
                        retries=retries, on_done=done)
    rows = []
    for index, result in zip(indices, results):
        if isinstance(result, Failure):
            result = {"index": index, "status": "error", "by": None, "reason": result.line,
                      "runs": 0, "wall_s": None}
        rows.append({**by_index[index].to_dict(), "id": mutant_id(by_index[index]),
                     "describe": by_index[index].describe(), "proved": None, **result})
    survivors = [row for row in rows if row["status"] == "survived"]
    if log:
        log(f"proving {len(survivors)} survivors equivalent (yosys equiv_induct)")
    design = ray.put(plan.rtlil)
    proofs = run_tasks(prove_mutant, [(design, by_index[row["index"]]) for row in survivors],
                       retries=retries)
    for row, proof in zip(survivors, proofs):
        row["proved"] = proof if isinstance(proof, bool) else None
    return summarize(plan, rows, cases, wall_s=time.perf_counter() - begin,
                     golden_s=golden_s, equivalent=equivalent, gaps=gaps)


def prove_mutant(rtlil, mutant):
    """:func:`bertaccel.sim.mutate.prove_equivalent` of ``mutant`` in the harness ``rtlil``."""
    from ..hw.filestream import VERILOG
    from ..sim.mutate import prove_equivalent

    return prove_equivalent(rtlil, mutant, extra=VERILOG)


# -- the report -----------------------------------------------------------------------------------

#: Why a survivor that yosys proved harmless is equivalent.
PROVED = ("proved equivalent by yosys (equiv_make, equiv_simple, equiv_induct on its module, "
          "every input free): the change never reaches an output or a live register")


def summarize(plan, rows, cases, *, wall_s, golden_s, equivalent=None, gaps=None):
    """The report: every mutant's row, the counts, and the kill rate.

    A survivor is equivalent when yosys proved it (:data:`PROVED`, counted in
    ``proved_equivalent``) or ``equivalent`` maps its :func:`mutant_id` to the reason no program
    can tell it apart where its module sits (``context_equivalent``); equivalent mutants leave
    the kill rate's denominator. Every other survivor is a test gap, described by ``gaps(row)``
    (the kind of program that would kill it). The kill rate is (killed + timed out) / (mutants -
    equivalent): a hang is an observable difference.
    """
    equivalent = dict(equivalent or {})
    for row in rows:
        row["equivalent"] = None
        row["gap"] = None
        if row["status"] != "survived":
            continue
        row["equivalent"] = PROVED if row.get("proved") else equivalent.get(row["id"])
        if row["equivalent"] is None:
            row["gap"] = gaps(row) if gaps else "not examined"
    counts = {status: sum(row["status"] == status for row in rows)
              for status in ("killed", "timed_out", "survived", "error")}
    n_equivalent = sum(row["equivalent"] is not None for row in rows)
    detected = counts["killed"] + counts["timed_out"]
    relevant = len(rows) - n_equivalent
    by_module = {}
    for row in rows:
        module = row["module"].removeprefix(SCOPE + ".") if row["module"] != SCOPE else "core"
        entry = by_module.setdefault(module, {"mutants": 0, "detected": 0, "survived": 0})
        entry["mutants"] += 1
        entry["detected"] += row["status"] in ("killed", "timed_out")
        entry["survived"] += row["status"] == "survived"
    return {
        "schema": SCHEMA, "config": plan.cfg.name, "scope": SCOPE, "seed": plan.seed,
        "min_per_module": plan.min_per_module, "key": plan.key,
        "selection": [{"name": c.name, "exact": c.exact,
                       "instructions": len(c.program.instrs)} for c in cases],
        "stalls": {name: {"seed": s, "src_idle": i, "sink_stall": k}
                   for name, (s, i, k) in STALLS.items()},
        "mutants": len(rows), **counts, "equivalent": n_equivalent,
        "proved_equivalent": sum(bool(row.get("proved")) for row in rows),
        "context_equivalent": sum(row["equivalent"] is not None and not row.get("proved")
                                  for row in rows),
        "test_gaps": counts["survived"] - n_equivalent,
        "kill_rate": detected / relevant if relevant else None,
        "survivors": [row for row in rows if row["status"] == "survived"],
        "by_module": by_module, "rows": rows,
        "plan_s": plan.seconds, "golden_s": golden_s, "wall_s": wall_s,
    }


def format_mutation(report):
    """Every survivor (equivalent or not, with the reason), the counts per module, the total."""
    lines = []
    for row in report["survivors"]:
        verdict = (f"equivalent: {row['equivalent']}" if row["equivalent"]
                   else f"test gap: {row['gap']}")
        lines += [f"survived {row['index']:>4} {row['describe']}", f"     {verdict}"]
    for module, entry in sorted(report["by_module"].items()):
        lines.append(f"{module:<32}{entry['mutants']:>4} mutants {entry['detected']:>4} "
                     f"detected {entry['survived']:>3} survived")
    rate = report["kill_rate"]
    lines.append(f"{report['mutants']} mutants of {report['config']}: {report['killed']} killed, "
                 f"{report['timed_out']} timed out, {report['survived']} survived "
                 f"({report['proved_equivalent']} proved equivalent, "
                 f"{report['context_equivalent']} equivalent in context, "
                 f"{report['test_gaps']} test gaps), {report['error']} errors; kill rate "
                 + (f"{100 * rate:.1f} %" if rate is not None else "n/a")
                 + f" of non-equivalent mutants, in {report['wall_s']:.0f} s")
    return "\n".join(lines)

