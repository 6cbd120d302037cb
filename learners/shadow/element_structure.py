r"""Element structures of a Lagrangian: which low-dimensional inputs its element energies see.

A mechanical Lagrangian is often a sum of *element* energies, each a function of a few affine combinations of the
state :math:`z = (q, v) \in \mathbb R^{2n}`: a body's kinetic energy and external field see :math:`(q_i, v_i)`, a
pair potential sees :math:`q_i - q_j`, a bond of a chain :math:`q_{i+1} - q_i`. A *group* collects elements that are
the same function of their inputs (identical bodies, identical bonds): instance :math:`e` of the group sees
:math:`w_e = A_e z + b_e \in \mathbb R^k`, the first ``positions`` outputs position-like, the rest velocity-like.

A group is a dict (plain data, so a model file records it): ``name``, ``maps`` (m, k, 2n), ``offsets`` (m, k),
``positions`` (int) and ``degree`` (None: an RBF on :math:`w`; an integer: the mechanical kernel of that degree,
:mod:`learners.shadow.mechanical`, which needs as many velocity-like as position-like outputs); optional ``swap``
(True: the instance set is closed under the swap of the two halves of the position and of the velocity outputs,
and the closed-form mean may sum over one of each swapped pair, :func:`~learners.shadow.element_blocks.swap_half`;
set by the triples only).

*Why the pair element sees relative velocities too.* For :math:`L = \sum_i \tfrac12 m_i|v_i|^2 - \sum_{i<j}
\phi(q_i - q_j)` the :math:`h^2` term of :math:`L_{inv}` holds :math:`v^\top\nabla^2V v = \sum_{i<j} (v_i - v_j)^\top
\nabla^2\phi(q_i - q_j)(v_i - v_j)`: pair-additive in :math:`(q_i - q_j, v_i - v_j)`. Its other term,
:math:`\nabla V^\top M^{-1}\nabla V`, is pair-additive for two bodies only (three bodies: products of two pairs'
forces), which is what the optional full-dimensional correction of :class:`~learners.shadow.element_kernel.ElementKernel`
is for. Pairs are symmetric under exchange, :math:`\phi(r, w) = \phi(-r, -w)`: both orientations are instances of
the group, so every sample of the prior is even. A bond of a chain is not (an FPU bond potential has a cubic term):
one orientation.

*Triples.* For three bodies and more the same :math:`h^2` term holds :math:`\nabla V^\top M^{-1}\nabla V = \sum_i
|\sum_j f_{ij}|^2`, whose cross products :math:`f_{ij}\cdot f_{ik}` are functions of the relative positions of a body
and two others: ``body_groups(..., triples=True)`` adds a group of them (:func:`_triples`).
"""

from __future__ import annotations

from typing import Dict, List

import torch

from bea.errors import BeaValueError

__all__ = ["body_groups", "chain_groups", "check_groups", "ENDS"]

#: the ends a chain may have
ENDS = ("fixed", "free", "periodic")


def _selector(rows: List[Dict[int, float]], D: int) -> torch.Tensor:
    """A (k, D) matrix whose row r is the combination ``rows[r]`` (input index -> coefficient)."""
    A = torch.zeros(len(rows), D, dtype=torch.float64)
    for r, row in enumerate(rows):
        for j, c in row.items():
            A[r, j] += c
    return A


def _group(name: str, maps: List[torch.Tensor], positions: int, degree, swap: bool = False) -> Dict[str, object]:
    M = torch.stack(maps)
    group = {"name": name, "maps": M, "offsets": torch.zeros(M.shape[:2], dtype=torch.float64), "positions": positions,
             "degree": degree}
    return {**group, "swap": True} if swap else group  # the key only where set: the other groups' records unchanged


def _site(i: int, dim: int, n: int) -> torch.Tensor:
    """(q_i, v_i) of site/body ``i`` with ``dim`` coordinates each, body-major layout."""
    rows = [{i * dim + d: 1.0} for d in range(dim)] + [{n + i * dim + d: 1.0} for d in range(dim)]
    return _selector(rows, 2 * n)


def _difference(i, j, dim: int, n: int, velocities: bool) -> torch.Tensor:
    """(q_i - q_j[, v_i - v_j]); ``None`` for i or j: a fixed end at the origin."""
    def rows(off):
        out = []
        for d in range(dim):
            row = {} if i is None else {off + i * dim + d: 1.0}
            if j is not None:
                row[off + j * dim + d] = row.get(off + j * dim + d, 0.0) - 1.0
            out.append(row)
        return out
    return _selector(rows(0) + (rows(n) if velocities else []), 2 * n)


