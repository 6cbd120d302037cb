r"""LSI with a stage scheme (:mod:`bea.stages`): the DEL conditions linearised in :math:`L`, iterated to the exact ones.

A stage scheme's discrete Lagrangian is a stationary value, :math:`L_\Delta(a, b) = \Phi(L; a, Q^*, b)` with
:math:`\partial_Q\Phi(L; a, Q^*, b) = 0`, so its DEL residual at a data node ``b`` (steps ``(a, b)`` and ``(b, c)``,
interior points :math:`Q^-` and :math:`Q^+`) is, by the envelope theorem, a partial derivative at fixed interior points,

.. math::  r_b(L) = \partial_b\Phi(L; a, Q^-, b) + \partial_b\Phi(L; b, Q^+, c), \qquad Q^\pm = Q^*_\pm(L),

linear in :math:`L` except through :math:`Q^*(L)`. Linearised at the current posterior mean :math:`\bar L_k`
(interior points :math:`Q_k = Q^*(\bar L_k)`, Hessian :math:`H = \partial_Q^2\Phi(\bar L_k)`), with
:math:`Q^*(L) - Q_k = -H^{-1}\partial_Q\Phi(L; Q_k) + O(\|L - \bar L_k\|^2)` (since :math:`\partial_Q\Phi(\bar L_k;
Q_k) = 0` and :math:`\partial_Q\Phi` is linear in :math:`L`),

.. math::  \ell_b(L) = \frac{d}{db}\Big[\Phi\big(L; a, Q^-_k + J^-\,(b - b_k), b\big)
           + \Phi\big(L; b, Q^+_k + J^+\,(b - b_k), c\big)\Big], \qquad
           J^\pm = \frac{\partial Q^*_\pm}{\partial b}\Big|_{\bar L_k} = -H_\pm^{-1}\,\partial_b\partial_Q\Phi(\bar L_k),

a linear functional of :math:`L` (the interior points move with ``b`` along the implicit-function derivative of
:math:`\bar L_k`; :math:`\ell_b(\bar L_k) = r_b(\bar L_k)`). Conditioning the GP on :math:`\ell_b(L) = 0` at every
node gives :math:`\bar L_{k+1}`; the iteration is Newton's method on the DEL conditions :math:`r_b(L) = 0` in the
GP's norm (Gauss--Newton). At its fixed point :math:`r_b(\bar L) = \ell_b(\bar L) = 0` exactly: the data satisfy the
DEL equations of the stage scheme on :math:`\bar L` -- the LSI conditions of the midpoint rule, for this scheme, with
no approximation left. :attr:`~learners.InverseModifiedLagrangianGP.history` ``["stage_iterations"]`` records, per
iteration, the largest change of the interior points and the largest DEL residual :math:`r_b(\bar L_k)` on the data.

*Start.* :math:`\bar L_0` is the midpoint rule's LSI fit on the same data (its :math:`L_{inv}` differs from the stage
scheme's by :math:`O(h^2)`), hyperparameters learned as usual (:mod:`learners.shadow.hyperparameters`); at iteration
:data:`RELEARN_AT` they are learned again on the stage scheme's linearised conditions, then kept (pendulum, 60
trajectories: the largest DEL residual at the floor 2.9e-7 against 4.0e-7 when the midpoint rule's are kept).
Newton's method for the first interior points starts from a cubic interpolation of the snapshots in time
(:func:`interpolated_interior`), later ones from the previous iterate. Why not condition on the DEL residuals at
fixed interpolated interior points and on their stationarity :math:`\partial_Q\Phi(L; a, Q, b) = 0` (both linear in
:math:`L`)? Any interior points are stationary for the mean conditioned on their own stationarity, so re-solving them
under that mean returns them (up to the residual the nugget leaves), and the fit keeps the interpolation's error; on
the CI pendulum that problem's likelihood also chose a mean with a negative mass at some data states, where Newton's
method for the interior points failed.

*Limits.* Where the start's mean has a singular or negative mass at states the stage scheme evaluates (pendulum, 200
trajectories at ``h = 0.5``; Galerkin steps of 0.75 and more), Newton's method for the interior points fails with a
:class:`~bea.errors.BeaRuntimeError`. With 200 pendulum trajectories it fails at 26 of the 1,000 steps, all at the
data's extreme speeds (standardised :math:`|v'|` 0.93 to 1.05, RMS 0.5): Galerkin evaluates ``L`` at the end-point
velocities of its quadratic, beyond the chord velocities at which the midpoint rule's fit was conditioned. The
``"energy"`` calibration of the variances is not run (it conditions on the start's functionals): energies and
velocities use the ``"del"`` scale; the ``"positions"`` objective is refused.

*Uncertainty.* The posterior is the GP conditioned on :math:`\ell_b` at the fixed point, i.e. the DEL conditions
linearised there. Functionals at new states (DEL residuals for ``predict``'s std, discrete momenta for the energies'
std) are built the same way (:class:`LinearisedStages`): at the interior points of the posterior mean, moving along
its implicit-function derivative.
"""

