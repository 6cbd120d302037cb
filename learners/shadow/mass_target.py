r"""The whole-matrix normalisation's target carried past :math:`O(h^4)`: a plug-in correction of the final solve.

:class:`~learners.shadow.normalisation.MassNormalisation` with ``matrix=True`` fixes the mass matrix of :math:`L`
(equal masses at the point :math:`x_0`) through linear conditions on the :math:`L_{inv}` the GP learns,

.. math::  F(L_{inv}) = \partial_v^2 L_{inv}(x_0) - \kappa\,\partial_q^2 L_{inv}(x_0) = c\,I,

which hold for the exact :math:`L_{inv}` only to :math:`O(h^4)`: for :math:`L = \tfrac12 v^\top M v - V(q)` and the
midpoint rule, :math:`\kappa = h^2/12` removes :math:`\partial_v^2`'s :math:`-\tfrac{h^2}{12}V''`, but
:math:`\kappa\,\partial_q^2` of :math:`\mathrm{inv}_2`'s own :math:`-\tfrac{h^2}{24}(V'^\top M^{-1}V' + v^\top V''v)`
leaves :math:`\tfrac{h^4}{288}\big(2V''M^{-1}V'' + 2V'''[M^{-1}V'] + V''''[v, v]\big)` (with the velocity curvature
of :math:`L_{inv}`'s own :math:`h^4` term) -- not a multiple of :math:`M` where the parts' curvatures differ or couple. The exact :math:`L_{inv}` of three coupled pendula at :math:`h = 0.2`
(benchmarks/identification_acceptance.py's ``pendula3``) misses the target by 7.8e-6 relative at the data's
centre. The motions fix the relative scale of weakly coupled parts only weakly, so the fit takes it from these
conditions, and every energy difference carries the target's error (``kernel="auto"`` on pendula3: relative error
1.2e-5 at ``N = 4``; with the exact target 2.7e-6). Every fold of the calibration shares that error, so its std
could not show it (RMS z 3.1; with the exact target 0.66): benchmarks/RESULTS_identification.md, Session 9.

The condition the matrix stands for is :math:`G(L_{inv}) = \partial_v^2\,\mathrm{mod}_N(L_{inv})(x_0) \propto I`
(:math:`\mathrm{mod}_N(L_{inv}) = L + O(h^{N+1})`, :math:`N = 4`: met by the exact :math:`L_{inv}` to :math:`O(h^6)`,
9e-8 on pendula3), nonlinear in :math:`L_{inv}`. Linearised about the posterior mean :math:`\bar L` of the fit,
:math:`G(L) \approx G(\bar L) + F(L) - F(\bar L)` (:math:`G - F` is :math:`O(h^4)` and depends on :math:`L` only
through its curvatures), and :math:`F` follows its targets :math:`y`, so the new targets are :math:`y - G_0(\bar L)`,
:math:`G_0` the traceless part of :math:`G`. For a constant mass matrix the step's error is :math:`O(h^4)` times the
change of the curvatures, and a second step takes it up (:data:`STEPS`); where the mass varies with :math:`q`, the
solve's response to a move carries :math:`O(h'^2)\,\partial_q M` terms and the steps converge only linearly
(mass_chain4: each step keeps 0.5-0.65 of the miss, 9.1e-5 before the first, 3.1e-5 after the second;
``history["mass_target"]["remaining"]`` records the miss after the last step). Only the traceless part is
applied: the trace would change the overall scale, which the positions do not determine and the energy's unit fit
takes away. The covariance does not depend on the targets, so each re-solve reuses the factor
(:meth:`~learners.shadow.gp.FunctionalGP.retarget`); each step costs one :math:`\mathrm{mod}_4` Hessian at one state.

It applies (the premise of the linearisation) only where

* the model is LSI's (:meth:`~learners.shadow.lsi.InverseModifiedLagrangianGP._correct_targets`; the LGP learns
  :math:`L` itself, whose matrix the linear condition without a curvature term states exactly), with a linear
  scheme (a stage scheme's fit re-conditions on the normalisation at every iteration, :mod:`~learners.shadow.stage_lsi`:
  not moved), and the curvature term :math:`\kappa` is the one the fit set from its scheme and step
  (:func:`~learners.shadow.normalisation.inverse_curvature`: a :class:`~learners.shadow.normalisation.MassNormalisation`
  whose ``matrix`` is not False and whose ``curvature`` the user left None); a curvature the user gave is used as given;
* the kernel is the mechanical one of degree 2 (:mod:`learners.shadow.mechanical`: :math:`\bar L` a quadratic in
  :math:`v`, so no velocity derivative of order 3 or 4 enters :math:`G` and :math:`G - F` is the :math:`O(h^4)` above).
  With a higher degree or an RBF, :math:`\bar L`'s own third and fourth velocity derivatives enter :math:`G` at
  :math:`O(h^2)` (on the softened two-body problem with the RBF, :math:`G_0` came out 8.9e-2);
* the first move is of the size it stands for: at most :data:`MOVE_BOUND` times :math:`\kappa'^2\Lambda^2`
  (:func:`move_scale`). Otherwise the posterior's curvatures are far from the truth's, the linearisation's premise
  fails, and the targets stay linear (``history["mass_target"]["skipped"]`` says why).

The trace normalisation (every default fit with ``n <= 2``, the default's choice on most systems) and the vertex
normalisation are untouched; the whole matrix at ``n = 2`` with the mechanical kernel is moved.
``matrix="diagonal"`` (the default's searched condition, :data:`~learners.shadow.normalisation.SEARCHED_MATRIX`)
is moved the same way on its conditions with the curvature term, the entries above the diagonal (targets 0 minus
:math:`G_0`'s entries there); its trace condition is not (the overall scale, as above). In turned axes (the
principal-direction candidate) it is left linear.
"""

