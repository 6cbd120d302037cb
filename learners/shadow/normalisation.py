r"""Normalisations: functionals with non-zero targets that rule out the trivial Lagrangian.

Every constant :math:`L` satisfies all DEL (and EL) conditions, and :math:`sL + \tfrac{d}{dt}\xi(q)`
has the same motions as :math:`L` (docs/theory/mechanics.md, docs/theory/lsi.md). A normalisation fixes the scale ``c``:

* :class:`VertexNormalisation` (the paper's, docs/theory/lsi.md): with ``z`` running over the
  :math:`2^{2n}` vertices of :math:`[0,1]^{2n}`,

  .. math:: \frac{1}{n!\,4^n}\sum_z \sum_{i=1}^n \frac{\partial L}{\partial v_i}(z) = c, \qquad L(0) = 0.

* :class:`MassNormalisation`: at a point :math:`x_0 = (q_0, v_0)` (default: the centre of the data),
  :math:`L(x_0) = 0`, :math:`\partial_v L(x_0) = 0` (fixes the gauge term :math:`\xi` there) and
  :math:`\operatorname{tr}\partial_v^2 L(x_0) = c\,n`; useful when the unit cube lies far from the
  data.
  With ``matrix=True`` the whole mass matrix is fixed, :math:`\partial_v^2 L(x_0) = c\,I` (:math:`n(n+1)/2`
  conditions instead of the trace); ``matrix=None`` (the default) lets the fit choose (below).

These are the only functionals with non-zero targets, so they carry the whole signal of the fit.

Why ``"mass"`` is the default: the vertex condition constrains :math:`\partial L/\partial v`, which a
gauge term :math:`\xi'(q)\,v` -- invisible to every DEL equation -- can satisfy on its own. The
minimum-norm GP posterior then puts much of ``c`` into the gauge: on the pendulum the learned mass
came out near 0.005 instead of O(1), so the posterior mean's rounding noise is large relative to
its dynamics. Same data and kernel (lengthscale 0.7, nugget 1e-12): trajectory error over 500 steps
9e-5 with the vertex normalisation, 4e-7 with the mass normalisation. A second derivative in
:math:`v` cannot be produced by a gauge term, so the mass condition fixes the scale of the dynamics
itself (and, with ``c = 1``, gives the true pendulum's units).

Why the whole mass matrix can matter (``n >= 3``): a Lagrangian that separates into independent parts,
:math:`L = L_1(x_1) + L_2(x_2)`, has the same motions as :math:`a L_1 + b L_2` for any :math:`a, b \ne 0`, and the
trace fixes only :math:`a + b`. The GP's minimum-norm posterior then shrinks the part with the larger RKHS norm,
and with it the Jacobian that predicts that part's motion. The softened two-body problem in a harmonic trap
(centre of mass and relative motion separate; ``tests/test_learners_shadow_auto.py``'s ``two_body4``) came out
with the relative part at 0.06 of the centre of mass's, energy differences 4.99 relative; with the mass matrix
fixed, 0.77 and 0.099. The same holds approximately wherever parts are weakly coupled (a chain near its linear
normal modes): the motions then determine the parts' relative scales only weakly, and the trace leaves them to the
GP's prior.

``matrix="diagonal"`` assumes less: the trace and the entries above the diagonal of the mass matrix *in the data's
axes* (zero: no velocity coupling between the coordinates given), :math:`1 + n(n-1)/2` conditions, with the same
curvature term; ``axes`` (orthonormal rows, in the data's coordinates -- the positions given to ``fit``, whose
standardisation scales all alike, so directions keep their meaning; default the coordinate axes) names other
directions, and a fit in turned coordinates (:mod:`learners.shadow.principal`) turns them with its own. It holds
where the masses differ (bodies of masses 1 and 2 in Cartesian positions), where the whole matrix does not, and it
still fixes the parts' relative scales of the two-body problem: the centre of mass and the relative motion
each carry the off-diagonal entries :math:`\pm\mu` between a body's x (or y) and the other's, which cancel only at
equal factors. A per-body fit (one element per body, :mod:`learners.shadow.structure_choice`) sets these zero entries
also at :data:`BODY_STATES` data states (:func:`at_data_states`): there the factors' ratio can vary with the state
through the pair element, and at one state only it did (two_body_unequal4: 9.8e-3 -> 2.6e-4, Session 24). Measured
(benchmarks/RESULTS_identification.md, session 10): two_body4 (equal masses) 2.48e-2 against the whole matrix's 2.14e-2,
so it is not the default; on the unequal-mass variant with 150 trajectories 0.162 against 0.259, a fit still too poorly
determined (one-step errors 11-17% of a step) to tell what the assumption costs.

The matrix is an assumption -- equal masses in the standardised coordinates at :math:`x_0` -- about :math:`L`, not
about the :math:`L_{inv}` the GP learns, whose mass matrix carries the potential's Hessian at :math:`O(h^2)`
(midpoint rule: :math:`\partial_v^2 L_{inv} = M - \tfrac{h^2}{12} V''(q)` for :math:`L = \tfrac12 v^\top M v - V`,
docs/theory/inverse.md). ``curvature`` :math:`\kappa` corrects the target: the conditions are
:math:`\partial_v^2 L(x_0) - \kappa\,\partial_q^2 L(x_0) = c\,I`, which for :math:`\kappa = h^2/12` holds for the
midpoint rule's :math:`L_{inv}` to :math:`O(h^4)` at a state at rest in an equilibrium (at other states
:math:`\mathrm{inv}_2`'s :math:`A^\top M A` term adds :math:`O(h^2 |V'|)`); the fits of
:class:`~learners.shadow.lsi.InverseModifiedLagrangianGP` set it from their scheme and step
(:func:`inverse_curvature`). Without it the matrix was worse than the trace on a Duffing chain (energy
differences 2.8e-3 against 1.7e-3), with it equal (1.8e-3). The default (``matrix=None``) fixes the matrix only
where it predicts held-out positions clearly better (:data:`~learners.shadow.position_search.MATRIX_MARGIN`: a part
collapsed under the trace), and the trace everywhere else: where the two predict equally well the matrix identified
better on some systems but left the energy's std too narrow on another (three anharmonic oscillators at 40
trajectories). ``"mll"`` (``n <= 2``) always uses the trace, results unchanged. Where the parts' motions are
predicted as well either way (separable oscillators), the trace is kept and their relative scales stay undetermined.
The trace condition has no curvature term: at :math:`O(h^2)` it would change only the overall scale.
"""

