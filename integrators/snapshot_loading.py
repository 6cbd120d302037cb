r"""Reading position-only snapshot files: :func:`load_snapshots` (re-exported by :mod:`integrators.data`).

Everything read is validated (finite numbers, consistent shapes, a uniform time grid within a
tolerance); a problem raises :class:`SnapshotError` naming the file, the row and what is wrong.

File formats:

``.csv``
    A header row, then one row per time. Columns: ``t`` (or ``time``); the positions ``q`` (n = 1) or
    ``q0, q1, ...`` (also ``q1, q2, ...`` or ``q_0, ...``, ordered by their number); optionally a
    trajectory id ``traj`` (or ``trajectory``, ``trajectory_id``, ``id``) when one file holds several
    trajectories. Other columns are ignored.
``.npz``
    Arrays ``t`` and ``q``: ``q`` of shape ``(T,)`` or ``(T, n)`` (one trajectory) or
    ``(n_traj, T, n)`` with ``t`` of shape ``(T,)`` or ``(n_traj, T)``; or flat rows ``t (R,)``,
    ``q (R, n)`` with a trajectory id array ``traj (R,)``.

A path may be a file, a directory (every ``.csv`` and ``.npz`` in it, sorted by name: e.g. one file
per trajectory) or a list of files. Nothing read is executed (``.npz`` without pickles).
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from pathlib import Path
from typing import List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from bea.errors import BeaTypeError, BeaValueError

from bea.reading import open_regular, read_regular

__all__ = ["load_snapshots", "Snapshots", "SnapshotError"]

PathLike = Union[str, os.PathLike]


class SnapshotError(BeaValueError):
    """Invalid snapshot data; the message names the file, the row and the problem."""


class Snapshots(NamedTuple):
    """Validated snapshot data."""

    q: torch.Tensor  #: (n_traj, T, n) positions, float64
    h: float  #: the time step
    t0: torch.Tensor  #: (n_traj,) start time of each trajectory


class _Traj(NamedTuple):
    where: str  # "file" or "file, trajectory id"
    t: np.ndarray  # (T,)
    q: np.ndarray  # (T, n)
    rows: List[str]  # a label per time row, e.g. "line 7" or "row 3"


_TIME = ("t", "time")
_ID = ("traj", "trajectory", "trajectory_id", "id")
_Q = re.compile(r"^q_?(\d+)?$")


def _files(path) -> List[Path]:
    if isinstance(path, (list, tuple)):
        out = [Path(p) for p in path]
    else:
        if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)):
            raise BeaTypeError(f"path must be a file or directory name (str or os.PathLike) or a list of them, got {type(path).__name__}")
        p = Path(path)
        if p.is_dir():
            out = sorted(x for x in p.iterdir() if x.suffix in (".csv", ".npz") and not x.is_dir())
            if not out:
                raise SnapshotError(f"{p}: the directory contains no .csv or .npz files")
        else:
            out = [p]
    if not out:
        raise SnapshotError("no files given")
    for f in out:
        if f.is_dir():
            raise SnapshotError(f"{f}: is a directory, not a .csv or .npz file; pass the directory itself (not inside a list) "
                                "to read every .csv and .npz file in it")
        if not f.exists():
            raise SnapshotError(f"{f}: no such file")
        if f.suffix not in (".csv", ".npz"):
            raise SnapshotError(f"{f}: unknown format {f.suffix!r}; use .csv or .npz")
    return out


def _csv_rows(f: Path) -> List[List[str]]:
    """The rows of a UTF-8 CSV file (a UTF-8 byte-order mark is accepted and dropped); other encodings
    and binary content raise :class:`SnapshotError` naming the file."""
    try:
        raw = read_regular(f, "a snapshot file")  # a FIFO in its place would block: refused, not opened
    except OSError as err:  # NotRegularFileError is one, and says what the path is
        raise SnapshotError(f"{f}: cannot read the file ({err.strerror or err})") from None
    if raw.startswith((b"\xff\xfe", b"\xfe\xff")) or b"\x00" in raw:
        raise SnapshotError(f"{f}: not a UTF-8 text file (NUL bytes: UTF-16 or binary data); save the CSV as UTF-8")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as err:
        raise SnapshotError(f"{f}: not a UTF-8 text file (byte {err.start}: {raw[err.start:err.start + 1]!r}; Latin-1 or "
                            "binary data?); save the CSV as UTF-8") from None
    try:
        return list(csv.reader(io.StringIO(text, newline="")))
    except csv.Error as err:
        raise SnapshotError(f"{f}: not a readable CSV file ({err})") from None


#: a number in a CSV: a decimal with ASCII digits and an optional exponent, or nan/inf (refused below as not finite)
_NUMBER = re.compile(r"[+-]?(([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+)?|(?i:nan|inf|infinity))")


def _read_csv(f: Path) -> List[_Traj]:
    lines = _csv_rows(f)
    numbered = [(i + 1, row) for i, row in enumerate(lines) if any(c.strip() for c in row)]
    if not numbered:
        raise SnapshotError(f"{f}: the file is empty")
    hline, header = numbered[0]
    tcol, idcol, qcols = _csv_columns(f, hline, header)
    groups: dict = {}
    for lineno, row in numbered[1:]:
        if len(row) != len(header):
            raise SnapshotError(f"{f}, line {lineno}: expected {len(header)} fields (as in the header), got {len(row)}")
        key = row[idcol].strip() if idcol is not None else ""
        vals = []
        for col, label in [(tcol, header[tcol].strip())] + [(i, c) for _, i, c in qcols]:
            s = row[col].strip()
            if not _NUMBER.fullmatch(s):  # float() alone would take "1_000" and non-ASCII digits ("１.5")
                raise SnapshotError(f"{f}, line {lineno}, column '{label}': cannot read {s[:40]!r} as a number (plain "
                                    "decimal with ASCII digits, e.g. 0.25, -1.5e-3)")
            x = float(s)
            if not math.isfinite(x):
                raise SnapshotError(f"{f}, line {lineno}, column '{label}': the value is {s} (not finite)")
            vals.append(x)
        g = groups.setdefault(key, ([], [], []))
        g[0].append(vals[0])
        g[1].append(vals[1:])
        g[2].append(f"line {lineno}")
    if not groups:
        raise SnapshotError(f"{f}: no data rows after the header")
    out = []
    for key, (t, q, rows) in groups.items():
        where = f"{f}" + (f", trajectory {key}" if idcol is not None else "")
        out.append(_Traj(where, np.array(t), np.array(q), rows))
    return out


def _csv_columns(f: Path, hline: int, header: List[str]) -> Tuple[int, Optional[int], List[Tuple[int, int, str]]]:
    """From a CSV header: the time column, the trajectory id column (or None) and the position columns
    ``(number, column, name)`` sorted by number (-1 for a lone ``q``), numbered consecutively."""
    names = [c.strip().lower() for c in header]
    tcol = next((names.index(c) for c in _TIME if c in names), None)
    if tcol is None:
        raise SnapshotError(f"{f}, line {hline}: no time column; the header must contain 't' (found {header})")
    idcol = next((names.index(c) for c in _ID if c in names), None)
    qcols = []
    for i, c in enumerate(names):
        m = _Q.match(c)
        if m:
            qcols.append((int(m.group(1)) if m.group(1) is not None else -1, i, header[i].strip()))
    if not qcols:
        raise SnapshotError(f"{f}, line {hline}: no position columns; the header must contain 'q' or 'q0', 'q1', ... (found {header})")
    if len({k for k, _, _ in qcols}) != len(qcols):
        raise SnapshotError(f"{f}, line {hline}: position columns {[c for _, _, c in qcols]} repeat an index")
    if any(k == -1 for k, _, _ in qcols) and len(qcols) > 1:
        raise SnapshotError(f"{f}, line {hline}: use either one column 'q' or numbered columns 'q0', 'q1', ..., not both")
    qcols.sort()
    numbers = [k for k, _, _ in qcols]
    if numbers != [-1]:
        first = 0 if numbers[0] == 0 else 1
        gaps, expect = [], first
        for k in numbers:  # the first few missing numbers (the column numbers may be huge: no range over them)
            while expect < k and len(gaps) < 6:
                gaps.append(expect)
                expect += 1
            expect = k + 1
        if gaps:
            raise SnapshotError(f"{f}, line {hline}: position columns {[c for _, _, c in qcols]} skip "
                                f"{', '.join(f'q{k}' for k in gaps[:5])}{' ...' if len(gaps) > 5 else ''}; the coordinates "
                                "must be numbered consecutively from q0 (or q1)")
    return tcol, idcol, qcols


def _read_npz(f: Path) -> List[_Traj]:
    try:
        with open_regular(f, "a snapshot file") as fh, np.load(fh, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
    except OSError as err:
        raise SnapshotError(f"{f}: cannot read the file ({err.strerror or err})") from None
    except Exception as err:
        raise SnapshotError(f"{f}: cannot read as .npz ({err})") from None
    for key in ("t", "q"):
        if key not in data:
            raise SnapshotError(f"{f}: missing array '{key}' (found {sorted(data)}); a .npz needs arrays 't' and 'q'")
    t, q = data["t"], data["q"]
    for key, arr in (("t", t), ("q", q)):
        if arr.dtype.kind not in "iuf":
            raise SnapshotError(f"{f}: array '{key}' must hold real numbers, got dtype {arr.dtype}")
    t, q = t.astype(np.float64), q.astype(np.float64)
    if 0 in q.shape or 0 in t.shape:
        raise SnapshotError(f"{f}: empty arrays: 't' has shape {t.shape} and 'q' {q.shape}; every dimension must be >= 1 "
                            "(q of shape (T,), (T, n) or (n_traj, T, n))")
    if t.ndim not in (1, 2):
        raise SnapshotError(f"{f}: 't' must have shape (T,) or (n_traj, T), got {t.shape}")
    if "traj" in data:
        ids = data["traj"]
        if ids.dtype.kind not in "iuUf" or (ids.dtype.kind == "f" and not np.all(np.isfinite(ids))):
            raise SnapshotError(f"{f}: array 'traj' must hold trajectory ids (integers or strings), got dtype {ids.dtype}"
                                + (" with non-finite values" if ids.dtype.kind == "f" else ""))
        if ids.ndim != 1 or t.ndim != 1 or q.ndim > 2 or q.shape[:1] != t.shape or ids.shape != t.shape:
            raise SnapshotError(f"{f}: with a 'traj' array, 't' and 'traj' must be 1-D of the same length R and 'q' of shape (R,) "
                                f"or (R, n); got t {t.shape}, q {q.shape}, traj {ids.shape}")
        q2 = q[:, None] if q.ndim == 1 else q
        out = []
        for key in dict.fromkeys(ids.tolist()):
            sel = np.nonzero(ids == key)[0]
            out.append(_Traj(f"{f}, trajectory {key}", t[sel], q2[sel], [f"row {int(i)}" for i in sel]))
        return out
    if q.ndim == 1:
        q = q[None, :, None]
    elif q.ndim == 2:
        q = q[None]
    elif q.ndim != 3:
        raise SnapshotError(f"{f}: 'q' must have shape (T,), (T, n) or (n_traj, T, n), got {q.shape}")
    n_traj, T = q.shape[:2]
    if t.ndim == 1:
        t = np.broadcast_to(t, (n_traj, t.shape[0]))
    if t.shape != (n_traj, T):
        raise SnapshotError(f"{f}: 't' has shape {data['t'].shape}, which does not match 'q' of shape {data['q'].shape}: "
                            f"need ({T},) or ({n_traj}, {T})")
    multi = n_traj > 1 or data["q"].ndim == 3
    return [_Traj(f"{f}" + (f", trajectory {k}" if multi else ""), t[k], q[k], [f"row {j}" for j in range(T)]) for k in range(n_traj)]


def _validate(trajs: List[_Traj], time_tol: float) -> Snapshots:
    T0 = n0 = h0 = None
    first = None
    for tr in trajs:
        bad = np.argwhere(~np.isfinite(tr.q))
        if bad.size:
            j, i = bad[0]
            raise SnapshotError(f"{tr.where}, {tr.rows[j]}: position q{i} is {float(tr.q[j, i])} (not finite)")
        bad = np.nonzero(~np.isfinite(tr.t))[0]
        if bad.size:
            raise SnapshotError(f"{tr.where}, {tr.rows[bad[0]]}: time is {float(tr.t[bad[0]])} (not finite)")
        T, n = tr.q.shape
        if n < 1:
            raise SnapshotError(f"{tr.where}: no position coordinates (q has shape {tr.q.shape}); need n >= 1")
        if T < 2:
            raise SnapshotError(f"{tr.where}: only {T} time row(s); a trajectory needs at least 2 to define the step h")
        if T0 is None:
            T0, n0, first = T, n, tr.where
        if n != n0:
            raise SnapshotError(f"{tr.where}: {n} position coordinates, but {first} has {n0}")
        if T != T0:
            raise SnapshotError(f"{tr.where}: {T} time rows, but {first} has {T0}; all trajectories must have the same length")
        dt = np.diff(tr.t)
        if np.any(dt <= 0):
            j = int(np.nonzero(dt <= 0)[0][0])
            raise SnapshotError(f"{tr.where}, {tr.rows[j + 1]}: time {float(tr.t[j + 1])!r} does not increase (previous row has {float(tr.t[j])!r}); "
                                "sort the rows by time")
        h = float(tr.t[-1] - tr.t[0]) / (T - 1)
        dev = np.abs(dt - h)
        if np.any(dev > time_tol * h):
            j = int(np.argmax(dev > time_tol * h))
            raise SnapshotError(f"{tr.where}, {tr.rows[j + 1]}: time step {float(dt[j])!r} differs from the uniform step {h!r} of this "
                                f"trajectory by more than the tolerance (time_tol={time_tol:g} relative); the data must lie on a uniform grid")
        if h0 is None:
            h0 = h
        elif abs(h - h0) > time_tol * h0:
            raise SnapshotError(f"{tr.where}: time step {h!r} differs from the step {h0!r} of {first}; all trajectories need the same step")
    q = torch.from_numpy(np.stack([tr.q for tr in trajs]).astype(np.float64))
    t0 = torch.tensor([float(tr.t[0]) for tr in trajs], dtype=torch.float64)
    return Snapshots(q=q, h=float(h0), t0=t0)


def load_snapshots(path: Union[PathLike, Sequence[PathLike]], *, time_tol: float = 1e-6,
                   device: Optional[Union[str, torch.device]] = None) -> Snapshots:
    """Read and validate snapshot data (see the module docstring for the formats).

    Returns :class:`Snapshots` ``(q, h, t0)`` with ``q`` of shape ``(n_traj, T, n)`` (float64 tensors on
    ``device``, default the CPU). Raises
    :class:`SnapshotError` (a ``ValueError``) naming the file, the row and the problem: unreadable
    numbers, non-finite values, missing columns or arrays, inconsistent shapes or lengths, times that
    do not increase or are not uniform within ``time_tol`` (relative to the step)."""
    if not (isinstance(time_tol, (int, float)) and not isinstance(time_tol, bool) and 0 <= time_tol < 1):
        raise BeaValueError(f"time_tol must be a number in [0, 1), got {time_tol!r}")
    trajs: List[_Traj] = []
    for f in _files(path):
        trajs.extend(_read_csv(f) if f.suffix == ".csv" else _read_npz(f))
    snap = _validate(trajs, time_tol)
    return snap._replace(q=snap.q.to(device), t0=snap.t0.to(device))
