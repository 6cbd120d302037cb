r"""The search for the hyperparameters of the LSI GP under the ``"positions"`` objective, in two stages.

The objective (:mod:`learners.shadow.position_objective`) costs one solve with all training functionals per
evaluation, and the best lengthscales shrink as the data grow (FPU chain, ``n = 4``: 4.2 / 34 in the data's
units with 400 training functionals, 1.6 / 12.6 with all 3,200), so a search on a subset alone ends too long,
and a search on all of them is slow (65 grid solves took 5 minutes at ``n = 4``, 200 trajectories). Hence:

1. **Grid on a subset** (:func:`subset_grid`): one lengthscale :math:`\ell_q` shared by the positions and one
   :math:`\ell_v = f\,\ell_q` shared by the velocities, :math:`\ell_q/s_0` in :data:`SCALES` (:math:`s_0` the RMS
   spread of the data's atoms) and :math:`f` in :data:`VELOCITY_FACTORS`, each conditioned on at most
   ``max_train_functionals`` training functionals (whole trajectories). It finds the basin: a Lagrangian is
   smoother in the velocities (a low-degree polynomial in them) than in the positions, and smooth on scales
   beyond the data's spread, so the grid reaches far in both.
2. **Refinement on all training functionals** (:func:`refine`): a pattern search on
   :math:`(\log\ell_q, \log\ell_v)` along three directions -- both together first (the direction in which the
   optimum moves as data are added), then each alone -- steps of a factor 1.5 halved when none improves,
   at most ``evaluations`` solves.

From ``n = 3`` on, stage 1 runs twice, with the trace of the mass matrix and with the whole matrix as normalisation
(:mod:`learners.shadow.normalisation`); each grid's best point is evaluated with all training functionals, and the
matrix is kept only where its held-out error is lower by :data:`MATRIX_MARGIN` -- where a separate part of the
Lagrangian collapsed under the trace. The second grid adds 30 subset solves and one full solve.

With ``kernel="auto"`` (the default) a third candidate is scored the same way: the mechanical kernel
(:mod:`learners.shadow.mechanical`) of degree :data:`MECHANICAL_DEGREE` in the velocities with the whole matrix.
Degree 2 holds exactly the mechanical form :math:`\tfrac12 v^\top M(q)v + b(q)\cdot v - V(q)` and the matrix
condition (with its curvature term) fixes :math:`M(x_0)` as :math:`L_{inv}` has it; the degree-4-in-:math:`v` part of
:math:`L_{inv}` at :math:`O(h^2)` is outside its space (what that costs :math:`H_{rec}[4]` is measured in
benchmarks/RESULTS_identification.md: it does not; degree 4 did worse at N = 4 too, and the held-out error does not
see it). It needs the matrix: under the trace alone the scales of its parts are free. The whole matrix assumes equal
masses at :math:`x_0`; with unequal ones (masses in Cartesian coordinates) it contradicts the data, and a fourth
candidate (:data:`MECHANICAL_DIAGONAL`) scores the same kernel with ``matrix="diagonal"`` (trace, no off-diagonal
entries in the data's axes), kept over the whole matrix's only where lower by :data:`MATRIX_MARGIN` (on separable
parts with equal masses the two are level and only the whole matrix fixes the parts' scales).
The RBF's choice and this candidate are each refined and the lower refined held-out error wins: each kernel at its
own best hyperparameters (unrefined, the chain with position-dependent masses chose the RBF, -17.72 against -17.25;
refined, the mechanical kernel reaches -17.92). Cost: 30 subset solves and 1 + 6 full solves more.

One position and one velocity lengthscale (not one per input): the data are standardised with one scale for
all coordinates (:mod:`learners.shadow.lsi`), and per-input lengthscales doubled the cost of every refinement
sweep without a better held-out error on the systems tried.
"""

from __future__ import annotations

import math
from typing import Callable, List, Optional, Tuple

import torch

from bea.errors import BeaRuntimeError

__all__ = ["search_positions", "SCALES", "VELOCITY_FACTORS", "REFINE_EVALUATIONS", "NUGGET", "MATRIX_MARGIN", "MECHANICAL_DEGREE", "MECHANICAL_DIAGONAL", "subset_grid", "refine", "tied_theta"]

