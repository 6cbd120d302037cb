r"""The exact posterior std of recovered quantities for the :class:`~learners.shadow.element_kernel.ElementKernel`.

:mod:`learners.shadow.uncertainty` linearises a quantity :math:`Q_b` at the posterior mean; its jet part :math:`T_b`
reads the derivatives of order :math:`\le p` of :math:`L` at :math:`x_b`. An element term :math:`u(w_e(x))`,
:math:`w_e = P_e x + b_e` (:math:`P_e = D_g A_e`, the scaled map of ``ElementKernel._projected``), has the jet of
:math:`u` at :math:`w_{b,e} = w_e(x_b)` composed with a linear map, so (Taylor, exact to order :math:`p`)

.. math::  T_b[u\circ w_e] = \sum_{|\beta| \le p} c_{b,e,\beta}\,\frac{\partial^\beta u(w_{b,e})}{\sqrt{\beta!}}, \qquad
           c_{b,e,\beta} = T_b\big[m_\beta(P_e(\cdot - x_b))\big], \quad m_\beta(w) = w^\beta/\sqrt{\beta!}:

the element-space monomials are columns of the one linearisation pass (:class:`_ElementJets`, :math:`\binom{k+p}{p}`
per instance instead of :math:`\binom{2n+p}{p}`), and everything below is closed form in the unit RBF
:math:`k_g(s, t) = e^{-|s - t|^2/2}` of each group:

* *prior and reference cross term*: :math:`\mathrm{Cov}(T_b, T_{b'}) = \sigma_f^2\sum_g s_g^2 \sum_{e, e'}
  c_{b,e}^\top H(w_{b,e} - w_{b',e'})\, c_{b',e'}` (+ the correction), with :math:`r = s - t` and
  :math:`H_{\beta\beta'} = \partial_s^\beta\partial_t^{\beta'} k_g/\sqrt{\beta!\beta'!} = \prod_i h(r_i)_{\beta_i\beta'_i}`,
  :math:`h(r)_{aa'} = (-1)^a He_{a+a'}(r)\,e^{-r^2/2}/\sqrt{a!\,a'!}` (:math:`\frac{d^j}{dr^j}e^{-r^2/2} = (-1)^j He_j(r)
  e^{-r^2/2}`; :math:`\partial_t = -\partial_r`). The product is contracted one coordinate at a time on the dense
  :math:`(p+1)^k` grid of :math:`\beta` (no :math:`M^2` table); :math:`e = e'` at one state is :math:`r = 0`;
* *sections* (cross-covariance with the training functionals): per instance :math:`e`, the scaled :math:`s`-derivatives
  at :math:`w_{b,e}` of :math:`\sum_{e'}\Lambda^t k_g(s, t)`, the atoms projected by :math:`e'` (points
  :math:`P_{e'}y + b_{e'}`, directions :math:`P_{e'}u`, as ``derivative_block``; only the (instance, atom) pairs with
  no vanishing direction, as the mean: :func:`~learners.shadow.element_kernel._projected_atoms`):
  :func:`~learners.shadow.feature_jets._gaussian_section` at unit scales, differentiated along the projected directions
  (:func:`~learners.shadow.section_jets.gaussian_directional`);
* *a row's function* (an atom part against a reference's jet part): the same sections, each atom at its own row.

The correction :math:`s_c^2 k_{RBF}(D_c z, D_c z')` keeps the RBF's Gaussian layout on full-dimensional jets
(:class:`~learners.shadow.feature_jets.SplitLayout`): :math:`\binom{2n+p}{p}` columns (1,287 at :math:`n = 4`,
:math:`p = 5`; 20,349 at :math:`n = 8`: the RBF default's own cost). The linearisation pass evaluates :math:`\mathrm{mod}_N` on
the mean's Taylor polynomial of order :math:`p` at each state (:meth:`ElementLayout.taylor_mean`: exact, and its graph
is that of the monomials, not of every training atom per instance pair); the values on the mean (the truncation term's
next order, :func:`~learners.shadow.uncertainty.on_mean_jet`; :func:`on_mean`) read the same jet as a table
(:mod:`learners.shadow.element_jet`).
Mechanical base kernels (``degree=``) are refused (their velocity polynomial needs its own :math:`H`).
"""

