r"""A ModLaNet's Taylor polynomial in C, to any degree :math:`K`: the model side of a :mod:`bea` series on the
compiled path (:mod:`integrators.series_c`; e.g. :math:`\mathrm{inv}_2(M)` of a position-trained model, whose
Newton step needs :math:`M`'s derivatives up to order 4).

The same computation as the model and as its second-order C form (:mod:`learners.modlanet.lowering`, whose
:func:`~learners.modlanet.lowering.plan` gives the structure and the run-time parameter array), with every
quantity a truncated Taylor polynomial in the :math:`D = 2n` variables :math:`x = (q, v)`
(:mod:`integrators.codegen.runtime`, :mod:`learners.modlanet._taylor_c`):

* each element's offset :math:`T_i(q_i)` and velocity :math:`J_{T_i}(q_i)\dot q_i` (identity: the seeded
  variables; rod: :math:`l(\sin, -\cos)\theta` and :math:`l\omega(\cos, \sin)\theta`; learned transform: its
  network on the (periodic) features with the tangent propagated as :meth:`MLP.tangent` does), summed
  along the tree;
* :math:`L = \sum_i \tfrac12 m_i|\dot x_i|^2 - c_1\sum_i m_iU_1(x_i) - c_2\sum_{i<j} m_im_jU_2(x_i, x_j)`
  with the cells on the polynomials of their inputs (pair networks symmetrised, :math:`U_2 = -G(|x_i - x_j|^2)^{-1/2}`).

Weights are read at run time (:class:`~integrators.series_c.CTaylor` ``refresh``), so training between
rollouts never leaves stale numbers; what has no C form raises :class:`~integrators.compiled.NotLowerable`
(the series then runs eagerly)."""

from __future__ import annotations

from math import factorial
from typing import List

from bea.errors import BeaRuntimeError
from integrators.codegen.runtime import header, monomials, size
from integrators.compiled import NotLowerable
from integrators.series_c import CTaylor

from ._taylor_c import SOURCE as HELPERS
from ._lowering_source import emit_terms
from .lowering import pack, plan

__all__ = ["c_taylor", "STACK_LIMIT"]

#: largest stack the generated function may use (bytes); bigger models or degrees are not lowered
STACK_LIMIT = 1 << 21


def _activation_tables(K: int) -> str:
    """``ACT_P``: the polynomials :math:`P_k` (in :math:`y = \\tanh z`, resp. the sigmoid :math:`p`) of the
    activations' derivatives :math:`k \\le K + 1` (:mod:`learners.modlanet._taylor_c`), exact integers;
    ``FACT``: the factorials."""
    W = K + 3
    rows = []
    for m, first in (((1, 0, -1), 0), ((0, 1, -1), 1)):  # y' = 1 - y^2 (tanh), p' = p - p^2 (sigmoid)
        P = [0, 1] + [0] * (W - 2)
        for k in range(K + 2):
            if k < first:
                rows.append([0] * W)
                continue
            rows.append(list(P))
            dP = [i * P[i] for i in range(1, W)] + [0]
            P = [sum(dP[i - e] * m[e] for e in range(3) if 0 <= i - e < W) for i in range(W)]
    flat = ", ".join(f"{float(c)!r}" for r in rows for c in r)
    fact = ", ".join(f"{float(factorial(k))!r}" for k in range(K + 2))
    return (f"#define ACT_W {W}\nstatic const double ACT_P[] = {{{flat}}};\n"
            f"static const double FACT[] = {{{fact}}};\n")


