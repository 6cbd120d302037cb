"""One vocabulary across the public API (issue 29): the truncation order is ``order``, the number of
degrees of freedom ``n``, the initial velocity ``qdot0``, the step ``h``, and ``h`` comes before ``scheme``.

The public API is every name in the ``__all__`` of a public module of the four packages (functions,
classes' ``__init__`` and public methods). Exceptions are listed below, each with its reason; old names
keep working for one release with a DeprecationWarning (:func:`bea.deprecation.renamed`). Siblings (the two GP
models; every function with a progress bar) have the same defaults (:data:`SIBLING_DEFAULTS`).
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings

import pytest
import torch

from bea.deprecation import renamed
from integrators import systems
from learners import rollout_variational
from learners.neural.training import _h_before_scheme

PACKAGES = ["bea", "integrators", "learners", "pipelines"]
#: canonical name -> other spellings of the same quantity
SYNONYMS = {"order": {"N", "truncation_order", "trunc_order"}, "n": {"dim", "ndim", "dof", "n_dof", "n_dim", "dimension"},
            "qdot0": {"v0", "dq0", "qd0", "qdot_0", "velocity0"}, "h": {"dt", "step", "step_size", "time_step"}}

#: (qualified name, parameter or "scheme before h") -> reason
ALLOWED = {
    ("learners.shadow.functionals.Functionals.__init__", "dim"): "the dimension D of the atoms' input x = (q, v), 2n",
    ("learners.shadow.element_structure.body_groups", "dim"): ("the space dimension of one body (2 in the plane), "
                                                             "not n = count * dim, the system's"),
    ("integrators.newton.ConvergenceError.__init__", "step"): "the index of the time step that failed, not a step size",
    ("learners.neural.rollout.rollout_ode", "v0"): ("the second initial state is a velocity, or for an HNN a momentum "
                                                    "p0 (canonical rollouts): qdot0 would misname the second"),
}


def _public_callables():
    seen = {}
    for pkg in PACKAGES:
        root = importlib.import_module(pkg)
        names = [pkg] + [i.name for i in pkgutil.walk_packages(root.__path__, pkg + ".")
                         if not i.name.endswith("__main__") and not any(p.startswith("_") for p in i.name.split("."))]
        for name in names:
            mod = importlib.import_module(name)
            for attr in getattr(mod, "__all__", []):
                obj = getattr(mod, attr, None)
                if getattr(obj, "__module__", "").split(".")[0] not in PACKAGES:
                    continue
                if inspect.isfunction(obj):
                    seen.setdefault(f"{obj.__module__}.{obj.__qualname__}", obj)
                elif inspect.isclass(obj):
                    for meth, f in vars(obj).items():
                        if inspect.isfunction(f) and (not meth.startswith("_") or meth == "__init__"):
                            seen.setdefault(f"{obj.__module__}.{obj.__qualname__}.{meth}", f)
    return seen


def violations(callables):
    out = []
    for qual, f in sorted(callables.items()):
        params = list(inspect.signature(f).parameters)
        out += [(qual, p) for p in params for canon, other in SYNONYMS.items() if p in other]
        if "h" in params and "scheme" in params and params.index("scheme") < params.index("h"):
            out.append((qual, "scheme before h"))
    return out


def test_one_vocabulary_in_every_public_signature():
    callables = _public_callables()
    assert len(callables) > 300, len(callables)  # the walk sees the public API (about 385 callables today)
    found = violations(callables)
    new = [v for v in found if v not in ALLOWED]
    assert new == [], "use order, n, qdot0, h (h before scheme), or add an exception with its reason:\n" + \
        "\n".join(f"{q}: {p}" for q, p in new)
    stale = [k for k in ALLOWED if k not in found]
    assert stale == [], f"fixed since: remove from ALLOWED: {stale}"


def test_the_signature_check_can_fail():
    def f(system, scheme, N, h, v0):  # every mistake at once
        pass

    assert violations({"m.f": f}) == [("m.f", "N"), ("m.f", "v0"), ("m.f", "scheme before h")]


def test_old_keywords_still_work_with_a_warning():
    pendulum = systems.pendulum()
    q0, v0 = torch.tensor([[0.3]], dtype=torch.float64), torch.tensor([[0.1]], dtype=torch.float64)
    new = rollout_variational(pendulum, q0, qdot0=v0, h=0.1, steps=3, velocities=False)
    with pytest.warns(DeprecationWarning, match=r"rollout_variational\(v0=...\) is deprecated.*use qdot0="):
        old = rollout_variational(pendulum, q0, v0=v0, h=0.1, steps=3, velocities=False)
    assert torch.equal(old.q, new.q)

    @renamed(N="order")
    def g(order):
        return order

    with pytest.raises(TypeError, match="got N= .deprecated. and order=; pass order= only"):
        g(N=2, order=2)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert g(order=4) == 4 and list(inspect.signature(g).parameters) == ["order"]


def test_train_takes_h_before_scheme_and_the_old_order_warns():
    assert _h_before_scheme(0.1, "trapezoidal") == (0.1, "trapezoidal")
    with pytest.warns(DeprecationWarning, match="h comes before scheme"):
        assert _h_before_scheme("trapezoidal", 0.1) == (0.1, "trapezoidal")  # train(m, S, "del", "trapezoidal", 0.1)
    with pytest.warns(DeprecationWarning, match="h comes before scheme"):
        assert _h_before_scheme("trapezoidal", "midpoint") == (None, "trapezoidal")  # only the scheme, positionally


def test_the_recovered_lagrangian_no_longer_assumes_a_step():
    """recovered_lagrangian and its siblings took h = 0.1 silently (wrong for a model trained at another step);
    omitted, it now warns (and still is 0.1 for one release); given, nothing is said."""
    from learners import recovered_energy, recovered_lagrangian
    from learners.neural.prediction import inverse_lagrangian

    def model(q, v):
        return 0.5 * (v**2 - q**2).sum(-1)

    for fn in (recovered_lagrangian, inverse_lagrangian, recovered_energy):
        with pytest.warns(DeprecationWarning, match=fn.__name__ + r"\(\) without h is deprecated.*pass h="):
            fn(model, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert recovered_lagrangian(model, 0, 0.5) is model  # order 0: the model itself


def test_one_name_one_idea_and_the_old_names_still_work():
    """bea.modified_lagrangian is the series; the torch callable of a model is integrators.modified.recovered_lagrangian.
    del_residuals and discrete_momenta are values; the functionals are del_residual_functionals and
    discrete_momentum_functionals. The old names keep working for one release, with a warning naming the new one."""
    import learners
    from integrators import modified
    from learners.shadow import functionals

    for module, old, new in ((modified, "modified_lagrangian", "recovered_lagrangian"),
                             (functionals, "del_residuals", "del_residual_functionals"),
                             (functionals, "discrete_momenta", "discrete_momentum_functionals"),
                             (learners, "del_residuals", "del_residual_functionals")):
        with pytest.warns(DeprecationWarning, match=rf"{module.__name__}\.{old} is deprecated.*use {module.__name__}\.{new}"):
            assert getattr(module, old) is getattr(module, new)
        assert old not in module.__all__ and new in module.__all__
    with pytest.raises(AttributeError):
        modified.no_such_name  # noqa: B018 - the module's __getattr__ still refuses unknown names


def _sibling_defaults():
    """parameter -> (the one default, the public callables that take it): siblings are called the same way."""
    import pipelines.sweep
    from integrators import VariationalIntegrator, modified
    from learners import InverseModifiedLagrangianGP as LSI
    from learners import LagrangianGP as LGP
    from learners import rollout_ode
    from learners.neural.options import TrainOptions
    from learners.shadow.hyperparameters import FunctionalLagrangianModel

    gp_methods = [getattr(cls, m) for cls in (LSI, LGP) for m in ("recovered_lagrangian", "energy", "energies",
                                                                   "velocities", "predict")]
    return {
        "order": (2, gp_methods),
        "on_extrapolation": ("warn", [LSI.predict, LGP.predict]),
        "return_std": (False, [LSI.energy, LGP.energy, LSI.energies, LSI.predict]),
        "reference": (None, [LSI.energy, LGP.energy, LSI.energies, LGP.energies]),
        "reference_index": (None, [LSI.energies, LGP.energies]),
        "progress": (None, [VariationalIntegrator.__init__, VariationalIntegrator.solve,
                            VariationalIntegrator.solve_from_positions, modified.predict, modified.velocities,
                            rollout_variational, rollout_ode, TrainOptions, FunctionalLagrangianModel.__init__,
                            pipelines.sweep.run]),
    }


def sibling_mismatches(spec):
    """``f(param=got), expected default`` for each callable of ``spec`` (as :func:`_sibling_defaults`) that differs."""
    wrong = []
    for param, (default, fns) in spec.items():
        for f in fns:
            sig = inspect.signature(f).parameters
            got = sig[param].default if param in sig else "(missing)"
            if got != default:
                wrong.append(f"{f.__qualname__}({param}={got!r}), expected {default!r}")
    return wrong


def test_siblings_have_the_same_defaults():
    spec = _sibling_defaults()
    assert sum(len(fns) for _, fns in spec.values()) >= 30
    assert sibling_mismatches(spec) == []


def test_the_sibling_check_can_fail():
    def a(q, order=2, progress=None):
        pass

    def b(q, order=0):
        pass

    assert sibling_mismatches({"order": (2, [a, b]), "progress": (None, [a, b])}) == [
        "test_the_sibling_check_can_fail.<locals>.b(order=0), expected 2",
        "test_the_sibling_check_can_fail.<locals>.b(progress='(missing)'), expected None"]


def test_n_is_the_number_of_degrees_of_freedom_and_dim_still_works(tmp_path, monkeypatch, capsys):
    """bea's dim= is n= (issue 29): the old keyword, Series.dim and the CLI's --dim keep working for one release
    with a warning; the cache key text is unchanged (entries written before are served, none is misread)."""
    import bea
    from bea import api
    from bea.cli import main

    monkeypatch.setenv("BEA_CACHE_DIR", str(tmp_path))
    new = bea.modified_lagrangian("midpoint", 2, n=1)
    with pytest.warns(DeprecationWarning, match=r"modified_lagrangian\(dim=...\) is deprecated.*use n="):
        old = bea.modified_lagrangian("midpoint", 2, dim=1)
    assert old.coefficients == new.coefficients and new.n == 1
    with pytest.warns(DeprecationWarning, match="use Series.n"):
        assert new.dim == 1
    with pytest.raises(TypeError, match="pass n= only"):
        bea.compile_torch("modified_lagrangian", "midpoint", 2, n=1, dim=1)
    key = api._cache_key("modified_lagrangian", bea.get_scheme("midpoint"), 2, 1)
    assert key["dim"] == 1 and "n" not in key  # the stored entries' key text
    assert main(["derive", "--order", "2", "--n", "1"]) == 0
    by_n = capsys.readouterr()
    assert main(["derive", "--order", "2", "--dim", "1"]) == 0
    by_dim = capsys.readouterr()
    assert by_dim.out == by_n.out and "--dim is deprecated" in by_dim.err and "use --n" in by_dim.err
    assert main(["derive", "--order", "2", "--n", "1", "--dim", "1"]) == 2
    assert "pass --n only" in capsys.readouterr().err


def test_the_compiled_building_blocks_take_h_before_scheme_and_the_old_order_warns():
    """scheme_points, CompiledStepper, series_c_lagrangian and torch_series put h before scheme now; a positional call
    in the old order is recognised by the scheme in the old place, and gives the same result with a warning."""
    import numpy as np

    import bea
    from integrators.compiled import scheme_points
    from integrators.convergence import torch_series

    trap = bea.get_scheme("trapezoidal")
    new = scheme_points(0.5, trap, 1)
    with pytest.warns(DeprecationWarning, match=r"scheme_points\(scheme, n, h\) is deprecated.*scheme_points\(h, scheme, n\)"):
        old = scheme_points(trap, 1, 0.5)
    assert np.array_equal(new, old)
    pendulum = systems.pendulum()
    q, v = torch.tensor([[0.3]], dtype=torch.float64), torch.tensor([[0.2]], dtype=torch.float64)
    L_new = torch_series(pendulum, 2, "modified_lagrangian", 0.1, "midpoint")
    with pytest.warns(DeprecationWarning, match="h comes before scheme now"):
        L_old = torch_series(pendulum, "midpoint", 2, "modified_lagrangian", 0.1)
    assert torch.equal(L_new(q, v), L_old(q, v))
