"""Can a fit tell that its system separates into parts conserved each on its own? A diagnostic (session 10), negative.

Were the learned energy separable, the parts' directions could be named in a warning (the parts' relative factors come
from the normalisation's assumption, not the data). Measure: in the principal directions :math:`r_k` of the data's second
differences, the Hessian of the energy :math:`E = v\cdot\partial_v L - L` (blind to gauge terms, which couple any
directions in :math:`L` itself) at 24 data states; for each of its blocks ``qq, qv, vq, vv`` the RMS of entry ``(k, l)``
over the states relative to the geometric mean of the RMS diagonal entries of the same kind; ``c_kl`` the largest of the
four. Printed for the learned mean and for the true ``L`` in the same coordinates: where the true ``c`` is near 0
between parts (two_body4: 0.006-0.03, the data's principal directions being near the parts') the learned one is
0.09-0.14 (the GP's error of the weak centre-of-mass forces), as large as the learned couplings of weakly coupled
systems identified to 1e-4 (anharmonic3 0.09-0.22, toda4 0.06-0.20), so no threshold tells them apart at these data
sizes (session 10 of benchmarks/RESULTS_identification.md).

    PYTHONPATH=. OMP_NUM_THREADS=1 nice -n 5 python3 benchmarks/part_coupling.py two_body4 anharmonic3 toda4 mass_chain4
"""

from __future__ import annotations

import sys
import warnings
from typing import Tuple

import torch

from learners.shadow.held_states import midpoint_states
from learners.shadow.principal import principal_directions

STATES = 24


def _states(S_std: torch.Tensor, h_std: float, count: int) -> torch.Tensor:
    """``count`` states ``(q, v)`` of standardised snapshots (n_traj, m, n): midpoints of triples, central-difference
    velocities, spread evenly over the data."""
    q, v = (x.reshape(-1, S_std.shape[-1]) for x in midpoint_states(S_std, h_std))
    pick = torch.linspace(0, q.shape[0] - 1, min(count, q.shape[0]), device=q.device).round().long()
    return torch.cat([q[pick], v[pick]], -1)


def coupling(lagrangian_std, S_std: torch.Tensor, h_std: float) -> Tuple[torch.Tensor, torch.Tensor]:
    """The coupling matrix ``c`` (n, n; zero diagonal) of the module docstring for the mean ``lagrangian_std(q, v)``
    of the fit's coordinates and its standardised snapshots ``S_std`` (n_traj, m, n) at step ``h_std``, and the
    principal directions it is taken in (columns, (n, n), the fit's coordinates)."""
    n = S_std.shape[-1]
    _, R = principal_directions(S_std)
    T = torch.block_diag(R, R)  # the directions for positions and velocities alike

    def energy(x):  # E = v . dL/dv - L: blind to a gauge term d/dt xi(q), which couples any directions in L itself
        q, v = x[None, :n], x[None, n:].requires_grad_(True)
        L = lagrangian_std(q, v).sum()
        (p,) = torch.autograd.grad(L, v, create_graph=True)
        return (v * p).sum() - L

    with torch.enable_grad():
        H = torch.stack([torch.autograd.functional.hessian(energy, x, create_graph=False)
                         for x in _states(S_std, h_std, STATES)])
    H = T.T @ H @ T
    rms = H.pow(2).mean(0).sqrt()  # (2n, 2n)
    d = rms.diagonal().clamp_min(1e-300)
    c = rms / (d[:, None] * d[None, :]).sqrt()
    blocks = torch.stack([c[:n, :n], c[:n, n:], c[n:, :n], c[n:, n:]])
    out = blocks.amax(0)
    return out - torch.diag(out.diagonal()), R


def main(names) -> None:
    import benchmarks.identification_acceptance as B
    import tests.test_learners_shadow_auto as A
    from integrators.data import snapshots
    from learners import InverseModifiedLagrangianGP

    systems = {m.__name__: (m, h, T) for m, h, T in A.SYSTEMS + A.UNTUNED + B.UNTUNED}
    for name in names:
        make, h, T = systems[name]
        system = make()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            m = InverseModifiedLagrangianGP(h, progress=False).fit(snapshots(system, h, T, 5, seed=0))
        S = m._to_standard(m.snapshots)
        true = lambda q, v: system(m._from_standard(q), m._vector_from_standard(v))  # noqa: E731 (a scale: no matter)
        learned, _ = coupling(m._lagrangian_std, S, m._h_std)
        exact, _ = coupling(true, S, m._h_std)
        print(f"{name} (principal kept: {m.history.get('principal', {}).get('kept')}): coupling c_kl, learned\n"
              f"{learned.numpy().round(3)}\ntrue\n{exact.numpy().round(3)}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
