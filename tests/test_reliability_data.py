"""Reliability of snapshot files: validation before writing, atomic writes (also under a killed process),
loaders that either return exactly what was saved or raise SnapshotError naming the file.

Issue 12, items 7, 8 and 12 (data parts)."""

import os

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import integrators
from bea.files import atomic_savefig, atomic_write, atomic_write_text
from integrators.data import SnapshotError, load_snapshots, save_snapshots

SMALL = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


# ---------------------------------------------------------------------------------------------- shapes and columns
def test_npz_with_an_empty_dimension_is_an_error(tmp_path):
    for q in (np.zeros((3, 0)), np.zeros((0,)), np.zeros((2, 3, 0)), np.zeros((0, 3, 1))):
        f = tmp_path / "a.npz"
        np.savez(f, t=np.arange(3.0), q=q)
        with pytest.raises(SnapshotError, match="a.npz"):
            load_snapshots(f)


def test_npz_with_a_scalar_time_is_an_error(tmp_path):
    f = tmp_path / "a.npz"
    np.savez(f, t=np.float64(0.0), q=np.zeros((3, 1)))
    with pytest.raises(SnapshotError, match="'t' must have shape"):
        load_snapshots(f)


@pytest.mark.parametrize("header,missing", [("t,q0,q2", "q1"), ("t,q1,q3,q4", "q2"), ("t,q2,q3", "q1"), ("t,q0,q5", "q1, q2, q3, q4")])
def test_csv_position_columns_must_be_consecutive(tmp_path, header, missing):
    f = tmp_path / "a.csv"
    k = header.count(",")
    f.write_text(header + "\n" + "\n".join(",".join([str(j)] + ["0.5"] * k) for j in range(3)) + "\n")
    with pytest.raises(SnapshotError, match=f"skip {missing}"):
        load_snapshots(f)


def test_csv_numbered_from_one_still_loads(tmp_path):
    f = tmp_path / "a.csv"
    f.write_text("t,q1,q2\n0,1,2\n1,3,4\n2,5,6\n")
    assert load_snapshots(f).q.tolist() == [[[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]]


# ---------------------------------------------------------------------------------------------- encodings, directories
def test_encodings_and_binary_files_name_the_file(tmp_path):
    text = "t,q\n0,1.5\n1,2.5\n"
    cases = {"latin1.csv": "t,q,note\n0,1.5,é\n1,2.5,à\n".encode("latin-1"),
             "utf16.csv": text.encode("utf-16"),
             "utf16le.csv": text.encode("utf-16-le"),
             "binary.csv": bytes(range(256)) * 4}
    for name, raw in cases.items():
        f = tmp_path / name
        f.write_bytes(raw)
        with pytest.raises(SnapshotError, match=name + ".*UTF-8"):
            load_snapshots(f)


def test_utf8_bom_is_accepted(tmp_path):
    f = tmp_path / "bom.csv"
    f.write_bytes(b"\xef\xbb\xbf" + b"t,q\n0,1.5\n1,2.5\n")
    s = load_snapshots(f)
    assert s.q.tolist() == [[[1.5], [2.5]]] and s.h == 1.0


def test_directories_are_named(tmp_path):
    d = tmp_path / "looks_like.csv"
    d.mkdir()
    with pytest.raises(SnapshotError, match="looks_like.csv: is a directory"):
        load_snapshots([d])
    with pytest.raises(SnapshotError, match="looks_like.csv: the directory contains no"):
        load_snapshots(d)
    save_snapshots(d / "one.csv", torch.zeros(1, 3, 1) + 0.5, 0.1)
    (d / "sub.csv").mkdir()  # a directory with a data suffix inside the directory is skipped
    assert load_snapshots(d).q.shape == (1, 3, 1)
    with pytest.raises(TypeError, match="path"):
        load_snapshots(3.5)


# ---------------------------------------------------------------------------------------------- validation before writing
@pytest.mark.parametrize("suffix", [".csv", ".npz"])
def test_save_validates_before_writing(tmp_path, suffix):
    f = tmp_path / f"data{suffix}"
    good = torch.arange(6.0).reshape(1, 3, 2)
    save_snapshots(f, good, 0.1)
    before = f.read_bytes()
    bad_q = good.clone()
    bad_q[0, 1, 1] = float("nan")
    cases = [
        (dict(q=bad_q, h=0.1), SnapshotError, "non-finite.*trajectory 0, time row 1, coordinate 1"),
        (dict(q=good, h=0.1, t0=float("nan")), SnapshotError, "t0 must be a finite"),
        (dict(q=good, h=0.1, t0=float("inf")), SnapshotError, "t0 must be a finite"),
        (dict(q=good, h=0.1, t0="0"), TypeError, "t0 must be a real number.*str"),
        (dict(q=good, h=0.1, t0=True), TypeError, "t0 must be a real number"),
        (dict(q=good, h=0.1, t0=1e20), SnapshotError, "uniform grid"),
        (dict(q=good, h="0.1"), TypeError, "h must be"),
        (dict(q=good, h=0.0), ValueError, "h must be"),
        (dict(q=good[:, :1], h=0.1), SnapshotError, "T >= 2"),
        (dict(q=good[..., :0], h=0.1), SnapshotError, "n >= 1"),
        (dict(q=good[0], h=0.1), SnapshotError, r"\(n_traj, T, n\)"),
    ]
    for kwargs, err, match in cases:
        with pytest.raises(err, match=match):
            save_snapshots(f, **kwargs)
        assert f.read_bytes() == before  # nothing written
    assert sorted(p.name for p in tmp_path.iterdir()) == [f.name]  # and no temporary file left
    with pytest.raises(SnapshotError, match="unknown format"):
        save_snapshots(tmp_path / "data.txt", good, 0.1)


# ---------------------------------------------------------------------------------------------- round trips (property)
finite = st.floats(min_value=-1e300, max_value=1e300, allow_nan=False, allow_infinity=False, allow_subnormal=True)


@st.composite
def snapshot_data(draw):
    n_traj, T, n = draw(st.integers(1, 3)), draw(st.integers(2, 5)), draw(st.integers(1, 3))
    vals = draw(st.lists(finite, min_size=n_traj * T * n, max_size=n_traj * T * n))
    q = torch.tensor(vals, dtype=torch.float64).reshape(n_traj, T, n)
    h = draw(st.floats(min_value=1e-3, max_value=1e3))
    t0 = draw(st.floats(min_value=-1e3, max_value=1e3))
    return q, h, t0


@SMALL
@given(data=snapshot_data(), suffix=st.sampled_from([".csv", ".npz"]))
def test_round_trip_is_exact(tmp_path, data, suffix):
    q, h, t0 = data
    f = tmp_path / f"rt{suffix}"
    save_snapshots(f, q, h, t0)
    s = load_snapshots(f)
    assert torch.equal(s.q, q)  # bit for bit (repr in CSV, float64 in npz)
    assert s.t0.tolist() == [t0] * q.shape[0]
    assert abs(s.h - h) <= 1e-9 * h


def _check_loaded_or_documented_error(path):
    """The contract: Snapshots that satisfy the documented invariants, or SnapshotError naming the file."""
    try:
        s = load_snapshots(path)
    except SnapshotError as err:
        assert str(path) in str(err)
        return None
    assert s.q.dim() == 3 and s.q.shape[1] >= 2 and s.q.shape[2] >= 1 and s.q.dtype == torch.float64
    assert bool(torch.isfinite(s.q).all()) and s.h > 0 and s.t0.shape == (s.q.shape[0],)
    return s


@SMALL
@given(data=snapshot_data(), edits=st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(["del", "ins", "dup", "cut"]),
                                                     st.sampled_from(list(",\n.-e0x ;\"\xe9\x00qt"))), min_size=1, max_size=4))
