r"""Posterior uncertainty of quantities recovered from a learned inverse modified Lagrangian.

LSI identifies the energy and the velocities through the *nonlinear* map
:math:`L_{inv} \mapsto L_{rec} = \mathrm{mod}_N(L_{inv})` (docs/theory/inverse.md, docs/theory/lsi.md). Around the posterior
mean :math:`\bar L` a recovered quantity :math:`Q[L]` is linearised,

.. math::  Q[\bar L + \delta L] = Q[\bar L] + G[\delta L] + O(\delta L^2),

and under the GP posterior :math:`\delta L` is Gaussian, so :math:`G[\delta L]` has the variance

.. math::  \operatorname{Var} G = G G' k - G K_\Lambda^{\top} (\Theta + \sigma_n^2 I)^{-1} K_\Lambda G'^{\top}

(:mod:`learners.shadow.gp`): one more functional-kernel evaluation. Every :math:`G` used here is the sum of

* a *jet part* :math:`T_b[\delta L] = \tfrac{d}{d\varepsilon} Q_b[\bar L + \varepsilon\,\delta L]|_0`,
  where :math:`Q_b` depends on :math:`L` only through its derivatives (up to some order :math:`p`) at
  one state :math:`x_b` -- the energy :math:`H(\mathrm{mod}_N L)(x_b)`, the momentum
  :math:`\partial_v \mathrm{mod}_N L(x_b)` -- evaluated by :mod:`bea`'s torch functions for any
  ``n`` and scheme;
* an optional *atom part* :math:`A_b`, a linear functional made of derivative atoms
  (:mod:`learners.shadow.functionals`), e.g. the discrete momentum :math:`p_j[L]`.

**Jet parts, exactly and without derivative tensors.** All :math:`T_b` applied to a whole family of
functions :math:`g_1..g_C` cost one evaluation of :math:`Q` and one backward pass: evaluate
:math:`Q_b` on :math:`\bar L + \sum_c w_{bc}\, g_c` with a separate coefficient row :math:`w_b` per
state (state ``b`` only sees row ``b``), and differentiate with respect to :math:`w` at zero. Only one family
goes through that pass: the scaled monomials :math:`(x - x_b)^\alpha` of order :math:`\le p` (:class:`_Jets`),
whose values fix :math:`T_b`; the two families below, which the variance needs, follow from them by closed-form
tables (:mod:`learners.shadow.feature_jets`; pushing them through the nested derivatives of
:math:`\mathrm{mod}_N` themselves kept tensors as wide as every feature and training atom, 12.9 GB at
:math:`n = 4`). The families are:

* the kernel sections of the training functionals, :math:`g_i = \sigma_f^2 \Lambda_i^y k(\cdot, y)`,
  which give the cross-covariances :math:`T_b[g_i] = \operatorname{Cov}(T_b, \Lambda_i)`;
* Gaussian features for the prior term. For the RBF kernel with lengthscales :math:`\ell`
  (tilde: divided by :math:`\ell`) the expansion
  :math:`e^{-|\tilde s - \tilde t|^2/2} = \sum_\gamma \varphi_\gamma(\tilde s)\varphi_\gamma(\tilde t)`,
  :math:`\varphi_\gamma(z) = e^{-|z|^2/2} z^\gamma/\sqrt{\gamma!}` (multi-indices :math:`\gamma`; from
  :math:`e^{\tilde s\cdot\tilde t} = \sum_\gamma \tilde s^\gamma \tilde t^\gamma/\gamma!`), holds everywhere. A
  functional of the jet of order :math:`p` at :math:`x_b` annihilates :math:`\varphi_\gamma(\cdot - x_b)` for
  :math:`|\gamma| > p` (all its derivatives of order :math:`\le p` vanish at :math:`x_b`), so with
  :math:`c_{b\gamma} = T_b[\varphi_\gamma((\cdot - x_b)/\ell)]`

  .. math::  T_b T_b' k = \sigma_f^2 \sum_{|\gamma| \le p} c_{b\gamma} c'_{b\gamma}, \qquad
             T_b^x k(x, y) = \sigma_f^2 \sum_{|\gamma| \le p} c_{b\gamma}\, \varphi_\gamma((y - x_b)/\ell):

  *exact* finite sums, no truncation. The second gives the covariance of a jet part with any other
  functional (an atom part, or the jet part at a reference state) as that functional applied to an
  explicit function. The order :math:`p` is found once per quantity by probing (the features of
  the first orders above it must give exact zeros).

Energies are determined only up to a constant (and the scale of the normalisation), so
differences :math:`Q_b - Q_{ref}` with their own variance (the covariance of the two is subtracted)
are what calibration compares (:class:`Reference`).

The :class:`~learners.shadow.kernels.RBFKernel` (the default) has the Gaussian features above; another kernel supplies
its own exact expansion as ``feature_map(D, p)`` (the mechanical kernel: :class:`~learners.shadow.mechanical.MechanicalFeatures`;
the element kernel: element-space jets, :mod:`learners.shadow.element_uncertainty`), one without raises ``TypeError``.
Everything here works in the model's standardised coordinates.

Size: one algorithm (the prior's expansion, the kernel sections at the data, the linearisation through ``mod_N``)
whose pieces share private data structures and are only correct together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import torch

from bea.errors import BeaRuntimeError, BeaTypeError, BeaValueError

from .feature_jets import GaussianFactor, SplitLayout, index_of
from .functionals import AtomSet, Functionals
from .kernels import RBFKernel
from .variance_rounding import floored as _floored, resolved_variance, solve_with_bound as _solve

__all__ = ["GaussianFeatures", "LinearisedQuantity", "Reference", "posterior_variance", "jet_order", "on_mean_jet"]

Quantity = Callable[[Callable, torch.Tensor, torch.Tensor], torch.Tensor]

#: entries (states x basis functions) of one coefficient block in a linearisation pass: bounds memory,
#: since every nested derivative that ``mod_N`` takes keeps tensors of this size
PASS_ENTRIES = 200_000
#: entries of the per-state tables that turn jet values into feature coefficients (learners.shadow.feature_jets)
TABLE_ENTRIES = 4_000_000
#: states x monomials per pass of :func:`on_mean_jet` (mod_6 at n = 4, 6,435 monomials: ~0.2 GB per 8 states)
MEAN_JET_ENTRIES = 50_000
#: highest derivative order probed for a jet part (mod_N energies of the orders used need <= N + 3)
MAX_JET_ORDER = 14


class GaussianFeatures:
    r"""The functions :math:`\varphi_\gamma(z) = e^{-|z|^2/2} z^\gamma/\sqrt{\gamma!}`, :math:`|\gamma| \le p`, of
    :math:`z \in \mathbb R^D`, in graded order (degree 0, 1, ..., p); :attr:`degree` gives each one's
    :math:`|\gamma|` (``gaussian=False``: the scaled monomials :math:`z^\gamma/\sqrt{\gamma!}` alone). Monomials are built degree by degree (each a product of a lower one and one
    coordinate), so every derivative is ordinary autograd."""

    def __init__(self, D: int, order: int, gaussian: bool = True):
        self.D, self.order, self.gaussian = D, order, gaussian
        parents: List[torch.Tensor] = []
        variables: List[torch.Tensor] = []
        # the bookkeeping is made on the CPU, once; __call__ takes what it needs to the device of its input
        cpu = dict(dtype=torch.long, device="cpu")
        exps = [torch.zeros(1, D, **cpu)]
        last = [torch.zeros(1, **cpu)]
        for k in range(1, order + 1):
            prev_exp, prev_last = exps[-1], last[-1]
            par, var = [], []
            for i in range(prev_exp.shape[0]):
                for d in range(int(prev_last[i]), D):
                    par.append(i)
                    var.append(d)
            par_t, var_t = torch.tensor(par, **cpu), torch.tensor(var, **cpu)
            e = prev_exp[par_t].clone()
            e[torch.arange(len(par), **cpu), var_t] += 1
            parents.append(par_t)
            variables.append(var_t)
            exps.append(e)
            last.append(var_t)
        self._parents, self._vars = parents, variables
        self.exponents = torch.cat(exps)
        self.degree = self.exponents.sum(-1)
        log_fact = torch.lgamma(self.exponents.to(torch.float64) + 1).sum(-1)
        self._scale = torch.exp(-0.5 * log_fact)

    def __len__(self) -> int:
        return self.exponents.shape[0]

    def __call__(self, z: torch.Tensor) -> torch.Tensor:
        """Values at ``z`` (B, D) -> (B, len(self))."""
        layer = z.new_ones(z.shape[0], 1)
        layers = [layer]
        for par, var in zip(self._parents, self._vars):
            layer = layer[:, par.to(z.device)] * z[:, var.to(z.device)]
            layers.append(layer)
        mono = torch.cat(layers, -1) * self._scale.to(z.device)
        return torch.exp(-0.5 * (z * z).sum(-1, keepdim=True)) * mono if self.gaussian else mono


class _GaussianMap:
    r"""The RBF kernel's features :math:`\varphi_\gamma((x - c)/\ell)`, :math:`|\gamma| \le p`:
    ``__call__(x, centres)`` (B, D), (B, D) -> (B, M)."""

    def __init__(self, ls: torch.Tensor, feats: GaussianFeatures):
        self.ls, self.feats = ls, feats

    def __len__(self) -> int:
        return len(self.feats)

    def __call__(self, x: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
        return self.feats((x - centres) / self.ls)

    def split(self) -> SplitLayout:
        """The map as Gaussian position features times Gaussian velocity features (:mod:`.feature_jets`)."""
        D = self.feats.D
        n, ls = D // 2, self.ls.expand(D)
        fq, fv = GaussianFactor(ls[:n], self.feats.order), GaussianFactor(ls[n:], self.feats.order)
        pos = index_of(fq.exponents)
        e = self.feats.exponents
        iq = torch.tensor([pos[tuple(int(a) for a in r[:n])] for r in e], dtype=torch.long, device="cpu")
        iv = torch.tensor([pos[tuple(int(a) for a in r[n:])] for r in e], dtype=torch.long, device="cpu")
        return SplitLayout(fq, fv, iq, iv, self.feats.order)


def _element(base):
    """:mod:`.element_uncertainty` for an element kernel, else None (imported here: element_kernel imports this module)."""
    from . import element_uncertainty as E
    return E if isinstance(base, E.ElementKernel) else None


def _kernel(gp) -> Tuple[torch.nn.Module, torch.Tensor]:
    base = gp.kernel.base_kernel
    if getattr(base, "missing_std", None):  # a kernel that says why it has none, and what to do instead
        raise BeaTypeError(base.missing_std)
    if not isinstance(base, RBFKernel) and not hasattr(base, "feature_map") and not _element(base):
        raise BeaTypeError(f"uncertainty of recovered quantities needs a kernel with an exact feature expansion (the RBF, the "
                           f"mechanical kernel), got {type(base).__name__}; fit with one of those")
    return base, gp.kernel.outputscale.detach()


def _feature_map(base, D: int, order: int):
    """The kernel's exact feature expansion for functionals of jet order ``order``."""
    if isinstance(base, RBFKernel):
        return _GaussianMap(base.lengthscale.detach().reshape(-1), GaussianFeatures(D, order))
    return _element(base).ElementFeatures(base, D, order) if _element(base) else base.feature_map(D, order)


