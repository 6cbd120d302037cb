"""Stage schemes (issue 26): Galerkin on Lobatto points, the triple jump, user nodes and weights.

* Observed orders 2s of the torch integrators on two systems with n = 2 (Henon-Heiles; a double pendulum
  with g = 1/4, whose position-dependent mass exercises the interior Newton solve), least-squares slope over
  three step sizes, tolerance 0.3 as in tests/test_integrators_orders_free.py. Measured: galerkin2 4.02 / 3.99,
  galerkin3 6.13 / 5.98 (h = 1/2, 2/5, 1/3), triple_jump 3.94 / 3.98 (HH / pendulum).
* Closed form: for L = |v|^2/2 - q^T K q/2 each normal mode of frequency w is a harmonic oscillator whose
  discrete flow has cos(W h) = -D11 L_d / D12 L_d, a rational function of x = w h derived here in SymPy from
  the scheme's stage action (interior points solved exactly). With (W h)^2 = sum_j a_j x^(2j) the modified
  equation is q'' = -sum_j a_j h^(2j-2) K^j q: every coefficient of the derived series must match (the
  numbers are exact, rational or in Q(sqrt 5) / Q(2^(1/3)); we require 1e-12), with n = 3 in the default suite.
* The interior points expanded in h (bea.stage_series) agree with Newton's (bea.stage_torch) to O(h^(K+1)).
"""

import math

import pytest
import sympy
import torch

import bea
from bea import stages as S
from bea.errors import BeaValueError, UnsupportedSchemeError

from integrators import convergence as C
from integrators import reference_flow
from integrators import systems

Q0 = torch.tensor([[0.2, -0.1]], dtype=torch.float64)
V0 = torch.tensor([[0.1, 0.15]], dtype=torch.float64)
SYSTEMS = {"henon_heiles": systems.henon_heiles(), "double_pendulum": systems.n_pendulum(2, g=0.25)}
STEPS = {"galerkin2": ([0.25, 0.2, 0.125], 4), "triple_jump": ([0.2, 0.125, 0.1], 4), "galerkin3": ([0.5, 0.4, 1 / 3], 6)}
FAST = {("henon_heiles", "galerkin2")}  # about 3 s; the others take 5-22 s each


@pytest.mark.parametrize("system,scheme", [
    pytest.param(s, k, id=f"{s}-{k}", marks=() if (s, k) in FAST else pytest.mark.slow) for s in SYSTEMS for k in STEPS])
def test_observed_order(system, scheme):
    hs, order = STEPS[scheme]
    errs = C.discrete_vs_exact(SYSTEMS[system], scheme, hs, 2.0, Q0, V0, xtol=1e-14)
    # well above the reference: reference_flow is within 1.6e-13 of a 30-digit Taylor solution on these runs (session 9;
    # the ~1e-9 once quoted here could not be reproduced); the 5e-9 floor is kept as a margin
    assert min(errs) > 5e-9, errs
    got = C.observed_order(hs, errs)
    assert abs(got - order) <= 0.3, f"observed order {got:.3f}, expected {order} (errors {errs})"


# ---------------------------------------------------------------------------- closed form
def frequency_series(scheme, top: int):
    """[a_1, ..., a_{top+1}] with (W h)^2 = sum_j a_j (w h)^(2j), from the exact one-step map of one mode."""
    x = sympy.Symbol("x")
    q0, q1 = sympy.symbols("q0 q1")
    Qs = list(sympy.symbols(f"Q1:{scheme.n_interior + 1}"))
    phi = sympy.expand(sympy.sympify(scheme.stage_action(lambda q, v: v**2 / 2 - x**2 * q**2 / 2, q0, Qs, q1, 1)))
    sol = sympy.solve([phi.diff(Q) for Q in Qs], Qs, dict=True)[0] if Qs else {}
    Ld = sympy.together(phi.subs(sol))
    cos_wh = sympy.series(sympy.cancel(-Ld.diff(q0, 2) / Ld.diff(q0, q1)), x, 0, 2 * top + 3).removeO()
    a = sympy.symbols(f"a1:{top + 2}")
    y = sum(a[j] * x ** (2 * j + 2) for j in range(top + 1))
    eq = sympy.expand(sum((-y) ** k / sympy.factorial(2 * k) for k in range(top + 2)) - cos_wh)
    vals = {}
    for j in range(top + 1):
        vals[a[j]] = sympy.solve(sympy.expand(eq.coeff(x, 2 * j + 2).subs(vals)), a[j])[0]
    return [vals[a[j]] for j in range(top + 1)]


