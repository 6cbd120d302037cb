r"""bea: variational backward error analysis.

Derive modified and inverse modified Lagrangians for any variational integrator, dimension and
truncation order; print them as SymPy or LaTeX; compile them to differentiable torch functions.

>>> import bea
>>> bea.modified_lagrangian("midpoint", 4, n=1)
"""

from . import schemes
from ._version import __version__
from .api import compile_torch, inverse_modified_lagrangian, modified_equation, modified_lagrangian, series_function
from .autodiff import acceleration, energy, momentum
from .closed_form import midpoint_inv2, midpoint_mod2
from .errors import (BeaError, BeaFileNotFoundError, BeaIsADirectoryError, BeaOSError, BeaRuntimeError, BeaTypeError,
                     BeaValueError, CacheFormatError, InconsistentSchemeError, InternalError, MissingDependencyError,
                     NotRegularError, NotRegularFileError, SeriesError, StaleHandleError, UnsupportedSchemeError, BeaWarning,
                     UnverifiedSchemeWarning, DuplicateNameError, PluginLoadError)
from .schemes import (CustomScheme, GeneralisedMidpoint, Midpoint, Scheme, Trapezoidal, available_schemes, exact, get_scheme,
                      register_scheme)
from .radicals import RadicalNumber, radical
from .stages import Composition, Galerkin, StageScheme, galerkin_lobatto, triple_jump
from .free.series import FreeSeries
from .series import Series

__all__ = [
    "__version__",
    "schemes",
    "Scheme",
    "Midpoint",
    "Trapezoidal",
    "GeneralisedMidpoint",
    "CustomScheme",
    "exact",
    "get_scheme",
    "register_scheme",
    "available_schemes",
    "StageScheme",
    "Galerkin",
    "Composition",
    "galerkin_lobatto",
    "triple_jump",
    "radical",
    "RadicalNumber",
    "modified_equation",
    "modified_lagrangian",
    "inverse_modified_lagrangian",
    "compile_torch",
    "series_function",
    "energy",
    "momentum",
    "acceleration",
    "midpoint_mod2",
    "midpoint_inv2",
    "Series",
    "FreeSeries",
    "BeaError",
    "BeaValueError",
    "BeaTypeError",
    "InconsistentSchemeError",
    "UnsupportedSchemeError",
    "NotRegularError",
    "SeriesError",
    "CacheFormatError",
    "InternalError",
    "BeaRuntimeError",
    "StaleHandleError",
    "BeaOSError",
    "BeaFileNotFoundError",
    "BeaIsADirectoryError",
    "MissingDependencyError",
    "NotRegularFileError",
    "BeaWarning",
    "UnverifiedSchemeWarning",
    "DuplicateNameError",
    "PluginLoadError",
]
