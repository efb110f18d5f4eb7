"""SeqPoint: a text set's accelerator time from a few representative sequence lengths.

::

    lengths = token_lengths(texts, bert.tokenizer, max_length=bert.max_seq)
    report = seqpoint(bert, lengths, ks=range(1, 11))
    report["ks"][k]["error"], report["ks"][k]["speedup"]

An input's cost on the accelerator is a function of its token count: batch 1, no padding, every
program of :func:`bertaccel.sw.bert.run_bert` depends on the shape and the length alone. So, as
in SeqPoint (Pati et al., "SeqPoint: Identifying Representative Iterations of Sequence-based
Neural Networks", ISPASS 2020), a whole set is projected from a few lengths:

1. Take the token length of every input (truncated at what the model and config take).
2. Cut the sorted lengths into ``k`` contiguous bins that minimise the spread of length within
   each bin, weighted by frequency (exact 1-D k-means, by dynamic programming over the distinct
   lengths).
3. Represent each bin by the length in it nearest its mean length, weighted by the number of
   inputs in the bin.
4. Time only the ``k`` representatives and project the set:
   ``sum(weight * cycles(representative))``.

A length is timed with :class:`bertaccel.sw.bert.timing.StageTimer`: the cycles the cycle model
(equal to the RTL) counts on every layer's stage programs, exactly, without running them all.
The reference is every input run on its own (each distinct length timed once and counted for
every input of that length). Reported per ``k``: the projection error against the reference,
and the speed-up in simulation time, two ways: the RTL's (Verilator's time is proportional to
the simulated cycles: the set's cycles over the representatives' cycles), and wall time. The
wall times are *projected*: each distinct length is timed once, in length order, by one timer
that remembers what it met (so a length's time depends on the lengths before it), and timing
every input on its own is projected as the sum over the inputs of their length's time; the
time measured is that of timing the distinct lengths, once each.
"""

import time

import numpy as np

from ..sw.bert import BertError
from ..sw.bert.timing import StageTimer

__all__ = ["TEXT_SETS", "text_set", "token_lengths", "choose_points", "seqpoint",
           "seqpoint_text_set", "format_report", "compare", "compare_text_set",
           "format_compare"]

#: The named text sets of :func:`text_set`.
TEXT_SETS = ("stdlib", "sentences", "stsb")


def text_set(spec):
    """The texts of a set: ``"stdlib"`` (every docstring of the stdlib modules of the accuracy
    set, :func:`bertaccel.golden.accuracy.stdlib_docstrings`), ``"sentences"`` (the 96 real
    sentences of :mod:`bertaccel.golden.sentences`), ``"stsb"`` (the 2,758 sentences of STS-B's
    test split, both of every pair, :mod:`bertaccel.golden.stsb`) or a text file, one input a
    line."""
    from pathlib import Path

    from ..sw.bert.text import read_text_file

    if spec == "stdlib":
        from ..golden.accuracy import stdlib_docstrings
        return stdlib_docstrings()
    if spec == "sentences":
        from ..golden.sentences import calibration_sentences, evaluation_sentences
        return evaluation_sentences() + calibration_sentences()
    if spec == "stsb":
        from ..golden import stsb
        try:
            return [s for pair in stsb.load("test") for s in (pair.first, pair.second)]
        except stsb.StsbError as error:
            raise BertError(str(error)) from None
    if not Path(spec).is_file():
        raise BertError(f"--texts must be stdlib, sentences, stsb or a text file (one input a "
                        f"line), not {spec!r}")
    return read_text_file(spec)


def token_lengths(texts, tokenizer, *, max_length):
    """Token count of each text (``[CLS]`` and ``[SEP]`` included), truncated at
    ``max_length``."""
    if not texts:
        raise BertError("the text set is empty")
    return [len(tokenizer(text, truncation=True, max_length=max_length)["input_ids"])
            for text in texts]