from __future__ import annotations

import warnings
from typing import Callable, List, Tuple

import torch

from bea.errors import UnsupportedSchemeError
from bea.schemes import Scheme
from bea.stage_torch import solve_interior
from bea.stages import StageScheme

from .functionals import Functionals, _linear_atoms, discrete_momentum_functionals, snapshot_functionals
from .guards import IdentifiabilityWarning, caller_level

__all__ = ["LinearisedStages", "interpolated_interior", "interior_jacobians", "fit_stages", "check_stage_objective",
           "accepted_scheme", "linear_scheme", "MAX_ITERATIONS", "STALL", "RELEARN_AT"]

#: most Gauss--Newton iterations after the start (each one Newton solve of the interior points and one Cholesky)
MAX_ITERATIONS = 12
#: the iteration at which the hyperparameters are learned again, on the stage scheme's linearised DEL conditions (those
#: of the start are the midpoint rule's)
RELEARN_AT = 2
#: the iteration stops when two iterations in a row leave the largest DEL residual on the data above this fraction of its
#: best value before them: Newton's method on the DEL conditions converges to the floor the GP's nugget leaves, not
#: monotonically (CI pendulum: 2.8e-2, 8.7e-4, 1.2e-4, 8.6e-5, 2.6e-5,
#: 4.0e-6, 4.1e-7, then 4.0e-7 for every further iteration)
STALL = 0.5


def interpolated_interior(S: torch.Tensor, scheme) -> torch.Tensor:
    r"""Interior points of every step of snapshots ``S`` ``(T, M + 1, n)`` from the cubic (fewer snapshots: the
    highest-degree) Lagrange interpolation in time through the four snapshots around the step, at
    :math:`t_j + \theta_k h` (:meth:`~bea.stages.StageScheme.guess_nodes`): ``(T, M, m, n)``."""
    T, M1, n = S.shape
    P = min(4, M1)
    theta = torch.tensor([float(t) for t in scheme.guess_nodes()], dtype=S.dtype, device=S.device)
    j = torch.arange(M1 - 1, device=S.device)
    nodes = (j - 1).clamp(0, M1 - P)[:, None] + torch.arange(P, device=S.device)  # (M, P)
    t = j[:, None].to(S.dtype) + theta  # (M, m)
    x = nodes.to(S.dtype)
    w = torch.ones(M1 - 1, theta.numel(), P, dtype=S.dtype, device=S.device)
    for p in range(P):
        for r in range(P):
            if r != p:
                w[..., p] *= (t - x[:, None, r]) / (x[:, None, p] - x[:, None, r])
    return torch.einsum("jkp,tjpn->tjkn", w, S[:, nodes])


def interior_jacobians(L: Callable, a: torch.Tensor, Q: torch.Tensor, b: torch.Tensor, h: float, scheme
                       ) -> Tuple[torch.Tensor, torch.Tensor]:
    r""":math:`\partial Q^*/\partial a` and :math:`\partial Q^*/\partial b` at stationary interior points ``Q``
    ``(B, m, n)`` of the steps ``(a, b)`` (``(B, n)``) of ``L``: :math:`-H^{-1}\partial_Q\partial_{a,b}\Phi`, each
    ``(B, m n, n)``."""
    B, m, n = Q.shape
    with torch.enable_grad():
        a_, b_ = a.detach().clone().requires_grad_(True), b.detach().clone().requires_grad_(True)
        Z = Q.detach().clone().requires_grad_(True)
        phi = scheme.stage_action(L, a_, list(Z.unbind(1)), b_, h)
        (g,) = torch.autograd.grad(phi.sum(), Z, create_graph=True)
        g = g.reshape(B, m * n)
        rows = [torch.autograd.grad(g[:, i].sum(), (Z, a_, b_), retain_graph=True) for i in range(m * n)]
    H = torch.stack([r[0].reshape(B, m * n) for r in rows], 1)  # (B, mn, mn)
    Ga = torch.stack([r[1] for r in rows], 1)  # (B, mn, n)
    Gb = torch.stack([r[2] for r in rows], 1)
    return -torch.linalg.solve(H, Ga), -torch.linalg.solve(H, Gb)


