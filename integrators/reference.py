r"""Reference ("exact") flows of Euler--Lagrange equations.

:math:`\ddot q = A(q, \dot q) = M^{-1}\big(\partial L/\partial q - L_{vq}\,\dot q\big)`,
:math:`M = \partial^2 L/\partial v^2`, integrated with SciPy's ``solve_ivp`` (DOP853, an explicit
Runge--Kutta method of order 8 with step-size control) at tolerances near ``1e-13``.

The acceleration comes from

* SymPy, when the Lagrangian is symbolic (a :class:`~integrators.systems.System`, a
  :class:`~integrators.symbolic.SymbolicLagrangian` or a SymPy expression with ``q=``, ``v=``): ``M``
  and the right-hand side are differentiated symbolically, compiled with NumPy, and ``M`` is solved
  pointwise;
* autograd (:func:`bea.acceleration`), for any torch Lagrangian ``L(q, v)``.

A whole batch of initial conditions is integrated as one ODE system (one vectorised right-hand side
per stage). Its error control uses the RMS norm over all components, so the per-trajectory error
can exceed the tolerance by up to about the square root of the batch size; pass
``each=True`` to integrate each trajectory separately when that matters.

``method="taylor"`` integrates a symbolic Lagrangian instead with mpmath's Taylor series method in at least 30
significant digits (:mod:`integrators.taylor`): seconds per trajectory, and an error far below DOP853's, to measure
DOP853's own (on Henon-Heiles and the double pendulum, ``T = 2``, the defaults are within 1.6e-13 of it).
Rational constants of the Lagrangian carry the full precision.

For a Lagrangian that is expensive to differentiate (a :mod:`bea` series of a torch Lagrangian), the
Chebyshev collocation of :func:`integrators.collocation.collocation_flow` needs far fewer evaluations.
"""

from __future__ import annotations

import math

from typing import Callable, Optional, Sequence, Tuple, Union

import numpy as np
import sympy
import torch
from scipy.integrate import solve_ivp

import bea

from bea.errors import BeaTypeError, BeaValueError
from ._checks import as_float64, check_states
from .flow_errors import ReferenceFlowError
from .symbolic import SymbolicLagrangian, check_expression
from .taylor import MAX_DIGITS, taylor_integrate
from .trajectory import Trajectory

__all__ = ["reference_flow", "acceleration_function", "ReferenceFlowError"]


_SCIPY_METHODS = ("RK23", "RK45", "DOP853", "Radau", "BDF", "LSODA")
#: the smallest rtol/atol of method="taylor": its digits are 10 - log10(tol), at most MAX_DIGITS
_TAYLOR_MIN_TOL = 10.0 ** (10 - MAX_DIGITS)
Acceleration = Callable[[np.ndarray, np.ndarray], np.ndarray]


def acceleration_function(lagrangian, q: Optional[Sequence] = None, v: Optional[Sequence] = None, *,
                          device: Optional[Union[str, torch.device]] = None) -> Tuple[Acceleration, Optional[int]]:
    r"""A NumPy function ``A(q, v)`` (arrays ``(B, n)`` to ``(B, n)``) giving :math:`M^{-1}(\partial_q L -
    L_{vq} v)`, and the dimension ``n`` if known (``None`` for torch callables).

    A torch Lagrangian is evaluated on ``device`` (default: the CPU), where its parameters live (e.g. a
    network on a GPU); the states travel there and the accelerations back to NumPy at every call."""
    if isinstance(lagrangian, SymbolicLagrangian):
        return lagrangian.acceleration_numpy(), lagrangian.n
    if isinstance(lagrangian, (str, bytes)) or (q is not None or v is not None) and not isinstance(lagrangian, sympy.Basic):
        check_expression(lagrangian)  # bea's gate: a string (or an object only str() of which is an expression) raises
    if isinstance(lagrangian, sympy.Basic):
        sl = _symbolic(lagrangian, q, v)
        return sl.acceleration_numpy(), sl.n
    if q is not None or v is not None:
        raise BeaValueError("q= and v= (symbols) are only meaningful for a SymPy Lagrangian")
    if not callable(lagrangian):
        raise BeaTypeError(f"lagrangian must be a torch callable L(q, v), a System/SymbolicLagrangian or a SymPy expression, "
                        f"got {type(lagrangian).__name__}")
    acc = bea.acceleration(lagrangian)

    def A(qn: np.ndarray, vn: np.ndarray) -> np.ndarray:
        out = acc(torch.from_numpy(qn).to(device), torch.from_numpy(vn).to(device))
        return out.detach().cpu().numpy()

    return A, None


