"""What every bench script does with its report: stamp it, note the command, write the JSON.

A result is stamped with what it was measured on, so that no prose needs to say it: the
commit (``git describe --always --dirty``: ``-dirty`` when the tracked files had changes), the
date, and the machine (:func:`bertaccel.golden.kernels.describe`: CPU model, instruction set,
cores, GEMM kernel). A report about one config carries its ``config`` and ``tag`` itself.
"""

import datetime
import json
import subprocess
import sys
from pathlib import Path

from bertaccel.golden import kernels

__all__ = ["commit", "record", "stamp"]

ROOT = Path(__file__).resolve().parent.parent


def commit():
    """``git describe --always --dirty`` of the repository, or None outside a git checkout."""
    try:
        done = subprocess.run(["git", "describe", "--always", "--dirty", "--abbrev=12"],
                              cwd=ROOT, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout.strip() or None


def stamp(report):
    """Add ``commit``, ``date`` (UTC) and ``machine`` (unless the report has its own) to
    ``report``; return it."""
    report["commit"] = commit()
    report["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    report.setdefault("machine", kernels.describe())
    return report


def record(report, output, script, argv=None):
    """:func:`stamp` ``report``, add ``report["command"]`` (``python bench/<script> <argv>``,
    ``argv`` defaulting to the process's) and write it as JSON to ``output``, making its
    folder."""
    args = sys.argv[1:] if argv is None else argv
    stamp(report)
    report["command"] = " ".join(["python", f"bench/{Path(script).name}", *args])
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
