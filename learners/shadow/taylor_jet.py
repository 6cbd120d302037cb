r"""Every partial derivative of the posterior mean up to an order, at given states, from the kernel's feature jets.

:meth:`~learners.shadow.feature_jets.SplitLayout.function_jet` gives the scaled derivatives
:math:`D_\alpha f(x_b) = \partial_z^\alpha f(x_b)/\sqrt{\alpha!}` of the posterior mean :math:`f` in
:math:`z = (x - x_b)/s` (:math:`s` the kernel's scales), :math:`|\alpha| \le K`, in closed form (any kernel with a
split feature expansion: the RBF, the mechanical kernel). In :math:`x`,

.. math::  \partial_x^\alpha f(x_b) = D_\alpha f(x_b)\,\frac{\sqrt{\alpha!}}{s^\alpha}.

:class:`MeanTaylorJet` returns that table in the interface of :class:`~learners.shadow.compiled_mean.RBFJet`
(``D``, ``columns(K)``, ``__call__(X, K)``), so that a :class:`~learners.shadow.rbf_jet.JetLagrangian` hands it to
code written for a torch Lagrangian (the :mod:`bea` formulas of :math:`\mathrm{mod}_N` and its energy): every
derivative that autograd asks for is a column lookup, one entry per state.

Why: a quantity of :math:`\mathrm{mod}_N` at a state depends on :math:`\bar L` only through this jet
(:func:`~learners.shadow.uncertainty.on_mean_jet`). Evaluating it by nested autograd on the mean's Taylor polynomial
keeps each of the ~2,200 intermediate tensors of :math:`\mathrm{mod}_6`'s energy as wide as the polynomial
(:math:`\binom{2n+7}{7}` = 6,435 monomials at :math:`n = 4`); through the atom sums (the RBF's autograd path) as
wide as the training atoms (4,800). On the table they are one entry wide (issue 23: the truncation term's
:math:`H_{rec}[N']` at 160 states, :math:`n = 4`, 25 + 9 s CPU before, benchmarks/truncation_cost.py). The values
are those of the Taylor-polynomial path: the same jet, differentiated exactly instead of by autograd of monomials at
their centre (equal to rounding; tests/test_learners_truncation.py).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import torch

from .rbf_jet import JetLagrangian, _Table
from .uncertainty import _element, _feature_map, _kernel

__all__ = ["MeanTaylorJet", "SharedJetLagrangian", "on_jet_table", "on_table", "split_factor", "TAYLOR_TABLE_ENTRIES",
           "TABLE_STATES"]

#: states x (position jet entries)^2 per pass of :meth:`MeanTaylorJet.__call__` (the (B, S, S) product of
#: :meth:`~learners.shadow.feature_jets.SplitLayout.function_jet`: 330^2 per state at n = 4, K = 7, so ~55 MB a pass)
TAYLOR_TABLE_ENTRIES = 7_000_000
#: states x atoms x position jet entries per atom chunk of the table (fewer, larger passes than the default: ~60 MB)
ATOM_ENTRIES = 8_000_000


class MeanTaylorJet:
    r"""The jet of ``gp``'s posterior mean (inputs ``D``, standardised coordinates): ``self(X, K)`` is
    :math:`\partial^\alpha f` at the states ``X`` (B, D) for :math:`|\alpha| \le K`, (B, columns) in the order of
    :meth:`columns`. The posterior (atoms, hyperparameters) is read when built: build a new one after a refit."""

    def __init__(self, gp, D: int):
        self.base, self.s2 = _kernel(gp)
        self.atoms, self.D = gp._mean_atoms, int(D)
        self._layouts: Dict[int, Tuple[object, torch.Tensor]] = {}

    def _layout(self, K: int):
        """The split layout of order ``K`` and the factor :math:`\\sqrt{\\alpha!}/s^\\alpha` of each column."""
        if K not in self._layouts:
            layout = _feature_map(self.base, self.D, K).split()
            self._layouts[K] = (layout, split_factor(layout, layout.jets))
        return self._layouts[K]

    def columns(self, K: int) -> List[Tuple[int, ...]]:
        """The multi-indices of the table's columns (graded)."""
        return [tuple(int(a) for a in row) for row in self._layout(K)[0].jets]

    def __call__(self, X: torch.Tensor, K: int) -> torch.Tensor:
        layout, factor = self._layout(K)
        S = layout.half.shape[0]
        chunk = max(1, TAYLOR_TABLE_ENTRIES // (S * S))
        out = [layout.function_jet(X[a:a + chunk], self.atoms, ATOM_ENTRIES) for a in range(0, X.shape[0], chunk)]
        return self.s2 * torch.cat(out) * factor


def split_factor(layout, alpha: torch.Tensor) -> torch.Tensor:
    r""":math:`\sqrt{\alpha!}/s^\alpha` per column ``alpha`` (A, D): a split layout's scaled derivatives to plain ones."""
    scales = torch.cat([layout.fq.scales, layout.fv.scales])
    alpha = alpha.to(scales.device)
    return torch.exp(0.5 * torch.lgamma(alpha.double() + 1).sum(-1)) / (scales ** alpha).prod(-1)


class _SharedTable(_Table):
    r"""A :class:`~learners.shadow.rbf_jet._Table` whose nodes are shared: each :math:`\partial^\alpha L` at one
    point tensor (and each gradient, the ``n`` nodes of the next order along ``q`` or ``v``, stacked) is made once
    and reused by every later backward pass.

    Both caches are keyed on the grad mode as well: a node made under ``torch.no_grad`` (a backward pass without
    ``create_graph``) is a constant, and handed to a later ``create_graph=True`` pass it would drop every higher
    derivative without a word. The cached outputs' ``grad_fn`` hold this table (``ctx.table``), a reference cycle
    through autograd's C++ graph that ``gc`` cannot collect: :meth:`release` breaks it once a pass is done."""

    def __init__(self, owner, X: torch.Tensor, K: int):
        super().__init__(owner, X, K)
        self.shared: Optional[Dict[tuple, torch.Tensor]] = {}
        self.points: List[Tuple[torch.Tensor, torch.Tensor]] = []  # keeps the ids of the keys unique while cached

    def node(self, q: torch.Tensor, v: torch.Tensor, alpha) -> torch.Tensor:  # noqa: D102
        return self._cached(("node", alpha), q, v, lambda: super(_SharedTable, self).node(q, v, alpha))

    def gradient(self, q: torch.Tensor, v: torch.Tensor, alpha, part: int) -> torch.Tensor:  # noqa: D102
        return self._cached(("grad", alpha, part), q, v, lambda: super(_SharedTable, self).gradient(q, v, alpha, part))

    def _cached(self, what: tuple, q: torch.Tensor, v: torch.Tensor, make) -> torch.Tensor:
        if self.shared is None:  # released: plain nodes (a graph still differentiated after its pass)
            return make()
        key = what + (id(q), id(v), torch.is_grad_enabled())
        out = self.shared.get(key)
        if out is None:
            out = self.shared[key] = make()
            self.points.append((q, v))
        return out

    def release(self) -> None:
        """Drop the shared nodes (the cycle table -> node -> ``grad_fn`` -> table); later nodes are not shared."""
        self.shared, self.points = None, []


class SharedJetLagrangian(JetLagrangian):
    r"""A :class:`~learners.shadow.rbf_jet.JetLagrangian` whose derivative nodes are shared: every
    :math:`\partial^\alpha L` at one point tensor is one autograd node, however many chains of derivatives reach
    it. The plain one makes a new node per path (:math:`(2n)^k` of them for a derivative of order :math:`k`: 21 s
    for :math:`H_{rec}[6]` at :math:`n = 4` and 4 states, this one about 2 s for 160). Same values (the same table entries,
    summed by the same formulas); for one evaluation at a time: call :meth:`release` when done (the shared graph is
    otherwise kept alive by a reference cycle; a table replaced by one at other states is released then)."""

    _table_type = _SharedTable

    def _table_for(self, X: torch.Tensor) -> _Table:
        old = self._last
        table = super()._table_for(X)
        if old is not None and old is not table:
            old.release()
        return table

    def release(self) -> None:
        """Release the last table's shared nodes (:meth:`_SharedTable.release`) and forget it."""
        if self._last is not None:
            self._last.release()
            self._last = None


def on_jet_table(gp, quantities: Sequence, x: torch.Tensor, p: int) -> List[torch.Tensor]:
    r"""Each of ``quantities`` (``quantity(L, q, v)``, one output per state, jet order at most ``p``) of ``gp``'s
    posterior mean at the states ``x`` (B, D): a list of (B,). The values of
    :func:`~learners.shadow.uncertainty.on_mean_jet` (the same jet of order ``p``, differentiated exactly instead of
    through its Taylor polynomial); the quantities share one table, :data:`TABLE_STATES` states a pass."""
    element = _element(gp.kernel.base_kernel)
    if element:  # the element kernel: its own jet table (learners.shadow.element_uncertainty.on_mean)
        return [v[:, 0] for v in element.on_mean(gp, quantities, x, p)]
    return [v[:, 0] for v in on_table(MeanTaylorJet(gp, x.shape[-1]), quantities, x, p)]


def on_table(jet, quantities: Sequence, x: torch.Tensor, p: int, k: int = 1) -> List[torch.Tensor]:
    r"""Each of ``quantities`` (``quantity(L, q, v)``, ``k`` outputs per state, jet order at most ``p``) of the function
    whose jet ``jet`` tabulates (:class:`MeanTaylorJet`'s interface), at the states ``x`` (B, D): a list of (B, k), on
    one :class:`SharedJetLagrangian` per :data:`TABLE_STATES` states."""
    n = x.shape[-1] // 2
    if x.shape[0] == 0:
        return [x.new_zeros(0, k) for _ in quantities]
    out: List[List[torch.Tensor]] = [[] for _ in quantities]
    for a in range(0, x.shape[0], TABLE_STATES):
        xb = x[a:a + TABLE_STATES]
        L = SharedJetLagrangian(jet, p)
        try:
            with torch.enable_grad():
                q, v = xb[:, :n].detach().clone(), xb[:, n:].detach().clone()
                for values, quantity in zip(out, quantities):
                    values.append(quantity(L, q, v).reshape(-1, k).detach())
        finally:  # else each pass's graph (~20 MB at n = 3, 200 states) outlives it: a reference cycle
            L.release()
    return [torch.cat(values) for values in out]


#: states per table of :func:`on_jet_table` (its graph: ~20,000 shared nodes of one entry per state at n = 4, p = 7)
TABLE_STATES = 1000
