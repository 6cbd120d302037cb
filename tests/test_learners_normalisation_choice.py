"""The whole mass matrix as normalisation, and the positions search's choice between it and its trace (issue 23,
branch id-acc; learners/shadow/normalisation.py, learners/shadow/position_search.py).

Where a Lagrangian separates into independent parts, ``a L_1 + b L_2`` has the motions of ``L_1 + L_2`` for every
``a, b``: positions alone cannot fix the parts' scales, and the trace of the mass matrix fixes only their sum. The
systems here appear nowhere else in the suite: three separable anharmonic oscillators of unit mass (the matrix
is right and needed, but the motions cannot show it), and a coupled system with a non-diagonal constant mass matrix
(the matrix is wrong, and the search must keep the trace)."""

import math
import warnings

import pytest
import sympy
import torch

import integrators
from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP, MassNormalisation
from learners.shadow import position_search
from learners.shadow.guards import IdentifiabilityWarning
from bea.errors import BeaValueError
from tests.test_learners_shadow_auto import energy_differences

Q = sympy.symbols("q0:3", real=True)
V = sympy.symbols("v0:3", real=True)


def separable3():
    w = (1, sympy.Rational(13, 10), sympy.Rational(4, 5))
    L = sum(V[i]**2 / 2 - w[i]**2 * Q[i]**2 / 2 - Q[i]**4 / 4 for i in range(3))
    return integrators.systems.from_sympy(L, Q, V, "separable3", domain=[(-0.6, 0.6)] * 6)


def skew_mass3():
    R = sympy.Rational
    M = sympy.Matrix([[R(3, 2), R(2, 5), 0], [R(2, 5), 1, R(3, 10)], [0, R(3, 10), R(7, 10)]])
    v = sympy.Matrix(V)
    pot = (Q[0]**2 + R(3, 2) * Q[1]**2 + 2 * Q[2]**2) / 2 + R(2, 5) * Q[0] * Q[1] * Q[2]
    return integrators.systems.from_sympy((v.T * M * v)[0] / 2 - pot, Q, V, "skew_mass3", domain=[(-0.6, 0.6)] * 6)


def _fit(system, **kw):
    """40 trajectories of ``system``; the RBF unless ``kernel=`` is given (the choices of normalisation asserted here
    are the RBF's: the default kernel="auto" scores the mechanical kernel too)."""
    kw.setdefault("kernel", "rbf")
    data = snapshots(system, 0.2, 40, 5, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IdentifiabilityWarning)
        return InverseModifiedLagrangianGP(0.2, progress=False, **kw).fit(data)


def test_matrix_functionals_fix_every_entry():
    """n(n+1)/2 second-derivative conditions, target c on the diagonal and 0 off it: applied to L = v'Av/2 they
    give the entries of A on and above the diagonal (to rounding), and the trace form is unchanged."""
    n, c = 3, 2.5
    F = MassNormalisation(c=c, matrix=True).functionals(n)
    assert F.count == n + 1 + n * (n + 1) // 2
    i, j = torch.triu_indices(n, n)
    assert torch.equal(F.targets[n + 1:], c * (i == j).double())
    A = torch.tensor([[2.0, 0.3, -0.1], [0.3, 1.0, 0.5], [-0.1, 0.5, 3.0]], dtype=torch.float64)
    vals = F.apply(lambda x: 0.5 * torch.einsum("...i,ij,...j->...", x[..., n:], A, x[..., n:]))
    assert torch.allclose(vals[n + 1:], A[i, j], atol=1e-12)
    assert MassNormalisation().functionals(n).count == MassNormalisation(matrix=False).functionals(n).count == n + 2


