r"""Variational integrators with internal stages: the discrete Lagrangian is a stationary value.

A stage scheme has interior points :math:`Q_1, \dots, Q_m` between the end points
:math:`Q_0 = a` and :math:`Q_{m+1} = b` of a step, and a *stage action*
:math:`\Phi(a, Q_1, \dots, Q_m, b; h)` written with ordinary arithmetic and calls of ``L``. Its
discrete Lagrangian is the stationary value

.. math::  L_\Delta(a, b; h) = \Phi(a, Q^*, b; h), \qquad \partial_{Q_k}\Phi(a, Q^*, b; h) = 0 .

Two families are built in (docs/theory/stages.md):

* :class:`Galerkin` -- continuous Galerkin: :math:`q(t + \tau h) = \sum_{j=0}^{s} X_j \ell_j(\tau)`,
  a polynomial of degree ``s`` with the Lagrange basis :math:`\ell_j` on the equispaced control
  nodes :math:`d_j = j/s` (:math:`X_0 = a`, :math:`X_s = b`, :math:`X_j = Q_j`), and
  :math:`\Phi = h \sum_i w_i L\big(q(c_i), \dot q(c_i)\big)` for a quadrature :math:`(c_i, w_i)`
  on :math:`[0, 1]`. With the :math:`s + 1` Gauss--Lobatto points (exact to degree
  :math:`2s - 1`) this is the Lobatto IIIA--IIIB method of order :math:`2s`
  (:func:`galerkin_lobatto`). The stationary value does not depend on where the control nodes are.
* :class:`Composition` -- the midpoint rule composed over sub-steps :math:`\gamma_j h`:
  :math:`\Phi = \sum_j \gamma_j h\, L\big(\tfrac{x_{j-1} + x_j}{2}, \tfrac{x_j - x_{j-1}}{\gamma_j h}\big)`
  with :math:`x_0 = a`, :math:`x_m = b`. :func:`triple_jump` is
  :math:`\gamma = (\gamma_1, 1 - 2\gamma_1, \gamma_1)`, :math:`\gamma_1 = 1/(2 - 2^{1/3})` (order 4).

For every such :math:`\Phi` the Hessian in the interior points is, to leading order in ``h``,
:math:`h^{-1} K \otimes M` with :math:`M = \partial^2 L/\partial v^2` and a constant matrix ``K``
(:attr:`StageScheme.stiffness`, the Hessian of :math:`\Phi` for :math:`L = v^2/2`, ``h = 1``);
the series engine solves the stationarity conditions with it order by order in ``h``
(:mod:`bea.stage_series`), torch by Newton's method on all stages together (:mod:`bea.stage_torch`).
Constants are exact: rational (:func:`~bea.schemes.exact`), or in one pure radical extension
:math:`\mathbb{Q}(c^{1/d})` (:class:`~bea.radicals.RadicalNumber`: Lobatto with ``s = 3`` lies in
:math:`\mathbb{Q}(\sqrt5)`, the triple jump in :math:`\mathbb{Q}(2^{1/3})`), which the series engine carries
as a variable reduced by :math:`\theta^d = c` (:attr:`StageScheme.radical_field`) and SymPy prints as the
radical. A constant given as a bare float pair ``(value, 'irrational')`` runs in torch only; the series
engine refuses it with :class:`~bea.errors.UnsupportedSchemeError`.
"""

from __future__ import annotations

import hashlib
import math
from fractions import Fraction
from typing import Any, Callable, List, Optional, Sequence

from .errors import BeaTypeError, BeaValueError, UnsupportedSchemeError
from .radicals import RadicalNumber, from_sympy, radical
from .scalars import to_fraction
from .schemes import Exact, Scheme, exact

__all__ = ["StageScheme", "Galerkin", "Composition", "galerkin_lobatto", "triple_jump"]

Number = Any  # an Exact (rational), a RadicalNumber (exact irrational) or a float (irrational, torch only)


def _number(x: Any, what: str) -> Number:
    """An exact constant when ``x`` is rational (int, Fraction, str, Exact, float given as decimal), a
    :class:`~bea.radicals.RadicalNumber` as given (or from an exact SymPy number such as ``(5 - sqrt(5))/10``),
    else the float (irrational constants known only numerically: an ``(x, 'irrational')`` pair marks them)."""
    if isinstance(x, RadicalNumber):
        return x
    if type(x).__module__.startswith("sympy") and not getattr(x, "is_Rational", False):
        return from_sympy(x)
    if isinstance(x, tuple) and len(x) == 2 and x[1] == "irrational":
        if not isinstance(x[0], (int, float)) or isinstance(x[0], bool) or not math.isfinite(x[0]):
            raise BeaValueError(f"{what} given as (value, 'irrational') needs a finite real value, got {x[0]!r}")
        return float(x[0])
    return exact(to_fraction(x, what))


