"""Cross-process cache of compiled C libraries, loaded only after their authenticity is verified.

Why: building a generated library takes 0.3-15 s; a second process that needs the same Lagrangian's
march should not pay that again. The project's rule is that nothing read from disk is executed unless
it is verified, so a library is never ``dlopen``-ed from the cache directory itself.

How (the trust model of :mod:`bea.cache`, reused): the library's bytes are stored as one entry of
:mod:`bea.cache` (part ``"clib"``), whose HMAC-SHA256 is keyed by the per-user secret ``secret.key``
(mode 0600) in the cache directory. :func:`fetch` reads the entry, verifies the HMAC over the bytes
*before* using them (then the stored key, the format and an ELF/Mach-O header), writes the verified
bytes into a fresh private temporary directory (mode 0700) and loads *that* copy, so what is loaded
is exactly what was verified (no window in which the file could be swapped). A mismatch, a foreign or
corrupt entry gives a :class:`~bea.cache.CacheWarning` and the caller recompiles and overwrites it.

The key names everything the bytes depend on: the SHA-256 of the flags and the source (the digest of
:func:`integrators.ccompile.load_library`), the compiler (path, size, modification time) and the host
(machine type and CPU flags, since vectorised libraries use the host's instructions). ``BEA_C_CACHE=0``
turns the on-disk part off (each process then compiles once, as before).

Concurrent builds (:func:`building`): processes that miss the same library at once (the workers of one test run,
the jobs of a sweep) would each run the compiler, for up to a minute each on the largest sources. So a build holds
an advisory ``flock`` on a per-library lock file next to the entry; a process that waits for it fetches what the
holder stored instead of compiling. The lock never decides correctness: after :data:`LOCK_WAIT_SECONDS` a waiter
builds anyway, a lock that cannot or should not be taken (no ``fcntl``, a cache that cannot store, a lock file that
is not this user's regular file) means building unlocked, and the kernel releases the lock of a process that dies.
"""

from __future__ import annotations

import base64
import contextlib
import ctypes
import hashlib
import os
import platform
import stat
import tempfile
import time
import warnings
from functools import lru_cache
from typing import Optional

from bea import cache
from bea.errors import CacheFormatError

try:
    import fcntl
except ImportError:  # not POSIX: builds are not serialised across processes
    fcntl = None

__all__ = ["fetch", "store", "enabled", "building", "LOCK_WAIT_SECONDS"]

#: version of this entry layout (part of every key)
FORMAT = 1
PART = "clib"
#: headers of a shared library: ELF (Linux), Mach-O 64-bit (macOS, both byte orders)
_HEADERS = (b"\x7fELF", b"\xcf\xfa\xed\xfe", b"\xfe\xed\xfa\xcf")
#: longest wait for another process's build of the same library (s): the compiler's own limit (300 s) and a margin,
#: so that a waiter only builds itself when the holder is stuck
LOCK_WAIT_SECONDS = 330.0


def enabled() -> bool:
    """Whether compiled libraries are shared across processes (``BEA_C_CACHE`` not ``"0"``)."""
    return os.environ.get("BEA_C_CACHE", "1") != "0"


@lru_cache(maxsize=8)
def _host() -> str:
    """Machine type and CPU feature flags (a library built with ``-march=native`` runs on this CPU only)."""
    flags = ""
    try:
        with open("/proc/cpuinfo", "rb") as fh:
            for line in fh.read(1 << 20).decode("ascii", "replace").splitlines():
                if line.startswith(("flags", "Features", "model name")):
                    flags += line
    except OSError:
        flags = platform.processor()
    return platform.machine() + ":" + hashlib.sha256(flags.encode()).hexdigest()[:16]


def _compiler(cc: str) -> str:
    try:
        st = os.stat(cc)
        return f"{os.path.realpath(cc)}:{st.st_size}:{int(st.st_mtime)}"
    except OSError:
        return cc


def _key(digest: str, cc: str) -> dict:
    return {"kind": "clib", "format": FORMAT, "digest": digest, "compiler": _compiler(cc), "host": _host()}


def _decode(body) -> bytes:
    """The library bytes of an authenticated entry (raises on anything else; :func:`bea.cache.load` then warns)."""
    data = base64.b64decode(body["lib"].encode("ascii"), validate=True)
    if not data.startswith(_HEADERS):
        raise CacheFormatError("not a shared library")
    if hashlib.sha256(data).hexdigest() != body["sha256"]:
        raise CacheFormatError("the library bytes do not match their checksum")
    return data


def fetch(digest: str, cc: str) -> Optional[ctypes.CDLL]:
    """The library for ``digest`` built by ``cc`` from the disk cache, verified and loaded; None if absent or
    refused (a refused entry gives a :class:`~bea.cache.CacheWarning`)."""
    if not enabled():
        return None
    data = cache.load(_key(digest, cc), part=PART, validate=_decode)
    if data is None:
        return None
    try:
        with tempfile.TemporaryDirectory(prefix="bea-cc-") as tmp:  # mode 0700: only this user can touch the copy
            path = os.path.join(tmp, "step.so")
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o700)
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            return ctypes.CDLL(path)  # the mapping stays valid after the directory is removed
    except OSError as err:  # a full or noexec temporary directory, or a library this machine cannot load: rebuild
        warnings.warn(f"a verified cached C library could not be loaded ({err}); it is rebuilt and replaced",
                      cache.CacheWarning, stacklevel=2)
        return None


def store(digest: str, cc: str, path: str) -> None:
    """Store the freshly built library at ``path`` for ``digest`` (authenticated, atomic; a cache directory that
    cannot be used only gives :mod:`bea.cache`'s one-time warning)."""
    if not enabled():
        return
    with open(path, "rb") as fh:
        data = fh.read()
    body = {"lib": base64.b64encode(data).decode("ascii"), "sha256": hashlib.sha256(data).hexdigest()}
    cache.save(_key(digest, cc), body, part=PART)


def _lock_fd(digest: str, cc: str) -> Optional[int]:
    """An open descriptor of the library's lock file (created 0600 in the cache directory), or None: no lock when the
    cache cannot store (its key cannot be created or read: builds that are not stored gain nothing from waiting) or
    when the file is not a regular file of this user's (another user could hold it to stall this user's builds)."""
    if fcntl is None or not enabled():
        return None
    path = cache.entry_path(_key(digest, cc), part=PART).with_suffix(".lock")
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not cache.can_store(path.parent):  # an unusable directory or key: fetch and store report it
            return None
        fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
    except OSError:
        return None
    st = os.fstat(fd)
    if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
        return fd
    os.close(fd)
    return None


def _acquire(fd: int, wait: float) -> bool:
    """Take the exclusive lock on ``fd``, polling (a blocking flock has no timeout) for up to ``wait`` seconds;
    whether it was taken."""
    deadline, pause = time.monotonic() + wait, 0.01
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
            time.sleep(pause)
            pause = min(2 * pause, 0.25)
        except OSError:  # a file system without locks
            return False


@contextlib.contextmanager
def building(digest: str, cc: str):
    """Serialise the build and store of ``digest`` across processes: holds the library's lock while the caller fetches
    again (another holder has likely stored it meanwhile) and builds if still absent. Without a lock (none available,
    or :data:`LOCK_WAIT_SECONDS` passed) the caller goes on unlocked."""
    fd, got = _lock_fd(digest, cc), False
    try:
        got = fd is not None and _acquire(fd, LOCK_WAIT_SECONDS)  # inside the try: an interrupt while waiting closes fd
        yield
    finally:
        if got:
            fcntl.flock(fd, fcntl.LOCK_UN)
        if fd is not None:
            os.close(fd)
