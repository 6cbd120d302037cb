r"""The model of an element extension (:mod:`~learners.shadow.element_extension`): a fitted
:class:`~learners.shadow.lsi.InverseModifiedLagrangianGP` on another system with the same groups.

Everything a fitted model gives -- ``energy(N)`` (with ``return_std=True``: the exact posterior std of the extension,
:mod:`~learners.shadow.element_uncertainty` through the target's and the source's maps), ``energies``,
``velocities``, ``predict`` and ``integrator`` -- on the target's states, with the source's settings (step, scheme,
normalisation), posterior and variance scales. It is not fitted (it has no data of its own: ``fit`` and saving are
refused) and its calibration is the source's, run on the source's held-back data on the first std.
"""

from __future__ import annotations

from bea.errors import BeaTypeError

from .calibration import ensure_energy_calibration
from .handles import check_current, own_bookkeeping, stamp
from .lsi import InverseModifiedLagrangianGP

__all__ = ["ElementExtension"]


class ElementExtension(InverseModifiedLagrangianGP):
    """A fitted element model carried to another structure (build it with ``model.extend(structure)``): ``source`` is
    the fitted model, ``gp`` the GP of :func:`~learners.shadow.element_extension._extended_gp`, ``n`` the target's
    coordinates, ``center``/``rotation`` its standardisation (the source's units)."""

    def __init__(self, source, gp, n: int, center, rotation):
        # the source's settings as they are (h, scheme, normalisation, options), with module dicts of its own, so that
        # the GP set here is this model's only; the constructor's fresh state would be a model without a fit
        self.__dict__.update(source.__dict__)
        own_bookkeeping(self, source)
        self.__dict__["_source"] = source  # a plain reference, not a submodule (saving is refused)
        self.__dict__["_source_fit"] = stamp(source)  # its posterior now: the std refuses once it is fitted again
        level = source.data_level()  # the data's DEL std level: predict's extrapolation test compares with it
        self.gp, self.n = gp, n
        self._set_units(center, source._unit, source._step, device=source._units_device, rotation=rotation)
        same = n == source.n  # the source's own structure (element_extension.check_extension): its data are this system's
        self.snapshots, self._data_level, self._recovered, self._jet = source.snapshots if same else None, level, {}, None
        self._pending_calibration = None
        self.kernel_structure = source.kernel_structure if same else None  # an auto-chosen spec names the source's n
        self.history = {"extended_from": {"n": source.n, "groups": [g["name"] for g in gp.kernel.base_kernel.groups]}}

    @property
    def source(self):
        """The fitted model this one extends."""
        return self._source

    @property
    def _calibration(self):
        """The source's calibration scales, its pending energy calibrations run first (on its own held-back data); the
        extension's means are a snapshot of the source, its stds refuse after the source is fitted again
        (:mod:`learners.shadow.handles`: the calibration is run on first demand, on the source's data of then)."""
        check_current(self._source, self._source_fit, "this ElementExtension's std (model.extend(...))")
        ensure_energy_calibration(self._source)
        return self._source._calibration

    def __repr__(self) -> str:
        return f"ElementExtension(n={self.n}, of {self._source!r})"

    def fit(self, snapshots):
        raise BeaTypeError("an ElementExtension is not fitted: fit the source model (or a model of this system) and "
                           "extend that")

    def _fitted_extra(self) -> dict:
        raise BeaTypeError("an ElementExtension is not saved: save its source model and call extend(...) after loading")

    def extend(self, structure):
        """The source's extension to ``structure`` (extensions are not chained)."""
        return self._source.extend(structure)

    def _truncation_term(self, N: int, q, v, ref, mean):
        """The truncation term with no data pairs of this system (:mod:`~learners.shadow.truncation`): the whole term
        kept, always ((c, b) = 0 and an infinite data spread, which no reported batch reaches): without data of this
        system there is no scale against which the reported states' energies spread -- a batch on one orbit would get
        the unit part fitted to its non-conservation and the term removed. On the source's structure its data pairs are
        this system's: the source's rule."""
        if self.snapshots is None:
            self._recovered.setdefault(("unit", N), (0.0, 0.0))
            self._recovered.setdefault(("unit_spread", N), float("inf"))
        return super()._truncation_term(N, q, v, ref, mean)
