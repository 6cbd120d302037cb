"""The mechanical kernel (learners/shadow/mechanical.py): closed forms against autograd, positive semidefiniteness,
its exact feature expansion, the posterior mean, and models fitted with ``kernel="mechanical"``."""

import math

import pytest
import torch

import bea
import integrators as I
from learners import FunctionalKernel, InverseModifiedLagrangianGP, LagrangianGP, RBFKernel
from learners.metrics import max_trajectory_error
from learners.shadow.functionals import (AtomSet, Functionals, del_residual_functionals, point_evaluations,
                                         triples_from_snapshots)
from learners.shadow.kernels import AtomExpansion, _autograd_block
from learners.shadow.mechanical import MechanicalKernel

#: float64 unit roundoff; a block entry is a sum of at most a few dozen products of O(1) factors (at most 16 splits
#: of the derivative directions times at most 10 partitions each), so agreement to 1e-12 relative to the block's
#: largest entry is rounding with a margin of ~1e3, while any wrong term in the algebra gives an O(1) difference
ROUNDING = 1e-12


def _kernel(degree=4, scales=(0.7, 1.3, 0.9, 1.6)):
    k = MechanicalKernel(degree, ard_num_dims=len(scales)).to(torch.float64)
    k.lengthscale = torch.tensor([scales], dtype=torch.float64)
    return k


@pytest.mark.parametrize("degree,scales", [(4, (0.7, 1.3, 0.9, 1.6)), (2, (0.8, 1.1)), (6, (1.2,))])
def test_closed_form_blocks_match_autograd(degree, scales):
    """derivative_block (product rule over the split of the directions, Faà di Bruno in each factor) equals the
    generic nested-autograd block for every pair of orders up to 2 x 2 (the EL residuals of LGP need 2 x 2)."""
    torch.manual_seed(0)
    k = _kernel(degree, scales)
    for a in range(3):
        for b in range(3):
            X, Y = 0.8 * torch.randn(5, 4), 0.8 * torch.randn(6, 4)
            U, V = torch.randn(5, a, 4), torch.randn(6, b, 4)
            closed = k.derivative_block(X, U, Y, V).detach()
            generic = _autograd_block(k, X, U, Y, V).detach()
            assert float((closed - generic).abs().max()) <= ROUNDING * float(generic.abs().max()), (a, b)


def test_degree_is_exact_in_the_velocities():
    """k is a polynomial of degree d in v: its d-th derivative along a velocity direction e is
    d! (e~.y~_v)^d E(q, q'), and the (d+1)-th vanishes."""
    scales = torch.tensor([0.7, 1.3, 0.9, 1.6])
    k = _kernel(3, tuple(scales.tolist()))
    X, Y = torch.randn(3, 4), torch.randn(4, 4)
    e = torch.tensor([0.0, 0.0, 0.6, -0.8])
    top = k.derivative_block(X, e.expand(3, 3, 4), Y, torch.zeros(4, 0, 4)).detach()
    over = k.derivative_block(X, e.expand(3, 4, 4), Y, torch.zeros(4, 0, 4)).detach()
    E = torch.exp(-0.5 * (((X[:, None, :2] - Y[None, :, :2]) / scales[:2]) ** 2).sum(-1))
    expected = 6 * ((Y[:, 2:] / scales[2:] ** 2) @ e[2:])[None, :] ** 3 * E
    assert torch.allclose(top, expected, rtol=1e-13, atol=0)
    assert float(over.abs().max()) == 0.0


def test_gram_matrices_are_positive_semidefinite():
    """Random families of functionals (values, DEL residuals) give Gram matrices with no eigenvalue below
    -1e-12 of the largest (rounding of a symmetric eigen-solve of a matrix with entries of size one)."""
    torch.manual_seed(3)
    FK = FunctionalKernel(_kernel(4)).to(torch.float64)
    for trial in range(3):
        S = 0.6 * torch.randn(4, 5, 2)
        F = Functionals.cat([point_evaluations(torch.randn(6, 4)), del_residual_functionals(triples_from_snapshots(S), 0.3)])
        K = FK.forward(F, F).detach()
        assert float((K - K.T).abs().max()) <= 1e-12 * float(K.abs().max())
        ev = torch.linalg.eigvalsh(0.5 * (K + K.T))
        assert float(ev.min()) >= -1e-12 * float(ev.max()), trial