#: position lengthscales of the grid, relative to the RMS spread of the data's atoms (factor 2 apart: the
#: refinement closes the gaps)
SCALES = (0.5, 1.0, 2.0, 4.0, 8.0, 16.0)
#: velocity lengthscales of the grid, relative to the position lengthscale
VELOCITY_FACTORS = (1.0, 2.0, 4.0, 8.0, 16.0)
#: default number of solves of the refinement with all training functionals
REFINE_EVALUATIONS = 6
#: relative nugget used throughout (the posterior mean of exact data is smoothest at the smallest nugget; the
#: "positions" searches always ended at the floor)
NUGGET = 1e-12

#: how much lower (in the mean of log squared one-step errors) the held-out error with the whole mass matrix fixed must
#: be than with its trace for the matrix to be kept: 0.5, one-step errors about 22% smaller. Where the trace works the
#: two differ by 0.2 or less (benchmarks/RESULTS_identification.md) and do not say which identifies better; a collapse
#: of a separate part shows as 1.1 (two_body4), a non-diagonal mass matrix as -10 (skew_mass3). Keeping the matrix
#: unless it is clearly worse (with the curvature term of MassNormalisation) identified better -- the chain with
#: position-dependent masses 9.0e-3 -> 5.3e-3 -- but broke the energy calibration at CI size (anharmonic3, 40
#: trajectories: RMS z 1.30 -> 1.66, bound 1.5), so the trace stays the default where the two are level
MATRIX_MARGIN = 0.5

#: degree in the velocities of the mechanical kernel the default search scores against the RBF (module docstring)
MECHANICAL_DEGREE = 2

#: whether the default search also scores the mechanical kernel with ``MassNormalisation(matrix="diagonal")`` (trace,
#: zero off-diagonal entries in the data's axes: no equal masses assumed), kept over the whole matrix only where its
#: held-out error is lower by :data:`MATRIX_MARGIN`. With unequal masses the whole matrix's candidates are 8-10 worse
#: and rejected, leaving the RBF (5e-3 - 8e-3 on two untuned chains); on separable parts with equal masses only the
#: whole matrix fixes the parts' scales and the two are level (benchmarks/RESULTS_identification.md, Session 10, idmass).
#: Cost: 30 subset solves and one full solve (the n = 6 FPU fit 85.7 -> 108.6 s CPU on a loaded machine)
MECHANICAL_DIAGONAL = True

Objective = Callable[[torch.Tensor], float]


def tied_theta(ell_q: float, ell_v: float, n: int) -> torch.Tensor:
    r""":math:`\theta = (\log\ell_1..\log\ell_{2n}, \log\rho)` with ``ell_q`` on the positions and ``ell_v`` on
    the velocities."""
    return torch.tensor([math.log(ell_q)] * n + [math.log(ell_v)] * n + [math.log(NUGGET)], dtype=torch.float64,
                        device="cpu")  # the search's few numbers stay on the CPU


def subset_grid(evaluate: Objective, n: int, scale0: float) -> List[tuple]:
    """Stage 1 (module docstring): the list of ``(ell_q, ell_v, objective)`` over the grid."""
    out = []
    for s in SCALES:
        for f in VELOCITY_FACTORS:
            lq, lv = s * scale0, f * s * scale0
            out.append((lq, lv, evaluate(tied_theta(lq, lv, n))))
    return out


