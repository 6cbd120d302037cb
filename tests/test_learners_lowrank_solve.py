"""The opt-in low-rank solve of FunctionalGP (learners/shadow/lowrank_solve.py): exactness at full rank and at a low
rank that the matrix has, the pivoted Cholesky's residual, refusals, retarget, and the dense path left as it was."""

import pytest
import torch

from bea.errors import BeaValueError
from learners.shadow.functionals import Functionals, point_evaluations, snapshot_functionals
from learners.shadow.gp import FunctionalGP
from learners.shadow.kernels import FunctionalKernel, RBFKernel, SmoothKernel
from learners.shadow.guards import NonFiniteModelError
from learners.shadow.lowrank_solve import LowRankSolver, LowRankWarning, _accept_block, pivoted_cholesky


class _Quadratic(SmoothKernel):
    """k(x, y) = (1 + x.y)^2: rank 1 + D + D(D+1)/2 on any family of functionals (generic autograd blocks)."""

    def pointwise(self, x, y):
        return (1 + (x * y).sum(-1)) ** 2


def _data(traj=6, lengthscale=1.5, noise=1e-6):
    """DEL residuals of random walks (targets 0) and five point values (targets random): the LSI solve's shape."""
    gen = torch.Generator().manual_seed(0)
    S = 0.3 * torch.randn(traj, 6, 2, generator=gen, dtype=torch.float64).cumsum(1)
    F = snapshot_functionals(S, 0.2, "midpoint")[0]
    F.targets = torch.zeros(F.count, dtype=torch.float64)
    P = point_evaluations(torch.randn(5, 4, generator=gen, dtype=torch.float64))
    P.targets = torch.randn(5, generator=gen, dtype=torch.float64)
    base = RBFKernel(ard_num_dims=4)
    base.lengthscale = lengthscale
    gp = FunctionalGP(FunctionalKernel(base), noise=noise).requires_grad_(False)
    return gp, Functionals.cat([F, P]), torch.randn(20, 4, generator=gen, dtype=torch.float64)


def test_full_rank_reproduces_the_dense_mean():
    # tol 0: every functional a pivot, so the subset-of-regressors weights are (Theta + s^2 I)^{-1} y; the relative
    # nugget 1e-6 keeps the condition ~1e6-1e8, so rounding leaves ~1e-10 of the mean's size (1e-8 asked)
    gp, F, x = _data()
    gp.condition(F)
    dense, dense_f = gp.mean(x), gp.functional_mean(F)
    gp.solver = LowRankSolver(tol=0.0, max_rank=10 ** 6, block=7)
    gp.condition(F)
    assert gp.info.extra["rank"] == F.count
    scale = float(dense.abs().max())
    assert float((gp.mean(x) - dense).abs().max()) < 1e-8 * scale
    assert float((gp.functional_mean(F) - dense_f).abs().max()) < 1e-8 * float(F.targets.abs().max())


def test_a_low_rank_covariance_is_reproduced_at_its_rank():
    # (1 + x.y)^2 on R^4 spans 1 + 4 + 10 = 15 functions, so Theta has rank r <= 15 (14 here: one quadratic is annihilated
    # by these functionals), read from its spectrum (a gap of > 1e8); Theta = L L^T exactly at rank r (rounding: 1e-10)
    _, F, _ = _data(traj=4)
    K = FunctionalKernel(_Quadratic()).requires_grad_(False)
    trace = []
    fac = pivoted_cholesky(K, F, tol=1e-12, max_rank=F.count, block=4, trace=trace)
    full = K.forward(F, F).detach()
    ev = torch.linalg.eigvalsh(full).flip(0)
    r = int((ev > 1e-10 * ev[0]).sum())
    assert r <= 15 and float(ev[r - 1]) > 1e8 * float(ev[r].abs())
    assert fac.rank == r
    assert float((fac.L @ fac.L.T - full).abs().max()) < 1e-10 * float(full.diagonal().max())
    # exact on the pivots' rows: L_m L_m^T = Theta_mm, L_m lower triangular
    Lm = fac.L[fac.pivots]
    assert torch.equal(Lm, torch.tril(Lm))
    # the residual trace never increases and ends at rounding
    assert all(b <= a * (1 + 1e-12) for a, b in zip(trace, trace[1:]))
    assert trace[-1] < 1e-10 * float(full.diagonal().sum())


