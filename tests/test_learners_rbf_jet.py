"""Closed-form jets of the RBF posterior mean (learners.shadow.rbf_jet) against autograd, and LSI velocities
through them against the autograd path (issue 13).

Tolerances: the expansion is a sum of thousands of terms with coefficients up to |c|max; both the jet
and autograd evaluate it in float64, so they agree to about eps * |c|max relative to the sums' scale,
not to eps. The models here use a nugget of 1e-8 (|c|max ~ 9e2), where both paths agree to ~5e-12.
"""

import math
import pickle

import pytest
import torch

import integrators
from bea.autodiff import lagrangian_jet
from integrators import reference_flow
from integrators.data import snapshots
from integrators._stepping import velocity_guess as _velocity_guess
from learners import InverseModifiedLagrangianGP
from learners.shadow.functionals import AtomSet
from learners.shadow.kernels import AtomExpansion, FunctionalKernel, RBFKernel
from learners.shadow.rbf_jet import MAX_JET_COLUMNS, JetLagrangian, RBFJet, multi_indices

H = 0.5


@pytest.fixture(scope="module")
def model():
    S = snapshots(integrators.systems.pendulum(), H, 40, 5, seed=0)
    return InverseModifiedLagrangianGP(H, lengthscale=[1.2, 2.0], noise=1e-8).fit(S)


def _slots(alpha):
    return tuple(i for i, a in enumerate(alpha) for _ in range(a))


def _random_expansion(D: int, seed: int = 0) -> AtomExpansion:
    """Atoms of orders 0, 1, 2 with unrelated directions (u != d: the cross terms W_ij, i != j)."""
    g = torch.Generator().manual_seed(seed)
    base = RBFKernel(ard_num_dims=D)
    kernel = FunctionalKernel(base).to(torch.float64)
    base.lengthscale = 0.6 + torch.rand(1, D, generator=g, dtype=torch.float64)
    kernel.outputscale = 1.7
    for p in kernel.parameters():
        p.requires_grad_(False)

    def atoms(m, K):
        return AtomSet(torch.randn(K, D, generator=g, dtype=torch.float64), torch.randn(K, m, D, generator=g, dtype=torch.float64),
                       torch.randn(K, generator=g, dtype=torch.float64), torch.zeros(K, dtype=torch.long))

    return AtomExpansion(kernel, {0: atoms(0, 7), 1: atoms(1, 9), 2: atoms(2, 11)})