def refine(evaluate: Objective, n: int, ell_q: float, ell_v: float, evaluations: int,
           start: Optional[float] = None) -> Tuple[float, float, float, List[float]]:
    r"""Stage 2 (module docstring) from ``(ell_q, ell_v)``: returns the best ``(ell_q, ell_v, objective)`` and the
    trace of values (the first is the start, re-evaluated on all training functionals unless its value ``start``
    is given). A point met again (the step back from an improving move is the point it came from) takes its value
    from the trace instead of a second solve, and still counts as an evaluation: the same path, fewer solves."""
    x = torch.tensor([math.log(ell_q), math.log(ell_v)], dtype=torch.float64, device="cpu")
    best = evaluate(tied_theta(ell_q, ell_v, n)) if start is None else start
    trace = [best]
    seen = {_lattice_key(x): best}  # points already solved (the step back from an improvement is the previous point)
    directions = [(-1.0, -1.0), (1.0, 1.0), (-1.0, 0.0), (1.0, 0.0), (0.0, -1.0), (0.0, 1.0)]
    step = math.log(1.5)
    while len(trace) < evaluations + 1 and step > math.log(1.1):
        improved = False
        for k, d in enumerate(directions):
            if len(trace) >= evaluations + 1:
                break
            trial = x + step * torch.tensor(d, dtype=torch.float64, device="cpu")
            key = _lattice_key(trial)
            val = seen.get(key)
            if val is None:
                val = seen[key] = evaluate(tied_theta(math.exp(float(trial[0])), math.exp(float(trial[1])), n))
            trace.append(val)  # a revisited point counts as an evaluation, so the path is the one without the memo
            if val < best:
                best, x, improved = val, trial, True
                directions.insert(0, directions.pop(k))  # the next sweep starts in the direction that improved
                break
        if not improved:
            step /= 2
    return math.exp(float(x[0])), math.exp(float(x[1])), best, trace


def _lattice_key(x: torch.Tensor) -> tuple:
    """A point of the refinement's lattice, as a key: its log lengthscales rounded to 1e-9 (the steps are
    log 1.5 / 2^k; a point reached twice differs by rounding of the sums only)."""
    return tuple(round(float(v), 9) for v in x)


def _candidates(model, F_norm, F_norm_alt) -> list:
    """``(gp, normalisation, kernel degree or None)`` to score: the model's GP with ``F_norm`` and, where the
    normalisation is chosen by the search, with ``F_norm_alt``; where the kernel is also chosen (``kernel="auto"``),
    a fresh GP with the mechanical kernel of degree :data:`MECHANICAL_DEGREE` with ``F_norm_alt`` (module
    docstring: it needs the whole mass matrix)."""
    from .kernel_choice import new_gp
    from .mechanical import MechanicalKernel

    out = [(model.gp, F_norm, None)]
    if F_norm_alt is not None:
        out.append((model.gp, F_norm_alt, None))
        if getattr(model, "_kernel_auto", False):
            gp = new_gp(None, MechanicalKernel(MECHANICAL_DEGREE), F_norm_alt.dim, model.ard,
                        model._units_device)
            for p in gp.parameters():
                p.requires_grad_(False)
            out.append((gp, F_norm_alt, MECHANICAL_DEGREE))
            diagonal = getattr(model, "_norm_diagonal", None)
            if MECHANICAL_DIAGONAL and diagonal is not None:  # unequal masses: the same kernel, no equal masses assumed
                gp = new_gp(None, MechanicalKernel(MECHANICAL_DEGREE), diagonal.dim, model.ard, model._units_device)
                for p in gp.parameters():
                    p.requires_grad_(False)
                out.append((gp, diagonal, MECHANICAL_DEGREE))
    return out


def _refined(model, n: int, cand: tuple) -> tuple:
    """``cand`` after the refinement (stage 2): its objective value is the refined one."""
    lq, lv, val, full, F_all, norm, evaluate, gp, degree = cand
    evaluations = REFINE_EVALUATIONS if model.iterations is None else model.iterations
    trace, val = [full], val if full is None else full
    if evaluations > 0:
        lq, lv, val, trace = refine(evaluate, n, lq, lv, evaluations, start=full)
    return (lq, lv, val, full, F_all, norm, evaluate, gp, degree), trace


