r"""Kernels with linear functionals applied on both sides, :math:`\Theta_{ij} = \Lambda_i \Lambda'_j k`.

A base kernel :math:`k(x, y)` on :math:`TQ = \mathbb R^D` is a :class:`SmoothKernel`: a GPyTorch
kernel that also evaluates *pairwise* (``pointwise(x, y)`` for matching rows), with ordinary torch
operations that autograd can differentiate to any order (GPyTorch's own ``RBFKernel`` is not suitable:
its distance uses a norm, whose derivative is undefined at coincident points).

:class:`FunctionalKernel` builds the covariance of two families of functionals
(:class:`~learners.shadow.functionals.Functionals`), atom by atom:

.. math::  \Theta_{ij} = \sigma_f^2 \sum_{k \in i}\sum_{l \in j} c_k c_l\,
           \partial_{t_1}\cdots\partial_{t_a}\,\partial_{s_1}\cdots\partial_{s_b}\,
           k\big(x_k + \textstyle\sum t_r u_{k,r},\; y_l + \sum s_r u'_{l,r}\big)\Big|_{t = s = 0}.

*Generic path* (any :class:`SmoothKernel`): every pair of atoms gets its own scalar leaves :math:`t_r, s_r`; the
pairwise kernel is differentiated by nested ``torch.autograd.grad`` calls, and since pair ``p`` depends only on its own
leaves, each gradient is the whole matrix of pairwise derivatives.

*Closed form* (:class:`RBFKernel`): :math:`k = \exp(-Q)` with
:math:`Q = \tfrac12\|\tilde r + \sum_r t_r\tilde u_r - \sum_r s_r\tilde u'_r\|^2` quadratic in the
leaves (tilde: divided by the lengthscales), so the multilinear derivative is the Isserlis-type sum
over partitions of the variables into singletons and pairs,

.. math::  \partial_{z_1}\cdots\partial_{z_m} e^{-Q}\big|_0 = e^{-Q_0}
           \sum_{\pi} \prod_{\{i\} \in \pi} (-Q_i) \prod_{\{i,j\} \in \pi} (-Q_{ij}),

with :math:`Q_i = \partial_{z_i} Q|_0` and :math:`Q_{ij} = \partial_{z_i}\partial_{z_j}Q`: a few dense matrix products
per block, differentiable in the hyperparameters. The two paths agree to rounding (tested).
"""

from __future__ import annotations

from typing import Dict, List, Optional

import gpytorch
import torch
from gpytorch.constraints import Positive

from bea.errors import BeaTypeError, BeaValueError

from .functionals import AtomSet, Functionals
from .rbf_block import first_order_block, usable
from .transpose_sum import add_transpose_, fresh_block, unit_coefficients

__all__ = ["SmoothKernel", "RBFKernel", "FunctionalKernel", "AtomExpansion"]

#: atoms per row chunk when a covariance is assembled without gradients (bounds memory)
CHUNK_ATOMS = 512  # rows x columns of one block <= CHUNK_ATOMS**2 entries (2 MB: stays in cache)