def _series_ops(K, N):
    """Truncated power series in x (lists of N elements of the SymPy domain K): product and sum."""
    def smul(A, B):
        out = [K.zero] * N
        for i, u in enumerate(A):
            if u:
                for j in range(N - i):
                    out[i + j] += u * B[j]
        return out

    return smul, lambda A, B: [u + v for u, v in zip(A, B)]


def triple_jump_frequency_series(top: int):
    """[a_1, ..., a_{top+1}] for the triple jump, independently of bea's stage machinery and radicals: the one-step
    map (q, p) -> (q', p') of one mode is the product of the midpoint rule's maps over the sub-steps g, 1 - 2g, g
    (each from its L_d by the discrete Legendre transforms, p = -D1 L_d, p' = D2 L_d), and cos(W h) is half its
    trace. The arithmetic is exact in SymPy's domain Q(2^(1/3)) (g = 1/(2 - 2^(1/3))); about 4 s."""
    x, k, a0, b0, p0 = sympy.symbols("x k a0 b0 p0")
    K = sympy.QQ.algebraic_field(sympy.root(2, 3))
    N = 2 * top + 3
    smul, sadd = _series_ops(K, N)
    Ld = k * (((b0 - a0) / k) ** 2 / 2 - x**2 * ((a0 + b0) / 2) ** 2 / 2)
    b1 = sympy.solve(sympy.Eq(p0, -Ld.diff(a0)), b0)[0]
    p1 = Ld.diff(b0).subs(b0, b1)
    S = [[sympy.Poly(sympy.series(sympy.diff(e, u), x, 0, N).removeO(), x, k) for u in (a0, p0)] for e in (b1, p1)]

    def entry(P, kv):
        out = [K.zero] * N
        for (i, j), c in P.terms():
            out[i] += K.convert(c) * kv**j
        return out

    def mmul(X, Y):
        return [[sadd(smul(X[i][0], Y[0][j]), smul(X[i][1], Y[1][j])) for j in range(2)] for i in range(2)]

    g = K.one / (K.from_sympy(sympy.Integer(2)) - K.from_sympy(sympy.root(2, 3)))
    steps = [[[entry(S[i][j], kv) for j in range(2)] for i in range(2)] for kv in (g, K.one - 2 * g, g)]
    R = mmul(mmul(steps[0], steps[1]), steps[2])
    C = [(u + v) / 2 for u, v in zip(R[0][0], R[1][1])]
    a = []  # cos(W h) = sum_m (-y)^m/(2m)! with y = (W h)^2 = sum_j a_j x^(2j+2): a_j from the x^(2j+2) coefficient
    for j in range(top + 1):
        y = [K.zero] * N
        for i, aj in enumerate(a):
            y[2 * i + 2] = aj
        tot, pw, fact = [K.zero] * N, [K.one] + [K.zero] * (N - 1), 1
        for m in range(top + 2):
            if m:
                pw, fact = smul(pw, [-u for u in y]), fact * (2 * m - 1) * (2 * m)
            tot = sadd(tot, [u / fact for u in pw])
        a.append(2 * (tot[2 * j + 2] - C[2 * j + 2]))  # the a_j term enters as -a_j x^(2j+2)/2
    return [K.to_sympy(u) for u in a]


