r"""Position-only snapshot data: generate, save, load and validate.

Learning an inverse modified Lagrangian (docs/theory/lsi.md) needs trajectories sampled at a uniform step
``h``, positions only, as a tensor ``(n_traj, n_steps + 1, n)``.

* :func:`snapshots` -- initial conditions from a scrambled Halton sequence
  (:class:`scipy.stats.qmc.Halton`) in a box of positions and velocities, exact flows from
  :func:`~integrators.reference.reference_flow`, optional Gaussian noise on the positions.
* :func:`save_snapshots` / :func:`load_snapshots` -- ``.npz`` or ``.csv`` files. ``load_snapshots``
  (:mod:`integrators.snapshot_loading`, where the file formats are described) validates everything
  (finite numbers, consistent shapes, a uniform time grid within a tolerance) and names the file,
  row and problem when something is wrong.
"""

from __future__ import annotations

import csv
import math
import os
from pathlib import Path
from typing import Any, Optional, Tuple, Union

import numpy as np
import torch
from scipy.stats import qmc

from bea.files import atomic_save, atomic_write
from bea.errors import BeaTypeError, BeaValueError
from ._checks import as_float64, check_step_size, check_steps
from .reference import reference_flow
from .snapshot_loading import SnapshotError, Snapshots, load_snapshots
from .symbolic import SymbolicLagrangian

__all__ = ["snapshots", "halton_initial_conditions", "save_snapshots", "load_snapshots", "Snapshots", "SnapshotError"]

PathLike = Union[str, os.PathLike]


# ---------------------------------------------------------------------------------------------- generate
def _check_domain(domain: Any, n: Optional[int]) -> np.ndarray:
    try:
        box = np.asarray(domain, dtype=np.float64)
    except (TypeError, ValueError):
        raise BeaValueError(f"domain must be a list of (low, high) pairs, positions then velocities; got {domain!r}") from None
    if box.ndim == 2 and box.shape[1] == 2 and n is not None and box.shape[0] != 2 * n:
        raise BeaValueError(f"domain needs {2 * n} (low, high) pairs for this n={n} system (positions, then velocities), got {box.shape[0]}")
    if box.ndim != 2 or box.shape[1] != 2 or box.shape[0] % 2 or box.shape[0] == 0:
        raise BeaValueError(f"domain must have shape (2n, 2): a (low, high) pair for each position and each velocity; got shape {box.shape}")
    if not np.all(np.isfinite(box)):
        raise BeaValueError("domain contains non-finite bounds")
    if np.any(box[:, 1] < box[:, 0]):
        i = int(np.nonzero(box[:, 1] < box[:, 0])[0][0])
        raise BeaValueError(f"domain interval {i} has low > high: {tuple(box[i])}")
    return box


def halton_initial_conditions(domain, n_traj: int, seed: Optional[int] = 0, *, device: Optional[Union[str, torch.device]] = None
                              ) -> Tuple[torch.Tensor, torch.Tensor]:
    """``n_traj`` initial conditions ``(q0, qdot0)``, each ``(n_traj, n)`` float64 on ``device`` (default: the
    CPU), from a scrambled Halton sequence (seeded) scaled to the box ``domain`` = ``[(low, high)] * 2n``
    (positions, then velocities). The points are drawn on the CPU, so they are the same on every device."""
    n_traj = check_steps(n_traj, "n_traj")
    box = _check_domain(domain, None)
    n = box.shape[0] // 2
    u = qmc.Halton(d=2 * n, scramble=True, rng=seed).random(n_traj)
    x = box[:, 0] + (box[:, 1] - box[:, 0]) * u
    x = torch.from_numpy(x).to(device)
    return x[:, :n].contiguous(), x[:, n:].contiguous()


def snapshots(system_or_lagrangian, h: float, n_traj: int, n_steps: int, domain=None, seed: Optional[int] = 0,
              noise: float = 0.0, *, return_initial: bool = False, rtol: float = 1e-13, atol: float = 1e-13,
              device: Optional[Union[str, torch.device]] = None):
    r"""Position-only trajectories of the Euler--Lagrange flow, shape ``(n_traj, n_steps + 1, n)``.

    ``system_or_lagrangian``: a :class:`~integrators.systems.System` (its ``domain`` is the default),
    a :class:`~integrators.symbolic.SymbolicLagrangian`, or any torch Lagrangian (then ``domain`` is
    required). Initial conditions: scrambled Halton points in ``domain`` (``seed``); positions at
    :math:`t_k = k h` from :func:`~integrators.reference.reference_flow`; ``noise`` is the standard
    deviation of independent Gaussian noise added to every position (seeded too).
    With ``return_initial=True`` returns ``(q, (q0, qdot0))``. Float64 tensors on ``device`` (default: the
    CPU; a torch Lagrangian is evaluated there); the numbers do not depend on the device beyond rounding,
    as the random draws and the reference integration run on the CPU.
    """
    h = check_step_size(h)
    n_traj = check_steps(n_traj, "n_traj")
    n_steps = check_steps(n_steps, "n_steps")
    if isinstance(noise, bool) or not isinstance(noise, (int, float)) or not math.isfinite(noise) or noise < 0:
        raise BeaValueError(f"noise must be a finite number >= 0 (standard deviation), got {noise!r}")
    n = system_or_lagrangian.n if isinstance(system_or_lagrangian, SymbolicLagrangian) else None
    if domain is None:
        domain = getattr(system_or_lagrangian, "domain", None)
        if domain is None:
            raise BeaValueError("give domain=[(low, high)] * 2n (positions, then velocities) for a Lagrangian without a default domain")
    box = _check_domain(domain, n)
    ss = np.random.SeedSequence(seed)
    halton_seed, noise_seed = ss.spawn(2)
    q0, v0 = halton_initial_conditions(box, n_traj, seed=np.random.default_rng(halton_seed), device=device)
    times = h * np.arange(n_steps + 1)
    qs = reference_flow(system_or_lagrangian, q0, v0, times, rtol=rtol, atol=atol).q
    q = qs.transpose(0, 1).contiguous()  # (n_traj, T, n)
    if noise > 0:
        rng = np.random.default_rng(noise_seed)
        q = q + torch.from_numpy(rng.normal(0.0, noise, size=tuple(q.shape))).to(q.device)
    return (q, (q0, v0)) if return_initial else q


# ---------------------------------------------------------------------------------------------- save
def _check_time_origin(t0: Any) -> float:
    if isinstance(t0, torch.Tensor) and t0.numel() == 1 and not t0.is_complex() and t0.dtype != torch.bool:
        t0 = t0.item()
    if isinstance(t0, bool) or not isinstance(t0, (int, float, np.integer, np.floating)):
        raise BeaTypeError(f"t0 must be a real number (the time of the first snapshot), got {t0!r} of type {type(t0).__name__}")
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
