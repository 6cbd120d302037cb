"""The ``"positions"`` hyperparameter objective of the LSI GP (learners/shadow/position_objective.py): the
linearised one-step position error is exact where it must be, and in n = 4 the objective keeps the GP from
the collapse that the likelihood runs into."""

import pytest
import torch

import integrators
from integrators import VariationalIntegrator
from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP, LagrangianGP
from learners.metrics import level_set_error
from learners.shadow.position_objective import one_step_errors, position_objective

K = torch.tensor([[2.0, -0.5], [-0.5, 1.0]], dtype=torch.float64)


def _quadratic(q, v):
    return 0.5 * (v * v).sum(-1) - 0.5 * torch.einsum("...i,ij,...j->...", q, K, q)


def _midpoint_triples(h=0.3, batch=5):
    g = torch.Generator().manual_seed(0)
    q0 = torch.rand(batch, 2, generator=g, dtype=torch.float64) - 0.5
    q1 = q0 + h * (torch.rand(batch, 2, generator=g, dtype=torch.float64) - 0.5)
    q = VariationalIntegrator(_quadratic, h, "midpoint").solve_from_positions(q0, q1, 2).q
    return torch.stack([q[0], q[1], q[2]], 1)


def test_one_step_error_is_the_position_error_for_a_linear_step():
    """A quadratic L makes the midpoint DEL equation linear in the next position, so one Newton step is
    exact: on triples of the scheme itself the error is 0, and moving the third position by eps gives
    exactly -eps (rounding only: 1e-12)."""
    h = 0.3
    T = _midpoint_triples(h)
    assert one_step_errors(_quadratic, T, h).abs().max() < 1e-12
    eps = torch.tensor([1e-3, -2e-3], dtype=torch.float64)
    moved = T.clone()
    moved[:, 2] += eps
    torch.testing.assert_close(one_step_errors(_quadratic, moved, h), -eps.expand(T.shape[0], 2), rtol=0, atol=1e-12)


def test_position_objective_is_scale_free_and_rejects_a_flat_lagrangian():
    """Residual and Jacobian scale together: 7 L gives the same value; the zero Lagrangian (which satisfies
    every DEL residual) has a singular Jacobian: inf, not an error or a NaN."""
    h = 0.3
    T = _midpoint_triples(h)
    T[:, 2] += 1e-3
    f = position_objective(T, h)
    assert f(lambda q, v: 7.0 * _quadratic(q, v)) == pytest.approx(f(_quadratic), abs=1e-10)
    assert f(lambda q, v: 0.0 * (q * v).sum(-1)) == float("inf")


def test_lgp_has_no_position_objective():
    with pytest.raises(ValueError, match="positions"):
        LagrangianGP(0.1, objective="positions")


def test_positions_objective_avoids_the_collapse_in_n4(monkeypatch):
    """FPU-beta chain, n = 4, 25 trajectories of 5 steps at h = 0.45. The likelihood runs to the shortest
    lengthscales with an outputscale of ~1e-24 (a Lagrangian that is zero away from the normalisation point):
    level-set error of H_rec[2] 0.58 measured (0.73 at 200 trajectories). The positions objective picks long
    lengthscales, longer in the velocities: 0.036 measured (40 trajectories; 0.009 at 200). Bounds: 0.3 for
    the collapse (far from anything identified), 0.1 for the identified energy (3x the measurement)."""
    h = 0.45
    system = integrators.systems.fpu_chain(4, beta=1.0)
    data = snapshots(system, h, 25, 5, domain=[(-0.6, 0.6)] * 8, seed=0)
    g = torch.Generator().manual_seed(1)
    x = 0.42 * (2 * torch.rand(20, 8, generator=g, dtype=torch.float64) - 1)
    states = (x[:, :4].contiguous(), x[:, 4:].contiguous())
    opts = dict(iterations=0, max_train_functionals=1000, progress=False)
    # the objective is the subject: the whole-state kernels' lengthscales (since Session 14 kernel="auto" keeps chain(4)
    # here, at near-polynomial scales: tests/test_learners_structure_choice.py covers the structures)
    monkeypatch.setattr("learners.shadow.structure_choice.scores_structures", lambda model, n: False)
    pos = InverseModifiedLagrangianGP(h, objective="positions", **opts).fit(data)
    ls = torch.tensor(pos.hyperparameters["lengthscale"])
    assert bool((ls[4:] > ls[:4]).all()), ls
    assert level_set_error(pos.energy(2), system.energy, states=states) < 0.1
    mll = InverseModifiedLagrangianGP(h, objective="mll", **opts).fit(data)
    assert level_set_error(mll.energy(2), system.energy, states=states) > 0.3