def test_the_residual_decreases_and_the_mean_converges_with_the_tolerance():
    # 101 functionals on R^4, lengthscale 3: the ranks 32, 53, 79, 96 and the mean's error 0.98, 0.83, 0.38, 0.014 of its
    # size (measured); asserted: ranks increase with a smaller tol and the last error is < 1/10 of the first
    gp, F, x = _data(traj=12, lengthscale=3.0)
    gp.condition(F)
    dense = gp.mean(x)
    errors, ranks = [], []
    for tol in (1e-1, 1e-2, 1e-3, 1e-4):
        gp.solver = LowRankSolver(tol=tol, max_rank=10 ** 6)
        gp.condition(F)
        assert gp.info.extra["relative_residual"] <= tol
        ranks.append(gp.info.extra["rank"])
        errors.append(float((gp.mean(x) - dense).abs().max()))
    assert all(a < b for a, b in zip(ranks, ranks[1:])) and ranks[-1] < F.count
    assert errors[-1] < 0.1 * errors[0]


def test_retarget_equals_a_new_solve():
    gp, F, x = _data()
    gp.solver = LowRankSolver(tol=1e-9)
    y = torch.linspace(-1, 1, F.count, dtype=torch.float64)
    gp.condition(F)
    gp.retarget(y)
    again = gp.mean(x)
    gp.condition(F, targets=y)
    assert float((gp.mean(x) - again).abs().max()) < 1e-10 * float(again.abs().max())


def test_std_and_gradients_are_refused_and_dense_comes_back():
    gp, F, x = _data()
    gp.solver = LowRankSolver(tol=1e-9)
    gp.condition(F)
    for call in (lambda: gp.variance(x), lambda: gp.functional_posterior(F), lambda: gp._chol):
        with pytest.raises(BeaValueError, match="dense solve"):
            call()
    gp.solver = None  # the same functionals and hyperparameters: solved again, densely (not the low-rank key)
    gp.condition(F)
    assert gp._chol is not None and bool((gp.variance(x) >= 0).all())
    gp.requires_grad_(True)
    gp.solver = LowRankSolver()
    with pytest.raises(BeaValueError, match="not differentiable"):
        gp.condition(F)


def test_the_rank_cap_warns_and_bad_options_are_refused():
    gp, F, _ = _data()
    gp.solver = LowRankSolver(tol=1e-12, max_rank=10)
    with pytest.warns(LowRankWarning, match="rank cap 10"):
        gp.condition(F)
    assert gp.info.extra["rank"] == 10
    with pytest.raises(BeaValueError):
        LowRankSolver(tol=1.0)


def _explicit_dense_weights(gp):
    """A fitted model's dense weights written out here (Theta assembled and symmetrised, s^2 on its diagonal, Cholesky,
    then its solve), not through FunctionalGP.factor: a default fit's weights equal them bit for bit."""
    G = gp.train_functionals
    with torch.no_grad():
        K = gp.kernel.forward(G, G)
        A = 0.5 * (K + K.T)
        A.diagonal().add_(gp.noise)
        return torch.cholesky_solve(G.targets[:, None], torch.linalg.cholesky(A))[:, 0]


def test_the_models_final_solve_opts_in_and_the_default_is_unchanged(monkeypatch):
    # a pendulum with fixed hyperparameters (no search: the final solve only); tol 0 is the full-rank solve, equal to the
    # dense one up to rounding amplified by the condition of the nugget-regularised system (relative nugget 1e-10):
    # measured 1.4e-9 of the energy's range, asked 1e-7
    import integrators
    from integrators.data import snapshots
    from integrators.newton import ConvergenceError
    from learners import InverseModifiedLagrangianGP
    from learners.shadow import lsi

    S = snapshots(integrators.systems.pendulum(), 0.5, 12, 5, seed=0)
    q = torch.linspace(-1.0, 1.0, 9, dtype=torch.float64)[:, None]
    v = torch.linspace(-0.8, 0.8, 9, dtype=torch.float64)[:, None]
    dense = InverseModifiedLagrangianGP(0.5, lengthscale=[1.8, 4.0], noise=1e-10).fit(S)
    assert dense.gp.solver is None and torch.equal(_explicit_dense_weights(dense.gp), dense.gp._beta)
    low = InverseModifiedLagrangianGP(0.5, lengthscale=[1.8, 4.0], noise=1e-10, final_solver=LowRankSolver(tol=0.0)).fit(S)
    assert low.gp.info.extra["rank"] == low.gp.train_functionals.count
    E0, E1 = dense.energy(2)(q, v).detach(), low.energy(2)(q, v).detach()
    assert float((E1 - E0).abs().max()) < 1e-7 * float(E0.max() - E0.min())
    with pytest.raises(BeaValueError, match="dense solve"):
        low.energy(2, return_std=True)(q, v)
    assert low.gp.mean_functionals.count == low.gp.info.extra["rank"]  # what the energy's chunks count
    # predict: no std, so its extrapolation check is skipped with a warning; the positions are the dense model's (1e-6)
    q0, v0 = q[3:6], v[3:6]
    with pytest.warns(LowRankWarning, match="extrapolation check"):
        path = low.predict(q0, v0, 4)
    assert float((path.q - dense.predict(q0, v0, 4, on_extrapolation="ignore").q).abs().max()) < 1e-6
    with pytest.raises(BeaValueError, match="dense solve"):
        low.predict(q0, v0, 4, return_std=True)

    def fails(*args, **kwargs):
        raise ConvergenceError("Newton did not converge (test)")

    monkeypatch.setattr(lsi, "solve_with_retry", fails)  # a failed solve's own error, not the std refusal
    with pytest.raises(ConvergenceError, match="did not converge"):
        low.predict(q0, v0, 4)


