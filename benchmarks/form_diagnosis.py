"""Why ``kernel="auto"``'s ``N = 4`` energy std was too narrow on pendula3 (issue 23, items 2 and 4; session 9).

Three checks on the exact inverse modified Lagrangian of a system (midpoint rule, :func:`integrators.modified`),
no fit unless asked:

* ``--degrees``: the velocity degrees of ``L_inv``'s ``h^2``, ``h^4``, ``h^6`` terms (RMS over the acceptance's 41
  held-out states of each homogeneous part, split by a Vandermonde solve in a velocity scale ``s``), and the
  relative error of ``H_rec[N]``'s 40 energy differences to a reference (after the best scale, as the acceptance
  measures) computed from the exact ``L_inv[N]`` and from its part of degree <= 2 in ``v`` (the hypothesis that a
  degree-2 kernel's missing ``v^4`` terms set the error);
* ``--target``: how far the exact ``L_inv`` misses the whole-matrix normalisation's linear condition
  ``d2L/dv2 - h^2/12 d2L/dq2 = c I`` at the data's centre (largest entry of ``M/(tr M/n) - I``, by the order of
  ``L_inv``), and the nonlinear one the library meets now (``d2/dv2 mod_4(L_inv[4])``, learners/shadow/mass_target.py);
* ``--exact-target``: the acceptance run (benchmarks/identification_acceptance.py, its other options passed on) with
  the matrix conditions' targets set to the exact ``L_inv[6]``'s values at the fit's point (this process only; the
  library's own correction switched off): what a fit with the right target gives.

Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/form_diagnosis.py --degrees --system pendula3 toda3 henon3 duffing3
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/form_diagnosis.py --target --system pendula3 toda3 henon3
    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/form_diagnosis.py --exact-target --system pendula3 --kernel auto
"""

from __future__ import annotations

import argparse
import sys

import torch


def _systems():
    import benchmarks.identification_acceptance as B
    import tests.test_learners_shadow_auto as A

    return {make.__name__: (make, h, T) for make, h, T in A.SYSTEMS + A.UNTUNED + B.UNTUNED}


def degree_parts(f, q: torch.Tensor, v: torch.Tensor, K: int = 8) -> torch.Tensor:
    """``(K, B)``: the parts of ``f(q, v)`` homogeneous of degree ``k < K`` in ``v`` (``f`` a polynomial of degree
    ``< K`` in ``v``): ``f(q, s v) = sum_k s^k f_k`` at ``K`` scales ``s``, solved for ``f_k``."""
    s = torch.tensor([0.25 * (k + 1) * (-1) ** k for k in range(K)], dtype=torch.float64)
    vals = torch.stack([f(q, si * v) for si in s])
    return torch.linalg.solve(torch.stack([s ** k for k in range(K)], 1), vals)


def _relative_error(L, N: int, h: float, system, q, v) -> float:
    from integrators import modified

    true = (system.energy(q[1:], v[1:]) - system.energy(q[:1], v[:1])).detach()
    H = modified.recovered_energy(L, N, h)
    mean = (H(q[1:], v[1:]) - H(q[:1], v[:1])).detach()
    s = float((mean * true).sum() / (true * true).sum())
    return float((mean - s * true).norm() / (s * true).norm())


def degrees(name: str) -> None:
    """The ``--degrees`` table of one system."""
    import tests.test_learners_shadow_auto as A
    from integrators import modified

    make, h, _ = _systems()[name]
    S = make()
    q, v = A.held_out_states(S, 40)
    L = {0: S, **{N: modified.inverse_lagrangian(S, N, h) for N in (2, 4, 6)}}
    parts = {N: degree_parts(lambda a, b, N=N: L[N](a, b) - L[N - 2](a, b), q, v).detach() for N in (2, 4, 6)}
    print(f"{name} (h = {h}): RMS of the degree-k part in v of L_inv's h^2 / h^4 / h^6 terms")
    for k in range(7):
        print(f"  k = {k}: " + " / ".join(f"{float(parts[N][k].pow(2).mean().sqrt()):.2e}" for N in (2, 4, 6)))

    def low(f):
        return lambda a, b: degree_parts(f, a, b)[:3].sum(0)

    for N in (2, 4):
        print(f"  H_rec[{N}] energy differences, relative error: exact L_inv[{N}] {_relative_error(L[N], N, h, S, q, v):.2e}, "
              f"its degree <= 2 part {_relative_error(low(L[N]), N, h, S, q, v):.2e}")


