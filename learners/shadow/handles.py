r"""What the objects a fitted GP model hands out read, once the model is fitted again: one rule for the library.

*A handle is a snapshot.* A callable or object returned by a fitted
:class:`~learners.InverseModifiedLagrangianGP` or :class:`~learners.LagrangianGP` and evaluated later --
``recovered_lagrangian(N)`` at every order (0 included), ``energy(N)`` (with or without ``reference``), ``integrator()``
-- is a pure function of the model as it was when the handle was taken: the posterior mean (atoms, weights, kernel
hyperparameters, the closed-form jet), the units (centre :math:`\bar q`, scale :math:`\sigma`, time unit :math:`\tau`,
rotation :math:`R`; :mod:`learners.shadow.units`) and the step :math:`h'` are all frozen at creation. After
``model.fit(other)``, ``model.to(...)``/``model.double()`` or a new model loaded from a file, the handle gives the same
bits as before; take the handle again for the new fit. How: a fit, a move and a load each build a new
:class:`~learners.shadow.gp.FunctionalGP` and assign new unit tensors (none is changed in place), so a handle keeps
the mean's :class:`~learners.shadow.kernels.AtomExpansion` by reference; the units are copied
(``StandardUnits._frozen_units``: the centre and rotation cloned). A handle holds only what the mean needs
(:class:`FrozenMean`, :func:`posterior_mean`), not the posterior's factor, functionals or data, so an old fit's
:math:`M\times M` Cholesky factor is freed after a refit whatever handles are held.

*Where a snapshot would be costly, the handle refuses.* The std of ``energy(N, return_std=True)`` reads the model's
calibration, posterior factor and data, and an element extension (``model.extend(...)``,
:class:`~learners.shadow.element_model.ElementExtension`) reads its source's calibration, run on the source's
held-back data on first demand: freezing them would mean running the calibration eagerly (and keeping the factor).
Such a handle records the posterior it was taken from (:func:`stamp`) and, called after the model was fitted again,
moved or loaded, raises :class:`bea.errors.StaleHandleError` naming the handle and the fix (take it again) -- never a
number that mixes two fits.

*The model's own methods are live*: ``model.lagrangian``, ``model(q, v)``, ``model.energies(qs)``, the older hook
``model.c_lagrangian``, ... evaluate the model as it is when called (each is consistent: one fit, never two).
``load_state_dict`` on a fitted model would change its kernel hyperparameters but not the posterior conditioned on them
(a model that gives numbers of neither state): a conditioned :class:`~learners.shadow.gp.FunctionalGP` refuses any load
that changes one of its values (``FunctionalGP._load_from_state_dict``), whether it is loaded through the model, a parent
module, ``model.gp``, or straight into a part (``model.gp.kernel``, the likelihood, a GP sharing the kernel object:
``FunctionalGP._guard_parts``); a saved model is read with ``load``. Parameters changed in place by hand are not
detected.
"""

from __future__ import annotations

import copy
import weakref

import torch

from bea.errors import StaleHandleError

from .._checks import check_states
from .units import StandardUnits, data_units_form

__all__ = ["own_bookkeeping", "stamp", "check_current", "bookkeeping", "posterior_mean", "FrozenMean"]


def bookkeeping(module) -> list:
    """The names of ``module``'s Module bookkeeping containers (submodules, parameters, buffers, hooks, and GPyTorch's
    priors, constraints, loss terms where it has them): every dict or set a fresh :class:`torch.nn.Module` holds in its
    ``__dict__``, plus those of ``module``'s own that are private dicts or sets -- copied for a copy of the model, so
    that what is registered on one does not reach the other."""
    fresh = [name for name, value in vars(torch.nn.Module()).items() if isinstance(value, (dict, set))]
    extra = ("_priors", "_constraints", "_added_loss_terms")
    return fresh + [name for name in extra if isinstance(module.__dict__.get(name), (dict, set))]


def own_bookkeeping(dst, src) -> None:
    """Give ``dst``, a shallow copy of ``src``, Module containers of its own, so that what is registered on one does not
    reach the other."""
    for name in bookkeeping(src):  # in __dict__ itself: Module.__setattr__ would not replace them
        dst.__dict__[name] = copy.copy(src.__dict__[name])


def posterior_mean(gp):
    r""":math:`\bar L'(q, v)` of the posterior ``gp`` in the standardised coordinates, bound to its mean as it is now
    (the model's ``_lagrangian_std`` reads whichever posterior the model holds when called); it holds the mean's atoms
    and weights, not the posterior's factor."""
    gp._require()
    mean_fn = gp._mean_fn
    return lambda q, v: mean_fn(torch.cat([q, v], -1))


def stamp(model) -> weakref.ref:
    """The posterior ``model`` holds now (a weak reference: a handle does not keep an old fit alive by it)."""
    return weakref.ref(model.gp)


def check_current(model, taken: weakref.ref, what: str) -> None:
    """Raise :class:`~bea.errors.StaleHandleError` if ``model`` no longer holds the posterior ``taken`` (:func:`stamp`)."""
    if taken() is not model.gp:
        raise StaleHandleError(f"{what} was taken from {type(model).__name__} before it was fitted again, moved or loaded: "
                               "it would mix the old fit with the new one. Take it again from the model after fit "
                               "(learners.shadow.handles)")


class FrozenMean(StandardUnits):
    r"""The posterior mean of a fitted ``model`` in the data's units, :math:`L(q, v) = s^2\,\bar L'(q'(q), v'(v))`, as
    it is now: the mean's expansion (atoms, weights, kernel hyperparameters) and a copy of the units, nothing else --
    the same operations as ``model.lagrangian``, so the same bits; with the C form of the mean
    (:func:`~learners.shadow.units.data_units_form`), so that an integrator on it steps in C."""

    def __init__(self, model):
        model._require_fit()
        self.__dict__.update(vars(model._frozen_units()))
        self.n, self.gp = model.n, _Mean(model.gp._mean_fn)

    def lagrangian(self, q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        q, v = check_states(q, v, self.n)
        return self._speed ** 2 * self.gp.mean(self._standard_state(q, v))

    __call__ = lagrangian

    def compiled_form(self, n: int):
        return data_units_form(self, n)

    def _standardised_c_lagrangian(self):
        from .compiled_mean import c_lagrangian_of_expansion

        return c_lagrangian_of_expansion(self.gp._mean_fn, self.n)


class _Mean:
    """The posterior mean alone, read as ``gp.mean`` (:class:`~learners.shadow.units.StandardisedMean`)."""

    def __init__(self, mean_fn):
        self._mean_fn = mean_fn

    def mean(self, x: torch.Tensor) -> torch.Tensor:
        return self._mean_fn(x)
