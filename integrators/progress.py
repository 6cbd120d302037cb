"""Progress bars that also report when nobody watches a terminal.

``tqdm`` disables itself when its stream is not a terminal (``disable=None``), so a long step run from a
script, a pipe, a batch job or a CI log was silent: LSI velocities on 10^4 states took minutes without a
line. :func:`progress_bar` keeps tqdm's bar on a terminal and, elsewhere, prints plain lines to stderr at
most every :data:`LOG_INTERVAL` seconds, each with the count, the elapsed time and tqdm's estimate of the
time left. Short runs stay silent unless asked for.
"""

from __future__ import annotations

import sys
from typing import Optional

from tqdm import tqdm

__all__ = ["progress_bar", "LOG_INTERVAL"]

#: seconds between two lines when stderr is not a terminal
LOG_INTERVAL = 30.0


class _Lines:
    """A file for tqdm that turns its carriage-return redraws into one line per update (for logs)."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, text: str) -> None:
        text = text.replace("\r", "").strip()
        if text:
            self.stream.write(text + "\n")

    def flush(self) -> None:
        self.stream.flush()


def _terminal(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # closed or replaced streams
        return False


def progress_bar(total: int, desc: str, unit: str = "it", show: Optional[bool] = None, long: bool = True) -> tqdm:
    """A ``tqdm`` bar over ``total`` units on stderr.

    ``show``: ``True`` always, ``False`` never, ``None`` only when ``long`` (the caller's judgement that the
    run takes long enough to be worth reporting). On a terminal it is tqdm's redrawn bar; otherwise lines at
    most every :data:`LOG_INTERVAL` seconds, the first at the start (what is coming, and how much of it)."""
    stream = sys.stderr
    if show is False or (show is None and not long):
        return tqdm(total=total, disable=True)
    if _terminal(stream):
        return tqdm(total=total, desc=desc, unit=unit, leave=False, file=stream)
    return tqdm(total=total, desc=desc, unit=unit, leave=False, file=_Lines(stream), mininterval=LOG_INTERVAL,
                maxinterval=LOG_INTERVAL, ascii=True, dynamic_ncols=False, ncols=100)