def test_mutated_csv_loads_valid_data_or_raises_snapshot_error(tmp_path, data, edits):
    q, h, t0 = data
    f = tmp_path / "m.csv"
    save_snapshots(f, q, h, t0)
    text = f.read_text()
    for pos, op, ch in edits:
        i = pos % (len(text) + 1)
        if op == "del":
            text = text[:i] + text[i + 1:]
        elif op == "ins":
            text = text[:i] + ch + text[i:]
        elif op == "dup":
            text = text[:i] + text[i:i + 12] + text[i:]
        else:
            text = text[:i]
    f.write_bytes(text.encode("utf-8", "surrogatepass"))
    _check_loaded_or_documented_error(f)


arrays = st.one_of(
    st.builds(lambda shape, fill: np.full(shape, fill), st.lists(st.integers(0, 3), min_size=0, max_size=4).map(tuple),
              st.sampled_from([0.0, 1.5, np.nan, np.inf, -2.0])),
    st.builds(lambda shape: np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape),
              st.lists(st.integers(0, 4), min_size=1, max_size=3).map(tuple)),
    st.builds(lambda shape: np.zeros(shape, dtype=np.bool_), st.lists(st.integers(0, 3), min_size=1, max_size=2).map(tuple)),
    st.builds(lambda shape: np.zeros(shape, dtype=np.complex128), st.lists(st.integers(1, 3), min_size=1, max_size=2).map(tuple)),
    st.builds(lambda n: np.array(["a"] * n), st.integers(0, 4)),
)


@SMALL
@given(t=st.one_of(st.none(), arrays), q=st.one_of(st.none(), arrays), traj=st.one_of(st.none(), arrays),
       extra=st.booleans())
def test_generated_npz_loads_valid_data_or_raises_snapshot_error(tmp_path, t, q, traj, extra):
    f = tmp_path / "g.npz"
    parts = {k: v for k, v in (("t", t), ("q", q), ("traj", traj)) if v is not None}
    if extra:
        parts["other"] = np.zeros(2)
    np.savez(f, **parts)
    _check_loaded_or_documented_error(f)


