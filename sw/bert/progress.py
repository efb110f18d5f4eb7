"""A plain-text progress bar with an ETA on stderr."""

import sys
import time

__all__ = ["TextProgress", "RateProgress"]


class TextProgress:
    """A plain-text progress bar with an ETA, for :func:`run_bert`'s ``progress``.

    On a terminal the bar is redrawn in place; otherwise a line is written at every tenth of the
    work, so that logs stay readable. The ETA extrapolates the elapsed time over the fraction of
    the estimated work done.

    Parameters
    ----------
    file : text stream
        Where the bar goes (``sys.stderr`` by default).
    width : int
        Characters of the bar.
    """

    def __init__(self, file=None, *, width=30):
        self.file = sys.stderr if file is None else file
        self.width = width
        self.start = time.monotonic()
        self.tty = bool(getattr(self.file, "isatty", lambda: False)())
        self.shown = -1

    @staticmethod
    def _clock(seconds):
        seconds = int(round(seconds))
        return f"{seconds // 60}:{seconds % 60:02d}"

    def __call__(self, done, total, label):
        fraction = min(1.0, done / total) if total else 1.0
        elapsed = time.monotonic() - self.start
        eta = elapsed * (1 - fraction) / fraction if fraction > 0 else 0.0
        filled = int(round(fraction * self.width))
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {100 * fraction:5.1f} %  "
                f"{label:<18} elapsed {self._clock(elapsed)}  ETA {self._clock(eta)}")
        if self.tty:
            end = "\n" if fraction >= 1.0 else ""
            print(f"\r{line}", end=end, file=self.file, flush=True)
        else:
            tenth = int(fraction * 10)
            if tenth > self.shown:
                self.shown = tenth
                print(line, file=self.file, flush=True)


class RateProgress:
    """A progress bar over a count of items (texts), with their rate and an ETA, on stderr.

    On a terminal the bar is redrawn in place; otherwise a line is written at every tenth.
    :meth:`restart` starts the clock again (after a build, so that the ETA counts the run).

    Parameters
    ----------
    file : text stream
        ``sys.stderr`` by default.
    unit : str
        What is counted.
    """

    def __init__(self, file=None, *, unit="texts", width=30):
        self.file = sys.stderr if file is None else file
        self.unit = unit
        self.width = width
        self.tty = bool(getattr(self.file, "isatty", lambda: False)())
        self.restart()

    def restart(self):
        self.start = time.monotonic()
        self.shown = -1

    def __call__(self, done, total):
        """``done`` of ``total`` items (``done`` may be fractional: part of a batch)."""
        fraction = min(1.0, done / total) if total else 1.0
        elapsed = time.monotonic() - self.start
        rate = done / elapsed if elapsed > 0 else 0.0
        eta = (total - done) / rate if rate > 0 else 0.0
        filled = int(round(fraction * self.width))
        shown = f"{int(done)}" if done == int(done) else f"{done:.1f}"
        line = (f"[{'#' * filled}{'.' * (self.width - filled)}] {shown}/{total} {self.unit}  "
                f"{rate:.1f} {self.unit}/s  elapsed {TextProgress._clock(elapsed)}  "
                f"ETA {TextProgress._clock(eta)}")
        if self.tty:
            print(f"\r{line}", end="\n" if fraction >= 1.0 else "", file=self.file, flush=True)
        elif int(fraction * 10) > self.shown:
            self.shown = int(fraction * 10)
            print(line, file=self.file, flush=True)
