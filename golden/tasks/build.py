"""Build the text-classification tasks of :mod:`bertaccel.golden.tasks` from text on this machine.

Two sources, neither written by this project and neither downloaded as a data set:

* **Python's standard library** (the docstrings of the running CPython; PSF licence):
  ``stdlib-topic`` labels a docstring sentence with the Library Reference chapter of its module,
  ``stdlib-kind`` labels a docstring's summary with what it documents (module, class, function,
  method).
* **Debian's package metadata** (``apt-cache dumpavail`` for Section, Source and debtags, the
  archive's ``Translation-en`` files for the long descriptions): ``debian-section`` labels a
  source package's description with its archive section, ``debian-interface`` with its debtags
  ``interface::`` facet. Needs ``apt-get -o Acquire::Languages=en update`` once (as root).

Every task is deduplicated (one text, one example; a text seen with two labels is dropped),
kept to texts of at most 128 tokens, capped per label, and split 60/20/20 into train/dev/test
per label in a seeded hash order of *groups* (a Debian source package, a docstring), so no
group and no text is in two splits.
The standard library is imported whole, in name order, before either stdlib task is read, so
a task's text does not depend on what else the same run built::

    python -m bertaccel.golden.tasks.build [--task T ...] [--out golden/tasks] [--seed 0]

writes ``<out>/<task>/{train,dev,test}.jsonl`` (``{"text", "label"}``, the label an index into
``labels``) and ``<out>/<task>/meta.json`` (labels, counts, source, licence, provenance).
"""

import argparse
import collections
import functools
import glob
import hashlib
import importlib
import inspect
import json
import pathlib
import pkgutil
import platform
import re
import subprocess
import sys
import warnings

from .. import bert_ref
from ..corpus import _sentences as prose_sentences

__all__ = ["BUILDERS", "SPLITS", "FRACTIONS", "MAX_WORDS", "MAX_TOKENS", "split_groups",
           "write_task",
           "stdlib_topic", "stdlib_kind", "debian_section", "debian_interface", "main"]

#: The split names, in order, and the share of each label's groups that goes to each.
SPLITS = ("train", "dev", "test")
FRACTIONS = (0.6, 0.2, 0.2)
#: Texts are cut to this many words (at a sentence end where one falls in the second half):
#: about 64 tokens.
MAX_WORDS = 48
#: Texts longer than this many tokens of all-MiniLM-L6-v2's tokenizer ([CLS] and [SEP] in) are
#: left out, so no task text is ever truncated.
MAX_TOKENS = 128

#: ``stdlib-topic``: the Python Library Reference chapters and the modules (with their
#: submodules) whose docstrings stand for each.
STDLIB_TOPICS = {
    "text": "string re difflib textwrap unicodedata stringprep readline rlcompleter codecs shlex "
            "gettext locale",
    "datatypes": "datetime zoneinfo calendar collections heapq bisect array weakref types copy "
                 "pprint reprlib enum graphlib",
    "numeric": "numbers math cmath decimal fractions random statistics",
    "files": "pathlib os posixpath fileinput stat filecmp tempfile glob fnmatch linecache shutil "
             "io zipfile tarfile gzip bz2 lzma zlib",
    "formats": "pickle copyreg shelve marshal dbm sqlite3 csv configparser tomllib netrc "
               "plistlib json xml html",
    "concurrency": "threading multiprocessing concurrent subprocess sched queue contextvars "
                   "asyncio",
    "internet": "socket ssl select selectors email mailbox mimetypes base64 binascii quopri "
                "urllib http ftplib poplib imaplib smtplib uuid socketserver xmlrpc ipaddress "
                "webbrowser wsgiref",
    "devtools": "typing pydoc doctest unittest pdb bdb faulthandler cProfile profile pstats "
                "timeit trace tracemalloc inspect dis ast symtable tokenize tabnanny compileall "
                "py_compile importlib pkgutil modulefinder runpy warnings traceback gc sysconfig "
                "site code codeop",
}
#: Standard-library modules that are not prose sources: they print, open windows or are tools.
_SKIP = ("antigravity", "this", "idlelib", "tkinter", "turtle", "turtledemo", "lib2to3",
         "ensurepip", "venv", "pydoc_data")
#: ``debian-section``: archive sections that name what a program is about (not its language).
DEBIAN_SECTIONS = ("admin", "games", "graphics", "net", "science", "sound", "text", "web")
#: ``debian-interface``: a package's exact set of debtags ``interface::`` tags, and its label.
DEBIAN_INTERFACES = {
    ("interface::graphical", "interface::x11"): "graphical",
    ("interface::commandline",): "commandline",
    ("interface::daemon",): "daemon",
    ("interface::text-mode",): "text-mode",
}
#: Binary packages whose descriptions say what kind of file they hold rather than what the
#: software is (libraries, headers, documentation, debug symbols, data).
_NOT_PROGRAM = re.compile(r"^lib|-(dev|doc|dbg|dbgsym|data|common)$")
_SIGNATURE = re.compile(r"^[\w.]+\(")
_SENTENCE_END = re.compile(r"(?<=[.!?])\s+")


