r"""The derivations: modified equation, modified and inverse modified Lagrangian.

All three work for *any* scheme through its discrete Lagrangian alone (nothing is special-cased
per scheme), in any dimension ``n`` and to any order ``N`` (the highest power of ``h`` kept).
They operate on a generic Lagrangian (see :mod:`bea.jets`); concrete Lagrangians are handled by
substituting their derivatives into the generic result (:mod:`bea.concrete`).

Method (Vermeeren 2017; docs/theory/modified.md, docs/theory/inverse.md):

1. *Modified equation.* Vary the discrete action at :math:`q_j = q(t) + h\varepsilon`,
   :math:`S = L_\Delta(q(t-h), q_j) + L_\Delta(q_j, q(t+h))`; the coefficient of
   :math:`\varepsilon` is :math:`h \cdot \mathrm{DEL} = h^2 (\mathrm{EL} + O(h))`. With
   :math:`\ddot q = F = A + h A_1 + h^2 A_2 + \dots` each :math:`A_k` is
   :math:`M^{-1}` times the :math:`h^k` residual.
2. *Meshed Lagrangian.* :math:`\Lambda = L_\Delta(q(t-h/2), q(t+h/2))/h` and
   :math:`L_{mesh} = \frac{hD/2}{\sinh(hD/2)}\Lambda`.
3. *Modified Lagrangian.* Replace :math:`q^{(k)}, k \ge 2`, by :math:`D^{k-2}F` in
   :math:`L_{mesh}`, truncate at :math:`h^N`.
4. *Inverse.* :math:`L_{inv} \leftarrow L_{inv} - [\mathrm{mod}_k(L_{inv}) - L]_k`, for
   :math:`k = 1..N`, where :math:`\mathrm{mod}_k` is the generic formula of step 3 applied to the
   series :math:`L_{inv}` by substituting its derivatives.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

from .hseries import EXACT, HSeries, Poly, Q, SeriesVector, mul, pdiff, substitute
from .jets import Jets
from .errors import BeaValueError, InconsistentSchemeError, InternalError, UnsupportedSchemeError
from .schemes import Scheme

KINDS = ("modified_equation", "modified_lagrangian", "inverse_modified_lagrangian")


def check_kind(kind) -> None:
    """Raise :class:`BeaValueError` unless ``kind`` is one of :data:`KINDS`."""
    if kind not in KINDS:
        raise BeaValueError(f"unknown derivation kind {repr(kind)[:60]}; one of {', '.join(KINDS)}")


@dataclass
class Raw:
    """Result of a derivation in jet variables: per power of ``h`` a polynomial (or a vector of
    them for the modified equation), and the :class:`Jets` registry that names the variables."""

    kind: str
    jets: Jets
    order: int
    coeffs: Dict[int, object]  # k -> Poly, or list of Poly (modified equation)
    symmetric: bool = False
    meta: dict = field(default_factory=dict)


def _mesh_weights(order: int) -> List[Q]:
    r"""Coefficients :math:`c_k` of :math:`(x/2)/\sinh(x/2) = \sum_k c_k x^{2k}`, up to ``x^order``.

    :math:`c_k = (2 - 2^{2k}) B_{2k} / ((2k)!\, 4^k)` with the Bernoulli numbers :math:`B_{2k}`
    (from :math:`x/\sinh x = \sum_k (2 - 2^{2k}) B_{2k} x^{2k}/(2k)!`), computed exactly.
    """
    top = order // 2
    B = [Q(1)]  # Bernoulli numbers B_0..B_{2top} by the recurrence sum_j C(m+1, j) B_j = 0
    for m in range(1, 2 * top + 1):
        s = Q(0)
        binom = 1
        for j in range(m):
            s += binom * B[j]
            binom = binom * (m + 1 - j) // (j + 1)
        B.append(-s / (m + 1))
    out = []
    fact = 1
    for k in range(top + 1):
        if k:
            fact *= (2 * k - 1) * (2 * k)
        out.append((2 - Q(2) ** (2 * k)) * B[2 * k] / (fact * Q(4) ** k))
    return out


def evaluate_scheme(scheme: Scheme, L, a, b, h: HSeries) -> HSeries:
    """The scheme's discrete Lagrangian on series arguments, with a clear error if the scheme uses
    anything but ``+ - * /`` with numbers, ``h`` and calls of ``L`` (shared by both engines)."""
    try:
        out = scheme.discrete_lagrangian(L, a, b, h)
    except (TypeError, AttributeError) as err:
        raise UnsupportedSchemeError(
            f"scheme {scheme!r}: its discrete Lagrangian must use only + - * / with numbers, h "
            f"and calls of L, so that it runs on series as well as on tensors ({err})"
        ) from err
    if not isinstance(out, HSeries):
        raise UnsupportedSchemeError(f"scheme {scheme!r} returned {type(out).__name__}, not an expression in L")
    return out


def mesh_lambda(scheme: Scheme, Ld: HSeries, h: HSeries, order: int, lead) -> tuple:
    r""":math:`\Lambda = L_\Delta(q(t-h/2), q(t+h/2))/h` to ``h^order``, checked to tend to ``L``
    (``lead``), and whether its odd powers vanish (a symmetric scheme)."""
    if Ld.valuation() < 1:
        raise InconsistentSchemeError(f"inconsistent scheme {scheme!r}: L_Delta must vanish as h -> 0")
    lam = Ld / h
    if lam.order < order:
        raise InconsistentSchemeError(f"scheme {scheme!r} loses too many powers of h")
    lam = lam.truncate(order)
    if lam[0] != lead:
        raise InconsistentSchemeError(f"inconsistent scheme {scheme!r}: L_Delta(q(t-h/2), q(t+h/2))/h must tend to L(q, v)")
    return lam, all(not lam[k] for k in range(1, order + 1, 2))


class Derivation:
    """All derivations of one scheme in one dimension, sharing a variable registry and results."""

    def __init__(self, scheme: Scheme, n: int, jets: Optional[Jets] = None, concrete=None):
        self.scheme = scheme
        self.n = n
        self.jets = jets or Jets(n, radical=getattr(scheme, "radical_field", None))
        self.concrete = concrete  # a bea.concrete.PolynomialLagrangian, or None for the generic L
        self._F: Dict[int, List[HSeries]] = {}
        self._lmod: Dict[int, HSeries] = {}
        self._symmetric: Optional[bool] = scheme.symmetric

    # ------------------------------------------------------------------ helpers
    def _solve(self, r: List[Poly], k: int) -> List[HSeries]:
        r""":math:`h^k M^{-1} r` as series (:math:`M^{-1} = \operatorname{adj}(M)/\det M` for the generic Lagrangian)."""
        J = self.jets
        if self.concrete is None:
            return [HSeries([{} for _ in range(k)] + [p], EXACT, J.nil) for p in J.apply_W(r)]
        # the h^k equation is -M_0 A_k + (known) = 0: only the h-independent inverse mass enters
        return [HSeries([{} for _ in range(k)] + [p], EXACT, J.nil) for p in J.apply_W(r, self.concrete.W0)]

    def _h(self) -> HSeries:
        return HSeries.h_power(1, 1, EXACT, self.jets.nil)

    def _eval_scheme(self, a, b) -> HSeries:
        J = self.jets
        values = None if self.concrete is None else self.concrete.derivative

        def L(x, y):
            return J.lagrangian_at(list(x), list(y), values)

        stages = getattr(self.scheme, "series_discrete_lagrangian", None)
        if stages is not None:  # interior points fixed by stationarity (bea.stages): solved on the series
            return stages(L, a, b, self._h(), J, None if self.concrete is None else self.concrete.W0)
        return evaluate_scheme(self.scheme, L, a, b, self._h())

    def _positions(self, c, order: int, eps_scale: bool = False) -> SeriesVector:
        J = self.jets
        out = [J.shifted_position(i, c, order) for i in range(self.n)]
        if eps_scale:  # q_j + h eps
            out = [o + HSeries([{}, {(J.eps(i),): Q(1)}], EXACT, J.nil) for i, o in enumerate(out)]
        return SeriesVector(out)

    # ------------------------------------------------------------------ step 1
    def _del_residual(self, order: int) -> List[HSeries]:
        r"""EL-normalised DEL residual :math:`R(h) = \text{DEL}/h`, known to ``h^order``, in jets."""
        J = self.jets
        K = order + 2
        qm = self._positions(-1, K + 1)
        q0 = self._positions(0, K + 1, eps_scale=True)
        qp = self._positions(1, K + 1)
        S = self._eval_scheme(qm, q0) + self._eval_scheme(q0, qp)
        res = []
        for i in range(self.n):
            E = J.eps_coefficient(S, i)
            if E.order < K:
                raise InconsistentSchemeError(
                    f"scheme {self.scheme!r} loses too many powers of h (known to h^{E.order}, need h^{K})"
                )
            if E.valuation() < 2:
                raise InconsistentSchemeError(f"inconsistent scheme {self.scheme!r}: the discrete EL equation is not O(h) ")
            res.append(HSeries(E.c[2:], E.order - 2, J.nil).truncate(order))
        # consistency: R_0 = L_q - L_qv v - M qddot
        for i in range(self.n):
            for j in range(self.n):
                want = (
                    {(J.L(J.mass_slots(i, j)),): Q(-1)}
                    if self.concrete is None
                    else {m: -c for m, c in self.concrete.derivative(J.mass_slots(i, j))[0].items()}
                )
                got = pdiff(res[i][0], J.jet(j, 2))
                if got != want:
                    raise InconsistentSchemeError(
                        f"inconsistent scheme {self.scheme!r}: the leading order of its discrete "
                        "Euler-Lagrange equation is not the Euler-Lagrange equation of L"
                    )
        return res

    def modified_equation(self, order: int) -> List[HSeries]:
        r""":math:`F_h = A + hA_1 + \dots + h^N A_N` (a series per component, polynomial in
        :math:`v, \partial^m L, W`)."""
        if order in self._F:
            return self._F[order]
        J = self.jets
        R = self._del_residual(order)
        acc_jets = [J.jet(i, 2) for i in range(self.n)]
        # A_0: the q-ddot-free part of R_0, times W
        r0 = [{m: c for m, c in R[i][0].items() if not any(x in m for x in acc_jets)} for i in range(self.n)]
        F = self._solve(r0, 0)
        # R = b - M qddot + sum_{j>=1} h^j R_j. With b = M A_0, the h^k equation reads
        # -M A_k + [sum_{j>=1} h^j R_j(F_{<k})]_k = 0: R_0 is never substituted, so no M W
        # products (identically I, but not formally) enter the result.
        rest = [HSeries([{}] + R[i].c[1:], R[i].order, J.nil) for i in range(self.n)]
        for k in range(1, order + 1):
            if self.scheme.symmetric and k % 2:
                continue
            targets = [r.truncate(k) for r in rest]
            values = self._jet_values(F, k, targets)
            rk = []
            for i in range(self.n):
                s = substitute(targets[i], values, k)
                rk.append(s[k])
            if any(rk):
                F = [f + a for f, a in zip(F, self._solve(rk, k))]
        F = [f.truncate(order) for f in F]
        self._F[order] = F
        return F

    def _jet_values(self, F: List[HSeries], order: int, targets: List[HSeries]) -> Dict[int, HSeries]:
        r"""Values :math:`D^{k-2} F` of the jets :math:`q^{(k)}, k \ge 2`, that occur in ``targets``.

        A jet first occurring at :math:`h^d` is needed only to :math:`h^{order-d}`, and
        :math:`D` does not lower the order, so each further derivative is computed at the
        (non-increasing) precision that its own jet needs. This keeps high jets cheap.
        """
        J = self.jets
        need: Dict[int, int] = {}  # jet order k -> precision
        for t in targets:
            for d, p in enumerate(t.c):
                if d > order:
                    break
                for m in p:
                    for x in m:
                        key = J.kind[x]
                        if key[0] == "jet" and key[2] >= 2:
                            need[key[2]] = max(need.get(key[2], -1), order - d)
        if not need:
            return {}
        top = max(need)
        prec = {}
        running = -1
        for k in range(top, 1, -1):  # D^{k-2}F must also serve every higher jet
            running = max(running, need.get(k, -1))
            prec[k] = running
        values: Dict[int, HSeries] = {}
        cur = [f.truncate_soft(prec[2]) for f in F]
        for k in range(2, top + 1):
            cur = [c.truncate_soft(prec[k]) for c in cur]
            if k in need:
                for i in range(self.n):
                    values[J.jet(i, k)] = cur[i]
            if k < top:
                cur = [J.total_derivative(c, acc=F, order=prec[k + 1]) for c in cur]
        return values

    # ------------------------------------------------------------------ steps 2-3
    def meshed_lagrangian(self, order: int) -> HSeries:
        r""":math:`L_{mesh} = \frac{hD/2}{\sinh(hD/2)} \Lambda` on jet space, to ``h^order``."""
        J = self.jets
        a = self._positions(-Q(1, 2), order + 2)
        b = self._positions(Q(1, 2), order + 2)
        lead = {(J.L(()),): Q(1)} if self.concrete is None else self.concrete.derivative(())[0]
        lam, odd_zero = mesh_lambda(self.scheme, self._eval_scheme(a, b), self._h(), order, lead)
        if self._symmetric is None:
            self._symmetric = odd_zero
        elif self._symmetric and not odd_zero:
            raise InconsistentSchemeError(f"scheme {self.scheme!r} is declared symmetric but its expansion has odd powers of h")
        weights = _mesh_weights(order)
        out = lam
        d = lam
        for k in range(1, order // 2 + 1):
            d = J.total_derivative(J.total_derivative(d, order=order - 2 * k), order=order - 2 * k)
            term = mul(HSeries.h_power(2 * k, weights[k], EXACT, J.nil), d, order)
            out = out + term
        return out.truncate(order)

    @property
    def symmetric(self) -> bool:
        if self._symmetric is None:
            self.meshed_lagrangian(3)
        return bool(self._symmetric)

    def modified_lagrangian(self, order: int) -> HSeries:
        if order in self._lmod:
            return self._lmod[order]
        mesh = self.meshed_lagrangian(order)
        F = self.modified_equation(max(order - 1, 0))
        values = self._jet_values(F, order, [mesh])
        out = substitute(mesh, values, order)
        if out.order < order:
            raise InternalError(f"internal: modified Lagrangian known only to h^{out.order}")
        self._lmod[order] = out
        return out

    # ------------------------------------------------------------------ step 4
    def apply_modified(self, X: HSeries, order: int) -> HSeries:
        r""":math:`\mathrm{mod}_N(X)` for a Lagrangian given as a series ``X`` in the generic
        variables (e.g. a candidate inverse modified Lagrangian), to ``h^order``.

        Every derivative symbol :math:`\partial^m L` of the generic formula is replaced by
        :math:`\partial^m X`, and :math:`1/\det M` by :math:`1/\det \partial_{vv} X` as a series.
        A symbol first occurring at :math:`h^d` is needed only to :math:`h^{order-d}`.
        """
        J = self.jets
        P = self.modified_lagrangian(order)
        first: Dict[int, int] = {}
        for deg, p in enumerate(P.c):
            for m in p:
                for x in m:
                    first.setdefault(x, deg)
        prec: Dict[tuple, int] = {}
        for x, deg in first.items():
            if J.kind[x][0] == "L":
                m = J.kind[x][1]
                for r in range(len(m) + 1):  # a parent derivative serves all its children
                    prec[m[:r]] = max(prec.get(m[:r], -1), order - deg)
        derivs: Dict[tuple, HSeries] = {(): X.truncate_soft(prec.get((), order))}
        for m in sorted(prec, key=len):
            if m:
                derivs[m] = self.jets.partial(derivs[m[:-1]], m[-1]).truncate_soft(prec[m])
        values: Dict[int, HSeries] = {J.L(m): derivs[m] for m in prec if J.L(m) in first}
        if J.idet in first:
            # 1/det(M_X) = idet * sum_r (-idet * ddet)^r with ddet = det(M_X) - det(M) = O(h)
            p_idet = order - first[J.idet]
            mass_vars = {x for m in J.det_poly for x in m}
            mvals = {x: self._partial_chain(X, J.kind[x][1], p_idet) for x in mass_vars}
            det = HSeries([J.det_poly], EXACT, J.nil)
            ddet = (substitute(det, mvals, p_idet) - det).truncate_soft(p_idet)
            idet = HSeries.var(J.idet, EXACT, J.nil)
            step = mul(-idet, ddet, p_idet)
            total, term = idet, idet
            v = ddet.valuation()
            r = 1
            while v < EXACT and r * v <= p_idet:
                term = mul(term, step, p_idet)
                total = total + term
                r += 1
            values[J.idet] = total.truncate_soft(p_idet)
        return substitute(P, values, order)

    def _partial_chain(self, X: HSeries, slots, order: int) -> HSeries:
        out = X
        for s in slots:
            out = self.jets.partial(out, s)
        return out.truncate_soft(order)

    def inverse_modified_lagrangian(self, order: int) -> HSeries:
        if self.concrete is not None:
            return self._inverse_concrete(order)
        J = self.jets
        L = HSeries.var(J.L(()), EXACT, J.nil)
        X = L
        symmetric = self.symmetric
        for k in range(1, order + 1):
            if symmetric and k % 2:
                continue
            Y = self.apply_modified(X, k)
            if Y[0] != L[0] or any(Y[j] for j in range(1, k)):
                raise InternalError(f"internal: inverse iteration inconsistent below h^{k}")
            if Y[k]:
                X = X - HSeries([{} for _ in range(k)] + [Y[k]], EXACT, J.nil)
        return X.truncate(order) if X.order >= order else X


    def _inverse_concrete(self, order: int) -> HSeries:
        """Inverse iteration for a concrete polynomial Lagrangian: each step runs the whole
        derivation on the current candidate :math:`L_{inv}` (a polynomial in q, v and h)."""
        J = self.jets
        X = self.concrete.series
        symmetric = self.symmetric
        for k in range(1, order + 1):
            if symmetric and k % 2:
                continue
            sub = Derivation(self.scheme, self.n, jets=J, concrete=self.concrete.with_series(X, k))
            sub._symmetric = symmetric
            Y = sub.modified_lagrangian(k)
            if Y[0] != X[0] or any(Y[j] for j in range(1, k)):
                raise InternalError(f"internal: inverse iteration inconsistent below h^{k}")
            if Y[k]:
                X = X - HSeries([{} for _ in range(k)] + [Y[k]], EXACT, J.nil)
        return X.truncate_soft(order) if X.order >= order else X


def derive_raw(scheme: Scheme, kind: str, order: int, n: int, derivation: Optional[Derivation] = None) -> Raw:
    """Run one derivation and package the coefficients by power of ``h``."""
    d = derivation or Derivation(scheme, n)
    if kind == "modified_equation":
        F = d.modified_equation(order)
        coeffs = {k: [f[k] for f in F] for k in range(order + 1)}
    elif kind == "modified_lagrangian":
        s = d.modified_lagrangian(order)
        coeffs = {k: s[k] for k in range(order + 1)}
    elif kind == "inverse_modified_lagrangian":
        s = d.inverse_modified_lagrangian(order)
        coeffs = {k: s[k] for k in range(order + 1)}
    else:
        raise BeaValueError(f"unknown derivation {kind!r}; one of {KINDS}")
    return Raw(kind=kind, jets=d.jets, order=order, coeffs=coeffs, symmetric=d.symmetric)
