r"""The GP models' constructor arguments that need more than a type: their checks (typed errors that name the fix),
and ``final_solver=`` with the attribute it replaces
(:class:`~learners.shadow.hyperparameters.FunctionalLagrangianModel`).

``final_solver``
    How the fit's last and largest solve -- the conditioning on all :math:`F` data functionals and the normalisation,
    after the hyperparameters are chosen -- is done. ``None`` (the default): exactly, the Cholesky factor of
    :math:`\Theta + \sigma_n^2 I` (:math:`F^2` kernel entries, :math:`F^3/3` work). A
    :class:`~learners.shadow.lowrank_solve.LowRankSolver`: a pivoted Cholesky :math:`\Theta \approx LL^\top` from
    :math:`m \ll F` columns (until every functional's residual variance is below ``tol`` of its prior variance) and
    the subset-of-regressors mean on the :math:`m` pivots, :math:`\bar L(x) = \sum_{j \in m}\alpha_j\Lambda_j^y k(x, y)`
    (:math:`Fm` entries, :math:`O(Fm^2)` work; :mod:`learners.shadow.lowrank_solve`). The hyperparameter search and
    its calibration on held-back trajectories are unchanged (dense, on their subsets). The mean only: the posterior
    std and variances, the energy calibration, ``data_level`` and saving the model need the dense factor and are
    refused with a typed error naming the dense route.

    The attribute ``model.final_solver = LowRankSolver()`` set before ``fit`` (Session 15) works for one more release,
    with a :class:`DeprecationWarning`; the class attribute it was is now a property (:data:`final_solver`), so
    ``FunctionalLagrangianModel.final_solver`` reads a property object, not None. A model constructed with a
    :class:`~learners.shadow.lowrank_solve.LowRankSolver` keeps it: setting the attribute to another solver is refused
    (a :class:`~bea.errors.BeaValueError`), never silently ignored or applied. (An explicit ``final_solver=None`` is
    not told apart from the default, so the attribute may still set a solver on such a model.) A saved model's file
    does not record ``final_solver``: a saved posterior is always the dense one (:mod:`learners.shadow.persist`), and
    files stay readable by code from before the argument.
"""

from __future__ import annotations

import math
import warnings
from typing import Optional, Sequence, Union

import torch

from bea.errors import BeaTypeError, BeaValueError

from .hyperparameter_search import MIN_NOISE
from .lowrank_solve import LowRankSolver

__all__ = ["checked_lengthscale", "check_search_budget", "check_final_solver", "final_solver"]


def checked_lengthscale(lengthscale: Union[float, Sequence[float], torch.Tensor, None], epsilon: Optional[float],
                        noise: Optional[float]) -> Union[float, Sequence[float], torch.Tensor, None]:
    r"""The fixed lengthscale: ``lengthscale``, or the paper's ``epsilon`` as :math:`\ell = \varepsilon/\sqrt2` (not
    both); ``noise`` (the relative nugget then) finite and at least :data:`MIN_NOISE`."""
    if epsilon is not None:
        if lengthscale is not None:
            raise BeaValueError("give lengthscale= or epsilon=, not both")
        if not float(epsilon) > 0:
            raise BeaValueError(f"epsilon must be positive, got {epsilon}")
        lengthscale = float(epsilon) / math.sqrt(2)
    if noise is not None and not (math.isfinite(float(noise)) and float(noise) >= MIN_NOISE):
        raise BeaValueError(f"noise (relative nugget) must be a finite number >= {MIN_NOISE:g}, got {noise}")
    return lengthscale


def check_search_budget(iterations: Optional[int], max_train_functionals: int) -> None:
    """``iterations`` (pattern-search evaluations) None or an integer >= 0; ``max_train_functionals`` an integer >= 10."""
    if iterations is not None and (isinstance(iterations, bool) or not isinstance(iterations, int) or iterations < 0):
        raise BeaValueError(f"iterations must be an integer >= 0, got {iterations!r}")
    if isinstance(max_train_functionals, bool) or not isinstance(max_train_functionals, int) or max_train_functionals < 10:
        raise BeaValueError(f"max_train_functionals must be an integer >= 10 (the size of the subset used to learn the "
                            f"hyperparameters), got {max_train_functionals!r}")


def check_final_solver(solver) -> Optional[LowRankSolver]:
    """``solver`` if it is None (the exact solve) or a :class:`LowRankSolver`; a :class:`~bea.errors.BeaTypeError`
    naming both otherwise (a string such as ``"lowrank"`` included: the solver carries its tolerance and rank cap)."""
    if solver is None or isinstance(solver, LowRankSolver):
        return solver
    raise BeaTypeError(f"final_solver must be None (the exact Cholesky solve, the default) or a "
                       f"learners.shadow.LowRankSolver (e.g. final_solver=LowRankSolver(), its tol and max_rank set "
                       f"there), got {solver!r} of type {type(solver).__name__}")


def _get(model) -> Optional[LowRankSolver]:
    # an instance from before the argument (an old pickle or deepcopy) has no _final_solver: its old attribute, or None
    return model.__dict__.get("_final_solver", model.__dict__.get("final_solver"))


def _set(model, solver) -> None:
    """The deprecated attribute (module docstring): checked, warned, refused where it contradicts the constructor."""
    solver = check_final_solver(solver)
    given = getattr(model, "_init_args", {}).get("final_solver")
    if given is not None and solver != given:
        raise BeaValueError(f"this {type(model).__name__} was constructed with final_solver={given!r}, which it keeps "
                            f"(the constructor's value wins); construct it with final_solver={solver!r} instead")
    warnings.warn("setting model.final_solver is deprecated and will be removed in the next release; pass it to the "
                  f"constructor: {type(model).__name__}(..., final_solver={solver!r})", DeprecationWarning,
                  stacklevel=3)  # the user's line: _set <- nn.Module.__setattr__ <- the assignment
    model._final_solver = solver


#: the model's final solver (the constructor's ``final_solver=``); setting it is deprecated (module docstring)
final_solver = property(_get, _set, doc="The final solve's solver: None, the exact Cholesky; or a LowRankSolver "
                                        "(constructor argument final_solver=; :mod:`learners.shadow.model_arguments`).")
