"""One default for every n (issue 23, items 1, 2): ``InverseModifiedLagrangianGP(h).fit(q)`` with nothing chosen.

``objective="auto"`` is the likelihood for n <= 2 (results identical to ``objective="mll"``), with a guard that
switches to the positions objective if the likelihood collapses, and the positions objective for n >= 3. The
energy std is calibrated on energy conservation along held-back trajectories (learners/shadow/calibration.py).
The systems here (an anharmonic oscillator with cubic couplings, n = 3; a chain with position-dependent masses and
a softened two-body problem, n = 4) appear nowhere else in the suite; the full-size acceptance is under -m slow."""

import copy
import math
import warnings

import pytest
import sympy
import torch

import bea
import integrators
from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP
from learners.shadow import hyperparameter_search
from learners.shadow.calibration import TARGET_COVERAGE, TARGET_Z, scale_for
from learners.shadow.hyperparameters import IdentifiabilityWarning
from learners.shadow.normalisation import MassNormalisation


def anharmonic3():
    q = sympy.symbols("q0:3", real=True)
    v = sympy.symbols("v0:3", real=True)
    V = (q[0]**2 + 1.5 * q[1]**2 + 2 * q[2]**2) / 2 + 0.4 * q[0] * q[1] * q[2] + 0.3 * q[0]**2 * q[1] - 0.2 * q[1] * q[2]**2
    return integrators.systems.from_sympy(sum(x**2 for x in v) / 2 - V, q, v, "anharmonic3", domain=[(-0.6, 0.6)] * 6)


def mass_chain4():
    """Four masses on springs between fixed ends, each with a position-dependent mass 1 + 0.3 q_i^2."""
    q = sympy.symbols("q0:4", real=True)
    v = sympy.symbols("v0:4", real=True)
    ext = [0, *q, 0]
    T = sum((1 + sympy.Rational(3, 10) * q[i]**2) * v[i]**2 / 2 for i in range(4))
    V = sum((ext[i + 1] - ext[i])**2 / 2 for i in range(5)) + sum(x**4 for x in q) / 10
    return integrators.systems.from_sympy(T - V, q, v, "mass_chain4", domain=[(-0.6, 0.6)] * 8)


def two_body4():
    """Two unit masses in the plane, softened attraction 1/sqrt(r^2 + 1/2), in a weak harmonic trap."""
    q = sympy.symbols("x1 y1 x2 y2", real=True)
    v = sympy.symbols("u1 w1 u2 w2", real=True)
    r2 = (q[0] - q[2])**2 + (q[1] - q[3])**2 + sympy.Rational(1, 2)
    L = sum(x**2 for x in v) / 2 + 1 / sympy.sqrt(r2) - sum(x**2 for x in q) / 10
    return integrators.systems.from_sympy(L, q, v, "two_body4", domain=[(-0.8, 0.8)] * 4 + [(-0.4, 0.4)] * 4)


def duffing3():
    """Three Duffing oscillators (hardening quartic) coupled by linear springs to their neighbours: no suite test
    or tuning has used it (issue 23 follow-up: a system nobody tuned on)."""
    q = sympy.symbols("q0:3", real=True)
    v = sympy.symbols("v0:3", real=True)
    V = sum(x**2 / 2 + x**4 / 4 for x in q) + sympy.Rational(1, 2) * ((q[0] - q[1])**2 + (q[1] - q[2])**2) / 2
    return integrators.systems.from_sympy(sum(x**2 for x in v) / 2 - V, q, v, "duffing3", domain=[(-0.7, 0.7)] * 6)


def _toda(k):
    """``k`` unit masses of a Toda lattice between fixed walls, exponential springs e^x - 1 - x."""
    q = sympy.symbols(f"q0:{k}", real=True)
    v = sympy.symbols(f"v0:{k}", real=True)
    ext = [0, *q, 0]
    V = sum(sympy.exp(ext[i + 1] - ext[i]) - 1 - (ext[i + 1] - ext[i]) for i in range(k + 1))
    return integrators.systems.from_sympy(sum(x**2 for x in v) / 2 - V, q, v, f"toda{k}", domain=[(-0.6, 0.6)] * (2 * k))


def toda3():
    """Three particles of a Toda lattice between fixed walls (exponential nearest-neighbour forces): the untuned check
    of the energy-difference calibration (never used while it was built)."""
    return _toda(3)


def toda4():
    """A Toda lattice of four unit masses between fixed ends, exponential springs e^x - 1 - x: invented for issue 23's
    accuracy work (branch id-acc) as the system nobody tuned on, measured only after the changes were chosen."""
    return _toda(4)


def morse3():
    """Three unit masses between fixed walls joined by Morse bonds (1 - exp(-1.2 r))^2: invented for the calibration
    work of issue 23 (branch id-cal) as its untuned check, measured only after the estimators were written."""
    q = sympy.symbols("q0:3", real=True)
    v = sympy.symbols("v0:3", real=True)
    ext = [0, *q, 0]
    V = sum((1 - sympy.exp(-sympy.Rational(6, 5) * (ext[i + 1] - ext[i])))**2 for i in range(4))
    return integrators.systems.from_sympy(sum(x**2 for x in v) / 2 - V, q, v, "morse3", domain=[(-0.5, 0.5)] * 6)


def held_out_states(system, count, seed=11):
    """``count + 1`` states in the middle 70% of the system's box; the first is the reference."""
    n, box = system.n, system.domain
    g = torch.Generator().manual_seed(seed)
    lo = torch.tensor([b[0] for b in box], dtype=torch.float64)
    hi = torch.tensor([b[1] for b in box], dtype=torch.float64)
    x = lo + (0.15 + 0.7 * torch.rand(count + 1, 2 * n, generator=g, dtype=torch.float64)) * (hi - lo)
    return x[:, :n].contiguous(), x[:, n:].contiguous()