@pytest.mark.parametrize("degree", [2, 5])
def test_posterior_mean_in_c_matches_autograd(degree):
    """The mean's C form (learners.shadow.compiled_mean: a sum over atoms of the code generator's IR, the
    compiled integrator's path) against autograd through the generic sum of derivative blocks, on random atoms of
    orders 0, 1 and 2 with O(1) terms: gradient and Hessian to ROUNDING of the largest entry (measured 5e-16)."""
    from integrators.ccompile import find_compiler
    from integrators.compiled import CompiledStepper
    from learners.shadow.compiled_mean import c_lagrangian_of_expansion

    if find_compiler() is None:
        pytest.skip("no C compiler")
    g = torch.Generator().manual_seed(6)
    FK = FunctionalKernel(_kernel(degree)).to(torch.float64)
    FK.outputscale = 0.7
    atoms = {m: AtomSet(0.4 * torch.randn(20, 4, generator=g), torch.randn(20, m, 4, generator=g), torch.randn(20, generator=g),
                        torch.zeros(20, dtype=torch.long)) for m in (0, 1, 2)}
    fast, generic = AtomExpansion(FK, atoms), AtomExpansion(FK, atoms, differentiable=True)
    X = (0.4 * torch.randn(5, 4, generator=g)).requires_grad_(True)
    stepper = CompiledStepper(c_lagrangian_of_expansion(fast, 2), 0.1, bea.get_scheme("midpoint"), 2)
    gc, Hc = stepper.lagrangian_derivatives(X.detach())
    (ga,) = torch.autograd.grad(generic(X).sum(), X, create_graph=True)
    Ha = torch.stack([torch.autograd.grad(ga[:, i].sum(), X, retain_graph=True)[0] for i in range(4)], 1)
    ga = ga.detach()
    assert float((gc - ga).abs().max()) <= ROUNDING * float(ga.abs().max())
    assert float((Hc - Ha).abs().max()) <= ROUNDING * float(Ha.abs().max())


def test_feature_expansion_is_exact_for_jets():
    """k = sum Phi(x) Phi(y) (features up to a high order), and for a functional of the 2-jet at x_b the features
    with |gamma| <= 2 alone give its prior variance exactly (the truncation is exact, not an approximation)."""
    torch.manual_seed(4)
    k = _kernel(4)
    x, y = 0.3 * torch.randn(3, 4), 0.3 * torch.randn(3, 4)
    fm = k.feature_map(4, 24)
    full = (fm(x, torch.zeros_like(x)) * fm(y, torch.zeros_like(y))).sum(-1)
    assert torch.allclose(full, k.pointwise(x, y).detach(), rtol=1e-13, atol=0)
    # T f = d^2 f(x_b)/(du dw) + f(x_b): variance by the kernel's block and by the p = 2 features
    xb, U = torch.randn(1, 4), torch.randn(1, 2, 4)
    empty = torch.zeros(1, 0, 4)
    direct = (k.derivative_block(xb, U, xb, U) + 2 * k.derivative_block(xb, U, xb, empty)
              + k.derivative_block(xb, empty, xb, empty)).detach()
    fm2 = k.feature_map(4, 2)
    z = xb.clone().requires_grad_(True)
    val = fm2(z, xb)  # (1, M)
    coef = []
    for j in range(val.shape[1]):
        (g,) = torch.autograd.grad(val[0, j], z, create_graph=True, retain_graph=True)
        (g2,) = torch.autograd.grad((g * U[:, 0]).sum(), z, allow_unused=True, retain_graph=True)
        second = 0.0 if g2 is None else float((g2 * U[:, 1]).sum())
        coef.append(second + float(val[0, j].detach()))
    via_features = sum(c * c for c in coef)
    assert abs(via_features - float(direct)) <= 1e-12 * abs(float(direct))


