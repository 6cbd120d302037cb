r"""Principal-direction coordinates: a candidate of the ``"positions"`` search for data whose directions differ in scale.

The positions search (:mod:`learners.shadow.position_search`) ties one lengthscale over all positions and one over
all velocities, in coordinates standardised with one scale for all (:mod:`learners.shadow.units`). Where the
dynamics are much quieter in some directions than in others, one lengthscale cannot fit both: the softened two-body
problem in a weak trap (``two_body4`` of tests/test_learners_shadow_auto.py) has accelerations 50x weaker along the
centre of mass than along the relative coordinate, the tied search ends long for the relative potential, and the
motion is mispredicted by 8% of a step (benchmarks/RESULTS_identification.md, session 5).

The candidate turns the standardised positions to the principal directions of their second differences,

.. math::  C = \frac1K\sum_{k} (a_k - \bar a)(a_k - \bar a)^\top, \quad a_k = \frac{q'_{k+1} - 2q'_k + q'_{k-1}}{h'^2}, \qquad
           C = R\,\mathrm{diag}(\lambda_1..\lambda_n)\,R^\top,

(the covariance of the accelerations, :math:`\bar a` their mean; :math:`R` orthogonal). Why centred: a lengthscale
measures how fast the forces *change*, and a uniform force (a linear potential, smooth at any lengthscale) would
otherwise shorten the lengthscales along its direction; on the acceptance systems, trapped oscillations with mean
accelerations at most 4% of their RMS, centring moves the factors by at most 5e-4 relative and fits :math:`L'` in the coordinates :math:`R^\top q'`
(the DEL equations of every scheme commute with this linear map: :mod:`learners.shadow.units`), with the search's tied
lengthscales multiplied per direction by

.. math::  f_i = (\lambda_{\max}/\lambda_i)^{1/2} \Big/ \Big(\prod_j (\lambda_{\max}/\lambda_j)^{1/2}\Big)^{1/n}

(positions and velocities alike; geometric mean 1, so the grid's scales keep their meaning). Why the square root: a
GP sample with lengthscale :math:`\ell` has gradients of size :math:`1/\ell`, and the force along direction :math:`i`
has the RMS :math:`\sqrt{\lambda_i}`, so the lengthscales follow :math:`1/\sqrt{\lambda_i}`. The candidate fixes the
whole mass matrix (:class:`~learners.shadow.normalisation.MassNormalisation` with ``matrix=True``): in such data the
parts whose motions are nearly independent are exactly the ones the trace leaves unscaled (with the trace the rotated
two_body4 fit predicted the motion best but weighted its parts 1.98 / 0.40 / 1.47: energy error 0.25); a normalisation
given with ``matrix="diagonal"`` or ``True`` is kept as given, the diagonal one in the data's axes (the user's
``axes``, given in the data's coordinates, turned with the fit's coordinates: rows of ``axes @ R``). With
``kernel="auto"`` its kernel is the degree-2 mechanical kernel (the lower energy error there: 0.018 against 0.033).

It is kept only where its held-out objective (the mean log squared one-step error, invariant under rotations) is lower
than the tied fit's by :data:`PRINCIPAL_MARGIN`, so systems where it does not help keep today's fit, and ``n <= 2``
(the likelihood objective) never runs it. Cost: one more search (30 subset solves and up to 7 full solves), for
``n >= 3`` only; the final solve on all data (the largest) is made once, for the fit kept. Not scored where
``kernel="auto"`` kept an element structure (:mod:`~learners.shadow.structure_choice`): the structure fixes the
coordinates, as with ``kernel=ElementKernel...`` (saves about 30 s of CPU at n = 6).
"""

from __future__ import annotations

import math
import time
import warnings
from typing import Optional, Tuple

import torch

import bea
from bea.errors import BeaError, BeaWarning

from .guards import caller_level
from .hyperparameter_search import split_functionals
from .step_resolution import second_differences

__all__ = ["principal_directions", "lengthscale_factors", "fit_with_candidate", "PRINCIPAL_MARGIN", "QUIET", "POWER"]