from __future__ import annotations

import itertools
import math
from typing import Optional, Union

import torch

import bea
from bea.errors import BeaValueError

from .functionals import AtomSet, Functionals

__all__ = ["Normalisation", "VertexNormalisation", "MassNormalisation", "get_normalisation", "inverse_curvature",
           "in_standard_units", "SEARCHED_MATRIX", "BODY_STATES", "data_states", "at_data_states"]

#: the matrix condition that the default (``matrix=None``) scores against the trace at ``n >= 3`` and that the
#: principal-direction candidate fixes (:mod:`learners.shadow.position_search`, :mod:`learners.shadow.principal`):
#: ``True``, the whole matrix (equal masses at :math:`x_0`), or ``"diagonal"`` (no equal masses assumed). Measured
#: (benchmarks/RESULTS_identification.md, Session 10, branch idmass): with unequal masses the whole matrix's candidates
#: are rejected (held-out -6.5 to -10 against -16 to -20 for the RBF with the trace) and the RBF's accuracy is what is
#: left (a chain with position-dependent masses 8.0e-3, an alternating FPU chain 5.1e-3, both above the issue's 3e-3);
#: "diagonal" lets the mechanical kernel be kept there (4.9e-4; the FPU chain, where the two were level, only since
#: :data:`~learners.shadow.position_search.DIAGONAL_RBF_MARGIN`: 2.3e-4, Session 11) at small cost on
#: equal masses (anharmonic3 3.7e-5 / 3.4e-5 at N = 2 / 4 against 3.4e-5 / 1.8e-5) -- but on separable oscillators
#: with equal masses its off-diagonal conditions hold for any scales of the parts and the energy differences go from
#: 8.3e-4 to 1.7e-2. Neither replaces the other: the default scores the mechanical kernel with both
#: (:data:`~learners.shadow.position_search.MECHANICAL_DIAGONAL`); this switch is a diagnostic
SEARCHED_MATRIX: Union[bool, str] = True


