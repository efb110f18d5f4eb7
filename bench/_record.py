"""What every bench script does with its report: note the command and write the JSON file."""

import json
import sys
from pathlib import Path

__all__ = ["record"]


def record(report, output, script, argv=None):
    """Add ``report["command"]`` (``python bench/<script> <argv>``, ``argv`` defaulting to
    the process's) and write ``report`` as JSON to ``output``, making its folder."""
    args = sys.argv[1:] if argv is None else argv
    report["command"] = " ".join(["python", f"bench/{Path(script).name}", *args])
    output = Path(output)
    output.parent.mkdir(parents=True, exist_ok=True)
    output.write_text(json.dumps(report, indent=2) + "\n")