def _is_exact(x: Number) -> bool:
    return isinstance(x, (Exact, RadicalNumber))


def _equal(x: Number, y: Number) -> bool:
    """``x == y`` exactly when both are exact (a symmetry decided to a float tolerance would call
    ``1/3 + 0.6666666666666667`` one and drop the odd powers of ``h``); floats to 1e-15."""
    if _is_exact(x) and _is_exact(y):
        d = x - y  # rational differences are Exact; a RadicalNumber is never zero
        return isinstance(d, Exact) and d.exact == 0
    return abs(float(x) - float(y)) < 1e-15


def _lin(coeffs: Sequence[Number], points: Sequence[Any]) -> Any:
    """:math:`\\sum_j c_j X_j`, skipping zero coefficients (cheap on series), never starting from 0."""
    out = None
    for c, x in zip(coeffs, points):
        if c == 0:
            continue
        term = x if c == 1 else c * x  # the constant first: SymPy would turn an Exact into a Float
        out = term if out is None else out + term
    return out


class StageScheme(Scheme):
    r"""Base class: :math:`L_\Delta(a, b) = \Phi(a, Q^*, b)` at the interior points :math:`Q^*` where
    :math:`\partial_Q\Phi = 0`. Subclasses define :meth:`stage_action`, :meth:`guess_nodes`
    (:math:`Q_k \approx a + \theta_k (b - a)`) and :meth:`params`."""

    n_interior: int = 0
    #: classical order of the method (observed order of the trajectories; ``order`` is the truncation order elsewhere)
    method_order: int = 2

    # -- to be defined by subclasses
    def stage_action(self, L: Callable, a: Any, Q: Sequence[Any], b: Any, h: Any) -> Any:  # pragma: no cover
        raise NotImplementedError

    def guess_nodes(self) -> List[Number]:  # pragma: no cover
        raise NotImplementedError

    # -- derived
    def interior_guess(self, a: Any, b: Any) -> List[Any]:
        """Interior points on the straight line from ``a`` to ``b`` (Newton's and the series' start)."""
        return [a + th * (b - a) for th in self.guess_nodes()]

    @property
    def exact_constants(self) -> bool:
        """Whether every constant is exact, rational or in one radical extension (the series engine needs it)."""
        return all(_is_exact(x) for x in self._constants())

    @property
    def radical_field(self):
        r"""``(c, d)`` when some constant lies in :math:`\mathbb{Q}(c^{1/d})` (the series engine adjoins
        :math:`c^{1/d}`), ``None`` when all are rational; two different radicals are refused."""
        fields = {x.field for x in self._constants() if isinstance(x, RadicalNumber)}
        if len(fields) > 1:
            raise UnsupportedSchemeError(f"{self!r} has constants in several radical extensions {sorted(fields)}; the exact "
                                         "series engine adjoins one radical c^(1/d) per scheme")
        return next(iter(fields), None)

    def _constants(self) -> List[Number]:  # pragma: no cover
        raise NotImplementedError

    def _init_stiffness(self) -> None:
        r"""``K``: the Hessian of :math:`\Phi` in the interior points for :math:`L = v^2/2`, ``n = 1``,
        ``h = 1`` (exact where the constants are). :math:`\Phi` is then quadratic, so second
        differences are exact. A singular ``K`` leaves the interior points undetermined."""
        m = self.n_interior

        def phi(z: List[Number]) -> Number:
            return self.stage_action(lambda q, v: v * v / 2, exact(0), z, exact(0), exact(1))

        e = [[exact(1) if i == j else exact(0) for j in range(m)] for i in range(m)]
        zero = [exact(0)] * m
        p0 = phi(zero)
        K = [[phi([x + y for x, y in zip(e[k], e[l])]) - phi(e[k]) - phi(e[l]) + p0 for l in range(m)] for k in range(m)]
        self.stiffness = K
        import sympy

        det = sympy.Matrix([[float(x) for x in row] for row in K]).det() if m else 1.0
        if abs(float(det)) < 1e-12:
            raise BeaValueError(f"{self!r}: the interior points are not determined (the stage action's Hessian for "
                                "L = v^2/2 is singular); use distinct nodes and a quadrature with positive weights")

    def discrete_lagrangian(self, L, a, b, h):
        r"""The stationary value :math:`\Phi(a, Q^*, b)`: torch tensors (Newton, :mod:`bea.stage_torch`);
        the series engines call :meth:`series_discrete_lagrangian` (components) or
        :class:`bea.free.stages.StageSolver` (trees) instead."""
        if type(a).__module__.startswith("torch"):
            from .stage_torch import stationary_value

            return stationary_value(L, a, b, h, self)
        raise UnsupportedSchemeError(
            f"{self!r} has interior points fixed by stationarity: it runs on torch tensors and in bea's derivations "
            "(e.g. bea.modified_lagrangian(scheme, 4, n=2), or n=None for every dimension); plain SymPy evaluation "
            "cannot solve for them")

    def series_discrete_lagrangian(self, L, a, b, h, jets, W=None):
        """The stationary value on series (component engine, :mod:`bea.stage_series`)."""
        from .stage_series import stationary_series

        return stationary_series(L, a, b, h, self, jets, W)

    def interior_points(self, L: Callable, a: Any, b: Any, h: Any):
        """The stationary interior points :math:`Q^*`, torch tensors of shape ``(m, ..., n)``."""
        from .stage_torch import solve_interior

        return solve_interior(L, a, b, h, self)

    # -- identity: built from exact definitions, so the parameters are the fingerprint
    def fingerprint(self, n: Optional[int] = None) -> str:
        text = repr((type(self).__name__, sorted(self.params().items())))
        return hashlib.sha256(text.encode()).hexdigest()

    def check_consistent(self) -> None:
        """Consistent by construction: the constructor checked the weights (sum 1) and the stiffness."""