class Normalisation:
    """Base class: ``functionals(n, data_center)`` returns :class:`Functionals` with targets."""

    c: float = 1.0

    def functionals(self, n: int, center: Optional[torch.Tensor] = None) -> Functionals:  # pragma: no cover
        raise NotImplementedError


class VertexNormalisation(Normalisation):
    r"""The paper's quadrature of :math:`\int_{[0,1]^{2n}} \sum_i \partial L/\partial v_i = c` plus :math:`L(0) = 0`."""

    def __init__(self, c: float = 1.0):
        c = float(c)
        if not math.isfinite(c) or c == 0:
            raise BeaValueError(f"the normalisation constant c must be finite and non-zero, got {c}")
        self.c = c

    def __repr__(self) -> str:
        return f"VertexNormalisation(c={self.c})"

    def functionals(self, n: int, center: Optional[torch.Tensor] = None) -> Functionals:
        D = 2 * n
        f64 = dict(dtype=torch.float64, device=_device(center))  # on the data's device, which the centre is on
        z = torch.tensor(list(itertools.product((0.0, 1.0), repeat=D)), **f64)
        w = torch.zeros(D, **f64)
        w[n:] = 1.0 / (math.factorial(n) * 4**n)
        V = z.shape[0]
        index = dict(dtype=torch.long, device=f64["device"])
        atoms = {1: AtomSet(z, w.expand(V, D)[:, None, :].clone(), torch.ones(V, **f64), torch.zeros(V, **index)),
                 0: AtomSet(torch.zeros(1, D, **f64), torch.zeros(1, 0, D, **f64), torch.ones(1, **f64),
                             torch.ones(1, **index))}
        return Functionals(D, 2, atoms, torch.tensor([self.c, 0.0], **f64))


