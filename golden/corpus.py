"""English text that ships with Python: sentences from the docstrings of the standard library.

The project's accuracy sets, benchmarks and SeqPoint's text set are built from it, so every
figure is measured on real prose that nobody on this project wrote, and no data set is
downloaded. :func:`stdlib_sentences` takes a fixed list of modules (the accuracy set);
:func:`corpus_sentences` takes every importable standard-library module (a few thousand
sentences, for throughput measurements).
"""

import functools
import importlib
import inspect
import itertools
import re
import sys
import warnings

__all__ = ["STDLIB_MODULES", "stdlib_sentences", "stdlib_docstrings", "corpus_sentences",
           "pool_size"]

#: The modules whose docstrings supply the sentences, in this order.
STDLIB_MODULES = (
    "textwrap", "json", "collections", "argparse", "logging", "difflib", "heapq", "pickle",
    "shlex", "fractions", "decimal", "inspect", "functools", "subprocess", "threading",
    "unittest", "csv", "string", "random", "statistics", "calendar", "pathlib", "contextlib",
    "dataclasses", "tempfile", "shutil", "pprint", "copy", "io",
)

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")


def _docstrings(module):
    yield module.__doc__ or ""
    names = getattr(module, "__all__", None) or [n for n in dir(module) if not n.startswith("_")]
    for name in sorted(names):
        obj = getattr(module, name, None)
        if (inspect.isfunction(obj) or inspect.isclass(obj)) \
                and (getattr(obj, "__module__", None) or "").split(".")[0] == module.__name__:
            yield inspect.getdoc(obj) or ""


def stdlib_docstrings(modules=STDLIB_MODULES):
    """Every non-empty docstring of ``modules`` (each module's, then its public functions' and
    classes', by name), whole, as :func:`inspect.getdoc` gives them: a text set with a natural,
    long-tailed spread of lengths (a few tokens to well past BERT's 512)."""
    texts = []
    for name in modules:
        texts.extend(doc.strip() for doc in _docstrings(importlib.import_module(name))
                     if doc and doc.strip())
    return texts


def _sentences(text):
    for para in re.split(r"\n\s*\n", text):
        # Prose only: drop doctest, indented code, continuation and list lines.
        lines = [line.strip() for line in para.split("\n")
                 if line.strip() and ">>>" not in line and not line.startswith((" ", "\t"))
                 and not line.strip().startswith(("...", "-", "*", ":"))]
        for s in _SENTENCE_END.split(" ".join(lines)):
            s = s.strip()
            if 6 <= len(s.split()) <= 60 and s[0].isupper() and s.endswith(".") \
                    and sum(c.isalpha() or c in " ,.'-" for c in s) / len(s) > 0.93:
                yield s


@functools.cache
def _pool():
    per_module = []
    for name in STDLIB_MODULES:
        seen = []
        for doc in _docstrings(importlib.import_module(name)):
            seen.extend(s for s in _sentences(doc) if s not in seen)
        per_module.append(seen)
    return tuple(s for group in itertools.zip_longest(*per_module) for s in group if s is not None)


def stdlib_sentences(n=64):
    """``n`` English sentences from standard-library docstrings, one module at a time in turn.

    Raises
    ------
    ValueError
        If ``n`` is below 1 or more than the docstrings hold.
    """
    pool = _pool()
    if not 1 <= n <= len(pool):
        raise ValueError(f"n must be from 1 to {len(pool)}, not {n!r}")
    return list(pool[:n])




#: Standard-library modules that are not prose sources: they print, open windows or are tools.
_SKIP = ("antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "lib2to3",
         "ensurepip", "venv", "pydoc_data")


@functools.cache
def corpus_sentences():
    """Every distinct sentence of every importable, public standard-library module's docstrings,
    module by module in name order (a few thousand)."""
    names = sorted(name for name in sys.stdlib_module_names
                   if not name.startswith("_") and name not in _SKIP)
    seen, out = set(), []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            try:
                module = importlib.import_module(name)
            except Exception:  # noqa: BLE001 - a module this platform lacks
                continue
            for doc in _docstrings(module):
                for sentence in _sentences(doc):
                    if sentence not in seen:
                        seen.add(sentence)
                        out.append(sentence)
    return tuple(out)


def pool_size():
    """How many sentences :func:`stdlib_sentences` can give."""
    return len(_pool())