def test_the_search_solves_each_point_once_and_the_calibration_and_final_solves_symmetrically(monkeypatch):
    """The search's evaluations solve the training functionals with the symmetric assembly (one per candidate --
    trace, whole matrix and, under the default kernel="auto", the mechanical kernel of each degree -- then each
    refinement's); the DEL calibration then solves the best point with the same symmetric assembly (the kept GP's
    last solve in the search reused where it was at that point: the assembly is part of the solve's key; with an
    element kernel that solve may be a part-by-part one of stages 2b-3, element_gram.reusing_parts, under the same
    key and equal to this one to rounding only -- not the case here, an RBF fit), and its coefficients are
    bit for bit those of a fresh GP's symmetric solve with the fitted hyperparameters; one more solve with all data,
    symmetric too, ends the fit (symmetric_covariance: about half the assembly of the full matrix). Before Session
    20 both were full assemblies: the flags below were False and the fresh symmetric solve differs from the full
    one at rounding (torch.equal fails). (Two refinement steps cannot come back to a point, so the refinement's memo
    of solved points plays no part here.)"""
    from learners.shadow import hyperparameters
    from learners.shadow.gp import FunctionalGP

    sizes, seen = [], []
    factor, calibrate = FunctionalGP.factor, hyperparameters.del_calibration
    monkeypatch.setattr(FunctionalGP, "factor",
                        lambda self, F, *a: (sizes.append((F.count, bool(a and a[0]))), factor(self, F, *a))[1])
    monkeypatch.setattr(hyperparameters, "del_calibration",
                        lambda model, F_tr, F_va: (calibrate(model, F_tr, F_va),
                                                   seen.append((F_tr, model.gp._beta.clone(), model.gp.state_dict()))))
    # the principal-direction candidate is a second, separate search (learners/shadow/principal.py): this counts the tied one's
    monkeypatch.setattr("learners.shadow.principal._applies", lambda model, n: False)
    # so are the element structures' screens (learners/shadow/structure_choice.py, tests/test_learners_structure_choice.py)
    monkeypatch.setattr("learners.shadow.structure_choice.scores_structures", lambda model, n: False)
    data = snapshots(integrators.systems.fpu_chain(3, beta=1.0), 0.45, 25, 4, domain=[(-0.6, 0.6)] * 6, seed=0)
    model = InverseModifiedLagrangianGP(0.45, objective="positions", iterations=2, max_train_functionals=90,
                                        progress=False).fit(data)
    per_traj = 3 * 3  # 3 triples of 3 components
    norms = len(model.history["normalisation_values"])
    # the trace, the whole mass matrix (n >= 3), the mechanical kernels (degrees 2, 4) with it and degree 2 with the
    # diagonal condition (auto)
    assert norms == 5
    # each refinement's trace starts with its start; degree 2 is refined with one of its two conditions
    assert {"search", "search_mechanical4"} <= set(model.history)
    assert ("search_mechanical" in model.history) != ("search_mechanical_diagonal" in model.history)
    refined = sum(len(v) - 1 for k, v in model.history.items() if k == "search" or k.startswith("search_mechanical"))
    train = [sym for s, sym in sizes if 20 * per_traj < s < 25 * per_traj]  # 20 training trajectories + a normalisation
    # the search's, then the calibration's unless the kept GP's last solve was at the point kept: the kept candidate's
    # refinement (its trace holds the kept value; each candidate's GP solves last there) ended with its best trial
    kept = model.history["objective"]
    trace, = [v for k, v in model.history.items() if (k == "search" or k.startswith("search_mechanical")) and kept in v]
    reused = trace[-1] == kept  # here not: the RBF's first refinement step is kept, its second trial is worse
    assert train == [True] * (norms + refined + (not reused))
    assert sizes[-1] == (model.gp.train_functionals.count, True) == (25 * per_traj + model._norm_count, True)
    (F_tr, beta, state), = seen
    fresh = model._make_gp(6)
    fresh.load_state_dict(state)
    for p in fresh.parameters():
        p.requires_grad_(False)
    with torch.no_grad():
        assert torch.equal(fresh.condition(F_tr, symmetric=True)._beta, beta)


