"""integrators: batched variational integrators in torch, reference flows and snapshot data.

Filled by the integrators issue; depends on :mod:`bea` for schemes and series.
"""