def _probe_scales(base, D: int) -> torch.Tensor:
    """Per-input scales (D,) of the test functions of :func:`jet_order` (the kernel's lengthscales)."""
    ls = base.lengthscale.detach().reshape(-1)
    if _element(base):  # element inputs: of order one, any positive scale probes
        return ls.new_ones(D)
    if ls.numel() == 1 or ls.numel() == D:
        return ls.expand(D)
    return ls.repeat_interleave(D // ls.numel())  # e.g. (position, velocity) scales of the mechanical kernel


# ---------------------------------------------------------------------------------------------- columns
class _Columns:
    """A family of basis functions evaluated at the rows' points: ``__call__(xp)`` -> (B, size)."""

    size: int

    def __call__(self, xp: torch.Tensor) -> torch.Tensor:  # pragma: no cover - abstract
        raise NotImplementedError


class _Sections(_Columns):
    r"""Kernel sections :math:`\sigma_f^2\Lambda_i^y k(x, y)` of shared functionals (every row the same)."""

    def __init__(self, gp, F: Functionals):
        self.base, self.scale = _kernel(gp)
        self.F, self.size = F, F.count

    def __call__(self, xp):
        out = xp.new_zeros(xp.shape[0], self.size)
        empty = xp.new_zeros(xp.shape[0], 0, xp.shape[1])
        for A in self.F.atoms.values():
            blk = self.base.derivative_block(xp, empty, A.points, A.dirs) * A.coef
            out = out.index_add(1, A.owner, blk)
        return self.scale * out


class _RowSections(_Columns):
    r"""Kernel sections of per-row functionals: functional ``b * k + j`` of ``F`` belongs to row ``b``;
    column ``j`` at row ``b`` is :math:`\sigma_f^2 A_{b,j}^y k(x_b, y)`."""

    def __init__(self, gp, F: Functionals, k: int):
        self.base, self.scale = _kernel(gp)
        self.F, self.size = F, k

    def __call__(self, xp):
        B = xp.shape[0]
        out = xp.new_zeros(B, self.size)
        empty = xp.new_zeros(B, 0, xp.shape[1])
        for A in self.F.atoms.values():
            row, col = A.owner // self.size, A.owner % self.size
            blk = self.base.derivative_block(xp, empty, A.points, A.dirs) * A.coef  # (B, atoms)
            own = blk.gather(0, row[None, :]).squeeze(0)  # atom a evaluated at its own row
            out = out.index_put((row, col), own, accumulate=True)
        return self.scale * out


class _Features(_Columns):
    r"""The kernel's features (e.g. :math:`\varphi_\gamma((x - c_b)/\ell)`) centred at each row's state :math:`c_b`."""

    def __init__(self, centres: torch.Tensor, fmap, feats: Optional[GaussianFeatures] = None):
        if feats is not None:  # (centres, lengthscales, Gaussian features): the RBF's map
            fmap = _GaussianMap(fmap, feats)
        self.centres, self.fmap, self.size = centres, fmap, len(fmap)

    def __call__(self, xp):
        return self.fmap(xp, self.centres)


class _Jets(_Columns):
    r"""The scaled monomials :math:`z^\alpha/\sqrt{\alpha!}`, :math:`z = (x - x_b)/s`, :math:`|\alpha| \le p`, centred
    at each row's state :math:`x_b` (:mod:`learners.shadow.feature_jets`: a jet functional's values on them fix it)."""

    def __init__(self, centres: torch.Tensor, scales: torch.Tensor, order: int):
        self.centres, self.scales = centres, scales
        self.mono = GaussianFeatures(centres.shape[-1], order, gaussian=False)
        self.size = len(self.mono)

    def __call__(self, xp):
        return self.mono((xp - self.centres) / self.scales)


def _linearise(mean: Callable, quantity: Quantity, x: torch.Tensor, columns: Sequence[_Columns], k: int,
               values: Optional[list] = None) -> List[torch.Tensor]:
    r"""Per column family, the tensor (B, k, size) of :math:`T_{b,o}[g_c]`: the derivative of output ``o`` of
    ``quantity(L, q, v)`` at state ``b`` along basis function ``c``, at :math:`L = \bar L` (``mean``). ``values``: a list
    to which the quantity's value there (B, k) is appended (the columns enter with weight 0: the mean's own value)."""
    B, D = x.shape
    n = D // 2
    with torch.enable_grad():
        W = [x.new_zeros(B, c.size).requires_grad_(True) for c in columns]

        def L(q, v):
            xp = torch.cat([q, v], -1)
            if xp.shape != (B, D):
                raise BeaRuntimeError(f"internal: the recovered quantity evaluated L at a batch of shape {tuple(xp.shape)}, "
                                   f"not the ({B}, {D}) states it linearises (one row per state is required)")
            out = mean(xp)
            for c, w in zip(columns, W):
                out = out + (c(xp) * w).sum(-1)
            return out

        q = x[:, :n].detach().clone()
        v = x[:, n:].detach().clone()
        val = quantity(L, q, v).reshape(B, k)
        if values is not None:
            values.append(val.detach())
        rows = []
        for o in range(k):
            gs = torch.autograd.grad(val[:, o].sum(), W, retain_graph=o < k - 1, allow_unused=True)
            rows.append([torch.zeros_like(w) if g is None else g for g, w in zip(gs, W)])
    return [torch.stack([r[i] for r in rows], 1).detach() for i in range(len(columns))]


class _Powers(_Columns):
    r"""Powers :math:`(r_j\cdot z)^k`, :math:`k \le` ``top``, of a few fixed random linear forms of :math:`z = (x - x_b)/s`:
    a linear functional of the jet vanishes on every monomial of degree :math:`k` exactly when it vanishes on the
    :math:`k`-th powers of all linear forms (they span the homogeneous polynomials of degree :math:`k`), so generic
    forms detect the degrees it depends on with ``top + 1`` columns per form instead of :math:`\binom{D+top}{top}`."""

    FORMS = 3

    def __init__(self, centre: torch.Tensor, scales: torch.Tensor, top: int):
        g = torch.Generator().manual_seed(20231)
        self.r = torch.randn(self.FORMS, centre.shape[-1], generator=g, dtype=torch.float64, device="cpu").to(centre.device)
        self.centre, self.scales, self.top = centre, scales, top
        self.size = self.FORMS * (top + 1)
        self.degree = torch.arange(top + 1, device=centre.device).repeat(self.FORMS)

    def __call__(self, xp):
        lin = ((xp - self.centre) / self.scales) @ self.r.T  # (B, FORMS): exactly 0 at the centre
        pw = [torch.ones_like(lin)]
        for _ in range(self.top):
            pw.append(pw[-1] * lin)
        return torch.stack(pw, -1).reshape(xp.shape[0], -1)


def jet_order(gp, quantity: Quantity, x: torch.Tensor, k: int, start: int = 3) -> int:
    r"""The highest derivative order :math:`p` of :math:`\bar L` on which the jet part of ``quantity`` depends,
    probed at the state ``x`` (1, D): the powers of random linear forms of :math:`x - x_b` (:class:`_Powers`) up to
    degree ``start`` are applied (all their derivatives of lower order vanish at :math:`x_b` exactly), and the
    degree is raised until the two above the highest one that contributes give exact zeros."""
    D = x.shape[-1]
    ls = _probe_scales(_kernel(gp)[0], D)
    top = start
    while True:
        cols = _Powers(x, ls, top)
        (c,) = _linearise(gp.mean, quantity, x, [cols], k)
        nz = (c != 0).any(1).any(0)  # (M,)
        p = int(cols.degree[nz].max()) if bool(nz.any()) else 0
        if p <= top - 2:
            return p
        if top >= MAX_JET_ORDER:
            raise BeaRuntimeError(f"the recovered quantity depends on derivatives of L of order > {MAX_JET_ORDER - 2}; "
                               "raise learners.shadow.uncertainty.MAX_JET_ORDER")
        top = min(top + 2, MAX_JET_ORDER)


def on_mean_jet(gp, quantity: Quantity, x: torch.Tensor, p: int, k: int = 1) -> torch.Tensor:
    r"""``quantity`` (jet order ``p``) of the posterior mean at the states ``x`` (B, D): (B, k). The quantity depends on
    :math:`\bar L` only through its derivatives of order :math:`\le p` at each state, so it is evaluated on the mean's
    Taylor polynomial of order :math:`p` there (:meth:`~learners.shadow.feature_jets.SplitLayout.function_jet`: closed
    form), whose nested derivatives are those of :math:`\binom{D+p}{p}` monomials, not of every training atom
    (through :math:`\mathrm{mod}_6` at :math:`n = 4` the atoms' autograd graph took 4 GB for 40 states)."""
    base, s2 = _kernel(gp)
    if _element(base):  # on the mean's Taylor polynomial of order p (exact for a jet of order p)
        return _element(base).on_mean(gp, [quantity], x, p, k)[0]
    D = x.shape[-1]
    layout = _feature_map(base, D, p).split()
    chunk = max(1, MEAN_JET_ENTRIES // layout.jets.shape[0])
    out = []
    for a in range(0, x.shape[0], chunk):
        xb = x[a:a + chunk]
        coef, cols = s2 * layout.function_jet(xb, gp._mean_atoms), layout.jet_columns(xb)  # (B, A), its columns
        with torch.enable_grad():
            q, v = xb[:, :D // 2].detach().clone(), xb[:, D // 2:].detach().clone()
            out.append(quantity(lambda qq, vv: (cols(torch.cat([qq, vv], -1)) * coef).sum(-1), q, v).reshape(-1, k).detach())
    return torch.cat(out)


@dataclass
class LinearisedQuantity:
    r"""A recovered quantity :math:`G_b = A_b + T_b` with ``k`` outputs per state: ``quantity(L, q, v)`` (B, k)
    whose linearisation at the posterior mean is the jet part, at the states ``x`` (B, D), plus the
    optional atom part ``atoms`` (functional ``b * k + o`` of row ``b``, output ``o``), and the jet order
    ``p``."""

    quantity: Quantity
    x: torch.Tensor
    k: int
    p: int
    atoms: Optional[Functionals] = None


@dataclass
class Reference:
    r"""The same quantity at reference states, one per row (``x`` (B, D), ``atoms`` as in
    :class:`LinearisedQuantity`): the variance is then that of :math:`G_b - G_{ref(b)}` (``k = 1``)."""

    x: torch.Tensor
    atoms: Optional[Functionals] = None


def _rows(F: Optional[Functionals], rows: torch.Tensor, k: int) -> Optional[Functionals]:
    """The functionals of the rows ``rows`` (per-row families of ``k``), renumbered."""
    if F is None:
        return None
    idx = (rows[:, None] * k + torch.arange(k, device=rows.device)).reshape(-1)
    return F.subset(idx)


def _apply_rowfunction(F: Functionals, centres: torch.Tensor, coef: torch.Tensor, fmap, k: int) -> torch.Tensor:
    r"""Atom functionals ``F`` (functional ``b * k + o``) applied to row ``b``'s explicit function
    :math:`\sum_\gamma c_{b\gamma}\varphi_\gamma((y - r_b)/\ell)` (``coef`` (B, M)): (B, k)."""
    B = centres.shape[0]
    out = centres.new_zeros(B * k)
    for m, A in F.atoms.items():
        row = A.owner // k
        with torch.enable_grad():
            y = A.points.detach().clone().requires_grad_(True)
            val = (fmap(y, centres[row]) * coef[row]).sum(-1)
            for r in range(m):
                (g,) = torch.autograd.grad(val.sum(), y, create_graph=r < m - 1)
                val = (g * A.dirs[:, r]).sum(-1)
        out = out.index_add(0, A.owner, A.coef * val.detach())
    return out.reshape(B, k)


def posterior_variance(gp, G: LinearisedQuantity, reference: Optional[Reference] = None, chunk: Optional[int] = None) -> torch.Tensor:
    r"""Posterior covariance (B, k, k) of :math:`G_b` (or variance (B, 1, 1) of :math:`G_b - G_{ref(b)}`), in the
    GP's units, times ``gp.variance_scale`` (as every posterior variance of the model).

    *Rounding floor* (:func:`resolved_variance`): the posterior variance is the prior variance minus
    :math:`|R^{-1}k|^2`, two numbers that agree to many digits where the data pin the quantity down. A variance
    below its a-posteriori rounding bound is not resolved (even negative ones can occur): the diagonal is raised to
    that bound."""
    if reference is not None and G.k != 1:
        raise BeaValueError("differences to a reference state are for scalar quantities (k = 1)")
    base, s2 = _kernel(gp)
    layout, B = _feature_map(base, G.x.shape[-1], G.p).split(), G.x.shape[0]
    chunk = layout.chunk_rows(G.k) if chunk is None else chunk
    out = []
    for a in range(0, B, chunk):
        rows = torch.arange(a, min(a + chunk, B), device=G.x.device)
        out.append(_chunk_covariance(gp, G, reference, rows, layout, s2))
    return gp.variance_scale * torch.cat(out)


def _jet_and_atoms(gp, G: LinearisedQuantity, x: torch.Tensor, atoms: Optional[Functionals], layout: SplitLayout, s2,
                   extra: Sequence[_Columns] = (), with_sections: bool = True, values: Optional[list] = None):
    r"""Prior covariance (B, k, k), cross-covariance with the training functionals (B, k, F), the jet values
    (B, k, A) and feature coefficients (B, k, M) of the jet part, and the extra columns' blocks. Without
    ``with_sections`` (jet part only, no ``atoms``) the cross-covariance is None: the caller applies
    :meth:`~learners.shadow.feature_jets.SplitLayout.sections` to the jet values itself (e.g. several posteriors'
    at once, :mod:`learners.shadow.difference_calibration`). ``values``: as :func:`_linearise`'s."""
    F, k = gp.train_functionals, G.k
    element = _element(gp.kernel.base_kernel)  # learners.shadow.element_uncertainty.ElementLayout: its own mean, prior
    cols: List[_Columns] = [layout.jet_columns(x)]
    if atoms is not None:
        cols.append(_RowSections(gp, atoms, k))
    cols += list(extra)
    mean = layout.taylor_mean(gp, x) if element else gp.mean  # the element mean's own graph: GBs through mod_N
    blocks = [None] + _linearise(mean, G.quantity, x, cols, k, values)  # (no sections column: index 0 unused)
    J = blocks[1]
    c = layout.coefficients(J, x)
    prior = s2 * layout.gram(c, x) if element else s2 * c @ c.transpose(1, 2)  # ((s2 c) c^T: the RBF's rounding kept)
    if not with_sections:
        if atoms is not None:
            raise BeaValueError("internal: the jet part alone (with_sections=False) is for quantities without atoms")
        return prior, None, J, c, blocks[2:]
    K_T = s2 * layout.sections(J, x, F)  # T_b applied to the training functionals' kernel sections
    K = K_T
    if atoms is not None:
        X = blocks[2]  # X[b, o, j] = Cov(T_{b,o}, A_{b,j})
        B = x.shape[0]
        K_A = gp.kernel.forward(atoms, F).reshape(B, k, -1)
        AA = gp.kernel.forward(atoms, atoms)
        idx = torch.arange(B * k, device=x.device).reshape(B, k)
        AA = AA[idx[:, :, None], idx[:, None, :]]
        prior = prior + AA + X + X.transpose(1, 2)
        K = K_T + K_A
    return prior, K, J, c, blocks[3 if atoms is not None else 2:]


def _chunk_covariance(gp, G: LinearisedQuantity, ref: Optional[Reference], rows, layout: SplitLayout, s2) -> torch.Tensor:
    x = G.x[rows]
    atoms = _rows(G.atoms, rows, G.k)
    R = gp._chol
    if ref is None:
        prior, K, _, _, _ = _jet_and_atoms(gp, G, x, atoms, layout, s2)
        V, bound = _solve(R, K.reshape(-1, K.shape[-1]), torch.diagonal(prior, dim1=1, dim2=2).reshape(-1))
        V = V.T.reshape(K.shape)
        return _floored(prior - V @ V.transpose(1, 2), bound.reshape(K.shape[:2]))
    # the reference rows: their own prior, cross-covariances and feature coefficients first
    xr = ref.x[rows]
    atoms_r = _rows(ref.atoms, rows, 1)
    prior_r, K_r, _, c_r, _ = _jet_and_atoms(gp, G, xr, atoms_r, layout, s2)
    extra: List[_Columns] = [] if atoms_r is None else [_RowSections(gp, atoms_r, 1)]  # sigma_f^2 A_ref^y k(x, y)
    prior_b, K_b, J_b, _, ext = _jet_and_atoms(gp, G, x, atoms, layout, s2, extra)
    cross = s2 * layout.apply_to_sections(J_b, x, xr, c_r[:, 0])[:, 0]  # Cov(T_b, T_ref)
    if atoms_r is not None:
        cross = cross + ext[0][:, 0, 0]  # Cov(T_b, A_ref)
    if atoms is not None:
        feats = _feature_map(_kernel(gp)[0], x.shape[-1], G.p)
        cross = cross + s2 * _apply_rowfunction(atoms, xr, c_r[:, 0], feats, 1)[:, 0]  # Cov(A_b, T_ref)
        if atoms_r is not None:
            AA = gp.kernel.forward(atoms, atoms_r)
            cross = cross + torch.diagonal(AA)  # Cov(A_b, A_ref)
    prior = prior_b[:, 0, 0] + prior_r[:, 0, 0] - 2 * cross
    # both differences cancel for a nearby reference: their rounding is relative to the parts (resolved_variance)
    scale = prior_b[:, 0, 0].abs() + prior_r[:, 0, 0].abs() + 2 * cross.abs()
    var, bound = resolved_variance(R, prior, (K_b - K_r)[:, 0, :], scale, (K_b.abs() + K_r.abs())[:, 0, :])
    return _floored(var[:, None, None], bound[:, None])


def momentum_functionals(qs: torch.Tensor, h: float, scheme) -> Functionals:
    r"""The discrete momenta along positions ``qs`` (S+1, B, n) as functionals, rows time-major
    (row ``j * B + b``, functional ``row * n + i``): :math:`p_0 = -D_1L_\Delta(q_0, q_1)`,
    :math:`p_j = D_2L_\Delta(q_{j-1}, q_j)` (``integrators.VariationalIntegrator.momenta``)."""
    import bea

    from .functionals import _linear_atoms, discrete_momentum_functionals

    sch = bea.get_scheme(scheme)
    S1, B, n = qs.shape
    later = discrete_momentum_functionals(torch.stack([qs[:-1], qs[1:]], -2).reshape(-1, 2, n), h, sch)  # rows B .. S1*B-1
    a = qs[0].detach().clone().requires_grad_(True)
    b = qs[1].detach()
    first = _linear_atoms(lambda L: -sch(L, a, b, h), a, n)  # rows 0 .. B-1
    return Functionals.cat([first, later])


def repeat_functionals(F: Functionals, index: torch.Tensor) -> Functionals:
    """The functionals ``index`` of ``F`` (repeats allowed, unlike :meth:`Functionals.subset`), renumbered
    0..len(index)-1."""
    index = torch.as_tensor(index, dtype=torch.long, device=F.device)
    atoms = {}
    for m, A in F.atoms.items():
        parts = []
        for u in torch.unique(index):
            rows = torch.nonzero(index == u).flatten()
            sel = A.select(A.owner == u)
            k = len(sel)
            if k == 0:
                continue
            parts.append(AtomSet(sel.points.repeat(rows.numel(), 1), sel.dirs.repeat(rows.numel(), 1, 1),
                                 sel.coef.repeat(rows.numel()), rows.repeat_interleave(k)))
        if parts:
            atoms[m] = AtomSet(torch.cat([a.points for a in parts]), torch.cat([a.dirs for a in parts]),
                               torch.cat([a.coef for a in parts]), torch.cat([a.owner for a in parts]))
    return Functionals(F.dim, int(index.numel()), atoms)


def weighted(F: Functionals, w: torch.Tensor, k: int) -> Functionals:
    r"""Per-row combinations :math:`\sum_i w_{b,i} F_{b k + i}` (``w`` (B, k)): one functional per row."""
    flat = w.reshape(-1)
    atoms = {m: AtomSet(A.points, A.dirs, A.coef * flat[A.owner], A.owner // k) for m, A in F.atoms.items()}
    return Functionals(F.dim, F.count // k, atoms)