@pytest.mark.parametrize("scheme, kappa", [("midpoint", 1 / 12), ("trapezoidal", -1 / 6)])
def test_inverse_curvature_of_the_schemes(scheme, kappa):
    """The curvature term read off each scheme's mod_2: h^2/12 for the midpoint rule (docs/theory/inverse.md's inv_2)
    and -h^2/6 for the trapezoidal rule, to rounding."""
    from learners.shadow.normalisation import inverse_curvature

    for h in (0.05, 0.3):
        assert inverse_curvature(h, scheme) == pytest.approx(kappa * h * h, rel=1e-10)


def test_matrix_with_curvature_fixes_the_mass_matrix_of_L():
    """L = v'Mv/2 - q'Kq/2 with M = I, K non-diagonal, h = 0.3 (midpoint): the matrix conditions applied to
    L_inv = inv_2(L) (bea's own series) give I - h^2/12 K without the curvature term -- the bias that made the matrix
    worse than the trace on a Duffing chain -- and I to O(h^4) with it: the rest is h^4/144 K^2 (inv_2's q-Hessian
    -K - h^2/12 K^2 times kappa = h^2/12), within 1e-12."""
    import bea
    from learners.shadow.normalisation import inverse_curvature

    n, h = 3, 0.3
    K = torch.tensor([[2.0, -1.0, 0.3], [-1.0, 1.5, -0.5], [0.3, -0.5, 1.0]], dtype=torch.float64)
    inv2 = bea.compile_torch("inverse_modified_lagrangian", "midpoint", 2)
    L = lambda q, v: 0.5 * v.pow(2).sum(-1) - 0.5 * torch.einsum("...i,ij,...j->...", q, K, q)
    L_inv = lambda x: inv2(L, x[..., :n], x[..., n:], h)
    i, j = torch.triu_indices(n, n)
    plain = MassNormalisation(matrix=True, curvature=0.0).functionals(n).apply(L_inv)[n + 1:]
    kappa = inverse_curvature(h, "midpoint")
    fixed = MassNormalisation(matrix=True, curvature=kappa).functionals(n).apply(L_inv)[n + 1:]
    eye = torch.eye(n, dtype=torch.float64)
    assert torch.allclose(plain, (eye - h * h / 12 * K)[i, j], atol=1e-12)
    assert torch.allclose(fixed, (eye + h**4 / 144 * K @ K)[i, j], atol=1e-12)
    assert MassNormalisation(matrix=True, curvature=kappa).functionals(n).count == n + 1 + n * (n + 1) // 2


def test_fit_sets_the_curvature_only_where_the_matrix_may_be_used():
    """in_standard_units (what the LSI fit applies): the trace alone (matrix=False) is left as it is; matrix=None or
    True get the scheme's curvature at the standardised step; a curvature given by the user is kept; a point given in
    the data's units is mapped (here by a shift of 1)."""
    from learners.shadow.normalisation import in_standard_units

    shift = lambda q, v: torch.cat([q + 1, v])
    trace = MassNormalisation(matrix=False)
    assert in_standard_units(trace, shift, 0.3, "midpoint") is trace
    assert in_standard_units(MassNormalisation(), shift, 0.3, "midpoint").curvature == pytest.approx(0.0075, rel=1e-10)
    assert in_standard_units(MassNormalisation(matrix=True, curvature=0.0), shift, 0.3, "midpoint").curvature == 0.0
    at = in_standard_units(MassNormalisation(point=torch.zeros(6), matrix=True), shift, 0.3, "trapezoidal")
    assert torch.equal(at.point, torch.tensor([1.0, 1, 1, 0, 0, 0], dtype=torch.float64))
    assert at.matrix is True and at.curvature == pytest.approx(-0.015, rel=1e-10)
    with pytest.raises(BeaValueError, match="curvature"):
        MassNormalisation(curvature=float("nan"))


