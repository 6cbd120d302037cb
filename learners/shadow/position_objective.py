r"""The ``"positions"`` hyperparameter objective of the LSI GP: held-out one-step position errors.

For a held-out triple :math:`(a, b, c) = (q_{j-1}, q_j, q_{j+1})` of snapshots and a candidate Lagrangian
:math:`\bar L` (the posterior mean for some hyperparameters), the DEL residual
:math:`r = \partial_b\big[L_\Delta(a, b) + L_\Delta(b, c)\big]` is a force, not a position. One Newton
step of the scheme from the true :math:`c`, solving :math:`r(c') = 0`, moves it by

.. math:: \delta c = -J^{-1} r, \qquad J = \partial_c r = \partial_c\partial_b L_\Delta(b, c),

so :math:`\|\delta c\|` is, to first order in the residual, the error of the position the learned model
would predict for :math:`q_{j+1}` from :math:`(q_{j-1}, q_j)`. The objective is the mean of
:math:`\log\|\delta c\|^2` over the held-out triples.

Why this objective exists. Every DEL residual has target zero, and the zero Lagrangian satisfies them
all; only the normalisation at one point has a non-zero target. With :math:`n \ge 3` the likelihood
(``"mll"``) and the held-out residual (``"heldout"``) both reward collapsing towards that trivial
Lagrangian away from the normalisation point (short lengthscales, outputscales of 1e-17): the residuals
vanish, and so do the momenta they are compared with. A position error cannot be fooled that way: where
:math:`\bar L` is flat, :math:`J` is nearly singular and :math:`\|\delta c\|` is large. It is blind to
the scale of :math:`L` (:math:`r` and :math:`J` scale together) and needs positions only.
"""

from __future__ import annotations

from typing import Callable, Union

import torch

import bea

__all__ = ["one_step_errors", "position_objective"]

TorchLagrangian = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def one_step_errors(L: TorchLagrangian, triples: torch.Tensor, h: float,
                    scheme: Union[str, "bea.Scheme"] = "midpoint") -> torch.Tensor:
    r""":math:`\delta c = -J^{-1} r` for each triple ``(B, 3, n)`` (module docstring), shape ``(B, n)``.

    Raises ``torch.linalg.LinAlgError`` where :math:`J` is singular (a Lagrangian that does not determine the
    next position)."""
    sch = bea.get_scheme(scheme)
    a = triples[:, 0].detach()
    b = triples[:, 1].detach().clone().requires_grad_(True)
    c = triples[:, 2].detach().clone().requires_grad_(True)
    n = triples.shape[-1]
    with torch.enable_grad():
        val = sch(L, a, b, h) + sch(L, b, c, h)
        (r,) = torch.autograd.grad(val.sum(), b, create_graph=True)
        rows = [torch.autograd.grad(r[:, i].sum(), c, retain_graph=i < n - 1)[0] for i in range(n)]
    J = torch.stack(rows, 1)  # J[:, i, j] = d r_i / d c_j
    return -torch.linalg.solve(J, r.detach()[..., None])[..., 0]


def position_objective(triples: torch.Tensor, h: float, scheme: Union[str, "bea.Scheme"] = "midpoint"
                       ) -> Callable[[TorchLagrangian], float]:
    r"""``L`` :math:`\mapsto` the mean of :math:`\log\|\delta c\|^2` over ``triples`` (module docstring);
    ``inf`` where a Jacobian is singular or a value is not finite."""
    triples = triples.detach()

    def value(L: TorchLagrangian) -> float:
        try:
            dc = one_step_errors(L, triples, h, scheme)
        except (RuntimeError, torch.linalg.LinAlgError):
            return float("inf")
        val = float(torch.log(dc.pow(2).sum(-1) + 1e-300).mean())
        return val if val == val and abs(val) != float("inf") else float("inf")
    return value
