r"""Reference flows for expensive Lagrangians: Chebyshev collocation, batched over the nodes in time.

:func:`~integrators.reference.reference_flow` (DOP853) evaluates the acceleration once per
Runge--Kutta stage, several hundred times per unit of time at tight tolerances. For a Lagrangian that
is a :mod:`bea` series applied to a torch Lagrangian (:math:`L_{mod}[N]`: derivatives of ``L`` up to
order :math:`N + 2` by nested autograd) one evaluation at a handful of points costs about as much as
at a hundred -- the cost is the autograd graph, not the data. :func:`collocation_flow` therefore
evaluates the acceleration at all nodes of a time segment at once and needs only a few such
evaluations.

*Collocation.* On a segment :math:`[t_a, t_b]` with the Chebyshev--Lobatto nodes
:math:`\tau_0 = t_a, \dots, \tau_K = t_b`, the node velocities :math:`V_k \approx \dot q(\tau_k)` solve

.. math::  Q = q_a + S V, \qquad R(V) = V - v_a - S\, a(Q, V) = 0,

where :math:`a = M^{-1}(\partial_q L - L_{vq}\dot q)` is the Euler--Lagrange acceleration and ``S`` the
spectral integration matrix (node values to :math:`\int_{t_a}^{\tau_i}` of their degree-``K``
interpolant). The collocation polynomial approximates the flow with spectral accuracy: its error is
about the size of its trailing Chebyshev coefficients, which must be below ``atol + rtol * scale``,
else the segment is halved (as it is when Newton's method fails to converge on it).

*Newton with a companion Jacobian.* ``R`` is solved by Newton's method whose Jacobian
:math:`I - S(\partial_q a_c\, S + \partial_v a_c)` comes from a *companion* acceleration :math:`a_c`
by central differences: the Jacobian only steers the iteration, the converged ``V`` solves ``R = 0``
whatever it is. First the companion's own flow is solved from :math:`V = v_a` (Jacobian refreshed
whenever the iteration contracts slowly); then, if ``near`` is given, the flow of ``lagrangian``
from there, the companion Jacobian kept. With the plain ``L`` as the companion of
:math:`L_{mod}[N]`, each iteration gains a factor of order :math:`h^2`, so a handful of evaluations of
:math:`L_{mod}` per segment suffice.

*Acceleration of a torch Lagrangian.* :func:`el_acceleration` takes all ``n`` rows of
:math:`M = L_{vv}` and :math:`L_{vq}` from one backward pass: the point is replicated ``n`` times
along a new leading axis and replica ``r`` carries component ``r`` of :math:`\partial L/\partial v`
(pointwise Lagrangians make the replicas independent). A Lagrangian may therefore see extra leading
batch axes; per-trajectory parameters (shape ``batch``) broadcast against them.
"""

from __future__ import annotations

import math
from typing import Callable, Optional, Tuple

import numpy as np
import torch

from bea.errors import BeaTypeError, BeaValueError, NotRegularError
from ._checks import as_float64, check_states
from .reference import ReferenceFlowError
from .symbolic import SymbolicLagrangian
from .trajectory import Trajectory

__all__ = ["collocation_flow", "el_acceleration", "chebyshev_matrices", "SingularMassError"]

Acceleration = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

#: deepest bisection of a segment before giving up (a segment of span / 2**MAX_DEPTH)
MAX_DEPTH = 8
#: trailing Chebyshev coefficients whose size estimates the collocation error
TAIL = 3


class SingularMassError(ReferenceFlowError, NotRegularError):
    r"""The mass matrix :math:`\partial^2L/\partial v^2` is singular at a state the iteration visited."""

    def __init__(self):
        super().__init__("the mass matrix d^2L/dv^2 is singular at some state: the Lagrangian is not regular there and the "
                         "Euler-Lagrange equations do not determine the acceleration")