def test_diagonal_functionals_fix_the_off_diagonal_entries_in_the_data_axes():
    """matrix="diagonal" (no equal masses assumed): L(x0), dL/dv(x0), the trace, and one condition per entry above the
    diagonal of the mass matrix in the data's axes (rows of ``axes`` in the fit's coordinates), target 0: applied to
    L = v'Av/2 - q'Kq/2 in coordinates turned by R they give tr A and the entries of R A R' above the
    diagonal, and with the curvature term those of R (A + kappa K) R' (to rounding)."""
    n, c, kappa = 3, 2.5, 0.01
    th = 0.4
    R = torch.tensor([[math.cos(th), -math.sin(th), 0], [math.sin(th), math.cos(th), 0], [0, 0, 1]], dtype=torch.float64)
    A = torch.tensor([[2.0, 0.3, -0.1], [0.3, 1.0, 0.5], [-0.1, 0.5, 3.0]], dtype=torch.float64)
    K = torch.tensor([[1.0, -0.4, 0.2], [-0.4, 2.0, 0.1], [0.2, 0.1, 1.5]], dtype=torch.float64)
    L = lambda x: 0.5 * torch.einsum("...i,ij,...j->...", x[..., n:], A, x[..., n:]) \
        - 0.5 * torch.einsum("...i,ij,...j->...", x[..., :n], K, x[..., :n])
    i, j = torch.triu_indices(n, n, 1)
    for curvature, expect in ((None, R @ A @ R.T), (kappa, R @ (A + kappa * K) @ R.T)):
        F = MassNormalisation(c=c, matrix="diagonal", curvature=curvature, axes=R).functionals(n)
        assert F.count == n + 2 + n * (n - 1) // 2
        assert torch.equal(F.targets, torch.tensor([0.0] * (n + 1) + [c * n] + [0.0] * 3, dtype=torch.float64))
        vals = F.apply(L)
        assert float(vals[n + 1].detach()) == pytest.approx(float(torch.trace(A)), rel=1e-12)
        assert torch.allclose(vals[n + 2:], expect[i, j], atol=1e-12)
    assert MassNormalisation(matrix="diagonal").with_axes(R).with_curvature(kappa).with_matrix("diagonal").axes is not None


def test_axes_are_validated():
    """axes: a square, finite, orthonormal matrix (BeaValueError naming the problem), n checked where the functionals
    are formed; a rotation computed in float64 passes (tolerance 1e-8, rounding 1e-16), and repr shows matrix and
    axes."""
    Q, _ = torch.linalg.qr(torch.randn(3, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(0)))
    norm = MassNormalisation(matrix="diagonal", axes=Q)
    assert torch.equal(norm.axes, Q) and norm.functionals(3).count == 3 + 2 + 3
    assert repr(norm).startswith("MassNormalisation(c=1.0, matrix='diagonal', axes=[[")
    for bad, says in ((torch.ones(2, 3, dtype=torch.float64), "square"), (torch.full((2, 2), float("nan")), "finite"),
                      (2 * torch.eye(2), "orthonormal"), (Q + 1e-6, "orthonormal")):
        with pytest.raises(BeaValueError, match=says):
            MassNormalisation(matrix="diagonal", axes=bad)
    with pytest.raises(BeaValueError, match="for n = 2 coordinates"):
        norm.functionals(2)


def test_matrix_needs_a_bool():
    from bea.errors import BeaValueError

    with pytest.raises(BeaValueError, match="matrix"):
        MassNormalisation(matrix="yes")


def test_separable_system_needs_the_matrix(monkeypatch):
    """Separable oscillators, 40 trajectories: the motions cannot tell the trace from the matrix (held-out errors
    -16.95 and -16.93 in the mean log square), so the default keeps the trace, and the energy differences are 1.05e-2
    relative after the best scale (the parts' scales are off); with the matrix forced, 2.31e-3 (2.98e-3 without its
    curvature term). Bound 5e-3 between the two. With MATRIX_MARGIN lowered below any difference the search keeps
    the matrix, and gives the forced fit's numbers (the same grid and refinement)."""
    system = separable3()
    default = _fit(system)
    assert default._norm_count == 3 + 2
    a, b = default.history["normalisation_values"]
    assert abs(a - b) < 0.2, (a, b)
    forced = _fit(system, normalisation=MassNormalisation(matrix=True))
    rel_default = energy_differences(default, system, 2, return_std=False)[0]
    rel_forced = energy_differences(forced, system, 2, return_std=False)[0]
    assert rel_forced < 5e-3 < rel_default, (rel_forced, rel_default)
    monkeypatch.setattr(position_search, "MATRIX_MARGIN", -math.inf)
    chosen = _fit(system)
    assert chosen._norm_count == 3 + 1 + 6
    assert energy_differences(chosen, system, 2, return_std=False)[0] == pytest.approx(rel_forced, rel=1e-9)


