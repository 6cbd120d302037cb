r"""The GP posterior mean with an RBF kernel as C, for the compiled integrator path.

:class:`~learners.shadow.kernels.AtomExpansion` with an RBF kernel is

.. math::  f(x) = \sigma_f^2 \sum_k e_k P_k(r_k), \quad r_k = (x - y_k)/\ell, \quad e_k = e^{-|r_k|^2/2},
           \quad P_k(r) = c_k + \tilde v_k\cdot r + c^{(2)}_k (\tilde u_k\cdot r)(\tilde d_k\cdot r),

(:math:`c_k = c^0_k - c^{(2)}_k\,\tilde u_k\cdot\tilde d_k`). Its gradient and Hessian in closed form,

.. math::  \nabla f = \frac{\sigma_f^2}{\ell}\sum_k e_k(\nabla P_k - r_k P_k), \qquad
           \nabla^2 f = \frac{\sigma_f^2}{\ell\,\ell^\top}\sum_k e_k\big[\nabla^2P_k - \nabla P_k\, r_k^\top
           - r_k \nabla P_k^\top + P_k (r_k r_k^\top - I)\big],

with :math:`\nabla P = \tilde v + c^{(2)}(\tilde u\, \tilde d\cdot r + \tilde d\, \tilde u\cdot r)` and
:math:`\nabla^2 P = c^{(2)}(\tilde u\tilde d^\top + \tilde d\tilde u^\top)`, are one loop over the atoms
in C (:data:`SOURCE`, fixed: the atoms are run-time data), so the compiled integrator
(:mod:`integrators.compiled`) steps a learned Lagrangian without torch or autograd.
"""

from __future__ import annotations

import numpy as np
import torch

from .kernels import AtomExpansion

__all__ = ["c_lagrangian_of_expansion", "SOURCE", "StandardisedMean", "data_units_form"]

#: P = [D, K1, K2, scale, ell (D), K1 atoms (y (D), v (D), c), K2 atoms (y, v, c, c2, u (D), d (D))]:
#: K1 atoms of order <= 1, then the K2 atoms with a second-order part
SOURCE = r"""
static void lag_derivs(const double *x, const double *P, double *g, double *H) {
    const int D = (int)P[0];
    const long K1 = (long)P[1], K2 = (long)P[2];
    const double scale = P[3], *ell = P + 4, *atom = P + 4 + D;
    double xs[DMAX], r[DMAX], gp[DMAX], G[DMAX], HH[DMAX * DMAX];
    for (int i = 0; i < D; i++) {
        xs[i] = x[i] / ell[i];
        G[i] = 0.0;
    }
    for (int i = 0; i < D * D; i++) HH[i] = 0.0;
    for (long k = 0; k < K1 + K2; k++) {
        const int second = k >= K1;
        const double *y = atom, *v = atom + D;
        const double c = atom[2 * D];
        double q = 0.0, Pk = c;
        for (int i = 0; i < D; i++) {
            r[i] = xs[i] - y[i];
            q += r[i] * r[i];
            Pk += v[i] * r[i];
        }
        const double e = exp(-0.5 * q);
        if (!second) {
            atom += 2 * D + 1;
            for (int i = 0; i < D; i++) {
                G[i] += e * (v[i] - r[i] * Pk);
                for (int j = i; j < D; j++)
                    HH[i * D + j] += e * (-v[i] * r[j] - r[i] * v[j] + Pk * (r[i] * r[j] - (i == j ? 1.0 : 0.0)));
            }
            continue;
        }
        const double c2 = atom[2 * D + 1], *u = atom + 2 * D + 2, *d = atom + 3 * D + 2;
        atom += 4 * D + 2;
        double ur = 0.0, dr = 0.0;
        for (int i = 0; i < D; i++) {
            ur += u[i] * r[i];
            dr += d[i] * r[i];
        }
        Pk += c2 * ur * dr;
        for (int i = 0; i < D; i++) gp[i] = v[i] + c2 * (u[i] * dr + d[i] * ur);
        for (int i = 0; i < D; i++) {
            G[i] += e * (gp[i] - r[i] * Pk);
            for (int j = i; j < D; j++)
                HH[i * D + j] += e * (c2 * (u[i] * d[j] + d[i] * u[j]) - gp[i] * r[j] - r[i] * gp[j]
                                      + Pk * (r[i] * r[j] - (i == j ? 1.0 : 0.0)));
        }
    }
    for (int i = 0; i < D; i++) {
        g[i] = scale * G[i] / ell[i];
        for (int j = i; j < D; j++) H[i * D + j] = H[j * D + i] = scale * HH[i * D + j] / (ell[i] * ell[j]);
    }
}
"""


