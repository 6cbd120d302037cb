"""Issue 24, class 10 (integrity of saved models and validated data) and class 6's model-file part (declared sizes).

* Model files carry a SHA-256 over their canonical content: any edit (a doubled ``unit``, one weight, one config
  value) is a ``ModelFileError`` at load.
* The sizes a model file declares are capped (``learners.saving.MAX_SIZE``, ``MAX_PARAMETERS``) and checked before
  anything is built: ``"hidden": 10**9`` is refused at once instead of allocating 16 GB.
* Stored coefficients are canonical ``"p/q"`` strings of at most ``bea.poly.MAX_DIGITS`` ASCII digits, in both cache
  formats; anything else is refused quickly (``"1e999999999"`` in microseconds, not 40 s).
* Snapshot CSVs accept plain ASCII decimals only (not ``1_000`` nor other scripts' digits).
* A world-writable cache folder gives a ``CacheInsecureWarning`` naming the fix."""

import io
import os
import time
import warnings
from fractions import Fraction

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bea
from bea import cache as bea_cache
from bea.poly import MAX_DIGITS, parse_rational
from integrators.data import SnapshotError, load_snapshots
from learners import LNN, InverseModifiedLagrangianGP, ModLaNet
from learners import saving
from learners.saving import MAX_PARAMETERS, MAX_SIZE, ModelFileError

H = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _write(payload, path, reseal):
    if reseal:
        payload["sha256"] = saving.digest(payload)
    buf = io.BytesIO()
    torch.save(payload, buf)
    path.write_bytes(buf.getvalue())
    return path


# ---------------------------------------------------------------------------------------------- checksums
@pytest.mark.parametrize("edit", [
    lambda p: p["state"].update(unit=2 * p["state"]["unit"]),                   # the case
    lambda p: p["state"]["beta"].mul_(1 + 2 ** -40),                            # one posterior weight, barely
    lambda p: p["state"]["info"].update(noise=p["state"]["info"]["noise"] * 3),
    lambda p: p["config"].update(h=0.25),                                       # the step the model was fitted for
    lambda p: p.update(version=p["version"]) or p["state"]["center"].add_(1e-12),
])
def test_any_edit_of_a_gp_file_is_detected(gp_file, tmp_path, edit):
    payload = torch.load(gp_file, weights_only=True)
    edit(payload)
    with pytest.raises(ModelFileError, match="checksum mismatch"):
        InverseModifiedLagrangianGP.load(_write(payload, tmp_path / "edited.pt", reseal=False))
    InverseModifiedLagrangianGP.load(gp_file)  # the untouched file still loads


@settings(max_examples=30, **H)
@given(data=st.data())
def test_flipping_any_byte_of_any_weight_is_detected(tmp_path_factory, data):
    model = ModLaNet.pendulum_chain(2, hidden=4, seed=0)
    path = model.save(tmp_path_factory.mktemp("m") / "m.pt")
    payload = torch.load(path, weights_only=True)
    sd = payload["state"]["state_dict"]
    name = data.draw(st.sampled_from(sorted(k for k, t in sd.items() if t.numel())))
    raw = sd[name].reshape(-1).view(torch.uint8)
    i = data.draw(st.integers(0, raw.numel() - 1))
    raw[i] ^= data.draw(st.integers(1, 255))
    with pytest.raises(ModelFileError, match="checksum mismatch"):
        ModLaNet.load(_write(payload, path, reseal=False))


def test_old_files_without_a_checksum_are_refused_with_the_fix(tmp_path):
    path = LNN(1, 4, seed=0).save(tmp_path / "m.pt")
    payload = torch.load(path, weights_only=True)
    del payload["sha256"]
    with pytest.raises(ModelFileError, match="lacks sha256"):
        LNN.load(_write(payload, path, reseal=False))
    payload["version"] = 1
    with pytest.raises(ModelFileError, match="save the model again"):
        LNN.load(_write(payload, path, reseal=False))


