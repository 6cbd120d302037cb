"""The compile-or-not policy of the RBF posterior mean's jets (learners.shadow.compiled_mean.jet_pays, Session 21): a
large jet (tens of seconds of compiler CPU) is built only once the work asks for it; until then
:class:`~learners.shadow.rbf_jet.JetLagrangian` evaluates the same Lagrangian by autograd. No compiler runs here: the
builds are stubs that record the order asked for.
"""

import pytest
import torch

from integrators import variational
from integrators.ccompile import CompileError
from integrators.codegen import size
from learners.shadow.compiled_mean import (EAGER_EVALUATIONS_PER_COLUMN, EAGER_JET_COLUMNS, EAGER_MAX_STATES, RBFJet,
                                           jet_pays)
from learners.shadow.functionals import AtomSet
from learners.shadow.kernels import AtomExpansion, FunctionalKernel, RBFKernel
from learners.shadow.rbf_jet import JetLagrangian


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


def test_policy_thresholds():
    """Order 6 in 4 variables (210 columns, 9 s of compiler measured) is large, order 5 (126, 2 s) is not; a large one
    pays for a call beyond EAGER_MAX_STATES states or once the evaluations reach their share per column; the module
    default of the integrators' ``execution`` forces either way."""
    assert size(4, 5) < EAGER_JET_COLUMNS <= size(4, 6) == 210
    assert jet_pays(4, 5, 1)
    assert not jet_pays(4, 6, 61) and not jet_pays(4, 6, EAGER_MAX_STATES)
    assert jet_pays(4, 6, EAGER_MAX_STATES + 1)
    share = EAGER_EVALUATIONS_PER_COLUMN * 210
    assert not jet_pays(4, 6, 30, share - 31) and jet_pays(4, 6, 30, share - 30)
    for mode, want in (("compiled", True), ("eager", False)):
        old = variational.DEFAULT_EXECUTION
        try:
            variational.DEFAULT_EXECUTION = mode
            assert jet_pays(4, 6, 10 ** 6) is want and jet_pays(4, 6, 1) is want
        finally:
            variational.DEFAULT_EXECUTION = old


@pytest.fixture
def stubbed():
    """A JetLagrangian of order 5 (its jet of order 6 large) on a jet whose build is a stub that fails (as a compiler
    that timed out would), and the autograd mean it falls back to."""
    ex = _expansion()
    jet = RBFJet(ex)
    built = []

    def build(K):
        built.append(K)
        raise CompileError("no compiler in this test")

    jet._fn = build

    def eager(q, v):
        return ex(torch.cat([q, v], -1))

    return JetLagrangian(jet, 5, eager=eager), eager, built


def test_small_work_takes_autograd_without_building(stubbed):
    """Calls of a few states: the autograd values exactly, no build, the choice readable, the evaluations counted;
    the call that reaches the per-column share tries the build (here it fails: autograd stays, for good)."""
    L, eager, built = stubbed
    X = 0.5 * torch.randn(61, 4, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    q, v = X[:, :2], X[:, 2:]
    assert torch.equal(L(q, v), eager(q, v))
    assert built == [] and L.execution == "eager" and L.evaluations == 61
    share = EAGER_EVALUATIONS_PER_COLUMN * size(4, 6)
    while L.evaluations + 61 < share:
        L(q, v)
    assert built == []
    assert torch.equal(L(q, v), eager(q, v))  # this call pays: the build is tried, fails, autograd answers
    assert built == [6] and L.execution == "eager"
    L(q, v)
    assert built == [6]  # a failed build is not retried


def test_a_large_call_builds_at_once(stubbed, monkeypatch):
    """A call at more than EAGER_MAX_STATES states (a long prediction's velocities) builds the jet at its first call:
    it is compiled from then on."""
    L, eager, built = stubbed
    X = 0.5 * torch.randn(EAGER_MAX_STATES + 1, 4, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    monkeypatch.setattr(L.jet, "_fn", lambda K: built.append(K))
    monkeypatch.setattr(L, "_table_for", lambda X: (_ for _ in ()).throw(AssertionError("jet path taken")))
    with pytest.raises(AssertionError, match="jet path taken"):
        L(X[:, :2], X[:, 2:])
    assert built == [6] and L.execution == "compiled" and L.evaluations == 0