@SMALL
@given(raw=st.binary(min_size=0, max_size=300), suffix=st.sampled_from([".csv", ".npz"]))
def test_arbitrary_bytes_load_or_raise_snapshot_error(tmp_path, raw, suffix):
    f = tmp_path / f"b{suffix}"
    f.write_bytes(raw)
    _check_loaded_or_documented_error(f)


# ---------------------------------------------------------------------------------------------- atomic writes
def test_atomic_write_keeps_the_old_file_on_an_exception(tmp_path):
    f = tmp_path / "x.txt"
    atomic_write_text(f, "old")
    with pytest.raises(RuntimeError):
        with atomic_write(f) as fh:
            fh.write("new, partial")
            raise RuntimeError("disk full")
    assert f.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["x.txt"]
    with pytest.raises(IsADirectoryError):
        atomic_write_text(tmp_path, "x")


def test_atomic_savefig_writes_the_format_of_the_suffix(tmp_path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(1, 1))
    try:
        atomic_savefig(fig, tmp_path / "f.png", dpi=20)
        atomic_savefig(fig, tmp_path / "f.pdf")
    finally:
        plt.close(fig)
    assert (tmp_path / "f.png").read_bytes()[:4] == b"\x89PNG" and (tmp_path / "f.pdf").read_bytes()[:4] == b"%PDF"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f.pdf", "f.png"]


def _save_in_child_killed_at(path, where):
    """Fork; the child patches the write path so that it dies (os._exit(9)) at ``where`` inside save_snapshots.
    Forking (not a fresh interpreter) keeps this cheap; the child runs only small, single-threaded tensor
    operations and always leaves with os._exit, never returning into pytest."""
    pid = os.fork()
    if pid == 0:  # the child
        code = 1
        try:
            import bea.files as atomic
            from integrators import data

            q = torch.full((40, 50, 2), 7.25, dtype=torch.float64)  # the new content
            if where == "write":  # killed in the middle of writing
                real = data.csv.writer

                class Dying:
                    def __init__(self, f):
                        self.w, self.rows = real(f), 0

                    def writerow(self, row):
                        self.rows += 1
                        if self.rows == 500:
                            os._exit(9)
                        self.w.writerow(row)

                def dying_savez(fh, **arrays):
                    fh.write(b"PK\x03\x04 partial")
                    os._exit(9)

                data.csv.writer = Dying
                data.np.savez = dying_savez
            elif where == "fsync":  # all data written, killed before the rename
                atomic.os.fsync = lambda fd: os._exit(9)
            elif where == "replace":
                atomic.os.replace = lambda a, b: os._exit(9)
            data.save_snapshots(path, q, 0.1)
            code = 0
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork (POSIX)")
@pytest.mark.parametrize("suffix", [".csv", ".npz"])
def test_a_killed_writer_leaves_the_old_file_or_the_new_one(tmp_path, suffix):
    """A child process is killed (os._exit) inside save_snapshots: while writing rows, before fsync, before
    os.replace. Afterwards the file holds exactly the old data; with no kill, exactly the new data."""
    f = tmp_path / f"snap{suffix}"
    old = torch.arange(12.0, dtype=torch.float64).reshape(2, 3, 2)
    for where in ("write", "fsync", "replace", "none"):
        save_snapshots(f, old, 0.5, t0=1.0)
        code = _save_in_child_killed_at(f, where)
        s = load_snapshots(f)
        if where == "none":
            assert code == 0
            assert s.q.shape == (40, 50, 2) and bool((s.q == 7.25).all()) and s.h == pytest.approx(0.1, rel=1e-12)
        else:
            assert code == 9, where
            assert torch.equal(s.q, old) and s.h == 0.5 and s.t0.tolist() == [1.0, 1.0], where
        # a killed process may leave its temporary file; it is never read as data (suffix .tmp)
        assert all(p.suffix == ".tmp" for p in tmp_path.iterdir() if p != f)
        assert torch.equal(load_snapshots(tmp_path).q, s.q)


# ---------------------------------------------------------------------------------------------- reference_flow errors
def test_reference_flow_collision_keeps_its_own_error():
    """Kepler, radial fall from rest: collision at t = pi/(2 sqrt 2) ~ 1.11. Before the fix, a failure before the
    first output time raised AttributeError ('list' object has no attribute 'size')."""
    kepler = integrators.systems.kepler()
    q0, v0 = torch.tensor([[1.0, 0.0]]), torch.zeros(1, 2)
    with pytest.raises(integrators.ReferenceFlowError, match="before the first output time t=1.2.*collision"):
        integrators.reference_flow(kepler, q0, v0, torch.tensor([1.2, 3.0], dtype=torch.float64), t0=0.0)
    with pytest.raises(integrators.ReferenceFlowError, match="after the output time t=1.0"):
        integrators.reference_flow(kepler, q0, v0, torch.tensor([0.0, 1.0, 2.0], dtype=torch.float64))
    assert issubclass(integrators.ReferenceFlowError, ValueError)