def test_frequency_series_trapezoidal_known():
    """The harness on a case bea already derives: galerkin(1) is the trapezoidal rule; its exact map gives
    (W h)^2 = x^2 + x^4/12 + x^6/90 + ..., which must be bea's trapezoidal modified equation for L = v^2/2 - q^2/2."""
    a = frequency_series(S.galerkin_lobatto(1), 2)
    theirs = bea.modified_equation("trapezoidal", 4, lagrangian=sympy.Rational(1, 2) * sympy.Symbol("v") ** 2
                                   - sympy.Symbol("q") ** 2 / 2, q=[sympy.Symbol("q")], v=[sympy.Symbol("v")], cache=False)
    q = sympy.Symbol("q")
    for j in range(3):
        assert sympy.simplify(theirs.coefficient(2 * j)[0] + a[j] * q) == 0


BOOLE = S.Galerkin(3, [0, "1/4", "1/2", "3/4", 1], ["7/90", "32/90", "12/90", "32/90", "7/90"], name="galerkin3_boole")
#: scheme -> the leading coefficients a_1.. of (W h)^2 from the exact map (checked below: first correction at h^2s)
_TJ4 = -sympy.Rational(2, 45) - sympy.root(2, 3) ** 2 / 36 - 5 * sympy.root(2, 3) / 144
LEADING = {"galerkin2": [1, 0, sympy.Rational(1, 1440)], "galerkin3_boole": [1, 0, 0, sympy.Rational(1, 2419200)],
           "galerkin3": [1, 0, 0, sympy.Rational(1, 302400)], "triple_jump": [1, 0, _TJ4]}


@pytest.mark.parametrize("scheme,n,order", [
    pytest.param("galerkin2", 1, 6, id="galerkin2-n1-h6"), pytest.param("galerkin2", 3, 8, id="galerkin2-n3-h8"),
    pytest.param("galerkin3_boole", 1, 6, id="boole-n1-h6"),
    pytest.param("galerkin3", 3, 6, id="galerkin3-n3-h6"), pytest.param("triple_jump", 3, 4, id="triple_jump-n3-h4"),
    pytest.param("galerkin3", 1, 6, id="galerkin3-n1-h6", marks=pytest.mark.slow),
    pytest.param("triple_jump", 1, 4, id="triple_jump-n1-h4", marks=pytest.mark.slow),
    pytest.param("galerkin3", 2, 6, id="galerkin3-n2-h6", marks=pytest.mark.slow),
    pytest.param("triple_jump", 2, 4, id="triple_jump-n2-h4", marks=pytest.mark.slow),
    pytest.param("galerkin3", 3, 8, id="galerkin3-n3-h8", marks=pytest.mark.slow),
    pytest.param("triple_jump", 3, 6, id="triple_jump-n3-h6", marks=pytest.mark.slow),
    pytest.param("triple_jump", 3, 8, id="triple_jump-n3-h8", marks=pytest.mark.slow)])
