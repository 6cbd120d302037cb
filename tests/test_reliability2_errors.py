"""Issue 24, class 7: internal errors do not leak where typed ones are documented.

Model files whose content does not fit the class (a missing key, a wrong shape, an unknown argument), even with
a valid checksum, are ``ModelFileError``; sweep specifications with overflowing values or absurdly deep nesting
are ``SpecError``; the series functions ``f(L, q, v, h)`` raise a ``BeaError`` naming the cause for an ``h`` whose
powers overflow, for float16/bfloat16 states and for a complex-valued ``L``. Each group covers the issue's cases
and others of the same class; hypothesis generates edits of model files, TOML values and step sizes."""

import io
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import bea
from learners import LNN, InverseModifiedLagrangianGP
from learners import saving
from learners.saving import ModelFileError
from pipelines.sweep.spec import SpecError, load

H = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------------- model files
def _resave(payload, path):
    """Write ``payload`` with a recomputed checksum: only the content checks can catch what it holds."""
    payload["sha256"] = saving.digest(payload)
    buf = io.BytesIO()
    torch.save(payload, buf)
    path.write_bytes(buf.getvalue())
    return path


def _payload(path):
    return torch.load(path, weights_only=True)


@pytest.mark.parametrize("edit, cause", [
    (lambda p: p["state"].pop("chol"), "KeyError"),                       # the case
    (lambda p: p.pop("config"), "lacks config"),                          # the case
    (lambda p: p["state"]["functionals"].pop("atoms"), "KeyError"),       # a nested key
    (lambda p: p["state"].update(gp={"bogus": torch.zeros(1)}), "gp"),    # gpytorch's load_state_dict: RuntimeError
    (lambda p: p["config"].update(colour="red"), "TypeError"),            # an argument the class does not take
    (lambda p: p["state"].update(n="two"), "TypeError"),                  # a wrong type
])
def test_gp_file_that_does_not_fit_is_a_model_file_error(gp_file, tmp_path, edit, cause):
    payload = _payload(gp_file)
    edit(payload)
    with pytest.raises(ModelFileError, match=cause):
        InverseModifiedLagrangianGP.load(_resave(payload, tmp_path / "bad.pt"))


@pytest.mark.parametrize("edit, cause", [
    (lambda p: p["state"].pop("state_dict"), "KeyError"),
    (lambda p: p["state"]["state_dict"].update({"mlp.linears.0.weight": torch.zeros(3, 3, dtype=torch.float64)}),
     "RuntimeError"),                                                    # a wrong shape
    (lambda p: p["config"].pop("n"), "TypeError"),                       # a required argument missing
    (lambda p: p["config"].update(activation="nope"), "ValueError"),     # the constructor refuses a value
])
def test_network_file_that_does_not_fit_is_a_model_file_error(tmp_path, edit, cause):
    path = LNN(2, 8, seed=1).save(tmp_path / "lnn.pt")
    payload = _payload(path)
    edit(payload)
    with pytest.raises(ModelFileError, match=cause):
        LNN.load(_resave(payload, tmp_path / "bad.pt"))


_junk = st.one_of(st.none(), st.booleans(), st.integers(-3, 10 ** 6), st.floats(allow_nan=True), st.text(max_size=5),
                  st.lists(st.integers(0, 3), max_size=3), st.just(torch.zeros(2, 2, dtype=torch.float64)))


@settings(max_examples=40, **H)
@given(data=st.data())
def test_any_edit_of_a_model_file_loads_or_is_a_model_file_error(tmp_path_factory, data):
    """Replace or delete one entry anywhere in the payload (checksum recomputed): ModelFileError or a model."""
    path = LNN(1, 4, seed=0).save(tmp_path_factory.mktemp("m") / "m.pt")
    payload = _payload(path)
    node = payload
    while True:
        keys = sorted(node)
        key = data.draw(st.sampled_from(keys))
        if isinstance(node[key], dict) and node[key] and data.draw(st.booleans()):
            node = node[key]
            continue
        break
    if data.draw(st.booleans()):
        del node[key]
    else:
        node[key] = data.draw(_junk)
    try:
        LNN.load(_resave(payload, path))
    except ModelFileError:
        pass


# ---------------------------------------------------------------------------------------------- sweep specs
BASE = {"kind": "convergence", "defaults": {"scheme": "midpoint", "order": 0, "system": "pendulum"}}


def _spec(defaults=None, grid=None):
    return {**BASE, "defaults": {**BASE["defaults"], **(defaults or {})}, "grid": grid or {"h": [0.1]}}


@pytest.mark.parametrize("spec", [
    _spec({"T": 1e308}, {"h": [1e-10]}),                           # the case: T/h overflows in round()
    _spec({"T": 1e300, "experiment": "exact"}, {"h": [1e-300]}),
    _spec({"T": 1.7e308}, {"h": [0.5]}),                           # finite quotient, but T is absurd: still typed
])
def test_overflowing_sweep_values_are_spec_errors(spec):
    with pytest.raises(SpecError):
        load(spec)


