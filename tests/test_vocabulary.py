"""One vocabulary across the public API (issue 29): the truncation order is ``order``, the number of
degrees of freedom ``n``, the initial velocity ``qdot0``, the step ``h``, and ``h`` comes before ``scheme``.

The public API is every name in the ``__all__`` of a public module of the four packages (functions,
classes' ``__init__`` and public methods). Exceptions are listed below, each with its reason; old names
keep working for one release with a DeprecationWarning (:func:`bea.deprecation.renamed`).
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
SYNONYMS = {"order": {"N", "truncation_order"}, "n": {"dim", "ndim", "dof", "n_dof"},
            "qdot0": {"v0", "dq0", "qd0"}, "h": {"dt", "step", "step_size"}}

_DIM_PENDING = ("bea names the number of degrees of freedom dim= in every README, docs and notebook example; the rename "
                "to n (dim= kept as a deprecated alias) is the next step of issue 29")
_FRAME = "dim is the dimension of the physical frame (2 or 3) a body moves in, not the number of coordinates n"
_C_BLOCKS = ("a building block of the compiled path whose positional order (scheme, then h) is fixed by its callers "
             "in the generated-code pipeline; reordered together with the dim rename")
#: (qualified name, parameter or "scheme before h") -> reason
ALLOWED = {
    ("bea.api.compile_torch", "dim"): _DIM_PENDING,
    ("bea.api.inverse_modified_lagrangian", "dim"): _DIM_PENDING,
    ("bea.api.modified_equation", "dim"): _DIM_PENDING,
    ("bea.api.modified_lagrangian", "dim"): _DIM_PENDING,
    ("bea.schemes.Scheme.cache_key", "dim"): _DIM_PENDING,
    ("bea.schemes.Scheme.fingerprint", "dim"): _DIM_PENDING,
    ("bea.stages.StageScheme.fingerprint", "dim"): _DIM_PENDING,
    ("learners.modlanet.elements.Identity.__init__", "dim"): _FRAME,
    ("learners.modlanet.elements.PairCell.__init__", "dim"): _FRAME,
    ("learners.modlanet.elements.PotentialCell.__init__", "dim"): _FRAME,
    ("learners.modlanet.model.ModLaNet.__init__", "dim"): _FRAME,
    ("learners.shadow.functionals.Functionals.__init__", "dim"): "the dimension D of the atoms' input x = (q, v), 2n",
    ("integrators.newton.ConvergenceError.__init__", "step"): "the index of the time step that failed, not a step size",
    ("learners.neural.rollout.rollout_ode", "v0"): ("the second initial state is a velocity, or for an HNN a momentum "
                                                    "p0 (canonical rollouts): qdot0 would misname the second"),
    ("integrators.compiled.CompiledStepper.__init__", "scheme before h"): _C_BLOCKS,
    ("integrators.compiled.scheme_points", "scheme before h"): _C_BLOCKS,
    ("integrators.series_c.series_c_lagrangian", "scheme before h"): _C_BLOCKS,
    ("integrators.convergence.torch_series", "scheme before h"): _C_BLOCKS,
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