#: how much lower (mean of log squared one-step errors) the candidate's held-out objective must be to be kept: 0.5,
#: one-step errors about 22% smaller, the margin of the mass-matrix choice (position_search.MATRIX_MARGIN) for the same
#: reason -- differences below it do not say which fit identifies better. two_body4 gains 1.9 (session 5).
PRINCIPAL_MARGIN = 0.5
#: the smallest eigenvalue, relative to the largest, that the factors follow (:func:`lengthscale_factors`): factors at
#: most ``QUIET ** -POWER`` apart (100x at POWER = 0.5). At 1e-12 (before session 10) a two-body problem without a trap
#: (centre-of-mass eigenvalues ~1e-18) gave factors 985 / 0.001 and the candidate's search found no usable fit; every
#: system measured has ratios above 2.3e-3 (the unequal-mass two-body variant; two_body4 1.6e-2, the FPU chain 1.3e-2),
#: where nothing changes
QUIET = 1e-4
#: exponent of the lengthscale factors (module docstring)
POWER = 0.5

#: the options a candidate copies from the model (their current values, so options set after construction count)
_OPTIONS = ("h", "scheme", "objective", "fixed_lengthscale", "fixed_noise", "ard", "iterations", "max_train_functionals",
            "seed", "_user_kernel", "_kernel_template", "_kernel_auto")
#: the fitted state an adopted candidate hands to the model: what :func:`~learners.shadow.persist.fitted_state` saves
#: (units, posterior, normalisation count, kernel degree, the subclass's extra), the fit's history and the calibration
#: still to run (:func:`~learners.shadow.calibration.ensure_energy_calibration`), and the final solve still to make
_FITTED = ("n", "_center", "_unit", "_step", "_rotation", "_data_device", "gp", "_norm_count", "kernel_degree",
           "kernel_structure", "snapshots", "_data_level", "objective_used", "_calibration", "_pending_calibration",
           "_variance_scale", "history", "_recovered", "_jet", "_final")
#: the history of the element structures scored by kernel="auto" (:mod:`~learners.shadow.structure_choice`), which an
#: adopted candidate (fitted without them) leaves in place
_SCREEN_HISTORY = ("structures", "structure_kept", "default_objective")


