r"""What a fitted :class:`~learners.shadow.lsi.InverseModifiedLagrangianGP` identifies, with its uncertainty:
the recovered energy :math:`H_{rec}[N]`, and the momenta, velocities and energies along positions.

The means are :math:`\mathrm{mod}_N` of the posterior mean (:mod:`integrators.modified`); the standard
deviations push the GP posterior through :math:`\mathrm{mod}_N` by linearisation
(:mod:`learners.shadow.uncertainty`). A mixin: it uses the model's standardisation and posterior.
"""

from __future__ import annotations

from typing import Callable, Optional

import torch

import bea
from bea.errors import BeaValueError
from integrators import modified
from integrators.trajectory import positions

from .._checks import as_tensor, check_finite, check_order, check_states
from .calibration import ensure_energy_calibration
from .handles import FrozenMean, check_current, posterior_mean, stamp
from .kernels import RBFKernel
from .newton_inputs import newton_inputs
from .off_data import warn_off_data
from .rbf_jet import ExpansionLagrangian, JetLagrangian, RBFJet, bulk_chunk, bulk_path, jet_pays, jets_fit
from .references import energies_reference, reference_state
from .truncation import unit_free_term
from .uncertainty import (LinearisedQuantity, Reference, jet_order, momentum_functionals, on_mean_jet, posterior_variance,
                          repeat_functionals, weighted)

TorchLagrangian = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


