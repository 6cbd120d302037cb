"""Compiled libraries shared across processes (integrators.ccache): reused only after their HMAC verifies."""

import ctypes
import os
import subprocess
import sys
import time
import warnings

import pytest

from bea.cache import CacheWarning
from integrators import ccompile

SOURCE = "double bea_cache_probe(double x) { return 3.0 * x + %d.0; }\n"


def _fresh(monkeypatch, tmp_path, tag):
    """A cache directory of its own, an empty in-process LRU (as in a new process) and a source no one built."""
    monkeypatch.setenv("BEA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(ccompile, "_cache", type(ccompile._cache)())
    return SOURCE % tag


def _value(entry, x=2.0):
    fn = entry.lib.bea_cache_probe
    fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_double]
    return fn(x)


def _entry_file(tmp_path):
    files = [p for p in tmp_path.iterdir() if p.name.endswith(".clib.bea")]
    assert len(files) == 1, files
    return files[0]


def test_a_stored_library_is_loaded_without_compiling(monkeypatch, tmp_path):
    source = _fresh(monkeypatch, tmp_path, 11)
    first = ccompile.load_library(source)
    assert first.compile_seconds > 0 and _value(first) == 17.0
    ccompile._cache.clear()  # what a second process sees: nothing in memory, the entry on disk
    second = ccompile.load_library(source)
    assert second.compile_seconds == 0.0 and _value(second) == 17.0
    monkeypatch.setenv("BEA_C_CACHE", "0")  # off: compiles again, and nothing is read
    ccompile._cache.clear()
    assert ccompile.load_library(source).compile_seconds > 0


@pytest.mark.parametrize("how", ["library-bytes", "foreign-key"])
def test_a_tampered_library_is_rejected_and_rebuilt(monkeypatch, tmp_path, how):
    source = _fresh(monkeypatch, tmp_path, 12)
    ccompile.load_library(source)
    path = _entry_file(tmp_path)
    data = path.read_bytes()
    if how == "library-bytes":  # one character of the stored library changed: the HMAC no longer matches
        i = data.index(b'"lib":"') + 200
        data = data[:i] + (b"A" if data[i:i + 1] != b"A" else b"B") + data[i + 1:]
        path.write_bytes(data)
    else:  # a well-formed entry of the same library, written under another key (another directory's)
        other = tmp_path / "other"
        monkeypatch.setenv("BEA_CACHE_DIR", str(other))
        ccompile._cache.clear()
        ccompile.load_library(source)
        path.write_bytes(_entry_file(other).read_bytes())
        monkeypatch.setenv("BEA_CACHE_DIR", str(tmp_path))
    ccompile._cache.clear()
    with pytest.warns(CacheWarning, match="authentication failed"):
        rebuilt = ccompile.load_library(source)
    assert rebuilt.compile_seconds > 0 and _value(rebuilt) == 18.0
    ccompile._cache.clear()  # the rejected entry was overwritten by a verified one: loaded silently
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = ccompile.load_library(source)
    assert again.compile_seconds == 0.0 and _value(again) == 18.0


CHILD = """
import ctypes, time
t = time.perf_counter()
from integrators import ccompile
entry = ccompile.load_library({source!r})
fn = entry.lib.bea_cache_probe
fn.restype, fn.argtypes = ctypes.c_double, [ctypes.c_double]
print(entry.compile_seconds, time.perf_counter() - t, fn(2.0))
"""


