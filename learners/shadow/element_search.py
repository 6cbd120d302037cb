r"""Learning the scales of an :class:`~learners.shadow.element_kernel.ElementKernel` with the ``"positions"`` objective.

The same objective and stages as the default kernels' search (:mod:`learners.shadow.position_search`), on the element
kernel's parameters :math:`(\ell_g, \lambda_g, s_g)_g, (\ell_c, \lambda_c, s_c)`:

1. **Grid on a subset**, tied: every group's (and the correction's) position lengthscale :math:`\ell_q`, velocity scale
   :math:`\ell_v`, over :data:`~learners.shadow.position_search.SCALES` x
   :data:`~learners.shadow.position_search.VELOCITY_FACTORS`, group scales 1 and the correction's
   the first of :data:`CORRECTION_SCALES` (nearly off: its terms are :math:`O(h^2)` of :math:`L_{inv}`, and a larger one
   costs accuracy where the elements suffice). The grid's local minima (:func:`grid_basins`, at most
   :data:`BASIN_STARTS`, lowest first) are each scored with all training functionals and the lowest is the start of
   stage 2: the subset's best point can lie in another basin than the full data's. two_body_lj6 (bodies(2, 3), seed 0):
   the subset's best was the grid's corner (16, 256 data spreads; -6.93 against -6.40 at 2, 8), but with all training
   functionals 2, 8 scored -9.91 against the corner's -8.27, and the search from the corner walked on to lengthscales
   of 81 spreads (-9.50) with energy differences wrong by 1.22. Where the normalisation is chosen
   (trace or whole mass matrix), both are scored and the matrix kept only where lower by
   :data:`~learners.shadow.position_search.MATRIX_MARGIN` with all training functionals, as for the default kernels --
   except where the structure itself says the masses are equal
   (:meth:`~learners.shadow.element_kernel.ElementKernel.equal_masses`: one shared body or site element): then the
   whole matrix, which fixes the scales of separately conserved parts that the trace leaves free (two_body4, correction
   held at 0.1: 1.15e-2 with the matrix against 2.72e-2 with the trace, which the held-out error at the grid point
   preferred, -12.87 against -11.41).
2. **Tied refinement** with all training functionals (:func:`~learners.shadow.position_search.refine`), then (2b) the
   correction's scale: each of :data:`CORRECTION_SCALES` scored there, the lowest held-out error kept.
2c. (``kernel="auto"``'s per-body structure only, :mod:`~learners.shadow.structure_choice`) **each group's position
   lengthscale** in turn times :data:`GROUP_FACTORS` (:func:`scan_groups`): the tied grid gives every group one
   lengthscale, which a pair with a short-range feature next to smooth bodies cannot share (lj_unequal4: held-out
   -11.18 -> -15.96, energy differences 7.6e-2 -> 5.8e-4; benchmarks/RESULTS_identification.md, Session 25). Not
   free: held-out values improve on every draw measured, energies on most, but yukawa4 s1 2.9e-3 -> 3.4e-3 and
   spring10_unequal4 1.3e-3 -> 2.3e-3 (the one-step objective does not rank energies at that level).
3. **Untied coordinate search** with all training functionals: every log-parameter but the first group's scale (the
   overall scale, which the positions objective does not see) -- the correction's scale included, so stage 2b's
   choice is refined further and may leave :data:`CORRECTION_SCALES`' range (two_body4's CI fit, 30 trajectories:
   6.7e-5) --, steps of a factor 1.5 halved when none improves, at most :data:`UNTIED_EVALUATIONS` solves
   (``iterations=`` overrides both stages' budgets).

Stages 2b, 2c and 3 move one parameter a trial, so their covariances are assembled part by part (the groups and the
correction), a part's Gram reused while its own scales stay (:mod:`~learners.shadow.element_gram`; equal to rounding):
a trial that moves a scale :math:`s_g, s_c` assembles nothing, one that moves a group's lengthscales that group only.

After the search, a group's position lengthscale at or above :data:`DEGENERATE_LENGTHSCALE` data spreads (the grid's
top) warns (:class:`DegenerateScalesWarning`, :func:`check_scales`): over the data such an RBF element is nearly a
polynomial of low degree, which predicts the positions of a harmonic centre of mass well while it may miss a relative
well, and the objective, which sees one-step positions only, does not say so; the other check, the energy std's
:class:`~learners.shadow.identifiability.IdentifiabilityWarning`, runs only where a std is asked for. A polynomial element (a harmonic trap, FPU springs) is right there, so the warning says "may".

The relative nugget stays at :data:`~learners.shadow.position_search.NUGGET`, relative to the outputscale
:math:`\sigma_f^2`, not to the prior variance :math:`k(z, z) = \sigma_f^2(\sum_g s_g^2\sum_{e,e'} k_g(w_e, w_{e'}) +
s_c^2)`, which reaches :math:`\sigma_f^2(\sum_g m_g^2 s_g^2 + s_c^2)`: at unit group scales about 8 for
``bodies(2, 2)`` and 85 for ``chain(6)``, so the effective regularisation is one to two orders below the default
kernels' (whose prior variance is :math:`\sigma_f^2`). Not tuned: the two_body4 numbers were measured with it.
Only the ``"positions"`` objective learns these scales (the likelihood's shared-lengthscale grid does not fit them):
another objective is refused. Also here: :class:`ElementHooks`, the model's side (binding the maps to the fit's
coordinates, the objective, the search, the hyperparameters reported).
"""