def _check_symbols(lagrangian, q, v) -> None:
    """``q=``/``v=`` name a SymPy expression's symbols; a System or SymbolicLagrangian carries its own."""
    if isinstance(lagrangian, SymbolicLagrangian) and (q is not None or v is not None):
        raise BeaValueError(f"q= and v= are only for a SymPy expression: the {type(lagrangian).__name__} {lagrangian.name} "
                            "carries its own symbols (drop q= and v=)")


def _symbolic(lagrangian, q, v) -> SymbolicLagrangian:
    if isinstance(lagrangian, SymbolicLagrangian):
        return lagrangian
    if not isinstance(lagrangian, sympy.Basic):
        raise BeaTypeError(f"method='taylor' needs a symbolic Lagrangian (a System, a SymbolicLagrangian or a SymPy "
                           f"expression with q=, v=), got {type(lagrangian).__name__}: use method='DOP853' for a torch one")
    if q is None or v is None:
        raise BeaValueError("a SymPy Lagrangian needs its coordinate and velocity symbols: reference_flow(expr, ..., q=[...], v=[...])")
    return SymbolicLagrangian(lagrangian, q, v)


def reference_flow(lagrangian, q0, qdot0, times, *, q: Optional[Sequence] = None, v: Optional[Sequence] = None,
                   t0: Optional[float] = None, rtol: float = 1e-13, atol: float = 1e-13, method: str = "DOP853",
                   each: bool = False) -> Trajectory:
    r"""Integrate the Euler--Lagrange equations of ``lagrangian`` from ``(q0, qdot0)`` at time ``t0``
    (default ``times[0]``): a :class:`~integrators.Trajectory` with ``t = times``, positions ``q`` and velocities
    ``v``, each of shape ``(len(times), batch..., n)`` (float64 torch tensors on the device of ``q0``: SciPy
    integrates on the CPU, and a torch Lagrangian is evaluated on that device). (It unpacks as the
    ``(q, qdot)`` returned before, with a ``DeprecationWarning``.)

    ``q0, qdot0``: shape ``(batch..., n)``. ``times``: strictly monotonic 1-D sequence, on either side of
    ``t0`` or both (times before ``t0`` are integrated backward in time). Raises
    :class:`ReferenceFlowError` (a ``ValueError``) if the integration fails (e.g. a singular mass matrix or a collision) or produces
    non-finite values.

    ``method``: a SciPy ``solve_ivp`` method, or ``"taylor"`` (symbolic Lagrangians only): mpmath's Taylor series
    method in ``max(30, 10 - log10(min(rtol, atol)))`` digits (so ``rtol, atol >= 1e-190``), one trajectory at a
    time, each output state checked against the initial energy (:mod:`integrators.taylor`).
    """
    q0, qdot0 = check_states(q0, qdot0, names=("q0", "qdot0"))
    ts = np.asarray(as_float64(times, "times").cpu().numpy(), dtype=np.float64)
    if ts.ndim != 1 or ts.size == 0:
        raise BeaValueError(f"times must be a non-empty 1-D sequence, got shape {ts.shape}")
    if not np.all(np.isfinite(ts)):
        raise BeaValueError("times contains non-finite values")
    if ts.size > 1:
        dt = np.diff(ts)
        if not (np.all(dt > 0) or np.all(dt < 0)):
            raise BeaValueError("times must be strictly increasing (or strictly decreasing)")
    start = float(ts[0]) if t0 is None else float(t0)
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if not tol > 0:
            raise BeaValueError(f"{name} must be positive, got {tol}")
    if isinstance(method, str) and method != "taylor" and method not in _SCIPY_METHODS:
        raise BeaValueError(f"method must be 'taylor' or one of SciPy's {_SCIPY_METHODS}, got {method!r}")
    _check_symbols(lagrangian, q, v)
    if method == "taylor":
        for name, tol in (("rtol", rtol), ("atol", atol)):
            if tol < _TAYLOR_MIN_TOL:
                raise BeaValueError(f"method='taylor' works in at most {MAX_DIGITS} digits: {name} must be >= "
                                    f"{_TAYLOR_MIN_TOL:g}, got {tol!r}")
        sl = _symbolic(lagrangian, q, v)
        A, n_sym = None, sl.n
    else:
        A, n_sym = acceleration_function(lagrangian, q, v, device=q0.device)
    batch, n = q0.shape[:-1], q0.shape[-1]
    if n_sym is not None and n != n_sym:
        raise BeaValueError(f"q0 has {n} coordinates in its last dimension, but the Lagrangian has n={n_sym}")
    y0 = torch.cat([q0.reshape(-1, n), qdot0.reshape(-1, n)], -1).cpu().numpy()  # (B, 2n)
    groups = [np.arange(y0.shape[0])] if not each else [np.array([b]) for b in range(y0.shape[0])]
    out = np.empty((ts.size, y0.shape[0], 2 * n))
    if method == "taylor":
        digits = max(30, 10 + int(math.ceil(-math.log10(min(rtol, atol)))))
        out[:] = taylor_integrate(sl, y0, start, ts, digits)
    else:
        for g in groups:
            out[:, g] = _integrate(A, y0[g], n, start, ts, rtol, atol, method)
    qs = torch.from_numpy(out[..., :n].copy()).reshape(ts.size, *batch, n).to(q0.device)
    vs = torch.from_numpy(out[..., n:].copy()).reshape(ts.size, *batch, n).to(q0.device)
    t = torch.from_numpy(ts.copy()).to(q0.device)
    return Trajectory(qs, t=t, v=vs, stats={"method": method}, legacy=("q", "v"), legacy_tuple=True)