def energy_differences(model, system, order, count=40, return_std=True):
    """Relative error of H_rec[order] differences to a reference state after the best fit of scale (least squares),
    and the z-scores of those differences with the model's std (None without ``return_std``)."""
    q, v = held_out_states(system, count)
    true = (system.energy(q[1:], v[1:]) - system.energy(q[:1], v[:1])).detach()
    if return_std:
        mean, std = model.energy(order, return_std=True, reference=(q[0], v[0]))(q[1:], v[1:])
    else:
        H = model.energy(order)
        mean, std = (H(q[1:], v[1:]) - H(q[:1], v[:1])).detach(), None
    s = float((mean * true).sum() / (true * true).sum())
    rel = float((mean - s * true).norm() / (s * true).norm())
    return rel, None if std is None else (mean - s * true) / std


def test_auto_is_the_likelihood_for_n_le_2():
    """Pendulum: the default gives the same hyperparameters as objective='mll', to the last bit (the README's
    pendulum and Henon-Heiles numbers are those of the likelihood), and reports it."""
    data = snapshots(integrators.systems.pendulum(), 0.5, 30, 5, seed=0)
    opts = dict(iterations=8, max_train_functionals=400, progress=False)
    auto = InverseModifiedLagrangianGP(0.5, **opts).fit(data)
    mll = InverseModifiedLagrangianGP(0.5, objective="mll", **opts).fit(data)
    assert auto.objective_used == "mll"
    assert auto.hyperparameters == mll.hyperparameters
    assert torch.equal(auto.gp._beta, mll.gp._beta)


def test_collapse_guard_switches_to_positions(monkeypatch):
    """The guard's wiring: with the collapse threshold raised above any outputscale, the pendulum's likelihood
    counts as collapsed, and the default warns and learns with the positions objective instead."""
    monkeypatch.setattr(hyperparameter_search, "COLLAPSE_OUTPUTSCALE", math.inf)
    data = snapshots(integrators.systems.pendulum(), 0.5, 30, 5, seed=0)
    with pytest.warns(IdentifiabilityWarning, match="collapsed"):
        m = InverseModifiedLagrangianGP(0.5, iterations=2, max_train_functionals=400, progress=False).fit(data)
    assert m.objective_used == "positions"
    assert m.history["objective"] < -10  # a working fit: one-step errors ~1e-3 of the standardised spread or less


def test_scale_for_recovers_a_known_scale():
    """Gaussian errors with variance 7 v (v known): the fitted scale is 7 within 15% (2,000 samples: the 90%
    quantile's standard error is ~3%); with a truncation term five times the errors it alone covers them and the
    scale falls to the floor of the bisection (1e-12 of the raw scale)."""
    g = torch.Generator().manual_seed(0)
    v = torch.rand(2000, generator=g, dtype=torch.float64) + 0.5
    err = torch.randn(2000, generator=g, dtype=torch.float64) * (7 * v).sqrt()
    s = scale_for(err, v, torch.zeros_like(v))
    assert abs(s / 7 - 1) < 0.15
    z = err.abs() / (s * v).sqrt()
    assert float(torch.quantile(z, TARGET_COVERAGE)) == pytest.approx(TARGET_Z, rel=1e-6)
    assert scale_for(err, v, 5 * err.abs() + 1e-3) < 1e-9


@pytest.fixture(scope="module")
def _anharmonic_fit():
    """anharmonic3, 40 trajectories, library defaults, its calibration pending: fitted once for the module (its fit is
    the module's largest cost) and never handed out itself -- each user gets a deep copy (a calibration or a patched
    entry on a copy leaves this one as the fit left it)."""
    system = anharmonic3()
    data = snapshots(system, 0.2, 40, 5, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IdentifiabilityWarning)
        model = InverseModifiedLagrangianGP(0.2, progress=False).fit(data)
    return system, model


@pytest.fixture(scope="module")
def anharmonic(_anharmonic_fit):
    """The module's shared fit (its tests calibrate it once and read it; they patch it only through monkeypatch)."""
    system, model = _anharmonic_fit
    return system, copy.deepcopy(model)


@pytest.fixture
def fresh_anharmonic(_anharmonic_fit):
    """A copy of the same fit for one test alone, its calibration still pending (as a fit of its own would leave it)."""
    system, model = _anharmonic_fit
    model = copy.deepcopy(model)
    assert model._pending_calibration is not None
    return system, model


def test_auto_is_positions_for_n3_and_identifies(anharmonic):
    """n = 3, 40 trajectories (CI size; 120 under -m slow), library defaults: the positions objective, one position
    and one (longer) velocity lengthscale, and H_rec[2] differences at 40 held-out states within REL of the true
    ones after the best scale (measured 1.59e-4 with the default's mechanical kernel, which this fit keeps, and the
    mass-matrix target; 1.26e-3 with the RBF; bound 3e-3 = the issue's criterion at n <= 4 with 100-200
    trajectories; the likelihood's collapse gave 10 at 120 trajectories). Held-out one-step position error 1.5e-4 of
    a step (warning limit 0.05)."""
    system, m = anharmonic
    assert m.objective_used == "positions"
    ls = torch.tensor(m.hyperparameters["lengthscale"])
    assert bool((ls[3:] > ls[:3]).all())
    rel, _ = energy_differences(m, system, 2, return_std=False)
    assert rel < 3e-3, rel
    assert m.history["one_step_relative_error"] < 5e-3