def _clip(text, max_words=MAX_WORDS):
    """``text`` in one line, cut to ``max_words`` words, at a sentence end where possible."""
    words = text.split()
    if len(words) <= max_words:
        return " ".join(words)
    cut = " ".join(words[:max_words])
    ends = [m.start() for m in _SENTENCE_END.finditer(cut)]
    if ends and ends[-1] > len(cut) // 2:
        return cut[:ends[-1]]
    return cut


def _is_prose(text, min_words=4):
    return (min_words <= len(text.split()) and text[:1].isupper() and not _SIGNATURE.match(text)
            and sum(c.isalpha() or c in " ,.'-" for c in text) / len(text) > 0.9)


# -- the standard library ----------------------------------------------------------------------

def _submodules(name):
    """Module ``name`` and its public submodules (tests and private ones left out)."""
    module = importlib.import_module(name)
    yield module
    for info in pkgutil.walk_packages(getattr(module, "__path__", []), name + "."):
        if any(part.startswith("_") or part in ("test", "tests")
               for part in info.name.split(".")[1:]):
            continue
        try:
            yield importlib.import_module(info.name)
        except Exception:  # noqa: BLE001 - a submodule this platform cannot import
            continue


def _owned(module, obj):
    return getattr(obj, "__module__", None) == module.__name__


def _docstrings(module):
    """``(kind, qualified name, docstring)`` of a module, its public classes, their public
    methods and its public functions, each defined in that module."""
    yield "module", module.__name__, inspect.getdoc(module)
    for name, obj in sorted(vars(module).items()):
        if name.startswith("_") or not _owned(module, obj):
            continue
        qual = f"{module.__name__}.{name}"
        if inspect.isclass(obj):
            yield "class", qual, inspect.cleandoc(obj.__doc__) if obj.__doc__ else None
            for attr, member in sorted(vars(obj).items()):
                member = getattr(member, "__func__", member)
                if not attr.startswith("_") and (inspect.isfunction(member)
                                                  or inspect.ismethoddescriptor(member)):
                    yield "method", f"{qual}.{attr}", member.__doc__ and inspect.cleandoc(
                        member.__doc__)
        elif inspect.isfunction(obj) or inspect.isbuiltin(obj):
            yield "function", qual, obj.__doc__ and inspect.cleandoc(obj.__doc__)


def _quiet_import(names):
    """Every module of ``names`` with its submodules, once each, warnings silenced."""
    seen = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name in names:
            try:
                modules = list(_submodules(name))
            except Exception:  # noqa: BLE001 - a module this platform lacks
                continue
            for module in modules:
                if module.__name__ not in seen:
                    seen.add(module.__name__)
                    yield module


@functools.cache
def _stdlib_modules():
    """``{name: module}`` of every importable public standard-library module and submodule,
    imported in name order (importing some modules changes what others hold)."""
    names = sorted(n for n in sys.stdlib_module_names if not n.startswith("_") and n not in _SKIP)
    return {module.__name__: module for module in _quiet_import(names)}


def _modules_of(names):
    """The modules (and submodules) of ``names``, in that order, from :func:`_stdlib_modules`."""
    everything = _stdlib_modules()
    for name in names:
        yield from (m for n, m in everything.items() if n == name or n.startswith(name + "."))


def stdlib_topic():
    """``(text, label, group)``: a docstring sentence (the prose filter of
    :mod:`bertaccel.golden.corpus`), labelled by its module's Library Reference chapter; the
    group is the documented object."""
    for label, names in STDLIB_TOPICS.items():
        for module in _modules_of(names.split()):
            for _, qual, doc in _docstrings(module):
                for sentence in prose_sentences(doc or ""):
                    yield _clip(sentence), label, qual


def _summary(doc):
    """The first paragraph of a docstring, in one line."""
    return " ".join(line.strip() for line in re.split(r"\n\s*\n", doc.strip())[0].split("\n"))


def stdlib_kind():
    """``(text, label, group)``: the summary paragraph of a docstring, labelled by what it
    documents (module, class, function, method), over every importable public standard-library
    module; the group is the text itself."""
    for module in _stdlib_modules().values():
        for kind, _, doc in _docstrings(module):
            text = _summary(doc) if doc else ""
            if text and len(text.split()) <= 60 and _is_prose(text):
                yield _clip(text), kind, text


# -- Debian's package metadata -------------------------------------------------------------------

