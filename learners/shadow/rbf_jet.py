r"""Closed-form jets of the GP posterior mean with an RBF kernel: every partial derivative up to an order.

The posterior mean of :class:`~learners.shadow.kernels.AtomExpansion` (RBF kernel, atoms of order <= 2) is

.. math::  f(x) = \sigma_f^2 \sum_k e_k\, P_k(r_k), \qquad r_k = (x - y_k)/\ell, \qquad e_k = e^{-|r_k|^2/2},
           \qquad P_k(r) = c_k + \tilde v_k\cdot r + c^{(2)}_k (\tilde u_k\cdot r)(\tilde d_k\cdot r)

(:mod:`learners.shadow.compiled_mean`). With the probabilists' Hermite polynomials
:math:`He_0 = 1,\ He_1(t) = t,\ He_{m+1}(t) = t\,He_m(t) - m\,He_{m-1}(t)` and
:math:`He_\beta(r) = \prod_i He_{\beta_i}(r_i)`, the derivatives of the Gaussian are
:math:`\partial_r^\beta e = (-1)^{|\beta|} He_\beta(r)\, e`, and Leibniz' rule with the quadratic
:math:`P` (gradient :math:`g = \tilde v + c^{(2)}(\tilde u\,\tilde d\cdot r + \tilde d\,\tilde u\cdot r)`,
constant Hessian :math:`W = c^{(2)}(\tilde u\tilde d^\top + \tilde d\tilde u^\top)`) gives, for every
multi-index :math:`\alpha`,

.. math::  \partial_x^\alpha f = \frac{(-1)^{|\alpha|}\sigma_f^2}{\ell^\alpha} \sum_k e_k \Big[He_\alpha P_k
           - \sum_i \alpha_i He_{\alpha - \epsilon_i}\, g_{k,i}
           + \sum_{i<j} \alpha_i\alpha_j He_{\alpha-\epsilon_i-\epsilon_j} W_{k,ij}
           + \sum_i \tbinom{\alpha_i}{2} He_{\alpha-2\epsilon_i} W_{k,ii}\Big](r_k)

(:math:`\ell^\alpha = \prod_i \ell_i^{\alpha_i}`). :class:`~learners.shadow.compiled_mean.RBFJet` evaluates all
:math:`\binom{D+K}{K}` of them (:math:`|\alpha| \le K`) in one pass over the atoms per state, in C (the sum
over atoms of the code generator, :mod:`integrators.codegen.reduce`, whose Taylor rules produce exactly these
sums), instead of nested autograd passes over dense (states x atoms) matrices.

:class:`JetLagrangian` hands such jets to code written for a torch Lagrangian (the :mod:`bea`
formulas, Newton's method on velocities): it is a callable ``L(q, v)`` whose value and every
derivative that autograd asks for are looked up in the jet at those points -- an autograd node per
derivative, each a column of the table, differentiable again up to the jet's order, which grows on
demand.
"""

from __future__ import annotations

import logging
import math
from typing import Callable, List, Optional, Tuple

import torch

from bea.errors import BeaValueError

from .compiled_mean import MAX_JET_COLUMNS, RBFJet
from .jet_policy import jet_pays
from .kernels import AtomExpansion

__all__ = ["RBFJet", "JetLagrangian", "ExpansionLagrangian", "bulk_path", "bulk_chunk", "EAGER_PASS_ENTRIES", "multi_indices",
           "MAX_JET_COLUMNS", "jets_fit"]

_log = logging.getLogger(__name__)

MultiIndex = Tuple[int, ...]


def multi_indices(D: int, K: int) -> List[MultiIndex]:
    """All multi-indices :math:`\\alpha \\in \\mathbb N^D` with :math:`|\\alpha| \\le K`, by order, then
    lexicographically by the sorted slot tuple (the column order of :meth:`RBFJet.__call__`)."""
    from integrators.codegen import monomials

    return list(monomials(D, K))