class Galerkin(StageScheme):
    r"""Continuous Galerkin of degree ``degree`` with the quadrature ``(nodes, weights)`` on ``[0, 1]``.

    ``nodes`` and ``weights`` are numbers (``'1/6'``, ``Fraction(1, 6)``, ``0.5``: exact) or, for an
    irrational value, the pair ``(value, 'irrational')``. The weights must sum to 1. The classical order
    is :math:`\min(2s, r)` with ``r`` the quadrature's order (exact to degree ``r - 1``).
    """

    def __init__(self, degree: int, nodes: Sequence[Any], weights: Sequence[Any], name: Optional[str] = None):
        if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
            raise BeaTypeError(f"degree must be an integer >= 1 (the polynomial degree s), got {degree!r}")
        if not isinstance(nodes, (list, tuple)) or not isinstance(weights, (list, tuple)) or len(nodes) != len(weights) or not nodes:
            raise BeaValueError("nodes and weights must be non-empty lists of the same length (a quadrature on [0, 1])")
        self.degree = degree
        self.nodes = [_number(c, "a quadrature node") for c in nodes]
        self.weights = [_number(w, "a quadrature weight") for w in weights]
        if any(not 0 <= float(c) <= 1 for c in self.nodes) or len({float(c) for c in self.nodes}) != len(self.nodes):
            raise BeaValueError(f"quadrature nodes must be distinct and lie in [0, 1], got {[float(c) for c in self.nodes]}")
        if abs(sum(float(w) for w in self.weights) - 1) > 1e-14 or (self.exact_constants and getattr(sum(self.weights), "exact", 0) != 1):
            raise BeaValueError(f"quadrature weights must sum to 1 (consistency), got {sum(self.weights)} "
                                "(rational weights are taken exactly as typed: give 1/6 as '1/6' or Fraction(1, 6), not 1/6 = 0.1666...)")
        self.name = name or f"galerkin({degree})"
        self.n_interior = degree - 1
        r = self._quadrature_order()
        self.method_order = min(2 * degree, r)
        sym = sorted(zip(self.nodes, self.weights), key=lambda cw: float(cw[0]))
        self.symmetric = all(_equal(c + d, exact(1)) and _equal(w, x) for (c, w), (d, x) in zip(sym, reversed(sym)))
        d = [Fraction(j, degree) for j in range(degree + 1)]
        self._phi = [[self._basis(d, j, c, 0) for j in range(degree + 1)] for c in self.nodes]
        self._dphi = [[self._basis(d, j, c, 1) for j in range(degree + 1)] for c in self.nodes]
        self._init_stiffness()

    def _constants(self) -> List[Number]:
        return self.nodes + self.weights

    def _quadrature_order(self) -> int:
        """``r``: the quadrature integrates :math:`\\tau^k` exactly for ``k < r`` (to 1e-13 for floats)."""
        r = 0
        while r < 4 * self.degree + 2:
            got = sum(float(w) * float(c) ** r for c, w in zip(self.nodes, self.weights))
            if abs(got - 1 / (r + 1)) > 1e-13:
                break
            r += 1
        return r

    @staticmethod
    def _basis(d: List[Fraction], j: int, c: Number, deriv: int) -> Number:
        r""":math:`\ell_j(c)` or :math:`\ell_j'(c)` for the Lagrange basis on the control nodes ``d``."""
        others = [x for i, x in enumerate(d) if i != j]
        den = math.prod(d[j] - x for x in others)
        if deriv == 0:
            return math.prod((c - x for x in others), start=exact(1)) / den
        total = exact(0)
        for skip in range(len(others)):
            total = total + math.prod((c - x for i, x in enumerate(others) if i != skip), start=exact(1))
        return total / den

    def guess_nodes(self) -> List[Number]:
        return [exact(Fraction(j, self.degree)) for j in range(1, self.degree)]

    def stage_action(self, L, a, Q, b, h):
        X = [a, *Q, b]
        out = None
        for w, row, drow in zip(self.weights, self._phi, self._dphi):
            term = w * L(_lin(row, X), _lin(drow, X) / h)
            out = term if out is None else out + term
        return h * out

    def params(self):
        return {"degree": self.degree, "nodes": tuple(repr(c) for c in self.nodes), "weights": tuple(repr(w) for w in self.weights)}


