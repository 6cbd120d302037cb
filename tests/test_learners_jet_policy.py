"""The compile-or-not policy of the RBF posterior mean's jets (learners.shadow.jet_policy.jet_pays, Session 21): a
large jet (tens of seconds of compiler CPU) is taken only by calls at more than EAGER_MAX_STATES states, decided from
the call alone; smaller calls evaluate, by autograd, the expansion the jet was built from. The stub tests run no
compiler; the model tests force the policy onto the pendulum's small jets (21 columns at order 5, built in ~1 s) by
lowering the thresholds.

Tolerances: jet and autograd sum the same thousands of terms in different orders, and agree to ~5e-12 relative on
these models (tests/test_learners_rbf_jet.py); Newton stops far below its tolerance (quadratic convergence), so the
velocities agree to the same level: 1e-11 relative is asserted (measured values in the tests)."""

import pickle

import pytest
import torch

import integrators
from integrators import variational
from integrators.ccompile import CompileError
from integrators.codegen import size
from integrators.data import snapshots
from learners import InverseModifiedLagrangianGP
from learners.shadow import jet_policy, rbf_jet
from learners.shadow.compiled_mean import RBFJet
from learners.shadow.jet_policy import EAGER_JET_COLUMNS, EAGER_MAX_ENTRIES, EAGER_MAX_STATES, jet_pays
from learners.shadow.functionals import AtomSet
from learners.shadow.kernels import AtomExpansion, FunctionalKernel, RBFKernel
from learners.shadow.rbf_jet import ExpansionLagrangian, JetLagrangian

H = 0.5


def _expansion(D: int = 4) -> AtomExpansion:
    g = torch.Generator().manual_seed(5)
    base = RBFKernel(ard_num_dims=D)
    kernel = FunctionalKernel(base).to(torch.float64)
    base.lengthscale = 0.6 + torch.rand(1, D, generator=g, dtype=torch.float64)
    for p in kernel.parameters():
        p.requires_grad_(False)
    atoms = AtomSet(torch.randn(6, D, generator=g, dtype=torch.float64), torch.randn(6, 1, D, generator=g, dtype=torch.float64),
                    torch.randn(6, generator=g, dtype=torch.float64), torch.zeros(6, dtype=torch.long))
    return AtomExpansion(kernel, {1: atoms})