def test_the_element_kernels_columns_give_its_covariance():
    # the element kernel's columns against its dense assembly at a truncating tol (lengthscale 4: rank 119 of 144 at
    # tol 1e-3, measured). The residual E = Theta - L L^T is positive semi-definite with diagonal r_i <= tol d_i, so
    # |E_ij| <= sqrt(r_i r_j) <= tol max d (measured 0.97 of it); rounding allowance 1e-12 max d
    from learners.shadow import ElementKernel

    gen = torch.Generator().manual_seed(1)
    S = 0.3 * torch.randn(12, 6, 3, generator=gen, dtype=torch.float64).cumsum(1)
    F = snapshot_functionals(S, 0.2, "midpoint")[0]
    base = ElementKernel.chain(3).to(torch.float64)
    base.lengthscale = 4.0
    K = FunctionalKernel(base).requires_grad_(False)
    with torch.no_grad():
        full = K.forward(F, F)
        fac = pivoted_cholesky(K, F, tol=1e-3, max_rank=F.count, block=5)
    E, dmax = full - fac.L @ fac.L.T, float(full.diagonal().max())
    assert 0 < fac.rank < F.count and fac.relative_residual <= 1e-3
    assert float(E.abs().max()) <= (1e-3 + 1e-12) * dmax
    assert float(torch.linalg.eigvalsh(E).min()) > -1e-12 * dmax


def test_a_partial_rank_mean_is_the_subset_of_regressors_mean():
    # tol 1e-3 (rank 78 of 101, blocks of 16: several blocks) against the SoR mean written out from Theta's pivot columns:
    # alpha = Theta_mm^{-1/2} gamma, gamma the least squares of [Theta_Fm C^{-T}; s I] gamma = [y; 0] (C C^T = Theta_mm);
    # both are backward stable at condition ~1e4-1e6: they agree to 3e-13 of the mean (measured; 1e-8 asked)
    gp, F, x = _data(traj=12, lengthscale=3.0)
    gp.solver = LowRankSolver(tol=1e-3, max_rank=10 ** 6, block=16)
    gp.condition(F)
    piv = gp._lowrank.factor.pivots
    assert 16 < piv.numel() < F.count
    with torch.no_grad():
        Fm = F.subset(piv)
        K_Fm = gp.kernel.forward(F, Fm)
        C = torch.linalg.cholesky(K_Fm[piv])
        B = torch.linalg.solve_triangular(C, K_Fm.T, upper=False).T
        s = float(gp.noise) ** 0.5
        A = torch.cat([B, s * torch.eye(piv.numel(), dtype=torch.float64)])
        Q, R = torch.linalg.qr(A)
        rhs = torch.cat([F.targets, torch.zeros(piv.numel(), dtype=torch.float64)])
        gamma = torch.linalg.solve_triangular(R, Q.T @ rhs[:, None], upper=True)
        alpha = torch.linalg.solve_triangular(C.T, gamma, upper=True)[:, 0]
        ref = gp.kernel.forward(point_evaluations(x), Fm) @ alpha
    assert float((gp.mean(x) - ref).abs().max()) < 1e-8 * float(ref.abs().max())


