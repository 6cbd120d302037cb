"""Snapshot data: Halton initial conditions, exact positions, save/load round trips and validation errors."""

import csv

import numpy as np
import pytest
import torch

from integrators import data, reference_flow, systems
from integrators.data import SnapshotError, load_snapshots, save_snapshots, snapshots

PENDULUM = systems.pendulum()


def test_snapshots_are_exact_positions_from_halton_initial_conditions():
    q, (q0, v0) = snapshots(PENDULUM, 0.5, 40, 5, seed=3, return_initial=True)
    assert q.shape == (40, 6, 1) and q.dtype == torch.float64
    # initial conditions inside the default domain [-pi, pi] x [-1.2, 1.2], spread out (Halton)
    assert bool((q0.abs() <= np.pi).all()) and bool((v0.abs() <= 1.2).all())
    assert float(q0.std()) > 1.0 and float(v0.std()) > 0.4
    assert torch.equal(q[:, 0], q0)
    # positions are those of the exact flow (checked per trajectory, each integrated alone)
    for k in (0, 17, 39):
        ref = reference_flow(PENDULUM, q0[k], v0[k], 0.5 * np.arange(6)).q
        assert float((q[k] - ref).abs().max()) <= 1e-11


def test_snapshots_seed_noise_and_domain():
    a = snapshots(PENDULUM, 0.1, 8, 3, seed=1)
    assert torch.equal(a, snapshots(PENDULUM, 0.1, 8, 3, seed=1))
    assert not torch.equal(a, snapshots(PENDULUM, 0.1, 8, 3, seed=2))
    noisy = snapshots(PENDULUM, 0.1, 8, 3, seed=1, noise=1e-3)
    d = noisy - a
    assert 2e-4 < float(d.std()) < 5e-3
    box = [(-0.1, 0.1), (0.2, 0.3)]
    _, (q0, v0) = snapshots(PENDULUM, 0.1, 16, 2, domain=box, return_initial=True)
    assert bool((q0.abs() <= 0.1).all()) and bool(((v0 >= 0.2) & (v0 <= 0.3)).all())
    hh = snapshots(systems.henon_heiles(), 0.1, 5, 4)
    assert hh.shape == (5, 5, 2)
    # a plain torch Lagrangian needs an explicit domain
    L = lambda q, v: 0.5 * (v**2).sum(-1) - 0.5 * (q**2).sum(-1)  # noqa: E731
    assert snapshots(L, 0.1, 3, 2, domain=[(0, 1), (0, 1)]).shape == (3, 3, 1)
    with pytest.raises(ValueError, match="domain"):
        snapshots(L, 0.1, 3, 2)


@pytest.mark.parametrize("kwargs,match", [
    (dict(h=0.0), "h must be"), (dict(n_traj=0), "n_traj"), (dict(n_steps=0), "n_steps"), (dict(noise=-1.0), "noise"),
    (dict(domain=[(0, 1)]), "domain needs 2"), (dict(domain=[(1, 0), (0, 1)]), "low > high"),
])
def test_snapshots_bad_input(kwargs, match):
    args = dict(h=0.1, n_traj=3, n_steps=2)
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        snapshots(PENDULUM, **args)


@pytest.mark.parametrize("ext", ["npz", "csv"])
def test_save_load_round_trip(tmp_path, ext):
    q = snapshots(systems.henon_heiles(), 0.1, 4, 6, seed=0)
    path = save_snapshots(tmp_path / f"data.{ext}", q, 0.1, t0=2.0)
    s = load_snapshots(path)
    assert torch.equal(s.q, q) and abs(s.h - 0.1) < 1e-12 and torch.allclose(s.t0, torch.full((4,), 2.0))


def _write_csv(path, header, rows):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_one_file_per_trajectory_and_id_column(tmp_path):
    d = tmp_path / "runs"
    d.mkdir()
    for k in range(3):
        _write_csv(d / f"traj{k}.csv", ["t", "q1", "q2"], [[0.1 * j, k + j, -j] for j in range(5)])
    s = load_snapshots(d)
    assert s.q.shape == (3, 5, 2) and abs(s.h - 0.1) < 1e-12
    assert s.q[2, 4].tolist() == [6.0, -4.0]
    # the same data in one file with an id column (rows of trajectories interleaved are fine)
    rows = [[k, 0.1 * j, k + j, -j] for j in range(5) for k in range(3)]
    one = load_snapshots(_write_csv(tmp_path / "all.csv", ["traj", "t", "q1", "q2"], rows))
    assert torch.equal(one.q, s.q)
    # a list of files, and npz with a flat id array
    assert torch.equal(load_snapshots(sorted(d.iterdir())).q, s.q)
    np.savez(tmp_path / "flat.npz", t=np.array([r[1] for r in rows]), q=np.array([r[2:] for r in rows], dtype=float),
             traj=np.array([r[0] for r in rows]))
    assert torch.equal(load_snapshots(tmp_path / "flat.npz").q, s.q)
    # one-dimensional data: a single column 'q'
    one_d = load_snapshots(_write_csv(tmp_path / "x.csv", ["time", "q"], [[0.0, 1.0], [0.5, 2.0], [1.0, 3.0]]))
    assert one_d.q.shape == (1, 3, 1) and one_d.h == 0.5