def _nested(depth, leaf=1):
    v = leaf
    for _ in range(depth):
        v = [v]
    return v


@pytest.mark.parametrize("text", [
    "order = " + "[" * 3000 + "]" * 3000,                # the case: deep array in TOML
    "order = " + "{a=" * 3000 + "1" + "}" * 3000,        # deep inline tables
])
def test_deeply_nested_toml_is_a_spec_error(tmp_path, text):
    path = tmp_path / "deep.toml"
    path.write_text('kind = "convergence"\n[grid]\nh = [0.1]\n[defaults]\n' + text + "\n")
    with pytest.raises(SpecError, match="nested too deeply"):
        load(path)


def test_deeply_nested_dict_spec_is_a_spec_error():
    with pytest.raises(SpecError, match="nested too deeply"):
        load(_spec(grid={"h": [0.1], "order": [_nested(5000)]}))


def _containers(inner):
    return st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3))


_toml_values = st.recursive(
    st.one_of(st.integers(-10 ** 30, 10 ** 30), st.floats(), st.text(max_size=8), st.booleans()), _containers,
    max_leaves=12)


@settings(max_examples=80, **H)
@given(key=st.sampled_from(["T", "h", "order", "scheme", "system", "experiment", "q0"]), value=_toml_values,
       in_grid=st.booleans())
def test_any_parameter_value_gives_a_spec_or_a_spec_error(key, value, in_grid):
    spec = _spec(grid={key: [value]} if in_grid else None, defaults=None if in_grid else {key: value})
    if in_grid and key != "h":
        spec["defaults"]["h"] = 0.1
    if in_grid and key == "h":
        spec["grid"] = {"h": [value]}
    try:
        load(spec)
    except SpecError:
        pass


# ---------------------------------------------------------------------------------------------- f(L, q, v, h)
def _L(q, v):
    return 0.5 * (v ** 2).sum(-1) - (1 - torch.cos(q)).sum(-1)


@pytest.fixture(scope="module")
def functions():
    """The dimension-free function (every n) and the generated one for n = 2 (the two code paths)."""
    return [(bea.compile_torch("modified_lagrangian", "midpoint", 2), None),
            (bea.compile_torch("modified_lagrangian", "midpoint", 2, n=2), 2)]


def _states(n, dtype=torch.float64):
    return torch.full((3, n), 0.3, dtype=dtype), torch.full((3, n), -0.2, dtype=dtype)


@pytest.mark.parametrize("h, match", [
    (1e300, "too large"), (10 ** 400, "finite real number"),   # the cases
    (-1e300, "too large"), (1e155, "too large"),               # h^2 = 1e310 overflows too
    (Fraction(10 ** 400, 3), "finite real number"), (np.float64("inf"), "finite real number"),
])
def test_huge_step_is_a_bea_error_naming_h(functions, h, match):
    for f, n in functions:
        for dim in ([n] if n else [1, 3]):
            q, v = _states(dim)
            with pytest.raises(bea.BeaValueError, match=match):
                f(_L, q, v, h)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_half_precision_states_are_refused_at_every_n(functions, dtype, n):
    for f, dim in functions:
        if dim is not None and dim != n:
            continue
        q, v = _states(n, dtype)
        with pytest.raises(bea.BeaTypeError, match="convert them with q.double"):
            f(_L, q, v, 0.1)


@pytest.mark.parametrize("make", [
    lambda L: (lambda q, v: L(q, v) * (1 + 1j)),                       # the case
    lambda L: (lambda q, v: torch.complex(L(q, v), torch.zeros_like(L(q, v)))),
    lambda L: (lambda q, v: L(q, v).to(torch.complex64)),
])
def test_complex_lagrangian_is_a_bea_error(functions, make):
    for f, n in functions:
        q, v = _states(n or 2)
        with pytest.raises(bea.BeaTypeError, match="must return real values"):
            f(make(_L), q, v, 0.1)


def test_ordinary_steps_still_work(functions):
    """The checks do not get in the way: f32 states and moderate h give finite numbers equal (f64) across paths."""
    (free, _), (gen, _) = functions
    q, v = _states(2)
    a, b = free(_L, q, v, 0.1), gen(_L, q, v, 0.1)
    assert torch.allclose(a, b, rtol=1e-13, atol=0)  # the same series by two routes: rounding only
    assert torch.isfinite(free(_L, q.float(), v.float(), 0.1)).all()
    assert torch.isfinite(gen(_L, q, v, 1e100)).all()  # h^2 = 1e200 is representable: a (huge) number, no error


@settings(max_examples=60, **H)
@given(h=st.one_of(st.floats(), st.integers(-10 ** 400, 10 ** 400), st.fractions()))
def test_any_real_step_gives_numbers_or_a_bea_error(functions, h):
    for f, n in functions:
        q, v = _states(n or 2)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                out = f(_L, q, v, h)
            except bea.BeaError:
                continue
        assert out.shape == (3,)
        assert math.isfinite(float(h)) and not torch.isnan(out).any()