def _anisotropy(M: torch.Tensor) -> float:
    n = M.shape[0]
    return float((M / (torch.trace(M) / n) - torch.eye(n, dtype=torch.float64)).abs().max())


def _matrices(L, x: torch.Tensor, n: int, h: float, nonlinear: bool):
    """The linear condition's matrix ``d2L/dv2 - h^2/12 d2L/dq2`` at ``x`` and (``nonlinear``) ``d2/dv2 mod_4(L)``."""
    from integrators import modified

    H = torch.autograd.functional.hessian(lambda y: L(y[:n][None], y[n:][None]).sum(), x)
    if not nonlinear:
        return H[n:, n:] - h ** 2 / 12 * H[:n, :n], None
    rec = modified.recovered_lagrangian(L, 4, h)
    G = torch.autograd.functional.hessian(lambda w: rec(x[:n][None], w[None]).sum(), x[n:])
    return H[n:, n:] - h ** 2 / 12 * H[:n, :n], G


def target(name: str) -> None:
    """The ``--target`` line of one system: at the mean of the data's midpoints and step velocities (seed 0)."""
    from integrators import modified
    from integrators.data import snapshots

    make, h, T = _systems()[name]
    S = make()
    n = S.n
    Q = torch.as_tensor(snapshots(S, h, T, 5, seed=0))
    x = torch.cat([(0.5 * (Q[:, 1:] + Q[:, :-1])).reshape(-1, n).mean(0), ((Q[:, 1:] - Q[:, :-1]) / h).reshape(-1, n).mean(0)])
    row = []
    for N in (0, 2, 4, 6):
        M, G = _matrices(S if N == 0 else modified.inverse_lagrangian(S, N, h), x, n, h, N == 4)
        row.append(f"{_anisotropy(M):.2e}" + (f" (mod_4: {_anisotropy(G):.1e})" if N == 4 else ""))
    print(f"| {name} | {h} | " + " | ".join(row) + " |")


def exact_target(argv) -> None:
    """The acceptance run with the exact ``L_inv[6]``'s matrix at the fit's point as the targets (module docstring)."""
    import benchmarks.identification_acceptance as B
    import learners.shadow.mass_target as MT
    from integrators import modified
    from learners import InverseModifiedLagrangianGP
    from learners.shadow import normalisation as NM
    from learners.shadow.functionals import Functionals

    name = argv[argv.index("--system") + 1]
    make, h, _ = _systems()[name]
    h = float(argv[argv.index("--h") + 1]) if "--h" in argv else h
    S = make()
    n = S.n
    L_inv = modified.inverse_lagrangian(S, 6, h)
    MT.STEPS = 0  # the library's own correction off: the target is set here
    models = []
    init = InverseModifiedLagrangianGP.__init__

    def recording_init(self, *a, **k):  # the candidate of the principal search is a model of its own
        init(self, *a, **k)
        models.append(self)

    def exact(self, n_, center=None):
        F = plain(self, n_, center)
        if not self.matrix:
            return F
        m, x0 = models[-1], (self.point if self.point is not None else center).reshape(-1)
        R = torch.eye(n, dtype=torch.float64) if m._rotation is None else m._rotation
        x = torch.cat([m._from_standard(x0[:n][None])[0], R @ x0[n:] * m._speed]).detach()
        H = torch.autograd.functional.hessian(lambda y: L_inv(y[:n][None], y[n:][None]).sum(), x)
        M = R.T @ (H[n:, n:] - h ** 2 / 12 * H[:n, :n]) @ R
        E = M / (torch.trace(M) / n) - torch.eye(n, dtype=torch.float64)
        i, j = torch.triu_indices(n_, n_)
        y = F.targets.clone()
        y[n_ + 1:] = y[n_ + 1:] + self.c * E[i, j]
        return Functionals(F.dim, F.count, F.atoms, y)

    InverseModifiedLagrangianGP.__init__ = recording_init
    plain, NM.MassNormalisation.functionals = NM.MassNormalisation.functionals, exact
    B.main(argv)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    if "--exact-target" in argv:
        exact_target([a for a in argv if a != "--exact-target"])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--system", nargs="+", required=True, choices=sorted(_systems()))
    ap.add_argument("--degrees", action="store_true")
    ap.add_argument("--target", action="store_true")
    args = ap.parse_args(argv)
    if args.target:
        print("| system | h | L | L_inv[2] | L_inv[4] | L_inv[6] |\n| --- | --- | --- | --- | --- | --- |")
    for name in args.system:
        (target if args.target else degrees)(name)
        sys.stdout.flush()


if __name__ == "__main__":
    main()
