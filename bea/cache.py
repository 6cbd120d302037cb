"""On-disk cache of derivation results and their generated torch source.

Layout. One file per (key, part): the key is any JSON-able dict (kind, scheme fingerprint, order,
dimension, engine version... chosen by the caller), the part names what is stored (``"main"``: the
coefficients; ``"source"``: the generated code). Parts are separate files so that writers of different
parts of one entry never overwrite each other's work (no read-modify-write).

Trust model. A cache file is never trusted because of where it is. Each file is
``bea-cache-v2 <HMAC-SHA256 hex>\\n<canonical JSON payload>``; the HMAC is keyed with a per-user secret,
``secret.key`` in the cache directory (32 random bytes, hex, created atomically with mode 0600, refused
unless it is a regular file owned by this user and unreadable by others). Only someone who can read that
file (the user, root) can write an entry that verifies. :func:`load` checks, in order: the HMAC over
the payload bytes (before parsing them), the format version, that the stored key and part are the ones
asked for (an entry copied to another file name is refused), and finally the caller's ``validate``
(e.g. coefficients are integers over non-zero integers). Anything that fails is reported with a
:class:`CacheWarning` and treated as absent, so the caller regenerates and overwrites it; generated
source is executed only after all of these checks.

Atomicity. Writes go to a temporary file in the same directory, are flushed and ``fsync``-ed, then
``os.replace``-d over the final name: a reader sees the old file or the new complete one, never a part,
even if the writer is killed. Concurrent writers of the same part write the same bytes.

Unusable directory. If the directory cannot be created, read or written (a file in the way, read-only,
disk full, an insecure key file), a :class:`CacheUnavailableWarning` is issued once per directory and
process and the caller goes on without the cache: results are never lost because the cache failed.

Location: ``$BEA_CACHE_DIR``, else ``$XDG_CACHE_HOME/bea``, else ``~/.cache/bea``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import tempfile
import threading
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, Optional

from .errors import BeaError, BeaWarning, InternalError, NotRegularFileError
from .files import atomic_write
from .reading import open_regular, read_regular
from .coeff_storage import CacheFormatError, decode_coeffs, encode_coeffs  # noqa: F401 - part of this module's API

__all__ = [
    "CacheWarning",
    "CacheUnavailableWarning",
    "CacheInsecureWarning",
    "CacheFormatError",
    "cache_dir",
    "entry_path",
    "can_store",
    "load",
    "save",
    "encode_coeffs",
    "decode_coeffs",
]

FORMAT = 2
MAGIC = b"bea-cache-v2"
KEY_FILE = "secret.key"
_PART = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


class CacheWarning(BeaWarning):
    """A cache entry was unusable (corrupt, stale, not authenticated, invalid) and is being regenerated."""


class CacheUnavailableWarning(CacheWarning):
    """The cache directory cannot be used; bea goes on without the on-disk cache (issued once per directory)."""


class CacheInsecureWarning(CacheWarning):
    """The cache directory is writable by every user: others can delete or replace entries (replaced ones fail
    authentication and are regenerated, so results stay right; issued once per directory)."""


class _Unusable(BeaError):
    """The directory or its key file cannot be used (internal)."""


class _MalformedKey(_Unusable):
    """The key file's content is not a key: possibly still being written by another process (internal)."""


