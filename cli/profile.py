"""``bertaccel profile``: PyTorch BERT on this CPU by op class, beside the accelerator's cycles
(:mod:`bertaccel.analysis.profile`)."""

import json
import sys

from .common import UsageError

__all__ = ["Profile", "add_measure_arguments"]


def _profile(args):
    from transformers.utils import logging as hf_logging

    from ..analysis.profile import (MODES, accelerator_side, busy_warning, format_table,
                                    import_pyplot, load_accel_breakdown, plot_shares, profile,
                                    report_bars, threads_text)
    from ..sw.paths import check_file

    hf_logging.disable_progress_bar()  # "Loading weights" bars; our progress is on stderr
    if args.png:                       # fail before minutes of profiling, not after
        import_pyplot()
        check_file(args.png, what="--png")
    accel = load_accel_breakdown(args.accel_breakdown) if args.accel_breakdown else None
    if accel is None and args.config != "none":
        from ..hw.config import ConfigError, load_config
        try:
            load_config(args.config)             # fail before minutes of profiling
        except ConfigError as error:
            raise UsageError(str(error)) from None
    modes = MODES if args.mode == "both" else (args.mode,)
    progress = None if args.json else (lambda text: print(f"profile: {text}",
                                                          file=sys.stderr))
    report = profile(args.model, modes=modes, batch=args.batch, seq=args.seq,
                     iterations=args.iterations, warmup=args.warmup, seed=args.seed,
                     threads=args.threads, accel=accel, log=progress)
    if accel is None and args.config != "none":
        if progress:
            progress(f"the accelerator side: {args.model} on {args.config}, cycle model")
        report["accelerator"] = accelerator_side(args.model, config=args.config,
                                                 seq=args.seq, batch=args.batch,
                                                 seed=args.seed)
        accel = report["accelerator"]
    if args.png:
        env = report["environment"]
        plot_shares(report_bars(report), args.png,
                    title=f"{report['model']['name']}, batch {args.batch}, seq {args.seq}: "
                          f"time by op class",
                    subtitle=f"host: {env['cpu']}, {threads_text(env)}, torch "
                             f"{env['torch']}; median self time of ATen operators"
                             + ("" if accel else "\nno accelerator breakdown given: host "
                                                 "only"))
    if args.json:
        print(json.dumps(report, indent=2))
        warning = busy_warning(report["environment"])
        if warning:
            print(f"bertaccel profile: {warning}", file=sys.stderr)
    else:
        print(format_table(report))
        if args.png:
            print(f"wrote {args.png}")
    return 0


def add_measure_arguments(parser):
    """The options of a host measurement, shared with ``bench/profile_host.py``: ``--seq``,
    ``--batch``, ``--iterations``, ``--warmup``, ``--threads``, ``--seed``, ``--config`` and
    ``--accel-breakdown``."""
    parser.add_argument("--seq", type=int, default=128, help="sequence length (128)")
    parser.add_argument("--batch", type=int, default=1, help="batch size (1)")
    parser.add_argument("--iterations", type=int, default=5,
                        help="profiled iterations; medians are reported (5)")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up iterations (2)")
    parser.add_argument("--threads", type=int, default=2, help="torch threads (2)")
    parser.add_argument("--seed", type=int, default=0, help="torch seed (0)")
    parser.add_argument("--config", default="8x8",
                        help="the accelerator config whose cycle-model breakdown of the same "
                             "model and input is shown alongside; 'none' for host only (8x8)")
    parser.add_argument("--accel-breakdown", metavar="JSON",
                        help="the accelerator's cycles by the same classes, from a file: "
                             "{\"label\": ..., \"cycles\": {class: n}}")


class Profile:
    """Profile PyTorch BERT on this CPU and group the time into op classes, next to the
    accelerator's cycle breakdown."""

    name = "profile"
    help = "PyTorch BERT on this CPU by op class, beside the accelerator's cycles"

    def add_arguments(self, parser):
        parser.add_argument("--model", default="minilm",
                            help="minilm (real weights), bert-base (the shape, random weights) "
                                 "or a BertModel folder (minilm)")
        parser.add_argument("--mode", choices=("inference", "training", "both"), default="both",
                            help="inference, one training step, or both (both)")
        add_measure_arguments(parser)
        parser.add_argument("--json", action="store_true", help="print one JSON object")
        parser.add_argument("--png", metavar="PATH", help="write the stacked-bar plot here")

    def run(self, args):
        from ..analysis.profile import ProfileError
        try:
            return _profile(args)
        except ProfileError as error:
            raise UsageError(str(error)) from None