from __future__ import annotations

import math
from typing import List, Optional, Sequence

import torch

from bea.errors import BeaRuntimeError, BeaTypeError

from .element_kernel import ElementKernel, _projected_atoms
from .feature_jets import _hermite, _product_over_inputs
from .functionals import AtomSet
from .kernels import RBFKernel
from .section_jets import gaussian_directional
from .uncertainty import PASS_ENTRIES, TABLE_ENTRIES, GaussianFeatures, _Columns, _GaussianMap, _Jets

__all__ = ["ElementLayout", "ElementFeatures", "unsupported", "on_mean", "on_taylor_mean", "energies_at", "velocities_at",
           "SECTION_ENTRIES", "MAX_STATE_TABLE", "VELOCITY_ENTRIES"]

#: rows x atoms x element monomials per pass of the sections (~16 MB per tensor)
SECTION_ENTRIES = 2_000_000
#: most dense-table entries (instances^2 x (p+1)^k x outputs) of one state: ~0.2 GB a tensor, 2-3 alive in
#: :meth:`_Group.quadratic`; above :data:`TABLE_ENTRIES` a pass takes that one state, above this it is refused
MAX_STATE_TABLE = 25_000_000
#: states x ``_element_entries()`` (the mean's kernel entries a state) per pass of the calibration's velocity solves
#: (:func:`velocities_at`). Measured 6.9 GB for 600 states x ~90,000 entries of the former count (instance pairs x atoms,
#: ~0.13 kB each); the count is now ``state_entries`` (1.8-4x smaller), so ~0.25-0.5 kB each, ~0.25-0.5 GB a pass. The
#: energies' own budget (``_autograd_chunk()``) was measured 6x slower here (two_body4, 30 trajectories: 75.5 against
#: 12.6 CPU s, one column a pass; RESULTS_element.md, Session 13, branch elstd2)
VELOCITY_ENTRIES = 1_000_000
_IN, _OUT = "ghijklmnqrst", "GHIJKLMNQRST"  # einsum letters of the beta' and beta grids (inputs k <= 12)


def unsupported(base) -> Optional[str]:
    """Why an element kernel has no std (mechanical bases, inputs above 12), and the fix; None where it has one."""
    if not isinstance(base, ElementKernel):
        return None
    for g, b in zip(base.groups, base._bases):
        if not isinstance(b, RBFKernel):
            return (f"the standard deviations (return_std=True) of an ElementKernel need closed-form tables of its base "
                    f"kernels; group {g['name']!r} has the mechanical base (degree={g.get('degree')}), which has none "
                    f"yet: build the structure with degree=None (RBF bases) for a std, or call without return_std=True")
        if g["maps"].shape[1] > len(_IN):
            return (f"the element std supports element inputs of at most {len(_IN)} coordinates; group {g['name']!r} has "
                    f"{g['maps'].shape[1]}: call without return_std=True")
    return None


