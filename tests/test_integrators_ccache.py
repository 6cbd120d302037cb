"""Compiled libraries shared across processes (integrators.ccache): reused only after their HMAC verifies."""

import ctypes
import os
import subprocess
import sys
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
        if len(calls) == 1:  # the first load is the verified copy from the cache; the rebuilt one loads
            raise OSError("cannot map the library (test)")
        return real(path, *args, **kwargs)

    monkeypatch.setattr(ctypes, "CDLL", refuses)
    with pytest.warns(CacheWarning, match="could not be loaded"):
        again = ccompile.load_library(source)
    assert again.compile_seconds > 0 and _value(again) == 19.0