def _calibrate(m) -> None:
    """Run a model's pending calibration without its order-4 warning (test_energy_calibration_is_reported_and_used
    asserts that warning), so a test that only reads numbers passes alone as in the module's order."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IdentifiabilityWarning)
        m.calibration


def test_energy_calibration_is_reported_and_used(anharmonic):
    """model.calibration: the DEL, conservation ("energy") and distant-difference ("energy_differences") calibrations
    with their held-back diagnostics. The conservation scale is at least the DEL one; the innovations' scale is the
    one they ask for (no floor). Each fitted scale puts 90% of its own |z| below 1.645, so each coverage is >= 0.85
    (measured at 40 trajectories, the mechanical kernel kept: conservation 0.90, RMS z 1.08 on 40 differences;
    innovations 0.956, RMS z 0.93 on 296); the order-4 warning (the first omitted term of mod_2 is below the GP's
    std)."""
    _, m = anharmonic
    with pytest.warns(IdentifiabilityWarning, match="H_rec\\[4\\] will be no more accurate"):
        cal = m.calibration
    assert set(cal) == {"del", "energy", "energy_differences"}
    e, d = cal["energy"], cal["energy_differences"]
    assert e.count >= 10 and 0.85 <= e.coverage <= 1.0 and 0.3 <= e.rms_z <= 3.0, e
    # 5 folds x 60 pairs, less those within rounding (measured: 4 of 300 left out, scale 136)
    assert 270 <= d.count <= 5 * 60 and 0.85 <= d.coverage <= 1.0 and 0.3 <= d.rms_z <= 1.5, d
    assert e.scale >= cal["del"].scale * (1 - 1e-12)
    assert m._variance_factor("energy") == pytest.approx(e.scale / cal["del"].scale, rel=1e-12)
    assert m._variance_factor("energy_differences") == pytest.approx(d.scale / cal["del"].scale, rel=1e-12)


def test_one_energy_calibration_failing_leaves_the_other(fresh_anharmonic, monkeypatch):
    """The conservation calibration (energies, velocities) and the distant-difference one (energy) serve different
    quantities: when the second fails, the first is still stored and used, and the failure is recorded under its own
    key (one try around both dropped the conservation scale too)."""
    from learners.shadow import calibration as C

    def broken(model):
        raise RuntimeError("a failing innovation solve")

    m = fresh_anharmonic[1]  # the fit of anharmonic3 at 40 trajectories, its calibration pending
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IdentifiabilityWarning)
        monkeypatch.setattr(C, "difference_calibration", broken)
        cal = m.calibration
    assert "energy" in cal and "energy_differences" not in cal
    assert "energy_differences_calibration_error" in m.history and "energy_calibration_error" not in m.history
    assert m._variance_factor("energy") == pytest.approx(cal["energy"].scale / cal["del"].scale, rel=1e-12)


def test_energy_resolution_is_recorded_and_warns_above_its_limit(fresh_anharmonic, monkeypatch):
    """identifiability.check_energy, run with the energy calibration: the calibrated std of energy differences
    between held-back states relative to their size is recorded (anharmonic3, 40 trajectories: far below the 1% limit,
    no such warning); with the limit lowered below it the same check on the same fit warns, naming the remedy of the
    calibration's truncation ratio (here below 1: the GP's error dominates, so more trajectories)."""
    from learners.shadow import identifiability as I

    m = fresh_anharmonic[1]  # the fit of anharmonic3 at 40 trajectories, its calibration pending
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", IdentifiabilityWarning)
        held = m._pending_calibration[1]
        m.calibration
    rel = m.history["energy_resolution"]
    assert 0 < rel < 1e-2 and not [w for w in caught if "energy is poorly determined" in str(w.message)], rel
    monkeypatch.setattr(I, "ENERGY_LIMIT", 0.0)
    with pytest.warns(IdentifiabilityWarning, match="energy is poorly determined") as caught:
        I.check_energy(m, held)
    assert len(caught) == 1 and "calibrated std" in str(caught[0].message) and "more trajectories" in str(caught[0].message)
    assert m.history["energy_resolution"] == rel  # the same states, the same calibrated std


def test_each_quantity_uses_its_own_scale(anharmonic, monkeypatch):
    """energy(N)(q, v) at given states takes the distant-difference scale, velocities (along positions, through the
    discrete momenta) the conservation one: quadrupling one scale doubles the GP std of its own quantity exactly and
    leaves the other's unchanged (learners/shadow/calibration.py: the largest of the scales for everything made the
    mechanical kernel's energy std too wide)."""
    from dataclasses import replace

    system, m = anharmonic
    _calibrate(m)  # run the pending calibration before patching its entries
    q, v = held_out_states(system, 3)
    qs = snapshots(system, 0.2, 1, 3, seed=3).transpose(0, 1)  # (4, 1, n), time first

    def stds():
        _, se = m.energy(2, return_std=True, reference=(q[0], v[0]), truncation=False)(q[1:], v[1:])
        _, sv = m.velocities(qs, 2, return_std=True, truncation=False)
        return se, sv[1:-1]

    se, sv = stds()
    cal = dict(m._calibration)
    d = cal["energy_differences"]
    monkeypatch.setitem(m._calibration, "energy_differences", replace(d, scale=4 * d.scale))
    se4, sv4 = stds()
    assert torch.allclose(se4, 2 * se, rtol=1e-12, atol=0) and torch.equal(sv4, sv)
    monkeypatch.setitem(m._calibration, "energy", replace(cal["energy"], scale=4 * cal["energy"].scale))
    monkeypatch.delitem(m._calibration, "energy_differences")  # without folds energy falls back to the conservation scale
    se4, sv4 = stds()
    assert torch.allclose(se4, 2 * se * (cal["energy"].scale / d.scale) ** 0.5, rtol=1e-12, atol=0)
    assert torch.allclose(sv4, 2 * sv, rtol=1e-12, atol=0)