def test_non_finite_kernel_values_are_refused(monkeypatch):
    # a NaN compares False with every threshold: unchecked, the pivoting stopped at rank 0 and gave a zero mean
    gp, F, _ = _data()
    gp.solver = LowRankSolver()
    diagonal, forward = gp.kernel.diagonal, gp.kernel.forward
    monkeypatch.setattr(gp.kernel, "diagonal", lambda G: diagonal(G).index_fill(0, torch.tensor([3]), float("nan")))
    with pytest.raises(NonFiniteModelError, match="diagonal"):
        gp.condition(F)
    with torch.no_grad():
        d = diagonal(F)
    monkeypatch.setattr(gp.kernel, "diagonal", lambda G: d)  # finite (the diagonal is assembled through forward)
    monkeypatch.setattr(gp.kernel, "forward", lambda G, H: forward(G, H) * float("nan"))
    with pytest.raises(NonFiniteModelError, match="pivot columns"):
        gp.condition(F)


def test_a_non_positive_pivot_is_zeroed_and_the_block_goes_on():
    # candidate 0's column says its residual is gone (pivot -1e-16 < 0: rounding) though r[0] = 1: r[0] -> 0 and candidate 1
    # (an exact unit column) is still pivoted; the old rule stopped the block there, leaving r[0] = 1 > tol
    d = torch.ones(3, dtype=torch.float64)
    r, L, piv = d.clone(), torch.zeros(3, 2, dtype=torch.float64), []
    C = torch.tensor([[-1e-16, 0.0], [0.0, 1.0], [0.0, 0.0]], dtype=torch.float64)
    _accept_block(C, torch.tensor([0, 1]), L, r, d, piv, 1e-12, None)
    assert piv == [1] and r.tolist() == [0.0, 0.0, 1.0] and L[:, 0].tolist() == [0.0, 1.0, 0.0]


def test_retarget_at_another_noise_solves_again():
    # R = qr([L; s I]) holds the noise: at a new noise the posterior is re-solved, equal to a fresh solve (rounding);
    # the stale R (noise 1e-6) would be off by 6x the mean here (measured; asserted > 1e-6 of it)
    gp, F, x = _data()
    gp.solver = LowRankSolver(tol=1e-9)
    y = torch.linspace(-1, 1, F.count, dtype=torch.float64)
    gp.condition(F)
    stale = gp._lowrank
    gp.likelihood.noise = 1e-2
    gp.retarget(y)
    again = gp.mean(x)
    assert gp._lowrank is not stale and gp._lowrank.noise == pytest.approx(1e-2)
    stale_mean = gp.kernel.forward(point_evaluations(x), stale.functionals) @ stale.weights(y, float(gp.noise))
    gp.condition(F, targets=y)
    assert float((gp.mean(x) - again).abs().max()) < 1e-10 * float(again.abs().max())
    assert float((stale_mean - again).abs().max()) > 1e-6 * float(again.abs().max())


def test_the_noise_relative_stop():
    # relative_to="noise": every residual variance ends below tol sigma_n^2 (here ~1e-6, tol 1: each functional's
    # unexplained prior variance below its noise variance), at a rank below F (measured 99 of 101, sum r / sigma^2
    # 1.5); tol >= 1 allowed; a zero noise is refused (the mean's QR and the stop divide by it)
    gp, F, x = _data(traj=12, lengthscale=3.0)
    gp.solver = LowRankSolver(tol=1.0, relative_to="noise")
    gp.condition(F)
    fac, noise = gp._lowrank.factor, float(gp.noise)
    assert float(fac.residual.max()) <= noise and 0 < fac.rank < F.count
    assert gp.info.extra["residual_over_noise"] == pytest.approx(float(fac.residual.sum()) / noise)
    with pytest.raises(BeaValueError, match="relative_to"):
        LowRankSolver(relative_to="nugget")
    with pytest.raises(BeaValueError, match="positive noise"):
        LowRankSolver(relative_to="noise").solve(gp.kernel, F, F.targets, 0.0)


def test_a_searched_low_rank_fit_refuses_the_std_before_any_calibration_solve(monkeypatch):
    # with the search, the energy calibrations are pending until the first std: their folds are dense solves of most of
    # the data (at F = 2e4 about 110 s and 3.9 GB each), so the refusal must come first
    import integrators
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP
    from learners.shadow import difference_calibration

    model = InverseModifiedLagrangianGP(0.5, progress=False, final_solver=LowRankSolver())
    model.fit(snapshots(integrators.systems.pendulum(), 0.5, 8, 5, seed=0))
    assert model._pending_calibration is not None
    folds = []
    monkeypatch.setattr(difference_calibration, "_conditioned", lambda *a: folds.append(a))
    q = torch.zeros(3, 1, dtype=torch.float64)
    with pytest.raises(BeaValueError, match="dense solve"):
        model.energy(2, return_std=True)(q, q + 0.1)
    with pytest.raises(BeaValueError, match="dense solve"):
        model.calibration
    assert folds == [] and model._pending_calibration is not None


