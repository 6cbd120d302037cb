"""Is the posterior variance of an energy difference resolved below the old worst-case rounding floor? (issue 23)

One system of tests/test_learners_shadow_auto.py (seed 0, h = 0.2, 5 steps), fitted with ``kernel="auto"`` (or the
given one); its 40 held-out energy differences to a reference state (the acceptance metric's states), order N. For
their posterior variances ``v = P - |R^-1 k|^2`` (GP units, ``variance_scale`` 1) the table compares, each relative
to the refined value:

* plain: the float64 triangular solve, as the library computes it;
* refined: one step of iterative refinement, ``V = V0 + R^-1 (k - R V0)``, with the residual and ``|V|^2`` from
  error-free slices (below: each row of R and column of V0 cut into pieces of ``b`` bits on a common grid, with
  ``2b + log2 F <= 53``, so every product of pieces is exact in BLAS; the splitting of Ozaki, Ogita, Rump and Oishi,
  the matrix form of Dekker's TwoProduct);
* R*(1+eps xi), k*(1+eps xi): the inputs perturbed by one unit roundoff, componentwise at random (what their own
  rounding can do);
* jitter +1e-3 noise: the factor of the training covariance with the nugget raised by 1e-3 of itself (the variance
  should move by about that much of its nugget part);
* the old floor ``kappa(R) eps P`` and the library's a-posteriori bound (learners/shadow/variance_rounding.py).

Usage::

    PYTHONPATH=. OMP_NUM_THREADS=1 python3 benchmarks/variance_floor.py --system anharmonic3 --order 2
"""

from __future__ import annotations

import math

import torch

SLICES = 3


def _split(A: torch.Tensor, dim: int, bits: int):
    """SLICES error-free slices of ``bits`` bits on each row (dim=1) or column (dim=0) grid, and the remainder."""
    out, rest = [], A
    for _ in range(SLICES):
        top = rest.abs().amax(dim=dim, keepdim=True)
        e = torch.ceil(torch.log2(torch.where(top > 0, top, torch.ones_like(top))))
        sigma = torch.where(top > 0, 0.75 * torch.exp2(e + 53 - bits), torch.zeros_like(top))
        piece = (rest + sigma) - sigma  # a multiple of 2^(e - bits), |piece| <= 2^e: exact (Rump's ExtractScalar)
        out.append(piece)
        rest = rest - piece
    return out + [rest]


def _products(A, B):
    """Sums of A_s B_t grouped by s + t < SLICES (exact products), then the tail in plain float64."""
    groups = [sum(A[s] @ B[g - s] for s in range(g + 1)) for g in range(SLICES)]
    tail = A[SLICES] @ sum(B)
    for s in range(SLICES):
        tail = tail + A[s] @ sum(B[SLICES - s:])
    return groups + [tail]


def _bits(length: int) -> int:
    return (53 - max(1, math.ceil(math.log2(max(length, 2))))) // 2


def refined_variance(R: torch.Tensor, prior: torch.Tensor, K: torch.Tensor) -> torch.Tensor:
    """P - |R^-1 K^T|^2 with one step of refinement and an error-free residual and sum of squares."""
    b = _bits(R.shape[0])
    V = torch.linalg.solve_triangular(R, K.T, upper=False)
    r = K.T
    for t in _products(_split(R, 1, b), _split(V, 0, b)):
        r = r - t
    V = V + torch.linalg.solve_triangular(R, r, upper=False)
    parts = _split(V, 0, b)
    out = prior
    for t in _products([p.T[:, None, :] for p in parts], [p.T[:, :, None] for p in parts]):
        out = out - t.reshape(-1)
    return out


def main(argv=None) -> None:
    import learners.shadow.uncertainty as U
    from learners.shadow.variance_rounding import resolved_variance
    from _acceptance_fit import fitted_system

    args, A, system, m = fitted_system(argv, __doc__.split("\n")[0], kernel="auto", order=2)
    gp, R = m.gp, m.gp._chol
    q, v = A.held_out_states(system, 40)
    x = m._standard_state(q[1:].reshape(-1, m.n), v[1:].reshape(-1, m.n))
    xr = m._standard_state(q[0], v[0]).expand_as(x)
    G = U.LinearisedQuantity(m._quantity("energy", args.order), x, 1, m._jet_order("energy", args.order))
    pieces = []  # (prior, K and their formation scales) as posterior_variance forms them, captured at its solve
    real = U.resolved_variance

    def capture(R_, prior, K, prior_scale, K_scale):
        pieces.append((prior, K, prior_scale, K_scale))
        return real(R_, prior, K, prior_scale, K_scale)

    U.resolved_variance = capture
    try:
        U.posterior_variance(gp, G, U.Reference(xr))
    finally:
        U.resolved_variance = real
    prior, K, prior_scale, K_scale = (torch.cat(p) for p in zip(*pieces))
    ref = refined_variance(R, prior, K)
    plain, bound = resolved_variance(R, prior, K, prior_scale, K_scale)
    g = torch.Generator().manual_seed(1)
    eps = torch.finfo(torch.float64).eps

    def jiggle(T_):
        return T_ * (1 + eps * torch.randn(T_.shape, generator=g, dtype=torch.float64))

    Th = gp.kernel.forward(gp.train_functionals, gp.train_functionals).detach()
    Th = 0.5 * (Th + Th.T)
    Th.diagonal().add_(float(gp.noise.detach()) * (1 + 1e-3) + gp.info.jitter)
    rows = {"plain": plain, "R*(1+eps xi)": refined_variance(jiggle(R), prior, K),
            "k*(1+eps xi)": refined_variance(R, prior, jiggle(K)),
            "jitter +1e-3 noise": refined_variance(torch.linalg.cholesky(Th), prior, K)}
    old = math.sqrt(gp.info.cond_estimate) * eps * prior
    print(f"{args.system}, N = {args.order}, kernel {args.kernel} (degree {m.kernel_degree}): {gp.info}")
    print(f"variances / prior: median {float((ref / prior).median()):.3g}; below the old floor kappa eps P: "
          f"{int((ref < old).sum())} of {ref.numel()} (median v / floor {float((ref / old).median()):.3g}); "
          f"a-posteriori bound / v: median {float((bound / ref).median()):.2g}, max {float((bound / ref).max()):.2g}; "
          f"below the bound: {int((ref < bound).sum())}")
    print("| relative to refined | median | max |\n| --- | --- | --- |")
    for name, val in rows.items():
        d = ((val - ref) / ref).abs()
        print(f"| {name} | {float(d.median()):.2g} | {float(d.max()):.2g} |")


if __name__ == "__main__":
    main()