@pytest.fixture(scope="module")
def skew_default():
    system = skew_mass3()
    return system, _fit(system)


def test_wrong_matrix_is_rejected(skew_default):
    """Non-diagonal masses: fixing the matrix to c I contradicts the data (held-out one-step objective -8.3 against
    -18.7 with the trace), so the default keeps the trace, and the energy differences are 1.2e-3 relative (forced
    matrix: 0.40)."""
    system, m = skew_default
    assert m._norm_count == 3 + 2
    vals = m.history["normalisation_values"]
    assert vals[1] > vals[0] + 5, vals
    rel, _ = energy_differences(m, system, 2, return_std=False)
    assert rel < 3e-3, rel


@pytest.mark.slow
def test_degree_2_mechanical_kernel_with_the_matrix_identifies_the_chain():
    """Opt-in, not the default (benchmarks/RESULTS_identification.md): the chain with position-dependent masses of
    tests/test_learners_shadow_auto.py (n = 4, 150 trajectories, h = 0.2) with MechanicalKernel(degree=2) and the
    whole mass matrix (with its curvature term): energy differences 4.6e-4 relative after the best scale (the
    defaults: 9.0e-3; issue 23's bound 3e-3)."""
    from learners.shadow.mechanical import MechanicalKernel
    from tests.test_learners_shadow_auto import mass_chain4

    system = mass_chain4()
    data = snapshots(system, 0.2, 150, 5, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IdentifiabilityWarning)
        m = InverseModifiedLagrangianGP(0.2, kernel=MechanicalKernel(degree=2), normalisation=MassNormalisation(matrix=True),
                                        progress=False).fit(data)
    rel, _ = energy_differences(m, system, 2, return_std=False)
    assert rel < 3e-3, rel


def test_kernel_auto_chooses_the_mechanical_kernel_where_it_predicts_better(tmp_path):
    """kernel="auto" (learners/shadow/position_search.py): the positions search also scores MechanicalKernel(degree=2)
    with the whole mass matrix. Separable oscillators (unit masses, so the matrix is right): its refined held-out error
    is the lowest and it is kept (kernel_degree 2, the matrix's 1 + 6 conditions); the energy differences are 8.3e-4
    relative after the best scale (the RBF default 1.05e-2, the RBF with the matrix forced 2.31e-3; bound 2e-3
    between them). The same kernel with the diagonal condition (MECHANICAL_DIAGONAL) is level here and not kept: its
    off-diagonal conditions leave the parts' scales free (1.68e-2 where it was kept, Session 10 idmass). The choice is
    saved with the model: a loaded model gives the same Lagrangian to rounding."""
    system = separable3()
    m = _fit(system, kernel="auto")
    assert m.kernel_degree == 2 and m._norm_count == 3 + 1 + 6
    vals = m.history["normalisation_values"]
    assert m.history["normalisation_candidates"] == ["trace", "matrix", "mechanical2", "mechanical4", "mechanical2_diagonal"]
    assert len(vals) == 5 and "search_mechanical" in m.history and "search_mechanical4" in m.history
    assert vals[4] > vals[2] - position_search.MATRIX_MARGIN  # the diagonal condition does not replace the whole matrix here
    assert m.history["mechanical_kept"] == 2
    assert energy_differences(m, system, 2, return_std=False)[0] < 2e-3
    q, v = torch.rand(7, 3, dtype=torch.float64) - 0.5, torch.rand(7, 3, dtype=torch.float64) - 0.5
    m._pending_calibration = None  # the energy calibration (run on first demand, 20 s) is not what is saved here
    loaded = InverseModifiedLagrangianGP.load(m.save(tmp_path / "m.pt"))
    assert loaded.kernel_degree == 2
    torch.testing.assert_close(loaded.lagrangian(q, v), m.lagrangian(q, v), rtol=1e-12, atol=1e-14)