class MassNormalisation(Normalisation):
    r""":math:`L(x_0) = 0`, :math:`\partial_vL(x_0) = 0`, :math:`\operatorname{tr}\partial_v^2L(x_0) = c\,n`
    (``matrix=False``), or :math:`\partial_v^2L(x_0) - \kappa\,\partial_q^2L(x_0) = c\,I` (``matrix=True``,
    :math:`\kappa` = ``curvature``: None, the default, lets the LSI fit set it from its scheme and step, and means 0
    elsewhere; a number given is used as it is, in the fit's standardised coordinates); ``matrix="diagonal"``: the
    trace and the off-diagonal entries between the rows of ``axes`` set to 0 (an orthonormal ``(n, n)`` matrix in the
    coordinates of the data given to the fit; None: the coordinate axes; a fit that turns its coordinates passes them
    turned, so here, in :meth:`functionals`, they are in the fit's coordinates; used only with ``"diagonal"``);
    ``matrix=None``: the fit chooses (module docstring)."""

    def __init__(self, c: float = 1.0, point: Optional[torch.Tensor] = None, matrix: Union[bool, str, None] = None,
                 curvature: Optional[float] = None, axes: Optional[torch.Tensor] = None):
        c = float(c)
        curvature = None if curvature is None else float(curvature)
        if not math.isfinite(c) or c == 0:
            raise BeaValueError(f"the normalisation constant c must be finite and non-zero, got {c}")
        if matrix not in (None, True, False, "diagonal"):
            raise BeaValueError(f"matrix must be True, False, 'diagonal' or None (let the fit choose), got {matrix!r}")
        if curvature is not None and not math.isfinite(curvature):
            raise BeaValueError(f"the curvature term of the mass-matrix condition must be finite, got {curvature}")
        self.c = c
        # kept where it is given (the CPU for numbers); functionals() moves it to the data's device
        self.point = None if point is None else torch.as_tensor(point, dtype=torch.float64, device=_device(point))
        self.matrix = matrix
        self.curvature = curvature
        self.axes = None if axes is None else _checked_axes(axes)

    def __repr__(self) -> str:
        extra = "" if self.matrix is None else f", matrix={self.matrix!r}"
        extra += "" if self.curvature is None else f", curvature={self.curvature:.6g}"
        extra += "" if self.axes is None else f", axes={self.axes.tolist()}"
        return f"MassNormalisation(c={self.c}{extra})"

    def searched(self, n: int) -> "MassNormalisation":
        """The matrix condition the default (``matrix=None``) scores against the trace at dimension ``n``:
        :data:`SEARCHED_MATRIX` from ``n = 3`` on, the whole matrix below (``n <= 2`` fits unchanged)."""
        return self.with_matrix(SEARCHED_MATRIX if n >= 3 else True)

    def with_matrix(self, matrix: Union[bool, str, None]) -> "MassNormalisation":
        """The same normalisation (constant, point and curvature term) with ``matrix`` set."""
        return MassNormalisation(self.c, self.point, matrix, self.curvature, self.axes)

    def with_curvature(self, curvature: Optional[float]) -> "MassNormalisation":
        """The same normalisation with the curvature term of the matrix condition set (class docstring)."""
        return MassNormalisation(self.c, self.point, self.matrix, curvature, self.axes)

    def with_axes(self, axes: Optional[torch.Tensor]) -> "MassNormalisation":
        """The same normalisation with ``axes`` (orthonormal rows, in the coordinates the functionals are taken in) of
        ``matrix="diagonal"``."""
        return MassNormalisation(self.c, self.point, self.matrix, self.curvature, axes)

    def functionals(self, n: int, center: Optional[torch.Tensor] = None) -> Functionals:
        D = 2 * n
        f64 = dict(dtype=torch.float64, device=_device(center))  # on the data's device, which the centre is on
        x0 = self.point if self.point is not None else (center if center is not None else torch.zeros(D, **f64))
        x0 = x0.to(**f64).reshape(1, D)
        eye = torch.eye(D, **f64)
        index = dict(dtype=torch.long, device=f64["device"])
        atoms = {0: AtomSet(x0, torch.zeros(1, 0, D, **f64), torch.ones(1, **f64), torch.zeros(1, **index)),
                 1: AtomSet(x0.expand(n, D), eye[n:][:, None, :], torch.ones(n, **f64), torch.arange(1, n + 1, **index))}
        trace = AtomSet(x0.expand(n, D), torch.stack([eye[n:], eye[n:]], 1), torch.ones(n, **f64),
                        torch.full((n,), n + 1, **index))
        if not self.matrix:  # one condition: the trace
            atoms[2] = trace
            return Functionals(D, n + 2, atoms, torch.tensor([0.0] * (n + 1) + [self.c * n], **f64))
        if self.matrix == "diagonal":
            off = self._off_diagonal(n, x0, f64, index)
            atoms[2] = AtomSet(*(torch.cat([getattr(trace, k), getattr(off, k)]) for k in ("points", "dirs", "coef", "owner")))
            P = n * (n - 1) // 2
            return Functionals(D, n + 2 + P, atoms, torch.tensor([0.0] * (n + 1) + [self.c * n] + [0.0] * P, **f64))
        i, j = torch.triu_indices(n, n, **index)  # one condition per entry on and above the diagonal
        atoms[2] = self._pair_atoms(torch.eye(n, **f64), i, j, n + 1, x0, f64, index)
        return Functionals(D, n + 1 + i.numel(), atoms,
                           torch.cat([torch.zeros(n + 1, **f64), self.c * (i == j).to(torch.float64)]))

    def _off_diagonal(self, n: int, x0: torch.Tensor, f64: dict, index: dict) -> AtomSet:
        r"""Atoms of the ``matrix="diagonal"`` conditions :math:`a_i^\top(\partial_v^2 L - \kappa\,\partial_q^2 L)(x_0)\,a_j
        = 0`, :math:`i < j`, with :math:`a_i` the rows of ``axes`` (in the coordinates of :meth:`functionals`: the
        data's, turned where the fit turns its own; the coordinate axes without them), functionals ``n + 2 ...``."""
        if self.axes is not None and self.axes.shape[0] != n:
            raise BeaValueError(f"MassNormalisation axes are {tuple(self.axes.shape)} for n = {n} coordinates: give an "
                                f"orthonormal ({n}, {n}) matrix (rows: the axes), or None for the coordinate axes")
        a = torch.eye(n, **f64) if self.axes is None else self.axes.to(**f64)
        i, j = torch.triu_indices(n, n, 1, **index)
        return self._pair_atoms(a, i, j, n + 2, x0, f64, index)

    def _pair_atoms(self, a: torch.Tensor, i: torch.Tensor, j: torch.Tensor, first: int, x0: torch.Tensor, f64: dict,
                    index: dict) -> AtomSet:
        r"""Atoms of the conditions :math:`a_i^\top(\partial_v^2 L - \kappa\,\partial_q^2 L)(x_0)\,a_j` for the pairs
        ``(i, j)``, functionals ``first, first + 1, ...``; :math:`a_i` the rows of ``a``. The curvature term (where set)
        makes the target :math:`L`'s mass matrix, not :math:`L_{inv}`'s (class docstring)."""
        P, n = i.numel(), a.shape[1]
        zero = torch.zeros(P, n, **f64)
        dirs = torch.stack([torch.cat([zero, a[i]], 1), torch.cat([zero, a[j]], 1)], 1)  # along velocities
        coef, owner = torch.ones(P, **f64), torch.arange(first, first + P, **index)
        if self.curvature:
            dirs = torch.cat([dirs, torch.stack([torch.cat([a[i], zero], 1), torch.cat([a[j], zero], 1)], 1)])
            coef, owner = torch.cat([coef, torch.full((P,), -self.curvature, **f64)]), owner.repeat(2)
        return AtomSet(x0.expand(owner.numel(), 2 * n), dirs, coef, owner)