def test_final_solver_is_a_constructor_argument_and_the_attribute_still_works(tmp_path):
    # the pendulum of the test above (fixed hyperparameters: the final solve only). The constructor's solver and the
    # deprecated attribute run the same code on the same data, so their means agree to rounding (1e-12 of the mean's
    # range asked; bit-equal expected); final_solver=None given is the dense solve, its weights the explicit Cholesky's
    import integrators
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP, saving

    S = snapshots(integrators.systems.pendulum(), 0.5, 12, 5, seed=0)
    q = torch.linspace(-1.0, 1.0, 9, dtype=torch.float64)[:, None]
    v = torch.linspace(-0.8, 0.8, 9, dtype=torch.float64)[:, None]
    fixed = dict(lengthscale=[1.8, 4.0], noise=1e-10)
    low = InverseModifiedLagrangianGP(0.5, **fixed, final_solver=LowRankSolver(tol=0.0)).fit(S)
    old = InverseModifiedLagrangianGP(0.5, **fixed)
    with pytest.warns(DeprecationWarning, match=r"final_solver=LowRankSolver\(tol=0.0") as caught:
        old.final_solver = LowRankSolver(tol=0.0)
    assert caught[0].filename == __file__  # names the user's line, not the setter's
    assert old.final_solver == LowRankSolver(tol=0.0) and old.gp is None  # stored, applied at fit
    old.fit(S)
    assert low.gp._lowrank is not None and old.gp._lowrank is not None
    L_low, L_old = low(q, v).detach(), old(q, v).detach()
    assert float((L_low - L_old).abs().max()) <= 1e-12 * float(L_low.max() - L_low.min())
    none = InverseModifiedLagrangianGP(0.5, **fixed, final_solver=None).fit(S)
    assert none.gp._lowrank is None and torch.equal(none.gp._beta, _explicit_dense_weights(none.gp))
    # saving: a low-rank posterior has no dense factor, so it is refused, saying why; a dense model's file leaves the
    # argument out (readable by code from before it) and loads back with the default, predicting the same numbers
    with pytest.raises(saving.ModelFileError, match="final solve was low-rank.*final_solver=None"):
        low.save(tmp_path / "low.pt")
    path = none.save(tmp_path / "none.pt")
    config, _ = saving.read(path, InverseModifiedLagrangianGP)
    assert "final_solver" not in config and config["noise"] == 1e-10
    loaded = InverseModifiedLagrangianGP.load(path)
    assert loaded.final_solver is None and torch.equal(loaded(q, v), none(q, v))
    # moving (.cpu(), .to(): persist.move) a low-rank model is refused as before the argument, by the missing dense
    # factor, not by the save refusal, and leaves the model as it was
    with pytest.raises(BeaValueError, match="no dense factor"):
        low.cpu()
    assert low.gp._lowrank is not None and torch.equal(low(q, v).detach(), L_low)


def test_a_final_solver_that_is_not_a_solver_is_refused():
    from bea.errors import BeaTypeError
    from learners import InverseModifiedLagrangianGP, LagrangianGP

    for cls in (InverseModifiedLagrangianGP, LagrangianGP):
        for wrong in ("lowrank", LowRankSolver, 1e-12, True):
            with pytest.raises(BeaTypeError, match="final_solver must be None .* or a learners.shadow.LowRankSolver"):
                cls(0.5, final_solver=wrong)
        model = cls(0.5)
        with pytest.raises(BeaTypeError, match="final_solver must be None"):
            model.final_solver = "lowrank"
        assert model.final_solver is None
    # constructed with a LowRankSolver: the model keeps it; a different attribute is refused, not dropped or applied
    model = InverseModifiedLagrangianGP(0.5, final_solver=LowRankSolver())
    with pytest.raises(BeaValueError, match="constructed with final_solver=LowRankSolver.*constructor's value wins"):
        model.final_solver = None
    assert model.final_solver == LowRankSolver()
    with pytest.warns(DeprecationWarning):
        model.final_solver = LowRankSolver()  # the same solver: allowed
    # an instance from before the argument (old pickle, deepcopy) has no _final_solver: its old attribute, else None
    del model.__dict__["_final_solver"]
    assert model.final_solver is None
    model.__dict__["final_solver"] = LowRankSolver(tol=0.0)
    assert model.final_solver == LowRankSolver(tol=0.0)