from __future__ import annotations

import math
import warnings
from typing import Callable, Dict, List, Optional

import torch

from bea.errors import BeaRuntimeError, BeaValueError

from .element_energy import ElementEnergy
from .element_gram import reusing_parts
from .element_kernel import ElementKernel
from .guards import IdentifiabilityWarning, caller_level
from .objectives import Auto
from .position_search import MATRIX_MARGIN, NUGGET, REFINE_EVALUATIONS, SCALES, VELOCITY_FACTORS, refine, subset_grid

__all__ = ["search_elements", "element_start", "ElementHooks", "CORRECTION_SCALES", "UNTIED_EVALUATIONS", "BASIN_STARTS",
           "DEGENERATE_LENGTHSCALE", "DegenerateScalesWarning", "grid_basins", "check_scales"]

#: the correction's scales relative to the groups' that stage 2b scores (stages 1 and 2 run at the first, nearly off).
#: Why not start at 0.1: on two_body4 (150 trajectories, RBF bases, whole matrix), whose h^2 terms are element-additive,
#: a correction held at 0.1 through the search gave held-out -11.41 (at the grid point) and energy differences 1.15e-2;
#: without it -16.93 and 1.5e-4 (benchmarks/RESULTS_identification.md, Session 12, branch elem)
CORRECTION_SCALES = (1e-4, 1e-3, 1e-2, 1e-1)
#: most solves of the untied coordinate search (stage 3)
UNTIED_EVALUATIONS = 16
#: the factors stage 2c (:func:`scan_groups`) tries on each group's position lengthscale: the grid's steps of 2,
#: up to 8 down (a short-range pair next to smooth bodies) and one up
GROUP_FACTORS = (0.125, 0.25, 0.5, 2.0)
#: most local minima of the tied grid scored with all training functionals (stage 1, :func:`grid_basins`)
BASIN_STARTS = 3
#: a group's position lengthscale at or above this many data spreads (the tied grid's top, ``SCALES[-1]``) warns
#: (:func:`check_scales`): the element function is then nearly a polynomial over the data
DEGENERATE_LENGTHSCALE = SCALES[-1]


class DegenerateScalesWarning(IdentifiabilityWarning):
    """The element kernel's search ended at near-polynomial scales (a group's position lengthscale at or beyond the tied
    grid's top), where the energies of separately conserved parts may not be identified; the message names the remedy."""


def element_theta(kernel: ElementKernel, ell_q: float, ell_v: float, correction: float = CORRECTION_SCALES[0]) -> torch.Tensor:
    r""":math:`\theta` (log-parameters and log nugget) with every group and the correction at ``ell_q``, ``ell_v``,
    group scales 1, the correction's ``correction``."""
    vals = []
    for name in kernel.parameter_names():
        part = name.split(":")[1]
        vals.append(ell_q if part == "lengthscale" else ell_v if part == "velocity_scale" else
                    correction if name.startswith("correction:") else 1.0)
    return torch.tensor([math.log(x) for x in vals] + [math.log(NUGGET)], dtype=torch.float64, device="cpu")


