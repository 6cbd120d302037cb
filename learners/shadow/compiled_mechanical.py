r"""The GP posterior mean with the mechanical kernel in C: a sum over atoms of the code generator's IR.

:class:`~learners.shadow.mechanical.MechanicalExpansion` is :math:`f = \sigma_f^2 \sum_k c_k E_k T_k` in the scaled
variables :math:`(q/\ell, v/\lambda)`: a Gaussian in the positions times :math:`T_m`, a polynomial in
:math:`b = 1 + \tilde v\cdot\tilde y^v`, :math:`\rho_j` and :math:`\nu_j` for atoms of order ``m`` (that class's
docstring). One atom's term of each order is a program of :mod:`integrators.codegen.ir` (:func:`mechanical_blocks`),
summed over the atoms by :mod:`integrators.codegen.reduce` as the RBF mean is, and composed with the scaling by
:func:`learners.shadow.compiled_mean.units_form`. ``P = [K0, K1, K2, ell (n), lambda (n), sigma_f^2, rows]``, a row
of order ``m`` being ``(c, y^q (n), y^v (n), m x (w^q (n), w^v (n)), [w^q_1 . w^q_2 if m = 2])``, all scaled.
"""

from __future__ import annotations

import numpy as np
import torch

from bea.errors import BeaValueError

__all__ = ["mechanical_blocks", "c_lagrangian_of_mechanical"]


def mechanical_blocks(n: int, d: int, K: int):
    """The three :class:`integrators.codegen.reduce.Block` (atoms of order 0, 1, 2) of the mechanical mean in the
    ``2n`` scaled variables to degree ``K``, polynomial degree ``d`` in the velocities."""
    from integrators.codegen import Program
    from integrators.codegen.reduce import Block, atom

    if d < 2:  # the kernel's polynomial in v has degree >= 2 (MechanicalKernel refuses less)
        raise BeaValueError(f"mechanical_blocks needs degree d >= 2, got {d}")

    blocks = []
    for m in range(3):
        prog = Program(2 * n, K)
        s = [prog.seed(i) for i in range(2 * n)]
        r = [prog.sub(s[i], atom(1 + i)) for i in range(n)]
        sq = 0.0
        for ri in r:
            sq = prog.add(sq, prog.mul(ri, ri))
        E = prog.unary("exp", prog.mul(-0.5, sq))
        b = prog.dot([atom(1 + n + i) for i in range(n)], s[n:], start=1.0)
        rho = [prog.dot([atom(1 + 2 * n + 2 * n * j + i) for i in range(n)], r) for j in range(m)]
        nu = [prog.dot([atom(1 + 3 * n + 2 * n * j + i) for i in range(n)], s[n:]) for j in range(m)]
        low = prog.ipow(b, max(d - 2, 0))
        pw = [prog.mul(prog.mul(low, b), b), prog.mul(low, b), low]  # b^d, b^(d-1), b^(d-2)
        if m == 0:
            T = pw[0]
        elif m == 1:
            T = prog.add(prog.mul(rho[0], pw[0]), prog.mul(float(d), prog.mul(pw[1], nu[0])))
        else:
            first = prog.mul(prog.sub(prog.mul(rho[0], rho[1]), atom(1 + 6 * n)), pw[0])
            mixed = prog.mul(float(d), prog.mul(pw[1], prog.add(prog.mul(rho[0], nu[1]), prog.mul(rho[1], nu[0]))))
            T = prog.add(prog.add(first, mixed), prog.mul(float(d * (d - 1)), prog.mul(pw[2], prog.mul(nu[0], nu[1]))))
        blocks.append(Block(prog, prog.mul(atom(0), prog.mul(E, T)), 1 + 2 * n + 2 * n * m + (m == 2)))
    return blocks


def _params(ex) -> np.ndarray:
    """``P`` of the module docstring, on the host."""
    with torch.no_grad():
        counts, rows = [], []
        by_order = {g["m"]: g for g in ex._groups}
        for m in range(3):
            g = by_order.get(m)
            if g is None:
                counts.append(0.0)
                continue
            cols = [g["c"][:, None], g["Yq_t"].T, g["Yv_t"].T]
            for j in range(m):
                cols += [g["Wq_t"][j].T, g["Wv_t"][j].T]
            if m == 2:
                cols.append(g["ww"][:, None])
            block = torch.cat([c.to(torch.float64).cpu() for c in cols], 1)
            counts.append(float(block.shape[0]))
            rows.append(block.reshape(-1))
        head = torch.tensor(counts + ex._lq.tolist() + ex._lv.tolist() + [float(ex._scale)], dtype=torch.float64)
        return np.ascontiguousarray(torch.cat([head] + rows).numpy(), dtype=np.float64)


def c_lagrangian_of_mechanical(ex, n: int):
    """The :class:`integrators.compiled.CLagrangian` of a :class:`~learners.shadow.mechanical.MechanicalExpansion`
    on ``(q, v)`` with ``n`` coordinates."""
    from integrators.compiled import NotLowerable

    from .compiled_mean import units_form

    if ex.n != n:
        raise NotLowerable(f"the expansion lives on R^{2 * ex.n}, not on (q, v) with n = {n}")
    return units_form(mechanical_blocks(n, ex.d, 2), _params(ex), n)