def _records(text):
    """The stanzas of a Debian control file, as dicts (continuation lines kept, with ``\\n``)."""
    record, key = {}, None
    for line in text.splitlines():
        if not line.strip():
            if record:
                yield record
            record, key = {}, None
        elif line[0] in " \t" and key is not None:
            record[key] += "\n" + line
        else:
            key, _, value = line.partition(":")
            record[key] = value.strip()
    if record:
        yield record


_LISTS = "/var/lib/apt/lists"


def _translations():
    """``{(package, Description-md5): long description}`` from the apt lists' Translation-en."""
    files = sorted(glob.glob(f"{_LISTS}/*_i18n_Translation-en*"))
    if not files:
        raise SystemExit(f"no Translation-en in {_LISTS}: run "
                         f"'apt-get -o Acquire::Languages=en update' first (as root)")
    out = {}
    for path in files:
        text = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", path], check=True,
                              capture_output=True, text=True).stdout
        for record in _records(text):
            out[record["Package"], record["Description-md5"]] = record["Description-en"]
    return out


def _description(long):
    """The short description and the long one's first paragraph, as one clipped text."""
    lines = long.split("\n")
    short, body = lines[0].strip(), []
    for line in lines[1:]:
        if line.strip() == ".":
            break
        body.append(line.strip())
    short = short[:1].upper() + short[1:]
    return _clip(short.rstrip(".") + ". " + " ".join(body))


def _debian_sources():
    """``{source: [record, ...]}`` of every available binary package, its ``Description`` the
    long English description, sorted by package name."""
    dump = subprocess.run(["apt-cache", "dumpavail"], check=True, capture_output=True,
                          text=True).stdout
    long = _translations()
    sources = collections.defaultdict(list)
    for record in _records(dump):
        text = long.get((record["Package"], record.get("Description-md5")))
        if text:
            record["Description"] = text
            sources[record.get("Source", record["Package"]).split()[0]].append(record)
    return {s: sorted(r, key=lambda r: r["Package"]) for s, r in sorted(sources.items())}


def _per_source(label_of):
    """One ``(text, label, source)`` a source package: its first program package (by name)
    that ``label_of`` labels, if all its labelled program packages agree."""
    for source, records in _debian_sources().items():
        labelled = [(r, label_of(r)) for r in records if not _NOT_PROGRAM.search(r["Package"])]
        labelled = [(r, label) for r, label in labelled if label is not None]
        if labelled and len({label for _, label in labelled}) == 1:
            record, label = labelled[0]
            yield _description(record["Description"]), label, source


def debian_section():
    """``(text, label, source)``: a source package's description and its archive section."""
    yield from _per_source(lambda r: r.get("Section") if r.get("Section") in DEBIAN_SECTIONS
                           else None)


def _interface(record):
    tags = [t.strip() for t in record.get("Tag", "").split(",")]
    if "role::program" not in tags:
        return None
    return DEBIAN_INTERFACES.get(tuple(sorted(t for t in tags if t.startswith("interface::"))))


def debian_interface():
    """``(text, label, source)``: a program's description and its user interface (debtags)."""
    yield from _per_source(_interface)


# -- splitting and writing -----------------------------------------------------------------------

def _dedup(examples):
    """Drop repeated texts (keeping the first) and texts that come with two labels."""
    labels = collections.defaultdict(set)
    for text, label, _ in examples:
        labels[text].add(label)
    seen = set()
    for text, label, group in examples:
        if len(labels[text]) == 1 and text not in seen:
            seen.add(text)
            yield text, label, group


def _rank(seed, *parts):
    """A seeded pseudo-random sort key of ``parts``: the order of a group or a text depends on
    it alone, so a pool that gains or loses a member keeps every other member's place."""
    return hashlib.sha256(json.dumps([seed, *parts]).encode()).hexdigest()


def split_groups(examples, *, cap, seed):
    """Split ``(text, label, group)`` examples into :data:`SPLITS`.

    Per label, the groups are ordered by a seeded hash of their name (:func:`_rank`) and taken
    whole, in turn, until ``cap`` examples are taken; they are dealt to the splits in
    :data:`FRACTIONS` of that label's examples, so a group never straddles two splits. Returns
    ``{split: [(text, label)]}``, each split in seeded hash order of its texts.
    """
    by_label = collections.defaultdict(lambda: collections.defaultdict(list))
    for text, label, group in _dedup(examples):
        by_label[label][group].append(text)
    out = {split: [] for split in SPLITS}
    for label in sorted(by_label):
        groups = sorted(by_label[label], key=lambda g: _rank(seed, label, g))
        taken, count = [], 0
        for group in groups:
            if count >= cap:
                break
            taken.append(by_label[label][group])
            count += len(taken[-1])
        bounds = [round(count * sum(FRACTIONS[:i + 1])) for i in range(len(SPLITS))]
        done = 0
        for texts in taken:
            split = next(i for i, b in enumerate(bounds) if done < b)
            out[SPLITS[split]].extend((t, label) for t in texts)
            done += len(texts)
    return {split: sorted(rows, key=lambda row: _rank(seed, row[0]))
            for split, rows in out.items()}