#: data states (besides :math:`x_0`) at which a per-body fit's diagonal condition also sets the entries above the
#: diagonal to zero (:func:`at_data_states`); Session 24 (benchmarks/RESULTS_identification.md)
BODY_STATES = 16


def data_states(F_data: Functionals, count: Optional[int] = None) -> torch.Tensor:
    """The ``count`` (default :data:`BODY_STATES`) data states of :func:`at_data_states`: atoms' points of ``F_data``,
    evenly spaced in their order, shape ``(min(count, points), D)``."""
    count = BODY_STATES if count is None else count
    points = torch.cat([a.points for a in F_data.atoms.values()])
    if count <= 0 or points.shape[0] == 0:
        return points[:0]
    return points[torch.linspace(0, points.shape[0] - 1, min(count, points.shape[0]), device=points.device).round().long()]


def at_data_states(F_diag: Functionals, F_data: Functionals, count: Optional[int] = None) -> Functionals:
    r"""``F_diag`` (``matrix="diagonal"``'s functionals at :math:`x_0`) with its conditions on the entries above the
    diagonal repeated at ``count`` (default :data:`BODY_STATES`) of the data's states (atoms' points of ``F_data``,
    evenly spaced in their order).
    Why: with one element per body, :math:`aL + (b - a)L_{rel}` moves only the pair element (its inputs
    :math:`q_i - q_j, v_i - v_j`), and at one state the pair's velocity curvature is free to vary away from it; every
    per-body Lagrangian with Cartesian masses has no velocity coupling at any state, and the exact :math:`L_{inv}`
    meets the condition with the curvature term to :math:`O(h^4)` everywhere (the :math:`v_r^\top V''(r)\,v_r` term
    of :math:`\mathrm{inv}_2` is what the curvature term removes)."""
    n, D = F_diag.dim // 2, F_diag.dim
    off = torch.arange(n + 2, F_diag.count, device=F_diag.device)
    states = data_states(F_data, count)
    if off.numel() == 0 or states.shape[0] == 0:
        return F_diag
    part = F_diag.subset(off)
    parts = [F_diag]
    for x in states:
        atoms = {m: AtomSet(x.reshape(1, D).expand(a.points.shape[0], D), a.dirs, a.coef, a.owner)
                 for m, a in part.atoms.items()}
        parts.append(Functionals(D, part.count, atoms, part.targets))
    return Functionals.cat(parts)


#: how far ``axes @ axes.T`` may be from the identity (largest entry): float64 rounding of a computed rotation is
#: 1e-15..1e-13, so 1e-8 admits every such rotation and refuses axes that are not orthonormal
AXES_TOLERANCE = 1e-8


