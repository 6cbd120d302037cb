r"""One JSON record per task: identity, canonical form, checksum, atomic write, verified read.

A record is a JSON object (:data:`FORMAT`) with the task's ``kind`` and ``params``, its ``task_id``
and derived ``seed``, ``status`` (``"ok"`` or ``"failed"``), ``metrics``, ``config`` (the full
configuration that ran), ``info``, ``error`` (type, message, traceback), ``timings`` (seconds),
``started``/``finished`` (UTC), ``host``, ``versions``, ``resources`` and ``checksum``.

Identity. The canonical form of a value is its JSON text with sorted keys and no spaces (floats
in Python's shortest round-trip ``repr``, so two equal parameter sets give the same text). Then

* ``task_id = sha256("task\0" + canonical([kind, params]))`` (first 20 hex digits), the file name;
* ``seed = int(sha256("seed\0" + canonical([kind, params]))[:8 hex digits]) mod 2^31``,

so a grid point's random draws depend on its parameters only, never on where, when or in which
order it ran.

Integrity. ``checksum`` is the SHA-256 of the canonical text of the record without it. A record
whose file does not parse, whose checksum does not match, whose ``task_id`` is not the one of its
``kind`` and ``params``, or that lacks a field, is *corrupt*: it is never trusted, and the task runs
again. (The checksum detects truncation and corruption, not deliberate forgery: a record is data,
never executed.) Non-finite floats are stored as ``{"$float": "nan" | "inf" | "-inf"}`` so that the
files stay standard JSON.

Writes are atomic (:func:`bea.files.atomic_write_bytes`: a temporary file in the same folder, ``fsync``,
then ``os.replace``) -- a reader sees the old file or the new one, never half of one -- and follow the
user's umask.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Tuple

from bea import files
from bea.errors import BeaValueError
from bea.reading import read_regular

__all__ = ["FORMAT", "canonical", "task_id", "derived_seed", "seal", "write_record", "read_record", "scan",
           "encode", "decode", "CorruptRecord"]

FORMAT = "bea-sweep-record/1"
STATUSES = ("ok", "failed")
REQUIRED = ("format", "task_id", "kind", "params", "seed", "status", "metrics", "timings", "host", "versions", "checksum")


class CorruptRecord(BeaValueError):
    """A record file that cannot be trusted (the message says why)."""


def encode(x: Any) -> Any:
    """``x`` with non-finite floats tagged (``{"$float": "nan"}``), tuples as lists."""
    if isinstance(x, float):
        if math.isfinite(x):
            return x
        return {"$float": "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")}
    if isinstance(x, dict):
        return {str(k): encode(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [encode(v) for v in x]
    return x


def decode(x: Any) -> Any:
    """Inverse of :func:`encode`."""
    if isinstance(x, dict):
        if set(x) == {"$float"} and x["$float"] in ("nan", "inf", "-inf"):
            return float(x["$float"])
        return {k: decode(v) for k, v in x.items()}
    if isinstance(x, list):
        return [decode(v) for v in x]
    return x


def canonical(x: Any) -> str:
    """Canonical JSON text of ``x`` (sorted keys, no spaces, non-finite floats tagged)."""
    return json.dumps(encode(x), sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _digest(tag: str, kind: str, params: Dict[str, Any]) -> str:
    return hashlib.sha256((tag + "\0" + canonical([kind, params])).encode()).hexdigest()


def task_id(kind: str, params: Dict[str, Any]) -> str:
    """The task's identity (20 hex digits) from its kind and parameters."""
    return _digest("task", kind, params)[:20]


def derived_seed(kind: str, params: Dict[str, Any]) -> int:
    """A seed in ``[0, 2^31)`` from the task's kind and parameters (independent of :func:`task_id`'s digest)."""
    return int(_digest("seed", kind, params)[:8], 16) % (2**31)


def _checksum(record: Dict[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "checksum"}
    return hashlib.sha256(canonical(body).encode()).hexdigest()


def seal(record: Dict[str, Any]) -> Dict[str, Any]:
    """The record with its ``format`` and ``checksum`` set."""
    out = dict(record)
    out["format"] = FORMAT
    out.pop("checksum", None)
    out["checksum"] = _checksum(out)
    return out


def write_record(folder: Path, record: Dict[str, Any]) -> Path:
    """Seal ``record`` and write it to ``folder/<task_id>.json`` atomically; returns the path."""
    sealed = seal(record)
    path = Path(folder) / f"{sealed['task_id']}.json"
    text = json.dumps(encode(sealed), sort_keys=True, indent=1, ensure_ascii=True, allow_nan=False) + "\n"
    files.atomic_write_bytes(path, text.encode())
    return path


def read_record(path: Path) -> Dict[str, Any]:
    """Read and verify one record; raises :class:`CorruptRecord` naming the problem."""
    path = Path(path)
    try:
        raw = json.loads(read_regular(path, "a sweep record").decode("utf-8"), parse_constant=_reject_constant)
    except (OSError, UnicodeDecodeError, ValueError) as err:
        raise CorruptRecord(f"{path.name}: unreadable or not JSON ({err})") from None
    if not isinstance(raw, dict):
        raise CorruptRecord(f"{path.name}: not a JSON object")
    missing = [k for k in REQUIRED if k not in raw]
    if missing:
        raise CorruptRecord(f"{path.name}: missing field(s) {', '.join(missing)}")
    if raw["format"] != FORMAT:
        raise CorruptRecord(f"{path.name}: format {raw['format']!r}, expected {FORMAT!r}")
    if raw["checksum"] != _checksum(raw):
        raise CorruptRecord(f"{path.name}: checksum mismatch (the file was changed or damaged)")
    rec = decode(raw)
    if not isinstance(rec["kind"], str) or not isinstance(rec["params"], dict):
        raise CorruptRecord(f"{path.name}: kind or params of the wrong type")
    if rec["task_id"] != task_id(rec["kind"], rec["params"]) or path.stem != rec["task_id"]:
        raise CorruptRecord(f"{path.name}: task_id does not match the record's kind and parameters")
    if rec["status"] not in STATUSES:
        raise CorruptRecord(f"{path.name}: status {rec['status']!r} is not one of {STATUSES}")
    return rec


def _reject_constant(name: str):
    raise BeaValueError(f"non-standard JSON constant {name}")


def scan(folder: Path, wanted: Optional[Iterable[str]] = None) -> Tuple[Dict[str, Dict[str, Any]], List[str]]:
    """Verified records under ``folder`` (``task_id -> record``), only those in ``wanted`` if given,
    and the problems of the corrupt ones (leftover temporary files of interrupted writes are removed)."""
    folder = Path(folder)
    good: Dict[str, Dict[str, Any]] = {}
    problems: List[str] = []
    if not folder.is_dir():
        return good, problems
    wanted = None if wanted is None else set(wanted)
    for tmp in folder.glob(".*.tmp"):
        try:
            tmp.unlink()
        except OSError:  # pragma: no cover - e.g. removed meanwhile
            pass
    for path in sorted(folder.glob("*.json")):
        if wanted is not None and path.stem not in wanted:
            continue
        try:
            rec = read_record(path)
        except CorruptRecord as err:
            problems.append(str(err))
            continue
        good[rec["task_id"]] = rec
    return good, problems