def write_task(folder, splits, meta):
    """Write ``splits`` (``{split: [(text, label)]}``) and ``meta`` (with ``labels``) into
    ``folder``; the labels in the files are indices into ``meta["labels"]``."""
    folder.mkdir(parents=True, exist_ok=True)
    index = {label: i for i, label in enumerate(meta["labels"])}
    counts = {}
    for split, rows in splits.items():
        with open(folder / f"{split}.jsonl", "w", encoding="utf-8") as f:
            for text, label in rows:
                f.write(json.dumps({"text": text, "label": index[label]}, ensure_ascii=False)
                        + "\n")
        counts[split] = {label: sum(row[1] == label for row in rows) for label in meta["labels"]}
    meta = dict(meta, counts=counts)
    (folder / "meta.json").write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
    return meta


def _debian_release():
    """Origin, suite, codename, version and date of every apt list's ``InRelease`` used."""
    out = []
    for path in sorted(glob.glob(f"{_LISTS}/*_dists_*_InRelease")):
        text = pathlib.Path(path).read_text(errors="replace")
        fields = {}
        for key in ("Origin", "Suite", "Codename", "Version", "Date"):
            match = re.search(rf"^{key}: (.*)$", text, re.M)
            if match:
                fields[key] = match.group(1)
        out.append(fields)
    return out


_PYTHON = {"python": platform.python_version(),
           "licence": "PSF License Version 2 (the CPython standard library's docstrings)"}
_DEBIAN_LICENCE = ("each description is part of its package's debian/control and is "
                   "distributed under that package's licence (its debian/copyright); the "
                   "Packages and Translation-en indices are published by the Debian archive")

#: name -> (example generator, labels, per-label cap, source, licence).
BUILDERS = {
    "stdlib-topic": (stdlib_topic, tuple(STDLIB_TOPICS), 300,
                     "docstring sentences of the Python standard library, labelled by the "
                     "Library Reference chapter of their module", _PYTHON),
    "stdlib-kind": (stdlib_kind, ("module", "class", "function", "method"), 600,
                    "docstring summaries of the Python standard library, labelled by what "
                    "they document", _PYTHON),
    "debian-section": (debian_section, DEBIAN_SECTIONS, 300,
                       "Debian package descriptions (one program package a source package), "
                       "labelled by archive section", {"licence": _DEBIAN_LICENCE}),
    "debian-interface": (debian_interface, tuple(DEBIAN_INTERFACES.values()), 600,
                         "Debian program descriptions (one a source package), labelled by the "
                         "debtags interface:: facet", {"licence": _DEBIAN_LICENCE}),
}


def _fits(examples, tokenizer):
    """The examples whose text is at most :data:`MAX_TOKENS` tokens long."""
    lengths = [len(ids) for ids in tokenizer([text for text, _, _ in examples])["input_ids"]]
    return [ex for ex, n in zip(examples, lengths) if n <= MAX_TOKENS]


def build(name, out, seed, tokenizer):
    """Build task ``name`` into ``out/name`` (``tokenizer``: all-MiniLM-L6-v2's, to measure
    the texts); returns its meta."""
    examples_of, labels, cap, source, provenance = BUILDERS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                 # deprecated modules' attributes
        examples = list(examples_of())
    splits = split_groups(_fits(examples, tokenizer), cap=cap, seed=seed)
    provenance = dict(provenance)
    if name.startswith("debian"):
        provenance["debian"] = _debian_release()
    meta = {"name": name, "labels": list(labels), "source": source, "seed": seed,
            "cap_per_label": cap, "fractions": dict(zip(SPLITS, FRACTIONS)),
            "max_words": MAX_WORDS, "max_tokens": MAX_TOKENS, **provenance}
    return write_task(out / name, splits, meta)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m bertaccel.golden.tasks.build",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--task", action="append", choices=sorted(BUILDERS),
                        help="a task to build (repeat; default: all)")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path(__file__).parent)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    # Loaded first: transformers imports much of the standard library, and the stdlib tasks
    # read it after, whatever was asked.
    tokenizer = bert_ref.load_tokenizer()
    for name in args.task or list(BUILDERS):
        meta = build(name, args.out, args.seed, tokenizer)
        sizes = {s: sum(c.values()) for s, c in meta["counts"].items()}
        print(f"{name}: {sizes} labels {meta['labels']}")


if __name__ == "__main__":
    main()