def c_lagrangian_of_expansion(ex: AtomExpansion, n: int):
    """The :class:`integrators.compiled.CLagrangian` of an RBF :class:`AtomExpansion` on ``(q, v)``
    with ``n`` coordinates; raises :class:`integrators.compiled.NotLowerable` for other kernels."""
    from integrators.compiled import CLagrangian, NotLowerable

    if not ex.fast:
        raise NotLowerable("only the RBF posterior mean (atoms of order <= 2, fixed hyperparameters) has a C form")
    with torch.no_grad():
        D = ex._Y.shape[1]
        if D != 2 * n:
            raise NotLowerable(f"the expansion lives on R^{D}, not on (q, v) with n = {n}")
        counts, atoms = packed_atoms(ex)
        parts = [torch.tensor([float(D)], dtype=torch.float64, device=counts.device), counts,
                 ex._scale.reshape(1).to(torch.float64),
                 ex._ls.reshape(-1).expand(D).to(torch.float64), atoms]
        params = np.ascontiguousarray(torch.cat(parts).cpu().numpy(), dtype=np.float64)  # the C code reads host memory
    return CLagrangian(n=n, source=SOURCE, params=params, cost=int(ex._Y.shape[0]))


def packed_atoms(ex: AtomExpansion):
    """The atoms of an RBF expansion as the C code reads them: ``(counts, atoms)`` with ``counts = [K1, K2]``
    and ``atoms`` the ``K1`` first-order rows ``(y, v, c)`` then the ``K2`` second-order rows
    ``(y, v, c, c2, u, d)``, flattened (``c = c0 + y.v``: the constant of the atom's polynomial in ``r``)."""
    Y, V = ex._Y, ex._V
    c = ex._const + (Y * V).sum(-1)
    if ex._second:
        c2, U, Dd = ex._c2, ex._U, ex._Dd
        two = c2 != 0
    else:
        two = torch.zeros(Y.shape[0], dtype=torch.bool, device=Y.device)
    one = ~two
    rows = [torch.cat([Y[one], V[one], c[one, None]], 1).reshape(-1)]
    if bool(two.any()):
        rows.append(torch.cat([Y[two], V[two], c[two, None], c2[two, None], U[two], Dd[two]], 1).reshape(-1))
    counts = torch.tensor([float(int(one.sum())), float(int(two.sum()))], dtype=torch.float64, device=Y.device)
    return counts, torch.cat(rows)


class StandardisedMean:
    r""":math:`\bar L'_{inv}` of a fitted model in its standardised coordinates, callable as ``L(q, v)``
    and with the C form of the posterior mean, so that predictions step on the integrators' compiled path."""

    def __init__(self, model):
        self.model = model
        self.n = model.n

    def __call__(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.model.gp.mean(torch.cat([q, v], -1))

    def c_lagrangian(self):
        return self.model._standardised_c_lagrangian()


def data_units_form(model, n: int):
    r"""The C form of a fitted model's posterior mean in the data's units: :math:`L(q, v) = s^2\,ar L'((q - ar q)/\sigma,
    v/s)` (:mod:`learners.shadow.units`), the GP coordinates' C form composed by
    :class:`integrators.model_protocol.AffineModel` (so the public ``integrator()`` steps in C like ``predict``)."""
    from integrators.model_protocol import AffineModel

    speed = float(model._speed)
    unit = float(model._unit) if model._center is not None else 1.0
    center = model._center if model._center is not None else torch.zeros(n, dtype=torch.float64)
    units = [unit] * n + [speed] * n
    offsets = torch.cat([center.reshape(-1).double().cpu(), torch.zeros(n, dtype=torch.float64)])
    return AffineModel(StandardisedMean(model), speed ** 2, units, offsets).compiled_form(n)
