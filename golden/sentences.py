"""Real English sentences to check the accelerator against, with their provenance.

The sentences are taken verbatim from the docstrings of Python standard-library modules (CPython
3.11.7): the project did not write them. They were extracted once, with the prose filter of
:mod:`bertaccel.golden.accuracy` (paragraphs of a module's and its public functions' and classes'
docstrings, doctest and indented lines dropped, split at sentence ends, 6 to 60 words, starting
with a capital letter and ending with a period, mostly letters), taking the modules in turn, and
are frozen here so that the set does not change with the Python version.

Two disjoint sets:

* :func:`evaluation_sentences` (64) from ``textwrap``, ``json``, ``collections``, ... ``io``
  (the modules of :data:`bertaccel.golden.accuracy.STDLIB_MODULES`): the text the accuracy
  figures are measured on;
* :func:`calibration_sentences` (32) from ``asyncio``, ``typing``, ``os``, ``socket`` and 14
  more: the sample text the int8 scales are calibrated on. No sentence (and no module) is in
  both, so the accuracy is measured on text the calibration never saw.

Their lengths differ (10 to 76 tokens with all-MiniLM-L6-v2's tokenizer, [CLS] and [SEP]
included), so every batch of them is a padding case.
"""

__all__ = ["evaluation_sentences", "calibration_sentences", "sentence_sources",
           "EVALUATION_MODULES", "CALIBRATION_MODULES"]