def test_posterior_mean_closed_form_matches_autograd():
    """The mean's own closed form (MechanicalExpansion: value, and its closed-form gradient as the backward) and the
    generic sum of derivative blocks agree in value, gradient, Hessian and a third derivative, on random atoms of orders 0, 1 and 2 (no cancellation, so rounding is ~1e-16)."""
    torch.manual_seed(5)
    FK = FunctionalKernel(_kernel(5)).to(torch.float64)
    FK.outputscale = 0.7
    atoms = {m: AtomSet(0.4 * torch.randn(30, 4), torch.randn(30, m, 4), torch.randn(30), torch.zeros(30, dtype=torch.long))
             for m in (0, 1, 2)}
    fast, generic = AtomExpansion(FK, atoms), AtomExpansion(FK, atoms, differentiable=True)
    assert fast._custom is not None and generic._custom is None
    X = (0.3 * torch.randn(7, 4)).requires_grad_(True)

    def jet(f):
        val = f(X)
        (g,) = torch.autograd.grad(val.sum(), X, create_graph=True)
        H = torch.stack([torch.autograd.grad(g[:, i].sum(), X, retain_graph=True, create_graph=True)[0] for i in range(4)], 1)
        (third,) = torch.autograd.grad(H[:, 0, 1].sum(), X)  # a third derivative, as mod_N takes
        return val.detach(), g.detach(), H.detach(), third

    for a, b in zip(jet(fast), jet(generic)):
        assert float((a - b).abs().max()) <= ROUNDING * float(b.abs().max())


def test_kernel_option_errors():
    with pytest.raises(ValueError, match="kernel must be one of"):
        InverseModifiedLagrangianGP(0.1, kernel="polynomial")
    with pytest.raises(TypeError, match="FunctionalKernel"):
        InverseModifiedLagrangianGP(0.1, kernel=RBFKernel())
    with pytest.raises(ValueError, match="degree"):
        MechanicalKernel(degree=1)
    with pytest.raises(ValueError, match="degree"):
        MechanicalKernel(degree=4.0)


@pytest.fixture(scope="module")
def pendulum_fits():
    """The pendulum (L quadratic in v) at h = 0.5 from 30 trajectories x 5 steps, both kernels, same data and search."""
    S = I.data.snapshots(I.systems.pendulum(), 0.5, n_traj=30, n_steps=5, seed=0)
    return {k: InverseModifiedLagrangianGP(0.5, kernel=k, iterations=16, progress=False).fit(S) for k in ("rbf", "mechanical")}


def test_mechanical_kernel_recovers_the_pendulum_better(pendulum_fits):
    """Same 30 trajectories: the 100-step trajectory error (two starts, q0 = 0.3 and 1.0) is 1.3e-5 with the RBF and
    3.7e-6 with the mechanical kernel (degree 8), in the standardised units of position and time (before time was
    standardised: 4.1e-5 and 3.3e-6); asserted: mechanical <= 1e-5 and at least 2.5x better."""
    q0, v0 = torch.tensor([[0.3], [1.0]]), torch.zeros(2, 1)
    q_ref = I.reference_flow(I.systems.pendulum(), q0, v0, 0.5 * torch.arange(101)).q
    err = {"rbf": max_trajectory_error(pendulum_fits["rbf"].predict(q0, v0, 100, on_extrapolation="ignore"), q_ref)}
    pred = pendulum_fits["mechanical"].predict(q0, v0, 100, return_std=True)  # no extrapolation warning either
    qs, std = pred.q, pred.std
    err["mechanical"] = max_trajectory_error(qs, q_ref)
    assert err["mechanical"] <= 1e-5
    assert err["rbf"] >= 2.5 * err["mechanical"]
    # the DEL residual's posterior std along the prediction: finite and small inside, NaN at both ends
    assert bool(std[[0, -1]].isnan().all()) and float(std[1:-1].max()) < 1e-3