def _stationary(L: Callable, a: torch.Tensor, b: torch.Tensor, h: float, scheme, start=None) -> torch.Tensor:
    """Interior points of ``L`` for the steps ``(a, b)`` (``(B, n)``), ``(B, m, n)``, detached; Newton from ``start``
    ``(B, m, n)`` if given."""
    start = None if start is None else start.movedim(1, 0)
    with torch.no_grad():
        return solve_interior(L, a.detach(), b.detach(), h, scheme, start).movedim(0, 1)


class LinearisedStages(Scheme):
    r"""A stage scheme linearised at a Lagrangian ``mean`` (module docstring): :math:`L_\Delta(L; a, b) =
    \Phi(L; a, Q + J_a(a - \bar a) + J_b(b - \bar b), b)` with ``Q`` the stationary interior points of ``mean`` at the
    detached end points and ``J`` their derivatives. Linear in ``L``, with the first derivatives in ``a, b`` of the
    linearised DEL conditions, so :func:`~learners.shadow.functionals.del_residual_functionals` and
    :func:`~learners.shadow.functionals.discrete_momentum_functionals` build its functionals unchanged."""

    symmetric = None

    def __init__(self, scheme, mean: Callable):
        self.stages, self.mean = scheme, mean
        self.name = f"linearised({scheme.name})"

    def discrete_lagrangian(self, L, a, b, h):
        lead, n = a.shape[:-1], a.shape[-1]
        a2, b2 = a.reshape(-1, n), b.reshape(-1, n)
        Q = _stationary(self.mean, a2, b2, h, self.stages)
        Ja, Jb = interior_jacobians(self.mean, a2, Q, b2, h, self.stages)
        move = (Ja @ (a2 - a2.detach())[..., None] + Jb @ (b2 - b2.detach())[..., None]).reshape(Q.shape)
        Z = Q + move
        return self.stages.stage_action(L, a2, list(Z.unbind(1)), b2, h).reshape(lead)

    def params(self):
        return {"stages": repr(self.stages)}


