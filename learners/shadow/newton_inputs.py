r"""What Newton's method on :math:`\partial_v\mathrm{mod}_N\bar L'(q_j, v_j) = p_j` takes along standardised positions: the
recovered Lagrangian, the discrete momenta of :math:`\bar L'` and a probe of the derivatives it will ask for -- one
set-up for :meth:`~learners.shadow.recovery.RecoveryMixin.velocities` and the calibration's window centres
(:mod:`learners.shadow.difference_calibration`), so that both solve the same equations from the same inputs.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

from integrators import modified

from .rbf_jet import jets_fit

__all__ = ["newton_inputs", "probe_newton_derivatives"]


def newton_inputs(model, qs_std: torch.Tensor, order: int, chunk: int, states: Optional[int] = None, jets: bool = True,
                  probe_row: int = 0) -> Tuple[object, torch.Tensor]:
    r"""``(L, p)``: :math:`\mathrm{mod}_N\bar L'` of ``order`` (its jet's path chosen for a bulk call at ``states`` states,
    :func:`~learners.shadow.rbf_jet.bulk_path`; the jet's derivatives where ``jets`` and :func:`jets_fit`) and the
    discrete momenta along ``qs_std`` (S + 1, batch..., n), ``chunk`` time rows a pass (first derivatives: the jet
    always serves them where ``jets``); ``L`` probed at the first trajectory's state at time row ``probe_row``."""
    n = model.n
    L = model._recovered_std(order, jets and jets_fit(n, order), states)
    p = modified.momenta(None, qs_std, model._h_std, model.scheme, chunk, integrator=model._momentum_integrator(jets))
    probe_newton_derivatives(L, qs_std[probe_row].reshape(-1, n)[:1], p[probe_row].reshape(-1, n)[:1])
    return L, p


def probe_newton_derivatives(L, q: torch.Tensor, p: torch.Tensor) -> None:
    r"""Take, at one state, the derivatives that Newton's method on :math:`\partial_vL = p` takes (value,
    gradient in ``v``, its Jacobian), so that a :class:`~learners.shadow.rbf_jet.JetLagrangian` inside ``L`` learns the
    order it needs before the whole batch (else it extends the batch's jet order by order). The velocity used is ``p``
    itself (any state will do); failures are left to the real solve."""
    try:
        with torch.enable_grad():
            v = p.detach().clone().requires_grad_(True)
            (g,) = torch.autograd.grad(L(q, v).sum(), v, create_graph=True)
            for i in range(g.shape[-1]):
                torch.autograd.grad(g[..., i].sum(), v, retain_graph=True, allow_unused=True)
    except (ValueError, RuntimeError, ArithmeticError):
        pass
