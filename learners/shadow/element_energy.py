r"""Energies of a model with an :class:`~learners.shadow.element_kernel.ElementKernel`: states in bounded passes.

The closed-form mean (:class:`~learners.shadow.element_kernel.ElementExpansion`) evaluates each group's base
expansion on the instances of a state against the training atoms as the instances see them: per state
:meth:`~learners.shadow.element_kernel.ElementKernel.state_entries` kernel entries (at most :math:`P A`, :math:`P =
\sum_g m_g^2 + 1`; the atoms of the DEL functionals differentiate along one coordinate, which most instances do not
see, so far fewer: chain(6) ~21 A against 86 A) against the default kernel's :math:`A`. :math:`\mathrm{mod}_N`'s nested
derivatives keep hundreds of tensors of that size alive per state (measured, chain(6), 600 random atoms: 3.2 kB per
entry at N = 2, 10.9 kB at N = 4; ``benchmarks/RESULTS_identification.md``, Session 12, branch elem2), so the energies
are evaluated ``chunk`` states at a time, the chunk counting these entries per state against
:data:`~learners.shadow.recovery.AUTOGRAD_ENTRIES` (the default kernels' rule with one entry per atom), and the
velocities and energies along positions in passes of as many states (:meth:`ElementEnergy._along_positions`: whole
windows of time steps, a few trajectories at a time). Splitting the
states inside the expansion does not bound the memory (the graph of every piece stays alive until the energy is
formed: measured 1,501 against 1,586 MiB), so the split is here, on whole energies, detached. Where one state alone
exceeds :data:`MAX_STATE_ENTRIES` the evaluation is refused with a typed error rather than killed for memory.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch.autograd.function import once_differentiable

from bea.errors import BeaRuntimeError, BeaTypeError

from .._checks import check_states
from .element_kernel import ElementKernel
from .element_uncertainty import VELOCITY_ENTRIES
from .recovery import AUTOGRAD_ENTRIES, _in_chunks
from .references import reference_state

__all__ = ["ElementEnergy", "MAX_STATE_ENTRIES"]

#: most kernel entries (instances evaluated x the projected atoms they see: state_entries) for one state's energy:
#: ~1.6 GB at N = 2, ~5.5 GB at N = 4 by the measured rates (module docstring)
MAX_STATE_ENTRIES = 500_000


class ElementEnergy:
    """The energy side of :class:`~learners.shadow.element_search.ElementHooks`: nothing changes for other kernels."""

    def _element_kernel(self):
        """The fitted model's ElementKernel, or None (another kernel, or not fitted: the mixin's checks then apply)."""
        base = getattr(getattr(getattr(self, "gp", None), "kernel", None), "base_kernel", None)
        return base if isinstance(base, ElementKernel) else None

    def _element_entries(self) -> int:
        """Kernel entries per state of the posterior mean (module docstring); 0 for other kernels."""
        base = self._element_kernel()
        if base is None:
            return 0
        return base.state_entries(self.gp.mean_functionals.atoms)

    def _refuse_std(self, return_std: bool) -> None:
        """Where this kernel has no std (mechanical bases: :func:`~learners.shadow.element_uncertainty.unsupported`),
        say so before any calibration runs (it would fail, after costly solves)."""
        base = self._element_kernel()
        if return_std and base is not None and base.missing_std:
            raise BeaTypeError(base.missing_std)

    def _autograd_chunk(self) -> int:
        """States per autograd pass: the default rule, each state counted with its kernel entries
        (:meth:`~learners.shadow.element_kernel.ElementKernel.state_entries`: instances x the atoms they see)."""
        entries = self._element_entries()
        if not entries:
            return super()._autograd_chunk()
        if entries > MAX_STATE_ENTRIES:
            atoms = sum(len(A) for A in self.gp.mean_functionals.atoms.values())
            raise BeaRuntimeError(f"the element kernel's energy at one state needs {entries:,} kernel entries (instances "
                                  f"x the {atoms:,} training atoms they see), above "
                                  f"{MAX_STATE_ENTRIES:,} (several GB through mod_N's derivatives): fit fewer "
                                  f"trajectories, a structure with fewer instances, or kernel='auto' (issue 27: not "
                                  f"practical at this size yet)")
        return max(1, AUTOGRAD_ENTRIES // entries)

    def energy(self, order: int = 2, return_std: bool = False, reference=None, truncation: bool = True):
        """As :meth:`RecoveryMixin.energy <learners.shadow.recovery.RecoveryMixin.energy>`; with an element kernel the
        means (differences to ``reference`` if given) are computed in bounded chunks of states, detached, unless
        gradients are asked for (an input that requires grad, with grad enabled: one pass, differentiable, within a
        chunk; beyond it per chunk with first derivatives only). The std
        (:mod:`learners.shadow.element_uncertainty`) is the mixin's, refused where a mechanical base has none. (The
        mixin's reference path computes the std's variance even without ``return_std``: differences alone stay here.)"""
        self._refuse_std(return_std)
        if return_std or not self._element_entries():  # the std: the mixin's, its means in this class's chunks
            return super().energy(order, return_std, reference, truncation)
        H, chunk = super().energy(order), self._autograd_chunk()
        ref = None if reference is None else reference_state(reference, self.n)
        H_ref = None if ref is None else H(ref[0][None], ref[1][None]).detach()

        def chunked(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
            q, v = check_states(q, v, self.n)
            qf, vf = q.reshape(-1, self.n), v.reshape(-1, self.n)
            if torch.is_grad_enabled() and (qf.requires_grad or vf.requires_grad):
                # differentiated by the caller: one graph for a batch within the chunk (any derivative), else per chunk
                # the values and first derivatives, graphs freed (level sets took 21 GB at chain(10) in one pass)
                mean = H(qf, vf) if qf.shape[0] <= chunk else _ChunkedEnergy.apply(qf, vf, H, chunk)
            else:
                mean = _in_chunks(H, qf, vf, chunk)
            return (mean if H_ref is None else mean - H_ref).reshape(q.shape[:-1])

        return chunked

    def _velocity_chunk(self) -> int:
        """States per pass of the velocities' Newton solves: :data:`~learners.shadow.element_uncertainty.VELOCITY_ENTRIES`
        kernel entries, at least :meth:`_autograd_chunk` (whose smaller passes were 6x slower there, measured)."""
        return max(self._autograd_chunk(), VELOCITY_ENTRIES // self._element_entries())

    def _along_positions(self, method, qs, chunk: Optional[int], budget: Optional[int] = None):
        """``method`` (the mixin's velocities or energies) along positions ``qs`` ``(steps + 1, batch..., n)``: with an
        element kernel and no ``chunk`` given, in passes of at most :meth:`_autograd_chunk` states (refused above
        :data:`MAX_STATE_ENTRIES`), at least two (the discrete momenta take pairs of positions): windows of ``t`` time
        steps, as long as the bound allows up to the whole trajectory (each window's Newton starts from a first-order
        guess), and as many trajectories a pass as fit with them; each trajectory's results are its own (a reference
        index is per trajectory), so the passes are concatenated along the batch. Else the mixin's passes. ``budget``:
        states a pass other than :meth:`_autograd_chunk`'s (the velocities' Newton solves take more, see
        :data:`~learners.shadow.element_uncertainty.VELOCITY_ENTRIES`)."""
        if chunk is not None or not self._element_entries():
            return method(qs, chunk)
        qs = self._positions(qs)
        steps, batch = qs.shape[0], qs.shape[1:-1]
        flat = qs.reshape(steps, -1, self.n)
        budget = self._autograd_chunk() if budget is None else budget
        t = max(2, min(steps, budget))
        cols = max(1, budget // t)
        parts = [method(flat[:, a:a + cols], t) for a in range(0, flat.shape[1], cols)]

        def joined(pieces):
            out = torch.cat(pieces, 1)
            return out.reshape(steps, *batch, *out.shape[2:])

        return tuple(map(joined, zip(*parts))) if isinstance(parts[0], tuple) else joined(parts)

    def velocities(self, qs, order: int = 2, chunk: Optional[int] = None, return_std: bool = False, std_every: int = 1,
                   truncation: bool = True):
        """As :meth:`RecoveryMixin.velocities <learners.shadow.recovery.RecoveryMixin.velocities>`; with an element
        kernel in bounded passes of states (:meth:`_along_positions`); the std is the mixin's, refused at once where a
        mechanical base has none (:meth:`_refuse_std`)."""
        self._refuse_std(return_std)

        def call(q, c):
            return super(ElementEnergy, self).velocities(q, order, c, return_std, std_every, truncation)
        return self._along_positions(call, qs, chunk, self._velocity_chunk() if self._element_entries() else None)

    def energies(self, qs, order: int = 2, chunk: Optional[int] = None, return_std: bool = False, std_every: int = 1,
                 reference=None, truncation: bool = True, *, reference_index: Optional[int] = None):
        """As :meth:`RecoveryMixin.energies <learners.shadow.recovery.RecoveryMixin.energies>`; with an element
        kernel in bounded passes of states (:meth:`_along_positions`); the std is the mixin's, refused at once where a
        mechanical base has none (:meth:`_refuse_std`)."""
        self._refuse_std(return_std)

        def call(q, c):
            return super(ElementEnergy, self).energies(q, order, c, return_std, std_every, reference, truncation,
                                                       reference_index=reference_index)
        return self._along_positions(call, qs, chunk)


class _ChunkedEnergy(torch.autograd.Function):
    r"""Energies ``H(q, v)`` (B,) of states ``chunk`` at a time with their gradients in ``q`` and ``v`` (each state's
    energy depends on its own state only, so :math:`\partial_{q_i}\sum_j H_j = \partial_{q_i} H_i`): the memory of one
    chunk's graph, first derivatives only (a second raises: ``once_differentiable``)."""

    @staticmethod
    def forward(ctx, q, v, H, chunk):
        want = ctx.needs_input_grad[:2]  # only the inputs that require grad: the other's derivatives are not taken
        vals, grads = [], []
        for a in range(0, q.shape[0], chunk):
            with torch.enable_grad():
                parts = [x[a:a + chunk].detach().requires_grad_(w) for x, w in zip((q, v), want)]
                e = H(*parts)
                inputs = [x for x, w in zip(parts, want) if w]
                # allow_unused: an energy need not depend on q or v in a chunk (its derivative is then zero)
                got = torch.autograd.grad(e.sum(), inputs, allow_unused=True) if e.requires_grad else [None] * len(inputs)
                grads.append([torch.zeros_like(x) if g is None else g for x, g in zip(inputs, got)])
            vals.append(e.detach())
        ctx.want = want
        ctx.save_for_backward(*(torch.cat(g) for g in zip(*grads)))
        return torch.cat(vals)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        saved = iter(ctx.saved_tensors)
        return tuple(grad[:, None] * next(saved) if w else None for w in ctx.want) + (None, None)