_EVALUATION = [
    ('textwrap',
     'The public interface consists of the wrap() and fill() methods; the other methods are '
     'just there for subclasses to override in order to tweak the default behaviour.'),
    ('json',
     'To extend this to recognize other objects, subclass and implement a ``.default()`` '
     'method with another method that returns a serializable object for ``o`` if possible, '
     'otherwise it should call the superclass implementation (to raise ``TypeError``).'),
    ('collections',
     'This module implements specialized container datatypes providing alternatives to '
     "Python's general purpose built-in containers, dict, list, set, and tuple."),
    ('argparse',
     'Information about how to convert command line strings to Python objects.'),
    ('logging',
     'Based on PEP 282 and comments thereto in comp.lang.python.'),
    ('difflib',
     'Module difflib -- helpers for computing deltas between objects.'),
    ('heapq',
     'Heap queue algorithm (a.k.a. priority queue).'),
    ('pickle',
     'Create portable serialized representations of Python objects.'),
    ('shlex',
     'A lexical analyzer class for simple shell-like syntaxes.'),
    ('fractions',
     'In the two-argument form of the constructor, Fraction(8, 6) will produce a rational '
     'number equivalent to 4/3.'),
    ('decimal',
     'The context affects almost all operations and controls rounding, Over/Underflow, raising '
     'of exceptions and much more.'),
    ('inspect',
     'Get useful information from live Python objects.'),
    ('functools',
     'If *maxsize* is set to None, the LRU features are disabled and the cache can grow '
     'without bound.'),
    ('subprocess',
     'This module allows you to spawn processes, connect to their input/output/error pipes, '
     'and obtain their return codes.'),
    ('threading',
     "Thread module emulating a subset of Java's threading model."),
    ('unittest',
     "Python unit testing framework, based on Erich Gamma's JUnit and Kent Beck's Smalltalk "
     'testing framework (used with permission).'),
    ('csv',
     'This module provides classes that assist in the reading and writing of Comma Separated '
     'Value (CSV) files, and implements the interface described by PEP 305.'),
    ('string',
     'A string class for supporting $-substitutions.'),
    ('random',
     'Random number generator base class used by bound module functions.'),
    ('statistics',
     'This module provides functions for calculating statistics of data, including averages, '
     'variance, and standard deviation.'),
    ('calendar',
     'Note when comparing these calendars to the ones printed by cal(1): By default, these '
     'calendars have Monday as the first day of the week, and Sunday as the last (the European '
     'convention).'),
    ('pathlib',
     'PurePath subclass that can make system calls.'),
    ('contextlib',
     'An abstract base class for asynchronous context managers.'),
    ('dataclasses',
     'Return the fields of a dataclass instance as a new dictionary mapping field names to '
     'field values.'),
    ('tempfile',
     'This module provides generic, low- and high-level interfaces for creating temporary '
     'files and directories.'),
    ('shutil',
     'Utility functions for copying and archiving files and directory trees.'),
    ('pprint',
     'Support to pretty-print lists, tuples, & dictionaries recursively.'),
    ('copy',
     'Generic (shallow and deep) copying operations.'),
    ('io',
     'The io module provides the Python interfaces to stream handling.'),
    ('textwrap',
     "If you want to completely replace the main wrapping algorithm, you'll probably have to "
     'override _wrap_chunks().'),
    ('json',
     'Otherwise, all such characters are escaped in JSON strings.'),
    ('collections',
     'A ChainMap groups multiple dicts (or other mappings) together to create a single, '
     'updateable view.'),
    ('argparse',
     'Action objects are used by an ArgumentParser to represent the information needed to '
     'parse a single argument from one or more strings from the command line.'),
    ('logging',
     'A formatter suitable for formatting a number of records.'),
    ('difflib',
     'Differ is a class for comparing sequences of lines of text, and producing human-readable '
     'differences or deltas.'),
    ('heapq',
     'For the sake of comparison, non-existing elements are considered to be infinite.'),
    ('pickle',
     'See module copyreg for a mechanism for registering custom picklers.'),
    ('shlex',
     'Return a shell-escaped string from *split_command*.'),
    ('decimal',
     "Construct a new Decimal object. 'value' can be an integer, string, tuple, or another "
     'Decimal object.'),
    ('inspect',
     'This module encapsulates the interface provided by the internal special attributes '
     '(co_*, im_*, tb_*, etc.) in a friendlier fashion.'),
    ('functools',
     'If *typed* is True, arguments of different types will be cached separately.'),
    ('subprocess',
     'For a complete description of this module see the Python documentation.'),
    ('threading',
     'Useful for synchronizing a fixed number of threads at known synchronization points.'),
    ('unittest',
     'IN NO EVENT SHALL THE AUTHOR BE LIABLE TO ANY PARTY FOR DIRECT, INDIRECT, SPECIAL, '
     'INCIDENTAL, OR CONSEQUENTIAL DAMAGES ARISING OUT OF THE USE OF THIS CODE, EVEN IF THE '
     'AUTHOR HAS BEEN ADVISED OF THE POSSIBILITY OF SUCH DAMAGE.'),
    ('csv',
     'Although many CSV files are simple to parse, the format is not formally defined by a '
     'stable specification and is subtle enough that parsing lines of a CSV file with '
     'something like line.split(",") is bound to fail.'),
    ('string',
     'Split the argument into words using split, capitalize each word using capitalize, and '
     'join the capitalized words using join.'),
    ('random',
     "Used to instantiate instances of Random to get generators that don't share state."),
    ('statistics',
     'Calculate the median, or 50th percentile, of data grouped into class intervals centred '
     'on the data values provided.'),
    ('calendar',
     "This class doesn't do any formatting."),
    ('pathlib',
     'Path represents a filesystem path but unlike PurePath, also offers methods to do system '
     'calls on path objects.'),
    ('contextlib',
     'An abstract base class for context managers.'),
    ('dataclasses',
     "If given, 'dict_factory' will be used instead of built-in dict."),
    ('tempfile',
     'All of the interfaces provided by this module can be used without fear of race '
     "conditions except for 'mktemp'.  'mktemp' is subject to race conditions and should not "
     'be used; it is provided for backward compatibility only.'),
    ('shutil',
     "XXX The functions here don't copy the resource fork or other metadata on Mac."),
    ('pprint',
     'Very simple, but useful, especially in debugging data structures.'),
    ('copy',
     'For module specific errors, copy.Error is raised.'),
    ('io',
     'The builtin open function is defined in this module.'),
    ('textwrap',
     'Remove any common leading whitespace from every line in `text`.'),
    ('json',
     'If ``check_circular`` is false, then the circular reference check for container types '
     'will be skipped and a circular reference will result in an ``RecursionError`` (or '
     'worse).'),
    ('collections',
     'The underlying mappings are stored in a list.'),
    ('argparse',
     'The keyword arguments to the Action constructor are also all attributes of Action '
     'instances.'),
    ('logging',
     'A handler class which writes formatted logging records to disk files.'),
    ('difflib',
     'Differ uses SequenceMatcher both to compare sequences of lines, and to compare sequences '
     'of characters within similar (near-matching) lines.'),
    ('heapq',
     'The interesting property of a heap is that a[0] is always its smallest element.'),
]

