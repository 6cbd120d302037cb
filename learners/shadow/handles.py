r"""What the objects a fitted GP model hands out read, once the model is fitted again: one rule for the library.

*A handle is a snapshot.* A callable or object returned by a fitted
:class:`~learners.InverseModifiedLagrangianGP` or :class:`~learners.LagrangianGP` and evaluated later --
``recovered_lagrangian(N)`` at every order (0 included), ``energy(N)``, ``integrator()`` -- is a pure function of the
model as it was when the handle was taken: the posterior (weights, atoms, kernel and its hyperparameters, the
closed-form jet), the units (centre :math:`\bar q`, scale :math:`\sigma`, time unit :math:`\tau`, rotation :math:`R`;
:mod:`learners.shadow.units`) and the step :math:`h'` are all frozen at creation. After ``model.fit(other)``,
``model.to(...)``/``model.double()`` or a new model loaded from a file, the handle gives the same bits as before;
take the handle again for the new fit. How: a fit, a move and a load each build a new
:class:`~learners.shadow.gp.FunctionalGP` and assign new unit tensors (none is changed in place), so a handle keeps
the old ones alive by reference (:func:`snapshot`, :func:`frozen_units`); nothing is copied.

*Where a snapshot would be costly, the handle refuses.* The std of ``energy(N, return_std=True)`` (and of an
``energy`` with ``reference``) reads the model's calibration, posterior factor and data, and an element extension
(``model.extend(...)``, :class:`~learners.shadow.element_model.ElementExtension`) reads its source's calibration, run
on the source's held-back data on first demand: freezing them would mean running the calibration eagerly. Such a
handle records the posterior it was taken from (:func:`stamp`) and, called after the model was fitted again, moved
or loaded, raises :class:`bea.errors.StaleHandleError` naming the handle and the fix (take it again) -- never a number
that mixes two fits.

*The model's own methods are live*: ``model.lagrangian``, ``model(q, v)``, ``model.energies(qs)``, ... evaluate the
model as it is when called. ``load_state_dict`` on a fitted model would change its kernel hyperparameters but not the
posterior conditioned on them (a model that gives numbers of neither state): it is refused unless the state is the
model's own (:class:`GuardedState`); a saved model is read with ``load``.
"""

from __future__ import annotations

import copy
import weakref

import torch

from bea.errors import BeaRuntimeError, StaleHandleError

__all__ = ["snapshot", "stamp", "check_current", "GuardedState", "bookkeeping", "posterior_mean"]


def bookkeeping(module) -> list:
    """The names of ``module``'s Module bookkeeping containers (submodules, parameters, buffers, hooks, and GPyTorch's
    priors, constraints, loss terms where it has them): every dict or set a fresh :class:`torch.nn.Module` holds in its
    ``__dict__``, plus those of ``module``'s own that are private dicts or sets -- copied for a copy of the model, so
    that what is registered on one does not reach the other."""
    fresh = [name for name, value in vars(torch.nn.Module()).items() if isinstance(value, (dict, set))]
    extra = ("_priors", "_constraints", "_added_loss_terms")
    return fresh + [name for name in extra if isinstance(module.__dict__.get(name), (dict, set))]


def snapshot(model):
    """A frozen view of the fitted ``model``: a shallow copy with Module containers of its own, so that a later fit,
    move or load of ``model`` (which assign a new GP, units and caches rather than change them in place) leaves it
    as it is now. Its methods are the model's own code, so its numbers are the model's, bit for bit."""
    view = copy.copy(model)
    for name in bookkeeping(model):  # in __dict__ itself: Module.__setattr__ would not replace them
        view.__dict__[name] = copy.copy(model.__dict__[name])
    return view


def posterior_mean(gp):
    r""":math:`\bar L'(q, v)` of the posterior ``gp`` in the standardised coordinates, bound to this posterior (the
    model's ``_lagrangian_std`` reads whichever posterior the model holds when called)."""
    return lambda q, v: gp.mean(torch.cat([q, v], -1))


def stamp(model) -> weakref.ref:
    """The posterior ``model`` holds now (a weak reference: a handle does not keep an old fit alive by it)."""
    return weakref.ref(model.gp)


def check_current(model, taken: weakref.ref, what: str) -> None:
    """Raise :class:`~bea.errors.StaleHandleError` if ``model`` no longer holds the posterior ``taken`` (:func:`stamp`)."""
    if taken() is not model.gp:
        raise StaleHandleError(f"{what} was taken from {type(model).__name__} before it was fitted again, moved or loaded: "
                               "it would mix the old fit with the new one. Take it again from the model after fit "
                               "(learners.shadow.handles)")


class GuardedState:
    """``load_state_dict`` of a fitted GP model refused unless it changes nothing (module docstring)."""

    def load_state_dict(self, state_dict, *args, **kwargs):
        gp = getattr(self, "gp", None)
        if gp is not None and getattr(gp, "_beta", None) is not None:
            own = self.state_dict()
            same = set(own) == set(state_dict) and all(
                torch.equal(own[k], torch.as_tensor(state_dict[k]).to(own[k])) for k in own)
            if not same:
                raise BeaRuntimeError(f"load_state_dict would change the kernel hyperparameters of a fitted "
                                      f"{type(self).__name__} but not its posterior (weights and factor conditioned on "
                                      "the old ones): read a saved model with load(path), or fit again")
        return super().load_state_dict(state_dict, *args, **kwargs)
