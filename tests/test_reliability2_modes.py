"""Issue 24, class 11: outputs follow the user's umask; only the cache key is private.

Before the fix every file written through ``bea.files.atomic_write`` kept the ``0600`` of its ``mkstemp`` temporary
file, so a colleague or a web server could not read ``results.json``, figures, sweep records, snapshots or model files.
Each writer is run under three umasks; the file must get ``0666 & ~umask``, as ``open()`` would give it."""

import contextlib
import json
import os
import stat

import pytest
import torch

import bea
from bea import cache as bea_cache
from bea import files
from integrators.data import save_snapshots
from learners import LNN

UMASKS = [0o022, 0o077, 0o002]


@contextlib.contextmanager
def _umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


def _figure(path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig = plt.figure(figsize=(1, 1))
    try:
        files.atomic_savefig(fig, path)
    finally:
        plt.close(fig)


def _record(path):
    from pipelines.sweep import records

    rec = {"task_id": "t1", "kind": "convergence", "params": {"h": 0.1}, "status": "ok", "metrics": {"error": 1e-3}}
    return records.write_record(path.parent, rec)


WRITERS = {
    "results.json": lambda p: files.atomic_write_text(p, json.dumps({"x": 1})),
    "figure.png": _figure,
    "record.json": _record,
    "snapshots.csv": lambda p: save_snapshots(p, torch.zeros(1, 3, 1, dtype=torch.float64), 0.5),
    "snapshots.npz": lambda p: save_snapshots(p, torch.zeros(1, 3, 1, dtype=torch.float64), 0.5),
    "model.pt": lambda p: LNN(1, 4, seed=0).save(p),
    "bytes.bin": lambda p: files.atomic_write_bytes(p, b"\x00\x01"),
}


@pytest.mark.parametrize("mask", UMASKS, ids=lambda m: f"umask{m:03o}")
@pytest.mark.parametrize("name", sorted(WRITERS))
def test_outputs_follow_the_umask(tmp_path, name, mask):
    with _umask(mask):
        written = WRITERS[name](tmp_path / name) or tmp_path / name
        assert _mode(written) == 0o666 & ~mask, (name, oct(_mode(written)))
        # overwriting keeps following the umask (the old file's mode does not leak into the new one)
        os.chmod(written, 0o600)
        WRITERS[name](tmp_path / name)
        assert _mode(written) == 0o666 & ~mask


def test_private_writes_and_the_cache_key_stay_0600(tmp_path, monkeypatch):
    with _umask(0o002):
        p = files.atomic_write_bytes(tmp_path / "secret", b"k", private=True)
        assert _mode(p) == 0o600
        folder = tmp_path / "cache"
        monkeypatch.setenv("BEA_CACHE_DIR", str(folder))
        bea.compile_torch("modified_lagrangian", "midpoint", 2)
        assert _mode(folder / bea_cache.KEY_FILE) == 0o600
        assert _mode(folder) == 0o700  # the folder itself is the user's
        entries = [f for f in folder.iterdir() if f.suffix == ".bea"]
        assert entries and all(_mode(f) == 0o664 for f in entries)  # authenticated data, not secrets


def test_reading_the_umask_does_not_change_it():
    """The umask is read from /proc (no set-and-restore window in which another thread would create files 0777)."""
    with _umask(0o027):
        assert files.umask() == 0o027
        assert files.umask() == 0o027
        assert os.umask(0o027) == 0o027


def test_atomic_write_is_the_only_writer():
    """One helper: no other module in the packages creates temporary files to rename over outputs."""
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    users = []
    for pkg in ("bea", "integrators", "learners", "pipelines"):
        for path in (root / pkg).rglob("*.py"):
            text = path.read_text()
            if "os.replace(" in text or "os.rename(" in text:
                users.append(path.relative_to(root).as_posix())
    assert users == ["bea/files.py"], users