def test_a_refit_with_fixed_hyperparameters_solves_with_the_full_assembly(monkeypatch):
    """A model fitted by the positions search, then fitted again with its lengthscale fixed: the refit searches
    nothing, so objective_used is None again (not the first fit's "positions") and its final solve assembles the full
    matrix, bit for bit the solve of a fixed-hyperparameter fit (symmetric_covariance). A stale objective_used left
    that solve symmetric."""
    from learners.shadow.gp import FunctionalGP

    flags = []
    factor = FunctionalGP.factor
    monkeypatch.setattr(FunctionalGP, "factor", lambda self, F, *a: (flags.append(bool(a and a[0])), factor(self, F, *a))[1])
    data = snapshots(integrators.systems.fpu_chain(3, beta=1.0), 0.45, 12, 4, domain=[(-0.6, 0.6)] * 6, seed=0)
    model = InverseModifiedLagrangianGP(0.45, objective="positions", kernel="rbf", iterations=1, max_train_functionals=60,
                                        progress=False).fit(data)
    assert model.objective_used == "positions" and flags[-1] and model.gp._factor_symmetric
    model.fixed_lengthscale = 1.0
    flags.clear()
    model.fit(data)
    assert model.objective_used is None and "objective_used" not in model.history and model.calibration == {}
    assert flags == [False] and not model.gp._factor_symmetric  # the final solve alone, full assembly


def test_refinement_solves_a_revisited_point_once():
    """position_search.refine: the step back from an improving move is the point it came from; its value is taken
    from the trace (no second solve) and still counts as an evaluation, so the path is the one without the memo. A
    bowl in (log l_q, log l_v) with its minimum one step (factor 1.5) below the start: the first move reaches it, the
    next sweep tries (-1, -1) again and then (1, 1), the start again (trace[3] == trace[0]); 6 evaluations, 5 solves
    after the start's, all at distinct points."""
    import math

    from learners.shadow.position_search import refine

    calls = []

    def bowl(theta):  # n = 3: theta = (log l_q x 3, log l_v x 3, log rho)
        x, y = float(theta[0]), float(theta[3])
        calls.append((round(x, 9), round(y, 9)))
        return (x - math.log(2.0 / 1.5)) ** 2 + (y - math.log(3.0 / 1.5)) ** 2

    lq, lv, best, trace = refine(bowl, 3, 2.0, 3.0, 6)
    assert len(trace) == 7 and trace[3] == trace[0] and trace[1] == best == pytest.approx(0.0, abs=1e-24)
    assert len(calls) == 6 and len(set(calls)) == 6
    assert (lq, lv) == (pytest.approx(2.0 / 1.5, rel=1e-12), pytest.approx(3.0 / 1.5, rel=1e-12))


def test_a_higher_mechanical_degree_replaces_a_lower_one_only_by_the_margin(monkeypatch):
    """position_search.by_degree: degree 4 is kept over degree 2 only where its refined held-out value is lower by
    DEGREE_MARGIN (the extra velocity freedom is not pinned where the two are level: benchmarks/RESULTS_identification.md,
    Session 10); the lowest degree otherwise, and the value alone decides with the margin at zero."""
    from learners.shadow import position_search as PS

    def cand(val, degree):
        return (1.0, 2.0, val, val, None, None, None, None, degree)

    m = PS.DEGREE_MARGIN
    assert m > 0
    assert PS.by_degree([cand(-10.0, 2), cand(-10.0 - 0.9 * m, 4)])[-1] == 2  # ahead, but by less than the margin
    assert PS.by_degree([cand(-10.0, 2), cand(-10.0 - 1.1 * m, 4)])[-1] == 4
    assert PS.by_degree([cand(-10.0, 2), cand(-9.0, 4)])[-1] == 2
    assert PS.by_degree([cand(-10.0, 4)])[-1] == 4 and PS.by_degree([]) is None
    assert PS.by_degree([cand(-10.0 - 0.9 * m, 4), cand(-10.0, 2)])[-1] == 2  # taken by degree, not in the given order
    monkeypatch.setattr(PS, "DEGREE_MARGIN", 0.0)
    assert PS.by_degree([cand(-10.0, 2), cand(-10.0 - 0.1 * m, 4)])[-1] == 4


