"""Predictions of a fitted GP model that survive the rounding noise of its posterior mean."""

from __future__ import annotations

import warnings
from typing import Dict

from integrators import ConvergenceError

from .guards import ToleranceRelaxedWarning


def solve_with_retry(make_integrator, newton: Dict, q0, qdot0, steps: int, legendre=None):
    """``make_integrator(**options).solve(...)`` (a :class:`~integrators.Trajectory`); with the default Newton options, a failure at the
    rounding level of the posterior mean (a model whose dynamics are tiny against the size of its
    coefficients, e.g. with the vertex normalisation) is retried with looser step tolerances, with a
    warning. Explicit options are used as given."""
    if newton:
        return make_integrator(**newton).solve(q0, qdot0, steps, legendre=legendre)
    for xtol in (None, 1e-8, 1e-6):
        opts = {} if xtol is None else {"xtol": xtol}
        try:
            out = make_integrator(**opts).solve(q0, qdot0, steps, legendre=legendre)
        except ConvergenceError as err:
            last = err
            continue
        if xtol is not None:
            warnings.warn(f"Newton's method stalled at the rounding level of the learned Lagrangian; predicted with "
                          f"xtol={xtol:g} (the learned dynamics are small against its rounding noise -- a different "
                          f"normalisation or a larger nugget helps)", ToleranceRelaxedWarning, stacklevel=3)
        return out
    raise last