def test_kernel_auto_keeps_degree_4_where_it_clears_the_margin_and_saves_it(tmp_path, monkeypatch):
    """kernel="auto" scores the mechanical kernel at degree 4 too (position_search.MECHANICAL_DEGREES); with
    DEGREE_MARGIN at -inf degree 4 replaces degree 2 whatever their held-out values, and on the separable oscillators it
    still predicts better than the RBF, so it is kept (kernel_degree 4, the matrix's conditions), its refinement is
    in the history, and a loaded model rebuilds the degree-4 kernel: the same Lagrangian to rounding. (With the
    margin, degree 2 is kept here: test_kernel_auto_chooses_the_mechanical_kernel_where_it_predicts_better.)"""
    from learners.shadow import position_search

    monkeypatch.setattr(position_search, "DEGREE_MARGIN", -math.inf)
    m = _fit(separable3(), kernel="auto")
    assert m.kernel_degree == 4 and m._norm_count == 3 + 1 + 6 and "search_mechanical4" in m.history
    assert m.history["mechanical_kept"] == 4
    q, v = torch.rand(7, 3, dtype=torch.float64) - 0.5, torch.rand(7, 3, dtype=torch.float64) - 0.5
    m._pending_calibration = None  # the energy calibration (run on first demand) is not what is saved here
    loaded = InverseModifiedLagrangianGP.load(m.save(tmp_path / "m.pt"))
    assert loaded.kernel_degree == 4
    torch.testing.assert_close(loaded.lagrangian(q, v), m.lagrangian(q, v), rtol=1e-12, atol=1e-14)


def test_kernel_auto_keeps_the_mechanical_kernel_with_the_trace_where_the_matrix_is_wrong(skew_default):
    """Non-diagonal masses: the mechanical candidates with the whole matrix or the diagonal contradict the data
    (held-out -8.1 against -17.1 for the RBF with the trace); the mechanical kernel of degree 4 with the trace alone
    (position_search.MECHANICAL_TRACE, Session 23) is scored because the RBF's matrix is contradicted, and predicts
    better than the RBF (refined -19.64 against -18.66), so kernel="auto" keeps it, with energy differences 5.0e-4
    relative after the best scale against the RBF's 1.17e-3: the bound 8e-4 lies between (the RBF, kept before
    Session 23, fails it). kernel="rbf" never scores the mechanical kernel."""
    system, default = skew_default
    m = _fit(system, kernel="auto")
    vals = dict(zip(m.history["normalisation_candidates"], m.history["normalisation_values"]))
    assert vals["mechanical2"] > vals["trace"] + 5 and vals["mechanical4_trace"] < vals["trace"], vals
    assert m.history["mechanical_kept_name"] == "mechanical4_trace" and m.kernel_degree == 4 and m._norm_count == 3 + 2
    assert len(default.history["normalisation_values"]) == 2 and default.kernel_degree is None
    rel, _ = energy_differences(m, system, 2, return_std=False)
    assert rel < 8e-4, rel