def _tied(kernel: ElementKernel, evaluate: Callable, n: int) -> Callable:
    """``evaluate`` of element theta, as a function of the default search's tied theta (n position, n velocity entries)."""
    return lambda th: evaluate(element_theta(kernel, math.exp(float(th[0])), math.exp(float(th[n]))))


def untied_search(evaluate: Callable, theta: torch.Tensor, best: float, free: List[int],
                  evaluations: int) -> tuple:
    """Stage 3 (module docstring) on the coordinates ``free`` of ``theta``: the best theta, its value, the trace."""
    step, trace = math.log(1.5), []
    while len(trace) < evaluations and step > math.log(1.1):
        improved = False
        for c in free:
            for sign in (1.0, -1.0):
                if len(trace) >= evaluations:
                    break
                trial = theta.clone()
                trial[c] += sign * step
                val = evaluate(trial)
                trace.append(val)
                if val < best:
                    best, theta, improved = val, trial, True
                    break
        if not improved:
            step /= 2
    return theta, best, trace


def scan_groups(evaluate: Callable, theta: torch.Tensor, best: float, names: List[str]) -> tuple:
    r"""Stage 2c (module docstring): each group's position lengthscale in turn (groups in the kernel's order, the
    correction's not), times each of :data:`GROUP_FACTORS`, the lowest held-out value kept before the next group:
    ``(theta, value, trace)``. Why: the tied grid gives every group one lengthscale, and stage 3's steps of 1.5 cannot
    part them by the factor 4-16 that a pair with a short-range feature needs next to smooth bodies (lj_unequal4, a
    pair force peaking at r = 1/2 in a quartic trap: pair 8 data spreads, held-out -11.18, energy differences 7.6e-2;
    with the scan -15.96 and 5.8e-4, the bodies at 24 spreads; benchmarks/RESULTS_identification.md, Session 25)."""
    trace = []
    for c, name in enumerate(names):
        if not name.endswith(":lengthscale") or name.startswith("correction:"):
            continue
        base = theta
        for f in GROUP_FACTORS:
            trial = base.clone()
            trial[c] += math.log(f)
            val = evaluate(trial)
            trace.append(val)
            if val < best:
                best, theta = val, trial
    return theta, best, trace