# ---------------------------------------------------------------------------------------------- declared sizes
@pytest.mark.parametrize("cls, make, edit", [
    (ModLaNet, lambda: ModLaNet.pendulum_chain(2, hidden=4, seed=0),          # the case: "hidden": 10**9
     lambda c: c.update(hidden=10 ** 9)),
    (ModLaNet, lambda: ModLaNet.pendulum_chain(2, hidden=4, seed=0),          # the same in a nested component
     lambda c: c["transforms"]["args"].update(hidden=10 ** 9)),
    (LNN, lambda: LNN(2, 8, seed=0), lambda c: c.update(width=10 ** 6)),
    (LNN, lambda: LNN(2, 8, seed=0), lambda c: c.update(n=-3)),
    (ModLaNet, lambda: ModLaNet.pendulum_chain(2, hidden=4, seed=0), lambda c: c.update(parents=list(range(10 ** 5)))),
    (ModLaNet, lambda: ModLaNet.pendulum_chain(2, hidden=4, seed=0),         # each size within MAX_SIZE, the product not
     lambda c: c["transforms"]["args"].update(hidden=MAX_SIZE, layers=MAX_SIZE)),
])
def test_declared_sizes_beyond_the_limits_are_refused_before_allocation(tmp_path, monkeypatch, cls, make, edit):
    path = make().save(tmp_path / "m.pt")
    payload = torch.load(path, weights_only=True)
    edit(payload["config"])
    _write(payload, path, reseal=True)
    # nothing may be constructed: a constructor call means the cap came too late
    monkeypatch.setattr(torch.nn.Linear, "__init__", lambda *a, **k: pytest.fail("a layer was built"))
    t0 = time.perf_counter()
    with pytest.raises(ModelFileError, match="MAX_SIZE|MAX_PARAMETERS|at most"):
        cls.load(path)
    assert time.perf_counter() - t0 < 2.0


def test_gp_state_sizes_are_capped(gp_file, tmp_path):
    payload = torch.load(gp_file, weights_only=True)
    payload["state"]["n"] = 10 ** 9  # the GP builds an ARD kernel of 2n lengthscales from it
    with pytest.raises(ModelFileError, match="n = 1000000000"):
        InverseModifiedLagrangianGP.load(_write(payload, tmp_path / "big.pt", reseal=True))


def test_the_limits_leave_room_for_the_projects_models():
    """The caps are far above what the project builds (LNN's width 600 by default, ModLaNet's hidden 50)."""
    assert MAX_SIZE >= 4096 and 600 ** 2 * 4 < MAX_PARAMETERS
    saving.check_sizes({"n": 6, "width": 600, "transforms": [{"args": {"hidden": 50, "layers": 2}}]})


# ---------------------------------------------------------------------------------------------- coefficients
@pytest.mark.parametrize("text", [
    "0.5", "1_0/24", "9" * (MAX_DIGITS + 1) + "/1", "1/" + "9" * (MAX_DIGITS + 1),       # the cases
    "1e999999999", "2/4", "01/2", "-0/1", "0/5", "+1/2", "1/24\n", " 1/24", "1/0", "-1/-2", "\uff11/24", "\u0661/2", "1",
], ids=lambda t: repr(t)[:24])
def test_non_canonical_coefficients_are_refused_quickly(text):
    t0 = time.perf_counter()
    with pytest.raises(ValueError):
        parse_rational(text)
    assert time.perf_counter() - t0 < 0.01


@settings(max_examples=300, deadline=None)
@given(p=st.integers(-10 ** 50, 10 ** 50), q=st.integers(1, 10 ** 50))
def test_canonical_coefficients_round_trip(p, q):
    f = Fraction(p, q)
    assert Fraction(str(parse_rational(f"{f.numerator}/{f.denominator}"))) == f


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="0123456789-/+_.eE \n\uff11", max_size=14))
def test_any_string_is_a_canonical_rational_or_refused(text):
    try:
        r = Fraction(str(parse_rational(text)))
    except ValueError:
        return
    assert text == f"{r.numerator}/{r.denominator}"


