r"""Jet space of a generic Lagrangian: variables, Taylor expansion and total derivatives.

A *generic* Lagrangian :math:`L(q, v)`, :math:`q, v \in \mathbb{R}^n`, is represented through
its partial derivatives at the base point :math:`(q(t), \dot q(t))`:

* ``L(m)`` -- the symbol :math:`\partial^m L`, ``m`` a sorted tuple of *slots* (slot ``i < n`` is
  :math:`q_i`, slot ``n + i`` is :math:`v_i`), so ``L((0, n))`` is :math:`L_{q_1 v_1}`;
* ``jet(i, k)`` -- :math:`q_i^{(k)}(t)`; ``jet(i, 1)`` doubles as the velocity variable
  :math:`v_i`. Generic expressions never contain :math:`q_i` itself: position dependence is
  carried by the derivative symbols;
* ``idet`` -- :math:`\delta = 1/\det M`, :math:`M = \partial^2 L/\partial v^2`, the only
  non-polynomial object the derivations need: :math:`M^{-1} = \operatorname{adj}(M)\,\delta`, and
  :math:`\partial\delta = -\delta^2\,\partial \det M`. The relation :math:`\det M \cdot \delta = 1`
  is applied as a normal-form rule (see :mod:`bea.hseries`), so results are canonical;
* ``eps(i)`` -- nilpotent variations (see :mod:`bea.hseries`).

:class:`Jets` allocates these variables lazily and implements the three operations that every
derivation is built from: the Taylor expansion of ``L`` at shifted arguments (so that a scheme's
discrete Lagrangian, written once with ordinary arithmetic, can be evaluated on series), the
total time derivative :math:`D`, and partial derivatives.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from .errors import BeaValueError, InconsistentSchemeError, InternalError
from .hseries import EXACT, HSeries, Poly, Q, Rules, add_all, diff, mul, padd, pdiff, pmul

Slots = Tuple[int, ...]


class Jets:
    """Variable registry for one derivation in dimension ``n`` (no global state)."""

    def __init__(self, n: int, radical=None):
        r"""``radical = (c, d)`` adjoins :math:`\theta = c^{1/d}` (a ``Fraction`` and an int, as in
        :attr:`bea.radicals.RadicalNumber.field`): a constant variable reduced by :math:`\theta^d = c`, so that
        schemes with constants in :math:`\mathbb{Q}(\theta)` are derived exactly."""
        if not isinstance(n, int) or n < 1:
            raise BeaValueError(f"dimension must be a positive integer, got {n!r}")
        self.n = n
        self.kind: List[tuple] = []
        self._index: Dict[tuple, int] = {}
        for i in range(n):  # nilpotent variables must have the smallest indices
            self._new(("eps", i))
        self.idet = self._new(("idet",))
        self.radical = None
        self._mass_algebra()
        if radical is not None:  # after the mass symbols, so that the variable table starts as without it
            self.radical = self._new(("radical", radical[0].numerator, radical[0].denominator, radical[1]))
            rad = (self.radical, radical[1], Q(radical[0].numerator, radical[0].denominator))
            self.rules = Rules(nil=n, reduce=(self.rules.lead, self.rules.replacement), radical=rad)

    # ----------------------------------------------------------------- variables
    def _new(self, key: tuple) -> int:
        idx = len(self.kind)
        self.kind.append(key)
        self._index[key] = idx
        return idx

    def _get(self, key: tuple) -> int:
        idx = self._index.get(key)
        return self._new(key) if idx is None else idx

    @property
    def nil(self) -> Rules:
        return self.rules

    def eps(self, i: int) -> int:
        return self._index[("eps", i)]

    def _mass_algebra(self) -> None:
        """det(M) and adj(M) as polynomials in the mass symbols, and the normal-form rule."""
        import sympy

        n = self.n
        syms = [[sympy.Symbol(f"m{min(i, j)}_{max(i, j)}") for j in range(n)] for i in range(n)]
        var = {syms[i][j]: self.L(self.mass_slots(i, j)) for i in range(n) for j in range(n)}
        M = sympy.Matrix(syms)

        def to_poly(expr) -> Poly:
            P = sympy.Poly(sympy.expand(expr), *var.keys()) if expr != 0 else None
            out: Poly = {}
            if P is None:
                return out
            gens = list(var.values())
            for exps, c in P.terms():
                mono = tuple(sorted(g for g, e in zip(gens, exps) for _ in range(e)))
                out[mono] = out.get(mono, 0) + Q(int(c.p), int(c.q))
            return out

        det = to_poly(M.det(method="berkowitz")) if n > 1 else {(var[syms[0][0]],): Q(1)}
        adj = M.adjugate() if n > 1 else sympy.Matrix([[1]])
        self.det_poly = det
        diag = tuple(sorted(var[syms[i][i]] for i in range(n)))
        lead = tuple(sorted(diag + (self.idet,)))
        # det * idet = 1  <=>  diag * idet -> 1 - (det - diag) * idet
        replacement: Poly = {(): Q(1)}
        for m, c in det.items():
            if m != diag:
                mm = tuple(sorted(m + (self.idet,)))
                replacement[mm] = replacement.get(mm, 0) - c
        self.rules = Rules(nil=n, reduce=(lead, replacement))
        self.adj_poly = [[to_poly(adj[i, j]) for j in range(n)] for i in range(n)]

    def W_poly(self, i: int, j: int) -> Poly:
        r""":math:`(M^{-1})_{ij} = \operatorname{adj}(M)_{ij}\,\delta` as a polynomial."""
        return pmul(self.adj_poly[i][j], {(self.idet,): Q(1)}, self.rules)

    def jet(self, i: int, k: int) -> int:
        return self._get(("jet", i, k))

    def vel(self, i: int) -> int:
        return self.jet(i, 1)

    def L(self, m: Slots) -> int:
        return self._get(("L", tuple(sorted(m))))

    def mass_slots(self, k: int, l: int) -> Slots:
        return tuple(sorted((self.n + k, self.n + l)))

    # ----------------------------------------------------------------- helpers
    def series(self, var: int) -> HSeries:
        return HSeries.var(var, EXACT, self.nil)

    def zero(self, order: int = EXACT) -> HSeries:
        return HSeries([], order, self.nil)

    def shifted_position(self, i: int, c, order: int) -> HSeries:
        r""":math:`q_i(t + c h) = \sum_{k \le \text{order}} q_i^{(k)} (c h)^k / k!`, known to ``h^order``."""
        coeffs: List[Poly] = []
        fact = Q(1)
        cq = Q(c)
        for k in range(order + 1):
            if k:
                fact *= k
            coeffs.append({(self.jet(i, k),): cq**k / fact})
        return HSeries(coeffs, order, self.nil)

    # ----------------------------------------------------------------- Taylor expansion
    def lagrangian_at(self, x: Sequence[HSeries], y: Sequence[HSeries], values=None) -> HSeries:
        r"""Series of :math:`L(x, y)` for argument series :math:`x, y` near :math:`(q, \dot q)`.

        :math:`L(q + \delta q, \dot q + \delta v) = \sum_m \partial^m L \, \delta^m / m!` over
        multi-indices ``m``; the sum terminates because every :math:`\delta` is :math:`O(h)` up to
        a single nilpotent term. ``values(m)``, if given, supplies :math:`\partial^m L` as a series
        (a concrete polynomial Lagrangian) instead of the generic symbol; the sum then ends at the degree of
        ``L`` and is evaluated in nested form (:meth:`_taylor_nested`).
        """
        n = self.n
        args = [a if isinstance(a, HSeries) else HSeries.const(a, EXACT, self.nil) for a in (*x, *y)]
        if len(args) != 2 * n:
            raise InconsistentSchemeError(f"the Lagrangian takes q and v of length {n}; got {len(x)} and {len(y)}")
        deltas: List[HSeries] = []
        for s, a in enumerate(args):
            i, k = (s, 0) if s < n else (s - n, 1)
            want = {(self.jet(i, k),): Q(1)}
            base = {m: c for m, c in a[0].items() if not (m and m[0] < self.n)}
            if base != want:
                name = f"q_{i + 1}" if k == 0 else f"v_{i + 1}"
                raise InconsistentSchemeError(
                    f"inconsistent scheme: the {name} argument of L does not tend to "
                    f"{'q(t)' if k == 0 else 'the velocity'} as h -> 0 (discrete Lagrangians must "
                    "approximate the action over one step)"
                )
            deltas.append(a - HSeries([want], EXACT, self.nil))
        order = min(a.order for a in args)
        if values is not None:
            return self._taylor_nested(deltas, values, order)

        def deriv(m: Slots) -> HSeries:
            return self.series(self.L(m))

        terms: List[HSeries] = [deriv(()).truncate_soft(order)]

        def rec(start: int, prefix: HSeries, m: Slots, run: int, coef) -> None:
            for s in range(start, 2 * n):
                if deltas[s].is_zero():
                    continue
                r = run + 1 if (m and m[-1] == s) else 1
                prod = mul(prefix, deltas[s], order)
                if prod.is_zero():
                    continue
                c = coef / r
                mm = m + (s,)
                terms.append(mul(prod, deriv(mm), order) * c)
                rec(s, prod, mm, r, c)

        rec(0, HSeries.const(1, EXACT, self.nil), (), 0, Q(1))
        return add_all(terms, order, self.nil)

    def _taylor_nested(self, deltas: List[HSeries], values, order: int) -> HSeries:
        r"""The Taylor sum of a concrete polynomial ``L`` in nested (Horner) form over sorted multi-indices:

        .. math::  E(m) = \partial^m L + \sum_{s \ge m_{last}} \frac{\delta_s}{r(m, s)}\, E(m + (s)),
                   \qquad L(q + \delta q, v + \delta v) = E(()),

        ``r(m, s)`` the length of the run of ``s`` at the end of ``m + (s)`` (so the product of the ``1/r`` is
        :math:`1/m!`). A vanishing :math:`\partial^m L` makes every extension vanish, so :math:`E(m) = 0` there
        and the recursion stops at the degree of ``L``. At the deepest level :math:`E` is a constant, so the
        sums over ``s`` there are scalar multiples of the deltas, not series products: a quadratic ``L`` costs
        ``2n`` products of series instead of the ``n(2n + 1)`` pairwise products of the deltas."""
        n2 = 2 * self.n

        def E(m: Slots, run: int) -> HSeries:
            out = values(m).truncate_soft(order)
            for s in range(m[-1] if m else 0, n2):
                if deltas[s].is_zero():
                    continue
                r = run + 1 if (m and m[-1] == s) else 1
                mm = m + (s,)
                if values(mm).is_zero():
                    continue
                inner = E(mm, r)
                out = out + mul(deltas[s], inner, order) * (Q(1) / r)
            return out

        return E((), 0)

    # ----------------------------------------------------------------- derivatives
    def _dsplit(self, var: int, jet_space: bool, cache: Dict[int, tuple]) -> tuple:
        r"""Total derivative of one variable split as ``(D0, [C_1..C_n])`` with
        :math:`Dx = D_0 + \sum_i C_i \ddot q_i`; ``D0`` and ``C_i`` are small polynomials.

        ``jet_space``: derivative on jet space (:math:`\ddot q` a free variable, higher jets allowed);
        otherwise along :math:`\ddot q = F` for expressions in :math:`(q, v, \partial^m L, \delta)`.
        """
        if var in cache:
            return cache[var]
        n = self.n
        key = self.kind[var]
        D0: Poly = {}
        C: List[Poly] = [{} for _ in range(n)]
        if key[0] == "jet":
            _, i, k = key
            if k == 0:
                D0 = {(self.vel(i),): Q(1)}
            elif k == 1:
                C[i] = {(): Q(1)}
            elif jet_space:
                D0 = {(self.jet(i, k + 1),): Q(1)}
            else:
                raise InternalError("internal: higher jets must be eliminated before differentiating along F")
        elif key[0] == "L":
            m = key[1]
            for i in range(n):
                D0 = padd(D0, pmul({(self.L(m + (i,)),): Q(1)}, {(self.vel(i),): Q(1)}, self.rules))
                C[i] = {(self.L(m + (n + i,)),): Q(1)}
        elif key[0] == "idet":  # D(1/det) = -idet^2 D(det)
            sq = {(self.idet, self.idet): Q(-1)}
            for x in sorted({y for m in self.det_poly for y in m}):
                w = pmul(sq, pdiff(self.det_poly, x), self.rules)
                x0, xc = self._dsplit(x, jet_space, cache)
                D0 = padd(D0, pmul(w, x0, self.rules))
                C = [padd(C[i], pmul(w, xc[i], self.rules)) for i in range(n)]
        elif key[0] not in ("eps", "param", "radical"):
            raise InternalError(f"internal: unknown variable {key}")
        cache[var] = (D0, C)
        return cache[var]

    def _idet_chain(self, ddet: HSeries) -> HSeries:
        r""":math:`-\delta^2\, d(\det M)`."""
        sq = HSeries([{(self.idet, self.idet): Q(-1)}], EXACT, self.nil)
        return mul(sq, ddet)

    def total_derivative(self, p: HSeries, acc: Optional[Sequence[HSeries]] = None, order: Optional[int] = None) -> HSeries:
        r"""Total time derivative :math:`D p = \sum_x (\partial p/\partial x)\, D x`.

        With ``acc=None`` this is the derivative on jet space; with ``acc = F`` it is the
        derivative along solutions of :math:`\ddot q = F`. Writing :math:`Dx = D_0x + \sum_i
        C_i(x) \ddot q_i`, the coefficients of each :math:`\ddot q_i` are collected first, so the
        (large) series ``F_i`` is multiplied once per component rather than once per variable.
        """
        order = p.order if order is None else min(order, p.order)
        n = self.n
        cache: Dict[int, tuple] = {}
        top = min(order, len(p.c) - 1)  # D never raises the power of h
        plain: List[Poly] = [{} for _ in range(top + 1)]
        coef: List[List[Poly]] = [[{} for _ in range(top + 1)] for _ in range(n)]
        for var in sorted(p.variables()):
            dp = diff(p, var)
            if dp.is_zero():
                continue
            D0, C = self._dsplit(var, acc is None, cache)
            for k in range(min(len(dp.c), top + 1)):
                pk = dp.c[k]
                if not pk:
                    continue
                if D0:
                    pmul(pk, D0, self.rules, plain[k])
                for i in range(n):
                    if C[i]:
                        pmul(pk, C[i], self.rules, coef[i][k])
        clean = lambda ps: [{m: c for m, c in q.items() if c} for q in ps]  # noqa: E731
        out = HSeries(clean(plain), order, self.nil)
        for i in range(n):
            ci = HSeries(clean(coef[i]), order, self.nil)
            if ci.is_zero():
                continue
            a_i = self.series(self.jet(i, 2)) if acc is None else acc[i]
            out = out + mul(ci, a_i, order)
        return out

    def partial(self, p: HSeries, slot: int) -> HSeries:
        r"""Partial derivative of an expression in :math:`(v, \partial^m L, W)` with respect to
        slot ``slot`` (:math:`q_i` for ``slot = i``, :math:`v_i` for ``slot = n + i``)."""
        n = self.n
        parts = []
        for var in sorted(p.variables()):
            key = self.kind[var]
            if key[0] == "L":
                dv = self.series(self.L(key[1] + (slot,)))
            elif key[0] == "jet":
                _, i, k = key
                hit = (k == 0 and slot == i) or (k == 1 and slot == n + i)
                if k > 1:
                    raise InternalError("internal: partial derivative of an expression with higher jets")
                if not hit:
                    continue
                dv = HSeries.const(1, EXACT, self.nil)
            elif key[0] == "idet":
                dparts = []
                for x in sorted({y for m in self.det_poly for y in m}):
                    ddet = HSeries([pdiff(self.det_poly, x)], EXACT, self.nil)
                    dparts.append(mul(ddet, self.series(self.L(self.kind[x][1] + (slot,)))))
                dv = self._idet_chain(add_all(dparts, EXACT, self.nil))
            else:
                continue
            parts.append(mul(diff(p, var), dv))
        return add_all(parts, p.order, self.nil)

    def eps_coefficient(self, s: HSeries, i: int) -> HSeries:
        """Coefficient of the nilpotent variable ``eps(i)`` in ``s``."""
        e = self.eps(i)
        out = []
        for p in s.c:
            q: Poly = {}
            for m, c in p.items():
                if m and m[0] == e:
                    q[m[1:]] = c
            out.append(q)
        return HSeries(out, s.order, self.nil)

    def apply_W(self, r: Sequence[Poly], W=None) -> List[Poly]:
        """:math:`W r` for a vector of polynomials (``W``: explicit matrix of polynomials, else symbols)."""
        out = []
        for i in range(self.n):
            acc: Poly = {}
            for j in range(self.n):
                w = self.W_poly(i, j) if W is None else W[i][j]
                acc = padd(acc, pmul(w, r[j], self.nil))
            out.append(acc)
        return out

    def param(self, k: int) -> int:
        """A constant parameter of a concrete Lagrangian (total derivative zero)."""
        return self._get(("param", k))


__all__ = ["Jets"]
