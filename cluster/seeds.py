"""Placement-seed sweeps: one design placed and routed on several nextpnr seeds, as Ray tasks.

::

    bertaccel synth --config 8x8 --lut-mapper abc --placer static --seeds 1,2,3 --workers 3

nextpnr's Fmax moves by several percent from one placement seed to the next (docs/fpga.md), so
a core's timing is a spread over seeds: the lowest, and on how many seeds the clock constraint
is met. Each seed is a task of its own that calls :func:`~bertaccel.fpga.synth.synthesize`,
which keeps the run in its own folder (``...-seed<N>``) and cache, as ``bertaccel synth --seed
N`` would: a seed that is already there costs nothing, and a single run reads a sweep's.
"""

import time

from .tasks import Failure, gather, submit

__all__ = ["synth_seed", "seed_sweep", "format_seed_sweep"]


def synth_seed(cfg, target, seed, options):
    """One seed's report (:func:`~bertaccel.fpga.synth.synthesize`'s, less the per-BEL
    ``utilization``), or ``{"seed", "failure", "reason"}`` if the flow gave none (not routed in
    time, a tool failed); runs as a task."""
    from ..fpga.errors import SynthError
    from ..fpga.synth import synthesize

    try:
        report = synthesize(cfg, target, seed=seed, **options)
    except SynthError as error:
        return {"seed": seed, "failure": type(error).__name__, "reason": str(error)}
    report.pop("utilization", None)
    return report


def seed_sweep(cfg, target, seeds, *, options, retries, log=None):
    """Place and route ``cfg`` once per seed of ``seeds``, as Ray tasks; Ray must be joined
    (:func:`~bertaccel.cluster.connect.connect`).

    Parameters
    ----------
    cfg : AccelConfig
    target : str
        A target of :data:`bertaccel.fpga.targets.TARGETS`.
    seeds : list of int
    options : dict
        The rest of :func:`~bertaccel.fpga.synth.synthesize`'s keywords: ``design``,
        ``freq_mhz``, ``build_root`` (absolute: the workers' own), ``force``, ``timeout_s``,
        ``lut_mapper``, ``placer``, ``router``.
    retries : int
        Runs again of a task whose worker died.
    log : callable, optional
        ``log(text)`` as each seed finishes.

    Returns
    -------
    dict
        ``config``, ``tag``, ``target``, the options, ``runs`` (a report per seed, in the order
        of ``seeds``, or ``{"seed", "failure", "reason"}`` for a seed that gave none: not routed
        in time, a tool failed), ``lowest_mhz`` (None if no seed routed), ``met`` (seeds whose
        Fmax reaches ``freq_mhz``) and ``wall_s``.
    """
    begin = time.perf_counter()
    say = log or (lambda text: None)
    refs = submit(synth_seed, [(cfg, target, seed, options) for seed in seeds], retries=retries)
    finished = []

    def row(seed, result):
        if isinstance(result, Failure):         # the worker died on every try
            return {"seed": seed, "failure": result.kind, "reason": result.reason}
        return result

    def done(index, result):
        finished.append(index)
        say(f"[{len(finished)}/{len(seeds)}] seed {seeds[index]}: "
            f"{_outcome(row(seeds[index], result))}")

    results = gather(refs, retries=retries, on_done=done)
    runs = [row(seed, r) for seed, r in zip(seeds, results)]
    fmax = [r["fmax_mhz"] for r in runs if "failure" not in r]
    settings = {k: v for k, v in options.items() if k not in ("build_root", "force")}
    return {"config": cfg.label, "tag": cfg.tag, "target": target, **settings,
            "seeds": list(seeds), "runs": runs, "lowest_mhz": min(fmax, default=None),
            "met": sum(f >= options["freq_mhz"] for f in fmax),
            "wall_s": time.perf_counter() - begin}


def format_seed_sweep(report):
    """The sweep as text: the seed table (resources, each seed's Fmax, the lowest), a line per
    seed that did not route, and how many seeds met the constraint."""
    from ..fpga.tables import format_seed_table

    routed = [r for r in report["runs"] if "failure" not in r]
    lines = [format_seed_table(routed)] if routed else []
    lines += [f"seed {r['seed']}: {_outcome(r)}" for r in report["runs"] if "failure" in r]
    lowest = report["lowest_mhz"]
    lines.append(f"{report['config']} {report['design']} on {report['target']} "
                 f"({report['lut_mapper']} LUT mapper, {report['placer']} placer, "
                 f"{report['router']}): "
                 f"{report['met']} of {len(report['seeds'])} seeds meet "
                 f"{report['freq_mhz']:g} MHz; lowest Fmax "
                 + ("-" if lowest is None else f"{lowest:.1f} MHz")
                 + f"; {report['wall_s']:.0f} s")
    return "\n".join(lines)


def _outcome(run):
    """A run's Fmax, or its failure as a line (:attr:`~.tasks.Failure.line`)."""
    if "failure" in run:
        return Failure(run["failure"], run["reason"]).line
    return f"{run['fmax_mhz']:.1f} MHz"