def choose_points(lengths, k):
    """SeqPoint's representative lengths: ``k`` contiguous bins of the sorted ``lengths`` with
    the least within-bin weighted variance of length (exact, dynamic programming).

    Returns
    -------
    list of dict
        One per bin, in length order: ``length`` (the representative: the length in the bin
        nearest its mean), ``weight`` (inputs in the bin), ``low``, ``high``, ``mean``. With fewer
        distinct lengths than ``k``, one bin per length.
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an int of at least 1, not {k!r}")
    values, counts = np.unique(np.asarray(lengths, dtype=np.int64), return_counts=True)
    if not len(values):
        raise ValueError("lengths is empty")
    n = len(values)
    k = min(k, n)
    w = counts.astype(np.float64)
    x = values.astype(np.float64)
    cw = np.concatenate([[0.0], np.cumsum(w)])
    cx = np.concatenate([[0.0], np.cumsum(w * x)])
    cxx = np.concatenate([[0.0], np.cumsum(w * x * x)])

    def sse(i, j):                       # the bins values[i:j] (i an array of starts)
        weight = cw[j] - cw[i]
        total = cx[j] - cx[i]
        return cxx[j] - cxx[i] - total * total / weight

    # best[b][j]: the least cost of values[:j] in b bins; cut[b][j]: where the last bin starts.
    best = np.full((k + 1, n + 1), np.inf)
    cut = np.zeros((k + 1, n + 1), dtype=np.int64)
    best[0][0] = 0.0
    for b in range(1, k + 1):
        for j in range(b, n + 1):
            starts = np.arange(b - 1, j)
            costs = best[b - 1][starts] + sse(starts, j)
            pick = int(np.argmin(costs))
            best[b][j], cut[b][j] = costs[pick], starts[pick]
    bounds, j = [], n
    for b in range(k, 0, -1):
        i = int(cut[b][j])
        bounds.append((i, j))
        j = i
    points = []
    for i, j in reversed(bounds):
        mean = (cx[j] - cx[i]) / (cw[j] - cw[i])
        rep = int(values[i + int(np.argmin(np.abs(x[i:j] - mean)))])
        points.append({"length": rep, "weight": int(cw[j] - cw[i]), "low": int(values[i]),
                       "high": int(values[j - 1]), "mean": float(mean)})
    return points


def seqpoint(bert, lengths, *, ks=range(1, 11), log=None):
    """Project the cycles of a set of inputs of token ``lengths`` from ``k`` representative
    lengths, for each ``k`` in ``ks``, and compare with timing every input.

    Parameters
    ----------
    bert : BertProgram
    lengths : sequence of int
        One per input, each from 1 to ``bert.max_seq``.
    ks : iterable of int
    log : callable, optional
        ``log(text)`` as lengths are timed.

    Returns
    -------
    dict
        ``inputs``, ``distinct_lengths``, ``length_stats``; ``reference`` (``cycles`` of every
        input; ``projected_wall_s``: the wall time, projected, of timing every input on its
        own; ``measured_wall_s``: of timing the distinct lengths); ``ks``: per ``k``, the
        ``points``, ``cycles`` (projected), ``error`` (relative, signed), ``abs_error``,
        ``wall_s`` (the representatives' timings), ``speedup_wall`` (projected, from the wall
        times) and ``speedup_rtl`` (simulated cycles).

    Raises
    ------
    BertError
        An empty set, or a length the model or config cannot take.
    """
    lengths = [int(length) for length in lengths]
    if not lengths:
        raise BertError("the set has no inputs")
    top = min(bert.spec.max_positions, bert.max_seq)
    bad = [length for length in lengths if not 1 <= length <= top]
    if bad:
        raise BertError(f"input lengths must be from 1 to {top} ({bert.name} on "
                        f"{bert.cfg.name}), not {bad[0]}")
    ks = [int(k) for k in ks]
    values, counts = np.unique(lengths, return_counts=True)
    timed = {}                             # length -> (cycles, wall seconds of its timing)
    timer = StageTimer(bert)
    for number, length in enumerate(values.tolist()):
        begin = time.perf_counter()
        cycles, _ = timer.model(1, length)
        timed[length] = (cycles, time.perf_counter() - begin)
        if log and (number + 1) % 50 == 0:
            log(f"timed {number + 1}/{len(values)} distinct lengths")
    cycles_of = {length: cycles for length, (cycles, _) in timed.items()}
    wall_of = {length: wall for length, (_, wall) in timed.items()}
    reference = int(sum(cycles_of[length] * count for length, count in zip(values.tolist(),
                                                                             counts.tolist())))
    reference_wall = float(sum(wall_of[length] * count for length, count in
                               zip(values.tolist(), counts.tolist())))
    out = {}
    for k in ks:
        points = choose_points(lengths, k)
        projected = sum(point["weight"] * cycles_of[point["length"]] for point in points)
        wall = sum(wall_of[point["length"]] for point in points)
        simulated = sum(cycles_of[point["length"]] for point in points)
        error = (projected - reference) / reference
        out[k] = {"points": points, "cycles": int(projected), "error": error,
                  "abs_error": abs(error), "wall_s": wall,
                  "speedup_wall": reference_wall / wall if wall else None,
                  "speedup_rtl": reference / simulated}
    array = np.asarray(lengths)
    return {
        "schema": "bertaccel-seqpoint/1",
        "model": bert.name, "config": bert.cfg.label, "tag": bert.cfg.tag,
        "inputs": len(lengths), "distinct_lengths": len(values),
        "length_stats": {"min": int(array.min()), "max": int(array.max()),
                         "mean": float(array.mean()), "median": float(np.median(array))},
        "reference": {"cycles": reference, "projected_wall_s": reference_wall,
                      "measured_wall_s": float(sum(wall_of.values())),
                      "latency_s": reference / (bert.cfg.clock_mhz * 1e6)},
        "ks": out,
        "cycles_by_length": {int(length): int(cycles) for length, cycles in cycles_of.items()},
    }


def seqpoint_text_set(model, cfg, texts="stdlib", *, ks=range(1, 11), seed=0, cache=None,
                      log=None):
    """:func:`seqpoint` on a named text set: what ``bertaccel seqpoint`` runs.

    ``model`` is ``"minilm"`` (the real weights, compiled or read from ``cache``, a
    :class:`bertaccel.sw.bert.cache.CompileCache`) or a :data:`bertaccel.analysis.perf.SHAPES`
    name (random weights from ``seed``); ``texts`` a :func:`text_set` spec. The texts are
    tokenised with all-MiniLM-L6-v2's tokenizer (BERT's uncased vocabulary) and truncated at what
    the model and ``cfg`` take. The lengths are always timed afresh: their wall time is what the
    report measures. Returns ``(report, lengths)``, ``report["texts"]`` naming the set.
    """
    name, (bert,), lengths = _compiled_set(model, [cfg], texts, seed=seed, cache=cache, log=log)
    report = seqpoint(bert, lengths, ks=ks, log=log)
    report["texts"] = name
    return report, lengths


def _compiled_set(model, cfgs, texts, *, seed, cache, log):
    """``(name, berts, lengths)``: the text set's name, ``model`` compiled for each config
    (``"minilm"`` from ``cache``, else a shape with random weights from ``seed``), and the
    texts' token lengths (all-MiniLM-L6-v2's tokenizer), truncated at what every config
    takes."""
    from ..golden import bert_ref
    from ..sw.bert import MINILM
    from ..sw.bert.encoder import load_compiled
    from .perf import compile_shape

    name = texts if isinstance(texts, str) else "given"
    texts = text_set(texts) if isinstance(texts, str) else list(texts)
    berts = []
    for cfg in cfgs:
        if log:
            log(f"{len(texts)} texts; compiling {model} for {cfg.name}")
        berts.append(load_compiled(MINILM, cfg, cache=cache)[0] if model == "minilm"
                     else compile_shape(model, cfg, seed=seed))
    top = min(min(bert.spec.max_positions, bert.max_seq) for bert in berts)
    return name, berts, token_lengths(texts, bert_ref.load_tokenizer(MINILM), max_length=top)


def format_report(report):
    """``bertaccel seqpoint``'s text output."""
    r = report
    s = r["length_stats"]
    lines = [
        f"model       {r['model']} on {r['config']} ({r['tag']})",
        f"set         {r['inputs']} inputs, {r['distinct_lengths']} distinct lengths, "
        f"{s['min']} to {s['max']} tokens (mean {s['mean']:.1f}, median {s['median']:g})",
        f"reference   {r['reference']['cycles']:,} cycles, every input timed "
        f"(projected {r['reference']['projected_wall_s']:.1f} s one by one; measured "
        f"{r['reference']['measured_wall_s']:.1f} s for the {r['distinct_lengths']} distinct "
        f"lengths)",
        "",
        f"{'k':>3}{'projected cycles':>20}{'error':>10}{'speed-up (wall, proj.)':>24}"
        f"{'speed-up (RTL)':>16}  representative lengths (weight)",
    ]
    for k, row in r["ks"].items():
        points = " ".join(f"{p['length']}({p['weight']})" for p in row["points"])
        lines.append(f"{k:>3}{row['cycles']:>20,}{row['error']:>+10.3%}"
                     f"{row['speedup_wall']:>23.1f}x{row['speedup_rtl']:>15.1f}x  {points}")
    return "\n".join(lines)