def _states(B: int, D: int = 4, seed: int = 0):
    X = 0.5 * torch.randn(B, D, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return X[:, :D // 2], X[:, D // 2:]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def test_policy_thresholds():
    """Order 6 in 4 variables (210 columns, 9 s of compiler measured) is large, order 5 (126, 2 s) is not; a large one
    is taken by a call beyond EAGER_MAX_STATES states only, whatever came before; the module default of the
    integrators' ``execution`` forces either way."""
    assert size(4, 5) < EAGER_JET_COLUMNS <= size(4, 6) == 210
    assert jet_pays(4, 5, 1)
    assert not jet_pays(4, 6, 61) and not jet_pays(4, 6, EAGER_MAX_STATES)
    assert jet_pays(4, 6, EAGER_MAX_STATES + 1)
    # a call that autograd would hold in memory in one pass beyond EAGER_MAX_ENTRIES takes the jet at fewer states
    assert not jet_pays(4, 6, 100, EAGER_MAX_ENTRIES // 100) and jet_pays(4, 6, 100, EAGER_MAX_ENTRIES // 100 + 1)
    for mode, want in (("compiled", True), ("eager", False)):
        old = variational.DEFAULT_EXECUTION
        try:
            variational.DEFAULT_EXECUTION = mode
            assert jet_pays(4, 6, 10 ** 6) is want and jet_pays(4, 6, 1) is want
        finally:
            variational.DEFAULT_EXECUTION = old


@pytest.fixture
def stubbed():
    """A JetLagrangian of order 5 (its jet of order 6 large) on a jet whose build is a stub that records the order,
    and the autograd Lagrangian of the same expansion."""
    jet = RBFJet(_expansion())
    built = []
    jet._fn = lambda K: built.append(K)
    eager = ExpansionLagrangian(jet.expansion)
    return JetLagrangian(jet, 5, eager=eager), eager, built


def test_the_path_depends_on_the_call_alone(stubbed, monkeypatch):
    """Small calls: the autograd values exactly, no build; a call beyond EAGER_MAX_STATES builds and takes the jet
    (here a marker); the same small call after it is autograd again, bit for bit."""
    L, eager, built = stubbed
    q, v = _states(61)
    first = L(q, v)
    assert torch.equal(first, eager(q, v)) and built == []
    monkeypatch.setattr(L, "_table_for", lambda X: (_ for _ in ()).throw(AssertionError("jet path taken")))
    with pytest.raises(AssertionError, match="jet path taken"):
        L(*_states(EAGER_MAX_STATES + 1, seed=1))
    assert built == [6]
    assert torch.equal(L(q, v), first)


def test_a_failed_build_keeps_autograd_in_this_process_only(stubbed):
    """A build that fails (a compiler that timed out) gives autograd for the large call too and is not retried; a
    pickled copy (another process) tries again."""
    L, eager, built = stubbed

    def fails(K):
        built.append(K)
        raise CompileError("no compiler in this test")

    L.jet._fn = fails
    q, v = _states(EAGER_MAX_STATES + 1, seed=1)
    assert torch.equal(L(q, v), eager(q, v)) and built == [6]
    L(q, v)
    assert built == [6] and L._build_failed
    del L.jet._fn  # the stub (a local function) does not pickle; the class's build does
    assert not pickle.loads(pickle.dumps(L))._build_failed


@pytest.fixture
def pendulum():
    S = snapshots(integrators.systems.pendulum(), H, 40, 5, seed=0)
    return InverseModifiedLagrangianGP(H, lengthscale=[1.2, 2.0], noise=1e-8).fit(S)


@pytest.fixture
def small_large(monkeypatch):
    """Every jet counts as large, and calls beyond 40 states take it."""
    monkeypatch.setattr(jet_policy, "EAGER_JET_COLUMNS", 1)
    monkeypatch.setattr(jet_policy, "EAGER_MAX_STATES", 40)


def test_a_handle_keeps_its_function_across_a_refit(pendulum, small_large):
    """Both paths of a deferred handle evaluate the expansion the jet was built from: a refit of the model (another
    data set) changes neither path's values (the autograd path read the live model before: 6e-2 relative), and the
    two agree (measured 9e-13 relative). The handle pickles without the model."""
    L = pendulum._mean_std(4)
    assert isinstance(L, JetLagrangian) and isinstance(L.eager, ExpansionLagrangian)
    q, v = _states(20, 2)
    Q, V = _states(41, 2, seed=1)
    small, large = L(q, v).detach(), L(Q, V).detach()
    assert len(pickle.dumps(L)) < len(pickle.dumps(pendulum)) / 2
    pendulum.fit(snapshots(integrators.systems.pendulum(), H, 30, 4, seed=3))
    assert _rel(pendulum._lagrangian_std(q, v).detach(), small) > 1e-3  # the refit changed the model's mean
    assert torch.equal(L(q, v).detach(), small) and torch.equal(L(Q, V).detach(), large)
    assert _rel(large, L.eager(Q, V).detach()) <= 1e-11


def _jet_calls(monkeypatch):
    calls = []
    real = RBFJet.__call__
    monkeypatch.setattr(RBFJet, "__call__", lambda self, X, K: calls.append(X.shape[0]) or real(self, X, K))
    return calls


def test_recovery_takes_the_policy_with_a_real_jet(pendulum, small_large, monkeypatch):
    """Energies and velocities along 61 predicted positions: at most EAGER_MAX_STATES states take autograd on the
    jet's expansion throughout (no jet evaluated), more take the real jet. The velocities agree to 1e-11 relative
    (measured 5.3e-12); the energies (p.v - L, nearly constant along the orbit: the rounding of the larger terms
    remains) to 1e-10 (measured 4.8e-11). In passes of two time rows (the fewest the momenta take) each pass's Newton
    solve stops on its own states: 1e-8 relative (Newton's tolerance scale; measured 8.6e-10)."""
    qs = pendulum.predict(torch.tensor([[0.3]]), torch.zeros(1, 1), 60).q
    q_std = pendulum._to_standard(qs)
    calls = _jet_calls(monkeypatch)
    monkeypatch.setattr(jet_policy, "EAGER_MAX_STATES", 1000)
    slow_E, slow_v = pendulum.energies(qs, 2), pendulum._velocities_std(q_std, 4, None)
    monkeypatch.setattr(rbf_jet, "EAGER_PASS_ENTRIES", 1)  # autograd's passes as small as they go: two time rows
    assert pendulum._bulk_chunk(q_std, 2, True) == 2
    chunked = pendulum.energies(qs, 2)
    assert calls == []
    monkeypatch.setattr(jet_policy, "EAGER_MAX_STATES", 40)
    fast_E, fast_v = pendulum.energies(qs, 2), pendulum._velocities_std(q_std, 4, None)
    assert max(calls) == 61
    assert _rel(fast_v, slow_v) <= 1e-11 and _rel(fast_E, slow_E) <= 1e-10
    assert _rel(chunked, slow_E) <= 1e-8