def test_energy_std_of_the_mechanical_model_is_exact(pendulum_fits):
    r"""With N = 0 the energy :math:`H = v\cdot\partial_vL - L` is linear in L, so the feature path's std must equal
    the std of that functional computed directly from the GP (kernel blocks only), to rounding."""
    m = pendulum_fits["mechanical"]
    q, v = torch.tensor([[2.5], [-3.0]]), torch.tensor([[1.5], [2.0]])  # beyond the data: variance above rounding
    _, std = m.energy(0, return_std=True, truncation=False)(q, v)
    x = torch.cat([q, v], -1)
    G = Functionals(2, 2, {0: AtomSet(x, torch.zeros(2, 0, 2), -torch.ones(2), torch.arange(2)),
                           1: AtomSet(x, torch.cat([torch.zeros(2, 1), v], -1)[:, None, :], torch.ones(2), torch.arange(2))})
    f = m._variance_factor("energy_differences")  # energies carry their own calibration on top of the DEL one
    _, var = m.functional_posterior(G)
    var = var * f
    prior = torch.diagonal(m.gp.kernel.forward(*(2 * [m._standard_functionals(G)]))).detach() * m.gp.variance_scale * f
    # the posterior variance is the prior minus |R^-1 k|^2: both paths lose kappa(R) eps of the prior to rounding
    floor = math.sqrt(m.gp.info.cond_estimate) * torch.finfo(torch.float64).eps * prior
    assert bool((var >= 100 * floor).all()), (var / floor).tolist()  # a variance well above the rounding floor: the comparison means something
    assert bool(((std ** 2 - var).abs() <= floor).all()), ((std ** 2 - var) / floor).tolist()
    # N = 2, with the truncation term: finite, positive, and a state far from the data is less certain
    H2 = m.energy(2, return_std=True, reference=(torch.tensor([0.0]), torch.tensor([0.0])))
    _, s_in = H2(torch.tensor([[0.3]]), torch.tensor([[0.1]]))
    _, s_out = H2(torch.tensor([[3.0]]), torch.tensor([[2.0]]))
    assert 0 < float(s_in) < float(s_out) and math.isfinite(float(s_out))


def test_velocities_with_std_and_save_load(pendulum_fits, tmp_path):
    """velocities(return_std=True) along exact positions: within 3e-4 of the true velocities and 2 stds covering the
    error at most states; a saved and loaded model gives the same numbers (no refit)."""
    m = pendulum_fits["mechanical"]
    system = I.systems.pendulum()
    q0, v0 = torch.tensor([[0.4]]), torch.tensor([[0.2]])
    t = 0.5 * torch.arange(11)
    ref = I.reference_flow(system, q0, v0, t)
    q_ref, v_ref = ref.q, ref.v
    v, std = m.velocities(q_ref, order=2, return_std=True)
    err = (v - v_ref).abs()
    # mod_2 truncates at h^4 = 0.06: the README's velocity error at this step is 8.8e-5 (q0 = 0.3); 1.3e-4 here
    assert float(err.max()) <= 3e-4
    cover = float((err <= 2 * std).double().mean())
    assert cover >= 0.8, cover
    path = m.save(tmp_path / "mech.pt")
    loaded = InverseModifiedLagrangianGP.load(path)
    assert isinstance(loaded.gp.kernel.base_kernel, MechanicalKernel)
    qq, vv = torch.tensor([[0.1], [0.7]]), torch.tensor([[0.2], [-0.3]])
    assert torch.equal(loaded.lagrangian(qq, vv), m.lagrangian(qq, vv))
    assert torch.allclose(loaded.velocities(q_ref, order=2), v, rtol=0, atol=1e-12)


def test_kernel_template_and_lgp(tmp_path):
    """A MechanicalKernel given as kernel= is a template: the model learns its own copy (the template keeps its
    values) of the requested degree; LagrangianGP takes the option too and predicts the pendulum's motion."""
    S = I.data.snapshots(I.systems.pendulum(), 0.2, n_traj=20, n_steps=5, seed=0)
    template = MechanicalKernel(degree=3)
    before = template.lengthscale.detach().clone()
    m = InverseModifiedLagrangianGP(0.2, kernel=template, iterations=4, progress=False).fit(S)
    base = m.gp.kernel.base_kernel
    assert base is not template and base.degree == 3 and torch.equal(template.lengthscale.detach(), before)
    assert len(m.hyperparameters["lengthscale"]) == 2  # (position lengthscale, velocity scale) for n = 1
    loaded = InverseModifiedLagrangianGP.load(m.save(tmp_path / "template.pt"))  # the file records the template
    assert loaded.gp.kernel.base_kernel.degree == 3
    x = torch.tensor([[0.2]]), torch.tensor([[0.1]])
    assert torch.equal(loaded.lagrangian(*x), m.lagrangian(*x))
    lgp = LagrangianGP(0.2, kernel="mechanical", iterations=4, progress=False).fit(S)
    assert isinstance(lgp.gp.kernel.base_kernel, MechanicalKernel)
    q0, v0 = torch.tensor([[0.3]]), torch.zeros(1, 1)
    q_ref = I.reference_flow(I.systems.pendulum(), q0, v0, 0.2 * torch.arange(21)).q
    assert max_trajectory_error(lgp.predict(q0, v0, 20), q_ref) <= 1e-2  # LGP's O(h^2) error, not a failure