class _Table:
    """The jet of one :class:`JetLagrangian` at one batch of states ``X`` ``(B, D)``, extended on demand."""

    def __init__(self, owner: "JetLagrangian", X: torch.Tensor, K: int):
        self.owner, self.X, self.K = owner, X, -1
        self._extend(K)

    def _extend(self, K: int) -> None:
        self.values = self.owner.jet(self.X, K)
        self.col = {a: i for i, a in enumerate(self.owner.jet.columns(K))}
        self.K = K
        self.owner.order = max(self.owner.order, K)

    def column(self, alpha: MultiIndex) -> torch.Tensor:
        if sum(alpha) > self.K:
            self._extend(sum(alpha))
        return self.values[:, self.col[alpha]]

    def node(self, q: torch.Tensor, v: torch.Tensor, alpha: MultiIndex) -> torch.Tensor:
        """:math:`\\partial^\\alpha L` at these states as an autograd node of ``(q, v)`` (a new one per call)."""
        return _JetNode.apply(q, v, self, alpha)

    def gradient(self, q: torch.Tensor, v: torch.Tensor, alpha: MultiIndex, part: int) -> torch.Tensor:
        """The gradient of :math:`\\partial^\\alpha L` along ``q`` (``part`` 0) or ``v`` (1): the ``n`` nodes of the
        next order, stacked on a last axis."""
        n = q.shape[-1]
        nodes = []
        for i in range(n):
            a = list(alpha)
            a[part * n + i] += 1
            nodes.append(self.node(q, v, tuple(a)))
        return torch.stack(nodes, -1)


class _JetNode(torch.autograd.Function):
    """:math:`\\partial^\\alpha L` at the table's states, as a function of ``(q, v)``; its backward is
    the nodes of the next order (so autograd differentiates it again, to any order)."""

    @staticmethod
    def forward(ctx, q, v, table, alpha):  # noqa: D102
        ctx.save_for_backward(q, v)
        ctx.table, ctx.alpha = table, alpha
        return table.column(alpha).reshape(q.shape[:-1]).clone()

    @staticmethod
    def backward(ctx, grad):  # noqa: D102
        q, v = ctx.saved_tensors
        out = [grad.unsqueeze(-1) * ctx.table.gradient(q, v, ctx.alpha, part) if ctx.needs_input_grad[part] else None
               for part in (0, 1)]
        return out[0], out[1], None, None