@pytest.mark.slow
def test_a_second_process_loads_without_compiling(tmp_path):
    """Two real processes (about 5 s of imports each): the second takes the library from the disk cache."""
    source = SOURCE % 13
    env = {**os.environ, "BEA_CACHE_DIR": str(tmp_path), "BEA_C_CACHE": "1"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    runs = []
    for _ in range(2):
        out = subprocess.run([sys.executable, "-c", CHILD.format(source=source)], cwd=root, env=env, capture_output=True,
                             text=True, timeout=120, check=True).stdout.split()
        runs.append([float(x) for x in out])
    assert runs[0][0] > 0 and runs[1][0] == 0.0
    assert runs[0][2] == runs[1][2] == 19.0


def test_a_verified_library_that_cannot_be_loaded_is_rebuilt(monkeypatch, tmp_path):
    """An authentic entry this machine cannot load (a noexec or full temporary directory, another libc): one
    CacheWarning, then the library is compiled again, not a raw OSError from ctypes."""
    source = _fresh(monkeypatch, tmp_path, 13)
    ccompile.load_library(source)
    ccompile._cache.clear()
    real, calls = ctypes.CDLL, []

    def refuses(path, *args, **kwargs):
        calls.append(path)
        if len(calls) <= 2:  # the verified copies from the cache (looked up before and under the lock); the rebuilt loads
            raise OSError("cannot map the library (test)")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(ctypes, "CDLL", refuses)
    with pytest.warns(CacheWarning, match="could not be loaded"):
        again = ccompile.load_library(source)
    assert again.compile_seconds > 0 and _value(again) == 19.0


def _slow_compiler(tmp_path):
    """A compiler that records each run and takes a second longer: two builds of one library would overlap."""
    script = tmp_path / "slowcc"
    script.write_text(f"#!/bin/sh\necho run >> {tmp_path / 'runs'}\nsleep 1\nexec {ccompile.find_compiler()} \"$@\"\n")
    script.chmod(0o700)
    return str(script)


def _child(source, barrier, results):
    barrier.wait(timeout=60)
    entry = ccompile.load_library(source)
    results.put((entry.compile_seconds, _value(entry)))


def test_two_processes_that_miss_one_library_build_it_once(monkeypatch, tmp_path):
    """Forked processes (no imports to pay) start together: the one that waits for the other's lock loads its library."""
    import multiprocessing
    if ccompile.find_compiler() is None or not hasattr(os, "fork"):
        pytest.skip("needs a C compiler and fork")
    source = _fresh(monkeypatch, tmp_path, 14)
    monkeypatch.setenv("CC", _slow_compiler(tmp_path))
    ctx = multiprocessing.get_context("fork")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=_child, args=(source, barrier, results)) for _ in range(2)]
    try:
        for p in procs:
            p.start()
        out = sorted(results.get(timeout=120) for _ in procs)
    finally:  # a child that failed leaves the other at the barrier or in the queue: neither outlives the test
        for p in procs:
            p.join(timeout=10)
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)
    assert (tmp_path / "runs").read_text().split() == ["run"]  # without the lock: two runs
    assert out[0][0] == 0.0 and out[1][0] > 1.0 and out[0][1] == out[1][1] == 20.0


def test_a_held_lock_delays_a_build_only_until_the_wait_runs_out(monkeypatch, tmp_path):
    """A holder that never finishes (here: this very process) cannot deadlock a build: after LOCK_WAIT_SECONDS it
    builds unlocked. The spy on the lock's acquire sees the holder take it and the build give up waiting."""
    from integrators import ccache
    source = _fresh(monkeypatch, tmp_path, 15)
    monkeypatch.setattr(ccache, "LOCK_WAIT_SECONDS", 0.5)
    taken, real = [], ccache._acquire
    monkeypatch.setattr(ccache, "_acquire", lambda fd, wait: taken.append((real(fd, wait), wait)) or taken[-1][0])
    with ccache.building(ccompile.digest_of(source, ccompile.CFLAGS), ccompile.find_compiler()):
        assert taken == [(True, 0.5)]
        t0 = time.perf_counter()
        entry = ccompile.load_library(source)
        assert taken == [(True, 0.5), (False, 0.5)]  # the build was refused the lock for the whole wait
        assert time.perf_counter() - t0 >= 0.5 and entry.compile_seconds >= 0.5 and _value(entry) == 21.0
    ccompile._cache.clear()
    assert ccompile.load_library(source).compile_seconds == 0.0  # stored all the same


