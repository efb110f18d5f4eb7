"""Every repository path that a doc, a docstring or a comment cites exists.

A cited path is a token that starts with one of the repository's top-level folders
(``hw/execute/unit.py``, ``docs/fpga.md``, ``bench/results/synth.json``, ``sw/devices/``),
optionally followed by ``:line``, and a Markdown link's relative target. Globs (``test_*.py``)
and placeholders (``<tag>``, ``{name}``) are not paths and are skipped, and so is everything
under ``build/``, which commands generate. A module may be cited without its ``.py`` (the
module ``sw/tiler`` is a file ``tiler.py`` or a package ``tiler/``), and with a name in it
(``sw/epilogue.lower``). A file under ``bench/results/`` that a doc or a docstring outside
``bench/`` cites must be tracked by git where this is a git checkout: a figure read from a
file that a clean clone lacks is a figure nobody can check (a bench script's docstring names
the files it writes).
"""

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TOP = ("hw", "sw", "cli", "analysis", "fpga", "cluster", "sim", "golden", "soc", "verif",
       "bench", "docs", "build", ".ci")
DOCS = ["README.md", "verif/README.md", *sorted(f"docs/{p.name}" for p in (ROOT / "docs").glob("*.md"))]
PYTHON = ("hw", "sw", "cli", "analysis", "fpga", "cluster", "sim", "golden", "soc", "verif")

# A path: a top-level folder, a slash, then path characters. Not after a word, a dot or a slash
# (`bertaccel.hw`, a URL's `github.com/x/hw/`); the character after it tells a glob or a
# placeholder.
PATH = re.compile(r"(?<![\w./\-])((?:%s)/[\w.\-/]*)(?=(.?))"
                  % "|".join(re.escape(top) for top in TOP))
LINK = re.compile(r"\]\(([^)\s]+)\)")
PLACEHOLDER = set("<{[*?$%")
# What a file's name ends with, so that `hw/queue.Queue` is a name in a module and
# `hw/queue.py` a file.
SUFFIXES = {"py", "md", "json", "jsonl", "txt", "csv", "png", "svg", "v", "sv", "vlt", "vcd",
            "toml", "yml", "yaml", "cfg", "core", "sh", "npy", "bit", "log", "xml", "html",
            "mk"}


def _python_files():
    files = sorted(p for top in PYTHON for p in (ROOT / top).rglob("*.py"))
    files += sorted((ROOT / "bench").glob("*.py"))
    return [p for p in files if "__pycache__" not in p.parts]


def _prose_lines(path):
    """(line number, text) of a Python file's comments and docstrings (string statements)."""
    source = path.read_text()
    lines = source.splitlines()
    found = []
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            found.append((token.start[0], token.string))
    for node in ast.walk(ast.parse(source)):
        if (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)):
            for number in range(node.lineno, node.end_lineno + 1):
                found.append((number, lines[number - 1]))
    return found


def _tracked():
    if not (ROOT / ".git").exists():
        return None
    try:
        listed = subprocess.run(["git", "ls-files", "bench/results"], cwd=ROOT, check=True,
                                capture_output=True, text=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    return set(listed.split())


def _module(path):
    """Whether `path` names a module, a package, or a name in one."""
    folder, _, last = path.rpartition("/")
    stem, dot, rest = last.partition(".")
    if dot and last.rsplit(".", 1)[-1] in SUFFIXES:
        return False
    module = ROOT / folder / stem
    return module.with_suffix(".py").is_file() or (module / "__init__.py").is_file()


def _exists(path, tracked, outputs=False):
    path = path.rstrip("/")
    if path.startswith("bench/results/"):
        if outputs:
            return True
        if tracked is not None:
            return path in tracked or any(name.startswith(path + "/") for name in tracked)
    return (ROOT / path).exists() or _module(path)


def _cited(text):
    """The paths a line cites, repository-relative, without `:line`."""
    for found in PATH.finditer(text):
        path, after = found[1], found[2]
        if after in PLACEHOLDER:
            continue
        path = path.rstrip(".-")
        if path.startswith("build/") or path == "build":
            continue
        yield path


def _missing(where, number, text, tracked, base=None):
    missing = []
    outputs = where.startswith("bench/") and where.endswith(".py")
    for path in _cited(text):
        if not _exists(path, tracked, outputs):
            missing.append(f"{where}:{number}: {path}")
    if base is not None:
        for target in LINK.findall(text):
            target = target.split("#")[0]
            if not target or re.match(r"[a-z]+:", target) or set(target) & PLACEHOLDER:
                continue
            resolved = (base / target).resolve()
            if not resolved.exists():
                missing.append(f"{where}:{number}: {target} (link)")
    return missing


def test_cited_paths_exist():
    tracked = _tracked()
    missing = []
    for name in DOCS:
        path = ROOT / name
        for number, text in enumerate(path.read_text().splitlines(), 1):
            missing += _missing(name, number, text, tracked, base=path.parent)
    for path in _python_files():
        name = path.relative_to(ROOT).as_posix()
        for number, text in sorted(set(_prose_lines(path))):
            missing += _missing(name, number, text, tracked)
    assert not missing, "cited paths that do not exist:\n" + "\n".join(missing)


def test_the_pattern():
    cited = list(_cited("see `hw/execute/unit.py:12`, docs/fpga.md. `sw/devices/` and "
                        "`bench/results/seqpoint_compare_*.json`, `build/sim/x`, "
                        "bertaccel.hw.pe, https://x.org/hw/pe.py, `verif/block/test_*.py`, "
                        "build/synth/<tag>/, `hw/*.py:line`, (hw/queue.Queue)"))
    assert cited == ["hw/execute/unit.py", "docs/fpga.md", "sw/devices/", "hw/queue.Queue"]
    assert _exists("hw/queue.Queue", None) and _exists("sw/devices", None)
    assert not _exists("hw/queue.Queue.py", None) and not _exists("hw/nothing.py", None)