def compare(berts, lengths, *, ks=range(1, 11), log=None):
    """SeqPoint's second result: the speed-up of each config over the first, projected from
    ``k`` representative lengths and against timing every input on each config. The bins are
    :func:`choose_points`'s; each bin's representative is chosen on the first config: the length
    whose cycles there are nearest the bin's mean.

    Parameters
    ----------
    berts : list of BertProgram
        The same model compiled for each config; the first is the baseline.
    lengths : sequence of int
    ks : iterable of int

    Returns
    -------
    dict
        ``baseline``, ``configs``, ``inputs``, ``reference`` (per config, ``cycles`` of every
        input and ``speedup`` over the baseline) and ``ks``: per ``k``, ``points`` and per
        config ``projected_speedup`` and ``error`` (relative, signed) against the reference,
        SeqPoint's (both configs projected from the points, each point standing for its bin),
        and ``profiled_speedup`` and ``profiled_error``: the baseline's cycles over the whole
        set, which choosing the points already reads (it is the machine at hand, profiled),
        over the config's projected by :func:`_interpolated`.
    """
    reports = [seqpoint(bert, lengths, ks=(), log=log) for bert in berts]   # the timings alone
    base = reports[0]
    labels = [report["config"] for report in reports]
    cycles = {report["config"]: report["cycles_by_length"] for report in reports}
    reference = {report["config"]: {"cycles": report["reference"]["cycles"],
                                    "speedup": base["reference"]["cycles"]
                                    / report["reference"]["cycles"]}
                 for report in reports}
    counts = dict(zip(*np.unique(np.asarray(lengths), return_counts=True)))
    base_total = reference[labels[0]]["cycles"]
    out = {}
    for k in [int(k) for k in ks]:
        points = _on_baseline(choose_points(lengths, k), cycles[labels[0]], counts)
        projected = {label: sum(p["weight"] * cycles[label][p["length"]] for p in points)
                     for label in labels}
        row = {"points": points, "configs": {}}
        for label in labels[1:]:
            speedup = projected[labels[0]] / projected[label]
            profiled = base_total / _interpolated(points, cycles[label], counts)
            row["configs"][label] = {
                "projected_speedup": speedup,
                "error": speedup / reference[label]["speedup"] - 1,
                "profiled_speedup": profiled,
                "profiled_error": profiled / reference[label]["speedup"] - 1}
        out[k] = row
    return {"schema": "bertaccel-seqpoint-compare/1", "model": base["model"],
            "baseline": labels[0], "configs": labels, "inputs": base["inputs"],
            "distinct_lengths": base["distinct_lengths"], "reference": reference, "ks": out,
            "cycles_by_length": cycles}