def test_closed_form_coupled_oscillators(scheme, n, order):
    """Derived modified equation against the exact one-step map on coupled oscillators (n >= 2: non-diagonal
    stiffness), every coefficient up to h^order. galerkin3_boole is a user scheme from nodes and weights: s = 3
    with Boole's rule (exact to degree 5), order 6, rational constants. galerkin3 (Q(sqrt 5)) and triple_jump
    (Q(2^(1/3))) are derived exactly with the radical adjoined (bea.radicals); their maps come from the stage
    action in SymPy (galerkin3) and from the product of the midpoint sub-step maps in Q(2^(1/3)) (triple_jump).
    Default suite: n = 3 to the first correction h^(2s) (galerkin3 h^6, triple_jump h^4) and galerkin2 to
    h^8 = h^(2s+4), 1-6 s each (wall, 2 cores shared by many jobs, load ~13). -m slow: n = 1, 2, and n = 3 to
    h^(2s+2) (galerkin3 h^8 11 s, triple_jump h^6 12 s, h^8 26 s). Before the concrete Taylor expansion in
    bea.jets was pruned and nested, galerkin3 with n = 2 to h^6 took 806 s and n = 3 did not finish in 550 s."""
    sch = BOOLE if scheme == "galerkin3_boole" else bea.get_scheme(scheme)
    sysm = systems.coupled_oscillators(n, coupling=sympy.Rational(1, 3))
    K = -sympy.hessian(sysm.expr, sysm.q)
    a = triple_jump_frequency_series(order // 2) if scheme == "triple_jump" else frequency_series(sch, order // 2)
    lead = LEADING[scheme][: len(a)]
    assert all(sympy.simplify(x - y) == 0 for x, y in zip(a, lead))  # first correction at h^(2s)
    me = bea.modified_equation(sch, order, lagrangian=sysm.expr, q=sysm.q, v=sysm.v, cache=False)
    qv = sympy.Matrix(sysm.q)
    for j in range(order // 2 + 1):
        want = -a[j] * K**(j + 1) * qv
        got = sympy.Matrix(me.coefficient(2 * j)).reshape(n, 1)
        diff = (got - want).applyfunc(sympy.expand)
        for e in diff:
            coeffs = sympy.Poly(e, *sysm.q, *sysm.v).coeffs() if e != 0 else []
            assert all(abs(float(c)) <= 1e-12 for c in coeffs), (j, e)
    for k in range(1, order + 1, 2):
        assert all(c == 0 for c in sympy.Matrix(me.coefficient(k)))


# ---------------------------------------------------------------------------- interior points
def test_interior_series_matches_newton():
    """Q_1(h) of galerkin2 for L = v^2/2 - q^4/4 between a = q - v h/2 and b = q + v h/2 (a straight chord):
    the series truncated at h^K against Newton's interior point; the error must fall like h^(K+1) or faster
    (measured: slope 6.00 for K = 5, errors 2.5e-9, 3.8e-11, 6.0e-13 at h = 0.2, 0.1, 0.05)."""
    from bea.concrete import PolynomialLagrangian
    from bea.derive import Derivation
    from bea.jets import Jets
    from bea.stage_series import interior_series
    from bea.symbolic import validate_concrete

    q, v = sympy.symbols("q v")
    frame = validate_concrete(v**2 / 2 - q**4 / 4, [q], [v])
    jets = Jets(1)
    poly = PolynomialLagrangian.from_frame(jets, frame)
    d = Derivation(S.galerkin_lobatto(2), 1, jets=jets, concrete=poly)
    K = 5
    lin = {jets.jet(0, 0): 0.4, jets.jet(0, 1): 0.7}  # the chord: jets of order >= 2 vanish
    a, b = d._positions("-1/2", K), d._positions("1/2", K)
    Qs = interior_series(lambda x, y: jets.lagrangian_at(list(x), list(y), poly.derivative), a, b, d._h(), d.scheme, jets, poly.W0)
    coeff = [sum(float(c) * math.prod(lin.get(x, 0.0) for x in m) for m, c in p.items()) for p in Qs[0][0].c[: K + 1]]
    assert coeff[1] == pytest.approx(0.0) and abs(coeff[2]) > 1e-3  # the first correction to the chord is O(h^2)
    Lt = lambda x, y: (y**2 / 2 - x**4 / 4).sum(-1)  # noqa: E731
    hs = [0.2, 0.1, 0.05]
    errs = []
    for h in hs:
        a_t = torch.tensor([[0.4 - 0.35 * h]], dtype=torch.float64)
        b_t = torch.tensor([[0.4 + 0.35 * h]], dtype=torch.float64)
        Z = d.scheme.interior_points(Lt, a_t, b_t, h)
        errs.append(abs(float(Z[0, 0, 0]) - sum(c * h**j for j, c in enumerate(coeff))))
    assert C.observed_order(hs, errs) >= K + 1 - 0.3, (C.observed_order(hs, errs), errs)


# ---------------------------------------------------------------------------- API and errors
def test_names_and_constructors():
    assert bea.get_scheme("galerkin2") == S.galerkin_lobatto(2)
    assert bea.get_scheme("triple_jump").n_interior == 2 and bea.get_scheme("galerkin3").method_order == 6
    boole = S.Galerkin(3, [0, "1/4", "1/2", "3/4", 1], ["7/90", "32/90", "12/90", "32/90", "7/90"])
    assert boole.exact_constants and boole.method_order == 6 and boole.symmetric
    with pytest.raises(BeaValueError):
        S.Galerkin(2, [0, "1/2", 1], ["1/6", "1/6", "1/6"])  # weights do not sum to 1
    with pytest.raises(BeaValueError):
        S.Galerkin(2, ["1/2"], [1])  # the only node is where the interior basis function is flat: K = 0
    with pytest.raises(BeaValueError):
        S.Composition([1, 0])


def test_series_refuses_what_it_cannot_do():
    g1 = 1 / (2 - 2 ** (1 / 3))  # the triple jump with its constants as floats: torch only
    floats = S.Composition([(g1, "irrational"), (1 - 2 * g1, "irrational"), (g1, "irrational")], method_order=4)
    for n in (1, None):  # the dimension-free engine takes exact radicals (tests/test_stages_free_radical.py), not floats
        with pytest.raises(UnsupportedSchemeError):
            bea.modified_equation(floats, 2, n=n, cache=False)


def test_torch_derivatives_are_those_of_the_stationary_value():
    """D1 L_d and D11 L_d by autograd through the final Newton step against central differences of L_d."""
    sch = S.galerkin_lobatto(2)
    L = lambda x, y: (y**2 / 2 + torch.cos(x)).sum(-1)  # noqa: E731
    a = torch.tensor([[0.3]], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([[0.45]], dtype=torch.float64)
    h, e = 0.1, 1e-4
    (g,) = torch.autograd.grad(sch(L, a, b, h).sum(), a, create_graph=True)
    (H,) = torch.autograd.grad(g.sum(), a)
    f = [float(sch(L, a.detach() + s * e, b, h)) for s in (-1, 0, 1)]
    assert float(g.detach()) == pytest.approx((f[2] - f[0]) / (2 * e), rel=1e-7)
    assert float(H) == pytest.approx((f[2] - 2 * f[1] + f[0]) / e**2, rel=1e-5)


# ---------------------------------------------------------------------------- truncated series
SERIES_SYSTEMS = {"henon_heiles": systems.henon_heiles(), "fpu2": systems.fpu_chain(2)}


@pytest.mark.slow
@pytest.mark.parametrize("system", list(SERIES_SYSTEMS))
@pytest.mark.parametrize("study", ["modified", "inverse"])
def test_truncated_series_orders(system, study):
    """galerkin2 with L_mod[4] / L_inv[4] (the first correction, h^4): error O(h^6) = O(h^(N+2)), against O(h^4)
    without it (test_observed_order). Concrete derivations (polynomial Lagrangians with constant mass), 10-25 s each.
    Measured on Henon-Heiles: 5.73 (modified), 5.76 (inverse)."""
    _assert_truncated_order_6(SERIES_SYSTEMS[system], "galerkin2", [0.5, 0.4, 1 / 3], study)


TRIPLE_JUMP_STEPS = {"henon_heiles": [0.25, 0.2, 1 / 6], "fpu2": [1 / 8, 1 / 10, 1 / 12]}


@pytest.mark.slow
@pytest.mark.parametrize("system", list(SERIES_SYSTEMS))
@pytest.mark.parametrize("study", ["modified", "inverse"])
def test_truncated_series_orders_triple_jump(system, study):
    """The triple jump (order 4, constants in Q(2^(1/3))) with L_mod[4] / L_inv[4]: O(h^6) = O(h^(N+2)), over steps
    in each system's asymptotic regime (TRIPLE_JUMP_STEPS). Henon-Heiles at h = 1/4, 1/5, 1/6 (galerkin2's h = 1/2 is
    still pre-asymptotic there: 5.61 over h = 1/2, 2/5, 1/3): 5.89 (modified, 5 s CPU), 5.84 (inverse, 46 s CPU).
    The FPU chain of 2 masses is pre-asymptotic at those steps (5.54, modified; errors 1.46e-4, 4.30e-5, 1.54e-5), so
    smaller ones: modified errors 1.61e-5, 3.03e-6, 8.19e-7, 2.79e-7 at h = 1/6, 1/8, 1/10, 1/12, local slopes 5.80,
    5.87, 5.90 (flattening towards 6), order 5.88 over the last three (23 s wall at load ~5). The inverse case on fpu2
    passes (observed order within 0.3 of 6) in 424 s wall at load ~4 (session 9, beside a CI run): its time is L_inv[4]'s
    discrete flow, 60 DEL steps of ~8 s each, nearly all autograd backward passes through the triple jump's torch stage
    solves (bea/stage_torch.py _grad_hess/_converged_interior inside integrators/newton.py), plus ~30 s deriving L_inv[4].
    galerkin3: test_truncated_series_orders_galerkin3."""
    _assert_truncated_order_6(SERIES_SYSTEMS[system], "triple_jump", hs=TRIPLE_JUMP_STEPS[system], study=study)



@pytest.mark.slow
@pytest.mark.parametrize("system", list(SERIES_SYSTEMS))
@pytest.mark.parametrize("study", ["modified", "inverse"])
def test_truncated_series_orders_galerkin3(system, study):
    """galerkin3 (s = 3) with L_mod[6] / L_inv[6] (the first correction, h^6): O(h^8) = O(h^(2s+2)), against a
    reference flow in 30 digits (reference_flow(method="taylor")). The reference is tested on the flow it integrates
    (L_mod[6] at the smallest h, or L): DOP853 at its defaults, an independent method, agrees with it to < 1e-3 times
    the smallest error (measured 2.8e-14 on Henon-Heiles, 3.2e-14 on fpu2,
    both studies; Henon-Heiles' smallest error 1.46e-9), so neither is of the size of what is
    measured. Henon-Heiles over h = 2/3, 1/2, 2/5: 7.86 (modified), 7.86 (inverse); local slopes 7.87, 7.84 and,
    adding h = 1/3, 7.85: flat, the asymptotic regime; 31 s (modified) and 52 s (inverse) wall, 2 cores shared with
    a derivation running beside. The FPU chain of 2 masses: both pass (109 s modified, 173 s inverse, wall at load ~5).
    With the DOP853 guard (stage26b): 34 s, 66 s (Henon-Heiles), 223 s, 153 s (fpu2), wall at load ~5."""
    hs, HH = [2 / 3, 0.5, 0.4], SERIES_SYSTEMS[system]
    flow = HH if study == "inverse" else C.series_lagrangian(HH, "galerkin3", 6).bind(h=hs[-1])
    ts = [hs[-1] * k for k in range(6)]
    gap = float((reference_flow(flow, Q0, V0, ts, method="taylor").q - reference_flow(flow, Q0, V0, ts).q).abs().max())
    study_of = {"modified": C.discrete_vs_modified_flow, "inverse": C.inverse_modified_vs_exact}[study]
    errs = study_of(HH, "galerkin3", 6, hs, 2.0, Q0, V0, formula="concrete", reference_options={"method": "taylor"}, xtol=1e-14)
    assert gap < 1e-3 * min(errs), (gap, errs)
    got = C.observed_order(hs, errs)
    assert abs(got - 8) <= 0.3, f"observed order {got:.3f}, expected 8 (errors {errs})"

def _assert_truncated_order_6(L, scheme, hs, study):
    """The modified (``study="modified"``: discrete flow against L_mod[4]'s) or inverse modified (L_inv[4]'s discrete
    flow against the exact one) series truncated after h^4 gives errors O(h^6) over the steps ``hs``; errors above the
    5e-9 (a margin kept from before: DOP853's flows of SERIES_SYSTEMS from Q0, V0 to T = 2 are within 8.1e-14
    (henon_heiles) and 6.2e-14 (fpu2) of the 30-digit Taylor solution, session 9; the modified Lagrangians' flows
    were not measured), observed order within 0.3 of 6."""
    study_of = {"modified": C.discrete_vs_modified_flow, "inverse": C.inverse_modified_vs_exact}[study]
    errs = study_of(L, scheme, 4, hs, 2.0, Q0, V0, formula="concrete", xtol=1e-14)
    assert min(errs) > 5e-9, errs
    got = C.observed_order(hs, errs)
    assert abs(got - 6) <= 0.3, f"observed order {got:.3f}, expected 6 (errors {errs})"


def test_lsi_takes_stage_schemes_lgp_refuses_them():
    """LSI fits a stage scheme by linearising its DEL conditions (tests/test_learners_stage_lsi.py); LGP's model
    conditions on functionals linear in L and has no such iteration, so it still refuses one with a typed error."""
    from learners import InverseModifiedLagrangianGP, LagrangianGP

    assert InverseModifiedLagrangianGP(0.1, scheme="galerkin2").scheme.name == "galerkin2"
    with pytest.raises(UnsupportedSchemeError):
        LagrangianGP(0.1, scheme="galerkin2")


def test_vmap_jacobian_refused_with_a_clear_error():
    from integrators import VariationalIntegrator

    with pytest.raises(BeaValueError):
        VariationalIntegrator(systems.pendulum(), 0.1, "galerkin2", jacobian="vmap")


def test_energy_error_of_order_four():
    """Momenta, velocities and energies of a galerkin2 trajectory (pendulum, two states, T = 4): the energy error
    max |H_j - H_0| falls like h^4 (order 2s), measured 4.0 over h = 0.2, 0.1; velocities tend to the initial ones."""
    from integrators import VariationalIntegrator

    P = systems.pendulum()
    q0 = torch.tensor([[0.5], [1.0]], dtype=torch.float64)
    v0 = torch.tensor([[0.5], [0.2]], dtype=torch.float64)
    hs, errs = [0.2, 0.1], []
    for h in hs:
        vi = VariationalIntegrator(P, h, "galerkin2")
        traj = vi.solve(q0, v0, int(round(4 / h)))
        H = vi.energies(traj)
        errs.append(float((H - H[0]).abs().max()))
        assert float((vi.velocities(traj)[0] - v0).abs().max()) < 1e-12
        assert float((vi.momenta(traj)[0] - v0).abs().max()) < 1e-12  # p = v for the pendulum
    assert abs(C.observed_order(hs, errs) - 4) <= 0.3, errs


def test_symmetry_of_exact_constants_is_decided_exactly():
    """0.6666666666666667 is taken exactly (6666666666666667/10^16), so 1/3 + it != 1: not symmetric, and the
    odd powers of h are kept; a float tolerance would call it symmetric. Floats marked irrational keep 1e-15."""
    assert not S.Galerkin(1, ["1/3", 0.6666666666666667], ["1/2", "1/2"]).symmetric
    assert not S.Galerkin(2, [0, "1/2", 1], [0.1666666666666666, 0.6666666666666667, 0.1666666666666667]).symmetric
    assert S.Galerkin(1, ["1/3", "2/3"], ["1/2", "1/2"]).symmetric
    assert not S.Composition(["1/3", "1/3", 0.3333333333333334]).symmetric
    assert S.Composition(["1/4", "1/2", "1/4"]).symmetric
    assert bea.get_scheme("galerkin3").symmetric and bea.get_scheme("triple_jump").symmetric  # radical constants, exactly
    assert S.Galerkin(1, [(0.2, "irrational"), (0.8, "irrational")], ["1/2", "1/2"]).symmetric