def cache_dir() -> Path:
    env = os.environ.get("BEA_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "bea"


def _canonical(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False).encode()


def entry_path(key: Dict[str, Any], directory: Optional[Path] = None, part: str = "main") -> Path:
    if not isinstance(part, str) or not _PART.match(part):
        raise InternalError(f"internal: invalid cache part name {part!r}")
    d = Path(directory) if directory is not None else cache_dir()
    digest = hashlib.sha256(_canonical({"format": FORMAT, "key": key})).hexdigest()[:32]
    label = re.sub(r"[^A-Za-z0-9_]", "_", str(key.get("kind", "entry")))[:40]
    return d / f"{label}-{digest}{'' if part == 'main' else '.' + part}.bea"


# ------------------------------------------------------------------ warnings

_warned: set = set()
_warn_lock = threading.Lock()


def _unavailable(directory: Path, err: BaseException) -> None:
    with _warn_lock:
        if str(directory) in _warned:
            return
        _warned.add(str(directory))
    warnings.warn(
        f"bea cache directory {directory} is unusable ({err}); continuing without the on-disk cache (results are "
        "derived in memory each time). Set BEA_CACHE_DIR to a writable directory of your own to enable it.",
        CacheUnavailableWarning,
        stacklevel=4,
    )


def _stale(path: Path, reason: str) -> None:
    warnings.warn(f"bea cache entry {path} is corrupt or stale ({reason}); regenerating it", CacheWarning, stacklevel=4)


# ------------------------------------------------------------------ secret key


def _read_secret(path: Path) -> bytes:
    """The key in ``path``; FileNotFoundError if absent, _Unusable if insecure or malformed."""
    try:  # a regular file only (a FIFO would block the open), and not through a symbolic link
        fh = open_regular(path, "the cache key", follow_symlinks=False)
    except FileNotFoundError:
        raise
    except NotRegularFileError as err:
        raise _Unusable(f"the key file {path} is not a regular file ({err})") from err
    except OSError as err:
        raise _Unusable(f"cannot open the key file {path} ({err.strerror or err}; a symbolic link is refused)") from err
    with fh:
        st = os.fstat(fh.fileno())
        if hasattr(os, "geteuid") and st.st_uid != os.geteuid():
            raise _Unusable(f"the key file {path} belongs to another user (uid {st.st_uid})")
        if st.st_mode & 0o077:
            raise _Unusable(f"the key file {path} is accessible to other users (mode {stat.S_IMODE(st.st_mode):o}; must be 600)")
        text = fh.read(200)
    try:
        secret = bytes.fromhex(text.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        secret = b""
    if len(secret) != 32:
        raise _MalformedKey(f"the key file {path} is malformed")
    return secret


def _create_secret(path: Path) -> None:
    """Create ``path`` with a fresh key, atomically: the complete file appears under its name or nothing
    does. If another process wins the race, its key stays (``os.link`` never replaces)."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".key-")  # mode 0600
    try:
        try:
            os.write(fd, secrets.token_hex(32).encode())
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        except OSError:  # no hard links on this file system: exclusive create, readers retry if short
            try:
                out = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
            except FileExistsError:
                return
            try:
                os.write(out, secrets.token_hex(32).encode())
                os.fsync(out)
            finally:
                os.close(out)
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass


def _check_directory(directory: Path) -> None:
    """A :class:`CacheInsecureWarning` (once per directory and process) if ``directory`` is writable by others."""
    try:
        mode = os.stat(directory).st_mode
    except OSError:
        return  # absent: created 0700 by save(); unreadable: reported by the caller
    if not mode & stat.S_IWOTH:
        return
    with _warn_lock:
        if str(directory) in _insecure:
            return
        _insecure.add(str(directory))
    warnings.warn(f"bea cache directory {directory} is writable by every user (mode {stat.S_IMODE(mode):o}): others can "
                  f"delete or replace its entries (replaced ones fail authentication and are regenerated). Run "
                  f"'chmod o-w {directory}' or set BEA_CACHE_DIR to a directory of your own", CacheInsecureWarning,
                  stacklevel=5)


_insecure: set = set()


def _secret(directory: Path, create: bool) -> Optional[bytes]:
    _check_directory(directory)
    path = directory / KEY_FILE
    last: Optional[_Unusable] = None
    for attempt in range(20):
        try:
            return _read_secret(path)
        except FileNotFoundError:
            if not create:
                return None
            _create_secret(path)
        except _MalformedKey as err:
            last = err  # possibly being written by the exclusive-create fallback
            time.sleep(0.05)
    raise last or _Unusable(f"cannot create the key file {path}")


def can_store(directory: Path) -> bool:
    """Whether entries can be stored in ``directory``: it is usable and its key exists or can be created (created
    here if absent)."""
    try:
        return _secret(Path(directory), create=True) is not None
    except (OSError, _Unusable):
        return False


def _mac(secret: bytes, payload: bytes) -> str:
    return hmac.new(secret, payload, hashlib.sha256).hexdigest()


# ------------------------------------------------------------------ files


def _write_all(fh, data: bytes) -> None:
    """Write ``data`` to the open temporary file (a separate function so fault tests can patch it)."""
    fh.write(data)


def _atomic_write(path: Path, data: bytes) -> None:
    with atomic_write(path, "wb") as fh:  # temporary file, fsync, os.replace (bea.files)
        _write_all(fh, data)


def save(key: Dict[str, Any], body: Dict[str, Any], directory: Optional[Path] = None, *, part: str = "main") -> Optional[Path]:
    """Store ``body`` (JSON-able) for ``key`` and ``part``, authenticated and atomically. Returns the path,
    or ``None`` if the directory is unusable (then a :class:`CacheUnavailableWarning` is issued once)."""
    path = entry_path(key, directory, part)
    payload = _canonical({"format": FORMAT, "key": key, "part": part, "body": body})
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        secret = _secret(path.parent, create=True)
        assert secret is not None
        _atomic_write(path, MAGIC + b" " + _mac(secret, payload).encode() + b"\n" + payload)
    except (OSError, _Unusable) as err:
        _unavailable(path.parent, err)
        return None
    return path


def load(key: Dict[str, Any], directory: Optional[Path] = None, *, part: str = "main",
         validate: Optional[Callable[[Any], Any]] = None) -> Any:
    """The stored body for ``key`` and ``part`` (or ``validate(body)`` if given), or ``None`` if absent or
    unusable. An entry that fails authentication or validation gives a :class:`CacheWarning`; ``validate``
    signals invalid content by raising any ``Exception``."""
    path = entry_path(key, directory, part)
    try:
        data = read_regular(path, "a cache entry")
    except FileNotFoundError:
        return None
    except NotRegularFileError as err:  # a FIFO or a directory where an entry belongs: regenerate over it
        _stale(path, str(err))
        return None
    except OSError as err:
        _unavailable(path.parent, err)
        return None
    try:
        secret = _secret(path.parent, create=False)
    except _Unusable as err:
        _unavailable(path.parent, err)
        return None
    if secret is None:
        _stale(path, "it cannot be authenticated: the directory has no key file")
        return None
    head, sep, payload = data.partition(b"\n")
    fields = head.split(b" ")
    if not sep or len(fields) != 2 or fields[0] != MAGIC:
        _stale(path, "not a bea cache file of this format")
        return None
    if not hmac.compare_digest(fields[1], _mac(secret, payload).encode()):
        _stale(path, "authentication failed: it was not written by bea with this user's key")
        return None
    try:
        record = json.loads(payload)
        ok = isinstance(record, dict) and record.get("format") == FORMAT and record.get("part") == part and record.get("key") == key
    except ValueError:
        ok = False
    if not ok:
        _stale(path, "key or format mismatch")
        return None
    body = record.get("body")
    if validate is None:
        return body
    try:
        return validate(body)
    except Exception as err:  # noqa: BLE001 - any failure means the content cannot be used
        _stale(path, f"invalid content: {type(err).__name__}: {str(err)[:200]}")
        return None