def test_energy_differences_calibrated_at_ci_size(anharmonic):
    """Issue 23, item 2 at CI size (n = 3, 40 trajectories, defaults): the std of H_rec[2] differences between 40
    held-out states spread over the box and a reference state. Measured with the mechanical kernel the fit keeps:
    RMS z 1.10, 90% within 2 sigma (target 0.5-1.5, 85-99%). The conservation scale asks for 2.4x the innovations'
    here (321 against 136), which would make these stds 1.5x wider: each quantity takes its own scale (120
    trajectories: -m slow, test_acceptance_energy_calibration)."""
    system, m = anharmonic
    _calibrate(m)
    _, z = energy_differences(m, system, 2)
    assert 0.5 <= float(z.pow(2).mean().sqrt()) <= 1.5, z
    assert 0.85 <= float((z.abs() <= 2).double().mean()) <= 0.99, z


def test_energy_std_takes_the_unit_free_truncation_term(anharmonic):
    """n >= 3: energy(N, return_std=True)'s std is its GP part and the first omitted term H_rec[4] - H_rec[2] less its
    part affine in the energy (learners/shadow/truncation.py) in quadrature -- checked against the term formed by hand
    (1e-6: the two routes to H_rec[4] agree to rounding of energies 1e5x larger than the term) and not the whole term
    (which differs by more than 1e-3 here)."""
    from learners.shadow.truncation import energy_unit_fit, unit_free

    system, m = anharmonic
    q, v = held_out_states(system, 4)
    with warnings.catch_warnings():  # the pending calibration's order warning, if this test runs first
        warnings.simplefilter("ignore", IdentifiabilityWarning)
        mean, sd = m.energy(2, return_std=True, reference=(q[0], v[0]))(q[1:], v[1:])
    _, sd_gp = m.energy(2, return_std=True, reference=(q[0], v[0]), truncation=False)(q[1:], v[1:])
    L4 = m._recovered_std(4, jets=False)  # autograd: the compiled jet of this order takes minutes to build
    H4 = bea.energy(lambda q_, v_: m._speed ** 2 * L4(m._to_standard(q_), v_ / m._speed))  # data units
    d = (H4(q[1:], v[1:]) - H4(q[:1], v[:1])).detach() - mean
    c, _ = energy_unit_fit(m, 2)
    assert torch.allclose(sd, (sd_gp ** 2 + unit_free(d, mean, c) ** 2).sqrt(), rtol=1e-6, atol=0)
    assert not torch.allclose(sd, (sd_gp ** 2 + d ** 2).sqrt(), rtol=1e-3, atol=0)


def test_innovations_are_those_of_added_data(anharmonic, monkeypatch):
    """The innovations of the distant-difference calibration (2 folds x 20 pairs here, to keep it cheap; the model
    uses 5 x 60): each fold's posterior variance of a difference is above the full posterior's (v_k - v > 0: leaving
    data out can only widen a GP's posterior, with the same hyperparameters) where that difference is above rounding,
    which it is for most pairs at this size, and the innovations are not all zero (the folds do change the
    posterior)."""
    from learners.shadow import difference_calibration as D

    monkeypatch.setattr(D, "CALIBRATION_FOLDS", 2)
    monkeypatch.setattr(D, "CALIBRATION_PAIRS", 20)
    _, m = anharmonic
    d, w = D.difference_innovations(m)
    assert d.shape == w.shape == (40,)
    kept = torch.isfinite(w)  # NaN: v_k - v within rounding, left out
    assert int(kept.sum()) >= 30, kept  # at this size the variances lie above their rounding floors
    assert bool((w[kept] > 0).all()), w.min()
    assert float(d.abs().max()) > 0


def test_innovations_share_one_pass_with_the_same_numbers(anharmonic, monkeypatch):
    """The folds' variances come from one pass over the training atoms with every posterior's jet values at once
    (a pure speed-up): they equal, fold by fold, posterior_variance of each re-conditioned GP alone (the
    computation before the pass was shared). Tolerance: 1e-8 of the largest innovation variance -- the two differ by
    the order of float64 sums only, and v_k - v cancels the agreeing digits of two variances (up to 1e-10 of the
    prior apart here); the means are the same computation, to 1e-12."""
    from learners.shadow import difference_calibration as D
    from learners.shadow.uncertainty import LinearisedQuantity, Reference, posterior_variance

    monkeypatch.setattr(D, "CALIBRATION_FOLDS", 2)
    monkeypatch.setattr(D, "CALIBRATION_PAIRS", 20)
    _, m = anharmonic
    d, w = D.difference_innovations(m)
    F = m.gp.train_functionals
    groups = D.fold_groups(m, F.count)
    x, x_ref = D._pairs(m, torch.Generator().manual_seed(m.seed))
    G = LinearisedQuantity(m._quantity("energy", 2), x, 1, m._jet_order("energy", 2))

    def alone(gp):
        return posterior_variance(gp, G, Reference(x_ref))[:, 0, 0] / gp.variance_scale, D._mean_differences(m, gp, x, x_ref, 2)

    v, mean = alone(m.gp)
    d_ref, w_ref = [], []
    for k in range(2):
        gp = m._make_gp(2 * m.n)
        gp.load_state_dict(m.gp.state_dict())
        keep = torch.cat([torch.nonzero(groups % 2 != k).flatten(), torch.arange(groups.numel(), F.count)])
        with torch.no_grad():
            gp.condition(F.subset(keep))
        v_k, m_k = alone(gp)
        d_ref.append(mean - m_k)
        w_ref.append(v_k - v)
    d_ref, w_ref = torch.cat(d_ref), torch.cat(w_ref)
    kept = ~torch.isnan(w)  # pairs within the rounding bounds are left out (test_innovations_within_rounding_...)
    assert int(kept.sum()) >= 0.9 * w.numel(), int(kept.sum())
    w, w_ref = w[kept], w_ref[kept]
    assert float((w - w_ref).abs().max()) <= 1e-8 * float(w_ref.abs().max()), (w - w_ref).abs().max()
    assert float((d - d_ref).abs().max()) <= 1e-12 * float(d_ref.abs().max())
    assert float(w_ref.min()) > 0 and float(d_ref.abs().max()) > 0  # a comparison of non-trivial numbers