def test_a_library_stored_before_the_lock_is_taken_is_not_built_again(monkeypatch, tmp_path):
    """The look under the lock is taken always, not only after a wait: another process may have stored the library
    between this one's first look and its lock."""
    from integrators import ccache
    source = _fresh(monkeypatch, tmp_path, 17)
    assert ccompile.load_library(source).compile_seconds > 0
    ccompile._cache.clear()
    calls, real = [], ccache.fetch
    monkeypatch.setattr(ccache, "fetch", lambda digest, cc: calls.append(digest) or (real(digest, cc) if len(calls) > 1
                                                                                       else None))
    again = ccompile.load_library(source)
    assert len(calls) == 2 and again.compile_seconds == 0.0 and _value(again) == 23.0


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie waiting for its reaper counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_a_compiler_timeout_kills_the_compilers_children_and_is_not_retried(monkeypatch, tmp_path):
    """A compiler that runs past COMPILE_SECONDS is stopped with the processes it started (as cc1 would be: killing
    the driver alone left them running), and vectorise=True does not run it again without the vector flags."""
    if not hasattr(os, "killpg") or not os.path.isdir("/proc/self"):
        pytest.skip("needs process groups and /proc")
    source = _fresh(monkeypatch, tmp_path, 16)
    script, pids = tmp_path / "hangcc", tmp_path / "pids"
    script.write_text(f"#!/bin/sh\nsh -c 'echo $$ >> {pids}; exec sleep 30' &\nsleep 30\n")
    script.chmod(0o700)
    monkeypatch.setenv("CC", str(script))
    monkeypatch.setattr(ccompile, "COMPILE_SECONDS", 1.0)
    with pytest.raises(ccompile.CompileError, match="C compiler"):
        ccompile.load_library(source, vectorise=True)
    started = [int(p) for p in pids.read_text().split()]
    try:
        deadline = time.monotonic() + 5.0  # the orphan is reaped by init, not by this process
        while any(map(_alive, started)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert started and len(started) == 1 and not any(map(_alive, started))  # one run, its child gone
    finally:
        for pid in started:
            try:
                os.kill(pid, 9)
            except OSError:
                pass


def _lock_of(source):
    from integrators import ccache
    return ccache._lock_fd(ccompile.digest_of(source, ccompile.CFLAGS), ccompile.find_compiler())


def test_no_lock_where_the_cache_cannot_store(monkeypatch, tmp_path):
    """A cache whose key cannot be read (here a directory in its place) stores nothing: its builds are not serialised,
    and no lock file is made."""
    source = _fresh(monkeypatch, tmp_path, 18)
    (tmp_path / "secret.key").mkdir()
    assert _lock_of(source) is None and not list(tmp_path.glob("*.lock"))
    os.rmdir(tmp_path / "secret.key")
    fd = _lock_of(source)  # the same directory with a usable key is locked
    assert fd is not None and len(list(tmp_path.glob("*.lock"))) == 1
    os.close(fd)


def test_no_lock_on_a_lock_file_that_is_not_this_users_regular_file(monkeypatch, tmp_path):
    """Another user's lock file (the owner faked by the effective uid) or a FIFO in its place: built unlocked."""
    source = _fresh(monkeypatch, tmp_path, 19)
    fd = _lock_of(source)
    path = next(tmp_path.glob("*.lock"))
    os.close(fd)
    with monkeypatch.context() as m:
        m.setattr(ccompile.ccache.cache, "_secret", lambda directory, create: b"k" * 32)  # the key is not the subject
        m.setattr(os, "geteuid", lambda uid=os.geteuid(): uid + 1)
        assert _lock_of(source) is None
    os.close(_lock_of(source))  # this user's regular file is locked
    path.unlink()
    os.mkfifo(path)
    assert _lock_of(source) is None