class _Group:
    """One group's scaled maps ``Mt`` (m, D, k), offsets (m, k), relative variance and monomials of order ``p``;
    ``atom_side``: the scaled maps and offsets that see the training atoms (default: the same; an extension's are its
    source's, :mod:`~learners.shadow.element_extension`)."""

    def __init__(self, M: torch.Tensor, b: torch.Tensor, var: torch.Tensor, order: int, atom_side=None):
        self.Mt, self.b, self.var = M.detach().transpose(1, 2), b.detach(), var.detach()
        Ma, ba = (M, b) if atom_side is None else atom_side
        self.atom_Mt, self.atom_b = Ma.detach().transpose(1, 2), ba.detach()
        self.m, self.k, self.p = M.shape[0], M.shape[1], order
        self.mono = GaussianFeatures(self.k, order, gaussian=False)
        self.M = len(self.mono)
        e = self.mono.exponents
        self.flat = (e * (order + 1) ** torch.arange(self.k - 1, -1, -1)).sum(-1)  # place on the dense (p+1)^k grid

    def inputs(self, x: torch.Tensor) -> torch.Tensor:
        """:math:`w_e(x)` (B, m, k)."""
        return (x @ self.Mt + self.b[:, None]).transpose(0, 1)

    def dense(self, c: torch.Tensor) -> torch.Tensor:
        """Coefficients (B, O, m, M) on the dense grid (B, O, m, p+1, ..., p+1)."""
        out = c.new_zeros(c.shape[:3] + ((self.p + 1) ** self.k,))
        out[..., self.flat.to(c.device)] = c
        return out.reshape(c.shape[:3] + (self.p + 1,) * self.k)

    def quadratic(self, c1: torch.Tensor, w1: torch.Tensor, c2: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        r""":math:`\sum_{e,f} c_{1,b o e}^\top H(w_{1,be} - w_{2,bf})\, c_{2,b o' f}`: (B, O1, O2) (module docstring)."""
        p, k = self.p, self.k
        r = w1[:, :, None] - w2[:, None]  # (B, m, m, k)
        he = torch.stack(_hermite(r, 2 * p), -1)  # (B, m, m, k, 2p + 1)
        a = torch.arange(p + 1, device=r.device)
        norm = torch.tensor([(-1) ** i / math.sqrt(math.factorial(i)) for i in range(p + 1)], dtype=r.dtype, device=r.device)
        h = he[..., a[:, None] + a[None, :]] * (norm[:, None] * norm.abs()[None, :])  # (B, m, m, k, p+1, p+1)
        h = h * torch.exp(-0.5 * r * r)[..., None, None]
        T, dims = self.dense(c2), list(_IN[:k])
        spec = "bof" + "".join(dims)
        for i in range(k):  # contract beta'_i against h_i, leaving beta_i: T[b, o', e, f, ...]
            out = "boef" + "".join(dims[:i]) + _OUT[i] + "".join(dims[i + 1:])
            T = torch.einsum(f"{spec},bef{_OUT[i]}{dims[i]}->{out}", T, h[..., i, :, :])
            dims[i], spec = _OUT[i], out
        grid = "".join(dims)
        return torch.einsum(f"bpe{grid},boef{grid}->bpo", self.dense(c1), T)

    def _atom_passes(self, x: torch.Tensor, atoms: dict, entries: int):
        r"""Per pass of at most ``entries`` (rows x instances x (instance, atom) pairs x monomials; one row and one pair
        at least, :math:`m M` entries): the rows' slice, the pairs' :class:`~learners.shadow.functionals.AtomSet` and
        :math:`E_{bej\beta} = \partial_s^\beta\Lambda_j^t k_g(w_{b,e}, t)/\sqrt{\beta!}` (rows, m, pairs, M), the pairs
        those of the mean (:func:`~learners.shadow.element_kernel._projected_atoms`: each atom as every instance
        :math:`e'` sees it, the pairs with a vanishing direction dropped -- they add exactly zero)."""
        B, m, k = x.shape[0], self.m, self.k
        ones, pairs = x.new_ones(k), list(_projected_atoms(atoms, self.atom_Mt, self.atom_b).values())
        rows = max(1, entries // (m * self.M))
        for r in range(0, B, rows):
            w = self.inputs(x[r:r + rows]).reshape(-1, k)
            step = max(1, entries // (w.shape[0] * self.M))
            for A in pairs:
                for a in range(0, len(A), step):
                    P = AtomSet(A.points[a:a + step], A.dirs[a:a + step], A.coef[a:a + step], A.owner[a:a + step])
                    E = gaussian_directional(w, P.points, ones, self.mono.exponents, P.dirs)
                    yield slice(r, r + rows), P, E[tuple(range(A.order))].reshape(-1, m, len(P), self.M)

    def sections(self, c: torch.Tensor, x: torch.Tensor, F, entries: int = SECTION_ENTRIES) -> torch.Tensor:
        r""":math:`\sum_{e,\beta} c_{boe\beta} E_{bei\beta}` for the functionals ``F``: (B, O, F.count)."""
        out = c.new_zeros(c.shape[:2] + (F.count,))
        for rs, A, E in self._atom_passes(x, F.atoms, entries):
            out[rs] = out[rs].index_add(2, A.owner, torch.einsum("bejm,boem->boj", E, c[rs]) * A.coef)
        return out

    def function_jet(self, x: torch.Tensor, atoms: dict, entries: int = SECTION_ENTRIES) -> torch.Tensor:
        r""":math:`\sum_j a_j E_{bej\beta}` (``atoms``' coefficients :math:`a_j`): the scaled derivatives at every
        instance's input of the group's part of :math:`\sum_j a_j\Lambda_j^y k(\cdot, y)` (B, m, M)."""
        out = x.new_zeros(x.shape[0], self.m, self.M)
        for rs, A, E in self._atom_passes(x, atoms, entries):
            out[rs] += torch.einsum("bejm,j->bem", E, A.coef)
        return out


class ElementLayout:
    r"""The element kernel's counterpart of :class:`~learners.shadow.feature_jets.SplitLayout` for
    :mod:`learners.shadow.uncertainty`: the jet values ``J`` (B, k, size) are those of :meth:`jet_columns` (each group's
    instances' monomials, then the correction's full-dimensional jets); the coefficients ``c`` keep the element parts
    and replace the correction's by its Gaussian coefficients. Values without the outputscale :math:`\sigma_f^2`."""

    def __init__(self, kernel: ElementKernel, D: int, order: int):
        reason = unsupported(kernel)
        if reason:
            raise BeaTypeError(reason)
        with torch.no_grad():
            groups, corr = kernel._layout()
            self.groups = [_Group(*kernel._projected(i, scales), var, order, kernel._atom_side(i, scales))
                           for i, (scales, var) in enumerate(groups)]
            self.corr_var = None if corr is None else corr[1].detach()
            self.corr_atoms = kernel.atom_correction  # False: an independent correction, no cross terms with the atoms
            self.corr_map = None if corr is None else _GaussianMap(corr[0].detach(), GaussianFeatures(D, order))
        self.corr = None if corr is None else self.corr_map.split()
        self.order, self.D = order, D
        self.sizes = [g.m * g.M for g in self.groups]
        self.elements = sum(self.sizes)
        self.size = self.elements + (0 if corr is None else len(self.corr.jets))

    # ------------------------------------------------------------------ pieces
    def _parts(self, J: torch.Tensor) -> List[torch.Tensor]:
        """The element parts (B, O, m, M) per group."""
        out, a = [], 0
        for g, s in zip(self.groups, self.sizes):
            out.append(J[..., a:a + s].reshape(J.shape[:2] + (g.m, g.M)))
            a += s
        return out

    def jet_columns(self, x: torch.Tensor) -> "_ElementJets":
        return _ElementJets(self, x)

    def chunk_rows(self, k: int) -> int:
        """States per pass: the linearisation's columns (:data:`PASS_ENTRIES`) and the largest dense grid
        (:data:`TABLE_ENTRIES`), with the correction's tables (:meth:`~learners.shadow.feature_jets.SplitLayout.chunk_rows`).
        One state's grid (instances^2 x (p+1)^k x outputs) above :data:`MAX_STATE_TABLE` is refused (BeaRuntimeError)."""
        grid = max(g.m * g.m * (g.p + 1) ** g.k for g in self.groups) * k
        if grid > MAX_STATE_TABLE:
            g = max(self.groups, key=lambda g: g.m * g.m * (g.p + 1) ** g.k)
            raise BeaRuntimeError(
                f"the element std's table at one state needs {grid:,} entries ({g.m} instances squared x (order "
                f"{g.p} + 1)^{g.k} inputs x {k} outputs), above {MAX_STATE_TABLE:,} (~{8 * grid / 1e9:.1f} GB a tensor): "
                f"ask for a quantity of lower jet order, use a structure with fewer instances or element inputs, or call "
                f"without return_std=True")
        rows = max(1, min(PASS_ENTRIES // (self.size + k), TABLE_ENTRIES // grid))
        return rows if self.corr is None else min(rows, self.corr.chunk_rows(k))

    # ------------------------------------------------------------------ the interface of SplitLayout
    def coefficients(self, J: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """The element parts of ``J`` as they are, the correction's as its feature coefficients: (B, k, ...)."""
        if self.corr is None:
            return J
        return torch.cat([J[..., :self.elements], self.corr.coefficients(J[..., self.elements:], x)], -1)

    def gram(self, c: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        r"""The prior covariance :math:`\sigma_f^{-2}\mathrm{Cov}(T_{b,o}, T_{b,o'})` from :meth:`coefficients`: (B, k, k)."""
        out = sum(g.var * g.quadratic(cg, g.inputs(x), cg, g.inputs(x)) for g, cg in zip(self.groups, self._parts(c)))
        if self.corr is not None:
            cc = c[..., self.elements:]
            out = out + self.corr_var * cc @ cc.transpose(1, 2)
        return out

    def sections(self, J: torch.Tensor, x: torch.Tensor, F) -> torch.Tensor:
        r""":math:`\sigma_f^{-2}\mathrm{Cov}(T_{b,o}, \Lambda_i)`: (B, k, F.count)."""
        out = sum(g.var * g.sections(cg, x, F) for g, cg in zip(self.groups, self._parts(J)))
        if self.corr is not None and self.corr_atoms:
            out = out + self.corr_var * self.corr.sections(J[..., self.elements:], x, F)
        return out

    def apply_to_sections(self, J: torch.Tensor, x: torch.Tensor, centres: torch.Tensor, coef: torch.Tensor) -> torch.Tensor:
        r""":math:`\sigma_f^{-2}\mathrm{Cov}(T_{b,o}, T_{r(b)})`, the reference's :meth:`coefficients` ``coef`` (B, ...)
        at ``centres``: (B, k)."""
        ref = self._parts(coef[:, None])
        out = sum(g.var * g.quadratic(cg, g.inputs(x), cr, g.inputs(centres))[..., 0]
                  for g, cg, cr in zip(self.groups, self._parts(J), ref))
        if self.corr is not None:
            e = self.elements
            out = out + self.corr_var * self.corr.apply_to_sections(J[..., e:], x, centres, coef[:, e:])
        return out

    def taylor_mean(self, gp, x: torch.Tensor):
        r"""The posterior mean's Taylor polynomial of order :attr:`order` at each row's state (rows of ``x``), as a
        function of the rows' points (B, D) -> (B): :math:`\sigma_f^2` times, per group, :math:`s_g^2\sum_{e,\beta}
        D_\beta F_g(w_{b,e})\, m_\beta(w_e - w_{b,e})` (:meth:`_Group.function_jet`) and the correction's
        (:meth:`~learners.shadow.feature_jets.SplitLayout.function_jet`). A quantity of jet order :math:`\le p` reads
        the same derivatives from it as from the mean (exact), and its nested derivatives through
        :math:`\mathrm{mod}_N` are those of the monomials, not of every training atom per instance pair (the mean
        itself: ~0.3 GB per state at ``two_body4``, 150 trajectories, rows of a pass by the hundred)."""
        s2, atoms = gp.kernel.outputscale.detach(), gp._mean_atoms
        jets = [s2 * g.var * g.function_jet(x, atoms) for g in self.groups]
        cols = _ElementJets(self, x)
        if self.corr is not None:  # an independent correction (corr_atoms False) has mean zero
            jets.append(s2 * self.corr_var * self.corr.function_jet(x, atoms) if self.corr_atoms
                        else x.new_zeros(x.shape[0], self.size - self.elements))
        coef = torch.cat([j.reshape(x.shape[0], -1) for j in jets], -1)
        return lambda xp: (cols(xp) * coef).sum(-1)


class _ElementJets(_Columns):
    r"""The jet columns of :class:`ElementLayout` at the rows' states :math:`x_b`: per group and instance the scaled
    monomials :math:`m_\beta(w_e(x) - w_e(x_b))`, then the correction's :class:`~learners.shadow.uncertainty._Jets`."""

    def __init__(self, layout: ElementLayout, x: torch.Tensor):
        self.layout, self.centres = layout, [g.inputs(x) for g in layout.groups]
        self.corr = None if layout.corr is None else _Jets(x, layout.corr_map.ls.expand(x.shape[-1]), layout.order)
        self.size = layout.size

    def __call__(self, xp):
        B = xp.shape[0]
        cols = [g.mono((g.inputs(xp) - w).reshape(-1, g.k)).reshape(B, -1) for g, w in zip(self.layout.groups, self.centres)]
        return torch.cat(cols + ([] if self.corr is None else [self.corr(xp)]), -1)


class ElementFeatures:
    r"""The element kernel as :func:`~learners.shadow.uncertainty._feature_map` returns it: :meth:`split` gives the
    :class:`ElementLayout`; called as ``fmap(y, centres)`` (P, D), (P, D) -> (P, size) it gives, per atom point, the
    functions whose combination with a reference's :meth:`ElementLayout.coefficients` is that reference's kernel
    section :math:`\sigma_f^{-2} T_r^s k(s, y)` (an atom part against a reference's jet part,
    :func:`~learners.shadow.uncertainty._apply_rowfunction`): :math:`s_g^2\sum_{e'}\partial_s^\beta k_g(w_e(r),
    w_{e'}(y))/\sqrt{\beta!}` per group, instance and :math:`\beta`, then :math:`s_c^2` times the correction's features."""

    def __init__(self, kernel: ElementKernel, D: int, order: int):
        self.layout = ElementLayout(kernel, D, order)

    def split(self) -> ElementLayout:
        return self.layout

    def __len__(self) -> int:
        L = self.layout
        return L.elements + (0 if L.corr is None else len(L.corr_map))

    def __call__(self, y: torch.Tensor, centres: torch.Tensor) -> torch.Tensor:
        L, cols = self.layout, []
        for g in L.groups:
            r = g.inputs(centres)[:, :, None] - g.inputs(y)[:, None]  # (P, e, e', k)
            sign = torch.tensor([(-1) ** a / math.sqrt(math.factorial(a)) for a in range(g.p + 1)], dtype=r.dtype,
                                device=r.device)  # h[..., a] = d^a/dr^a e^{-r^2/2} / sqrt(a!)
            h = torch.stack(_hermite(r, g.p), -1) * sign * torch.exp(-0.5 * r * r)[..., None]
            cols.append(g.var * _product_over_inputs(h, g.mono.exponents).sum(2).reshape(y.shape[0], -1))
        if L.corr is not None:
            cols.append(L.corr_var * L.corr_map(y, centres))
        return torch.cat(cols, -1)


def on_mean(gp, quantities: Sequence, x: torch.Tensor, p: int, k: int = 1) -> List[torch.Tensor]:
    r"""Each quantity ``quantity(L, q, v)`` (jet order at most ``p``) of ``gp``'s posterior mean at the states ``x``
    (B, D): (B, k) each, on the mean's jet table of order ``p`` (:class:`~learners.shadow.element_jet.ElementTaylorJet`,
    :func:`~learners.shadow.taylor_jet.on_table`: every derivative a table entry), or where its maps exceed
    :data:`~learners.shadow.element_jet.COMPOSE_ENTRIES` on the mean's Taylor polynomial (:func:`on_taylor_mean`).
    Both exact, the same jet: equal to rounding (measured 1e-15 relative on the tests' synthetic GPs,
    tests/test_element_uncertainty.py; 2.0e-8 of the largest H_rec[4], H_rec[6] on a magnetic4 fit, as main's own pass
    size moves it: benchmarks/RESULTS_calibration.md, Session 23)."""
    from .element_jet import ElementTaylorJet
    from .taylor_jet import on_table

    jet = ElementTaylorJet(gp, x.shape[-1])
    return on_table(jet, quantities, x, p, k) if jet.fits(p) else on_taylor_mean(gp, quantities, x, p, k)


def on_taylor_mean(gp, quantities: Sequence, x: torch.Tensor, p: int, k: int = 1) -> List[torch.Tensor]:
    r""":func:`on_mean` by nested autograd on the mean's Taylor polynomial of order ``p`` at each state
    (:meth:`ElementLayout.taylor_mean`; exact, as :func:`~learners.shadow.uncertainty.on_mean_jet` for the other
    kernels), states in passes of :data:`~learners.shadow.uncertainty.MEAN_JET_ENTRIES` over the polynomial's monomials:
    each intermediate tensor of the quantity is as wide as the polynomial (the table's are one entry wide)."""
    from .uncertainty import MEAN_JET_ENTRIES

    n = x.shape[-1] // 2
    layout = ElementLayout(gp.kernel.base_kernel, x.shape[-1], p)
    out: List[List[torch.Tensor]] = [[] for _ in quantities]
    chunk = max(1, MEAN_JET_ENTRIES // layout.size)
    for a in range(0, x.shape[0], chunk):
        xb = x[a:a + chunk]
        L = layout.taylor_mean(gp, xb)
        for values, quantity in zip(out, quantities):
            with torch.enable_grad():
                q, v = xb[:, :n].detach().clone(), xb[:, n:].detach().clone()
                values.append(quantity(lambda qq, vv: L(torch.cat([qq, vv], -1)), q, v).reshape(-1, k).detach())
    return [torch.cat(v) if v else x.new_zeros(0, k) for v in out]


def energies_at(model, H, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    r"""``H(q, v)`` (..., n) detached: for an element model in the energies' chunks of states (``model._autograd_chunk()``:
    :math:`\mathrm{mod}_N`'s graph per state is the instance pairs times the atoms wide; the calibration's 60 pairs in
    one pass took 11 GB at ``two_body4``, 150 trajectories), for the default kernels in one pass, as before."""
    from .recovery import _in_chunks

    if getattr(model, "_element_entries", lambda: 0)():
        n = q.shape[-1]
        return _in_chunks(H, q.reshape(-1, n), v.reshape(-1, n), model._autograd_chunk()).reshape(q.shape[:-1])
    return H(q, v).detach()


def velocities_at(model, S: torch.Tensor) -> torch.Tensor:
    r"""The model's order-2 velocities along the standardised positions ``S`` (W, B, n), time first: for an element model
    in passes of whole columns (each velocity's Newton solve is its own: the same numbers to rounding and Newton's
    stopping, 4.6e-9 apart between 1 and 120 passes at two_body4, measured) of at most
    :data:`VELOCITY_ENTRIES` kernel entries (``model._element_entries()`` a state; ``model._velocity_chunk()`` states,
    the rule of ``model.velocities``), at least one column: a column of
    more is one pass, its memory not bounded by the rule (5.5-6.2 GB measured at chain4 with one column a pass); for
    the default kernels in one pass, as before."""
    entries = getattr(model, "_element_entries", lambda: 0)()
    if not entries:
        return model._velocities_std(S, 2, None)
    b = max(1, model._velocity_chunk() // S.shape[0])  # the rule of ElementEnergy.velocities: one budget
    return torch.cat([model._velocities_std(S[:, a:a + b], 2, None) for a in range(0, S.shape[1], b)], 1)