@pytest.fixture(scope="module")
def henon_rbf():
    """Henon-Heiles (n = 2) with the RBF (``kernel="rbf"``): 12 trajectories, lengthscale fixed (no search; 2 s with
    its velocities in a fresh cache, where the 3-dof RBF's compiled jet alone takes ~10 s to build)."""
    return InverseModifiedLagrangianGP(0.2, kernel="rbf", lengthscale=1.0, noise=1e-8, progress=False).fit(
        snapshots(integrators.systems.henon_heiles(), 0.2, 12, 5, seed=1))


@pytest.mark.parametrize("fit", ["anharmonic", "henon_rbf"])
def test_pair_velocities_from_windows_are_those_of_whole_trajectories(fit, request):
    """The distant-difference calibration's velocities at its chosen snapshots, from windows of 5 snapshots around
    each (interior, and shifted at both ends of the 6-snapshot trajectories): those of the whole data (each Newton
    solve is independent, and the window gives it the same momentum and starting guess). Bit for bit with the RBF;
    the mechanical kernel (the default fit here keeps it) has a posterior mean of a few dense products over the
    batch, so batches of other shapes round differently (measured 2.2e-10 of the largest velocity, Session 8): 1e-9
    bounds that, while a wrong window (another snapshot's momentum) moves a velocity by O(1)."""
    from learners.shadow.difference_calibration import _velocities_at

    m = request.getfixturevalue(fit)
    m = m[1] if isinstance(m, tuple) else m
    assert (m.kernel_degree is None) == (fit == "henon_rbf")
    S = m._to_standard(m.snapshots).transpose(0, 1)
    j = torch.tensor([1, 2, 3, 4, 1, 4, 2, 3])
    t = torch.tensor([0, 5, 11, 39, 7, 7, 20, 20]) % S.shape[1]
    assert 5 * j.numel() < S.shape[0] * S.shape[1]  # the window path, not the whole data's
    windowed, whole = _velocities_at(m, S, j, t), m._velocities_std(S, 2, None)[j, t]
    if m.kernel_degree is None:
        assert torch.equal(windowed, whole)
    else:
        assert float((windowed - whole).abs().max()) <= 1e-9 * float(whole.abs().max()), (windowed - whole).abs().max()


def test_pair_velocities_solve_only_the_chosen_snapshots(henon_rbf, monkeypatch):
    """The windows' momenta and starting guesses are formed whole, Newton solves only the chosen snapshot of each
    window: 8 states, not the 40 of 8 windows of 5 (the solves were 1/4 of the first energy std at bodies2,
    Session 21), with the velocities of the whole windows bit for bit (RBF: its jet's batches round alike)."""
    import integrators._stepping as N  # the velocity solver's module (solve_velocities) calls newton from there
    from learners.shadow.difference_calibration import _velocities_at
    from learners.shadow.element_uncertainty import velocities_at

    solved, newton = [], N.newton
    monkeypatch.setattr(N, "newton", lambda evaluate, x0, *a, **k: solved.append(x0.shape[0]) or newton(evaluate, x0, *a, **k))
    S = henon_rbf._to_standard(henon_rbf.snapshots).transpose(0, 1)
    j, t = torch.tensor([1, 2, 3, 4, 1, 4, 2, 3]), torch.tensor([0, 5, 11, 3, 7, 7, 10, 10])
    windowed = _velocities_at(henon_rbf, S, j, t)
    assert solved == [8]
    start = (j - 2).clamp(0, S.shape[0] - 5)
    whole = velocities_at(henon_rbf, S[start[None] + torch.arange(5)[:, None], t[None]])[j - start, torch.arange(8)]
    assert torch.equal(windowed, whole)


def test_innovations_within_rounding_are_left_out(anharmonic, monkeypatch):
    """A pair whose v_k - v lies within the rounding bounds of the two posterior variances
    (variance_rounding.solve_with_bound) is left out (NaN), never divided by: with every bound raised 1e30-fold,
    each variance is raised to its (huge) bound, so v_k - v is a difference of bounds, within rounding; all pairs go,
    and the distant-difference calibration reports none (energy then falls back to the conservation scale) rather
    than a scale fitted on rounding (without the guard the pairs with v_k - v > 0 would be kept)."""
    from learners.shadow import calibration as C
    from learners.shadow import difference_calibration as D

    solve = D.solve_with_bound

    def coarse(*args):
        V, bound = solve(*args)
        return V, 1e30 * bound

    monkeypatch.setattr(D, "CALIBRATION_FOLDS", 2)
    monkeypatch.setattr(D, "CALIBRATION_PAIRS", 20)
    monkeypatch.setattr(D, "solve_with_bound", coarse)
    _, m = anharmonic
    d, w = D.difference_innovations(m)
    assert d.shape == w.shape == (40,) and bool(torch.isnan(w).all()), w
    assert C.difference_calibration(m) is None


