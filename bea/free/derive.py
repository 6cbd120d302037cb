r"""Dimension-free derivations: modified equation, modified and inverse modified Lagrangian.

The same construction as the component engine (:mod:`bea.derive`; Vermeeren 2017), carried out
on tree polynomials (:mod:`bea.free.trees`), so that one derivation holds for every dimension:

1. *Modified equation.* Vary the discrete action at :math:`q_j = q(t) + h\varepsilon`; the
   :math:`\varepsilon`-coefficient is a covector series :math:`h^2 R(h)` with
   :math:`R_0 = L_q - L_{qv}[v] - M\ddot q`. Then :math:`A_0 = M^{-1}(L_q - L_{qv}[v])` and, order
   by order, :math:`A_k = M^{-1} [\sum_{j \ge 1} h^j R_j]_k` with the jets
   :math:`q^{(m)}` replaced by :math:`D_F^{m-2} F` (:math:`F` known to :math:`h^{k-1}`).
2. *Meshed Lagrangian on shell.* :math:`\Lambda = L_\Delta(q(t-h/2), q(t+h/2))/h` with its jets
   replaced by :math:`D_F^{m-2}F`. Because :math:`D` restricted to solutions of
   :math:`\ddot q = F` is :math:`D_F`, the modified Lagrangian is
   :math:`\frac{hD_F/2}{\sinh(hD_F/2)}\Lambda` truncated at :math:`h^N`.
3. *Inverse.* The modified equation of :math:`L_{inv}` is the Euler-Lagrange equation of
   :math:`L`, so :math:`\Lambda_{L_{inv}}` on the exact flow must equal the mean of :math:`L`
   over a step, :math:`\frac{\sinh(hD_A/2)}{hD_A/2} L`; as :math:`\Lambda_X` is linear in
   :math:`X`, this gives :math:`L_{inv} = L + \sum_k h^k Y_k` term by term (see
   :meth:`FreeDerivation.inverse_modified_lagrangian`). A discrete Lagrangian that is not linear
   in :math:`L` falls back on :math:`L_{inv} \leftarrow L_{inv} - [\mathrm{mod}(L_{inv}) - L]_k`,
   where :math:`\mathrm{mod}(X)` substitutes :math:`X` for :math:`L` in the generic formula.

Throughout, :math:`L_q` is eliminated in favour of the Euler-Lagrange acceleration
:math:`A = M^{-1}(L_q - L_{qv}[v])` (a leaf of the trees, :mod:`bea.free.trees`), which keeps
the intermediate expansions small: :math:`F_0 = A` is one term, and :math:`D_F A` is
:math:`M^{-1}` applied to a handful of trees. In the inverse substitution :math:`A` changes
with :math:`L`: :math:`A_X = A + (M + \delta M)^{-1}(\delta_q - \delta_{qv}[v] - \delta_{vv}[A])`.

A scheme with internal stages (:mod:`bea.stages`) has its discrete Lagrangian evaluated by
:class:`~bea.free.stages.StageSolver` (interior points solved on trees); its meshed Lagrangian then holds
:math:`M^{-1}` and :math:`A`, so step 2 applies :math:`D_F` after the jets are substituted, and it is not
linear in :math:`L`, so step 3 takes the substitution route.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, List, Optional

from ..derive import _mesh_weights, check_kind, evaluate_scheme, mesh_lambda
from ..hseries import EXACT, HSeries, Poly, Q
from ..errors import InconsistentSchemeError
from ..schemes import Scheme
from .algebra import Algebra, lagrangian_at
from .curve import CurveDerivative
from .euler_lagrange import acceleration, equation_from_lagrangian
from .shift import Shift
from .release import compact, lean_equation
from .stages import StageSolver
from .substitution import LagrangianSubstitution
from .trees import OPEN, Forest, single_node
from .vectors import VecSeries


@dataclass
class FreeRaw:
    """Result of a dimension-free derivation: per power of ``h`` a tree polynomial (a vector
    polynomial for the modified equation), with the :class:`Forest` that names the trees."""

    kind: str
    forest: Forest
    order: int
    coeffs: Dict[int, Poly]
    symmetric: bool


class FreeDerivation:
    """All dimension-free derivations of one scheme, sharing one tree registry and results."""

    def __init__(self, scheme: Scheme):
        self.scheme = scheme
        self.forest = Forest()
        self.alg = Algebra(self.forest)
        self._symmetric: Optional[bool] = scheme.symmetric
        self._F: Optional[HSeries] = None
        self._lmod: Dict[int, HSeries] = {}
        self._linv: Dict[int, HSeries] = {}
        self._lam: Dict[tuple, HSeries] = {}
        self.L = self.forest.id(single_node((), ()))
        # a stage scheme (bea.stages): interior points fixed by stationarity, solved on trees
        self._stages = StageSolver(scheme, self.alg) if getattr(scheme, "series_discrete_lagrangian", None) is not None else None

    # ------------------------------------------------------------------ helpers
    def _h(self) -> HSeries:
        return HSeries.h_power(1, 1, EXACT)

    def _eval_scheme(self, a: VecSeries, b: VecSeries, normalize: bool = True) -> HSeries:
        forest = self.forest
        if self._stages is not None:  # always normalised: the interior corrections carry A
            return self._stages.stationary_value(a, b)

        def L(x, y):
            val = lagrangian_at(forest, x, y)  # refuses anything but the vectors built from a, b and h
            return self.alg.normalize(val) if normalize else val

        return evaluate_scheme(self.scheme, L, a, b, self._h())

    def _jet_values(self, F: HSeries, order: int, targets: List[HSeries]) -> Dict[int, HSeries]:
        r"""Values :math:`D_F^{k-2} F` of the jets :math:`q^{(k)}, k \ge 2`, occurring in ``targets``,
        each to the precision its first occurrence needs."""
        f = self.forest
        need: Dict[int, int] = {}
        for t in targets:
            for d in range(min(len(t.c), order + 1)):
                for m in t.c[d]:
                    for x in m:
                        for c in f.leaves[x]:
                            if 2 <= c < OPEN:
                                need[c] = max(need.get(c, -1), order - d)
        if not need:
            return {}
        top = max(need)
        prec: Dict[int, int] = {}
        running = -1
        for k in range(top, 1, -1):
            running = max(running, need.get(k, -1))
            prec[k] = running
        values: Dict[int, HSeries] = {}
        cur = F.truncate_soft(prec[2])
        for k in range(2, top + 1):
            cur = cur.truncate_soft(prec[k])
            if k in need:
                values[k] = cur
            if k < top:
                cur = self.alg.derivative(cur, F, prec[k + 1])
        return values

    # ------------------------------------------------------------------ step 1
    def _del_residual(self, order: int) -> HSeries:
        K = order + 2
        # a stage scheme's value h*sum w L(x, y/h) is known to the end points' precision (StageSolver); a general
        # scheme may lose a power to the division by h
        top = K if self._stages is not None else K + 1
        qm = VecSeries.taylor(-1, top)
        q0 = VecSeries.taylor(0, top, eps_power=1)
        qp = VecSeries.taylor(1, top)
        ahead = self._eval_scheme(q0, qp)
        if self._stages is not None and self.scheme.symmetric:
            # L_D(a, b; h) = -L_D(b, a; -h) (a symmetric scheme, exactly: bea.stages), so the first variation of
            # L_D(q(t-h), q(t) + h e) is that of L_D(q(t) + h e, q(t+h)) with h -> -h: no second interior solve
            behind = HSeries([p if k % 2 == 0 else {m: -c for m, c in p.items()} for k, p in enumerate(ahead.c)], ahead.order)
        else:
            behind = self._eval_scheme(qm, q0)
        S = behind + ahead
        f = self.forest
        # the first variation: monomials linear in the variation (a discrete Lagrangian that is a
        # product of values of L also yields higher powers, one open slot per varied factor)
        E = HSeries([{m: c for m, c in p.items() if sum(f.is_covector(x) for x in m) == 1} for p in S.c], S.order)
        if E.order < K:
            raise InconsistentSchemeError(f"scheme {self.scheme!r} loses too many powers of h (known to h^{E.order}, need h^{K})")
        if E.valuation() < 2:
            raise InconsistentSchemeError(f"inconsistent scheme {self.scheme!r}: the discrete EL equation is not O(h)")
        R = HSeries(E.c[2:], E.order - 2).truncate(order)
        acc = {m: c for m, c in R[0].items() if any(2 in f.leaves[x] for x in m)}
        if acc != {(f.id(single_node((), (OPEN, 2))),): Q(-1)}:
            raise InconsistentSchemeError(
                f"inconsistent scheme {self.scheme!r}: the leading order of its discrete "
                "Euler-Lagrange equation is not the Euler-Lagrange equation of L"
            )
        return R

    def modified_equation(self, order: int) -> HSeries:
        r""":math:`F_h = A + hA_1 + \dots + h^N A_N` as a vector tree series."""
        if self._F is not None and self._F.order >= order:
            return self._F.truncate(order)
        f = self.forest
        R = self._del_residual(order)
        r0 = {m: c for m, c in R[0].items() if not any(2 in f.leaves[x] for x in m)}
        F = self.alg.raise_index(HSeries([r0], 0))
        rest = HSeries([{}] + R.c[1:], R.order)
        for k in range(1, order + 1):
            if self.symmetric_hint and k % 2:
                F = HSeries(F.c, k)
                continue
            target = rest.truncate(k)
            values = self._jet_values(F, k, [target])
            sub = self.alg.substitute_jets(target, values, k)
            rk = sub[k]
            F = HSeries(F.c + [{}] * (k + 1 - len(F.c)), k)
            if rk:
                ak = self.alg.raise_index(HSeries([rk], 0))
                F = F + HSeries([{}] * k + [ak[0]], EXACT)
                F = HSeries(F.c, k)
        self._F = F
        return F

    @property
    def symmetric_hint(self) -> bool:
        return bool(self.scheme.symmetric)

    # ------------------------------------------------------------------ steps 2-3
    def _mesh_points(self, order: int):
        # a stage scheme's value keeps the end points' precision (StageSolver), so L_D/h to h^order needs them to
        # h^(order+1); one power more would cost the largest coefficient of the stationary value for nothing
        top = order + 1 if self._stages is not None else order + 2
        return VecSeries.taylor(-Q(1, 2), top), VecSeries.taylor(Q(1, 2), top)

    def _mesh(self, order: int, normalize: bool = True) -> HSeries:
        r"""The meshed Lagrangian :math:`\Lambda = L_\Delta(q(t-h/2), q(t+h/2))/h` to ``h^order``, jets
        unsubstituted; ``normalize=False`` keeps :math:`L_q` (plain nodes with jet leaves)."""
        key = (order, normalize)
        if key not in self._lam:
            ld = self._eval_scheme(*self._mesh_points(order), normalize=normalize)
            lam, odd_zero = mesh_lambda(self.scheme, ld, self._h(), order, {(self.L,): Q(1)})
            if self._symmetric is None and order >= 3:
                self._symmetric = odd_zero
            elif self._symmetric and not odd_zero:
                raise InconsistentSchemeError(f"scheme {self.scheme!r} is declared symmetric but its expansion has odd powers of h")
            self._lam[key] = lam
        return self._lam[key]

    def modified_lagrangian(self, order: int) -> HSeries:
        r""":math:`L_{mod} = \frac{hD/2}{\sinh(hD/2)}\Lambda` on the solutions of the modified equation.

        The operator is applied first in the jets of an arbitrary curve, where :math:`D` only shifts
        jets (:meth:`~bea.free.algebra.Algebra.jet_derivative`) and the series stays small (64
        terms at :math:`h^6` for the midpoint rule); the jets :math:`q^{(k)} = D_F^{k-2}F` of the
        modified equation are substituted once, at the end. Both orders of the two steps give the
        same series, because :math:`D` restricted to solutions of :math:`\ddot q = F` is :math:`D_F`.
        """
        if order in self._lmod:
            return self._lmod[order]
        self._mesh(max(order, 3))  # decides the symmetry before the modified equation needs it
        if self._stages is not None:
            self._lmod[order] = self._modified_on_shell(order)
            return self._lmod[order]
        out = _sinh_operator(self._mesh(max(order, 3), normalize=False).truncate(order), self.alg.jet_derivative, order)
        F = self.modified_equation(max(order - 1, 0))
        values = self._jet_values(F, order, [out])
        out = self.alg.normalize(self.alg.substitute_jets(out, values, order)).truncate(order)
        self._lmod[order] = out
        return out

    def _modified_on_shell(self, order: int) -> HSeries:
        r""":math:`\frac{hD/2}{\sinh(hD/2)}\Lambda` for a stage scheme, then the jets :math:`q^{(k)} = D_F^{k-2}F`.

        The interior corrections of a stage scheme carry :math:`M^{-1}` and :math:`A`, so its meshed Lagrangian is
        not a polynomial in plain nodes, on which :meth:`modified_lagrangian` applies :math:`D` by shifting jets. The
        total derivative along an arbitrary curve acts on these trees too (:class:`~bea.free.curve.CurveDerivative`):
        the operator is applied in the jets, where the series is small, and the jets are substituted once. On the
        solutions of the modified equation :math:`D = D_F`, so this is the same series as applying :math:`D_F` after
        the substitution, which costs several times more (every power of :math:`D_F` glues the terms of ``F`` into
        every tree).
        """
        out = _sinh_operator(self._mesh(max(order, 3)).truncate(order), CurveDerivative(self.alg).series, order)
        # the jets of the h^d term need F to h^(order - d): F to h^(order - low), low the lowest power holding a jet
        f = self.forest
        low = min((d for d in range(1, len(out.c)) for m in out.c[d] for x in m if any(2 <= c < OPEN for c in f.leaves[x])),
                  default=order)
        F = self._equation_below(max(order - low, 0))
        return self.alg.normalize(self.alg.substitute_jets(out, self._jet_values(F, order, [out]), order)).truncate(order)

    def _equation_below(self, r: int) -> HSeries:
        """The modified equation to ``h^r`` for a lower order's modified Lagrangian: from the Euler-Lagrange equations
        of the modified Lagrangian to ``h^r`` where ``r`` is below twice its first correction
        (:mod:`bea.free.euler_lagrange`), else from the discrete Euler-Lagrange residual."""
        if r >= 2 and (self._F is None or self._F.order < r):
            F = equation_from_lagrangian(self.alg, self.modified_lagrangian(r), self._acceleration(), r)
            if F is not None:
                return F
        return self.modified_equation(r)

    def _acceleration(self) -> HSeries:
        """:func:`~bea.free.euler_lagrange.acceleration` in this forest (checked by :meth:`modified_equation`)."""
        return acceleration(self.forest)

    @property
    def is_stage_scheme(self) -> bool:
        """Whether the scheme has interior stage points (:mod:`bea.stages`), fixed by stationarity on trees."""
        return self._stages is not None

    def release(self) -> None:
        """Drop the forest, memos and partial results (galerkin3 at h^8: 3 GB) for good (:mod:`bea.free.release`)."""
        self.__dict__.clear()

    def equation(self, order: int) -> HSeries:
        """The public modified equation to ``h^order``: for a stage scheme from the Euler-Lagrange equations of its
        modified Lagrangian to ``h^order`` while ``order`` is below twice the first correction
        (:func:`~bea.free.euler_lagrange.equation_from_lagrangian`, whose docstring gives the argument), which holds to
        ``h^(2s+2)`` for every ``s >= 2``; otherwise, and for a scheme written at its end points, from the discrete
        Euler-Lagrange residual (:meth:`modified_equation`). Both give the same series where both apply."""
        if self._stages is None:
            return self.modified_equation(order)
        return self._equation_below(order).truncate(order)

    @property
    def symmetric(self) -> bool:
        if self._symmetric is None:
            self.modified_lagrangian(3)
        return bool(self._symmetric)

    # ------------------------------------------------------------------ step 4
    def inverse_modified_lagrangian(self, order: int) -> HSeries:
        r""":math:`L_{inv} = L + \sum_{k \ge 1} h^k Y_k` whose discrete flow is the exact flow of ``L``.

        The modified equation of :math:`L_{inv}` is :math:`\ddot q = A`, the Euler-Lagrange
        equation of ``L``; so, with the jets :math:`q^{(k)} = D_A^{k-2} A` of the exact flow, the
        defining identity :math:`\mathrm{mod}(L_{inv}) = L` reads
        :math:`\Lambda_{L_{inv}} = \frac{\sinh(hD_A/2)}{hD_A/2} L`, the mean of ``L`` over the step
        along the exact flow. The meshed Lagrangian
        :math:`\Lambda_X = L_\Delta[X](q(t-h/2), q(t+h/2))/h` is linear in ``X`` and tends to ``X``,
        which gives each :math:`Y_k` explicitly:
        :math:`Y_k = [\frac{\sinh(hD_A/2)}{hD_A/2} L - \Lambda_L]_k - \sum_{1 \le j < k} [\Lambda_{Y_j}]_{k-j}`.
        Only the exact flow of ``L`` and the Taylor expansion of the :math:`Y_j` at the scheme's
        points enter (:mod:`bea.free.shift`), not the modified equation.
        """
        if order in self._linv:
            return self._linv[order]
        lam = self._mesh(order)
        if self._stages is not None or any(len(m) != 1 for p in lam.c for m in p):
            # not linear in L: a stage scheme through its interior points, or products of values of L
            # substitute into the modified Lagrangian
            out = self._inverse_by_substitution(order)
            self._linv[order] = out
            return out
        FA = self._acceleration()
        rest = (self._exact_mean(order) - lam).truncate(order)
        jets = self._jet_values(FA, order, [rest])
        rest = self.alg.normalize(self.alg.substitute_jets(rest, jets, order))
        a, b = self._mesh_points(order)
        shift = Shift(self.alg)
        coeffs: List[Poly] = [{(self.L,): Q(1)}]
        for k in range(1, order + 1):
            yk = {} if self.symmetric and k % 2 else dict(rest[k])
            coeffs.append(yk)
            if not yk or k == order:
                continue
            prec = order - k
            ld = evaluate_scheme(self.scheme, lambda x, y, Y=yk: shift.at(Y, x, y, prec + 1), a, b, self._h())
            lam_y, _ = mesh_lambda(self.scheme, ld, self._h(), prec, yk)
            rest = rest - HSeries([{}] * k + self.alg.normalize(self.alg.substitute_jets(lam_y, jets, prec)).c, order)
        out = self.alg.normalize(HSeries(coeffs, order))
        self._linv[order] = out
        return out

    def _exact_mean(self, order: int) -> HSeries:
        r""":math:`\frac{\sinh(hD/2)}{hD/2} L = \frac1h \int_{-h/2}^{h/2} L(q(t+s), \dot q(t+s))\, ds`
        to ``h^order``, in the jets of the curve (the discrete Lagrangian of the exact flow, per step)."""
        x = VecSeries.taylor(1, order)
        y = VecSeries([{k + 1: Q(1, math.factorial(k))} for k in range(order + 1)], order)
        along = self.alg.normalize(lagrangian_at(self.forest, x, y))
        return HSeries([{m: c * Q(1, 2**k * (k + 1)) for m, c in p.items()} if k % 2 == 0 else {} for k, p in enumerate(along.c)], order)

    def _inverse_by_substitution(self, order: int) -> HSeries:
        r"""The inverse by iteration, :math:`Y_k = -[\mathrm{mod}(L + \sum_{j<k} h^j Y_j) - L]_k`,
        substituting into the generic modified Lagrangian (:mod:`bea.free.substitution`)."""
        P = self.modified_lagrangian(order)
        sub = LagrangianSubstitution(self.forest)
        coeffs: List[Poly] = [{(self.L,): Q(1)}]
        for k in range(1, order + 1):
            if self.symmetric and k % 2:
                coeffs.append({})
                continue
            total: Poly = {}
            for d in range(1, k + 1):
                if d < len(P.c) and P.c[d]:
                    part = sub.series(HSeries([P.c[d]], EXACT), k - d)
                    for m, c in part[k - d].items():
                        v = total.get(m, 0) + c
                        if v:
                            total[m] = v
                        else:
                            total.pop(m)
            yk = {m: -c for m, c in total.items()}
            coeffs.append(yk)
            sub.set_term(k, yk)
        return self.alg.normalize(HSeries(coeffs, order))


def _sinh_operator(lam: HSeries, D, order: int) -> HSeries:
    r""":math:`\frac{hD/2}{\sinh(hD/2)}\Lambda = \sum_k w_k h^{2k} D^{2k}\Lambda` to ``h^order`` (``w_k`` of
    :func:`~bea.derive._mesh_weights`), ``D(S, prec)`` the total derivative along an arbitrary curve on the series at
    hand: jet shifting on plain nodes, :class:`~bea.free.curve.CurveDerivative` on a stage scheme's trees."""
    weights = _mesh_weights(order)
    out, d = lam, lam
    for k in range(1, order // 2 + 1):
        d = D(D(d, order - 2 * k), order - 2 * k)
        out = out + HSeries([{}] * (2 * k) + [{(): weights[k]}], EXACT) * d
    return out.truncate(order)


def derive_free(scheme: Scheme, kind: str, order: int, derivation: Optional[FreeDerivation] = None) -> FreeRaw:
    """Run one dimension-free derivation and package the coefficients by power of ``h``. Without ``derivation``
    (nobody else holds it) the result keeps only its own trees, and a stage scheme's modified equation releases the
    derivation before its last step (:mod:`bea.free.release`)."""
    d = derivation or FreeDerivation(scheme)
    check_kind(kind)
    if kind == "modified_equation" and derivation is None:
        lean = lean_equation(d, order)
        if lean is not None:
            return FreeRaw(kind, lean[0], order, lean[1], lean[2])
    s = {"modified_equation": d.equation, "modified_lagrangian": d.modified_lagrangian,
         "inverse_modified_lagrangian": d.inverse_modified_lagrangian}[kind](order)
    coeffs = {k: s[k] for k in range(order + 1)}
    if derivation is None:
        forest, polys = compact(d.forest, [coeffs[k] for k in range(order + 1)])
        return FreeRaw(kind, forest, order, dict(enumerate(polys)), d.symmetric)
    return FreeRaw(kind, d.forest, order, coeffs, d.symmetric)