def _interpolated(points, cycles, counts):
    """The set's cycles on a config projected from its representatives' ``cycles`` alone: each
    input's cycles read off the line through the representatives' (by length; the outermost
    representatives' own beyond them), summed over the inputs (``counts`` by length)."""
    xs = [point["length"] for point in points]
    ys = [cycles[x] for x in xs]
    return float(sum(count * np.interp(length, xs, ys) for length, count in counts.items()))


def _on_baseline(points, cycles, counts):
    """SeqPoint's bins of length, each represented by the length in it whose baseline cycles
    are nearest the bin's mean baseline cycles (weighted by its inputs): the representatives
    chosen on the first config."""
    out = []
    for point in points:
        inside = [n for n in cycles if point["low"] <= n <= point["high"]]
        mean = sum(counts[n] * cycles[n] for n in inside) / point["weight"]
        rep = min(inside, key=lambda n: (abs(cycles[n] - mean), n))
        out.append({**point, "length": rep})
    return out


def compare_text_set(model, cfgs, texts="stdlib", *, ks=range(1, 11), seed=0, cache=None,
                     log=None):
    """:func:`compare` on a named text set, ``model`` compiled for every config of ``cfgs``
    (the first the baseline), the lengths truncated at what every config takes."""
    name, berts, lengths = _compiled_set(model, cfgs, texts, seed=seed, cache=cache, log=log)
    report = compare(berts, lengths, ks=ks, log=log)
    report["texts"] = name
    return report


def format_compare(report):
    """``bertaccel seqpoint --compare``'s text output."""
    r = report
    others = r["configs"][1:]
    lines = [f"model       {r['model']}, {r['inputs']} inputs ({r['texts']}), "
             f"{r['distinct_lengths']} distinct lengths; speed-ups over {r['baseline']}",
             "reference   " + ", ".join(f"{cfg} {r['reference'][cfg]['speedup']:.4f}x"
                                       for cfg in others), "",
             f"{'k':>3}" + "".join(f"{cfg + ' projected':>22}{'error':>10}"
                                   f"{'profiled':>12}{'error':>10}" for cfg in others)]
    for k, row in r["ks"].items():
        lines.append(f"{k:>3}" + "".join(
            f"{row['configs'][cfg]['projected_speedup']:>21.4f}x"
            f"{row['configs'][cfg]['error']:>+10.3%}"
            f"{row['configs'][cfg]['profiled_speedup']:>11.4f}x"
            f"{row['configs'][cfg]['profiled_error']:>+10.3%}" for cfg in others))
    lines += ["", f"projected: SeqPoint's, both configs from the k points; profiled: "
                  f"{r['baseline']}'s whole set over the other's, interpolated between the points"]
    return "\n".join(lines)