def _guarded_run(D, m, monkeypatch, f_factor=1.0, share=None):
    """``difference_innovations(m)`` with ``factorisation_bound`` scaled by ``f_factor`` and the share forced to
    ``share`` (None: measured); returns the innovations' variances and the (variance, solve bound, worst case) rows
    of the final posterior and the folds, as the guard saw them."""
    real_f, real_share, raw, seen = D.factorisation_bound, D.realised_share, D._raw_variances, []
    monkeypatch.setattr(D, "factorisation_bound", lambda R, V: f_factor * real_f(R, V))
    monkeypatch.setattr(D, "realised_share", real_share if share is None else lambda *a: (share, 0, "forced"))
    monkeypatch.setattr(D, "_raw_variances", lambda *a: seen.append(raw(*a)) or seen[-1])
    _, w = D.difference_innovations(m)
    for name, value in (("factorisation_bound", real_f), ("realised_share", real_share), ("_raw_variances", raw)):
        monkeypatch.setattr(D, name, value)
    return w, seen[0]


def _guard_keeps(rows, share):
    """The pairs the guard keeps with factorisation share ``share`` (fold-major), from :func:`_guarded_run`'s rows."""
    (v, b, f), *folded = rows
    return torch.cat([v_k - v > (b + share * f) + (b_k + share * f_k) for v_k, b_k, f_k in folded])


def test_innovations_guard_measures_the_factorisation_rounding(anharmonic, monkeypatch):
    """The guard's factorisation term is the worst case (variance_rounding.factorisation_bound) times a share: 1 where
    the worst case drops nothing the solve bounds keep, else estimated on a fold factorised in another order
    (realised_share). With the worst case inflated 1e8-fold (as the all-signs-aligned bound over-states the rounding
    of a large element-kernel fit: 7x the variances on two_body_morse4, all 240 innovations dropped) the worst-case
    guard (share forced to 1) keeps none and the measured share keeps the fit's innovations. Where the share decides
    (the worst case scaled so that it drops half the pairs the solve bounds keep), the kept pairs are those of the
    guard with the share recorded in history: some kept with it are dropped with share 1, and share 0 keeps every
    pair the solve bounds keep. And the estimate covers an independent factorisation of the fold: a second
    permutation's variances lie within the guard of the first fold's at every pair."""
    from learners.shadow import difference_calibration as D
    from learners.shadow.uncertainty import LinearisedQuantity

    monkeypatch.setattr(D, "CALIBRATION_FOLDS", 2)
    monkeypatch.setattr(D, "CALIBRATION_PAIRS", 20)
    _, m = anharmonic
    w, rows = _guarded_run(D, m, monkeypatch)
    kept = torch.isfinite(w)
    assert int(kept.sum()) >= 30 and torch.equal(kept, _guard_keeps(rows, m.history["innovation_factorisation_share"][0]))
    w1, _ = _guarded_run(D, m, monkeypatch, 1e8, share=1.0)
    assert bool(torch.isnan(w1).all()), w1  # the worst case back: it kept none
    w8, _ = _guarded_run(D, m, monkeypatch, 1e8)
    share8, pairs8, _ = m.history["innovation_factorisation_share"]
    assert torch.equal(torch.isfinite(w8), kept) and pairs8 >= 10 and share8 < 1e-8, (w8, share8, pairs8)
    (v, b, f), *folded = rows
    r = torch.cat([(v_k - v - b - b_k) / (f + f_k) for v_k, b_k, f_k in folded])
    c = float(r[r > 0].median())  # the worst case times c drops half the pairs the solve bounds keep
    wm, rows_c = _guarded_run(D, m, monkeypatch, c)
    share, pairs, _ = m.history["innovation_factorisation_share"]
    keep_m, keep_1, keep_0 = (_guard_keeps(rows_c, s) for s in (share, 1.0, 0.0))
    assert torch.equal(torch.isfinite(wm), keep_m) and 0 < share < 1 and pairs >= 10, (share, pairs)
    assert bool((keep_m & ~keep_1).any()), (share, c)  # the share decides these pairs
    assert torch.equal(torch.isfinite(_guarded_run(D, m, monkeypatch, c, share=1.0)[0]), keep_1)
    assert torch.equal(torch.isfinite(_guarded_run(D, m, monkeypatch, c, share=0.0)[0]), keep_0)
    # a second permutation of the first fold (another seed than the calibration's) lies within the guard
    x, x_ref = D.data_pairs(m)
    G = LinearisedQuantity(m._quantity("energy", 2), x, 1, m._jet_order("energy", 2))
    F = m.gp.train_functionals
    groups = D.fold_groups(m, F.count)
    F1 = F.subset(torch.cat([torch.nonzero(groups % 2 != 0).flatten(), torch.arange(groups.numel(), F.count)]))
    perm = torch.randperm(F1.count, generator=torch.Generator().manual_seed(m.seed + 2))
    (v1, b1, f1), (v2, b2, f2) = D._raw_variances([D._conditioned(m, F1), D._conditioned(m, F1.subset(perm))],
                                                  [torch.arange(F1.count), perm], G, x_ref)
    assert bool(((v2 - v1).abs() <= b1 + b2 + share * c * (f1 + f2)).all())
    assert float((v2 - v1).abs().max()) > 0  # the permutation does round differently