def _integrate(A: Acceleration, y0: np.ndarray, n: int, t0: float, ts: np.ndarray, rtol: float, atol: float, method: str) -> np.ndarray:
    B = y0.shape[0]

    def rhs(t, y):
        s = y.reshape(B, 2 * n)
        acc = A(np.ascontiguousarray(s[:, :n]), np.ascontiguousarray(s[:, n:]))
        return np.concatenate([s[:, n:], acc], -1).reshape(-1)

    # solve_ivp needs t_eval inside [t0, t_end]: times after t0 and times before it are two integrations from the
    # initial data (forward and backward in time); outputs at t0 itself are the initial data
    res = np.empty((ts.size, B, 2 * n))
    res[ts == t0] = y0
    for side in (np.nonzero(ts > t0)[0], np.nonzero(ts < t0)[0]):
        if side.size == 0:
            continue
        side = side[np.argsort(np.abs(ts[side] - t0), kind="stable")]  # in the direction of integration
        t_eval = ts[side]
        sol = solve_ivp(rhs, (t0, float(t_eval[-1])), y0.reshape(-1), method=method, t_eval=t_eval, rtol=rtol, atol=atol)
        # SciPy returns sol.t as a list (not an array) when it fails before the first output time
        reached = np.asarray(sol.t, dtype=np.float64).reshape(-1)
        if not sol.success:
            where = (f"after the output time t={float(reached[-1])!r}" if reached.size
                     else f"before the first output time t={float(t_eval[0])!r}")
            raise ReferenceFlowError(f"the reference integration from t0={t0!r} failed {where}: {sol.message} "
                                     "(a singularity or collision on the way? the Euler-Lagrange equations cannot be "
                                     "continued there)")
        ys = np.asarray(sol.y).T.reshape(t_eval.size, B, 2 * n)
        if not np.all(np.isfinite(ys)):
            raise ReferenceFlowError("the reference integration produced non-finite values (a singularity on the way?)")
        res[side] = ys
    return res