def el_acceleration(L: Callable, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    r"""Euler--Lagrange acceleration :math:`M^{-1}(\partial_q L - L_{vq} v)` of a torch Lagrangian at
    ``q, v`` of shape ``(..., n)``, detached. Three autograd passes in all, whatever ``n``."""
    n = q.shape[-1]
    with torch.enable_grad():
        qr = q.detach().expand(n, *q.shape).clone().requires_grad_(True)
        vr = v.detach().expand(n, *v.shape).clone().requires_grad_(True)
        val = L(qr, vr)
        gq, gv = torch.autograd.grad(val.sum(), (qr, vr), create_graph=True, allow_unused=True)
        if gv is None or not gv.requires_grad:
            raise ReferenceFlowError("the Lagrangian is not regular: it is at most linear in the velocity")
        # replica r keeps component r of dL/dv: its gradient is row r of L_vq and of M
        hq, hv = torch.autograd.grad(torch.diagonal(gv, dim1=0, dim2=-1).sum(), (qr, vr), allow_unused=True)
    M = torch.zeros_like(vr) if hv is None else hv
    Lvq = torch.zeros_like(qr) if hq is None else hq
    M, Lvq = M.movedim(0, -2), Lvq.movedim(0, -2)  # (..., n, n): [row r = replica r, column j]
    rhs = (torch.zeros_like(q) if gq is None else gq[0].detach()) - (Lvq @ v.detach().unsqueeze(-1)).squeeze(-1)
    try:
        return torch.linalg.solve(M, rhs)
    except RuntimeError:  # torch.linalg.LinAlgError
        raise SingularMassError() from None


def _acceleration(lagrangian) -> Acceleration:
    if isinstance(lagrangian, SymbolicLagrangian):  # compiled NumPy: far cheaper than autograd
        A = lagrangian.acceleration_numpy()

        def acc(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            n = q.shape[-1]
            try:
                out = A(q.reshape(-1, n).numpy(), v.reshape(-1, n).numpy())
            except ValueError:  # SymbolicLagrangian: singular M
                raise SingularMassError() from None
            return torch.from_numpy(np.ascontiguousarray(out)).reshape(q.shape)

        return acc
    if not callable(lagrangian):
        raise BeaTypeError("the Lagrangian must be a torch callable L(q, v) or a SymbolicLagrangian, "
                        f"got {type(lagrangian).__name__}")
    return lambda q, v: el_acceleration(lagrangian, q, v)


def chebyshev_matrices(K: int) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Nodes :math:`x_k = -\cos(\pi k/K)` on ``[-1, 1]``, the integration matrix ``W`` (node values to
    :math:`\int_{-1}^{x_i}` of the interpolant) and ``C`` (node values to Chebyshev coefficients)."""
    x = -np.cos(np.pi * np.arange(K + 1) / K)
    C = np.linalg.inv(np.polynomial.chebyshev.chebvander(x, K))
    basis_int = np.stack([np.polynomial.chebyshev.chebval(x, np.polynomial.chebyshev.chebint(np.eye(K + 1)[j], lbnd=-1))
                          for j in range(K + 1)], -1)
    return x, basis_int @ C, C


class _Segment:
    """Collocation on one segment ``[ta, tb]`` (``K + 1`` nodes) for a batch ``(B, n)``."""

    def __init__(self, ta: float, tb: float, K: int):
        x, W, C = chebyshev_matrices(K)
        self.ta, self.tb, self.x = ta, tb, x
        self.S = torch.from_numpy(W * (tb - ta) / 2)
        self.C = torch.from_numpy(C)

    def positions(self, qa: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        return qa + torch.einsum("ik,kbn->ibn", self.S, V)

    def residual(self, acc: Acceleration, qa, va, V):
        Q = self.positions(qa, V)
        R = V - va - torch.einsum("ik,kbn->ibn", self.S, acc(Q, V))
        return Q, R[1:]

    def jacobian(self, acc: Acceleration, Q: torch.Tensor, V: torch.Tensor):
        """LU factors of :math:`I - S(A_q S + A_v)` over the nodes ``1..K`` per trajectory, the
        derivatives of ``acc`` by central differences (all ``4n`` perturbations in one call)."""
        K1, B, n = V.shape
        eps = 1e-6 * (1 + torch.cat([Q, V], -1).abs().amax())
        E = torch.eye(n, dtype=V.dtype) * eps
        dq = torch.cat([E, -E, torch.zeros(2 * n, n, dtype=V.dtype)])[:, None, None, :]
        dv = torch.cat([torch.zeros(2 * n, n, dtype=V.dtype), E, -E])[:, None, None, :]
        a = acc(Q + dq, V + dv)  # (4n, K+1, B, n)
        Aq = ((a[:n] - a[n:2 * n]) / (2 * eps)).permute(1, 2, 3, 0)  # (K+1, B, n_out, n_in)
        Av = ((a[2 * n:3 * n] - a[3 * n:]) / (2 * eps)).permute(1, 2, 3, 0)
        S = self.S
        J = -torch.einsum("ik,kbxy,kj->bixjy", S[1:], Aq, S[:, 1:]) - torch.einsum("ij,jbxy->bixjy", S[1:, 1:], Av[1:])
        J = J.reshape(B, (K1 - 1) * n, (K1 - 1) * n) + torch.eye((K1 - 1) * n, dtype=V.dtype)
        return torch.linalg.lu_factor(J)

    def tail(self, V: torch.Tensor, Q: torch.Tensor) -> float:
        """Largest trailing Chebyshev coefficient of the velocities and positions."""
        cv = torch.einsum("ik,kbn->ibn", self.C, V)[-TAIL:]
        cq = torch.einsum("ik,kbn->ibn", self.C, Q)[-TAIL:]
        return float(torch.maximum(cv.abs().amax(), cq.abs().amax()))

    def interpolate(self, Y: torch.Tensor, ts: np.ndarray) -> torch.Tensor:
        x = (2 * ts - self.ta - self.tb) / (self.tb - self.ta)
        T = torch.from_numpy(np.polynomial.chebyshev.chebvander(np.clip(x, -1, 1), len(self.x) - 1))
        return torch.einsum("tk,kbn->tbn", T @ self.C, Y)


def _correction(seg: _Segment, acc: Acceleration, qa, va, V, lu) -> torch.Tensor:
    """:math:`J^{-1}R(V)` at the nodes ``1..K`` (``NaN`` where ``R`` is not finite)."""
    _, R = seg.residual(acc, qa, va, V)
    K, B, n = R.shape
    return torch.linalg.lu_solve(*lu, R.permute(1, 0, 2).reshape(B, K * n, 1)).reshape(B, K, n).permute(1, 0, 2)


def _newton(seg: _Segment, acc: Acceleration, qa, va, V, tol: float, maxiter: int):
    """Newton's method on ``R(V) = 0`` (node 0 fixed), the Jacobian of ``acc`` refreshed whenever the
    iteration contracts slowly. Returns ``(V, Q, lu)`` or ``None`` if it does not converge."""
    prev, lu = math.inf, None
    for _ in range(maxiter):
        if lu is None:
            lu = seg.jacobian(acc, seg.positions(qa, V), V)
        dV = _correction(seg, acc, qa, va, V, lu)
        step = float(dV.abs().amax())
        if not math.isfinite(step):
            return None
        V = V.clone()
        V[1:] -= dV
        if step <= tol:
            return V, seg.positions(qa, V), lu
        if step > 0.25 * prev:  # slow contraction: a fresh Jacobian at the current iterate
            lu = None
        prev = step
    return None


def _anderson(seg: _Segment, acc: Acceleration, qa, va, V, lu, tol: float, maxiter: int, memory: int = 5):
    r"""The fixed point of :math:`V \mapsto V - J_c^{-1}R(V)` (the companion Jacobian ``lu`` kept),
    with Anderson acceleration: each new iterate combines the last ``memory`` ones to minimise the
    linearised correction, per trajectory. Near the solution the map is almost affine, so this acts
    like GMRES on the preconditioned collocation equations: a few evaluations of ``acc`` instead of a
    linear contraction by :math:`\|I - J_c^{-1}J\|` per evaluation. Returns ``(V, Q)`` or ``None``."""
    X, F = [], []  # iterates and their corrections -J^{-1}R, flattened per trajectory
    B = V.shape[1]
    for _ in range(maxiter):
        f = -_correction(seg, acc, qa, va, V, lu)
        step = float(f.abs().amax())
        if not math.isfinite(step):
            return None
        x = V[1:].permute(1, 0, 2).reshape(B, -1)
        fx = f.permute(1, 0, 2).reshape(B, -1)
        if step <= tol:
            V = V.clone()
            V[1:] += f
            return V, seg.positions(qa, V)
        X, F = (X + [x])[-memory - 1:], (F + [fx])[-memory - 1:]
        new = x + fx
        if len(X) > 1:
            dX = torch.stack([X[i + 1] - X[i] for i in range(len(X) - 1)], -1)  # (B, K n, m)
            dF = torch.stack([F[i + 1] - F[i] for i in range(len(F) - 1)], -1)
            gamma = torch.linalg.lstsq(dF, fx.unsqueeze(-1)).solution  # min |f - dF gamma| per trajectory
            new = new - ((dX + dF) @ gamma).squeeze(-1)
        V = V.clone()
        V[1:] = new.reshape(B, -1, V.shape[-1]).permute(1, 0, 2)
    return None


def _solve_segment(seg: _Segment, acc, near, qa, va, rtol: float, atol: float, maxiter: int):
    """``(Q, V)`` at the nodes, or the reason why not (a string): not converged, not resolved, or a
    singular mass matrix at some iterate (a shorter segment keeps the iterates closer to the flow)."""
    try:
        return _solve_segment_or_none(seg, acc, near, qa, va, rtol, atol, maxiter) or "it did not converge or is not resolved"
    except SingularMassError as err:
        return str(err)


def _solve_segment_or_none(seg: _Segment, acc, near, qa, va, rtol: float, atol: float, maxiter: int):
    scale = 1 + float(torch.cat([qa, va], -1).abs().amax())
    tol = 0.1 * (atol + rtol * scale)
    V0 = va.expand(len(seg.x), *va.shape).clone()
    first = _newton(seg, near, qa, va, V0, tol, maxiter)
    if first is None:
        return None
    V, Q, lu = first
    if near is not acc:
        # the target's flow is about as smooth: a companion that is barely resolved means a segment too long
        if seg.tail(V, Q) > 0.1 * (atol + rtol * scale):
            return None
        out = _anderson(seg, acc, qa, va, V, lu, tol, maxiter)
        if out is None:
            return None
        V, Q = out
    if seg.tail(V, Q) > atol + rtol * scale:
        return None
    return Q, V


def _check_times(times, t0) -> Tuple[np.ndarray, float]:
    ts = np.asarray(as_float64(times, "times").cpu().numpy(), dtype=np.float64)
    if ts.ndim != 1 or ts.size == 0 or not np.all(np.isfinite(ts)):
        raise BeaValueError(f"times must be a non-empty 1-D sequence of finite numbers, got shape {ts.shape}")
    if ts.size > 1 and not (np.all(np.diff(ts) > 0) or np.all(np.diff(ts) < 0)):
        raise BeaValueError("times must be strictly increasing (or strictly decreasing)")
    start = float(ts[0]) if t0 is None else float(t0)
    if not math.isfinite(start):
        raise BeaValueError(f"t0 must be finite, got {t0}")
    return ts, start


def collocation_flow(lagrangian, q0, qdot0, times, *, near=None, t0: Optional[float] = None, rtol: float = 1e-12,
                     atol: float = 1e-12, nodes: int = 24, max_segment: Optional[float] = None,
                     maxiter: int = 40) -> Trajectory:
    r"""The Euler--Lagrange flow of ``lagrangian`` from ``(q0, qdot0)`` at time ``t0`` (default
    ``times[0]``), at ``times``: a :class:`~integrators.Trajectory` with ``t = times``, positions ``q`` and
    velocities ``v``, each ``(len(times), batch..., n)`` (float64; it unpacks as the ``(q, qdot)`` returned
    before, with a ``DeprecationWarning``).

    ``lagrangian``: a torch callable ``L(q, v)`` (evaluated on ``(..., batch..., n)``, see the module
    docstring) or a :class:`~integrators.symbolic.SymbolicLagrangian`. ``near``: a cheap companion
    Lagrangian whose flow is close (e.g. ``L`` for :math:`L_{mod}[N]`): it supplies the starting guess
    and the Newton Jacobian; by default ``lagrangian`` itself (then each Jacobian costs one call at
    ``4n`` times the points: give ``near`` when ``lagrangian`` is expensive). ``rtol, atol``: bound on the
    trailing Chebyshev coefficients per segment, relative to ``1 + max|(q, v)|`` at the segment's
    start. ``nodes``: ``K``, the polynomial degree per segment; ``max_segment``: the longest segment
    (default: the whole span, halved where needed). Raises
    :class:`~integrators.reference.ReferenceFlowError` where a segment of ``span / 2**MAX_DEPTH`` still
    fails, or the mass matrix is singular.
    """
    q0, qdot0 = check_states(q0, qdot0, names=("q0", "qdot0"))
    ts, start = _check_times(times, t0)
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if isinstance(tol, bool) or not (isinstance(tol, (int, float)) and tol > 0):
            raise BeaValueError(f"{name} must be a positive number, got {tol!r}")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 4 <= nodes <= 64:
        raise BeaValueError(f"nodes must be an integer in [4, 64] (the degree of the collocation polynomial), got {nodes!r}")
    if max_segment is not None and not (isinstance(max_segment, (int, float)) and max_segment > 0):
        raise BeaValueError(f"max_segment must be a positive number or None, got {max_segment!r}")
    acc = _acceleration(lagrangian)
    companion = acc if near is None else _acceleration(near)
    batch, n = q0.shape[:-1], q0.shape[-1]
    qa, va = q0.detach().reshape(-1, n), qdot0.detach().reshape(-1, n)
    out = torch.empty(2, ts.size, qa.shape[0], n, dtype=torch.float64)
    out[0, ts == start], out[1, ts == start] = qa, va
    for side in (ts > start, ts < start):
        if side.any():
            end = float(ts[side][np.argmax(np.abs(ts[side] - start))])
            _march(acc, companion, qa, va, start, end, ts, side, out, rtol, atol, nodes, max_segment, maxiter)
    return Trajectory(out[0].reshape(ts.size, *batch, n), t=torch.from_numpy(np.array(ts, dtype=np.float64)),
                      v=out[1].reshape(ts.size, *batch, n), legacy=("q", "v"), legacy_tuple=True)


def _march(acc, companion, qa, va, start, end, ts, side, out, rtol, atol, nodes, max_segment, maxiter) -> None:
    """Segments from ``start`` to ``end`` (either direction). A segment that fails is halved, and the
    segments after it keep the shorter length (the flow's time scale rarely changes much)."""
    span = end - start
    length = span if max_segment is None else math.copysign(min(abs(span), max_segment), span)
    shortest = abs(span) / 2**MAX_DEPTH
    ta = start
    while (end - ta) * span > 1e-12 * abs(span):
        tb = end if abs(end - ta) <= abs(length) * (1 + 1e-12) else ta + length
        seg = _Segment(ta, tb, nodes)
        res = _solve_segment(seg, acc, companion, qa, va, rtol, atol, maxiter)
        if isinstance(res, str):
            if abs(tb - ta) <= shortest:
                raise ReferenceFlowError(f"the collocation failed on [{ta!r}, {tb!r}], a segment of 1/2**{MAX_DEPTH} of the "
                                         f"span: {res} (a singularity on the way, or tolerances below rounding?)")
            length = (tb - ta) / 2
            continue
        Q, V = res
        inside = side & (ts >= min(ta, tb)) & (ts <= max(ta, tb))
        if inside.any():
            out[0, inside] = seg.interpolate(Q, ts[inside])
            out[1, inside] = seg.interpolate(V, ts[inside])
        qa, va, ta = Q[-1], V[-1], tb