@pytest.mark.parametrize("D,K", [(2, 5), (4, 3)])
def test_jet_matches_autograd_on_random_atoms(D, K):
    """Every partial derivative up to order K against nested autograd through the kernel's own
    derivative blocks (an independent path); coefficients O(1), so agreement to ~1e-13."""
    ex = _random_expansion(D)
    jet = RBFJet(ex)
    X = 0.8 * torch.randn(9, D, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    T = jet(X, K)
    n = D // 2
    reference = AtomExpansion(ex.kernel, ex.atoms, differentiable=True)  # generic path, no closed forms
    cols = multi_indices(D, K)
    d = lagrangian_jet(lambda q, v: reference(torch.cat([q, v], -1)), X[:, :n], X[:, n:], [_slots(a) for a in cols])
    for j, a in enumerate(cols):
        ref = d[_slots(a)].detach()
        assert float((T[:, j] - ref).abs().max()) <= 1e-11 * max(1.0, float(ref.abs().max())), a


def test_jet_of_order_zero_is_the_value():
    """K = 0 asks for the values only (no first-order seed coefficient exists): they are the expansion's own, to
    rounding of O(1) coefficients."""
    ex = _random_expansion(3)
    X = torch.randn(10, 3, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    T = RBFJet(ex)(X, 0)
    assert T.shape == (10, 1)
    assert torch.allclose(T[:, 0], ex(X).detach(), rtol=1e-12, atol=1e-12)


def test_jet_rows_do_not_depend_on_the_batch():
    """RBFJet evaluates groups of LANES states side by side, the last group padded, each lane alone: a state's
    derivatives are the same bits wherever it sits in a batch (13 = 8 + 5 states, then each alone)."""
    jet = RBFJet(_random_expansion(4))
    X = torch.randn(13, 4, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    T = jet(X, 3)
    assert T.shape == (13, len(multi_indices(4, 3)))
    assert all(torch.equal(T[b], jet(X[b:b + 1], 3)[0]) for b in (0, 7, 8, 12))
    assert torch.equal(T[5:], jet(X[5:], 3))


def test_the_first_use_policy_of_large_jets_gives_the_same_bits(monkeypatch):
    """Large jets are built with LARGE_LANES lanes at ccompile.QUICK_LEVEL (issue 28's first-use policy). Neither
    changes an operation (lanes are computed alone, contraction stays off), so a jet built under the policy (forced
    here on a small one by lowering its threshold) equals the default build bit for bit; the compiler saw the
    quick level."""
    from integrators import ccompile
    from learners.shadow import compiled_mean
    ex = _random_expansion(4)
    X = torch.randn(13, 4, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    monkeypatch.setenv("BEA_C_CACHE", "0")  # every build below runs the compiler
    monkeypatch.setattr(ccompile, "_cache", type(ccompile._cache)())
    default = RBFJet(ex)(X, 3)
    seen, real = [], ccompile.subprocess.Popen
    monkeypatch.setattr(ccompile.subprocess, "Popen", lambda args, *a, **k: seen.append(args) or real(args, *a, **k))
    monkeypatch.setattr(compiled_mean, "LARGE_JET_COLUMNS", 1)
    quick = RBFJet(ex)
    assert torch.equal(quick(X, 3), default)
    assert quick._fn(3)[1] == compiled_mean.LARGE_LANES != compiled_mean.LANES
    assert len(seen) == 1 and ccompile.QUICK_LEVEL in seen[0] and "-O2" not in seen[0]


def test_which_jets_the_first_use_policy_takes():
    """The policy (4 lanes and -O1 together, from 400 columns) covers the jets measured to gain from it (order 5 in 6-8
    variables, order 4 in 8) and larger ones by their column count; every smaller jet keeps LANES = 8 at -O2 (at 210
    columns, D = 6, K = 4, the policy ran 2.7x slower; 7:4 has 330). No compiler runs."""
    from learners.shadow.compiled_mean import LANES, LARGE_LANES, MAX_JET_COLUMNS, jet_build
    from integrators.codegen import size
    cases = [(D, K) for D in range(1, 13) for K in range(1, 8) if size(D, K) <= MAX_JET_COLUMNS]
    large = {(D, K) for D, K in cases if jet_build(D, K) == (LARGE_LANES, True)}
    assert large == {(6, 5), (8, 5), (8, 4), (12, 3),  # measured (benchmarks/RESULTS_speed.md, Session 19)
                     (7, 5), (5, 6), (5, 7), (6, 6), (6, 7), (7, 6), (9, 4), (10, 4), (11, 4), (12, 4)}  # 455+ columns
    assert all(jet_build(D, K) == (LANES, False) for D, K in cases if (D, K) not in large) and LANES == 8


def test_jet_lagrangian_to_third_order_and_reuse(model):
    """JetLagrangian: value, gradient, Hessian and a third derivative by autograd equal the autograd mean's;
    the several calls at one batch of states compute one jet (extended once for the third order)."""
    computed = []
    L = JetLagrangian(_Counting(RBFJet(model.gp._mean_fn), computed), order=2)
    q = torch.linspace(-1, 1, 7)[:, None]
    v = torch.linspace(-0.5, 0.8, 7)[:, None]
    need = [(0,), (1,), (0, 1), (1, 1), (0, 0, 1), (1, 1, 1)]
    got = lagrangian_jet(L, q, v, need)
    ref = lagrangian_jet(model._lagrangian_std, q, v, need)
    scale = max(float(t.detach().abs().max()) for t in ref.values())
    for k in [()] + need:
        assert float((got[k] - ref[k]).detach().abs().max()) <= 1e-10 * scale, k
    assert computed == [2, 3]  # one jet at these states, extended once to order 3
    jet = pickle.loads(pickle.dumps(RBFJet(model.gp._mean_fn)))  # the compiled library is rebuilt, not pickled
    X = torch.cat([q, v], -1)
    assert torch.equal(jet(X, 3), L.jet.jet(X, 3))


class _Counting:
    def __init__(self, jet, log):
        self.jet, self.log, self.D = jet, log, jet.D

    def __call__(self, X, K):
        self.log.append(K)
        return self.jet(X, K)

    def columns(self, K):
        return self.jet.columns(K)


@pytest.mark.parametrize("order", [2, 4])
def test_velocities_through_jets_equal_autograd_path(model, order):
    """LSI velocities from mod_N with closed-form jets against the autograd path on 61 predicted states,
    the default Newton tolerance (quadratic convergence lands far below it): measured 5e-12 relative
    (N = 2); the errors against the true velocities agree to 1e-9."""
    pend = integrators.systems.pendulum()
    q0, v0 = torch.tensor([[0.3]]), torch.zeros(1, 1)
    qs = model.predict(q0, v0, 60).q
    q_std = model._to_standard(qs)
    fast = model._velocities_std(q_std, order, None)
    slow = model._velocities_std(q_std, order, None, jets=False)
    assert float((fast - slow).abs().max()) <= 1e-10 * float(slow.abs().max())
    v_ref = reference_flow(pend, q0, v0, H * torch.arange(61, dtype=torch.float64)).v
    err_fast = float((model._speed * fast - v_ref).abs().max())
    err_slow = float((model._speed * slow - v_ref).abs().max())
    assert err_fast < 1e-2 and abs(err_fast - err_slow) <= 1e-9


def test_energy_through_jets(model):
    """The recovered energy (level sets, energies) with jets equals the autograd one."""
    import bea

    q = torch.linspace(-1, 1, 11)[:, None]
    v = torch.linspace(-0.6, 0.6, 11)[:, None]
    for order in (2, 4):
        fast = bea.energy(model._recovered_std(order))(q, v)
        slow = bea.energy(model._recovered_std(order, jets=False))(q, v)
        assert float((fast - slow).detach().abs().max()) <= 1e-10 * float(slow.detach().abs().max())


def test_no_closed_form_falls_back_to_autograd():
    """A kernel without a closed-form jet (hyperparameters that carry gradients, or a non-RBF kernel):
    RBFJet refuses with a ValueError naming the cause; jets beyond MAX_JET_COLUMNS are refused too."""
    ex = _random_expansion(2)
    slow = AtomExpansion(ex.kernel, ex.atoms, differentiable=True)
    with pytest.raises(ValueError, match="RBF posterior mean"):
        RBFJet(slow)
    jet = RBFJet(ex)
    K = next(k for k in range(1, 200) if math.comb(2 + k, k) > MAX_JET_COLUMNS)
    with pytest.raises(ValueError, match="MAX_JET_COLUMNS"):
        jet(torch.zeros(1, 2), K)
    with pytest.raises(ValueError, match=r"shape \(B, 2\)"):
        jet(torch.zeros(3), 2)


def test_velocity_guess_orders():
    """Newton's starting guess for velocities: fourth-order central differences inside (error
    h^4 w^5/30 for sin(w t)), second order next to and at the ends."""
    w, h = 1.0, 0.1
    t = h * torch.arange(40, dtype=torch.float64)
    qs = torch.sin(w * t)[:, None]
    g = _velocity_guess(qs, h)[:, 0]
    exact = w * torch.cos(w * t)
    assert float((g[2:-2] - exact[2:-2]).abs().max()) <= 1.1 * h**4 * w**5 / 30
    assert float((g - exact).abs().max()) <= h**2 * w**3 / 2
    two = _velocity_guess(qs[:2], h)
    assert torch.allclose(two, ((qs[1] - qs[0]) / h).expand(2, 1))


def test_velocities_through_jets_two_degrees_of_freedom():
    """n = 2 (Henon-Heiles, h = 0.1): mod_2 by the dimension-free evaluator, fed by the jet in four
    variables, on 13 predicted states; against the autograd path, measured 4.9e-12 relative (31 states)."""
    S = snapshots(integrators.systems.henon_heiles(), 0.1, 40, 5, seed=0)
    m = InverseModifiedLagrangianGP(0.1, lengthscale=0.5, noise=1e-8).fit(S)
    qs = m.predict(torch.tensor([[0.1, -0.1]]), torch.tensor([[0.1, 0.15]]), 12).q
    q = m._to_standard(qs)
    fast, slow = m._velocities_std(q, 2, None), m._velocities_std(q, 2, None, jets=False)
    assert float((fast - slow).abs().max()) <= 1e-10 * float(slow.abs().max())


def test_a_failed_higher_order_build_falls_back_to_autograd(model, monkeypatch):
    """A compiler failure (e.g. a timeout on a loaded machine) while building the higher-order jet that mod_4 needs
    falls back to the autograd mean, which gives the same energy, instead of raising from inside the formula."""
    import bea
    from integrators.ccompile import CompileError
    from learners.shadow.rbf_jet import JetLagrangian

    q = torch.linspace(-1, 1, 5)[:, None]
    v = torch.linspace(-0.6, 0.6, 5)[:, None]
    want = bea.energy(model._recovered_std(4, jets=False))(q, v)
    jet = RBFJet(model.gp._mean_fn)  # a fresh jet: nothing built beyond what the test allows
    build = jet._fn

    def fails(K):
        if K <= 2:
            return build(K)
        raise CompileError("compiler timed out (test)")

    monkeypatch.setattr(jet, "_fn", fails)
    monkeypatch.setattr(model, "_jet", jet)
    monkeypatch.setattr(model, "_recovered", {})
    L = model._mean_std(6)
    assert not isinstance(L, JetLagrangian)
    got = bea.energy(model._recovered_std(4))(q, v)
    assert float((got - want).detach().abs().max()) <= 1e-10 * float(want.detach().abs().max())