def test_csv_errors_name_file_row_and_problem(tmp_path):
    good = [[0.0, 1.0], [0.1, 1.1], [0.2, 1.2], [0.3, 1.3]]
    cases = [
        (["t", "q0"], good[:2] + [[0.25, 1.2]] + good[3:], r"line 4: time step .* differs from the uniform step"),
        (["t", "q0"], good[:2] + [[0.2, "nan"]] + good[3:], r"line 4, column 'q0': the value is nan \(not finite\)"),
        (["t", "q0"], good[:2] + [[0.2, "1.2x"]] + good[3:], r"line 4, column 'q0': cannot read '1.2x' as a number"),
        (["t", "q0"], good[:2] + [[0.2]] + good[3:], r"line 4: expected 2 fields"),
        (["t", "q0"], [good[1], good[0]] + good[2:], r"line 3: time 0.0 does not increase"),
        (["time_s", "q0"], good, r"line 1: no time column"),
        (["t", "x"], good, r"line 1: no position columns"),
        (["t", "q0"], [], r"no data rows"),
        (["t", "q0"], good[:1], r"only 1 time row"),
    ]
    for i, (header, rows, match) in enumerate(cases):
        path = _write_csv(tmp_path / f"bad{i}.csv", header, rows)
        with pytest.raises(SnapshotError, match=match) as info:
            load_snapshots(path)
        assert str(path) in str(info.value)


def test_inconsistent_trajectories(tmp_path):
    d = tmp_path / "runs"
    d.mkdir()
    _write_csv(d / "a.csv", ["t", "q0"], [[0.1 * j, j] for j in range(5)])
    _write_csv(d / "b.csv", ["t", "q0"], [[0.1 * j, j] for j in range(4)])
    with pytest.raises(SnapshotError, match=r"b.csv: 4 time rows, but .*a.csv has 5"):
        load_snapshots(d)
    _write_csv(d / "b.csv", ["t", "q0"], [[0.2 * j, j] for j in range(5)])
    with pytest.raises(SnapshotError, match=r"b.csv: time step 0.2 differs from the step 0.1"):
        load_snapshots(d)
    _write_csv(d / "b.csv", ["t", "q0", "q1"], [[0.1 * j, j, j] for j in range(5)])
    with pytest.raises(SnapshotError, match=r"b.csv: 2 position coordinates, but .*a.csv has 1"):
        load_snapshots(d)


def test_npz_errors(tmp_path):
    np.savez(tmp_path / "a.npz", q=np.zeros((3, 1)))
    with pytest.raises(SnapshotError, match=r"a.npz: missing array 't'"):
        load_snapshots(tmp_path / "a.npz")
    np.savez(tmp_path / "b.npz", t=np.arange(4) * 0.1, q=np.zeros((2, 3, 1)))
    with pytest.raises(SnapshotError, match=r"b.npz: 't' has shape"):
        load_snapshots(tmp_path / "b.npz")
    q = np.zeros((2, 4, 1))
    q[1, 2, 0] = np.inf
    np.savez(tmp_path / "c.npz", t=np.arange(4) * 0.1, q=q)
    with pytest.raises(SnapshotError, match=r"c.npz, trajectory 1, row 2: position q0 is inf"):
        load_snapshots(tmp_path / "c.npz")
    with pytest.raises(SnapshotError, match="no such file"):
        load_snapshots(tmp_path / "missing.csv")
    (tmp_path / "d.txt").write_text("t,q\n")
    with pytest.raises(SnapshotError, match="unknown format"):
        load_snapshots(tmp_path / "d.txt")
    with pytest.raises(ValueError, match="time_tol"):
        load_snapshots(tmp_path / "a.npz", time_tol=-1)


def test_halton_points_fill_the_box():
    q0, v0 = data.halton_initial_conditions([(0, 1), (0, 2), (-1, 1), (5, 6)], 256, seed=0)
    x = torch.cat([q0, v0], -1)
    assert x.shape == (256, 4)
    lo, hi = torch.tensor([0.0, 0, -1, 5]), torch.tensor([1.0, 2, 1, 6])
    assert bool(((x >= lo) & (x <= hi)).all())
    # low discrepancy: every half of every coordinate gets about half the points
    mid = (lo + hi) / 2
    frac = (x < mid).double().mean(0)
    assert bool(((frac - 0.5).abs() < 0.03).all())