def test_fold_layout_matches_the_fit(anharmonic):
    """The folds of the distant-difference calibration leave out whole trajectories: the first T (m - 2) n training
    functionals of the final GP are the DEL residuals trajectory by trajectory, the rest the normalisation conditions
    the search kept, read from the model: here the whole mass matrix's 1 + n + n(n + 1)/2 (L, its v-gradient and the
    matrix's upper triangle: 10 at n = 3), which the default kernel="auto" fixes with the mechanical kernel; the
    trace's n + 2 with the RBF."""
    from learners.shadow.difference_calibration import fold_groups

    _, m = anharmonic
    F = m.gp.train_functionals
    groups = fold_groups(m, F.count)
    T, steps, n = m.snapshots.shape
    whole, trace = (MassNormalisation(matrix=k).functionals(n, None).count for k in (True, False))
    assert m.kernel_degree == 2 and m._norm_count == whole != trace  # the mechanical kernel comes with the matrix
    assert groups.numel() == T * (steps - 2) * n == F.count - m._norm_count
    assert torch.equal(torch.bincount(groups), torch.full((T,), (steps - 2) * n))
    assert fold_groups(m, groups.numel() - 1) is None  # a layout that does not fit: no calibration, never a wrong fold


def velocity_z(model, system, h, steps=20, seed=5, order=2):
    """z-scores of the velocities along one held-out trajectory of the exact flow (interior states)."""
    from integrators import reference_flow

    _, (q0, v0) = snapshots(system, h, 1, 1, seed=seed, return_initial=True)
    times = h * torch.arange(steps + 1, dtype=torch.float64)
    ref = reference_flow(system, q0, v0, times)
    qr, vr = ref.q, ref.v
    v, sd = model.velocities(qr, order, return_std=True)
    return ((v - vr) / sd)[1:-1]


SYSTEMS = [(anharmonic3, 0.2, 120), (mass_chain4, 0.2, 150), (two_body4, 0.2, 150)]
#: systems measured by benchmarks/identification_acceptance.py but not tuned on
UNTUNED = [(duffing3, 0.2, 120), (toda3, 0.2, 120), (toda4, 0.2, 150), (morse3, 0.2, 120)]
#: measured gaps (issue 23, not met yet; library defaults, branch id-acc, which lets the positions search fix the whole
#: mass matrix, with the scheme's curvature term, where that predicts clearly better): the chain's energy differences
#: are 9.0e-3 relative (5.3e-3 with MassNormalisation(matrix=True), which the search does not choose: held-out errors
#: -17.81 against -17.72 with the trace; with the matrix the modes' scales are right to 0.4% and the rest is the shape
#: of the learned nonlinear part: 4.2e-3 with 200 trajectories); the two-body problem is identified only roughly,
#: 0.0998 relative (4.99 with the trace alone: its relative motion collapsed), and the fit warns: held-out one-step
#: errors 0.08 of a step. Not coverage (the held-out states are as near the data as toda4's, met at 6.3e-4) but
#: anisotropy: its accelerations are 50x weaker along the centre of mass than along the relative motion, which one
#: tied position lengthscale cannot fit, and the parts' scales are free (branch id-sym's diagnosis: per-direction
#: lengthscales + degree-2 kernel + whole matrix reach 1.8e-2 at 150 trajectories, 7.1e-3 at 300)
#: Since the default kernel="auto" (Session 9 of benchmarks/RESULTS_identification.md) the chain with position-dependent
#: mass is met (4.64e-4 / 4.36e-4, velocities 96%; the RBF gave 9.0e-3) and two_body4 reads 2.14e-2.
#: Since Session 14 (branch autostruct) the default keeps ElementKernel.bodies(2, 2) on two_body4: 2.93e-4 / 2.40e-4,
#: velocities 100% (it read 0.0214 relative before: each separately conserved part's shape learned to a few percent,
#: their relative scales within 4%; benchmarks/RESULTS_identification.md, Sessions 6, 8, 10 and 14), so no gap is left.
_GAP: dict = {}


def _systems(gaps):
    return [pytest.param(*row, marks=pytest.mark.xfail(reason=f"issue 23 gap: {gaps[row[0].__name__]}", strict=False))
            if row[0].__name__ in gaps else row for row in SYSTEMS]


def _fit(make, h, n_traj):
    system = make()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IdentifiabilityWarning)
        return system, InverseModifiedLagrangianGP(h, progress=False).fit(snapshots(system, h, n_traj, 5, seed=0))


@pytest.mark.slow
@pytest.mark.parametrize("make, h, n_traj", _systems(_GAP))
def test_acceptance_energy_and_velocities(make, h, n_traj):
    """Issue 23's acceptance at full size, library defaults, positions only: energy differences to a reference state
    after the best scale within 3e-3 relative (n <= 4), N = 2 and 4; velocities along a held-out trajectory within
    2 sigma at >= 85% of the states. Measured with the default kernel="auto" (benchmarks/identification_acceptance.py,
    which reuses these systems, data and metrics; RESULTS_identification.md, Sessions 8 and 9): anharmonic3 (120
    trajectories) 3.42e-5 / 1.77e-5 (N = 2 / 4; 3.80e-5 / 1.90e-5 before the mass-matrix target), velocities 100%;
    mass_chain4 (150) 4.32e-4 / 4.11e-4 (4.64e-4 / 4.36e-4 before), velocities 96%, with the default kernels; since
    Session 14 chain(4) is kept there (led by 3.9 at degenerate scales, above DEGENERATE_MARGIN's 3.0): 1.25e-4 / 4.6e-5
    (the opt-in kernel's fit, the same fit), velocities not measured with it;
    two_body4 (150, bodies(2, 2) kept since Session 14) 2.93e-4 /
    2.40e-4, velocities 100%. (With the
    RBF, Session 8: 2.37e-4 / 2.29e-4, 96%; 9.03e-3 / 9.06e-3, 97%.)"""
    system, m = _fit(make, h, n_traj)
    assert m.objective_used == "positions"
    for N in (2, 4):
        rel, _ = energy_differences(m, system, N, return_std=False)
        assert rel <= 3e-3, (N, rel)
    _calibrate(m)  # its order-4 warning (mass_chain4, auto: the omitted term 0.59x the GP's std) is not tested here
    zv = velocity_z(m, system, h)
    assert float((zv.abs() <= 2).double().mean()) >= 0.85, zv


