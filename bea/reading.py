"""Reading user files: regular files only, so that no read can block forever.

A named pipe (FIFO) in place of a file blocks ``open()`` until a writer appears, and a read of a character
device such as ``/dev/zero`` never ends; a socket cannot be opened at all and a directory cannot be read. Every
file the packages read on a user's behalf (the cache key and entries, snapshot files, model files, sweep
specifications and records) is therefore opened by :func:`open_regular`:

1. ``os.stat`` first: anything but a regular file is refused before it is opened (opening a device may
   already act on it);
2. ``os.open`` with ``O_NONBLOCK``: if the path was replaced by a FIFO in between, the open returns at once
   instead of waiting for a writer;
3. ``os.fstat`` of the open descriptor decides: it is the object that will be read, whatever the path names
   by now. Only then is the descriptor made blocking again (a no-op for regular files) and read.

A refusal is a :class:`bea.errors.NotRegularFileError` (a ``BeaError`` and an ``OSError``, so callers that
turn ``OSError`` into their own typed error keep doing so) naming the path, what it is, and the fix.
"""

from __future__ import annotations

import os
import stat
from typing import BinaryIO, Union

from .errors import NotRegularFileError

__all__ = ["open_regular", "read_regular", "NotRegularFileError"]

PathLike = Union[str, os.PathLike]

_KINDS = ((stat.S_ISFIFO, "a named pipe (FIFO)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"), (stat.S_ISDIR, "a directory"),
          (stat.S_ISLNK, "a symbolic link"))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _refuse(path: PathLike, what: str, mode: int) -> NotRegularFileError:
    # one argument only: OSError(errno, ...) would print "[Errno ...]" instead of the message
    return NotRegularFileError(f"{os.fspath(path)}: {what} must be a regular file, but this is {_kind(mode)}; it is not "
                               "read (a pipe or a device could block or never end): replace it by a regular file")


def open_regular(path: PathLike, what: str = "the file", *, follow_symlinks: bool = True) -> BinaryIO:
    """``path`` opened for binary reading, if it is a regular file (see the module docstring); otherwise
    :class:`NotRegularFileError`. ``what`` names the file in the message (e.g. ``"a snapshot file"``).
    ``follow_symlinks=False`` also refuses a symbolic link (the cache's secret key). ``FileNotFoundError``
    and other ``OSError`` of ``os.stat``/``os.open`` propagate unchanged."""
    st = os.stat(path, follow_symlinks=follow_symlinks)
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(path, what, st.st_mode)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # swapped after the stat: the descriptor is what would be read
            raise _refuse(path, what, mode)
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: PathLike, what: str = "the file", *, follow_symlinks: bool = True) -> bytes:
    """The bytes of ``path`` if it is a regular file (:func:`open_regular`)."""
    with open_regular(path, what, follow_symlinks=follow_symlinks) as fh:
        return fh.read()