#: issue 23 gaps (Session 7 of benchmarks/RESULTS_identification.md), the coverage's upper bound (99% within 2 sigma)
#: only: where the truncation term dominates the GP's std, the error of H_rec[2] is a known bias (the first omitted
#: term less its unit part, learners/shadow/truncation.py) plus a smaller random part, so every |z| is near 1. With the
#: whole omitted term it read 0.81, 97.5%, while the same rule put z-scores of 5.0 and 8.6 on duffing3 and toda3.
#: A strict expected failure: the rest of the test (accuracy, RMS z, the lower bound, velocities) must still pass, and
#: a case that meets the upper bound fails the test until it is removed from here.
_COVERAGE_GAP = {("anharmonic3", 2): "std too wide: RMS z 0.84 (in range) but 40 of 40 within 2 sigma (target <= 99%), "
                                     "a bias-dominated std (Session 7)",
                ("mass_chain4", 2): "std too wide with chain(4) kept (Session 14): 40 of 40 within 2 sigma (target <= 99%), "
                                    "energy differences and RMS z within their bounds; N = 4 and the velocities not "
                                    "reached in that run"}


@pytest.mark.slow
@pytest.mark.parametrize("name, n_traj", [("mass_chain4", 150), ("anharmonic3", 120)])
def test_kernel_auto_identifies_and_calibrates(name, n_traj):
    """kernel="auto" on two of issue 23's acceptance systems (h = 0.2, 5 steps, seed 0): the search keeps
    MechanicalKernel(degree=2) with the whole matrix (refined held-out error lower than the RBF's), energy differences
    within 3e-3 relative (N = 2 / 4) and calibrated (bounds 0.5-1.5 RMS z, 85-99% within 2 sigma), velocities >= 85%
    within 2 sigma. Measured with the rounding bound of learners/shadow/variance_rounding.py (Session 6 of
    benchmarks/RESULTS_identification.md): the chain with position-dependent masses (n = 4) 4.6e-4 / 4.4e-4, RMS z
    1.23 / 1.30, 90% / 90%, velocities 96% (the RBF default 9.0e-3; 2.35, 78%); anharmonic3 (n = 3) 3.8e-5 / 1.9e-5,
    0.81 / 0.84, 97% / 97%, velocities 100% (under the old worst-case floor 0.33 / 0.25, 100% / 100%). With the
    truncation term's unit part left out (Session 7): the chain 1.26 / 1.30, 90% / 90%; anharmonic3 0.84 / 0.84,
    100% / 97.5% (N = 2: the upper bound a strict expected failure, _COVERAGE_GAP). Since Session 14's fix pass
    the default keeps chain(4) on the chain (energy differences 1.25e-4 / 4.6e-5; its calibration and velocities not
    measured, benchmarks/RESULTS_identification.md)."""
    import tests.test_learners_shadow_auto as A

    system, gap = getattr(A, name)(), None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IdentifiabilityWarning)
        m = InverseModifiedLagrangianGP(0.2, kernel="auto", progress=False).fit(snapshots(system, 0.2, n_traj, 5, seed=0))
        if name == "mass_chain4":  # since Session 14's fix pass chain(4) replaces the degree-2 kernel there
            assert m.kernel_structure == ("chain", 4, "fixed") and m.history["mechanical_kept"] == 2, m.history["structures"]
        else:
            assert m.kernel_degree == 2 and m.kernel_structure is None
        for N in (2, 4):
            rel, z = energy_differences(m, system, N)
            assert rel <= 3e-3, (N, rel)
            cover, rms = float((z.abs() <= 2).double().mean()), float(z.pow(2).mean().sqrt())
            assert 0.85 <= cover and 0.5 <= rms <= 1.5, z
            if (name, N) in _COVERAGE_GAP:  # strict: met, the gap is closed
                assert cover > 0.99, f"({name!r}, {N}) meets the 99% bound ({cover}): remove it from _COVERAGE_GAP"
                gap = _COVERAGE_GAP[(name, N)]
            else:
                assert cover <= 0.99, z
        zv = A.velocity_z(m, system, 0.2)
    assert float((zv.abs() <= 2).double().mean()) >= 0.85, zv
    if gap is not None:
        pytest.xfail(f"issue 23 gap: {gap}")