from __future__ import annotations

import math
from typing import Dict, Optional, Tuple

import torch

import bea
from integrators import modified

from .functionals import Functionals
from .mechanical import MechanicalKernel
from .normalisation import MassNormalisation
from .units import VELOCITY_RMS

__all__ = ["MOD_ORDER", "STEPS", "MOVE_BOUND", "matrix_conditions", "target_correction", "move_scale",
           "correct_matrix_target"]

#: the order N of mod_N in G: ∂_v² mod_4(L_inv) = ∂_v² L + O(h^6) for a symmetric scheme, two orders past the
#: linear condition's O(h^4)
MOD_ORDER = 4


#: re-solves (each one G and one triangular solve): the first is the linearisation, the second takes up its error,
#: which is O(r) times the change of the curvatures (pendula3 with 16 trajectories: 1.3e-5 before, 5.6e-9 after one,
#: 3.5e-12 after two; with 10, tests/test_learners_mass_target.py: 9.1e-6, 4.9e-10, below 1e-10). Where the data
#: themselves hold the conditions' directions the solve follows a move only in part and the steps converge linearly
#: (mass_chain4, 150 trajectories: 9.1e-5, 4.8e-5, 3.1e-5, ... 8.5e-6 before the sixth): there the target matters less
STEPS = 2

#: the largest first move applied, in units of kappa'^2 Lambda^2 (:func:`move_scale`). Why 10: the miss has four terms
#: (V''M^-1V'' with coefficient 1, V'''[M^-1 V'], V''''[v, v]/2 and L_inv's own h^4 term's velocity curvature), each
#: of order kappa^2 Lambda^2 for a potential whose derivatives change over the data's spread (1 in standardised
#: units); a decade above the leading term holds their sum, and a move beyond it is the fit's curvature error, not
#: the O(h^4) miss. Fixed from this argument, not from a data set
MOVE_BOUND = 10.0


