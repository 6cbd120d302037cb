"""Reliability of bea's cache (issue 12, items 1, 2, 10 and the fault test): keys from what determines
the result, nothing executed unless authenticated, invalid content regenerated, unusable directories
tolerated, atomic writes under concurrency and under a kill."""

import errno
import hashlib
import json
import multiprocessing
import os
import threading
import warnings
from fractions import Fraction

import pytest
import torch

import bea
import bea.api
from bea import cache as bea_cache
from bea.schemes import CustomScheme, GeneralisedMidpoint, exact


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    d = tmp_path / "cache"
    monkeypatch.setenv("BEA_CACHE_DIR", str(d))
    monkeypatch.setattr(bea_cache, "_warned", set(), raising=False)  # "warn once" starts afresh in each test
    return d


def _pendulum(q, v):
    return 0.5 * (v**2).sum(-1) + torch.cos(q).sum(-1)


def _states(n=1, batch=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(batch, n, generator=g, dtype=torch.float64) * 2 - 1, torch.rand(batch, n, generator=g, dtype=torch.float64) * 2 - 1


def make(c):
    """The issue's example: a scheme whose constant is captured by a closure."""
    return CustomScheme(lambda L, a, b, h: h * L((1 - c) * a + c * b, (b - a) / h), name="gm")


# ------------------------------------------------------------------ item 1: keys


def test_closure_constants_are_in_the_key(cache_dir):
    s3 = bea.modified_lagrangian(make(exact("0.3")), 2)  # derived and cached first
    s7 = bea.modified_lagrangian(make(exact("0.7")), 2)
    ref7 = bea.modified_lagrangian(GeneralisedMidpoint("0.7"), 2, cache=False)
    ref3 = bea.modified_lagrangian(GeneralisedMidpoint("0.3"), 2, cache=False)
    assert s7.coefficients == ref7.coefficients and s3.coefficients == ref3.coefficients
    assert s3.coefficients[1] != s7.coefficients[1]  # the h^1 term is (alpha - 1/2)-dependent

    q, v = _states()
    f3 = bea.compile_torch("modified_lagrangian", make(exact("0.3")), 2, 1)
    f7 = bea.compile_torch("modified_lagrangian", make(exact("0.7")), 2, 1)
    g7 = bea.compile_torch("modified_lagrangian", GeneralisedMidpoint("0.7"), 2, 1, cache=False)
    torch.testing.assert_close(f7(_pendulum, q, v, 0.1), g7(_pendulum, q, v, 0.1), rtol=1e-13, atol=1e-13)
    # the h^1 terms differ in sign: (alpha - 1/2) = -0.2 and +0.2 times the same non-zero expression
    assert (f3(_pendulum, q, v, 0.1) - f7(_pendulum, q, v, 0.1)).abs().max() > 1e-3


def test_same_discrete_lagrangian_same_key_different_ones_differ():
    mid = bea.Midpoint().cache_key()
    assert GeneralisedMidpoint(Fraction(1, 2)).cache_key() == mid
    assert CustomScheme(lambda L, a, b, h: h * L(a / 2 + b / 2, (b - a) / h), name="mine").cache_key() == mid
    assert CustomScheme(lambda L, a, b, h: h * L(0.5 * a + 0.5 * b, b / h - a / h), name="x").cache_key() == mid
    keys = {GeneralisedMidpoint(exact(x)).cache_key() for x in ("0.3", "0.7", "1/3", "0.3333333333333333")}
    assert len(keys) == 4  # 1/3 and its 16-digit decimal round to the same float: still different schemes
    assert bea.Trapezoidal().cache_key() != mid
    # a constant read from mutable state at call time is in the key too
    box = {"c": exact("0.3")}
    s = CustomScheme(lambda L, a, b, h: h * L((1 - box["c"]) * a + box["c"] * b, (b - a) / h), name="box")
    k1 = s.cache_key()
    box["c"] = exact("0.7")
    assert s.cache_key() != k1 and s.cache_key() == make(exact("0.7")).cache_key()
    # a scheme that cannot run on symbols is not cached rather than cached under a guess
    assert CustomScheme(lambda L, a, b, h: h * L(a.mean(), (b - a) / h), name="t").cache_key() is None


# ------------------------------------------------------------------ item 2: nothing executed unless authenticated


def _source_entry(cache_dir):
    (path,) = cache_dir.glob("*.source.bea")
    head, payload = path.read_bytes().split(b"\n", 1)
    return path, head, json.loads(payload)


def test_tampered_source_with_recomputed_checksum_is_not_executed(cache_dir, tmp_path):
    q, v = _states()
    ref = bea.compile_torch("modified_lagrangian", "midpoint", 2, 1)(_pendulum, q, v, 0.1)
    path, head, record = _source_entry(cache_dir)
    marker = tmp_path / "executed"
    evil = f"open({str(marker)!r}, 'w').close()\n"
    record["body"]["source"] = record["body"]["source"].replace("import torch\n", "import torch\n" + evil, 1)
    payload = json.dumps(record, sort_keys=True, separators=(",", ":")).encode()
    forged = [
        b"bea-cache-v2 " + hashlib.sha256(payload).hexdigest().encode(),  # what an attacker can compute
        head,  # the old, valid header
        b"bea-cache-v2 " + bea_cache._mac(b"x" * 32, payload).encode(),  # an HMAC under another key
    ]
    for header in forged:
        path.write_bytes(header + b"\n" + payload)
        with pytest.warns(bea_cache.CacheWarning, match="authentication failed"):
            f = bea.compile_torch("modified_lagrangian", "midpoint", 2, 1)
        assert not marker.exists()
        torch.testing.assert_close(f(_pendulum, q, v, 0.1), ref, rtol=0, atol=0)
        assert evil.encode() not in path.read_bytes()  # regenerated and overwritten


def test_entry_moved_to_another_key_is_refused(cache_dir):
    bea.compile_torch("modified_lagrangian", GeneralisedMidpoint("0.3"), 2, 1)
    bea.compile_torch("modified_lagrangian", GeneralisedMidpoint("0.7"), 2, 1)
    k3 = bea.api._cache_key("modified_lagrangian", GeneralisedMidpoint("0.3"), 2, 1)
    k7 = bea.api._cache_key("modified_lagrangian", GeneralisedMidpoint("0.7"), 2, 1)
    p3, p7 = bea_cache.entry_path(k3, part="source"), bea_cache.entry_path(k7, part="source")
    p7.write_bytes(p3.read_bytes())  # validly signed, but for alpha = 0.3
    with pytest.warns(bea_cache.CacheWarning, match="key or format mismatch"):
        f7 = bea.compile_torch("modified_lagrangian", GeneralisedMidpoint("0.7"), 2, 1)
    q, v = _states()
    g7 = bea.compile_torch("modified_lagrangian", GeneralisedMidpoint("0.7"), 2, 1, cache=False)
    torch.testing.assert_close(f7(_pendulum, q, v, 0.1), g7(_pendulum, q, v, 0.1), rtol=0, atol=0)


@pytest.mark.parametrize("bad", ["1/0", "1/-2", "x/3", "", "1e3/1"])
def test_invalid_coefficient_is_regenerated_even_if_authenticated(cache_dir, bad):
    fresh = bea.modified_lagrangian("midpoint", 2, n=1, cache=False)
    bea.modified_lagrangian("midpoint", 2, n=1)
    key = bea.api._cache_key("modified_lagrangian", bea.Midpoint(), 2, 1)
    body = bea_cache.load(key)
    body["raw"]["coefficients"]["2"]["poly"][0][1] = bad
    bea_cache.save(key, body)  # signed with the user's key: only the content check can catch it
    with pytest.warns(bea_cache.CacheWarning, match="invalid content"):
        again = bea.modified_lagrangian("midpoint", 2, n=1)
    assert again.coefficients == fresh.coefficients
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bea.modified_lagrangian("midpoint", 2, n=1).coefficients == fresh.coefficients  # overwritten


def test_key_file_is_private_and_insecure_ones_are_refused(cache_dir):
    bea.compile_torch("modified_lagrangian", "midpoint", 2, 1)
    key_file = cache_dir / bea_cache.KEY_FILE
    assert key_file.stat().st_mode & 0o777 == 0o600
    os.chmod(key_file, 0o644)  # readable by others: anyone could have forged entries
    with pytest.warns(bea_cache.CacheUnavailableWarning, match="accessible to other users"):
        f = bea.compile_torch("modified_lagrangian", "midpoint", 2, 1)
    q, v = _states()
    assert torch.isfinite(f(_pendulum, q, v, 0.1)).all()
    os.chmod(key_file, 0o600)
    monkey_dir = cache_dir.parent / "linked"
    monkey_dir.mkdir()
    (monkey_dir / bea_cache.KEY_FILE).symlink_to(key_file)
    with pytest.raises(bea_cache._Unusable, match="symbolic link"):
        bea_cache._secret(monkey_dir, create=False)


def test_cache_hit_does_not_derive(cache_dir, monkeypatch):
    bea.compile_torch("inverse_modified_lagrangian", "midpoint", 2, 2)

    def no(*a, **k):
        raise AssertionError("derived although cached")

    monkeypatch.setattr(bea.api, "derive_raw", no)
    monkeypatch.setattr(bea.series.Series, "to_torch", no)
    q, v = _states(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        f = bea.compile_torch("inverse_modified_lagrangian", "midpoint", 2, 2)
        bea.inverse_modified_lagrangian("midpoint", 2, n=2)
    assert torch.isfinite(f(_pendulum, q, v, 0.1)).all()


# ------------------------------------------------------------------ item 10: unusable directory, concurrency


def test_cache_dir_is_a_file(tmp_path, monkeypatch):
    monkeypatch.setattr(bea_cache, "_warned", set(), raising=False)
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    monkeypatch.setenv("BEA_CACHE_DIR", str(blocker))
    with pytest.warns(bea_cache.CacheUnavailableWarning, match="continuing without the on-disk cache") as rec:
        f = bea.compile_torch("modified_lagrangian", "midpoint", 2, 1)
        bea.modified_lagrangian("midpoint", 2)
    assert sum(issubclass(w.category, bea_cache.CacheUnavailableWarning) for w in rec) == 1  # once
    q, v = _states()
    g = bea.compile_torch("modified_lagrangian", "midpoint", 2, 1, cache=False)
    torch.testing.assert_close(f(_pendulum, q, v, 0.1), g(_pendulum, q, v, 0.1), rtol=0, atol=0)
    assert blocker.read_text() == "x"


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS, errno.EACCES])
def test_full_or_read_only_disk(cache_dir, monkeypatch, err):
    def failing_write(fh, data):
        fh.write(data[: len(data) // 3])
        raise OSError(err, os.strerror(err))

    monkeypatch.setattr(bea_cache, "_write_all", failing_write)
    with pytest.warns(bea_cache.CacheUnavailableWarning, match=os.strerror(err)) as rec:
        s = bea.inverse_modified_lagrangian("trapezoidal", 2)
        f = bea.compile_torch("inverse_modified_lagrangian", "trapezoidal", 2, 1)
    assert sum(issubclass(w.category, bea_cache.CacheUnavailableWarning) for w in rec) == 1
    assert s.coefficients == bea.inverse_modified_lagrangian("trapezoidal", 2, cache=False).coefficients
    q, v = _states()
    assert torch.isfinite(f(_pendulum, q, v, 0.1)).all()
    assert [p.name for p in cache_dir.iterdir()] == [bea_cache.KEY_FILE]  # no partial file, no temp file


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_directory_for_real(cache_dir):
    cache_dir.mkdir()
    os.chmod(cache_dir, 0o500)
    try:
        with pytest.warns(bea_cache.CacheUnavailableWarning):
            bea.modified_lagrangian("midpoint", 2)
    finally:
        os.chmod(cache_dir, 0o700)


ALPHAS = ["1/5", "2/5", "3/5"]


def _worker(job):
    """One process of the concurrency test: derive/compile every entry, the kinds interleaved differently
    per process; returns the scheme fingerprints it computed (to compare across hash seeds)."""
    directory, which = job
    os.environ["BEA_CACHE_DIR"] = directory
    import bea as b

    for i, a in enumerate(ALPHAS):
        s = b.GeneralisedMidpoint(a)
        if (i + which) % 2:
            b.compile_torch("inverse_modified_lagrangian", s, 2, 1)
        else:
            b.inverse_modified_lagrangian(s, 2)
    return [b.GeneralisedMidpoint(a).cache_key() for a in ALPHAS]


def _check_entries(directory):
    for a in ALPHAS:
        key = bea.api._cache_key("inverse_modified_lagrangian", GeneralisedMidpoint(a), 2, 1)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            raw = bea_cache.load(key, directory, validate=bea.api._decoder("inverse_modified_lagrangian", 2, 1))
            fn = bea_cache.load(key, directory, part="source", validate=bea.api._load_generated)
        assert raw is not None, f"coefficients of alpha={a} lost"
        if fn is not None:  # the source exists once any process compiled this entry
            q, v = _states()
            ref = bea.compile_torch("inverse_modified_lagrangian", GeneralisedMidpoint(a), 2, 1, cache=False)
            torch.testing.assert_close(fn(_pendulum, q, v, 0.1), ref(_pendulum, q, v, 0.1), rtol=0, atol=0)
    return [bea_cache.entry_path(bea.api._cache_key("inverse_modified_lagrangian", GeneralisedMidpoint(a), 2, 1), directory,
                                 part="source").exists() for a in ALPHAS]


def test_concurrent_threads_lose_nothing(cache_dir):
    errors = []

    def run(which):
        try:
            _worker((str(cache_dir), which))
        except Exception as err:  # noqa: BLE001
            errors.append(err)

    threads = [threading.Thread(target=run, args=(w,)) for w in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(_check_entries(cache_dir))  # every entry was compiled by one or two of the threads


def test_concurrent_processes_lose_nothing_and_agree_on_keys(cache_dir, monkeypatch):
    monkeypatch.setenv("PYTHONHASHSEED", "12345")  # the children hash strings differently from this process
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(2) as pool:
        keys = pool.map(_worker, [(str(cache_dir), w) for w in range(2)])
    assert all(_check_entries(cache_dir))
    here = [GeneralisedMidpoint(a).cache_key() for a in ALPHAS]
    assert keys == [here] * 2 and len(set(here)) == len(ALPHAS)
    assert not list(cache_dir.glob(".*.tmp"))


# ------------------------------------------------------------------ fault: killed in the middle of a write


def _killed_save(key, body, directory):
    pid = os.fork()
    if pid == 0:  # child: write half of the entry, then die without any cleanup
        def half_then_die(fh, data):
            fh.write(data[: len(data) // 2])
            fh.flush()
            os._exit(17)

        bea_cache._write_all = half_then_die
        bea_cache.save(key, body, directory)
        os._exit(0)  # pragma: no cover - not reached
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 17


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_killed_writer_leaves_old_entry_or_nothing(cache_dir):
    key = {"kind": "fault-test", "n": 1}
    _killed_save(key, {"value": "new"}, cache_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bea_cache.load(key, cache_dir) is None  # absent, not corrupt
    assert bea_cache.save(key, {"value": "old"}, cache_dir) is not None
    _killed_save(key, {"value": "new" * 10_000}, cache_dir)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bea_cache.load(key, cache_dir) == {"value": "old"}
    assert bea_cache.save(key, {"value": "new"}, cache_dir) is not None
    assert bea_cache.load(key, cache_dir) == {"value": "new"}