class _Gen:
    """Generates ``lag_taylor`` for one structure: polynomials in the ``n`` positions (``TP_*`` of
    ``header(n, K)``), assembled into the polynomial in ``(q, v)`` at the end."""

    def __init__(self, structure, K: int):
        (self.n, self.d, self.parents, self.order, self.local_dims, self.offsets, self.trans, self.pot, self.pair,
         self.pairs, self.om, self.oc1, self.oc2) = structure
        self.K = K
        self.S = size(self.n, K)
        self.head: List[str] = []
        self.body: List[str] = []
        self.flops = 0
        mlps = [t[3] for t in self.trans if t[0] == "mlp"]
        # work arrays hold a network's widest layer, 2k features, d offsets or the k x d derivatives jt
        self.wt = max([max(m[1]) for m in mlps] + [2 * max(self.local_dims), self.d, max(self.local_dims) * self.d])
        cells = [c[1] for c in (self.pot, self.pair) if c is not None and c[0] == "mlp"]
        self.wc = max([max(m[1]) for m in cells] + [2 * self.d])

    def array(self, name: str, values) -> str:
        self.head.append(f"static const int {name}[] = {{{', '.join(str(int(v)) for v in values)}}};")
        return name

    def mlp_flops(self, mlp) -> int:
        dims = mlp[1]
        # linear layers on S coefficients, and about S^2/2 per activation (the powers of delta)
        return sum(a * b for a, b in zip(dims[:-1], dims[1:])) * self.S + sum(dims[1:-1]) * self.S * self.S // 2

    def jx(self, i: int, c: int, a: int) -> str:
        """The polynomial d x_{i,c} / d q_a."""
        return f"JX + {(i * self.d + c) * self.n + a} * TP_S"

    def element(self, i: int):
        """Offset ``lo`` (d polynomials) and its derivatives ``jt`` in the element's k coordinates (k x d), then
        the global position and Jacobian (the parent's plus the element's own columns)."""
        k, oq, n, d, t, b = self.local_dims[i], self.offsets[i], self.n, self.d, self.trans[i], self.body
        b.append(f"    /* element {i}: {t[0]} */")
        if t[0] == "id":
            for c in range(k):
                b.append(f"    tp_seed(x[{oq + c}], {oq + c}, lo + {c} * TP_S);")
                for e in range(d):
                    b.append(f"    for (int k = 0; k < TP_S; k++) jt[{c * d + e} * TP_S + k] = 0.0;")
                b.append(f"    jt[{c * d + c} * TP_S] = 1.0;")
        elif t[0] == "rod":
            b.append(f"    tp_rod(x[{oq}], {oq}, P[{t[1]}], lo, jt, tmp, pw);")
        else:
            self.mlp_transform(i, k, t)
        p = self.parents[i]
        for c in range(d):
            dst = f"X + {i * d + c} * TP_S"
            b.append(f"    memcpy({dst}, lo + {c} * TP_S, sizeof(double) * TP_S);")
            if p >= 0:
                b.append(f"    tp_axpy(1.0, X + {p * d + c} * TP_S, {dst});")
            for a in range(n):
                own = oq <= a < oq + k
                if p >= 0:
                    b.append(f"    memcpy({self.jx(i, c, a)}, {self.jx(p, c, a)}, sizeof(double) * TP_S);")
                else:
                    b.append(f"    for (int k = 0; k < TP_S; k++) ({self.jx(i, c, a)})[k] = 0.0;")
                if own:
                    b.append(f"    tp_axpy(1.0, jt + {(a - oq) * d + c} * TP_S, {self.jx(i, c, a)});")

    def mlp_transform(self, i: int, k: int, t):
        _, _, periodic, (off, dims, act, _) = t
        oq, d, b = self.offsets[i], self.d, self.body
        name = self.array(f"DT{i}", dims)
        nf = 2 * k if periodic else k
        self.flops += (k + 1) * self.mlp_flops(t[3])
        for c in range(k):
            if periodic:
                b.append(f"    tp_angle_features(x[{oq + c}], {oq + c}, {c}, {k}, lz, ldz, tmp, pw);")
            else:
                b.append(f"    tp_seed(x[{oq + c}], {oq + c}, lz + {c} * TP_S);")
        for c in range(k):  # the derivative in the element's coordinate c: the tangent with the features' derivative
            b.append(f"    for (int k = 0; k < {nf} * TP_S; k++) ldz[k] = 0.0;")
            if periodic:
                b.append(f"    tp_angle_features(x[{oq + c}], {oq + c}, {c}, {k}, lz, ldz, tmp, pw);")
            else:
                b.append(f"    ldz[{c} * TP_S] = 1.0;")
            b.append(f"    tp_mlp_tangent({len(dims) - 1}, {name}, P + {off}, {act}, lz, ldz, lo, jt + {c * d} * TP_S, "
                     "w0, w1, w2, w3, ws, tmp, pw);")

    def kinetic(self, i: int):
        """G_ab += m_i sum_c (dx_ic/dq_a)(dx_ic/dq_b), a <= b: the kinetic energy is v^T G v / 2."""
        n, b = self.n, self.body
        for a in range(n):
            for a2 in range(a, n):
                ab = a * n + a2
                for c in range(self.d):
                    b.append(f"    tp_mul_add(P[{self.om + i}], {self.jx(i, c, a)}, {self.jx(i, c, a2)}, G + {ab} * TP_S, tmp);")

    def potential(self, i: int):
        d, c, b = self.d, self.pot, self.body
        if c[0] == "mlp":
            dims = self.array("DU1", c[1][1]) if i == 0 else "DU1"
            self.flops += self.mlp_flops(c[1])
            b.append(f"    tp_mlp({len(c[1][1]) - 1}, {dims}, P + {c[1][0]}, {c[1][2]}, X + {i * d} * TP_S, u, c0, c1, pw);")
        else:
            _, og, axis = c
            b.append(f"    for (int k = 0; k < TP_S; k++) u[k] = P[{og}] * X[{i * d + axis} * TP_S + k];")
        b.append(f"    tp_axpy(-P[{self.oc1}] * P[{self.om + i}], u, LQ);")

    def pair_term(self, i: int, j: int, first: bool):
        d, c, b = self.d, self.pair, self.body
        xi, xj = f"X + {i * d} * TP_S", f"X + {j * d} * TP_S"
        if c[0] == "mlp":
            dims = self.array("DU2", c[1][1]) if first else "DU2"
            self.flops += 2 * self.mlp_flops(c[1])
            for (s0, s1), dst in (((xi, xj), "ua"), ((xj, xi), "ub")):
                b.append(f"    memcpy(cin, {s0}, sizeof(double) * {d} * TP_S);")
                b.append(f"    memcpy(cin + {d} * TP_S, {s1}, sizeof(double) * {d} * TP_S);")
                b.append(f"    tp_mlp({len(c[1][1]) - 1}, {dims}, P + {c[1][0]}, {c[1][2]}, cin, {dst}, c0, c1, pw);")
            b.append("    for (int k = 0; k < TP_S; k++) u[k] = 0.5 * (ua[k] + ub[k]);")
        else:
            b.append(f"    tp_newton_pair({d}, P[{c[1]}], {xi}, {xj}, u, tmp, tmp2, pw);")
        b.append(f"    tp_axpy(-P[{self.oc2}] * P[{self.om + i}] * P[{self.om + j}], u, LQ);")

    def assemble(self):
        """T, the polynomial in :math:`(\\delta q, \\delta v)` about :math:`(q, v)`, from LQ (the potential part, in
        :math:`\\delta q`) and G: :math:`\\tfrac12 G_{ab}(v_a + \\delta v_a)(v_b + \\delta v_b)` gives its
        :math:`G_{ab}v_av_b/2` to the constant in :math:`\\delta v`, :math:`G_{ab}v_b` to :math:`\\delta v_a` and
        :math:`G_{ab}/2` to :math:`\\delta v_a\\delta v_b` (summed over ordered pairs), each truncated at degree K."""
        n, K = self.n, self.K
        qm = monomials(n, K)
        index = {m: k for k, m in enumerate(monomials(2 * n, K))}

        def with_v(m, *a):
            vv = [0] * n
            for c in a:
                vv[c] += 1
            return index[m + tuple(vv)] if sum(m) + len(a) <= K else -1

        self.array("EQ", [with_v(m) for m in qm])
        self.array("EV1", [with_v(m, a) for a in range(n) for m in qm])
        self.array("EV2", [with_v(m, a, b) for a in range(n) for b in range(n) for m in qm])
        self.body += [
            f"    for (int k = 0; k < {size(2 * n, K)}; k++) T[k] = 0.0;",
            "    for (int k = 0; k < TP_S; k++) T[EQ[k]] += LQ[k];",
            f"    for (int a = 0; a < {n}; a++)",
            f"        for (int b = a; b < {n}; b++) {{",
            f"            const double *g = G + (a * {n} + b) * TP_S, va = x[{n} + a], vb = x[{n} + b];",
            "            const double w = a == b ? 0.5 : 1.0;",
            "            const int *e1a = EV1 + a * TP_S, *e1b = EV1 + b * TP_S, *e2 = EV2 + (a * " + str(n) + " + b) * TP_S;",
            "            for (int k = 0; k < TP_S; k++) {",
            "                T[EQ[k]] += w * va * vb * g[k];",
            "                if (e1a[k] >= 0) T[e1a[k]] += vb * g[k];",
            "                if (a != b && e1b[k] >= 0) T[e1b[k]] += va * g[k];",
            "                if (e2[k] >= 0) T[e2[k]] += w * g[k];",
            "            }",
            "        }"]

    def stack_bytes(self) -> int:
        N, d, n = len(self.parents), self.d, self.n
        return 8 * self.S * (N * d * (1 + n) + n * n + 9 * self.wt + 2 * self.wc + 2 * d + 10 + self.K)


