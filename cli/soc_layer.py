"""``bertaccel soc --model``: one BERT encoder layer run by the SoC's layer firmware; and the
report that a SoC run of either kind prints (:func:`finish`)."""

import json
import sys
import warnings

from . import common
from .common import UsageError

__all__ = ["run_layer", "finish"]


def _batch(bert, seq):
    """The first evaluation sentence tokenised to ``seq`` tokens (padded or truncated)."""
    from ..golden import sentences

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)   # the truncation warning
        return bert.encode(sentences.evaluation_sentences()[:1], max_length=seq)


def run_layer(args):
    """``bertaccel soc --model M --layer N --seq S``: compile the model (cached), run layer
    ``N`` on the SoC and on the software device, print the comparison and the cycles."""
    import os
    os.environ["HF_HUB_OFFLINE"] = "1"
    import torch

    from ..soc.build import missing_tools
    from ..soc.run import run_bert_layer
    from ..sw.bert import BertError
    from ..sw.bert.cache import CacheError, CompileCache
    from ..sw.bert.encoder import load_compiled

    cfg = common.config(args.config)
    if args.seq < 1:
        raise UsageError(f"--seq must be at least 1, not {args.seq}")
    missing = missing_tools()
    if missing:
        raise UsageError("the SoC needs " + ", ".join(missing))
    folder = common.build_root(args.build_dir) / (f"soc-{cfg.tag}"
                                                  + ("-O2" if args.optimize else ""))
    log = common.stderr_log(args) or (lambda text: None)
    torch.set_num_threads(1)
    try:
        cache = None if args.no_cache else CompileCache(args.cache_dir).check()
        bert, _, _ = load_compiled(args.model, cfg, cache=cache)
        layers = bert.spec.layers
        if not 1 <= args.layer <= layers:
            raise UsageError(f"--layer must be from 1 to {layers} for {args.model}, not "
                             f"{args.layer}")
        if args.seq > bert.max_seq:
            raise UsageError(f"--seq {args.seq} is more than the {cfg.name} config takes for "
                             f"{args.model} ({bert.max_seq})")
        batch = _batch(bert, args.seq)
        soc, reference = run_bert_layer(bert, args.layer - 1, batch, folder=folder,
                                        optimize=args.optimize, log=log)
    except (BertError, CacheError, ValueError) as error:   # ValueError: too large an image
        raise UsageError(str(error)) from None
    exact = torch.equal(soc.output, reference)
    cycles, model = sum(soc.cycles.values()), sum(soc.model_cycles.values())
    result = {"config": cfg.name, "tag": cfg.tag, "model": args.model, "layer": args.layer,
              "seq": args.seq, "bit_exact": exact, "cycles": cycles, "model_cycles": model,
              "stages": {name: {"cycles": soc.cycles[name],
                                "model_cycles": soc.model_cycles[name]}
                         for name in soc.cycles},
              "image_bytes": len(soc.layer.blob), "checksum": soc.report.facts["checksum"],
              "build_s": round(soc.build_s, 1), "firmware_s": round(soc.firmware_s, 2),
              "run_s": round(soc.run_s, 1)}
    verdict = "bit-exact with" if exact else "DIFFERENT from"
    stages = ", ".join(f"{name} {soc.cycles[name]} ({soc.model_cycles[name]})"
                       for name in soc.cycles)
    summary = (f"{cfg.name} SoC: {args.model} layer {args.layer} at {args.seq} tokens "
               f"{verdict} the software device; CYCLES {cycles} (the cycle model's core: "
               f"{model}): {stages}; image {len(soc.layer.blob):,} bytes; build "
               f"{soc.build_s:.0f} s, firmware {soc.firmware_s:.1f} s, run {soc.run_s:.0f} s")
    return finish(args, soc, result, summary,
                  None if exact else f"layer {args.layer} of {args.model} on the {cfg.name} "
                                     f"SoC differs from the software device's")


def finish(args, soc, result, summary, error):
    """Print a SoC run's report: what the firmware printed (``--uart``), then ``result`` as one
    JSON object (``--json``) or the line ``summary``, and ``error`` (None when the outputs were
    bit-exact) on standard error. The exit status: 0, or 1 with an error."""
    if args.uart and not args.json:
        print(soc.report.text, end="")
    print(json.dumps(result) if args.json else summary)
    if error is not None:
        print(f"bertaccel: error: {error}", file=sys.stderr)
        return 1
    return 0
