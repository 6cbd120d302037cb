"""Diagnostic (Session 24, branch pick14): the acceptance runner with the per-body diagonal conditions' targets set to
the exact ``L_inv``'s O(h^4) remainder -- does that remainder explain the fit's error?

A per-body fit (kernel="auto" keeping ``bodies(k, d, identical=False)``) sets ``d2L/dv2 - kappa d2L/dq2``'s entries above
the diagonal to 0 at the data's centre and at ``BODY_STATES`` data states
(``learners.shadow.normalisation.at_data_states``). The exact inverse modified Lagrangian meets these only to O(h^4).
Here the targets become that remainder, read off ``integrators.modified.inverse_lagrangian(system, 4, h)`` at the same
states (mapped to the data's units; the overall scale from the trace condition at x0), so a run shows what the fit
gives when the conditions are true to O(h^6). Library untouched; the patch lives in this process only.

    PYTHONPATH=$PWD OMP_NUM_THREADS=1 python3 benchmarks/exact_body_targets.py --system S [--seed k] --no-std
    environment: EXACT=1 (default) the picked states only, EXACT=2 also x0, EXACT=0 no patch; BODY_STATES=B the count;
    ORDER=N the order of L_inv (default 4).
Systems: the acceptance runner's, plus the session 24 reviewer's morse_unequal4 and spring10_unequal4 (benchmarks/_systems25.py).
"""

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import _systems24  # noqa: E402
from _systems25 import morse_unequal4, spring10_unequal4  # noqa: E402,F401
import identification_acceptance as I  # noqa: E402


def _remainders(model, Linv, h, xs, n):
    """``d2L_inv/dv2 - h^2/12 d2L_inv/dq2`` (data units, where the fit's standardised form is the same matrix) at ``xs``."""
    out = []
    for x in xs:
        y = torch.cat([x[:n] * model._unit + model._center, x[n:] * model._speed]).detach()
        H = torch.autograd.functional.hessian(lambda z: Linv(z[:n][None], z[n:][None]).sum(), y)
        out.append((H[n:, n:] - h**2 / 12 * H[:n, :n], H[n:, n:]))
    return out


def patch(make, h, mode):
    """Replace ``structure_choice._spec_args`` by one whose per-body conditions carry the exact remainder as targets."""
    from integrators import modified
    from learners.shadow import normalisation as nm, structure_choice as sc
    from learners.shadow.functionals import Functionals

    Linv, orig = modified.inverse_lagrangian(make(), int(os.environ.get("ORDER", "4")), h), sc._spec_args

    def patched(model, spec, args):
        new = orig(model, spec, args)
        if new is args:
            return new
        assert model._rotation is None and model._center is not None
        F, Fd = new[8], model._norm_diagonal
        n = Fd.dim // 2
        P, (i, j) = n * (n - 1) // 2, torch.triu_indices(n, n, 1)
        states = nm.data_states(args[0])  # the library's own picks
        assert (F.count - Fd.count) // P == states.shape[0]
        Cs = _remainders(model, Linv, h, [Fd.atoms[0].points[0]] + list(states), n)
        lam = Fd.targets[n + 1] / Cs[0][1].diagonal().sum()  # the trace condition's scale, at x0
        t = F.targets.clone()
        for s, (C, _) in enumerate(Cs):
            if s or mode >= 2:
                start = n + 2 if s == 0 else Fd.count + (s - 1) * P
                t[start:start + P] = lam * C[i, j]
        rel = [float((C[i, j] / (C.diagonal()[i] * C.diagonal()[j]).sqrt()).abs().max()) for C, _ in Cs]
        print(f"exact targets (mode {mode}): largest |C_ij| / sqrt(C_ii C_jj) at x0 {rel[0]:.2g}, at the {len(rel) - 1} "
              f"states max {max(rel[1:]):.2g} median {float(torch.tensor(rel[1:]).median()):.2g}", flush=True)
        return new[:8] + (Functionals(F.dim, F.count, F.atoms, t),)

    sc._spec_args = patched


def main(argv):
    _systems24.NEW24 = list(_systems24.NEW24) + [(morse_unequal4, 0.2, 150), (spring10_unequal4, 0.2, 150)]
    if os.environ.get("BODY_STATES"):
        from learners.shadow import normalisation
        normalisation.BODY_STATES = int(os.environ["BODY_STATES"])
    mode = int(os.environ.get("EXACT", "1"))
    if mode:
        import _systems12
        import _systems23
        import tests.test_learners_shadow_auto as A
        known = A.SYSTEMS + A.UNTUNED + I.UNTUNED + _systems12.NEW12 + _systems23.NEW23 + _systems24.NEW24
        make, h = {m.__name__: (m, h) for m, h, _ in known}[argv[argv.index("--system") + 1]]
        patch(make, h, mode)
    I.main(argv)


if __name__ == "__main__":
    main(sys.argv[1:])