def search_positions(model, F_data, groups, F_tr, F_va, P_va, F_norm, positions, scale0: float, F_norm_alt=None):
    """Both stages for ``model`` (a :class:`~learners.shadow.hyperparameters.FunctionalLagrangianModel` with one
    lengthscale per input): grid with the training subset ``F_tr`` (which ends with the normalisation ``F_norm``),
    refinement with all training functionals (``model.iterations`` solves, default :data:`REFINE_EVALUATIONS`).
    With ``F_norm_alt`` (the whole mass matrix, :mod:`learners.shadow.normalisation`) the grid runs for each
    candidate of :func:`_candidates` and each grid's best point is evaluated with all training functionals; the
    whole matrix replaces the trace (RBF) only where lower there by :data:`MATRIX_MARGIN` (the subset's values alone
    chose wrongly on the two-body problem: -5.86 against -5.60 on the subset, -5.59 against -7.60 with all
    functionals). The RBF's choice and the mechanical kernel are then each refined, and the lower refined value
    wins (kernels at their own best hyperparameters). Returns the training functionals, the best theta and the
    normalisation kept; ``model.gp`` becomes the winner's GP and ``model.kernel_degree`` its mechanical degree
    (None: the kernel asked for); the grids, held-out values and refinement traces go to ``model.history``."""
    from .functionals import Functionals
    from .hyperparameter_search import objective, split_functionals

    n = F_data.dim // 2
    offset = _direction_offset(model, n)
    G_va = Functionals.cat([F_va, P_va])
    F_sub = F_tr.subset(torch.arange(F_tr.count - F_norm.count))
    tr_all, _ = split_functionals(groups, F_data.count)
    F_train = F_data.subset(tr_all)
    candidates = _candidates(model, F_norm, F_norm_alt)
    rbf, mech = None, None
    for k, (gp, norm, degree) in enumerate(candidates):
        grid = subset_grid(_shifted(objective(gp, "positions", Functionals.cat([F_sub, norm]), F_va, G_va, positions), offset),
                           n, scale0)
        model.history[("grid", "grid_alt", "grid_mechanical", "grid_mechanical_diagonal")[k]] = grid
        lq, lv, val = min(grid, key=lambda g: g[2])
        if not math.isfinite(val):
            continue
        F_all = Functionals.cat([F_train, norm])
        evaluate = _shifted(objective(gp, "positions", F_all, F_va, G_va, positions), offset)
        full = evaluate(tied_theta(lq, lv, n)) if len(candidates) > 1 else None  # None: refine evaluates it
        model.history.setdefault("normalisation_values", []).append(full)
        cand = (lq, lv, val, full, F_all, norm, evaluate, gp, degree)
        if degree is not None:  # the diagonal condition (scored second) only where clearly better (MECHANICAL_DIAGONAL)
            if math.isfinite(full) and (mech is None or full < mech[3] - MATRIX_MARGIN):
                mech = cand
        elif rbf is None or (full is not None and full < rbf[3] - MATRIX_MARGIN):
            rbf = cand  # the whole matrix only where it predicts clearly better (MATRIX_MARGIN)
    if rbf is None and mech is None:
        raise BeaRuntimeError("no hyperparameters on the grid gave a usable fit; fix them with lengthscale= and noise=")
    best, model.history["search"] = _refined(model, n, rbf) if rbf is not None else (None, [])
    if mech is not None:
        mech, model.history["search_mechanical"] = _refined(model, n, mech)
        best = mech if best is None or mech[2] < best[2] else best
    lq, lv, val, _, F_all, F_norm, evaluate, model.gp, model.kernel_degree = best
    model.history["objective"] = val
    return F_all, tied_theta(lq, lv, n) + (0 if offset is None else offset), F_norm


def _direction_offset(model, n: int) -> Optional[torch.Tensor]:
    r"""The log factors added to the tied :math:`\theta` where the model is fitted in principal directions
    (``model._direction_factors``, :mod:`learners.shadow.principal`): the same factor on a direction's position and
    velocity lengthscale; None for the tied search."""
    f = getattr(model, "_direction_factors", None)
    if f is None:
        return None
    log = f.to(dtype=torch.float64, device="cpu").log()
    return torch.cat([log, log, torch.zeros(1, dtype=torch.float64, device="cpu")])


def _shifted(evaluate: Objective, offset: Optional[torch.Tensor]) -> Objective:
    """``evaluate`` at theta plus ``offset`` (None: ``evaluate`` itself)."""
    if offset is None:
        return evaluate

    def shifted(theta: torch.Tensor) -> float:
        return evaluate(theta + offset)
    return shifted
