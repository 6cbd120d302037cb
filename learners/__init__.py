"""learners: Gaussian-process and neural (ModLaNet) models of inverse modified Lagrangians.

Filled by the learners issues; depends on :mod:`bea` and :mod:`integrators`.
"""