def test_the_diagonal_condition_replaces_the_whole_matrix_only_by_the_margin():
    """position_search._with_mechanical: a whole-matrix candidate is added; the diagonal condition's degree-2 candidate
    replaces the whole matrix's of its degree only where its unrefined held-out value is lower by MATRIX_MARGIN, and is
    added where that one was not usable (the whole matrix's degree 4 stays either way); _names gives each its keys."""
    from learners.shadow import position_search as PS

    def entry(full, degree, condition):
        name, _, key = PS._names(2, degree, condition)
        return (1.0, 2.0, full, full, None, None, None, None, degree), name, key, condition

    m = PS.MATRIX_MARGIN
    whole2, whole4 = entry(-10.0, 2, "matrix"), entry(-10.5, 4, "matrix")
    mechs = PS._with_mechanical(PS._with_mechanical([], whole2), whole4)
    assert mechs == [whole2, whole4]
    level = entry(-10.0 - 0.9 * m, 2, "diagonal")
    assert PS._with_mechanical(mechs, level) == [whole2, whole4]  # ahead, but by less than the margin
    better = entry(-10.0 - 1.1 * m, 2, "diagonal")
    assert PS._with_mechanical(mechs, better) == [whole4, better]
    assert PS._with_mechanical([whole4], level) == [whole4, level]  # degree 2 with the whole matrix was not usable
    assert [e[1:3] for e in (whole2, whole4, better)] == [("mechanical2", "search_mechanical"),
                                                         ("mechanical4", "search_mechanical4"),
                                                         ("mechanical2_diagonal", "search_mechanical_diagonal")]
    assert PS._names(0, None, None) == ("trace", "grid", "search") and PS._names(1, None, None)[:2] == ("matrix", "grid_alt")
    # the trace's candidate (MECHANICAL_TRACE, degree TRACE_DEGREE = 4) against the whole matrix's of its degree
    trace = entry(whole4[0][3] - 1.1 * m, 4, "trace")
    assert PS._with_mechanical([better, whole4], entry(whole4[0][3] - 0.9 * m, 4, "trace")) == [better, whole4]
    assert PS._with_mechanical([better, whole4], trace) == [better, trace]
    assert trace[1:3] == ("mechanical4_trace", "search_mechanical4_trace")


def test_the_trace_candidate_is_offered_at_degree_4_and_scored_only_where_the_matrix_is_contradicted():
    """position_search (Session 23, MECHANICAL_TRACE): with ``kernel="auto"`` and the diagonal condition available (n >= 3)
    the candidates end with the mechanical kernel of TRACE_DEGREE = 4 on the trace's normalisation (a q-dependent,
    coupled mass matrix makes the whole matrix and the diagonal false, and L_inv is quartic in v there); it is scored
    only where the RBF's whole matrix AND the diagonal candidate are worse than the RBF's trace by more than MATRIX_MARGIN
    (``contradicted``), so fits with a mass matrix proportional to I or diagonal are unchanged, and refined with
    TRACE_EVALUATIONS = 20 solves."""
    from types import SimpleNamespace

    from learners.shadow import position_search as PS
    from learners.shadow.mechanical import MechanicalKernel

    trace, whole, diagonal = (SimpleNamespace(dim=6, name=k) for k in ("trace", "matrix", "diagonal"))
    model = SimpleNamespace(gp=object(), _kernel_auto=True, _norm_diagonal=diagonal, ard=False, _units_device="cpu")
    cands = PS._candidates(model, trace, whole)
    assert [(c[1].name, c[2], c[3]) for c in cands] == [("trace", None, None), ("matrix", None, None), ("matrix", 2, "matrix"),
                                                       ("matrix", 4, "matrix"), ("diagonal", 2, "diagonal"),
                                                       ("trace", 4, "trace")]
    base = cands[-1][0].kernel.base_kernel
    assert isinstance(base, MechanicalKernel) and base.degree == 4 == PS.TRACE_DEGREE and PS.TRACE_EVALUATIONS == 20
    model._norm_diagonal = None  # n <= 2 or a normalisation given: no matrix choice, no trace candidate
    assert [c[3] for c in PS._candidates(model, trace, whole)] == [None, None, "matrix", "matrix"]
    m = PS.MATRIX_MARGIN

    def history(t, w):
        return {"normalisation_candidates": ["trace", "matrix"], "normalisation_values": [t, w]}
    # triple_pendulum3 seed 0 (-15.18 / -7.35) is contradicted; anharmonic3's level pair (-22.01 / -22.03) is not
    assert PS.contradicted(history(-15.18, -7.35)) and not PS.contradicted(history(-22.01, -22.03))
    assert PS.contradicted(history(-10.0, -10.0 + 1.01 * m)) and not PS.contradicted(history(-10.0, -10.0 + 0.99 * m))
    assert not PS.contradicted(history(-10.0, float("inf"))) and not PS.contradicted({})
    # the diagonal's test, the second gate: triple_pendulum3 seed 0's diagonal candidate (-9.67 against the RBF's
    # -15.18) is refuted; mass_chain_unequal4's (-17.65 against -17.71; its M is diagonal) is not, so the trace's
    # candidate is not scored there (scored, it was kept at 4.9e-3 against the diagonal's 4.6e-4)
    diag = PS._names(0, PS.MECHANICAL_DEGREE, "diagonal")[0]
    assert diag == "mechanical2_diagonal"
    assert PS.contradicted({"normalisation_candidates": ["trace", diag], "normalisation_values": [-15.18, -9.67]}, diag)
    assert not PS.contradicted({"normalisation_candidates": ["trace", diag], "normalisation_values": [-17.71, -17.65]}, diag)
