"""On-disk cache of derivation results and their generated torch source.

One JSON file per (kind, scheme, order, dim, engine version). It stores the coefficients in jet
variables (so SymPy objects and code can be rebuilt without deriving) and the generated source,
with a SHA-256 checksum over both. A file that fails to parse, whose key or engine version differ,
or whose checksum does not match is treated as absent: it is regenerated and overwritten, never
executed.

Location: ``$BEA_CACHE_DIR``, else ``$XDG_CACHE_HOME/bea``, else ``~/.cache/bea``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any, Dict, Optional

from .hseries import Q
from .jets import Jets


class CacheWarning(UserWarning):
    """A cache entry was unusable and is being regenerated."""


def cache_dir() -> Path:
    env = os.environ.get("BEA_CACHE_DIR")
    if env:
        return Path(env)
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "bea"


def _digest(payload: Dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(payload, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def entry_path(key: Dict[str, Any], directory: Optional[Path] = None) -> Path:
    d = directory or cache_dir()
    return d / f"{key['kind']}-{_digest(key)[:24]}.json"


def _key_to_json(key: tuple) -> list:
    return [list(x) if isinstance(x, tuple) else x for x in key]


def _key_from_json(raw: list) -> tuple:
    return tuple(tuple(x) if isinstance(x, list) else x for x in raw)


def encode_coeffs(jets: Jets, coeffs: Dict[int, object]) -> Dict[str, Any]:
    """JSON-able form of a derivation result: the variable table and, per power of h, a
    polynomial (``{"poly": ...}``) or a vector of them (``{"vector": [...]}``)."""

    def enc(p):
        return [[list(m), f"{int(c.numerator)}/{int(c.denominator)}"] for m, c in p.items()]

    return {
        "variables": [_key_to_json(k) for k in jets.kind],
        "coefficients": {
            str(k): ({"vector": [enc(p) for p in c]} if isinstance(c, list) else {"poly": enc(c)}) for k, c in coeffs.items()
        },
    }


def decode_coeffs(n: int, data: Dict[str, Any]):
    """Inverse of :func:`encode_coeffs`: a :class:`Jets` with the same variable table, and coefficients."""
    jets = Jets(n)
    keys = [_key_from_json(r) for r in data["variables"]]
    if keys[: len(jets.kind)] != jets.kind:
        raise ValueError("variable table of the cache entry does not match this engine")
    for key in keys[len(jets.kind) :]:
        jets._new(key)

    def dec(p):
        out = {}
        for m, c in p:
            num, den = c.split("/")
            out[tuple(m)] = Q(int(num), int(den))
        return out

    coeffs = {int(k): ([dec(p) for p in c["vector"]] if "vector" in c else dec(c["poly"])) for k, c in data["coefficients"].items()}
    return jets, coeffs


def save(key: Dict[str, Any], body: Dict[str, Any], directory: Optional[Path] = None) -> Path:
    path = entry_path(key, directory)
    path.parent.mkdir(parents=True, exist_ok=True)
    record = {"key": key, "body": body, "sha256": _digest({"key": key, "body": body})}
    # atomic replace: a crash mid-write never leaves a half-written entry under the final name
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".json")
    with os.fdopen(fd, "w") as fh:
        json.dump(record, fh)
    os.replace(tmp, path)
    return path


def load(key: Dict[str, Any], directory: Optional[Path] = None) -> Optional[Dict[str, Any]]:
    """The stored body for ``key``, or ``None`` if absent or unusable (with a warning if corrupt)."""
    path = entry_path(key, directory)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text())
        ok = (
            isinstance(record, dict)
            and record.get("key") == key
            and record.get("sha256") == _digest({"key": record.get("key"), "body": record.get("body")})
        )
    except (OSError, ValueError) as err:
        ok = False
        record = None
        reason = f"unreadable ({err.__class__.__name__})"
    else:
        reason = "key or checksum mismatch"
    if not ok:
        warnings.warn(f"bea cache entry {path} is corrupt or stale ({reason}); regenerating it", CacheWarning, stacklevel=3)
        return None
    return record["body"]