def _checked_axes(axes) -> torch.Tensor:
    """``axes`` as float64 (on its device), or :class:`~bea.errors.BeaValueError` unless square, finite and
    orthonormal (rows; :data:`AXES_TOLERANCE`); the number of coordinates is checked where it is known
    (:meth:`MassNormalisation.functionals`)."""
    a = torch.as_tensor(axes, dtype=torch.float64, device=_device(axes))
    if a.dim() != 2 or a.shape[0] != a.shape[1] or a.shape[0] == 0:
        raise BeaValueError(f"MassNormalisation axes must be a square (n, n) matrix (rows: the axes), got shape {tuple(a.shape)}")
    if not bool(torch.isfinite(a).all()):
        raise BeaValueError("MassNormalisation axes must be finite, got non-finite entries")
    off = float((a @ a.T - torch.eye(a.shape[0], dtype=a.dtype, device=a.device)).abs().max())
    if not off <= AXES_TOLERANCE:
        raise BeaValueError(f"MassNormalisation axes must be orthonormal rows: axes @ axes.T is {off:.2g} from the identity "
                            f"(tolerance {AXES_TOLERANCE:g}); orthonormalise them (e.g. torch.linalg.qr) in float64")
    return a


def inverse_curvature(h: float, scheme) -> float:
    r"""The curvature term :math:`\kappa` of the mass-matrix condition for the inverse modified Lagrangian of
    ``scheme`` at step ``h``: :math:`\partial_v^2 L_{inv} - \kappa\,\partial_q^2 L_{inv} = \partial_v^2 L + O(h^4)` at
    a state at rest in an equilibrium (class docstring).

    Read off the scheme's own :math:`\mathrm{mod}_2` at ``h`` on :math:`L = (v^2 - q^2)/2`, where
    :math:`\partial_q^2 L = -1`: :math:`\kappa = \partial_v^2\mathrm{mod}_2(L) - 1` (the midpoint rule:
    :math:`h^2/12`, from :math:`\mathrm{inv}_2(L) = L - \tfrac{h^2}{24}(A^\top M A - v^\top L_{qq} v)`,
    docs/theory/inverse.md; the trapezoidal rule: :math:`-h^2/6`)."""
    f = bea.compile_torch("modified_lagrangian", scheme, 2, n=1)  # n = 1: every scheme, stage schemes included
    v = torch.zeros(1, 1, dtype=torch.float64, device="cpu", requires_grad=True)  # a few numbers: on the CPU
    with torch.enable_grad():
        val = f(lambda q, v: (v.pow(2) - q.pow(2)).sum(-1) / 2, torch.zeros_like(v.detach()), v, float(h)).sum()
        (g,) = torch.autograd.grad(val, v, create_graph=True)
        (H,) = torch.autograd.grad(g.sum(), v)
    return float(H) - 1.0


def in_standard_units(norm: Normalisation, to_standard, h: float, scheme) -> Normalisation:
    """``norm`` for a fit in standardised units at step ``h`` of ``scheme``: a point given in the data's units mapped
    by ``to_standard(q, v)``; where the whole mass matrix may be fixed, the scheme's curvature term at ``h``
    (:func:`inverse_curvature`), so that the condition is on the mass matrix of L, not of L_inv."""
    if not isinstance(norm, MassNormalisation):
        return norm
    if norm.point is not None:
        x0 = norm.point.reshape(-1).to(torch.float64)
        n = x0.numel() // 2
        norm = MassNormalisation(norm.c, to_standard(x0[:n], x0[n:]), norm.matrix, norm.curvature, norm.axes)
    if norm.matrix is False or norm.curvature is not None:  # a curvature term given is kept
        return norm
    return norm.with_curvature(inverse_curvature(h, scheme))


def _device(x) -> torch.device:
    """The device of a tensor; the CPU for numbers, arrays and None."""
    return x.device if isinstance(x, torch.Tensor) else torch.device("cpu")


def get_normalisation(spec: Union[str, Normalisation, None]) -> Normalisation:
    if spec is None or spec == "vertices":
        return VertexNormalisation()
    if spec == "mass":
        return MassNormalisation()
    if isinstance(spec, Normalisation):
        return spec
    raise BeaValueError(f"normalisation must be 'vertices', 'mass' or a learners.Normalisation, got {spec!r}")