#: measured calibration gaps of the default, kernel="auto" since Session 9 (benchmarks/identification_acceptance.py, which
#: reuses these systems, data and metrics; benchmarks/RESULTS_identification.md, Sessions 8 and 9). With the RBF (the
#: default before): anharmonic3 RMS z 0.60/0.59 but 100% within 2 sigma; mass_chain4 2.35, 78% (now met: 1.26/1.30,
#: 90%/90%); duffing3 1.39/1.39, 85%/85% (met, at the edge); toda4 0.94/1.17, 97.5%/88% (met)
_CAL_GAP = {"anharmonic3": "std too wide at N = 2: RMS z 0.84/0.84 (in range) but 100%/97.5% within 2 sigma (target <= "
                           "99%; the RBF: 0.60/0.59, 100%/100%): the innovations ask for more variance than the true "
                           "differences do",
            "duffing3": "std too wide: RMS z 1.07/0.86 (in range) but 100%/100% within 2 sigma (target <= 99%; the RBF "
                        "met both orders, 1.39/1.39, 85%/85%, at the edge), on differences 13x/63x more accurate",
            "toda4": "std too wide at N = 4: RMS z 0.91/0.97 (in range), 97.5%/100% within 2 sigma (target <= 99%; the "
                     "RBF: 0.94/1.17, 97.5%/88%)",
            "two_body4": "std too wide at N = 2: RMS z 1.03/0.99 (in range) but 100%/97% within 2 sigma (target <= "
                         "99%), with bodies(2, 2) kept since Session 14 (energy differences 2.93e-4; before, not "
                         "identified at 2.14e-2: RMS z 0.84/0.83, 100%; benchmarks/RESULTS_identification.md)",
            "morse3": "std far too narrow with the RBF: RMS z 6.72/3.63, 38%/53% within 2 sigma (N = 2/4; energy "
                      "differences 1.5e-2/8.4e-3 relative, velocities 100%); every candidate scale of "
                      "benchmarks/calibration_estimators.py misses by 70x-490x (untuned system of branch id-cal); not "
                      "measured with kernel='auto'"}


def _cal_systems():
    rows = SYSTEMS + [row for row in UNTUNED if row[0].__name__ in ("duffing3", "toda4", "morse3")]
    return [pytest.param(*row, marks=pytest.mark.xfail(reason=f"issue 23 gap: {_CAL_GAP[row[0].__name__]}", strict=False))
            if row[0].__name__ in _CAL_GAP else row for row in rows]


@pytest.mark.slow
@pytest.mark.parametrize("make, h, n_traj", _cal_systems())
def test_acceptance_energy_calibration(make, h, n_traj):
    """85-99% of 40 held-out energy differences within 2 sigma and RMS z in [0.5, 1.5], N = 2 and 4. Met with the
    default kernel="auto" on mass_chain4 (150 trajectories: RMS z 1.26/1.30, 90%/90%, max |z| 4.10/3.93; Sessions 8
    and 9 of benchmarks/RESULTS_identification.md), with the default kernels: since Session 14 chain(4) is kept there,
    whose calibration was not measured; the gaps, with the RBF's numbers where it met the bounds
    (duffing3, toda4), are in _CAL_GAP."""
    system, m = _fit(make, h, n_traj)
    _calibrate(m)  # its order-4 warning (toda4: the first omitted term is 0.58x the GP's std) is not what is tested
    for N in (2, 4):
        _, z = energy_differences(m, system, N)
        assert 0.85 <= float((z.abs() <= 2).double().mean()) <= 0.99, (N, z)
        assert 0.5 <= float(z.pow(2).mean().sqrt()) <= 1.5, (N, z)


def test_a_skipped_difference_calibration_says_why(monkeypatch):
    """Where the rounding guard leaves fewer than 10 innovations, energy's std falls back to another quantity's scale:
    that fallback was silent (two_body_morse4: all 240 dropped, RMS z 1.6; benchmarks/RESULTS_calibration.md, Session
    15). The reason is now in the history, with the counts; no "energy_differences" entry is stored."""
    from learners.shadow import difference_calibration as D

    real = D.innovation_variances

    def unresolved(model, order=2):
        d, v_k, v, pair = real(model, order)
        return d, torch.full_like(v_k, float("nan")), v, pair  # every innovation within the rounding bound

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", IdentifiabilityWarning)
        m = InverseModifiedLagrangianGP(0.5, progress=False).fit(snapshots(integrators.systems.pendulum(), 0.5, 16, 5,
                                                                             seed=0))
        monkeypatch.setattr(D, "innovation_variances", unresolved)
        cal = m.calibration
    assert "energy_differences" not in cal and "energy" in cal
    reason = m.history["energy_differences_calibration_skipped"]
    assert reason.startswith("0 of ") and "rounding bound" in reason, reason
