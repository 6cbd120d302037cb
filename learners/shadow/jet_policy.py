r"""The compile-or-not policy of the RBF mean's closed-form jets (:class:`~learners.shadow.compiled_mean.RBFJet`):
whether a call takes the C jet (built at its first such call) or autograd through the same expansion, decided here
only, from the call alone (its number of states, the jet's columns, and for a public handle the states x atoms an
autograd pass would hold)."""
from __future__ import annotations

from integrators.codegen import size

__all__ = ["jet_pays", "EAGER_JET_COLUMNS", "EAGER_MAX_STATES", "EAGER_MAX_ENTRIES"]


#: compile-or-not policy (Session 21, :func:`jet_pays`): a jet of fewer partial derivatives per state is always built
#: (at most ~3 s of compiler CPU: 126 columns 2.1 s, 210 columns 9.2 s, 1287 columns 55 s, cold cache, 2 loaded cores)
EAGER_JET_COLUMNS = 200
#: a call at more states than this takes a large jet (built at its first such call), a call at fewer takes autograd.
#: Why a rule on the call's size alone: a call's values then do not depend on what was computed before it (the two
#: paths differ by ~4e-12 relative, Session 21), and autograd was measured only 2-4x slower per state than the jet at
#: these sizes (notebook 06's chain, n = 4, 1006 atoms, warm cache, 2 loaded cores: velocities of order 2 at 1900 states
#: 55.7 s against 28.0 s, ~29 against ~15 ms per state; ~2.5 ms per state and call of the Lagrangian), so many small
#: calls lose at most that factor, while the build (order 5 in 8 variables, 1287 columns: 55 s; with order 4, 1782
#: columns: 76 s) is paid only by a call whose autograd time would be about as large: 2000 states x ~29 ms ~ 58 s
#: (ski rental, at most ~2x the better choice's time for velocities; energies cost ~0.3 ms per state and call, so an
#: energy-only call just above it pays a build that autograd would not have needed)
EAGER_MAX_STATES = 2000
#: states x atoms above which a call takes the jet whatever its number of states: one autograd pass holds ~2 kB per
#: (state, atom) at order 2 (notebook 06's chain: +3.78 GB for 1900 states x 1006 atoms, Session 21), so a call of a
#: public handle (which cannot be chunked: its caller differentiates the result) stays within ~1 GB
EAGER_MAX_ENTRIES = 500_000


def jet_pays(D: int, K: int, states: int, atoms: int = 0) -> bool:
    """Whether a call at ``states`` states takes the jet of order ``K`` in ``D`` variables (building it if it is not
    loaded yet) rather than autograd: the compile-or-not policy, decided here only, from the call alone.

    ``integrators.variational.DEFAULT_EXECUTION`` forces it: ``"compiled"`` always builds, ``"eager"`` never builds a
    jet beyond :data:`EAGER_JET_COLUMNS` columns. ``"auto"`` (the default): small jets always, large ones for calls at
    more than :data:`EAGER_MAX_STATES` states or at more than :data:`EAGER_MAX_ENTRIES` states x ``atoms`` (the
    autograd pass's memory). Neither the calls made so far nor whether the library is already built
    (in this process or in the C cache) enters: a warm cache still takes autograd for small calls, so that the same
    call gives the same bits whatever ran before it."""
    from integrators import variational

    columns = size(D, K)
    mode = variational.DEFAULT_EXECUTION
    if mode == "compiled" or columns < EAGER_JET_COLUMNS:
        return True
    if mode == "eager":
        return False
    return states > EAGER_MAX_STATES or states * atoms > EAGER_MAX_ENTRIES
