"""``bertaccel multitask``: task models as one shared int8 base plus a row-sparse int8 delta
each (docs/multitask.md)."""

import argparse
import json

from ..sw.paths import check_folder
from . import common
from .common import Parser, UsageError

__all__ = ["Multitask"]


def _multitask_errors():
    from ..golden.bert_ref import ModelError
    from ..golden.tasks import TaskError
    from ..hw.config import ConfigError
    from ..sw.bert.cache import CacheError
    from ..sw.bert.load import BertError
    from ..sw.multitask.rowdelta import DeltaError as RowDeltaError
    from ..sw.multitask.store import DeltaError
    from ..sw.multitask.suite import SuiteError
    return (ModelError, TaskError, DeltaError, RowDeltaError, SuiteError, BertError,
            ConfigError, CacheError, FileNotFoundError)


def _multitask_options(args):
    from ..sw.multitask.suite import check_task
    for task in args.task or ():
        check_task(task)
    return {"out": args.out, "model": args.model}


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


def _multitask_common(parser, *, one_task=False):
    parser.add_argument("--task", action="append", metavar="T", required=one_task,
                        help="a task (golden/tasks)" if one_task
                        else "a task; may be repeated (default: every task)")
    parser.add_argument("--out", default="build/multitask", help=argparse.SUPPRESS)
    parser.add_argument("--model", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--config", default="8x8",
                        help="accelerator config: a preset or a JSON file (default 8x8)")


def _build(args):
    common.quiet_transformers()
    from ..golden.tasks import TASKS
    from ..sw.multitask.suite import Base, build_task
    try:
        options = _multitask_options(args)
        check_folder(args.out, what="--out")
        base = Base(args.model)
        for task in args.task or TASKS:
            build_task(task, base=base, log=common.log, **options)
    except _multitask_errors() as error:
        raise UsageError(str(error)) from None
    return 0


def _eval(args):
    common.quiet_transformers()
    from ..golden.tasks import TASKS
    from ..sw.multitask.suite import report
    try:
        options = _multitask_options(args)
        result = report(args.task or TASKS, log=common.stderr_log(args) or (lambda text: None),
                        config=args.config, cycles_only=args.cycles_only, **options)
    except _multitask_errors() as error:
        raise UsageError(str(error)) from None
    print(json.dumps(result, indent=2) if args.json else _format_multitask(result))
    return 0


def _run(args):
    common.quiet_transformers()
    from ..sw.multitask.suite import predict
    if not args.text:
        raise UsageError("give at least one --text")
    if len(args.task) > 1:
        raise UsageError(f"give one --task, not {len(args.task)}")
    try:
        options = _multitask_options(args)
        predicted = predict(args.task[0], args.text, config=args.config, **options)
    except _multitask_errors() as error:
        raise UsageError(str(error)) from None
    print(json.dumps(predicted) if args.json else "\n".join(predicted))
    return 0


class Multitask:
    """``bertaccel multitask build | eval | run``."""

    name = "multitask"
    help = "task models as one shared int8 base plus a row-sparse int8 delta each"
    _RUN = {"build": _build, "eval": _eval, "run": _run}

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="multitask", required=True, parser_class=Parser)
        build = sub.add_parser("build", help="check the task data, fine-tune (full and "
                                             "row-sparse), write the delta files (all cached)")
        _multitask_common(build)
        evaluate = sub.add_parser("eval", help="test accuracy of the FP32, int8 and int8 "
                                               "base+delta models, and the storage")
        _multitask_common(evaluate)
        evaluate.add_argument("--json", action="store_true", help="print one JSON object")
        evaluate.add_argument("--cycles-only", action="store_true",
                              help="only the cycles and bytes per task switch (no accuracy)")
        run = sub.add_parser("run", help="label texts with the base plus a task's delta")
        _multitask_common(run, one_task=True)
        run.add_argument("--text", action="append", metavar="TEXT",
                         help="a text to label; may be repeated")
        run.add_argument("--json", action="store_true", help="print a JSON list of labels")

    def run(self, args):
        return self._RUN[args.multitask](args)
