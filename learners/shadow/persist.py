r"""The fitted state of the GP Lagrangian models as tensors, for :mod:`learners.saving`.

The posterior is kept exactly as fitted -- the Cholesky factor :math:`R` of the conditioned covariance,
the weights :math:`\beta = (K + \sigma_n^2 I)^{-1} y`, the conditioning functionals (their atoms) and the
hyperparameters (the GP's ``state_dict``) -- so a loaded model predicts the same numbers without
refitting. The fit's ``history`` (hyperparameter search trace) is not saved. So a model whose final solve was the
low-rank one (``final_solver=``, :mod:`learners.shadow.lowrank_solve`), which has no :math:`R`, is refused by
:func:`check_savable`; and the file's configuration leaves ``final_solver`` out (:func:`saved_config`).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Dict

import torch

from bea.errors import BeaTypeError

from ..saving import ModelFileError
from .functionals import AtomSet, Functionals
from .gp import ConditioningInfo, _merge_atoms
from .kernels import AtomExpansion


def _functionals_state(F: Functionals) -> Dict[str, Any]:
    return {"dim": F.dim, "count": F.count, "targets": F.targets,
            "atoms": {str(m): [a.points, a.dirs, a.coef, a.owner] for m, a in F.atoms.items()}}


def _functionals(state: Dict[str, Any]) -> Functionals:
    atoms = {int(m): AtomSet(*parts) for m, parts in state["atoms"].items()}
    return Functionals(state["dim"], state["count"], atoms, state["targets"])


def saved_config(model) -> Dict[str, Any]:
    """The constructor's arguments a model file records: all but ``final_solver``, which says how a fit solves, while
    a saved posterior is always the dense one (:func:`check_savable`); so files stay readable by code before it."""
    # the only place final_solver is filtered out of _init_args: a file (and load's cls(**config)) never sees it
    return {k: v for k, v in model._init_args.items() if k != "final_solver"}


def check_savable(model) -> None:
    """Refuse to save a model whose final solve was low-rank (only :meth:`save` calls this; :func:`move` keeps the
    dense-factor refusal of :attr:`~learners.shadow.gp.FunctionalGP._chol`): a file holds the dense factor R."""
    model._require_fit()
    gp = model.gp
    if gp._lowrank is not None:
        raise ModelFileError(f"cannot save this {type(model).__name__}: its final solve was low-rank ({gp.solver}), and a "
                             "model file holds the dense Cholesky factor R, which a loaded model's std, calibration and "
                             "data_level read and a low-rank posterior does not have; fit it with final_solver=None "
                             "(the default) to save it")


def fitted_state(model) -> Dict[str, Any]:
    """Tensors and numbers of a fitted :class:`~learners.shadow.hyperparameters.FunctionalLagrangianModel` (the
    ``rotation`` key only for a model fitted in rotated coordinates)."""
    model._require_fit()
    gp = model.gp
    state = {"n": model.n, "center": model._center, "unit": model._unit, "step": model._step, "gp": gp.state_dict(),
             "chol": gp._chol, "beta": gp._beta.detach(), "functionals": _functionals_state(gp.train_functionals),
             "info": asdict(gp.info), "variance_scale": gp.variance_scale, "norm_count": model._norm_count,
             "kernel_degree": model.kernel_degree, "subclass": model._fitted_extra()}
    if model._rotation is not None:  # only then: the file is version 3 (file_version), which older code refuses
        state["rotation"] = model._rotation
    if getattr(model, "kernel_structure", None) is not None:  # only then: version 4 (5 per-body), which older code refuses
        state["kernel_structure"] = list(model.kernel_structure)
    return state


def file_version(state: Dict[str, Any]) -> int:
    """The model-file version of a :func:`fitted_state` (:data:`learners.saving.VERSIONS`): 5 with a per-body structure
    ``("bodies", k, d, "unequal")`` (code that reads version 4 knows only three-entry structures and would refuse the
    file as edited), 4 with another element structure chosen by ``kernel="auto"`` (code before it would build the
    default kernel and fail on its scales), 3 with a rotation, else 2."""
    structure = state.get("kernel_structure")
    if structure is not None:
        return 5 if len(structure) == 4 else 4
    return 3 if "rotation" in state else 2


def restore(model, state: Dict[str, Any]) -> None:
    """Put a saved fitted state into a freshly constructed model (no refit)."""
    model.n = state["n"]
    # files before the time unit: h' = h; the device is where the posterior was loaded (or moved) to
    # files before the rotation of the standardised coordinates: none
    model._set_units(state["center"], state["unit"], state.get("step"), state["beta"].device, state.get("rotation"))
    model.kernel_degree = state.get("kernel_degree")  # files before the kernel choice: the constructor's kernel
    structure = state.get("kernel_structure")  # files before the structure choice: none
    model.kernel_structure = None if structure is None else tuple(structure)
    gp = model._make_gp(2 * model.n)
    gp.load_state_dict(state["gp"])
    F = _functionals(state["functionals"])
    # not restored (nor carried by move): the factor's assembly, gp._factor_symmetric (False here; a positions fit's
    # factor is symmetric). It only keys a retarget's solve for reuse (FunctionalGP._key), which no loaded or moved
    # model makes; one by hand would be keyed as a full assembly's, equal to rounding. No number depends on it.
    gp.train_functionals, gp._chol, gp._beta = F, state["chol"], state["beta"]
    gp._guard_parts()
    gp.info = ConditioningInfo(**state["info"])
    gp.variance_scale = state["variance_scale"]
    gp._mean_atoms = _merge_atoms(F, gp._beta)
    gp._mean_fn = AtomExpansion(gp.kernel, gp._mean_atoms, differentiable=False)
    model.gp = gp
    # files before the normalisation could be the whole mass matrix: the constructor's
    model._norm_count = state.get("norm_count", model.normalisation.functionals(model.n, None).count)
    model._restore_extra(state["subclass"])


def _mapped(fn, value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return fn(value)
    if isinstance(value, dict):
        return {k: _mapped(fn, v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_mapped(fn, v) for v in value)
    return value


def move(model, fn) -> None:
    """Apply ``fn`` (an ``nn.Module._apply`` conversion: ``.to(device)`` and the like) to every tensor of the fitted
    state of ``model`` and restore it from the result: the posterior, data and units where ``fn`` sends them.
    The models compute in float64, so a conversion that changes the dtype is refused."""
    probe = fn(torch.zeros((), dtype=torch.float64, device="cpu"))
    if probe.dtype != torch.float64:
        raise BeaTypeError(f"{type(model).__name__} computes in float64 and cannot be converted to {probe.dtype}; "
                           "move it with .to(device) only")
    state = _mapped(fn, fitted_state(model))
    model._init_state()  # the derived Lagrangians, jets and caches of the old place; rebuilt on demand
    restore(model, state)
