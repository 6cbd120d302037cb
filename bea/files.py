"""Atomic file writes: a reader sees the old file or the complete new one, never a partial file.

Every file the packages write (snapshot data, figures, ``results.json``, saved results) goes through
:func:`atomic_write`: the content is written to a temporary file in the *same directory* (so that the
final rename does not cross file systems), flushed and ``fsync``-ed, then moved over the target with
:func:`os.replace` (atomic on POSIX and Windows), and the directory is ``fsync``-ed so that the rename
itself survives a crash. If anything fails before the rename -- an exception, a full disk -- the
temporary file is removed and the target is untouched. A process killed outright (``SIGKILL``, power
loss) can leave a temporary file named ``.<name>.<random>.tmp`` behind; it is never read as data (its
suffix is ``.tmp``) and can be deleted.

Permissions: :func:`tempfile.mkstemp` creates the temporary file with mode ``0600``, and the rename keeps
it, so without care every output would be private. The file is therefore given ``0666 & ~umask`` -- what
:func:`open` would have given it -- before the rename (the umask is read from ``/proc/self/status`` where
available, so the process-wide umask is never changed, even for an instant). Only secrets ask for
``private=True`` and keep ``0600``.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import IO, Callable, Iterator, Union

from .errors import BeaIsADirectoryError, BeaValueError

__all__ = ["atomic_write", "atomic_write_text", "atomic_write_bytes", "atomic_save", "atomic_savefig", "umask"]

PathLike = Union[str, os.PathLike]


@contextlib.contextmanager
def atomic_write(path: PathLike, mode: str = "w", *, private: bool = False, **open_kwargs) -> Iterator[IO]:
    """Open a temporary file next to ``path`` for writing (``mode`` ``"w"`` or ``"wb"``; ``open_kwargs``
    as for :func:`open`, e.g. ``newline=""``); on a normal exit of the block it replaces ``path``
    atomically (see the module docstring), on an exception it is removed and ``path`` is unchanged.
    The file gets the mode :func:`open` would give it (``0666 & ~umask``), or ``0600`` if ``private``."""
    if mode not in ("w", "wb"):
        raise BeaValueError(f"mode must be 'w' or 'wb', got {mode!r}")
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise BeaIsADirectoryError(f"{path}: is a directory; give a file name")
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        if "b" not in mode:
            open_kwargs.setdefault("encoding", "utf-8")
        with os.fdopen(fd, mode, **open_kwargs) as fh:
            yield fh
            fh.flush()
            if hasattr(os, "fchmod"):  # POSIX (Windows has no mode bits to fix)
                os.fchmod(fh.fileno(), 0o600 if private else 0o666 & ~umask())
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_dir(directory)


def umask() -> int:
    """The process's umask, read without changing it: ``/proc/self/status`` (Linux 4.7+); elsewhere
    :func:`os.umask` must set it to read it, so it is set back at once."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o077)
    os.umask(old)
    return old


def _fsync_dir(directory: Path) -> None:
    """Make the rename durable (POSIX); a no-op where directories cannot be opened (Windows)."""
    try:
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


def atomic_write_text(path: PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically; returns the path."""
    with atomic_write(path, "w") as fh:
        fh.write(text)
    return Path(path)


def atomic_write_bytes(path: PathLike, data: bytes, *, private: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically; returns the path."""
    with atomic_write(path, "wb", private=private) as fh:
        fh.write(data)
    return Path(path)


def atomic_save(path: PathLike, save: Callable[[IO], None]) -> Path:
    """Call ``save(fileobj)`` on a binary temporary file and replace ``path`` with it atomically (for
    writers that take a file object: ``np.savez``, ``torch.save``, ``fig.savefig``)."""
    with atomic_write(path, "wb") as fh:
        save(fh)
    return Path(path)


def atomic_savefig(fig, path: PathLike, **kwargs) -> Path:
    """``fig.savefig`` to ``path`` atomically; the format comes from the suffix of ``path`` (the
    temporary file's own suffix would otherwise decide it)."""
    path = Path(path)
    kwargs.setdefault("format", path.suffix.lstrip(".").lower() or None)
    return atomic_save(path, lambda fh: fig.savefig(fh, **kwargs))