@pytest.mark.parametrize("bad", ["0.5", "1_0/24", "9" * (MAX_DIGITS + 1) + "/1", "1e999999999"],
                         ids=["decimal", "underscore", "4001-digits", "exponent"])
def test_authenticated_dimension_free_entry_with_a_bad_coefficient_is_rederived(tmp_path, monkeypatch, bad):
    monkeypatch.setenv("BEA_CACHE_DIR", str(tmp_path))
    fresh = bea.modified_lagrangian("midpoint", 2, cache=False).raw
    key = bea.api._cache_key("modified_lagrangian", bea.get_scheme("midpoint"), 2, "any")
    bea.modified_lagrangian("midpoint", 2)  # stored
    body = bea_cache.load(key, part="trees")
    body["trees"]["coefficients"]["2"][0][1] = bad
    bea_cache.save(key, body, part="trees")  # signed with the user's key: only the content check can catch it
    t0 = time.perf_counter()
    with pytest.warns(bea_cache.CacheWarning, match="invalid content"):
        again = bea.modified_lagrangian("midpoint", 2).raw
    assert time.perf_counter() - t0 < 30  # a fresh derivation (about a second), not a 40 s parse
    assert again.coeffs == fresh.coeffs


# ---------------------------------------------------------------------------------------------- snapshot CSVs
def _csv(tmp_path, value, column="q0"):
    rows = {"t": ["0.0", "0.5", "1.0"], "q0": ["0.1", "0.2", "0.3"]}
    rows[column][1] = value
    path = tmp_path / "s.csv"
    path.write_text("t,q0\n" + "\n".join(f"{a},{b}" for a, b in zip(rows["t"], rows["q0"])) + "\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("value", ["1_000", "\uff11.5", "\u0661", "0x1p-2", "1,5", "\u00bd", "1e", "--1"])
@pytest.mark.parametrize("column", ["q0", "t"])
def test_csv_numbers_are_plain_ascii_decimals(tmp_path, value, column):
    if value == "1,5":  # a comma splits the row: a field-count error, also a SnapshotError
        match = "expected 2 fields"
    else:
        match = f"line 3, column '{column}': cannot read"
    with pytest.raises(SnapshotError, match=match):
        load_snapshots(_csv(tmp_path, value, column))


@settings(max_examples=150, **H)
@given(x=st.floats(-1e6, 1e6, allow_nan=False), fmt=st.sampled_from(["{!r}", "{:.3e}", "{:.6f}", "{:+g}", "{:E}"]))
def test_plain_decimals_are_read_exactly_as_float_reads_them(tmp_path_factory, x, fmt):
    text = fmt.format(x)
    s = load_snapshots(_csv(tmp_path_factory.mktemp("c"), text))
    assert float(s.q[0, 1, 0]) == float(text)


# ---------------------------------------------------------------------------------------------- cache folder mode
@pytest.mark.parametrize("mode, warns", [(0o777, True), (0o703, True), (0o775, False), (0o700, False)])
def test_world_writable_cache_folder_warns_with_the_fix(tmp_path, monkeypatch, mode, warns):
    folder = tmp_path / "cache"
    folder.mkdir()
    os.chmod(folder, mode)
    monkeypatch.setenv("BEA_CACHE_DIR", str(folder))
    monkeypatch.setattr(bea_cache, "_insecure", set())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        f = bea.compile_torch("modified_lagrangian", "midpoint", 2)
    insecure = [w for w in caught if issubclass(w.category, bea_cache.CacheInsecureWarning)]
    if warns:
        assert len(insecure) == 1 and f"chmod o-w {folder}" in str(insecure[0].message)
    else:
        assert insecure == []
    q = torch.full((2, 1), 0.3, dtype=torch.float64)
    assert torch.isfinite(f(lambda q, v: (v ** 2).sum(-1) / 2 + torch.cos(q).sum(-1), q, q, 0.1)).all()