def generate(structure, K: int):
    """``(source, cost)``: the C of ``lag_taylor`` (degree ``K``) for a ModLaNet structure, and its cost
    relative to a closed formula (flops / 100), for chunk sizes."""
    g = _Gen(structure, K)
    if g.stack_bytes() > STACK_LIMIT:
        raise NotLowerable(f"the Taylor form of degree {K} would need {g.stack_bytes()} bytes of stack (limit "
                           f"{STACK_LIMIT}): too many coordinates or too wide networks")
    emit_terms(g)
    g.assemble()
    N, d, n, wt, wc = len(g.parents), g.d, g.n, g.wt, g.wc
    decl = [
        "static void lag_taylor(const double *x, const double *P, double *T) {",
        f"    double X[{N * d} * TP_S], JX[{N * d * n} * TP_S], G[{n * n} * TP_S], LQ[TP_S], pw[TP_K * TP_S];",
        f"    double lo[{wt} * TP_S], jt[{wt} * TP_S], lz[{wt} * TP_S], ldz[{wt} * TP_S], tmp[TP_S], tmp2[TP_S];",
        f"    double w0[{wt} * TP_S], w1[{wt} * TP_S], w2[{wt} * TP_S], w3[{wt} * TP_S], ws[{wt} * TP_S];",
        f"    double cin[{2 * d} * TP_S], c0[{wc} * TP_S], c1[{wc} * TP_S], u[TP_S], ua[TP_S], ub[TP_S];",
        "    (void)w0; (void)w1; (void)w2; (void)w3; (void)ws; (void)lz; (void)ldz; (void)cin; (void)c0; (void)c1;",
        "    (void)ua; (void)ub; (void)tmp2;",
        f"    for (int k = 0; k < {n * n} * TP_S; k++) G[k] = 0.0;",
        "    for (int k = 0; k < TP_S; k++) LQ[k] = 0.0;",
    ]
    source = "\n".join(g.head + decl + g.body + ["}"]) + "\n"
    return header(n, K) + _activation_tables(K) + HELPERS + source, max(1, g.flops // 100)


def c_taylor(model, order: int) -> CTaylor:
    """The :class:`~integrators.series_c.CTaylor` of a ModLaNet to degree ``order`` (module docstring), with a
    ``refresh`` that repacks the current weights; :class:`NotLowerable` if the model has no C form."""
    structure, parts = plan(model)
    source, cost = generate(structure, int(order))

    def refresh():
        now, current = plan(model)
        if now != structure:
            raise BeaRuntimeError("the ModLaNet's structure (elements, cells, layer sizes or activations) changed after it "
                               "was lowered to C; build a new VariationalIntegrator for the changed model")
        return pack(current)

    return CTaylor(n=model.n, order=int(order), source=source, params=pack(parts), cost=cost, refresh=refresh,
                   vectorise=True)