def principal_directions(S_std: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Eigenvalues :math:`\lambda` (ascending, (n,)) and orthonormal eigenvectors :math:`R` (columns, (n, n)) of the
    covariance of the second differences of snapshots ``S_std`` (n_traj, m, n) (module docstring; in the standard
    time unit h' = 1: a step size would scale lambda, not the directions or the factors)."""
    a = second_differences(S_std).reshape(-1, S_std.shape[-1])
    a = a - a.mean(0)
    lam, R = torch.linalg.eigh(a.T @ a / a.shape[0])
    return lam, R


def lengthscale_factors(lam: torch.Tensor, power: float = POWER) -> torch.Tensor:
    r""":math:`f_i` of the module docstring; a direction with less acceleration than :data:`QUIET` :math:`\lambda_{\max}`
    (none the data can resolve: a freely moving centre of mass, :math:`\lambda_i` at rounding) is treated as that."""
    top = float(lam.max())
    f = (top / lam.clamp_min(QUIET * top)) ** power
    return f / f.log().mean().exp()


def _training_trajectories(S: torch.Tensor) -> torch.Tensor:
    """The trajectories of ``S`` the search trains on (:func:`~learners.shadow.hyperparameter_search.split_functionals`:
    every fifth validates), so the held-out ones that score the candidate against the tied fit, and calibrate the one
    kept, did not also choose its directions; all of them below five trajectories, where the split interleaves
    functionals and every trajectory trains."""
    T = S.shape[0]
    if T < 5:
        return S
    train, _ = split_functionals(torch.arange(T, device=S.device), T)
    return S[train]


def _applies(model, n: int) -> bool:
    """Whether the candidate is scored: the ``"positions"`` search with per-input lengthscales, learned kernel,
    a mass normalisation that may fix the whole matrix, and a scheme linear in L."""
    from .normalisation import MassNormalisation

    norm = model.normalisation
    return (n >= 3 and model._learns_time_unit and model.ard and not isinstance(model.scheme, bea.StageScheme)
            and model._resolved_objective(n) == "positions" and isinstance(norm, MassNormalisation)
            and norm.matrix is not False)


def _candidate(model, S: torch.Tensor, R: torch.Tensor, factors: torch.Tensor):
    """A model with ``model``'s current options, searched (not yet finalised) in the principal directions with the
    per-direction factors, the whole mass matrix and, with ``kernel="auto"``, the mechanical kernel."""
    from .mechanical import MechanicalKernel
    from .position_search import MECHANICAL_DEGREE

    cand = type(model)(model.h, progress=False)
    for name in _OPTIONS:
        setattr(cand, name, getattr(model, name))
    norm = model.normalisation
    if norm.matrix is None:  # the fit chooses: SEARCHED_MATRIX
        cand.normalisation = norm.searched(S.shape[-1])
    else:
        cand.normalisation = norm
    if cand.normalisation.matrix == "diagonal":  # the user's axes (rows, data's coordinates; default I) turned with q' -> q' R
        cand.normalisation = cand.normalisation.with_axes(R if norm.axes is None else norm.axes.to(R) @ R)
    if model._kernel_auto:
        cand._kernel_template, cand._kernel_auto = MechanicalKernel(MECHANICAL_DEGREE), False
    cand._direction_factors = factors
    cand._fit_in_units(S, R, finalise=False)
    if model._kernel_auto:
        cand.kernel_degree = MECHANICAL_DEGREE  # the model file's record of the kernel (persist)
    return cand


def _adopt(model, cand) -> None:
    """``model`` takes ``cand``'s fitted state (:data:`_FITTED`), attribute by attribute: its own options and modules
    (a kernel template) stay, and its ``state_dict`` has the keys of a plain fit; the history of the structures its
    own search scored (:data:`_SCREEN_HISTORY`, which the candidate's search does not score) is kept."""
    screened = {key: model.history[key] for key in _SCREEN_HISTORY if key in model.history}
    for name in _FITTED:
        setattr(model, name, getattr(cand, name))
    model.history.update(screened)


def _reissue(caught) -> None:
    """The fit kept's warnings, naming the caller of ``fit``."""
    for w in caught:  # each as its own class: w.message is the Warning instance, whose class warn uses over the category
        warnings.warn(w.message, BeaWarning, stacklevel=caller_level())


def fit_with_candidate(model, S: torch.Tensor) -> None:
    """Fit ``model`` on snapshots ``S`` (data units) as the search does, then, where it applies, the principal-direction
    candidate (directions and factors from the training trajectories only, :func:`_training_trajectories`); keep the
    candidate only where its held-out objective is lower by :data:`PRINCIPAL_MARGIN`. Only the
    fit kept makes the final solve (on all data: the fit's largest). Its warnings are issued, naming the caller of
    ``fit`` (those of the other are dropped; where the candidate is scored they come after both searches, so under
    ``-W error`` the fit raises at its end); ``model.history["principal"]`` records the eigenvalues, factors, both
    objectives, the choice and the candidate's search time (``candidate_cpu_s``, CPU seconds of this process)."""
    n = S.shape[-1]
    if not _applies(model, n):
        model._fit_in_units(S)
        return
    with warnings.catch_warnings(record=True) as base_warnings:
        warnings.simplefilter("always")
        model._fit_in_units(S, finalise=False)
    if getattr(model, "kernel_structure", None) is not None:  # the structure kernel="auto" kept fixes the coordinates
        model.history["principal"] = {"kept": False, "skipped": "an element structure was kept"}  # (as kernel=Element...)
        model._finalise()
        _reissue(base_warnings)
        return
    lam, R = principal_directions(model._to_standard(_training_trajectories(S)))  # fitted unrotated: centre and unit
    factors = lengthscale_factors(lam)
    record = {"eigenvalues": lam.tolist(), "factors": factors.tolist(), "objective": model.history.get("objective")}
    cand: Optional[object] = None
    started = time.process_time()  # the candidate's cost, recorded: its search is the price of every n >= 3 fit
    with warnings.catch_warnings(record=True) as cand_warnings:
        warnings.simplefilter("always")
        try:
            cand = _candidate(model, S, R, factors)
        except (BeaError, torch.linalg.LinAlgError) as err:  # no usable candidate: today's fit stands
            record["error"] = f"{type(err).__name__}: {err}"
    value = None if cand is None else cand.history.get("objective")
    base = record["objective"]
    kept = value is not None and math.isfinite(value) and (base is None or not math.isfinite(base)
                                                           or value < base - PRINCIPAL_MARGIN)
    record.update(candidate_objective=value, kept=kept, candidate_cpu_s=time.process_time() - started)
    if kept:
        _adopt(model, cand)
    model.history["principal"] = record
    model._finalise()
    _reissue(cand_warnings if kept else base_warnings)
