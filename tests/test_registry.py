"""Schemes and sweep kinds registered by name (issue 29): in code (bea.register_scheme, pipelines.sweep.register)
and by an installed package's entry points (groups bea.schemes, bea.sweep_kinds), found lazily.

The third-party scheme is the average of the midpoint and trapezoidal rules: consistent and symmetric, and
different from both at h^2, so a name that silently resolved to a built-in would be caught."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import bea
from bea.cli import main
from bea.schemes import SCHEMES
from integrators import VariationalIntegrator
from pipelines.sweep import Kind, Param, TaskOutput, kind_names, register
from pipelines.sweep.kinds import KINDS
from learners import LNN, InverseModifiedLagrangianGP
from pipelines.sweep.spec import SpecError, load, parse


def mixed(L, a, b, h):
    v = (b - a) / h
    return h / 2 * L((a + b) / 2, v) + h / 4 * (L(a, v) + L(b, v))


MIXED = bea.CustomScheme(mixed, name="third-party-mixed", symmetric=True)


@pytest.fixture
def registered():
    bea.register_scheme("third-party-mixed", MIXED)
    yield "Third-Party-Mixed"  # looked up ignoring case and hyphens
    SCHEMES.entries.pop("third_party_mixed")


def test_registered_scheme_in_derive(registered):
    by_name = bea.modified_lagrangian(registered, 2, n=1, cache=False)
    by_object = bea.modified_lagrangian(MIXED, 2, n=1, cache=False)
    midpoint = bea.modified_lagrangian("midpoint", 2, n=1, cache=False)
    assert by_name.expr == by_object.expr
    assert by_name.expr != midpoint.expr  # the name found this scheme, not a built-in
    assert "third_party_mixed" in bea.available_schemes()


def test_registered_scheme_in_integrator(registered):
    L = lambda q, v: 0.5 * (v ** 2).sum(-1) + torch.cos(q).sum(-1)  # noqa: E731  (a pendulum)
    q0 = torch.tensor([[1.0], [0.3]], dtype=torch.float64)
    v0 = torch.tensor([[0.2], [-0.5]], dtype=torch.float64)
    by_name = VariationalIntegrator(L, 0.1, registered).solve(q0, v0, 20)
    by_object = VariationalIntegrator(L, 0.1, MIXED).solve(q0, v0, 20)
    midpoint = VariationalIntegrator(L, 0.1, "midpoint").solve(q0, v0, 20)
    assert torch.equal(by_name.q, by_object.q)  # the same scheme object: bit-identical
    # the two schemes differ at O(h^3) per step: about 1e-4 after 20 steps, far above Newton's 1e-12
    assert (by_name.q - midpoint.q).abs().max() > 1e-6


def test_registered_scheme_in_cli(registered, capsys):
    assert main(["derive", "--scheme", registered, "--order", "2", "--dim", "1", "--no-cache"]) == 0
    out = capsys.readouterr().out
    assert out.strip() == str(bea.modified_lagrangian(MIXED, 2, n=1, cache=False)).strip()
    assert main(["derive", "--scheme", "midpoint", "--order", "2", "--dim", "1", "--no-cache"]) == 0
    assert capsys.readouterr().out != out


def test_registered_scheme_in_sweep_spec_and_learners(registered, tmp_path):
    path = tmp_path / "spec.toml"
    path.write_text(f'kind = "convergence"\n[grid]\nscheme = ["{registered}"]\nsystem = ["pendulum"]\nh = [0.25]\n')
    spec = load(path)
    assert [t.params["scheme"] for t in spec.tasks] == [registered]
    assert InverseModifiedLagrangianGP(0.1, registered).scheme is MIXED
    assert LNN(1, width=4, scheme=registered).scheme is MIXED


def test_duplicate_and_bad_registrations_are_typed(registered):
    other = bea.CustomScheme(mixed, name="another")
    with pytest.raises(bea.DuplicateNameError):
        bea.register_scheme("third_party_mixed", other)
    bea.register_scheme("third-party-mixed", MIXED)  # the same object again: harmless
    with pytest.raises(bea.DuplicateNameError):
        bea.register_scheme("Midpoint", other)  # built-ins cannot be replaced
    with pytest.raises(bea.BeaTypeError):
        bea.register_scheme("not-a-scheme", 3.0)
    with pytest.raises(bea.BeaTypeError):
        bea.register_scheme("", other)
    bea.register_scheme("third_party_mixed", other, replace=True)
    assert bea.get_scheme(registered) is other


def _square(p, seed):
    return TaskOutput({"y": float(p["x"]) ** 2})


def test_sweep_kind_registered_and_duplicate(tmp_path):
    kind = register(Kind("test_square", lambda: {"x": Param(float)}, _square))
    try:
        (tmp_path / "square.toml").write_text('kind = "test_square"\n[grid]\nx = [1.0, 2.0]\n')
        spec = load(tmp_path / "square.toml")
        assert [kind.run(t.params, 0).metrics["y"] for t in spec.tasks] == [1.0, 4.0]
        with pytest.raises(bea.DuplicateNameError):
            register(Kind("test_square", lambda: {}, _square))
        assert register(kind) is kind
    finally:
        KINDS.pop("test_square")
    with pytest.raises(SpecError):
        parse({"kind": "test_square", "grid": {"x": [1.0]}})


PLUGIN = '''
    import bea
    from pipelines.sweep import Kind, Param, TaskOutput

    def _mixed(L, a, b, h):
        v = (b - a) / h
        return h / 2 * L((a + b) / 2, v) + h / 4 * (L(a, v) + L(b, v))

    SCHEME = bea.CustomScheme(_mixed, name="ep-mixed", symmetric=True)
    KIND = Kind("ep_cube", lambda: {"x": Param(float)}, lambda p, seed: TaskOutput({"y": p["x"] ** 3}))
'''


@pytest.fixture
def fake_distribution(tmp_path, monkeypatch):
    """An installed package seen by importlib.metadata: a dist-info directory with entry points, on sys.path."""
    (tmp_path / "bea_fake_plugin.py").write_text(textwrap.dedent(PLUGIN))
    info = tmp_path / "bea_fake_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: bea-fake-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[bea.schemes]\nep-mixed = bea_fake_plugin:SCHEME\nep_broken = bea_fake_missing:X\n\n"
                                           "[bea.sweep_kinds]\nep_cube = bea_fake_plugin:KIND\n")
    monkeypatch.syspath_prepend(str(tmp_path))  # also invalidates the import caches
    yield
    SCHEMES.entries.pop("ep_mixed", None)
    KINDS.pop("ep_cube", None)
    sys.modules.pop("bea_fake_plugin", None)


def test_entry_points_discovered_lazily(fake_distribution):
    assert "ep_mixed" in bea.available_schemes() and "ep_cube" in kind_names()
    assert "bea_fake_plugin" not in sys.modules  # names are listed without importing the plug-in
    sch = bea.get_scheme("EP-Mixed")
    assert sch.name == "ep-mixed" and "bea_fake_plugin" in sys.modules
    by_name = bea.modified_lagrangian("ep_mixed", 2, n=1, cache=False)
    assert by_name.expr == bea.modified_lagrangian(MIXED, 2, n=1, cache=False).expr
    spec = parse({"kind": "ep_cube", "grid": {"x": [2.0]}})
    assert spec.kind_obj.run(spec.tasks[0].params, 0).metrics["y"] == 8.0
    with pytest.raises(bea.PluginLoadError) as err:
        bea.get_scheme("ep_broken")
    assert isinstance(err.value.__cause__, ImportError)
    # a name taken in code wins over an entry point: registering the entry point's name is a duplicate
    with pytest.raises(bea.DuplicateNameError):
        bea.register_scheme("ep_mixed", MIXED)


def test_entry_point_scheme_in_the_command_line(fake_distribution, tmp_path):
    """A new process (the command line) finds the installed package's scheme by name: no registration in code."""
    root = str(Path(__file__).resolve().parent.parent)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), root]), OMP_NUM_THREADS="1")
    r = subprocess.run([sys.executable, "-m", "bea", "derive", "--scheme", "ep-mixed", "--order", "2", "--dim", "1",
                        "--no-cache"], capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr
    want = str(bea.modified_lagrangian(bea.CustomScheme(mixed, name="ep-mixed", symmetric=True), 2, n=1, cache=False))
    assert r.stdout.strip() == want.strip()
