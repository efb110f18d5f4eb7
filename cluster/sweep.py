"""Design-space sweeps on Ray: cycles, latency and utilisation of BERT workloads over a grid of
accelerator configs, and with ``synth`` the resources and Fmax of each config's core.

::

    configs, invalid = config_grid(["4x4", "8x8"], {})
    with connect():
        report = sweep(configs, workload_grid(["minilm"], [32, 128], [1]))
    report["points"][0]["cycles"]

Each model is compiled (calibrated and quantised) once, in a task, for
:data:`CALIBRATION_CONFIG`; its program reaches every point's task through Ray's object store,
and each point retargets it to its config (quantisation does not depend on the config:
:func:`bertaccel.analysis.perf.retarget`) and times it with the cycle model's
:class:`~bertaccel.sw.bert.timing.StageTimer`, which equals the RTL cycle for cycle. With
``synth``, one more task per config synthesises, places and routes its core
(:func:`bertaccel.fpga.synth.synthesize`, cached in ``build/synth/<tag>-<target>``, so each
config has its own build folder), and its points get LUT4, FF, DSP, block RAM, Fmax and the
latency at Fmax.

A point that fails is a row with the reason: a config that cannot hold one tile of the model
(``BertError``), a sequence longer than the model or the accumulator takes (``BertError``), a
core that does not fit the part (``DoesNotFit``), a route not closed in time (``NotRouted``), a
worker that died on every try.
"""

import math
import time
from pathlib import Path

from ..hw.config import preset
from .grid import GridError, config_fields
from .tasks import DEFAULT_RETRIES, Failure, gather, submit

__all__ = ["CALIBRATION_CONFIG", "SCHEMA", "check_model", "compile_base", "time_point",
           "synth_config", "sweep", "point_row", "invalid_row"]

#: The config a model is compiled for before it is retargeted to each point's.
CALIBRATION_CONFIG = preset("8x8")
SCHEMA = "bertaccel-sweep/1"
#: What a point's row takes from a synthesis report (the report's keys).
_SYNTH_KEYS = {"lut4": "lut4", "ff": "ff", "dsp": "mult18x18d", "bram": "dp16kd",
               "fmax_mhz": "fmax_mhz", "synth_wall_s": "wall_s", "synth_cached": "cached"}


def check_model(model):
    """Refuse a model that is not ``minilm``, a named shape or a model folder, before any
    work; return it."""
    from ..analysis.perf import SHAPES
    if model == "minilm" or model in SHAPES or Path(model).is_dir():
        return model
    raise GridError(f"--model must be minilm, {', '.join(s for s in SHAPES if s != 'minilm')} "
                    f"(random weights) or a BERT model folder, not {model!r}")


# -- the tasks ----------------------------------------------------------------------------------

def compile_base(model, seed=0):
    """``model`` compiled for :data:`CALIBRATION_CONFIG`: ``minilm`` (its real weights) or a
    model folder through the compile cache (:func:`~bertaccel.sw.bert.encoder.load_compiled`),
    a named shape (``bert-base``) with random weights from ``seed``."""
    from ..analysis.perf import SHAPES, compile_shape
    from ..sw.bert.cache import CompileCache
    from ..sw.bert.encoder import load_compiled

    _quiet_transformers()
    if model != "minilm" and model in SHAPES:
        return compile_shape(model, CALIBRATION_CONFIG, seed=seed)
    bert, _, _ = load_compiled(model, CALIBRATION_CONFIG, cache=CompileCache().check())
    return bert


def time_point(bert, cfg, workload):
    """Cycles of ``workload`` on ``cfg`` from the cycle model: a dict, or a :class:`Failure`
    when ``cfg`` cannot run the model (``BertError``)."""
    from ..analysis.perf import retarget
    from ..sw.bert import BertError, model_macs
    from ..sw.bert.timing import StageTimer

    begin = time.perf_counter()
    try:
        bert = retarget(bert, cfg)
        longest = min(bert.spec.max_positions, bert.max_seq)
        if workload.seq > longest:
            raise BertError(f"seq {workload.seq} is longer than {bert.name} on {cfg.name} "
                            f"takes ({longest} tokens: the model's positions and whole "
                            f"softmax rows in the accumulator)")
        cycles, stages = StageTimer(bert).model(workload.batch, workload.seq)
    except BertError as error:
        return Failure("BertError", str(error))
    ideal = math.ceil(model_macs(bert.spec, workload.seq, workload.batch) / cfg.macs_per_cycle)
    return {"cycles": cycles, "ideal_cycles": ideal, "utilization": ideal / cycles,
            "latency_us": cycles / cfg.clock_mhz, "stages": stages,
            "time_wall_s": time.perf_counter() - begin}


def synth_config(cfg, target, build_root, timeout_s=None, seed=1):
    """Synthesise, place and route ``cfg``'s core for ``target`` in ``build_root``: the
    report's resources and Fmax, or a :class:`Failure` (``DoesNotFit``, ``NotRouted``, another
    ``SynthError``)."""
    from ..fpga.errors import SynthError
    from ..fpga.synth import synthesize

    try:
        report = synthesize(cfg, target, seed=seed, build_root=build_root, timeout_s=timeout_s)
    except SynthError as error:   # NotRouted does not pickle (keyword-only arguments)
        return Failure(type(error).__name__, str(error))
    return {key: report[name] for key, name in _SYNTH_KEYS.items()}


def _quiet_transformers():
    import os
    os.environ["HF_HUB_OFFLINE"] = "1"
    from transformers.utils import logging as hf_logging
    hf_logging.disable_progress_bar()


# -- the sweep ----------------------------------------------------------------------------------