class Composition(StageScheme):
    r"""The midpoint rule composed over sub-steps :math:`\gamma_1 h, \dots, \gamma_m h`
    (:math:`\sum_j \gamma_j = 1`); the :math:`m - 1` inner points are the interior points."""

    def __init__(self, gammas: Sequence[Any], name: Optional[str] = None, method_order: int = 2):
        if not isinstance(gammas, (list, tuple)) or len(gammas) < 2:
            raise BeaValueError("a composition needs a list of at least two sub-step fractions gamma_j (summing to 1)")
        self.gammas = [_number(g, "a sub-step fraction gamma") for g in gammas]
        if any(float(g) == 0 for g in self.gammas):
            raise BeaValueError("sub-step fractions gamma_j must be non-zero")
        if abs(sum(float(g) for g in self.gammas) - 1) > 1e-14:
            raise BeaValueError(f"sub-step fractions must sum to 1 (consistency), got {sum(float(g) for g in self.gammas)!r}")
        self.name = name or "composition"
        self.method_order = method_order
        self.n_interior = len(self.gammas) - 1
        self.symmetric = all(_equal(x, y) for x, y in zip(self.gammas, reversed(self.gammas)))
        self._init_stiffness()

    def _constants(self) -> List[Number]:
        return list(self.gammas)

    def guess_nodes(self) -> List[Number]:
        out, acc = [], exact(0)
        for g in self.gammas[:-1]:
            acc = acc + g
            out.append(acc)
        return out

    def stage_action(self, L, a, Q, b, h):
        X = [a, *Q, b]
        out = None
        for g, x0, x1 in zip(self.gammas, X[:-1], X[1:]):
            term = g * L((x0 + x1) / 2, (1 / g) * (x1 - x0) / h)
            out = term if out is None else out + term
        return h * out

    def params(self):
        return {"gammas": tuple(repr(g) for g in self.gammas)}


def galerkin_lobatto(s: int) -> Galerkin:
    r"""Continuous Galerkin of degree ``s`` with :math:`s + 1` Gauss--Lobatto points: order :math:`2s`
    (Lobatto IIIA--IIIB). ``s = 1`` is the trapezoidal rule, ``s = 2`` uses Simpson's rule (exact
    constants), ``s = 3`` the nodes :math:`(5 \mp \sqrt5)/10` (exact in :math:`\mathbb{Q}(\sqrt5)`)."""
    if s == 1:
        return Galerkin(1, [0, 1], ["1/2", "1/2"], name="galerkin1")
    if s == 2:
        return Galerkin(2, [0, "1/2", 1], ["1/6", "2/3", "1/6"], name="galerkin2")
    if s == 3:
        r = radical(5) / 10
        return Galerkin(3, [0, exact("1/2") - r, exact("1/2") + r, 1], ["1/12", "5/12", "5/12", "1/12"], name="galerkin3")
    raise BeaValueError(f"galerkin_lobatto(s) is provided for s = 1, 2, 3, got {s!r}; for other degrees give the nodes "
                        "and weights: bea.Galerkin(s, nodes, weights)")


def triple_jump() -> Composition:
    r"""The triple jump of the midpoint rule: :math:`\gamma_1 = 1/(2 - 2^{1/3})`, :math:`\gamma_2 = 1 - 2\gamma_1`
    (order 4; exact in :math:`\mathbb{Q}(2^{1/3})`)."""
    g1 = 1 / (2 - radical(2, 3))
    return Composition([g1, 1 - 2 * g1, g1], name="triple_jump", method_order=4)
