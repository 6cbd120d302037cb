"""Paths and special files (issue 24, classes 4 and 5).

Class 4: a sweep's ``name`` becomes ``sweep-results/<name>`` only if it is a plain name. Class 5: every file read
on a user's behalf is opened by ``bea.reading.open_regular``: a FIFO, a device, a socket or a directory in its
place is refused at once with a typed error saying what it is, instead of blocking forever.
"""

import contextlib
import os
import shutil
import signal
import socket
import tempfile
import warnings
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

import bea
from bea import cache as bea_cache
from bea.errors import BeaError, NotRegularFileError
from bea.reading import open_regular, read_regular
from integrators.data import load_snapshots
from integrators.snapshot_loading import SnapshotError
from learners.saving import ModelFileError, read as read_model
from pipelines.sweep import SpecError, load
from pipelines.sweep.api import run
from pipelines.sweep.records import CorruptRecord, read_record
from pipelines.sweep.spec import Spec

GRID = '[grid]\nscheme = ["midpoint"]\nsystem = ["pendulum"]\nh = [0.5, 0.25]\n'


# ------------------------------------------------------------------ class 4: plain names only

@pytest.mark.parametrize("name", ["../../x", "/tmp/abs", "a/b", "a\\b", "..", ".", "", "x/../../y", "~root", "-rf", " x",
                                  "x\ny", "na\x00me", "caf\u00e9", "a..b", "x" * 101])
def test_spec_names_that_are_not_plain_are_refused(name):
    spec = {"kind": "convergence", "name": name, "grid": {"scheme": ["midpoint"], "system": ["pendulum"], "h": [0.5]}}
    with pytest.raises(SpecError) as info:
        load(spec)
    assert info.value.key == "name" and info.value.source == "<dict>" and "not a plain name" in str(info.value)


def test_a_file_name_that_is_not_plain_needs_an_explicit_name(tmp_path):
    path = tmp_path / "s.toml"
    path.write_text('kind = "convergence"\nname = "../../x"\n' + GRID)
    with pytest.raises(SpecError, match=r"s\.toml: name: '\.\./\.\./x' is not a plain name") as info:
        load(path)
    assert info.value.key == "name" and info.value.source == str(path)
    bad = tmp_path / "-rf.toml"
    bad.write_text('kind = "convergence"\n' + GRID)
    with pytest.raises(SpecError, match=r"-rf\.toml: name: the file's stem '-rf' is not a plain name") as info:
        load(bad)
    assert info.value.source == str(bad)
    bad.write_text('kind = "convergence"\nname = "ok-name_1.2"\n' + GRID)
    assert load(bad).name == "ok-name_1.2"


def test_a_hand_built_spec_cannot_escape_either(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    spec = load({"kind": "convergence", "grid": {"scheme": ["midpoint"], "system": ["pendulum"], "h": [0.5]}})
    evil = Spec(spec.kind, "../escaped", spec.tasks, spec.execution, spec.report, source="<dict>")
    with pytest.raises(SpecError, match="name: '../escaped' is not a plain name"):
        run(evil, serial=True, plots=False)
    assert not (tmp_path / "escaped").exists() and not (tmp_path.parent / "escaped").exists()


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=30))
def test_any_name_is_plain_or_refused(name):
    """Accepted names are one path component directly under sweep-results/."""
    spec = {"kind": "convergence", "name": name, "grid": {"scheme": ["midpoint"], "system": ["pendulum"], "h": [0.5]}}
    try:
        got = load(spec).name
    except SpecError as err:
        assert err.key == "name"
        return
    out = Path("sweep-results") / got
    assert out.parent == Path("sweep-results") and got not in (".", "..") and os.sep not in got and "/" not in got
    assert os.path.normpath(out) == str(out)


# ------------------------------------------------------------------ class 5: regular files only

@pytest.fixture
def deadline():
    """Fail instead of hanging if anything blocks (a FIFO open waits for a writer forever)."""

    def boom(*_):
        raise TimeoutError("blocked on a special file")

    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture
def short_dir():
    """A short directory: a UNIX socket's path is limited to about 100 characters."""
    d = Path(tempfile.mkdtemp(prefix="bea-sp-"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@contextlib.contextmanager
def special(path: Path, kind: str):
    """Put a special file of ``kind`` at ``path``."""
    sock = None
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        sock = socket.socket(socket.AF_UNIX)
        sock.bind(str(path))
    elif kind == "directory":
        path.mkdir()
    elif kind == "device":  # a character device that never ends, through a link (the link is followed)
        path.symlink_to("/dev/zero")
    elif kind == "link-to-fifo":
        os.mkfifo(path.with_name(path.name + ".fifo"))
        path.symlink_to(path.name + ".fifo")
    try:
        yield path
    finally:
        if sock is not None:
            sock.close()


KINDS = ["fifo", "socket", "directory", "device", "link-to-fifo"]
WORDS = {"fifo": "named pipe", "socket": "socket", "directory": "directory", "device": "character device",
         "link-to-fifo": "named pipe"}


@pytest.mark.parametrize("kind", KINDS)
def test_readers_refuse_special_files_at_once(short_dir, deadline, kind):
    word = WORDS[kind]
    with special(short_dir / "a.csv", kind) as p:
        # (a directory given alone is a folder of snapshot files; in a list it is refused with its own message)
        with pytest.raises(SnapshotError, match=f"a.csv: .*{word}"):
            load_snapshots(p) if kind != "directory" else load_snapshots([p])
    with special(short_dir / "b.npz", kind) as p:
        if kind != "directory":
            with pytest.raises(SnapshotError, match=f"b.npz: .*regular file.*{word}"):
                load_snapshots(p)
    with special(short_dir / "s.toml", kind) as p:
        with pytest.raises(SpecError, match=f"s.toml: file: .*regular file.*{word}"):
            load(p)
    with special(short_dir / "m.pt", kind) as p:
        with pytest.raises(ModelFileError, match=f"m.pt: a model file must be a regular file.*{word}"):
            read_model(p, object)
    with special(short_dir / "r.json", kind) as p:
        with pytest.raises(CorruptRecord, match=f"regular file.*{word}"):
            read_record(p)
    with special(short_dir / "x", kind) as p:
        with pytest.raises(NotRegularFileError, match=f"x: the file must be a regular file, but this is .*{word}") as info:
            read_regular(p)
        assert isinstance(info.value, BeaError) and isinstance(info.value, OSError)


@pytest.mark.parametrize("kind", ["fifo", "socket", "directory", "link-to-fifo"])
def test_cache_key_and_entries_that_are_special_files(short_dir, deadline, kind):
    key = {"kind": "test", "x": 1}
    entry = bea_cache.entry_path(key, short_dir)
    with special(entry, kind):
        with pytest.warns(bea_cache.CacheWarning, match=f"cache entry must be a regular file, but this is .*{WORDS[kind]}"):
            assert bea_cache.load(key, short_dir) is None
        if kind == "directory":  # cannot be replaced by a file: no cache for this entry, and a warning
            with pytest.warns(bea_cache.CacheUnavailableWarning, match="is a directory"):
                assert bea_cache.save(key, {"a": 1}, short_dir) is None
            entry.rmdir()
        assert bea_cache.save(key, {"a": 1}, short_dir) == entry  # a new entry replaces the special file
    assert bea_cache.load(key, short_dir) == {"a": 1}
    os.unlink(entry)
    other = short_dir / "other"
    other.mkdir()
    with special(other / bea_cache.KEY_FILE, kind):
        with pytest.raises(bea_cache._Unusable, match=f"not a regular file.*{WORDS[kind] if kind != 'link-to-fifo' else 'symbolic link'}"):
            bea_cache._secret(other, create=True)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            assert bea_cache.save(key, {"a": 1}, other) is None  # no cache, no hang, a warning
        assert any(issubclass(w.category, bea_cache.CacheUnavailableWarning) for w in seen)


def test_the_descriptor_decides_not_the_path(short_dir, deadline, monkeypatch):
    """A regular file swapped for a FIFO between the stat and the open: O_NONBLOCK returns at once and the
    descriptor's fstat refuses it."""
    p = short_dir / "f"
    p.write_bytes(b"x")
    real_open = os.open

    def swap(path, flags, *a):
        if str(path) == str(p):
            os.unlink(p)
            os.mkfifo(p)
        return real_open(path, flags, *a)

    monkeypatch.setattr(os, "open", swap)
    with pytest.raises(NotRegularFileError, match="named pipe"):
        open_regular(p)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.binary(max_size=2000))
def test_regular_files_read_back_exactly(short_dir, data):
    p = short_dir / "data.bin"
    p.write_bytes(data)
    assert read_regular(p) == data
    with open_regular(p) as fh:
        assert os.get_blocking(fh.fileno()) and fh.read() == data


def test_symbolic_links_are_refused_where_asked(short_dir):
    (short_dir / "t").write_bytes(b"k")
    (short_dir / "l").symlink_to("t")
    assert read_regular(short_dir / "l") == b"k"
    with pytest.raises(NotRegularFileError, match="symbolic link"):
        read_regular(short_dir / "l", follow_symlinks=False)
    with pytest.raises(FileNotFoundError):
        read_regular(short_dir / "missing")
    assert bea.NotRegularFileError is NotRegularFileError
