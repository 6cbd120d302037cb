r"""Position-only snapshot data: generate, save, load and validate.

Learning an inverse modified Lagrangian (docs/theory/lsi.md) needs trajectories sampled at a uniform step
``h``, positions only, as a tensor ``(n_traj, n_steps + 1, n)``.

* :func:`snapshots` -- initial conditions from a scrambled Halton sequence
  (:class:`scipy.stats.qmc.Halton`) in a box of positions and velocities, exact flows from
  :func:`~integrators.reference.reference_flow`, optional Gaussian noise on the positions.
* :func:`save_snapshots` / :func:`load_snapshots` -- ``.npz`` or ``.csv`` files. ``load_snapshots``
  validates everything (finite numbers, consistent shapes, a uniform time grid within a tolerance)
  and names the file, row and problem when something is wrong.

File formats read by :func:`load_snapshots`:

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
per trajectory) or a list of files.
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
from pathlib import Path
from typing import Any, List, NamedTuple, Optional, Sequence, Tuple, Union

import numpy as np
import torch
from scipy.stats import qmc

from bea.files import atomic_save, atomic_write
from ._checks import as_float64, check_step_size, check_steps
from .reference import reference_flow
from .symbolic import SymbolicLagrangian

__all__ = ["snapshots", "halton_initial_conditions", "save_snapshots", "load_snapshots", "Snapshots", "SnapshotError"]

PathLike = Union[str, os.PathLike]


class SnapshotError(ValueError):
    """Invalid snapshot data; the message names the file, the row and the problem."""


class Snapshots(NamedTuple):
    """Validated snapshot data."""

    q: torch.Tensor  #: (n_traj, T, n) positions, float64
    h: float  #: the time step
    t0: torch.Tensor  #: (n_traj,) start time of each trajectory


# ---------------------------------------------------------------------------------------------- generate
def _check_domain(domain: Any, n: Optional[int]) -> np.ndarray:
    try:
        box = np.asarray(domain, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"domain must be a list of (low, high) pairs, positions then velocities; got {domain!r}") from None
    if box.ndim == 2 and box.shape[1] == 2 and n is not None and box.shape[0] != 2 * n:
        raise ValueError(f"domain needs {2 * n} (low, high) pairs for this n={n} system (positions, then velocities), got {box.shape[0]}")
    if box.ndim != 2 or box.shape[1] != 2 or box.shape[0] % 2 or box.shape[0] == 0:
        raise ValueError(f"domain must have shape (2n, 2): a (low, high) pair for each position and each velocity; got shape {box.shape}")
    if not np.all(np.isfinite(box)):
        raise ValueError("domain contains non-finite bounds")
    if np.any(box[:, 1] < box[:, 0]):
        i = int(np.nonzero(box[:, 1] < box[:, 0])[0][0])
        raise ValueError(f"domain interval {i} has low > high: {tuple(box[i])}")
    return box


def halton_initial_conditions(domain, n_traj: int, seed: Optional[int] = 0) -> Tuple[torch.Tensor, torch.Tensor]:
    """``n_traj`` initial conditions ``(q0, qdot0)``, each ``(n_traj, n)``, from a scrambled Halton
    sequence (seeded) scaled to the box ``domain`` = ``[(low, high)] * 2n`` (positions, then velocities)."""
    n_traj = check_steps(n_traj, "n_traj")
    box = _check_domain(domain, None)
    n = box.shape[0] // 2
    u = qmc.Halton(d=2 * n, scramble=True, rng=seed).random(n_traj)
    x = box[:, 0] + (box[:, 1] - box[:, 0]) * u
    x = torch.from_numpy(x)
    return x[:, :n].contiguous(), x[:, n:].contiguous()


def snapshots(system_or_lagrangian, h: float, n_traj: int, n_steps: int, domain=None, seed: Optional[int] = 0,
              noise: float = 0.0, *, return_initial: bool = False, rtol: float = 1e-13, atol: float = 1e-13):
    r"""Position-only trajectories of the Euler--Lagrange flow, shape ``(n_traj, n_steps + 1, n)``.

    ``system_or_lagrangian``: a :class:`~integrators.systems.System` (its ``domain`` is the default),
    a :class:`~integrators.symbolic.SymbolicLagrangian`, or any torch Lagrangian (then ``domain`` is
    required). Initial conditions: scrambled Halton points in ``domain`` (``seed``); positions at
    :math:`t_k = k h` from :func:`~integrators.reference.reference_flow`; ``noise`` is the standard
    deviation of independent Gaussian noise added to every position (seeded too).
    With ``return_initial=True`` returns ``(q, (q0, qdot0))``.
    """
    h = check_step_size(h)
    n_traj = check_steps(n_traj, "n_traj")
    n_steps = check_steps(n_steps, "n_steps")
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not math.isfinite(noise) or noise < 0:
        raise ValueError(f"noise must be a finite number >= 0 (standard deviation), got {noise!r}")
    n = system_or_lagrangian.n if isinstance(system_or_lagrangian, SymbolicLagrangian) else None
    if domain is None:
        domain = getattr(system_or_lagrangian, "domain", None)
        if domain is None:
            raise ValueError("give domain=[(low, high)] * 2n (positions, then velocities) for a Lagrangian without a default domain")
    box = _check_domain(domain, n)
    ss = np.random.SeedSequence(seed)
    halton_seed, noise_seed = ss.spawn(2)
    q0, v0 = halton_initial_conditions(box, n_traj, seed=np.random.default_rng(halton_seed))
    times = h * np.arange(n_steps + 1)
    qs, _ = reference_flow(system_or_lagrangian, q0, v0, times, rtol=rtol, atol=atol)
    q = qs.transpose(0, 1).contiguous()  # (n_traj, T, n)
    if noise > 0:
        rng = np.random.default_rng(noise_seed)
        q = q + torch.from_numpy(rng.normal(0.0, noise, size=tuple(q.shape)))
    return (q, (q0, v0)) if return_initial else q


# ---------------------------------------------------------------------------------------------- save
def _check_time_origin(t0: Any) -> float:
    if isinstance(t0, torch.Tensor) and t0.numel() == 1 and not t0.is_complex() and t0.dtype != torch.bool:
        t0 = t0.item()
    if isinstance(t0, bool) or not isinstance(t0, (int, float, np.integer, np.floating)):
        raise TypeError(f"t0 must be a real number (the time of the first snapshot), got {t0!r} of type {type(t0).__name__}")
    t0 = float(t0)
    if not math.isfinite(t0):
        raise SnapshotError(f"t0 must be a finite number, got {t0}")
    return t0


def save_snapshots(path: PathLike, q, h: float, t0: float = 0.0) -> Path:
    """Write positions ``q`` ``(n_traj, T, n)`` sampled at step ``h`` (from time ``t0``) to ``.npz``
    (arrays ``t``, ``q``) or ``.csv`` (columns ``traj, t, q0, ..., q{n-1}``, numbers written with
    ``repr`` so that they read back exactly).

    Everything is validated before anything is written, so that :func:`load_snapshots` reads the file
    back (``T >= 2``, finite positions, a finite real ``t0``, times ``t0 + k h`` that increase in
    float64): ``TypeError`` for wrong types (e.g. ``t0="0"``), :class:`SnapshotError` for bad values.
    The file is replaced atomically (:mod:`bea.files`): an interrupted write leaves the old
    file intact."""
    path = Path(path)
    if path.suffix not in (".npz", ".csv"):
        raise SnapshotError(f"{path}: unknown format {path.suffix!r}; use .npz or .csv")
    q = as_float64(q, "q")
    if q.dim() != 3 or q.shape[0] < 1 or q.shape[1] < 2 or q.shape[2] < 1:
        raise SnapshotError(f"q must have shape (n_traj, T, n) with n_traj >= 1, T >= 2 times and n >= 1 coordinates, "
                            f"got {tuple(q.shape)}")
    bad = torch.nonzero(~torch.isfinite(q))
    if bad.numel():
        k, j, i = (int(x) for x in bad[0])
        raise SnapshotError(f"q contains {bad.shape[0]} non-finite value(s), the first at trajectory {k}, time row {j}, "
                            f"coordinate {i}: {float(q[k, j, i])}; only finite positions can be saved")
    h = check_step_size(h)
    t0 = _check_time_origin(t0)
    T = q.shape[1]
    t = t0 + h * np.arange(T)
    dt = np.diff(t)
    if not np.all(np.isfinite(t)) or np.any(np.abs(dt - h) > 1e-9 * h):
        raise SnapshotError(f"the times t0 + k*h (t0={t0!r}, h={h!r}, k < {T}) are not a uniform grid in float64 "
                            f"(t0 too large for this step?); shift t0 closer to 0")
    qn = q.cpu().numpy()
    if path.suffix == ".npz":
        atomic_save(path, lambda fh: np.savez(fh, t=t, q=qn))
    else:
        n = q.shape[2]
        with atomic_write(path, "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["traj", "t"] + [f"q{i}" for i in range(n)])
            for k in range(qn.shape[0]):
                for j in range(T):
                    w.writerow([k, repr(float(t[j]))] + [repr(float(x)) for x in qn[k, j]])
    return path


# ---------------------------------------------------------------------------------------------- load
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
            raise TypeError(f"path must be a file or directory name (str or os.PathLike) or a list of them, got {type(path).__name__}")
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
        raw = f.read_bytes()
    except OSError as err:
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


def _read_csv(f: Path) -> List[_Traj]:
    lines = _csv_rows(f)
    numbered = [(i + 1, row) for i, row in enumerate(lines) if any(c.strip() for c in row)]
    if not numbered:
        raise SnapshotError(f"{f}: the file is empty")
    hline, header = numbered[0]
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
    groups: dict = {}
    for lineno, row in numbered[1:]:
        if len(row) != len(header):
            raise SnapshotError(f"{f}, line {lineno}: expected {len(header)} fields (as in the header), got {len(row)}")
        key = row[idcol].strip() if idcol is not None else ""
        vals = []
        for col, label in [(tcol, header[tcol].strip())] + [(i, c) for _, i, c in qcols]:
            s = row[col].strip()
            try:
                x = float(s)
            except ValueError:
                raise SnapshotError(f"{f}, line {lineno}, column '{label}': cannot read {s!r} as a number") from None
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


def _read_npz(f: Path) -> List[_Traj]:
    try:
        with np.load(f, allow_pickle=False) as z:
            data = {k: z[k] for k in z.files}
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


def load_snapshots(path: Union[PathLike, Sequence[PathLike]], *, time_tol: float = 1e-6) -> Snapshots:
    """Read and validate snapshot data (see the module docstring for the formats).

    Returns :class:`Snapshots` ``(q, h, t0)`` with ``q`` of shape ``(n_traj, T, n)``. Raises
    :class:`SnapshotError` (a ``ValueError``) naming the file, the row and the problem: unreadable
    numbers, non-finite values, missing columns or arrays, inconsistent shapes or lengths, times that
    do not increase or are not uniform within ``time_tol`` (relative to the step)."""
    if not (isinstance(time_tol, (int, float)) and not isinstance(time_tol, bool) and 0 <= time_tol < 1):
        raise ValueError(f"time_tol must be a number in [0, 1), got {time_tol!r}")
    trajs: List[_Traj] = []
    for f in _files(path):
        trajs.extend(_read_csv(f) if f.suffix == ".csv" else _read_npz(f))
    return _validate(trajs, time_tol)