def body_groups(count: int, dim: int, identical: bool = True, degree=None, pair_velocities: bool = True,
                triples: bool = False, triple_velocities: bool = False) -> List[Dict[str, object]]:
    r"""``count`` bodies with ``dim`` coordinates each, :math:`q = (x_1, y_1, x_2, \dots)`: a body element
    :math:`(q_i, v_i)` (one group shared by all bodies with ``identical``, else a group per body: bodies of unequal
    masses are not the same function) and a pair element :math:`(q_i - q_j, v_i - v_j)` (both orientations; positions
    only without ``pair_velocities``). ``triples``: also the group ``"triple"`` (:func:`_triples`; three bodies at
    least), with the relative velocities where ``triple_velocities``."""
    if count < 2 or dim < 1:
        raise BeaValueError(f"bodies needs at least two bodies of at least one coordinate, got count={count}, dim={dim}")
    if triple_velocities and not triples:
        raise BeaValueError("triple_velocities=True adds the relative velocities to the triple group, which is off: give "
                            "triples=True as well, or leave triple_velocities off")
    if triples and count < 3:
        raise BeaValueError(f"triples=True needs at least three bodies (a triple is a body and two others), got "
                            f"count={count}: leave triples off for two bodies (their products of forces are pair terms)")
    n = count * dim
    sites = [_site(i, dim, n) for i in range(count)]
    groups = [_group("body", sites, dim, degree)] if identical else [
        _group(f"body{i}", [s], dim, degree) for i, s in enumerate(sites)]
    pairs = []
    for i in range(count):
        for j in range(i + 1, count):
            pairs += [_difference(i, j, dim, n, pair_velocities), _difference(j, i, dim, n, pair_velocities)]
    groups.append(_group("pair", pairs, dim, degree if pair_velocities else None))
    if triples:
        groups.append(_triples(count, dim, degree if triple_velocities else None, triple_velocities))
    return groups


def _triples(count: int, dim: int, degree, velocities: bool) -> Dict[str, object]:
    r"""The group ``"triple"``: instance :math:`(i; j, k)`, :math:`j \ne k` both :math:`\ne i`, sees
    :math:`(q_i - q_j, q_i - q_k[, v_i - v_j, v_i - v_k])` (position rows, then velocity rows), every ordered
    :math:`(j, k)`: both orders are instances, so every sample of the prior is symmetric under :math:`j \leftrightarrow
    k`; :math:`\text{count}(\text{count} - 1)(\text{count} - 2)` instances, one shared function. Why: the :math:`h^2`
    term of :math:`L_{inv}` holds :math:`|F_i|^2 = |\sum_j f_{ij}|^2`, whose cross terms :math:`f_{ij} \cdot f_{ik}`
    are functions of :math:`(q_i - q_j, q_i - q_k)` -- three bodies, positions only -- which neither the body nor the
    pair elements hold (docs/theory/elements.md, *Triples*)."""
    n = count * dim
    maps = []
    for i in range(count):
        for j in range(count):
            for k in range(count):
                if len({i, j, k}) == 3:
                    a, b = _difference(i, j, dim, n, velocities), _difference(i, k, dim, n, velocities)
                    rows = [a[:dim], b[:dim]] + ([a[dim:], b[dim:]] if velocities else [])
                    maps.append(torch.cat(rows))
    return _group("triple", maps, 2 * dim, degree, swap=True)


def chain_groups(n: int, ends: str = "fixed", identical: bool = True, degree=None,
                 bond_velocities: bool = True, window: int = None) -> List[Dict[str, object]]:
    r"""A chain of ``n`` scalar sites: a site element :math:`(q_i, v_i)` (kinetic energy and on-site potential;
    shared with ``identical``) and a bond element :math:`(q_{i+1} - q_i, v_{i+1} - v_i)`, one orientation, with the
    bonds to the ends: ``"fixed"`` (walls at 0: :math:`q_1 - 0` and :math:`0 - q_n`), ``"periodic"``
    (:math:`q_1 - q_n`) or ``"free"`` (none). ``window`` (an integer :math:`w \ge 2`): also a group ``"window"`` of
    :math:`w` consecutive bonds, instance :math:`j` seeing :math:`(r_j, \dots, r_{j+w-1}, \dot r_j, \dots,
    \dot r_{j+w-1})` (velocities with ``bond_velocities``), every run of :math:`w` bonds in chain order (wrapping round
    for ``"periodic"``), one shared function (:func:`_windows`)."""
    if ends not in ENDS:
        raise BeaValueError(f"ends must be one of {ENDS}, got {ends!r}")
    if n < 2:
        raise BeaValueError(f"a chain needs at least two sites, got n={n}")
    sites = [_site(i, 1, n) for i in range(n)]
    groups = [_group("site", sites, 1, degree)] if identical else [
        _group(f"site{i}", [s], 1, degree) for i, s in enumerate(sites)]
    links = [(i + 1, i) for i in range(n - 1)]
    if ends == "fixed":
        links = [(0, None)] + links + [(None, n - 1)]
    elif ends == "periodic":
        links.append((0, n - 1))
    bonds = [_difference(i, j, 1, n, bond_velocities) for i, j in links]
    groups.append(_group("bond", bonds, 1, degree if bond_velocities else None))
    if window is not None:
        groups.append(_windows(bonds, window, ends == "periodic", degree if bond_velocities else None))
    return groups