class RecoveryMixin:
    """Energy, momenta, velocities and energies of a fitted LSI model, with posterior stds."""

    def _closed_form_jet(self) -> Optional[RBFJet]:
        """The closed-form jet of the posterior mean (:mod:`learners.shadow.rbf_jet`), or None where there is none
        (a kernel other than the RBF, or no C compiler): autograd through the atom sums is used then."""
        if getattr(self, "_jet", None) is None:  # (models saved before this attribute existed)
            from integrators.ccompile import CompileError
            try:
                jet = RBFJet(self.gp._mean_fn)
                jet._fn(2)  # builds the library now, so that a missing compiler shows here
                self._jet = jet
            except (ValueError, CompileError):
                self._jet = False
        return self._jet or None

    def _mean_std(self, order: int = 2, jets: bool = True, states: Optional[int] = None) -> TorchLagrangian:
        r""":math:`\bar L'_{inv}` (standardised coordinates) as given to formulas and solvers: with ``jets``, a
        :class:`~learners.shadow.rbf_jet.JetLagrangian` (every derivative closed-form, one pass over the atoms per
        batch of states, starting at ``order``) where the kernel has one, built now if small; a large one by
        :func:`~learners.shadow.rbf_jet.bulk_path` for a bulk call at ``states`` states, else per call; else autograd."""
        jet = self._closed_form_jet() if jets else None
        if jet is None:  # bound to this posterior: a handle built on it is a snapshot (learners.shadow.handles)
            return posterior_mean(self.gp)
        from integrators.ccompile import CompileError
        if bulk_path(jet, order, states) is False or (states is None and not jet_pays(jet.D, order + 1, 0)):
            eager = ExpansionLagrangian(jet.expansion)  # the jet's own f: the paths agree whatever the model does next
            return eager if states is not None else JetLagrangian(jet, order, eager=eager)
        try:  # the orders a formula, its energy and Newton take (jets_fit): built now, so a failure shows here
            jet._fn(order + 1)
        except CompileError:  # e.g. the compiler timed out on a loaded machine: autograd gives the same numbers
            return posterior_mean(self.gp)
        return JetLagrangian(jet, order)

    def recovered_lagrangian(self, order: int = 2) -> TorchLagrangian:
        r""":math:`L_{rec} = \mathrm{mod}_N(\bar L_{inv})` truncated at :math:`h^N` (``order`` = N; 0 gives
        :math:`\bar L_{inv}` itself), from :func:`bea.compile_torch` (derived once, cached on disk), in the
        data's units (:math:`s^2\,\mathrm{mod}_N(\bar L'_{inv})` at the step :math:`h'`, :mod:`learners.shadow.units`).
        A snapshot of the model as it is now (:mod:`learners.shadow.handles`): a later fit leaves it as it is."""
        self._require_fit()
        N = check_order(order, self.scheme.symmetric)
        if N == 0:
            return FrozenMean(self)
        if N not in self._recovered:
            self._recovered[N] = L_rec = self._in_data_units(self._recovered_std(N))
            L_rec.order = N  # type: ignore[attr-defined]
        return self._recovered[N]

    def _recovered_std(self, order: int, jets: bool = True, states: Optional[int] = None) -> TorchLagrangian:
        r""":math:`\mathrm{mod}_N(\bar L'_{inv})` in the standardised coordinates; ``jets``: derivatives of
        :math:`\bar L'_{inv}` from its closed-form jet (:meth:`_mean_std`; same values to ~4e-12 relative); ``states``:
        the size of the bulk call it serves (the jet's path chosen once for it: :func:`~.rbf_jet.bulk_path`)."""
        N = check_order(order, self.scheme.symmetric)
        jets = jets and jets_fit(self.n, N)
        K = 2 if N == 0 else N + 2  # N + 2: the derivatives Newton on d/dv mod_N asks for (fewer jet builds)
        path = bulk_path(self._closed_form_jet() if jets else None, K, states)
        key = ("std", N, jets) if path is None else ("std", N, jets, path)
        if key not in self._recovered:
            L = self._mean_std(K, jets, states)
            self._recovered[key] = L if N == 0 else modified.recovered_lagrangian(L, N, self._h_std, self.scheme)
        return self._recovered[key]

    def _bulk_chunk(self, qs_std: torch.Tensor, order: int, jets: bool) -> int:
        """Time rows per chunk along ``qs_std`` (S + 1, batch..., n): the jet's, or autograd's (:func:`~.rbf_jet.bulk_chunk`)."""
        jet, states = self._closed_form_jet() if jets and jets_fit(self.n, order) else None, qs_std.numel() // self.n
        if bulk_path(jet, 2 if order == 0 else order + 2, states) is False:
            return max(2, bulk_chunk(jet, order) * qs_std.shape[0] // states)  # the momenta take two rows or more
        return modified.chunk_for(order) if jet is None else (10_000 if order <= 2 else 4000)

    def energy(self, order: int = 2, return_std: bool = False, reference=None, truncation: bool = True):
        r"""The recovered energy :math:`H_{rec}[N] = \partial_vL_{rec}\cdot v - L_{rec}` (``order=0``: the
        energy of :math:`\bar L_{inv}` itself, uncorrected), a torch callable ``H(q, v)``.

        ``return_std=True``: ``H(q, v)`` returns ``(mean, std)`` (shapes ``(...)``, data's units), the std of
        the GP posterior pushed through :math:`\mathrm{mod}_N` by linearisation (:mod:`learners.shadow.uncertainty`).
        ``reference=(q_ref, v_ref)`` (one state, shape ``(n,)``): differences :math:`H(q, v) - H(q_ref, v_ref)`
        and their std (the two values' covariance accounted for) -- the energy is determined only up to a
        constant, and up to the scale the normalisation fixes.

        ``truncation=True`` (default) adds, in quadrature, the truncation error of :math:`\mathrm{mod}_N`
        estimated by the first omitted term, :math:`|H_{rec}[N'] - H_{rec}[N]|` with :math:`N'` the next order
        (:func:`next_order`): the GP posterior knows nothing of it, and at large steps it dominates (pendulum,
        ``h = 0.5``: :math:`h^4` terms of 3e-5 against a posterior std of 1e-6 for ``N = 2``). For ``n >= 3`` the
        term's part affine in the energy is left out (:mod:`learners.shadow.truncation`): it changes only the energy's
        unit, which positions do not determine and a comparison with the truth fits away. With ``reference`` and 20
        or more states in one call, spread in energy, that part is fitted on them (the comparison fits its scale on exactly this
        batch), so a state's std depends on the batch it is reported with: pass the whole comparison set in one
        call. Fewer states, or a batch without energy spread (one state repeated, one orbit), use the fit on the
        data's states, and so do energies without ``reference`` (a fit on the batch was not measured there).

        Means (with ``reference`` too): a snapshot; with ``return_std``: refused after a refit (:mod:`.handles`)."""
        H_mean = bea.energy(self.recovered_lagrangian(order))
        ref = None if reference is None else reference_state(reference, self.n)
        if not return_std:
            return H_mean if ref is None else _minus_reference(H_mean, ref, self.n, self._autograd_chunk())
        ensure_energy_calibration(self)
        N, taken = check_order(order, self.scheme.symmetric), stamp(self)

        def H(q, v):
            check_current(self, taken, f"energy({order}, return_std=True)")
            q, v = check_states(q, v, self.n)
            lead = q.shape[:-1]
            qf, vf = q.detach().reshape(-1, self.n), v.detach().reshape(-1, self.n)
            mean = _flat_mean(H_mean, qf, vf, ref, self._autograd_chunk())
            x = self._standard_state(qf, vf)
            G = LinearisedQuantity(self._quantity("energy", N), x, 1, self._jet_order("energy", N))
            R = None if ref is None else Reference(self._standard_state(ref[0], ref[1]).expand_as(x))
            # states given with their velocities: the distant-difference scale (learners.shadow.calibration)
            factor = self._speed ** 4 * self._variance_factor("energy_differences")
            var = factor * posterior_variance(self.gp, G, R)[:, 0, 0].clamp_min(0)
            if truncation:
                var = var + self._truncation_term(N, qf, vf, ref, mean) ** 2
            return mean.reshape(lead), var.sqrt().reshape(lead)

        return H

    # ------------------------------------------------------------------ uncertainty (learners.shadow.uncertainty)
    def _truncation_term(self, N: int, q: torch.Tensor, v: torch.Tensor, ref, mean: torch.Tensor) -> torch.Tensor:
        r"""The truncation term of ``energy``'s std at the states (data units): the first omitted term
        :math:`H_{rec}[N'] - H_{rec}[N]` (minus its value at ``ref`` if given; ``mean`` is :math:`H_{rec}[N]` the same
        way), for ``n >= 3`` less its part affine in the energy, a change of unit that positions do not determine
        (:func:`~learners.shadow.truncation.unit_free_term`: the unit fitted on the reported states where 20 or more
        spread in energy, else on the data's pairs; both energies of the term from one table of the mean's jet).
        ``n <= 2`` keeps the whole term: the likelihood's path, whose README numbers are kept bit for bit, and where
        the rule was not measured."""
        return (self._next_energy(N, q, v, ref) - mean if self.n < UNIT_FREE_MIN_N
                else unit_free_term(self, N, q, v, ref, mean, SMALL_BATCH))

    def _next_energy(self, N: int, q: torch.Tensor, v: torch.Tensor, ref=None) -> torch.Tensor:
        r""":math:`H_{rec}[N']` (:func:`next_order`) at the states (data units), minus its value at ``ref`` if given: the
        truncation term's partner for ``n <= 2`` (kept as it was, bit for bit) and beyond :data:`SMALL_BATCH` states
        (``n >= 3`` up to that: one jet table, :func:`~learners.shadow.truncation.unit_free_term`). The RBF: autograd
        through its closed-form mean, or its closed-form jet for many states (compiled C), in chunks. Other kernels (few
        states): on the mean's Taylor polynomial at each state (:func:`~learners.shadow.uncertainty.on_mean_jet`,
        whose nested derivatives are those of monomials, not of every training atom: at n = 4 autograd through the
        mechanical kernel's atoms took 4 GB and 129 s for 40 states, this 0.2 GB and 18 s), of the order the energy
        of :math:`\mathrm{mod}_{N'}` depends on, :math:`p(N) + N' - N` (:math:`p(N) = N + 1`: each :math:`h^2` of the
        series differentiates twice more, the energy once; probing :math:`N' = 6` directly costs minutes)."""
        Nn = next_order(N, self.scheme)
        if q.shape[0] > SMALL_BATCH or isinstance(self.gp.kernel.base_kernel, RBFKernel):
            L_next = self._recovered_std(Nn, jets=q.shape[0] > SMALL_BATCH)
            H_next = bea.energy(self._in_data_units(L_next))
            nxt = _in_chunks(H_next, q, v, self._autograd_chunk())
            return nxt if ref is None else nxt - H_next(ref[0][None], ref[1][None]).detach()
        p = self._jet_order("energy", N) + Nn - N
        x = self._states_with_ref(q, v, ref)
        nxt = self._speed ** 2 * on_mean_jet(self.gp, self._quantity("energy", Nn), x, p)[:, 0]
        return nxt if ref is None else nxt[:-1] - nxt[-1]

    def _states_with_ref(self, q: torch.Tensor, v: torch.Tensor, ref=None) -> torch.Tensor:
        """The standardised states (B, 2n), and the reference state ``ref`` as one more row if given."""
        x = self._standard_state(q, v)
        return x if ref is None else torch.cat([x, self._standard_state(ref[0][None], ref[1][None])])

    def _autograd_chunk(self) -> int:
        """States per autograd pass through the posterior mean (:data:`AUTOGRAD_ENTRIES`)."""
        atoms = sum(A.points.shape[0] for A in self.gp.mean_functionals.atoms.values())
        return max(1, AUTOGRAD_ENTRIES // max(1, atoms))

    def _quantity(self, what: str, order: int):
        r"""The recovered quantity as a function of the Lagrangian, in standardised coordinates:
        ``"energy"`` :math:`H(\mathrm{mod}_N L)`, ``"momentum"`` :math:`-\partial_v\mathrm{mod}_N L` and
        ``"lagrangian"`` :math:`-\mathrm{mod}_N L` (the jet parts of the energy at a state, of the velocities
        and of the energy along positions)."""
        f = None if order == 0 else bea.series_function("modified_lagrangian", self.scheme, order, self.n)
        h = self._h_std

        def rec(L):
            return L if f is None else (lambda q, v: f(L, q, v, h))

        if what == "energy":
            return lambda L, q, v: bea.energy(rec(L))(q, v)
        if what == "momentum":
            return lambda L, q, v: -bea.momentum(rec(L))(q, v)
        return lambda L, q, v: -rec(L)(q, v)

    def _jet_order(self, what: str, order: int) -> int:
        key = ("jet", what, order)
        if key not in self._recovered:
            k = self.n if what == "momentum" else 1
            dev = self._units_device
            x0 = torch.cat([torch.zeros(self.n, dtype=torch.float64, device=dev),
                            0.3 * torch.ones(self.n, dtype=torch.float64, device=dev)])[None]
            self._recovered[key] = jet_order(self.gp, self._quantity(what, order), x0, k)
        return self._recovered[key]

    def _mass_std(self, order: int, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        r""":math:`\partial_v^2 \mathrm{mod}_N\bar L'` at standardised states (B, n) -> (B, n, n)."""
        L = self._recovered_std(order)
        with torch.enable_grad():
            vv = v.detach().clone().requires_grad_(True)
            (g,) = torch.autograd.grad(L(q.detach(), vv).sum(), vv, create_graph=True)
            rows = [torch.autograd.grad(g[:, i].sum(), vv, retain_graph=i < self.n - 1)[0] for i in range(self.n)]
        return torch.stack(rows, 1).detach()

    def _along_positions_std(self, q_std: torch.Tensor, v_std: torch.Tensor, order: int, what: str, every: int,
                             reference: Optional[int] = None) -> torch.Tensor:
        r"""Posterior std (standardised units) of the velocities (``what="momentum"``: (S+1, B, n)) or energies
        (``"lagrangian"``: (S+1, B)) along positions, at rows ``0, every, 2 every, ...`` (NaN elsewhere);
        energies minus those at time index ``reference`` if given."""
        S1, n = q_std.shape[0], self.n
        q3, v3 = q_std.reshape(S1, -1, n), v_std.reshape(S1, -1, n)
        Bt = q3.shape[1]
        P = momentum_functionals(q3, self._h_std, self._linear_scheme())  # row j * Bt + b
        dev = q_std.device
        times = torch.arange(0, S1, every, device=dev)
        rows = (times[:, None] * Bt + torch.arange(Bt, device=dev)).reshape(-1)
        x = torch.cat([q3, v3], -1).reshape(-1, 2 * n)
        k = n if what == "momentum" else 1
        P_rows = P.subset((rows[:, None] * n + torch.arange(n, device=dev)).reshape(-1))
        if what == "momentum":
            atoms = P_rows
        else:
            atoms = weighted(P_rows, v3.reshape(-1, n)[rows], n)
        G = LinearisedQuantity(self._quantity(what, order), x[rows], k, self._jet_order(what, order), atoms)
        ref = None
        if reference is not None:
            r_rows = reference * Bt + torch.arange(Bt, device=dev).repeat(times.numel())
            P_ref = repeat_functionals(P, (r_rows[:, None] * n + torch.arange(n, device=dev)).reshape(-1))
            ref = Reference(x[r_rows], weighted(P_ref, v3.reshape(-1, n)[r_rows], n))
        cov = self._variance_factor("energy") * posterior_variance(self.gp, G, ref)
        if what == "momentum":
            Minv = torch.linalg.inv(self._mass_std(order, q3.reshape(-1, n)[rows], v3.reshape(-1, n)[rows]))
            cov = Minv @ cov @ Minv.transpose(1, 2)
            if self._rotation is not None:  # on the data's axes (learners.shadow.units): R cov R^T, exactly
                cov = self._rotation @ cov @ self._rotation.T
            std = q_std.new_full((S1 * Bt, n), float("nan"))
            std[rows] = torch.diagonal(cov, dim1=1, dim2=2).clamp_min(0).sqrt()
            return std.reshape(q_std.shape)
        std = q_std.new_full((S1 * Bt,), float("nan"))
        std[rows] = cov[:, 0, 0].clamp_min(0).sqrt()
        return std.reshape(q_std.shape[:-1])

    def momenta(self, qs, chunk: int = 1000) -> torch.Tensor:
        r"""Discrete momenta of :math:`\bar L_{inv}` along positions ``qs`` ``(steps + 1, batch..., n)``:
        :math:`p_0 = -D_1L_\Delta(q_0, q_1)`, :math:`p_j = D_2L_\Delta(q_{j-1}, q_j)` (in time chunks)."""
        qs = self._positions(qs)
        return self._vector_from_standard(modified.momenta(None, self._to_standard(qs), self._h_std, self.scheme, chunk,
                                                           integrator=self._momentum_integrator()))

    def velocities(self, qs, order: int = 2, chunk: Optional[int] = None, return_std: bool = False, std_every: int = 1,
                   truncation: bool = True):
        r"""Velocities along positions ``qs`` ``(steps + 1, batch..., n)`` (e.g. from :meth:`predict` or the data, time first):
        solve :math:`\partial_vL_{rec}(q_j, \dot q_j) = p_j`, :math:`p_j` the discrete momenta of :math:`\bar L_{inv}` (batched
        Newton over ``chunk`` time steps at a time). With the RBF kernel the derivatives of :math:`\bar L_{inv}` that
        :math:`\mathrm{mod}_N` and Newton need come from its closed-form jet (:mod:`learners.shadow.rbf_jet`: one pass over the
        atoms per Newton iteration; default ``chunk`` 10,000 for ``order <= 2``, 4,000 above); otherwise by autograd (default
        ``chunk`` 1000 for ``order <= 2`` and 200 above, where the nested derivatives of ``mod_N`` take about 12 MB per position).
        Off-data positions warn (:mod:`~learners.shadow.off_data`).

        ``return_std=True`` also returns the posterior std of each component (same shape), by linearising
        :math:`\partial_vL_{rec}(q_j, \dot q_j) = p_j`: :math:`\delta\dot q_j = M_{rec}^{-1}(\delta p_j -
        \partial_v\,\delta L_{rec}(q_j, \dot q_j))`, both terms linear in :math:`\delta L_{inv}`
        (:mod:`learners.shadow.uncertainty`); at every ``std_every``-th time step only (NaN elsewhere), as it costs
        more than the velocities. ``truncation``: add the first omitted term of the series in quadrature, as
        in :meth:`energy` (the velocities of the next order, at the same rows). The GP part's scale is the
        ``"energy"`` one: positions alone give no velocity reference to check it (benchmarks/RESULTS_calibration.md,
        Session 25: right on data-like states, 5-9x narrow at a long orbit's close passes with a per-body kernel)."""
        qs = self._positions(qs)
        q_std = self._to_standard(qs)
        v_std = self._velocities_std(q_std, order, chunk)
        warn_off_data(self, q_std)
        if not return_std:
            return self._vector_from_standard(v_std)
        ensure_energy_calibration(self)
        N = check_order(order, self.scheme.symmetric)
        std = self._along_positions_std(q_std, v_std, N, "momentum", _every(std_every))  # on the data's axes
        if truncation:
            diff = self._velocities_std(q_std, next_order(N, self.scheme), chunk) - v_std
            std = (std ** 2 + (diff if self._rotation is None else diff @ self._rotation.T) ** 2).sqrt()
        return self._vector_from_standard(v_std), self._speed * std

    def _velocities_std(self, qs_std: torch.Tensor, order: int, chunk: Optional[int], jets: bool = True) -> torch.Tensor:
        chunk = chunk or self._bulk_chunk(qs_std, order, jets)
        L, p = newton_inputs(self, qs_std, order, chunk, qs_std.numel() // self.n, jets)
        return modified.velocities(None, qs_std, order, self._h_std, self.scheme, chunk, integrator=self._integrator_std(),
                                   recovered=L, momenta=p, progress=False if getattr(self, "progress", None) is False else None)

    def energies(self, qs, order: int = 2, chunk: Optional[int] = None, return_std: bool = False, std_every: int = 1,
                 reference=None, truncation: bool = True, *, reference_index: Optional[int] = None):
        r""":math:`H_{rec}[N]` along positions ``qs`` with the velocities of :meth:`velocities`; shape
        ``(steps + 1, batch...)``.

        ``reference_index``: a time index; the energies minus the energy there (per trajectory).
        ``reference=(q_ref, v_ref)``: a state, as in :meth:`energy`; the energies minus :math:`H_{rec}[N]` there
        (means only: its std along positions is not available, ``return_std=True`` with it is an error).
        (``reference=<int>`` meant the time index before: deprecated, :mod:`learners.shadow.references`.)
        ``return_std=True`` also returns the posterior std (same shape; of the differences with
        ``reference_index``), by linearisation: :math:`H_{rec} = p\cdot\dot q - L_{rec}` at the solved velocity, so
        :math:`\delta H_j = \dot q_j\cdot\delta p_j - \delta L_{rec}(q_j, \dot q_j)` (:mod:`learners.shadow.uncertainty`);
        at every ``std_every``-th time step only (NaN elsewhere). ``truncation``: the whole first omitted term at every
        ``n``, not :meth:`energy`'s unit-free one (why: along an orbit, :mod:`learners.shadow.truncation`)."""
        qs = self._positions(qs)
        state, reference = energies_reference(reference, reference_index, qs.shape[0], self.n)
        if state is not None and return_std:
            raise BeaValueError("energies(..., return_std=True) measures from a time index (reference_index=); the std "
                                "of differences to a state (reference=) is given at states by energy(order, "
                                "return_std=True, reference=state)(q, v)")
        q_std = self._to_standard(qs)
        chunk = chunk or self._bulk_chunk(q_std, order, True)
        v_std = self._velocities_std(q_std, order, chunk)
        H = bea.energy(self._recovered_std(order, states=q_std.numel() // self.n))
        E = self._speed ** 2 * _in_chunks(H, q_std, v_std, chunk)  # chunk time rows at a time
        if reference is not None:
            E = E - E[reference]
        if state is not None:
            E = E - self.energy(order)(state[0][None], state[1][None]).detach()
        if not return_std:
            return E
        ensure_energy_calibration(self)
        N = check_order(order, self.scheme.symmetric)
        std = self._speed ** 2 * self._along_positions_std(q_std, v_std, N, "lagrangian", _every(std_every), reference)
        if truncation:
            E_next = self.energies(qs, next_order(N, self.scheme), chunk, reference_index=reference)
            std = (std ** 2 + (E_next - E) ** 2).sqrt()
        return E, std

    def _positions(self, qs) -> torch.Tensor:
        self._require_fit()
        qs = as_tensor(positions(qs), "qs")  # a Trajectory or its positions
        if qs.dim() < 2 or qs.shape[0] < 2 or qs.shape[-1] != self.n:
            raise BeaValueError(f"qs must have shape (steps + 1, batch..., {self.n}) with at least two positions, "
                             f"got {tuple(qs.shape)}")
        check_finite(qs, "qs")
        return qs


UNIT_FREE_MIN_N = 3  #: the smallest n whose energy std takes the truncation term less its unit part
#: batches of at most this many states take the truncation term on the mean's jet (n >= 3; n <= 2: by autograd)
SMALL_BATCH = 2000
#: states x training atoms per autograd pass of the next order's energy: the nested derivatives of mod_6 keep
#: ~2,200 tensors of one entry per (state, atom) alive (n = 4, 4,800 atoms: 85 MB per state), so ~0.7 GB a pass
AUTOGRAD_ENTRIES = 40_000


def _in_chunks(H: TorchLagrangian, q: torch.Tensor, v: torch.Tensor, chunk: int) -> torch.Tensor:
    """``H(q, v)`` (B, n) -> (B,), detached, ``chunk`` states at a time."""
    return torch.cat([H(q[a:a + chunk], v[a:a + chunk]).detach() for a in range(0, q.shape[0], chunk)])


def _minus_reference(H_mean: TorchLagrangian, ref, n: int, chunk: int) -> TorchLagrangian:
    """``H(q, v) - H(q_ref, v_ref)`` of the means alone, as ``energy``'s std path computes its mean (the same bits): a
    snapshot, reading only ``H_mean`` (itself one) and the reference."""
    def H(q, v):
        q, v = check_states(q, v, n)
        qf, vf = q.detach().reshape(-1, n), v.detach().reshape(-1, n)
        return _flat_mean(H_mean, qf, vf, ref, chunk).reshape(q.shape[:-1])

    return H


def _flat_mean(H_mean: TorchLagrangian, qf: torch.Tensor, vf: torch.Tensor, ref, chunk: int) -> torch.Tensor:
    """``H_mean`` at the flat states ``(qf, vf)`` in passes of ``chunk``, less its value at ``ref`` if given."""
    mean = _in_chunks(H_mean, qf, vf, chunk)
    return mean if ref is None else mean - H_mean(ref[0][None], ref[1][None]).detach()


def next_order(order: int, scheme) -> int:
    """The order of the first term a truncation at ``order`` omits (``order + 2`` for symmetric schemes)."""
    return order + (2 if scheme.symmetric else 1)


def _every(k) -> int:
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise BeaValueError(f"std_every must be a positive integer, got {k!r}")
    return k