class SmoothKernel(gpytorch.kernels.Kernel):
    r"""A GPyTorch kernel with a smooth pairwise form ``pointwise(x, y)`` ((P, D), (P, D) -> (P,))."""

    def pointwise(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError

    def forward(self, x1: torch.Tensor, x2: torch.Tensor, diag: bool = False, **params) -> torch.Tensor:
        if diag:
            return self.pointwise(x1, x2)
        A, B = x1.shape[-2], x2.shape[-2]
        xs = x1[..., :, None, :].expand(*x1.shape[:-2], A, B, x1.shape[-1])
        ys = x2[..., None, :, :].expand(*x2.shape[:-2], A, B, x2.shape[-1])
        return self.pointwise(xs.reshape(-1, x1.shape[-1]), ys.reshape(-1, x2.shape[-1])).reshape(*x1.shape[:-2], A, B)

    def derivative_block(self, X: torch.Tensor, U: torch.Tensor, Y: torch.Tensor, V: torch.Tensor) -> torch.Tensor:
        r"""Matrix (A, B) of :math:`\partial_{t_1..t_a}\partial_{s_1..s_b} k(x + \sum t u, y + \sum s v)|_0` for atoms
        ``X`` (A, D) with directions ``U`` (A, a, D) and ``Y`` (B, D), ``V`` (B, b, D), by nested autograd on per-pair
        leaves (generic; subclasses may override with a closed form: one marked ``@fresh_block`` returns a new float64
        matrix, which the assembly may modify in place, :mod:`~learners.shadow.transpose_sum`)."""
        return _autograd_block(self, X, U, Y, V)


def _autograd_block(kernel: SmoothKernel, X, U, Y, V) -> torch.Tensor:
    A, B, D = X.shape[0], Y.shape[0], X.shape[1]
    a, b = U.shape[1], V.shape[1]
    P = A * B
    with torch.enable_grad():
        ts = [X.new_zeros(P).requires_grad_(True) for _ in range(a)]
        ss = [X.new_zeros(P).requires_grad_(True) for _ in range(b)]
        xp = X[:, None, :].expand(A, B, D).reshape(P, D)
        yp = Y[None, :, :].expand(A, B, D).reshape(P, D)
        for r in range(a):
            xp = xp + ts[r][:, None] * U[:, None, r, :].expand(A, B, D).reshape(P, D)
        for r in range(b):
            yp = yp + ss[r][:, None] * V[None, :, r, :].expand(A, B, D).reshape(P, D)
        val = kernel.pointwise(xp, yp)
        for leaf in ts + ss:
            (val,) = torch.autograd.grad(val.sum(), leaf, create_graph=True)
    return val.reshape(A, B)


class RBFKernel(SmoothKernel):
    r"""Squared exponential :math:`k(x, y) = \exp\big(-\tfrac12 \sum_d (x_d - y_d)^2/\ell_d^2\big)`
    (one lengthscale, or one per input with ``ard_num_dims=D``). The paper's
    :math:`\exp(-\|x - y\|^2/\varepsilon^2)` is :math:`\ell = \varepsilon/\sqrt2`. Functional blocks
    in closed form (see the module docstring)."""

    has_lengthscale = True

    def pointwise(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ls = self.lengthscale.reshape(-1)
        return torch.exp(-0.5 * (((x - y) / ls) ** 2).sum(-1))

    @fresh_block
    def derivative_block(self, X, U, Y, V) -> torch.Tensor:
        """First-order atoms without gradients: in a few passes over one buffer (:mod:`~learners.shadow.rbf_block`)."""
        ls = self.lengthscale.reshape(-1)
        Xs, Ys, Us, Vs = X / ls, Y / ls, U / ls, V / ls
        if usable(Us, Vs, Xs, Ys):
            return first_order_block(Xs, Us, Ys, Vs)
        # r = x - y; Q0 = |r|^2 / 2, expanded so that everything is a smooth polynomial (no clamp)
        sq = 0.5 * ((Xs * Xs).sum(-1)[:, None] + (Ys * Ys).sum(-1)[None, :]) - Xs @ Ys.T
        base = torch.exp(-sq)
        a, b = U.shape[1], V.shape[1]
        if a == 0 and b == 0:
            return base
        # first derivatives of Q at 0: x-side u.r, y-side -v.r  (r = x - y)
        first = [(Us[:, r] * Xs).sum(-1)[:, None] - Us[:, r] @ Ys.T for r in range(a)]
        first += [-((Xs @ Vs[:, r].T) - (Vs[:, r] * Ys).sum(-1)[None, :]) for r in range(b)]
        second = quadratic_pairs(Us, Vs, a)
        poly = _partition_sum(list(range(a + b)), [-f for f in first], lambda i, j: -second(i, j))
        return base * poly


def quadratic_pairs(U: torch.Tensor, V: torch.Tensor, a: int):
    r"""The second derivatives :math:`Q_{ij}` of :math:`Q = \tfrac12\|r + \sum_r t_r u_r - \sum_r s_r v_r\|^2` between
    the leaves, ``pair(i, j)`` for ``i < j``, leaves ``0..a-1`` the :math:`t_r` (directions ``U`` (A, a, D)) and ``a..``
    the :math:`s_r` (``V`` (B, b, D)): a (A, 1), (1, B) or (A, B) matrix. Shared by every kernel built on a scaled
    squared distance (:class:`RBFKernel`, the position factor of the mechanical kernel)."""

    def pair(i: int, j: int) -> torch.Tensor:
        if i < a and j < a:
            return (U[:, i] * U[:, j]).sum(-1)[:, None]
        if i >= a and j >= a:
            return (V[:, i - a] * V[:, j - a]).sum(-1)[None, :]
        ii, jj = (i, j - a) if i < a else (j, i - a)
        return -(U[:, ii] @ V[:, jj].T)

    return pair


def _partition_sum(idx: List[int], first: List[torch.Tensor], pair) -> torch.Tensor:
    r""":math:`\sum_\pi \prod_{\text{singletons}} f_i \prod_{\text{pairs}} g_{ij}` over partitions of ``idx``
    into blocks of size one and two (recursion on the first element)."""
    if not idx:
        return first[0].new_ones(()) if first else torch.ones((), dtype=torch.float64)
    i, rest = idx[0], idx[1:]
    total = first[i] * _partition_sum(rest, first, pair)
    for k, j in enumerate(rest):
        total = total + pair(i, j) * _partition_sum(rest[:k] + rest[k + 1:], first, pair)
    return total


class FunctionalKernel(gpytorch.kernels.Kernel):
    r"""The covariance :math:`\Theta = \sigma_f^2\,\Lambda\Lambda'^\top k` of two families of linear functionals under
    :math:`L \sim \mathcal{GP}(0, \sigma_f^2 k)`, for a :class:`SmoothKernel` ``k``.

    ``forward(F1, F2)`` takes :class:`~learners.shadow.functionals.Functionals` (not tensors: call it directly, not
    through ``__call__``) and returns the dense (F1.count, F2.count) matrix. The outputscale :math:`\sigma_f^2` is a
    GPyTorch parameter with a positivity constraint. ``closed_form=False`` forces the generic autograd path.
    ``forward(F, F, symmetric=True)`` (no gradients): each atom pair once (:mod:`~learners.shadow.symmetric_covariance`;
    :math:`U + U^\top` by :func:`~learners.shadow.transpose_sum.add_transpose_`). A block is the caller's to modify."""

    def __init__(self, base_kernel: Optional[SmoothKernel] = None, closed_form: bool = True, **kwargs):
        super().__init__(**kwargs)
        base_kernel = RBFKernel() if base_kernel is None else base_kernel
        if not isinstance(base_kernel, SmoothKernel):
            raise BeaTypeError("base_kernel must be a learners.shadow.kernels.SmoothKernel (with a smooth pairwise form), "
                            f"got {type(base_kernel).__name__}")
        self.base_kernel = base_kernel
        self.closed_form = closed_form
        # made on the default device like GPyTorch's own parameters; the model moves it with .to()
        self.register_parameter("raw_outputscale", torch.nn.Parameter(torch.zeros((), dtype=torch.float64)))
        self.register_constraint("raw_outputscale", Positive())

    @property
    def outputscale(self) -> torch.Tensor:
        return self.raw_outputscale_constraint.transform(self.raw_outputscale)

    @outputscale.setter
    def outputscale(self, value) -> None:
        value = torch.as_tensor(value, dtype=self.raw_outputscale.dtype, device=self.raw_outputscale.device)
        self.initialize(raw_outputscale=self.raw_outputscale_constraint.inverse_transform(value))

    def block(self, X, U, Y, V) -> torch.Tensor:
        if self.closed_form:
            return self.base_kernel.derivative_block(X, U, Y, V)
        return _autograd_block(self.base_kernel, X, U, Y, V)

    def forward(self, F1: Functionals, F2: Functionals, diag: bool = False, symmetric: bool = False,
                **params) -> torch.Tensor:  # type: ignore[override]
        if not isinstance(F1, Functionals) or not isinstance(F2, Functionals):
            raise BeaTypeError("FunctionalKernel.forward takes two learners.shadow.functionals.Functionals")
        if F1.dim != F2.dim and (F1.dim, F2.dim) not in getattr(self.base_kernel, "cross_dimensions", ()):  # element_extension
            raise BeaValueError(f"functionals on spaces of different dimensions: {F1.dim} and {F2.dim}")
        if diag:
            return self.diagonal(F1)
        need_grad = torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())
        if symmetric and (F2 is not F1 or need_grad):
            raise BeaValueError("symmetric=True assembles Theta(F, F), forward(F, F), without gradients (torch.no_grad())")
        if not need_grad:  # every atom pair adds into one matrix: no (F1, F2) temporary per pair (n = 6: 9 of them)
            out = torch.zeros(F1.count, F2.count, dtype=torch.float64, device=F1.device)
            sets = [F1.atoms[m] for m in sorted(F1.atoms)] if symmetric else list(F1.atoms.values())
            for i, A1 in enumerate(sets):  # symmetric: the pairs of orders m <= m' (U of symmetric_covariance)
                for k, A2 in enumerate(sets[i:] if symmetric else F2.atoms.values()):
                    self._pair_into(A1, A2, out, upper=symmetric and k == 0)
            return (add_transpose_(out) if symmetric else out).mul_(self.outputscale)  # symmetric: U + U^T, tile by tile
        parts = [self._pair(A1, A2, F1.count, F2.count) for A1 in F1.atoms.values() for A2 in F2.atoms.values()]
        return self.outputscale * sum(parts, torch.zeros(F1.count, F2.count, dtype=torch.float64, device=F1.device))

    def _pair(self, A1: AtomSet, A2: AtomSet, n1: int, n2: int) -> torch.Tensor:
        """The atoms' covariance summed into functionals, out of place (in-place adds would break autograd)."""
        phi = self.block(A1.points, A1.dirs, A2.points, A2.dirs) * A2.coef
        cols = phi.new_zeros(phi.shape[0], n2).index_add(1, A2.owner, phi)
        return cols.new_zeros(n1, n2).index_add(0, A1.owner, cols * A1.coef[:, None])

    def _pair_into(self, A1: AtomSet, A2: AtomSet, out: torch.Tensor, upper: bool = False) -> None:
        """Add the covariance of the atoms ``A1`` with ``A2``, summed into functionals, to ``out`` in place; ``upper`` (``A1``
        is ``A2``): row chunks against the atoms from their first on, a chunk with itself halved (symmetric_covariance)."""
        # atoms are summed into functionals by index_add on dense chunks: torch's sparse products were 3/4 of the cost of a
        # covariance, and chunks of CHUNK_ATOMS**2 entries stay in cache (n = 6, 4,800 functionals: 25 s -> 8 s at load 9)
        step = max(16, CHUNK_ATOMS * CHUNK_ATOMS // max(1, len(A2)))  # >= 16 rows: bounded Python overhead
        ones = unit_coefficients(self, A1, A2)  # the DEL atoms' coefficients, from a kernel whose blocks are fresh float64
        for s in range(0, len(A1), step):
            sl, tail = slice(s, s + step), slice(s if upper else 0, None)
            phi = self.block(A1.points[sl], A1.dirs[sl], A2.points[tail], A2.dirs[tail])  # (a, A2)
            phi = phi if ones[1] and not phi.requires_grad else phi * A2.coef[tail]  # x * 1 is x: no pass
            if upper:  # the pairs within the chunk: both orders are here, each counts half
                phi[:, : phi.shape[0]].mul_(0.5)
            cols = phi.new_zeros(phi.shape[0], out.shape[1]).index_add_(1, A2.owner[tail], phi)  # (a, n2)
            out.index_add_(0, A1.owner[sl], cols if ones[0] else cols * A1.coef[sl, None])

    def diagonal(self, F: Functionals, chunk: int = 512) -> torch.Tensor:
        r"""Prior variances :math:`\Theta_{ii}` of the functionals ``F`` (blocks of ``chunk`` functionals,
        never the full matrix)."""
        parts = []
        for s in range(0, F.count, chunk):
            sub = F.subset(torch.arange(s, min(s + chunk, F.count), device=F.device))
            parts.append(torch.diagonal(self.forward(sub, sub)))
        return torch.cat(parts) if parts else torch.zeros(0, dtype=torch.float64, device=F.device)


class AtomExpansion:
    r"""A fixed function :math:`f(x) = \sigma_f^2 \sum_k c_k\, \partial_{v_{k,1}}\cdots\partial_{v_{k,m}} k(x, y_k)`
    (derivatives on the second argument): the posterior mean of a functional GP.

    Hyperparameters are frozen at construction (detached), so repeated evaluation, e.g. inside an integrator, costs only a few
    dense products with the atoms. For :class:`RBFKernel` (atoms of order <= 2) the scaled atoms are precomputed and, with
    :math:`r_k = \tilde x - \tilde y_k` (tilde: divided by the lengthscales) and :math:`e_k = e^{-\|r_k\|^2/2}`,

    .. math::  f(x) = \sigma_f^2 \sum_k e_k P_k(r_k), \qquad
               P_k(r) = c^0_k + \tilde v_k\cdot r
               + c^2_k\big[(\tilde u_k\cdot r)(\tilde d_k\cdot r) - \tilde u_k\cdot\tilde d_k\big]

    (order 0, 1 and 2 atoms), evaluated as one autograd node whose backward is the analytic gradient :math:`\sigma_f^2 \sum_k
    e_k(\nabla P_k - r_k P_k)/\ell`, itself written in differentiable torch operations (so higher derivatives, as :mod:`bea`
    needs, work). A kernel with an ``expansion(atoms, outputscale)`` method supplies its own closed form (the mechanical
    kernel); other kernels use ``derivative_block``. Its precomputed fields change between versions: pickle a model through
    its ``save``, never an expansion itself.
    """

    def __init__(self, kernel: FunctionalKernel, atoms: Dict[int, AtomSet], differentiable: bool = False):
        self.kernel = kernel
        self.atoms = atoms
        self.fast = isinstance(kernel.base_kernel, RBFKernel) and set(atoms) <= {0, 1, 2} and not differentiable
        # another kernel's own closed form of the mean (learners.shadow.mechanical.MechanicalExpansion), if it has one
        own = not self.fast and not differentiable and atoms and hasattr(kernel.base_kernel, "expansion")
        self._custom = kernel.base_kernel.expansion(atoms, kernel.outputscale) if own and set(atoms) <= {0, 1, 2} else None
        if self.fast:
            with torch.no_grad():
                ls = kernel.base_kernel.lengthscale.reshape(-1).detach().clone()
                D = next(iter(atoms.values())).points.shape[-1]
                ys, c0, vs, us, ds, c2 = [], [], [], [], [], []
                for m, A in atoms.items():
                    K, zero = len(A), A.points.new_zeros(len(A), D)
                    ys.append(A.points / ls)
                    c0.append(A.coef if m == 0 else A.points.new_zeros(K))
                    vs.append(A.coef[:, None] * A.dirs[:, 0] / ls if m == 1 else zero)
                    us.append(A.dirs[:, 0] / ls if m == 2 else zero)
                    ds.append(A.dirs[:, 1] / ls if m == 2 else zero)
                    c2.append(A.coef if m == 2 else A.points.new_zeros(K))
                Y, V, U, Dd = torch.cat(ys), torch.cat(vs), torch.cat(us), torch.cat(ds)
                self._ls, self._scale, self._Y, self._V = ls, kernel.outputscale.detach().clone(), Y, V
                self._Yt, self._Vt = Y.T.contiguous(), V.T.contiguous()
                self._ynorm = 0.5 * (Y * Y).sum(-1)
                c2 = torch.cat(c2)
                self._const = torch.cat(c0) - (Y * V).sum(-1) - c2 * (U * Dd).sum(-1)
                self._second = 2 in atoms
                if self._second:  # order-2 terms on the order-2 atoms' block only (c2, u, d vanish elsewhere): equal to rounding
                    self._c2, self._U, self._Dd = c2, U, Dd  # every atom's (compiled_mean)
                    first = sum(len(atoms[m]) for m in list(atoms)[:list(atoms).index(2)])
                    self._two = two = slice(first, first + len(atoms[2]))
                    self._c2s, self._Us, self._Ds = c2[two], U[two], Dd[two]
                    self._Ut2, self._Dt2 = self._Us.T.contiguous(), self._Ds.T.contiguous()
                    self._yu2, self._yd2 = (Y[two] * self._Us).sum(-1), (Y[two] * self._Ds).sum(-1)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-1]
        X = x.reshape(-1, x.shape[-1])
        if self.fast:
            return _RBFExpansion.apply(X, self).reshape(lead)
        if self._custom is not None:
            return self._custom(X).reshape(lead)
        empty = X.new_zeros(X.shape[0], 0, X.shape[-1])
        out = None
        for A in self.atoms.values():
            part = self.kernel.block(X, empty, A.points, A.dirs) @ A.coef
            out = part if out is None else out + part
        return (self.kernel.outputscale * out).reshape(lead)


def _rbf_terms(X: torch.Tensor, ex: AtomExpansion):
    """Scaled inputs, the exponentials e_k, and P_k (plus u.r, d.r for order-2 atoms)."""
    Xs = X / ex._ls
    E = torch.exp(Xs @ ex._Yt - 0.5 * (Xs * Xs).sum(-1, keepdim=True) - ex._ynorm)
    P = Xs @ ex._Vt + ex._const
    ur = dr = None
    if ex._second:
        ur = Xs @ ex._Ut2 - ex._yu2
        dr = Xs @ ex._Dt2 - ex._yd2
        P[:, ex._two] += ex._c2s * ur * dr  # P is this function's own (the sum's output, saved by no node)
    return Xs, E, P, ur, dr


def _rbf_value(X: torch.Tensor, ex: AtomExpansion, terms=None) -> torch.Tensor:
    _, E, P, _, _ = terms if terms is not None else _rbf_terms(X, ex)
    return ex._scale * (E * P).sum(-1)


def _rbf_gradient(X: torch.Tensor, ex: AtomExpansion, terms=None) -> torch.Tensor:
    r""":math:`\nabla f = \sigma_f^2 \sum_k e_k(\nabla P_k - r_k P_k)/\ell` (differentiable torch operations)."""
    Xs, E, P, ur, dr = terms if terms is not None else _rbf_terms(X, ex)
    EP = E * P
    g = E @ ex._V - Xs * EP.sum(-1, keepdim=True) + EP @ ex._Y
    if ex._second:
        Ec = E[:, ex._two] * ex._c2s
        g = g + (Ec * dr) @ ex._Us + (Ec * ur) @ ex._Ds
    return ex._scale * g / ex._ls


def _rbf_hvp(X: torch.Tensor, W: torch.Tensor, ex: AtomExpansion, terms=None) -> torch.Tensor:
    r"""Hessian-vector products :math:`\nabla^2 f(x_b)\, w_b` (rows ``b``), in closed form: with
    :math:`\omega = w/\ell`, :math:`g_k = \nabla P_k`,

    .. math:: \nabla^2 f\,w = \frac{\sigma_f^2}{\ell}\sum_k e_k\big[\nabla^2P_k\,\omega - g_k (r_k\cdot\omega)
              - r_k (g_k\cdot\omega) - P_k\,\omega + P_k\, r_k (r_k\cdot\omega)\big]

    (ordinary torch operations: differentiable again)."""
    Xs, E, P, ur, dr = terms if terms is not None else _rbf_terms(X, ex)
    Om = W / ex._ls
    rw = (Xs * Om).sum(-1, keepdim=True) - Om @ ex._Yt
    gw = Om @ ex._Vt
    if ex._second:
        uw, dw = Om @ ex._Ut2, Om @ ex._Dt2
        gw[:, ex._two] += ex._c2s * (uw * dr + dw * ur)  # gw: the product's output, saved by no node
    EP = E * P
    Erw = E * rw
    Egw = E * gw
    EPrw = EP * rw
    out = (-(Erw @ ex._V) - Xs * Egw.sum(-1, keepdim=True) + Egw @ ex._Y - Om * EP.sum(-1, keepdim=True)
           + Xs * EPrw.sum(-1, keepdim=True) - EPrw @ ex._Y)
    if ex._second:
        Ec, rw2 = E[:, ex._two] * ex._c2s, rw[:, ex._two]
        out = out + (Ec * dw) @ ex._Us + (Ec * uw) @ ex._Ds - (Ec * rw2 * dr) @ ex._Us - (Ec * rw2 * ur) @ ex._Ds
    return ex._scale * out / ex._ls


class _RBFExpansion(torch.autograd.Function):
    """The RBF atom expansion as one autograd node; its backward is the node :class:`_RBFGradient`,
    whose backward is the closed-form Hessian-vector product. The integrators differentiate the
    Lagrangian twice per Newton step: two fused nodes instead of graphs of dozens of operations.
    The exponentials of a forward pass are reused by the first backward (computed without a graph);
    whenever a graph is being built (higher derivatives), everything is recomputed from ``X``."""

    @staticmethod
    def forward(ctx, X, ex):
        terms = _rbf_terms(X, ex)
        ctx.save_for_backward(X)
        ctx.ex, ctx.terms = ex, terms
        return _rbf_value(X, ex, terms)

    @staticmethod
    def backward(ctx, grad_out):
        (X,) = ctx.saved_tensors
        return grad_out[:, None] * _RBFGradient.apply(X, ctx.ex, ctx.terms), None


class _RBFGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, ex, terms):
        ctx.save_for_backward(X)
        ctx.ex, ctx.terms = ex, terms
        return _rbf_gradient(X, ex, terms)

    @staticmethod
    def backward(ctx, grad_out):
        (X,) = ctx.saved_tensors
        # with create_graph the product must be differentiable in X: recompute with a graph
        terms = None if torch.is_grad_enabled() else ctx.terms
        return _rbf_hvp(X, grad_out, ctx.ex, terms), None, None