def _windows(bonds: List[torch.Tensor], w: int, cyclic: bool, degree) -> Dict[str, object]:
    r"""The group ``"window"``: instance :math:`j` stacks the position rows, then the velocity rows, of ``bonds[j:j+w]``
    (indices mod the bond count where ``cyclic``). Why: a nearest-neighbour chain's :math:`L_{inv}` holds, from
    :math:`h^2` on, terms that are sums over sites of functions of the bonds next to them (:math:`F_i^2` of two bonds,
    :math:`F_i H_{i,i+1} F_{i+1}` of three), not sums over single bonds (docs/theory/elements.md, *Windows*)."""
    if isinstance(w, bool) or not isinstance(w, int) or w < 2:
        raise BeaValueError(f"window must be an integer >= 2 (consecutive bonds per instance), got {w!r}")
    count = len(bonds) if cyclic else len(bonds) - w + 1
    if w > len(bonds) or count < 1:
        raise BeaValueError(f"window={w} needs at least {w} bonds; this chain has {len(bonds)}: use a smaller window")
    k = bonds[0].shape[0]  # 1 (positions only) or 2 (position and velocity rows)
    maps = []
    for j in range(count):
        run = [bonds[(j + a) % len(bonds)] for a in range(w)]
        maps.append(torch.cat([b[r:r + 1] for r in range(k) for b in run]))
    return _group("window", maps, w, degree)


def check_groups(groups, D: int = None) -> int:
    """Validate ``groups`` (module docstring); returns the state dimension :math:`D = 2n` they act on."""
    if not isinstance(groups, (list, tuple)) or not groups:
        raise BeaValueError("an element kernel needs a non-empty list of groups (dicts: name, maps, offsets, positions, degree)")
    dims, names = set(), [g.get("name") if isinstance(g, dict) else None for g in groups]
    # the names key the hyperparameters ("name:scale"): a repeated one would overwrite another group's entries
    if any(not isinstance(x, str) or not x or ":" in x or x == "correction" for x in names) or len(set(names)) != len(names):
        raise BeaValueError(f"every group needs a distinct non-empty string name without ':' (not 'correction', the "
                            f"correction term's), got {names}: rename the groups")
    for g in groups:
        M, b, p = g.get("maps"), g.get("offsets"), g.get("positions")
        if not isinstance(M, torch.Tensor) or M.dim() != 3 or not isinstance(b, torch.Tensor) or b.shape != M.shape[:2]:
            raise BeaValueError(f"group {g.get('name')!r}: maps must be a (m, k, D) tensor and offsets (m, k)")
        if not (bool(torch.isfinite(M).all()) and bool(torch.isfinite(b).all())):
            raise BeaValueError(f"group {g.get('name')!r}: maps and offsets must be finite (NaN or inf found)")
        if not isinstance(p, int) or isinstance(p, bool) or not 0 < p <= M.shape[1]:
            raise BeaValueError(f"group {g.get('name')!r}: positions must be an integer in [1, k = {M.shape[1]}], got {p!r}")
        if not isinstance(g.get("swap", False), bool):
            raise BeaValueError(f"group {g.get('name')!r}: swap must be True or False, got {g.get('swap')!r}")
        deg = g.get("degree")
        if deg is not None and 2 * p != M.shape[1]:
            raise BeaValueError(f"group {g.get('name')!r}: a mechanical base (degree {deg}) needs as many velocity-like "
                                f"as position-like outputs; give degree=None (an RBF) or pair every position with its velocity")
        dims.add(M.shape[2])
    if len(dims) != 1 or (D is not None and dims != {D}) or next(iter(dims)) % 2:
        raise BeaValueError(f"the groups' maps act on dimensions {sorted(dims)}, not on one state (q, v) of even dimension"
                            + ("" if D is None else f" {D}"))
    return next(iter(dims))
