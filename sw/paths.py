"""Output paths, checked before any work: one line that names the path and says why it cannot be
written.

Every command that writes (Verilog and IP folders, PNGs, JSON results, embeddings, simulator and
synthesis build folders, the compile cache) checks its paths here first, so that a bad path
costs nothing and never ends a long run in a traceback::

    folder = check_folder("build/ip", what="output folder")      # made if needed
    png = check_file("out/plot.png", what="--png")               # its folder made if needed
    npy = check_file("emb.npy", what="--output", suffixes=(".npy", ".jsonl"), make_folder=False)

A folder is made (with its parents) when it is missing, and probed by creating and removing a
temporary file in it: a permission, a read-only file system or a pseudo file system such as
``/proc`` all show up there, with the system's reason.
"""

import os
import tempfile
from pathlib import Path

__all__ = ["PathError", "check_folder", "check_file", "check_args"]


class PathError(ValueError):
    """An output path that cannot be written; the message names it and says why."""


def _nearest(path):
    """The nearest existing ancestor of ``path`` (``path`` itself when it exists)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def _probe(folder):
    """``None`` if a file can be made in ``folder``, else the system's reason."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".probe-"):
            pass
    except OSError as error:
        return error.strerror or str(error)
    return None


def _not_a_folder(path):
    return "is a file, not a folder" if path.is_file() else "is not a folder"


def check_folder(path, *, what="output folder", mode=0o777):
    """Make the folder ``path`` (and its parents) if needed and check that files can be
    written in it; return it as a :class:`~pathlib.Path`.

    Parameters
    ----------
    path : str or Path
    what : str
        How the message calls the path (``"output folder"``, ``"--build-root"``).
    mode : int
        The permissions of the folder if it is made (less the umask; its parents get the
        default).

    Raises
    ------
    PathError
        ``path`` or one of its parents is a file, or the folder cannot be made or written.
    """
    folder = Path(path)
    shown = f"{what} {str(path)!r}"
    if folder.exists() and not folder.is_dir():
        raise PathError(f"{shown} {_not_a_folder(folder)}")
    ancestor = _nearest(folder)
    if not ancestor.is_dir():
        raise PathError(f"{shown} cannot be made: {str(ancestor)!r} {_not_a_folder(ancestor)}")
    try:
        if not folder.is_dir():
            folder.parent.mkdir(parents=True, exist_ok=True)
            folder.mkdir(mode=mode, exist_ok=True)
    except OSError as error:
        raise PathError(f"{shown} cannot be made in {str(ancestor)!r}: "
                        f"{error.strerror or error}") from None
    reason = _probe(folder)
    if reason:
        raise PathError(f"{shown} is not writable: {reason}")
    return folder


def check_file(path, *, what="output", suffixes=None, make_folder=True):
    """Check that the file ``path`` can be written; return it as a :class:`~pathlib.Path`.

    Parameters
    ----------
    path : str or Path
    what : str
        How the message calls the path (``"--png"``, ``"--output"``).
    suffixes : tuple of str, optional
        The file must end in one of these.
    make_folder : bool
        Make the file's folder if it is missing (else a missing folder is an error).

    Raises
    ------
    PathError
        A suffix not in ``suffixes``; ``path`` is a folder, or an existing file that cannot be
        written or is read-only (no write bit: refused for root too); its folder is missing
        (without ``make_folder``), cannot be made, or is not writable.
    """
    file = Path(path)
    shown = f"{what} {str(path)!r}"
    if suffixes and file.suffix not in suffixes:
        raise PathError(f"{shown} must end in {' or '.join(suffixes)}")
    if file.is_dir():
        raise PathError(f"{shown} is a folder")
    folder = file.parent
    if make_folder:
        try:
            check_folder(folder, what="its folder")
        except PathError as error:
            raise PathError(f"{shown}: {error}") from None
    elif not folder.is_dir():
        why = "does not exist" if not folder.exists() else "is not a folder"
        raise PathError(f"{shown}: the folder {str(folder)!r} {why}")
    else:
        reason = _probe(folder)
        if reason:
            raise PathError(f"{shown}: the folder {str(folder)!r} is not writable ({reason})")
    if file.exists() and not os.access(file, os.W_OK):
        raise PathError(f"{shown} exists and is not writable")
    if file.exists() and not file.stat().st_mode & 0o222:  # read-only, even for root
        raise PathError(f"{shown} exists and is read-only")
    return file


def check_args(parser, *, files=None, folders=None):
    """For a script with an :class:`argparse.ArgumentParser`: check its output ``files`` and
    ``folders`` (each ``{what: path}``; a ``None`` path is skipped) with :func:`check_file`
    and :func:`check_folder`, or exit with status 2 and one line on stderr."""
    try:
        for what, path in (folders or {}).items():
            if path is not None:
                check_folder(path, what=what)
        for what, path in (files or {}).items():
            if path is not None:
                check_file(path, what=what)
    except PathError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