class ExpansionLagrangian:
    r"""The Lagrangian :math:`L(q, v) = f(x)`, :math:`x = (q, v)`, of one (frozen) posterior mean expansion ``ex`` by
    autograd: the function a :class:`RBFJet` of ``ex`` tabulates (the jet copies ``ex``'s atoms and parameters, and so
    does the fast expansion itself), so that both paths of :class:`JetLagrangian` evaluate one function even after the
    model that gave ``ex`` is refitted or moved. Pickles the expansion only, not the model."""

    def __init__(self, ex: AtomExpansion):
        self.ex = ex

    def __call__(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.ex(torch.cat([q, v], -1))


class JetLagrangian:
    r"""The RBF posterior mean as a torch Lagrangian ``L(q, v)`` (``x = (q, v)``, shapes ``(..., n)``)
    whose derivatives of every order come from :class:`RBFJet` instead of autograd through the atom sums.

    A call at new states computes the jet there up to :attr:`order` (the highest order asked for so
    far, at least ``order`` given here); later calls at the same states (compared by value) reuse it,
    so the several evaluations of :math:`L` that a :mod:`bea` formula and Newton's method make at one
    batch of states cost one pass over the atoms. Derivatives beyond the computed order extend the jet.
    Results are differentiable in ``q`` and ``v`` (not in the hyperparameters).

    With ``eager`` (an :class:`ExpansionLagrangian` of the jet's expansion), each call takes the jet or ``eager``
    by :func:`~learners.shadow.jet_policy.jet_pays` from its own number of states alone (the two agree to ~4e-12
    relative); a build that fails keeps ``eager`` in this process (not carried by pickling)."""

    def __init__(self, jet: RBFJet, order: int = 2, eager: Optional[Callable] = None):
        if jet.D % 2:
            raise BeaValueError(f"a Lagrangian lives on (q, v): the expansion's dimension {jet.D} must be even")
        self.jet = jet
        self.n = jet.D // 2
        self.order = int(order)
        self._last: Optional[_Table] = None
        #: the same Lagrangian by autograd, for the calls too small for the jet's build (jet_policy.jet_pays)
        self.eager = eager
        self._build_failed = False

    def __getstate__(self):
        state = dict(self.__dict__)
        state["_last"], state["_build_failed"] = None, False  # another process may have a compiler that works
        return state

    def __call__(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if q.shape != v.shape or q.shape[-1] != self.n:
            raise BeaValueError(f"q and v must have the same shape (..., {self.n}), got {tuple(q.shape)} and {tuple(v.shape)}")
        if self.eager is not None and not self.compiles(q.numel() // self.n):
            return self.eager(q, v)
        X = torch.cat([q, v], -1).detach().reshape(-1, 2 * self.n).to(torch.float64)
        return self._table_for(X).node(q, v, (0,) * (2 * self.n))

    def compiles(self, states: int) -> bool:
        """Whether a call at ``states`` states takes the jet (built now if it is not loaded): by :func:`jet_pays` on
        the call alone; False after a failed build (autograd then gives the same values to ~4e-12 relative)."""
        from integrators.ccompile import CompileError

        if self.eager is None:
            return True
        if self._build_failed or not jet_pays(self.jet.D, self.order + 1, states, self.jet.atoms):
            return False
        try:
            self.jet._fn(self.order + 1)
        except CompileError as err:
            _log.debug("jet of order %d in %d variables: build failed (%s), autograd kept", self.order + 1, self.jet.D, err)
            self._build_failed = True
            return False
        return True

    #: the table of one batch of states (a subclass may share its nodes: :mod:`learners.shadow.taylor_jet`)
    _table_type = _Table

    def _table_for(self, X: torch.Tensor) -> _Table:
        """The table at the states ``X`` (B, 2n): the last one where they are equal by value, else a new one."""
        table = self._last
        if table is None or table.X.shape != X.shape or not torch.equal(table.X, X):
            table = self._last = self._table_type(self, X.clone(), self.order)
        return table


def bulk_path(jet: Optional[RBFJet], K: int, states: Optional[int]) -> Optional[bool]:
    """For a bulk call at ``states`` states on the mean's derivatives to order ``K`` (the jet's ``K + 1``), chosen once
    for the whole call, so that its chunks (autograd's, smaller) all take one path: True (the jet) or False (autograd)
    where the jet is large; None where there is no choice to make (no jet, no bulk call, or a small jet)."""
    if jet is None or states is None or jet_pays(jet.D, K + 1, 0):
        return None
    return jet_pays(jet.D, K + 1, states)  # no memory bound: a bulk call on autograd is chunked (bulk_chunk)


#: states x atoms per autograd pass of a bulk call on the policy's autograd path (:func:`bulk_chunk`), orders <= 2: the
#: velocities of order 2 took ~2 kB per (state, atom) (notebook 06's chain: +3.78 GB in one pass of 1900 states x 1006
#: atoms, Session 21), so ~0.4 GB a pass; passes of 40,000 (recovery.AUTOGRAD_ENTRIES) made them 5x slower (~0.9 s of
#: fixed cost per pass); orders above 2 a fifth (modified.chunk_for's ratio)
EAGER_PASS_ENTRIES = 200_000


def bulk_chunk(jet: RBFJet, order: int) -> int:
    """States per autograd pass of a bulk call of order ``order`` on the mean of ``jet`` (:data:`EAGER_PASS_ENTRIES`)."""
    return max(1, (EAGER_PASS_ENTRIES if order <= 2 else EAGER_PASS_ENTRIES // 5) // jet.atoms)


def jets_fit(n: int, order: int) -> bool:
    r"""Whether the closed-form jet of :math:`\bar L'_{inv}` up to the derivatives that :math:`\mathrm{mod}_N`, its
    energy and Newton's method take (order ``N + 3`` in ``2n`` variables) stays within :data:`MAX_JET_COLUMNS`
    (e.g. not ``N = 4`` at ``n = 4``: autograd then)."""
    return order == 0 or math.comb(2 * n + order + 3, order + 3) <= MAX_JET_COLUMNS
