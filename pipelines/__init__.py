"""pipelines: workflows built on the library -- experiment sweeps (:mod:`pipelines.sweep`).

The layer above :mod:`learners`: dependencies point one way, ``bea <- integrators <- learners <-
pipelines``; nothing below imports this package (``python -m bea sweep`` imports it only when asked).
"""

from bea.errors import BeaError, BeaWarning  # the roots of every exception and warning of the project, exported by each package

__all__ = ["BeaError", "BeaWarning"]