def sweep(configs, workloads, *, invalid=(), synth=None, seed=0, retries=DEFAULT_RETRIES,
          log=None):
    """Time every workload on every config, as Ray tasks; Ray must be joined
    (:func:`~bertaccel.cluster.connect.connect`).

    Parameters
    ----------
    configs : list of AccelConfig
    workloads : list of Workload
    invalid : list of (dict, str)
        Grid combinations that make no config (from
        :func:`~bertaccel.cluster.grid.config_grid`): rows with their reason.
    synth : dict, optional
        Synthesise each config: ``target`` (``"ecp5-85k"``), ``build_root``, ``timeout_s``
        and ``seed`` (nextpnr's), as :func:`bertaccel.fpga.synth.synthesize` takes them.
    seed : int
        Seeds the random weights of the named shapes.
    retries : int
        Runs again of a task whose worker died.
    log : callable, optional
        ``log(text)`` as each task finishes.

    Returns
    -------
    dict
        ``schema``, ``points`` (one row per config and workload, grid order: see
        :func:`point_row`), ``synth`` (the settings, or None), ``wall_s``, and ``task_s``:
        the tasks' own wall times added up (a synthesis that was cached counts nothing), so
        ``task_s / wall_s`` is how many ran side by side on average.
    """
    import ray

    begin = time.perf_counter()
    say = log or (lambda text: None)
    synth_refs = []
    if synth is not None:
        synth_refs = submit(synth_config, [(cfg, synth["target"], synth["build_root"],
                                            synth.get("timeout_s"), synth.get("seed", 1))
                                           for cfg in configs], retries=retries)
    compile_remote = ray.remote(compile_base).options(num_cpus=1, max_retries=retries)
    bases = {model: compile_remote.remote(model, seed)
             for model in dict.fromkeys(w.model for w in workloads)}
    pairs = [(cfg, workload) for cfg in configs for workload in workloads]
    time_refs = submit(time_point, [(bases[w.model], cfg, w) for cfg, w in pairs],
                       retries=retries)
    labels = [f"{config_fields(cfg)['label']} {w.model} seq {w.seq} batch {w.batch}"
              for cfg, w in pairs] + [f"{config_fields(cfg)['label']} synthesis on "
                                      f"{synth['target']}" for cfg in configs if synth]
    finished = []

    def done(index, result):
        finished.append(index)
        what = result.line if isinstance(result, Failure) else (
            f"{result['cycles']:,} cycles" if "cycles" in result else
            f"Fmax {result['fmax_mhz']} MHz, {result['dsp']} DSP, {result['lut4']} LUT4")
        say(f"[{len(finished)}/{len(labels)}] {labels[index]}: {what}")

    results = gather(time_refs + synth_refs, retries=retries, on_done=done)
    timings, synths = results[:len(pairs)], dict(zip((c.tag for c in configs),
                                                     results[len(pairs):]))
    points = [point_row(cfg, w, timing, synths.get(cfg.tag))
              for (cfg, w), timing in zip(pairs, timings)]
    points += [invalid_row(fields, message, w) for fields, message in invalid for w in workloads]
    task_s = sum(r["time_wall_s"] for r in timings if not isinstance(r, Failure)) + sum(
        r["synth_wall_s"] for r in synths.values()
        if not isinstance(r, Failure) and not r["synth_cached"])
    return {"schema": SCHEMA, "points": points,
            "synth": None if synth is None else dict(synth),
            "wall_s": time.perf_counter() - begin, "task_s": task_s}


def point_row(cfg, workload, timing, synth=None):
    """One point's row: ``config`` (:func:`~bertaccel.cluster.grid.config_fields`),
    ``workload``, ``status`` (``"ok"`` or ``"failed"``), ``failure`` (the exception's class)
    and ``reason``; ``cycles``, ``ideal_cycles``, ``utilization``, ``clock_mhz``,
    ``latency_us`` (at ``clock_mhz``), ``stages`` (cycles per stage) and ``array_dsp`` (the
    PE array's MULT18X18D, one per MAC but for the ``lut_pes``); with synthesis ``lut4``,
    ``ff``, ``dsp``, ``bram`` (DP16KD), ``fmax_mhz`` and ``latency_us_fmax``."""
    row = {"config": config_fields(cfg), "workload": workload.to_dict(), "status": "ok",
           "failure": None, "reason": None, "cycles": None, "ideal_cycles": None,
           "utilization": None, "clock_mhz": cfg.clock_mhz, "latency_us": None,
           "stages": None, "array_dsp": cfg.macs_per_cycle - cfg.lut_pes,
           **dict.fromkeys(_SYNTH_KEYS), "latency_us_fmax": None}
    failures = []
    if isinstance(timing, Failure):
        failures.append(timing)
    else:
        row.update({key: timing[key] for key in ("cycles", "ideal_cycles", "utilization",
                                                 "latency_us", "stages")})
    if isinstance(synth, Failure):
        failures.append(synth)
    elif synth is not None:
        row.update(synth)
        if row["cycles"] is not None and synth["fmax_mhz"]:
            row["latency_us_fmax"] = row["cycles"] / synth["fmax_mhz"]
    if failures:
        row.update(status="failed", failure=failures[0].kind,
                   reason="; ".join(failure.line for failure in failures))
    return row


def invalid_row(fields, message, workload):
    """The row of a grid combination that makes no config (``ConfigError``)."""
    return {"config": {"label": " ".join(f"{k}={v}" for k, v in fields.items()), **fields},
            "workload": workload.to_dict(), "status": "failed", "failure": "ConfigError",
            "reason": f"ConfigError: {message}"}