def _pairs(S: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    n = S.shape[-1]
    return S[:, :-1].reshape(-1, n), S[:, 1:].reshape(-1, n)


def _node_terms(S: torch.Tensor, Q: torch.Tensor, Ja: torch.Tensor, Jb: torch.Tensor):
    r"""For every data node ``b`` (trajectory-major, as :func:`~learners.shadow.functionals.triples_from_snapshots`):
    its neighbours ``a, c``, the interior points of the steps before and after, and their derivatives in ``b``."""
    T, M1, n = S.shape
    shape = (T, M1 - 1) + Q.shape[1:]
    Qs, Jas, Jbs = Q.reshape(shape), Ja.reshape(shape[:2] + Ja.shape[1:]), Jb.reshape(shape[:2] + Jb.shape[1:])
    flat = lambda x: x.reshape(-1, *x.shape[2:])  # noqa: E731
    a, b, c = (S[:, k:M1 - 2 + k].reshape(-1, n) for k in range(3))
    return a, b, c, flat(Qs[:, :-1]), flat(Qs[:, 1:]), flat(Jbs[:, :-1]), flat(Jas[:, 1:])


def _linearised_del(S, Q, Ja, Jb, h: float, scheme) -> Functionals:
    r"""The linearised DEL functionals :math:`\ell_b` (module docstring) at every data node, from the interior points
    ``Q`` ``(B, m, n)`` of every step and their derivatives ``Ja, Jb`` ``(B, m n, n)`` (steps trajectory-major)."""
    a, b, c, Qm, Qp, Jm, Jp = _node_terms(S, Q, Ja, Jb)
    n = b.shape[-1]
    b = b.detach().clone().requires_grad_(True)
    d = (b - b.detach())[..., None]
    Zm = Qm + (Jm @ d).reshape(Qm.shape)
    Zp = Qp + (Jp @ d).reshape(Qp.shape)
    F = _linear_atoms(lambda L: scheme.stage_action(L, a, list(Zm.unbind(1)), b, h)
                      + scheme.stage_action(L, b, list(Zp.unbind(1)), c, h), b, n)
    F.targets = b.new_zeros(F.count)
    return F


def _max_del(mean: Callable, S: torch.Tensor, Q: torch.Tensor, h: float, scheme) -> float:
    r"""Largest DEL residual of the stage scheme on ``mean`` over the data's nodes, at its stationary interior points
    ``Q`` of every step (envelope theorem: the partial derivative at fixed interior points)."""
    zero = Q.new_zeros(Q.shape[0], Q.shape[1] * Q.shape[2], S.shape[-1])
    a, b, c, Qm, Qp, _, _ = _node_terms(S, Q, zero, zero)
    with torch.enable_grad():
        bb = b.detach().clone().requires_grad_(True)
        val = scheme.stage_action(mean, a, list(Qm.unbind(1)), bb, h) + scheme.stage_action(mean, bb, list(Qp.unbind(1)), c, h)
        (r,) = torch.autograd.grad(val.sum(), bb)
    return float(r.abs().amax())


def _norm_functionals(model) -> Functionals:
    """The normalisation functionals the model's GP is conditioned on (the last ones)."""
    F = model.gp.train_functionals
    return F.subset(torch.arange(F.count - model._norm_count, F.count, device=F.device))


def _groups(S: torch.Tensor, drop: int) -> torch.Tensor:
    """The trajectory of each functional, ``n`` per snapshot but the last ``drop`` of each trajectory."""
    T, M1, n = S.shape
    return torch.arange(T, device=S.device).repeat_interleave((M1 - drop) * n)


def fit_stages(model, S: torch.Tensor, h: float, norm) -> None:
    """Fit ``model`` (an :class:`~learners.InverseModifiedLagrangianGP` with a stage scheme) on standardised
    snapshots ``S`` at the standardised step ``h`` (module docstring); records the iterations in
    ``model.history["stage_iterations"]``. Each iteration conditions on the same normalisation functionals with their
    linear targets: :mod:`~learners.shadow.mass_target` does not move them for a stage scheme (its move is for one
    posterior, and every iteration makes another)."""
    scheme = model.scheme
    model._fit_functionals(*snapshot_functionals(S, h, "midpoint"), normalisation=norm)  # the start, hyperparameters
    F_norm = _norm_functionals(model)
    steps: List[dict] = []
    a2, b2 = _pairs(S)
    Q = None
    start = interpolated_interior(S, scheme).reshape(a2.shape[0], -1, S.shape[-1])
    for _ in range(MAX_ITERATIONS + 1):
        mean = model._lagrangian_std
        Qn = _stationary(mean, a2, b2, h, scheme, start if Q is None else Q)
        change = float("inf") if Q is None else float((Qn - Q).abs().amax())
        steps.append({"interior_change": change, "max_del": _max_del(mean, S, Qn, h, scheme)})
        Q = Qn
        if len(steps) > 3 and min(x["max_del"] for x in steps[-2:]) > STALL * min(x["max_del"] for x in steps[:-2]):
            break  # two iterations without halving the DEL residuals on the data: at the floor the nugget allows
        if len(steps) > MAX_ITERATIONS:
            warnings.warn(f"LSI with {scheme.name}: the DEL residuals on the data still decreased after {MAX_ITERATIONS} "
                          f"iterations (largest {steps[-1]['max_del']:.2g}, interior points moved by {change:.2g} data "
                          "spreads); a smaller step h or more data make the fit better determined", IdentifiabilityWarning,
                          stacklevel=caller_level())
            break
        Ja, Jb = interior_jacobians(mean, a2, Q, b2, h, scheme)
        G = _linearised_del(S, Q, Ja, Jb, h, scheme)
        if len(steps) == RELEARN_AT and model._learns_time_unit:  # hyperparameters for the stage scheme's conditions
            P = discrete_momentum_functionals(torch.stack([a2, b2], 1), h, LinearisedStages(scheme, mean))
            model._fit_functionals(G, _groups(S, 2), P, _groups(S, 1), normalisation=norm)
            F_norm = _norm_functionals(model)
            continue
        with torch.no_grad():
            model.gp.condition(Functionals.cat([G, F_norm]))
    model.gp.variance_scale = model._variance_scale
    model._pending_calibration = None  # the energy calibration conditions on midpoint functionals: not valid here
    model.history["stage_iterations"] = steps


def accepted_scheme(scheme):
    """The scheme, if LSI can fit with it: a stage scheme (here) or one linear in ``L``."""
    from .._checks import check_linear_scheme

    return scheme if isinstance(scheme, StageScheme) else check_linear_scheme(scheme)


def linear_scheme(model):
    """The scheme whose functionals ``model``'s posterior is taken of: its own, or its stage scheme linearised at the
    posterior mean (:class:`LinearisedStages`)."""
    if isinstance(model.scheme, StageScheme):
        return LinearisedStages(model.scheme, model._lagrangian_std)
    return model.scheme


def check_stage_objective(kind: str, scheme) -> None:
    """The ``"positions"`` objective builds its one-step predictions from linear DEL functionals: not here."""
    if kind == "positions" and isinstance(scheme, StageScheme):
        raise UnsupportedSchemeError(f"the 'positions' objective is not available with the stage scheme {scheme.name}: use "
                            "objective='mll' (the default for n <= 2) or fix the lengthscale")