def matrix_conditions(F_norm: Functionals) -> Optional[Tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]]:
    r"""``(owners, i, j, x0)`` of the mass-matrix conditions with a curvature term in ``F_norm`` (the condition of
    :math:`(i, j)`, :math:`i \le j`, is functional ``owners[k]``): every entry of the whole matrix, or the entries
    above the diagonal of ``matrix="diagonal"`` in the fit's own axes (its trace has no curvature term and is not
    moved); None where there are none (the trace, the vertices, a matrix without the curvature term, the diagonal
    condition in turned axes, ``n = 1``)."""
    A = F_norm.atoms.get(2)
    n = F_norm.dim // 2
    if A is None or n < 2:
        return None
    d = A.dirs
    qq = d[:, :, n:].abs().sum((1, 2)) == 0
    if not bool(qq.any()):
        return None
    sel = (d[:, :, :n].abs().sum((1, 2)) == 0) & torch.isin(A.owner, A.owner[qq])  # along velocities, curved conditions
    owners, axis = A.owner[sel], d[sel][:, :, n:].abs()
    if not bool((axis.amax(-1) == axis.sum(-1)).all()) or torch.unique(owners).numel() != owners.numel():
        return None  # a direction not along one axis (turned axes), or a condition with several velocity atoms
    i, j = axis[:, 0].argmax(-1), axis[:, 1].argmax(-1)
    i, j = torch.minimum(i, j), torch.maximum(i, j)
    whole = owners.numel() == n * (n + 1) // 2 and int((i == j).sum()) == n
    if not (whole or (owners.numel() == n * (n - 1) // 2 and bool((i < j).all()))):
        return None
    return owners, i, j, A.points[sel][0]


def _diagonal_scale(targets: torch.Tensor, F_norm: Functionals) -> float:
    r"""The normalisation's :math:`c` from ``targets`` (one per functional of ``F_norm``): the mean of :math:`|y_o|/k_o`
    over the conditions :math:`o` on diagonal entries of the mass matrix, :math:`k_o` their atoms (the whole matrix:
    :math:`c` each, one atom; the trace: :math:`c\,n`, :math:`n` atoms)."""
    A, n = F_norm.atoms[2], F_norm.dim // 2
    d = A.dirs
    diag = (d[:, :, :n].abs().sum((1, 2)) == 0) & (d[:, 0, n:] * d[:, 1, n:]).abs().sum(-1).gt(0)
    owners, counts = torch.unique(A.owner[diag], return_counts=True)
    return float((targets[owners].abs() / counts.to(targets.dtype)).mean())


def target_correction(model, F_norm: Functionals, found: Optional[tuple] = None, rec=None) -> Optional[torch.Tensor]:
    r"""The traceless part of :math:`G(\bar L) = \partial_v^2\,\mathrm{mod}_N(\bar L)(x_0)` (n, n) for ``model``'s
    conditioned GP (standardised coordinates, step :math:`h'`), or None where ``F_norm`` has no matrix conditions with
    a curvature term. Where the linear targets hold exactly, :math:`F(\bar L) = c\,I` and this is :math:`r`'s
    traceless part (module docstring). ``found`` (:func:`matrix_conditions` of ``F_norm``) and ``rec``
    (:func:`_recovered`) where the caller has them: neither depends on the targets, so a re-solve's loop makes them once."""
    found = matrix_conditions(F_norm) if found is None else found
    if found is None:
        return None
    x0, n = found[3], F_norm.dim // 2
    rec = _recovered(model) if rec is None else rec
    q0, v0 = x0[:n].detach()[None], x0[n:].detach()
    with torch.enable_grad():
        G = torch.autograd.functional.hessian(lambda v: rec(q0, v[None]).sum(), v0)
    G = 0.5 * (G + G.T)
    return G - torch.trace(G) / n * torch.eye(n, dtype=torch.float64, device=G.device)


def _recovered(model):
    r""":math:`\mathrm{mod}_N(\bar L)` (:data:`MOD_ORDER`) of ``model``'s posterior mean in its standardised units: it
    evaluates the GP's current posterior at each call, so one serves every re-solve."""
    return modified.recovered_lagrangian(model._lagrangian_std, MOD_ORDER, model._h_std, model.scheme)


def move_scale(model, F_norm: Functionals, found: Optional[tuple] = None, c: Optional[float] = None) -> float:
    r""":math:`\kappa'^2\Lambda^2`, the size of the :math:`O(h'^4)` miss the move stands for (relative to ``c``):
    :math:`\kappa'` the conditions' curvature term, :math:`\Lambda` the curvature scale, the largest of
    :math:`|\partial_q^2\bar L(x_0)|/c` (the squared frequencies :math:`M^{-1}V''` of the fit) and :math:`(1/2)^2`
    (:data:`~learners.shadow.units.VELOCITY_RMS` over the unit position spread: a motion's squared frequency in the
    standardised units, where :math:`V''` vanishes at the point). The leading term of the module docstring's miss,
    :math:`\tfrac{h^4}{288}\,2V''M^{-1}V'' = \kappa^2\,V''M^{-1}V''`, is this with coefficient 1. ``found``
    (:func:`matrix_conditions` of ``F_norm``) and ``c`` (the mean target's size on the diagonal) where the caller has them."""
    owners, i, j, x0 = matrix_conditions(F_norm) if found is None else found
    A, n = F_norm.atoms[2], F_norm.dim // 2
    kappa = float(-A.coef[A.dirs[:, :, n:].abs().sum((1, 2)) == 0][0])
    c = _diagonal_scale(F_norm.targets, F_norm) if c is None else c
    q0, v0 = x0[:n].detach(), x0[n:].detach()[None]
    with torch.enable_grad():
        Hq = torch.autograd.functional.hessian(lambda q: model._lagrangian_std(q[None], v0).sum(), q0)
    lam = max(float(torch.linalg.eigvalsh(0.5 * (Hq + Hq.T)).abs().max()) / c, VELOCITY_RMS ** 2)
    return kappa ** 2 * lam ** 2


def _applies(model) -> bool:
    """The premise (module docstring): a linear scheme, the whole matrix with the curvature term the fit set from the
    scheme (the user's normalisation a MassNormalisation, ``matrix`` not False, ``curvature`` None: the same for a
    fit that adopted the principal-direction candidate, whose normalisation only sets ``matrix=True``), and the
    mechanical kernel of degree 2."""
    norm = model.normalisation
    if isinstance(model.scheme, bea.StageScheme) or not (
            isinstance(norm, MassNormalisation) and norm.matrix is not False and norm.curvature is None):
        return False
    kernels = [k for k in model.gp.modules() if isinstance(k, MechanicalKernel)]
    return bool(kernels) and all(k.degree == 2 for k in kernels)


def correct_matrix_target(model, F_norm: Functionals) -> Optional[Dict[str, object]]:
    """Re-solve ``model``'s final GP (conditioned on its data and then ``F_norm``, last) with the matrix conditions'
    targets moved by :func:`target_correction`, :data:`STEPS` times. Returns None where nothing applies (no matrix
    conditions with the curvature term, or not the premise of :func:`_applies`), else a record for ``history``:
    ``moves`` (the traceless part's largest entry relative to the target ``c`` before each move), ``remaining`` (after
    the last), ``bound`` (:data:`MOVE_BOUND` times :func:`move_scale`) and, where the targets were left linear,
    ``skipped`` (why: the first move above the bound, or a non-finite part -- the fit's own check reports that)."""
    found = matrix_conditions(F_norm)
    if found is None or not _applies(model):
        return None
    owners, i, j, _ = found
    gp = model.gp
    base = gp.train_functionals.count - F_norm.count
    y0 = gp.train_functionals.targets.clone()
    c = _diagonal_scale(y0[base:], F_norm)
    rec = _recovered(model)
    moves = []
    record: Dict[str, object] = {"moves": moves, "bound": MOVE_BOUND * move_scale(model, F_norm, found, c)}
    for step in range(STEPS + 1):
        R = target_correction(model, F_norm, found, rec)
        size = float(R[i, j].abs().max()) / c  # the entries moved (R symmetric: the whole matrix's largest)
        if not math.isfinite(size):
            break
        if step == STEPS:
            record["remaining"] = size
            return record
        moves.append(size)
        if step == 0 and size > record["bound"]:
            record["skipped"] = (f"first move {size:.2g} above {MOVE_BOUND:g} kappa'^2 Lambda^2 = {record['bound']:.2g}:"
                                 " not the O(h^4) miss; the linear targets kept")
            return record
        y = gp.train_functionals.targets.clone()
        y[base + owners] = y[base + owners] - R[i, j]
        with torch.no_grad():
            gp.retarget(y)
    record["skipped"] = "a non-finite move: the linear targets kept"
    if moves:
        with torch.no_grad():
            gp.retarget(y0)  # back to the linear targets' solve, so that the record tells the truth
    return record