def grid_basins(grid: List[tuple], count: int = BASIN_STARTS) -> List[tuple]:
    """The tied grid's local minima, lowest first, at most ``count``: the finite points of
    :func:`~learners.shadow.position_search.subset_grid`'s list (``SCALES`` x ``VELOCITY_FACTORS``, in that order) not
    above any neighbour on the lattice (one step in the lengthscale or in the velocity factor)."""
    width = len(VELOCITY_FACTORS)

    def value(i, j):
        return grid[i * width + j][2] if 0 <= i < len(grid) // width and 0 <= j < width else math.inf
    out = [g for k, g in enumerate(grid) if math.isfinite(g[2]) and all(
        g[2] <= value(k // width + di, k % width + dj) for di, dj in ((-1, 0), (1, 0), (0, -1), (0, 1)))]
    return sorted(out, key=lambda g: g[2])[:count]


def _start(model, kernel: ElementKernel, grid: List[tuple], evaluate: Callable, count: int = BASIN_STARTS,
           known: Optional[dict] = None) -> tuple:
    """The refinement's start: of :func:`grid_basins` (at most ``count``), the lowest with all training functionals,
    ``(ell_q, ell_v, value)`` (module docstring, stage 1); ``model.history["basins"]`` gets ``(ell_q, ell_v, subset
    value, value)``. ``known``: values already solved, by ``(ell_q, ell_v)`` (the screen's, structure_choice)."""
    known = known or {}
    scored = [(lq, lv, sub, known[(lq, lv)] if (lq, lv) in known else evaluate(element_theta(kernel, lq, lv)))
              for lq, lv, sub in grid_basins(grid, count)]
    model.history.setdefault("basins", []).append(scored)
    lq, lv, _, full = min(scored, key=lambda g: g[3])  # a failed solve is inf (objective), never the start unless all fail
    return lq, lv, full


def check_scales(model, kernel: ElementKernel, theta: torch.Tensor, scale0: float) -> None:
    r"""Warn (:class:`DegenerateScalesWarning`) where a group's position lengthscale in ``theta`` ended at or above
    :data:`DEGENERATE_LENGTHSCALE` times the data's spread ``scale0`` (module docstring): :math:`\log\ell_g \ge
    \log(16\,\mathrm{scale0}) - 10^{-9}`, compared in log space (theta's own), so a lengthscale set exactly at the
    grid's top counts whatever rounding the log/exp round trip adds. At the top, not only above it: the grid looked no
    further, so a point there is one it could not tell from longer scales (two_body_lj6 seed 2, the search before
    issue 27's fix: body 16.0 spreads, energy differences wrong by 0.114). The lengthscales are reported in spreads."""
    limit = math.log(DEGENERATE_LENGTHSCALE * scale0) - 1e-9
    long = {name.split(":")[0]: math.exp(float(x)) / scale0 for name, x in zip(kernel.parameter_names(), theta)
            if name.endswith(":lengthscale") and not name.startswith("correction:") and float(x) >= limit}
    model.history["degenerate_scales"] = long
    if long:
        warnings.warn(f"the element kernel's search ended at near-polynomial scales: position lengthscale(s) "
                      f"{ {k: round(v, 1) for k, v in long.items()} } data spreads, at or above the grid's top "
                      f"{DEGENERATE_LENGTHSCALE:g}; there the energies of separately conserved parts (a centre of mass and "
                      "a relative motion) may not be identified even where the positions are predicted well (a polynomial "
                      "element, such as a harmonic trap, can be right there). Remedy: check the energies against held-out "
                      "data or ask for their std (energy(N, return_std=True) warns where they are poorly determined); if "
                      "they are off, more trajectories or another structure (mechanical bases, degree=2, give no std)", DegenerateScalesWarning, stacklevel=caller_level())


def element_start(model, F_data, groups, F_tr, F_va, P_va, F_norm, positions, scale0: float, F_norm_alt=None,
                  basins: int = BASIN_STARTS, screened: Optional[dict] = None, alt_only: bool = False,
                  alt_name: str = "matrix") -> tuple:
    """Stage 1 (module docstring) for ``model.gp``'s element kernel, the arguments of :func:`search_elements`: the tied
    grid on the subset for each normalisation scored, its ``basins`` lowest basins with all training functionals, the
    lower kept (the whole matrix by MATRIX_MARGIN): ``(ell_q, ell_v, value, F_all, norm, evaluate)``. With
    ``basins=1``, the screen of the element structures that ``kernel="auto"`` scores
    (:mod:`learners.shadow.structure_choice`); ``screened``: that screen's history, whose grids and solved basins
    are reused (not solved again); ``alt_only``: ``F_norm_alt`` only, not scored against the trace (the per-body
    structure's diagonal condition, :mod:`learners.shadow.structure_choice`: the held-out error cannot see the parts'
    relative scale that it fixes); ``alt_name``: the name ``F_norm_alt`` is recorded under in ``model.history``
    (``normalisation_candidates``, and the solved basins a refinement reuses): ``"diagonal"`` for that condition."""
    from .functionals import Functionals
    from .hyperparameter_search import objective, split_functionals

    n, gp = F_data.dim // 2, model.gp
    kernel = gp.kernel.base_kernel
    G_va = Functionals.cat([F_va, P_va])
    F_sub = F_tr.subset(torch.arange(F_tr.count - F_norm.count))
    tr_all, _ = split_functionals(groups, F_data.count)
    F_train = F_data.subset(tr_all)
    kept = None
    norms = [F_norm] + ([F_norm_alt] if F_norm_alt is not None else [])
    if F_norm_alt is not None and (alt_only or kernel.equal_masses()):  # equal masses: the whole matrix, not scored
        norms = [None, F_norm_alt]
    for k, norm in enumerate(norms):
        if norm is None:
            continue
        key = ("grid", "grid_alt")[k]
        grid = screened[key] if screened is not None else subset_grid(
            _tied(kernel, objective(gp, "positions", Functionals.cat([F_sub, norm]), F_va, G_va, positions), n), n, scale0)
        model.history[key] = grid
        if not any(math.isfinite(g[2]) for g in grid):
            continue
        F_all = Functionals.cat([F_train, norm])
        evaluate = objective(gp, "positions", F_all, F_va, G_va, positions)
        name = ("trace", alt_name)[k]
        lq, lv, full = _start(model, kernel, grid, evaluate, basins, _solved(screened, name))
        model.history.setdefault("normalisation_values", []).append(full)
        model.history.setdefault("normalisation_candidates", []).append(name)
        if kept is None or full < kept[2] - MATRIX_MARGIN:
            kept = (lq, lv, full, F_all, norm, evaluate)
    if kept is None:
        raise BeaRuntimeError("no element-kernel scales on the grid gave a usable fit; check the structure against the data")
    return kept


def _solved(screened: Optional[dict], name: str) -> dict:
    """The basins a screen's history ``screened`` solved with all training functionals under normalisation ``name``
    (``"trace"``, ``"matrix"`` or :func:`element_start`'s ``alt_name``), by ``(ell_q, ell_v)``; empty without a screen."""
    if screened is None:
        return {}
    names = screened.get("normalisation_candidates", [])
    return {(lq, lv): full for which, scored in zip(names, screened.get("basins", [])) if which == name
            for lq, lv, _, full in scored}


def search_elements(model, F_data, groups, F_tr, F_va, P_va, F_norm, positions, scale0: float, F_norm_alt=None,
                    start: tuple = None, group_scan: bool = False):
    """The three stages for ``model`` (whose GP has an element kernel), the signature of
    :func:`~learners.shadow.position_search.search_positions`: returns the training functionals, the best theta and the
    normalisation kept; grids, held-out values and traces go to ``model.history``. ``start``: stage 1's result
    (:func:`element_start`) where it was already run (the screen of ``kernel="auto"``); ``group_scan``: stage 2c
    (:func:`scan_groups`; ``kernel="auto"``'s per-body refinement)."""
    n = F_data.dim // 2
    kernel = model.gp.kernel.base_kernel
    kept = start if start is not None else element_start(model, F_data, groups, F_tr, F_va, P_va, F_norm, positions,
                                                         scale0, F_norm_alt)
    lq, lv, full, F_all, norm, evaluate = kept
    budget = REFINE_EVALUATIONS if model.iterations is None else model.iterations
    lq, lv, val, model.history["search"] = refine(_tied(kernel, evaluate, n), n, lq, lv, budget, start=full)
    names = kernel.parameter_names()
    overall = next(j for j, name in enumerate(names) if name.endswith(":scale"))  # the first group's: fixed at 1
    free = [i for i in range(len(names)) if i != overall]
    theta = element_theta(kernel, lq, lv)
    with reusing_parts(kernel) as grams:  # stages 2b-3 move one parameter a trial: the other parts' Grams are reused
        evaluate = grams.keeping(evaluate, val)  # the same values; the Grams of the point moved from are kept
        if kernel.correction:  # stage 2b: the correction's scale, from nearly off up
            scores = [(val, theta)] + [(evaluate(element_theta(kernel, lq, lv, c)), element_theta(kernel, lq, lv, c))
                                       for c in CORRECTION_SCALES[1:]]
            model.history["correction_scan"] = [x for x, _ in scores]
            val, theta = min(scores, key=lambda x: x[0])
        if group_scan:  # stage 2c: each group's own position lengthscale, in large steps (module docstring)
            theta, val, model.history["group_scan"] = scan_groups(evaluate, theta, val, names)
        budget = UNTIED_EVALUATIONS if model.iterations is None else model.iterations
        theta, val, model.history["search_untied"] = untied_search(evaluate, theta, val, free, budget)
    if not math.isfinite(val):
        raise BeaRuntimeError("every element-kernel fit with all training functionals failed (a linear-algebra error or "
                              "a non-finite held-out error at each scale the search tried), though the subset's grid had "
                              "usable points; check the structure against the data (coordinates body by body or site by "
                              "site) and the data for repeated or non-finite states, or fit kernel='auto'")
    model.history["objective"] = val
    check_scales(model, kernel, theta, scale0)
    return F_all, theta, norm


class ElementHooks(ElementEnergy):
    """The model's side of the element kernel (a mixin of :class:`~learners.shadow.lsi.InverseModifiedLagrangianGP`):
    nothing changes for other kernels."""

    @property
    def _element(self) -> bool:
        return isinstance(getattr(self, "_kernel_template", None), ElementKernel)

    def _make_gp(self, D: int):
        spec = getattr(self, "kernel_structure", None)  # the structure kernel="auto" chose (structure_choice)
        gp = super()._make_gp(D) if spec is None else self._structure_gp(spec, D, bind=False)
        base = gp.kernel.base_kernel
        if isinstance(base, ElementKernel) and self._user_kernel is None:  # a learned copy: the fit's coordinates
            base.bind(self._center, self._unit, self._speed, self._rotation)
        return gp

    def _structure_gp(self, spec: tuple, D: int, bind: bool = True):
        """A fresh GP with the element kernel of structure ``spec`` (:mod:`learners.shadow.structure_choice`), its maps
        carried into the fit's coordinates (``bind``); built as the opt-in kernel's (:func:`new_gp`, nothing frozen)."""
        from .kernel_choice import new_gp
        from .structure_choice import structure_kernel

        gp = new_gp(None, structure_kernel(spec), D, self.ard, self._units_device)
        if bind:
            gp.kernel.base_kernel.bind(self._center, self._unit, self._speed, self._rotation)
        return gp

    def _resolved_objective(self, n: int) -> str:
        """``"positions"`` for an element kernel under ``"auto"`` at every ``n`` (the objective the defaults use from
        ``n = 3``); another objective is refused: the likelihood's search ties every element parameter on one grid and
        moves the first group's scale, which the outputscale makes unidentifiable (it collapsed to 1e-21, no warning)."""
        if not self._element:
            return super()._resolved_objective(n)
        if isinstance(self.objective, Auto) or self.objective.name == "positions":
            return "positions"
        raise BeaValueError(f"an ElementKernel's scales are learned with objective='positions' (or 'auto'), not "
                            f"{self.objective.name!r}: the likelihood's search does not fit the element parameters")

    def _search_positions(self, F_data, groups, F_tr, F_va, P_va, F_norm, positions, scale0: float, F_norm_alt=None):
        from .structure_choice import choose_structure, scores_structures

        args = (F_data, groups, F_tr, F_va, P_va, F_norm, positions, scale0, F_norm_alt)
        if isinstance(self.gp.kernel.base_kernel, ElementKernel):
            return search_elements(self, *args)
        found = super()._search_positions(*args)
        return choose_structure(self, args, found) if scores_structures(self, F_data.dim // 2) else found

    def extend(self, structure: ElementKernel):
        r"""This fitted element model carried to another system with the same groups, e.g.
        ``model.extend(ElementKernel.chain(10))`` after a fit on ``chain(6)``: :math:`L_{new}(z) = \sum_g\sum_{e \in
        g_{new}} u_g(w_e(z)) + c_{new}(z)` under the same posterior over the group functions :math:`u_g` (same
        functionals, weights, hyperparameters), the correction :math:`c_{new}` an independent prior of the fitted scale
        on another dimension (its variance in every std), the source's variance scales
        (:mod:`~learners.shadow.element_extension`). Returns an :class:`~learners.shadow.element_model.ElementExtension`."""
        from .element_extension import extend_model

        return extend_model(self, structure)

    @property
    def hyperparameters(self) -> Dict[str, object]:
        """As the other kernels' (data's units), the element kernel's scales by name: position lengthscales times
        :math:`\\sigma`, velocity scales times :math:`s`; the group and correction scales ``:scale`` unchanged (they
        are relative to each other, dimensionless: the Lagrangian's unit :math:`s^2` is the outputscale's, reported
        times :math:`s^4`, as its variance)."""
        base = getattr(getattr(getattr(self, "gp", None), "kernel", None), "base_kernel", None)
        if not isinstance(base, ElementKernel):
            return super().hyperparameters
        self._require_fit()
        gp, out = self.gp, {}
        for name, x in zip(base.parameter_names(), base.lengthscale.detach().reshape(-1).tolist()):
            part = name.split(":")[1]
            out[name] = x * (self._unit if part == "lengthscale" else self._speed if part == "velocity_scale" else 1.0)
        return {"lengthscale": out, "outputscale": float(gp.kernel.outputscale.detach()) * gp.variance_scale * self._speed ** 4,
                "noise": float(gp.noise.detach()) / float(gp.kernel.outputscale.detach())}