_CALIBRATION = [
    ('asyncio',
     'Abstract base class for monitoring child processes.'),
    ('typing',
     'The typing module: Support for gradual typing as defined by PEP 484 and subsequent PEPs.'),
    ('os',
     "OS routines for NT or Posix depending on what system we're on."),
    ('socket',
     'This module provides socket operations and some related functions.'),
    ('configparser',
     'A configuration file consists of sections, lead by a "[section]" header, and followed by '
     '"name: value" entries, with continuations and such in the style of RFC 822.'),
    ('locale',
     "The module provides low-level access to the C lib's locale APIs and adds high level "
     'number formatting APIs as well as a locale aliasing engine to complement these.'),
    ('doctest',
     'Module doctest -- a framework for running examples in docstrings.'),
    ('pdb',
     "The debugger's prompt is '(Pdb) '."),
    ('traceback',
     'Extract, format and print information about Python stack traces.'),
    ('codecs',
     'Defines the interface for stateless encoders/decoders.'),
    ('base64',
     'Decode the Ascii85 encoded bytes-like object or ASCII string b.'),
    ('platform',
     'Queries the given executable (defaults to the Python interpreter binary) for various '
     'architecture information.'),
    ('pkgutil',
     'ImpImporter(dirname) produces a PEP 302 finder that searches that directory.'),
    ('fileinput',
     'Helper class to quickly write a loop over all standard input files.'),
    ('tokenize',
     'It decodes the bytes according to PEP-0263 for determining source file encoding.'),
    ('itertools',
     'Functional tools for creating and using iterators.'),
    ('smtplib',
     'This class manages a connection to an SMTP or ESMTP server.'),
    ('timeit',
     'Tool for measuring execution time of small code snippets.'),
    ('asyncio',
     'Objects derived from this class monitor a collection of subprocesses and report their '
     'termination or interruption by a signal.'),
    ('typing',
     'Any name not present in __all__ is an implementation detail that may be changed without '
     'notice.'),
    ('os',
     "Programs that import and use 'os' stand a better chance of being portable between "
     'different platforms.'),
    ('socket',
     'On Unix, it supports IP (Internet Protocol) and Unix domain sockets.'),
    ('configparser',
     'Intrinsic defaults can be specified by passing them into the ConfigParser constructor as '
     'a dictionary.'),
    ('locale',
     'The aliasing engine includes support for many commonly used locale names and maps them '
     "to values suitable for passing to the C lib's setlocale() function."),
    ('doctest',
     "This won't display anything unless an example fails, in which case the failing "
     'example(s) and the cause(s) of the failure(s) are printed to stdout (why not stderr? '
     'because stderr is a lame hack <0.2 wink>), and the final line of output is "Test '
     'failed.".'),
    ('pdb',
     'This will stop in the first function call in <a statement>.'),
    ('traceback',
     'Information about a single frame from a traceback.'),
    ('codecs',
     'The .encode()/.decode() methods may use different error handling schemes by providing '
     'the errors argument.'),
    ('base64',
     'This feature is not supported by the "standard" Adobe encoding.'),
    ('platform',
     'Returns a tuple (bits, linkage) which contains information about the bit architecture '
     'and the linkage format used for the executable.'),
    ('pkgutil',
     'ImpImporter(None) produces a PEP 302 finder that searches the current sys.path, plus any '
     'modules that are frozen or built-in.'),
    ('fileinput',
     'This iterates over the lines of all files listed in sys.argv[1:], defaulting to '
     'sys.stdin if the list is empty.'),
]

#: The modules of the evaluation sentences, in the order they were taken.
EVALUATION_MODULES = tuple(dict.fromkeys(module for module, _ in _EVALUATION))
#: The modules of the calibration sentences, in the order they were taken.
CALIBRATION_MODULES = tuple(dict.fromkeys(module for module, _ in _CALIBRATION))


def _take(pool, n, what):
    if n is None:
        n = len(pool)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= len(pool):
        raise ValueError(f"n must be an int from 1 to {len(pool)} ({what} sentences), not {n!r}")
    return [sentence for _, sentence in pool[:n]]


def evaluation_sentences(n=None):
    """The first ``n`` (default: all 64) evaluation sentences, always in the same order.

    Raises
    ------
    ValueError
        If ``n`` is not from 1 to 64.
    """
    return _take(_EVALUATION, n, "evaluation")


def calibration_sentences(n=None):
    """The first ``n`` (default: all 32) calibration sentences, always in the same order.

    Raises
    ------
    ValueError
        If ``n`` is not from 1 to 32.
    """
    return _take(_CALIBRATION, n, "calibration")


def sentence_sources(kind="evaluation"):
    """``[(module, sentence), ...]`` of the ``"evaluation"`` or ``"calibration"`` set."""
    if kind == "evaluation":
        return list(_EVALUATION)
    if kind == "calibration":
        return list(_CALIBRATION)
    raise ValueError(f"kind must be 'evaluation' or 'calibration', not {kind!r}")
