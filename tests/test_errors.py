"""One exception hierarchy across the packages (issue 29).

* every exception class the packages define, and every exception class a ``raise`` statement names,
  derives from :class:`bea.BeaError`, the root each package exports (a short allow-list of built-in
  classes that Python's protocols require, each with its reason);
* a condition two packages detect has one class (``integrators.NotRegularError is bea.NotRegularError``);
* no ``except`` clause recognises an error by its message text.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import pkgutil
import warnings
from pathlib import Path

import pytest
import torch

import bea
import integrators
import learners
import pipelines
import pipelines.sweep
from bea import CustomScheme
from bea.errors import BeaError
from learners.modlanet.elements import CallableTransform

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ["bea", "integrators", "learners", "pipelines"]

#: built-in exceptions a raise statement may name, each required by a Python protocol
ALLOWED_BUILTINS = {
    NotImplementedError: "an abstract method's body: subclasses override it (the abstract-method protocol)",
    AttributeError: "__getattr__ must raise AttributeError for getattr(obj, name, default) and hasattr to work",
    ZeroDivisionError: "series and positions are numbers: x / 0 raises ZeroDivisionError as for int and Fraction",
    SystemExit: "the command line's exit status (argparse's protocol)",
}


def _modules():
    for pkg in PACKAGES:
        yield importlib.import_module(pkg)
        for info in pkgutil.walk_packages(importlib.import_module(pkg).__path__, pkg + "."):
            if not info.name.endswith("__main__"):  # running it is the CLI
                yield importlib.import_module(info.name)


MODULES = list(_modules())
TREES = {mod.__name__: ast.parse(Path(mod.__file__).read_text()) for mod in MODULES}  # parsed once for all tests


def _namespace(mod) -> dict:
    """The module's globals plus the names its functions import locally (``from x import E`` inside a function)."""
    ns = dict(vars(mod))
    for node in ast.walk(TREES[mod.__name__]):
        if isinstance(node, ast.ImportFrom):
            package = mod.__name__ if hasattr(mod, "__path__") else mod.__name__.rpartition(".")[0]
            source = importlib.import_module("." * node.level + (node.module or ""), package) if node.level \
                else importlib.import_module(node.module)
            for alias in node.names:
                ns.setdefault(alias.asname or alias.name, getattr(source, alias.name, None))
    return ns


NAMESPACES = {mod.__name__: _namespace(mod) for mod in MODULES}


def _resolve(node: ast.expr, namespace: dict):
    """The object a ``raise`` names: ``X``, ``X(...)``, ``mod.X(...)``; None for anything computed."""
    if isinstance(node, ast.Call):
        node = node.func
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    obj = namespace.get(node.id, getattr(__builtins__, node.id, None) if not isinstance(__builtins__, dict)
                        else __builtins__.get(node.id))
    for attr in reversed(parts):
        obj = getattr(obj, attr, None)
    return obj


def raised_classes(tree: ast.AST, namespace: dict):
    """``(line, class)`` for every ``raise`` in ``tree`` that names an exception class."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            obj = _resolve(node.exc, namespace)
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                yield node.lineno, obj


def foreign_raises(tree: ast.AST, namespace: dict):
    """Raises of a class outside the hierarchy (and not allowed), and of a capitalised name the module does not
    define (a missing import: a NameError at the moment the error should be raised)."""
    bad = [(line, cls.__name__) for line, cls in raised_classes(tree, namespace)
           if not issubclass(cls, BeaError) and cls not in ALLOWED_BUILTINS]
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            name = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(name, ast.Name) and name.id[:1].isupper() and _resolve(name, namespace) is None:
                bad.append((node.lineno, f"{name.id} (not defined in the module)"))
    return bad


def test_every_raised_exception_is_under_the_root():
    bad, count = [], 0
    for mod in MODULES:
        tree = TREES[mod.__name__]
        count += sum(1 for _ in raised_classes(tree, NAMESPACES[mod.__name__]))
        bad += [f"{mod.__name__}:{line} raises {name}" for line, name in foreign_raises(tree, NAMESPACES[mod.__name__])]
    assert not bad, "raise a bea.errors class (BeaValueError, BeaTypeError, ...) instead:\n" + "\n".join(bad)
    assert count > 400, count  # the scan sees the packages' raise statements (about 480 today)


def test_the_raise_scan_can_fail():
    src = "def f():\n    raise ValueError('x')\ndef g():\n    raise bea.BeaValueError('y')\ndef k():\n    raise Missing('z')\n"
    assert foreign_raises(ast.parse(src), {"bea": bea}) == [(2, "ValueError"), (6, "Missing (not defined in the module)")]


def test_every_exception_class_defined_is_under_the_root():
    defined = [obj for mod in MODULES for obj in vars(mod).values()
               if inspect.isclass(obj) and obj.__module__ == mod.__name__ and issubclass(obj, BaseException)]
    errors = [cls for cls in defined if not issubclass(cls, Warning)]  # warnings are issued, not raised
    assert len(errors) >= 25, [c.__name__ for c in errors]
    assert [f"{c.__module__}.{c.__qualname__}" for c in errors if not issubclass(c, BeaError)] == []


def issued_categories(tree: ast.AST, namespace: dict):
    """``(line, class)`` for every ``warnings.warn(message, Category, ...)`` (or ``category=Category``) in ``tree``;
    the class is None when the call names none (a plain UserWarning) or one that is computed."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "warn" \
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "warnings":
            given = node.args[1] if len(node.args) > 1 else next((k.value for k in node.keywords if k.arg == "category"), None)
            yield node.lineno, None if given is None else _resolve(given, namespace)


def foreign_warnings(tree: ast.AST, namespace: dict):
    """Warnings issued with a class outside :class:`bea.BeaWarning` (deprecations apart: Python's protocol)."""
    return [(line, getattr(cls, "__name__", "UserWarning (no class named)")) for line, cls in issued_categories(tree, namespace)
            if not (inspect.isclass(cls) and (issubclass(cls, bea.BeaWarning) or cls is DeprecationWarning))]


def test_every_warning_is_under_the_warning_root():
    """One root for the project's warnings (issue 29): every Warning class the packages define, and every class
    that ``warnings.warn`` issues, derives from bea.BeaWarning, which each package exports."""
    defined = [obj for mod in MODULES for obj in vars(mod).values()
               if inspect.isclass(obj) and obj.__module__ == mod.__name__ and issubclass(obj, Warning)]
    names = {c.__name__ for c in defined}
    assert {"CacheWarning", "ExtrapolationWarning", "IdentifiabilityWarning", "BeaWarning"} <= names, names
    assert [f"{c.__module__}.{c.__qualname__}" for c in defined if not issubclass(c, bea.BeaWarning)] == []
    bad, count = [], 0
    for mod in MODULES:
        tree, ns = TREES[mod.__name__], NAMESPACES[mod.__name__]
        count += sum(1 for _ in issued_categories(tree, ns))
        bad += [f"{mod.__name__}:{line} warns {name}" for line, name in foreign_warnings(tree, ns)]
    assert not bad, "issue a bea.BeaWarning subclass instead:\n" + "\n".join(bad)
    assert count >= 15, count  # the scan sees the packages' warnings.warn calls (about 20 today)
    for pkg in (bea, integrators, learners, pipelines):
        assert pkg.BeaWarning is bea.errors.BeaWarning and not issubclass(pkg.BeaWarning, BeaError), pkg.__name__
    assert issubclass(bea.BeaWarning, UserWarning)


def test_the_warning_scan_can_fail():
    src = ("import warnings\nwarnings.warn('a', RuntimeWarning)\nwarnings.warn('b')\n"
           "warnings.warn('c', category=bea.BeaWarning)\nwarnings.warn('d', DeprecationWarning)\n")
    assert foreign_warnings(ast.parse(src), {"bea": bea}) == [(2, "RuntimeWarning"), (3, "UserWarning (no class named)")]


def test_the_suite_turns_every_project_warning_into_an_error():
    """setup.cfg's filters make a BeaWarning an error here, whatever module it names (pytest applies them per test)."""
    from learners.shadow.guards import ExtrapolationWarning

    with pytest.raises(ExtrapolationWarning):
        warnings.warn("x", ExtrapolationWarning)
    with pytest.raises(bea.BeaWarning):
        warnings.warn("y", bea.BeaWarning)


def test_no_exception_class_is_defined_inside_a_function():
    """Such a class would escape the walk above (it is not a module attribute)."""
    nested = []
    for mod in MODULES:
        tree = TREES[mod.__name__]
        top = {id(n) for n in tree.body}
        nested += [f"{mod.__name__}:{n.lineno} {n.name}" for n in ast.walk(tree)
                   if isinstance(n, ast.ClassDef) and id(n) not in top
                   and any(isinstance(b, ast.Name) and b.id.endswith(("Error", "Exception")) for b in n.bases)]
    assert nested == []


def test_one_root_and_one_class_per_condition():
    for pkg in (integrators, learners, pipelines, pipelines.sweep):
        assert pkg.BeaError is bea.BeaError, pkg.__name__
    assert integrators.NotRegularError is bea.NotRegularError
    assert integrators.InconsistentSchemeError is bea.InconsistentSchemeError
    assert learners.NotRegularError is bea.NotRegularError
    # a singular mass matrix found by the collocation flow is the same condition
    assert issubclass(integrators.collocation.SingularMassError, bea.NotRegularError)
    for cls in (integrators.ConvergenceError, integrators.ReferenceFlowError, learners.ModelFileError,
                learners.ExtrapolationError, pipelines.sweep.SpecError, pipelines.sweep.ParamError):
        assert issubclass(cls, BeaError) and issubclass(cls, ValueError), cls  # except ValueError keeps working


def test_every_class_of_bea_errors_is_exported_as_bea_name():
    """``bea.X`` for every name of ``bea.errors.__all__`` (StaleHandleError was missing when it was added)."""
    import bea.errors

    assert [n for n in bea.errors.__all__ if n not in bea.__all__ or getattr(bea, n, None) is not getattr(bea.errors, n)] == []


def test_the_integrators_errors_are_caught_as_bea_errors():
    """Before issue 29, ``except bea.NotRegularError`` missed a singular L in the integrator."""
    singular = integrators.VariationalIntegrator(lambda q, v: (q * v - q**2).sum(-1), 0.1)
    with pytest.raises(bea.NotRegularError, match="not regular at 1 of 1 initial states"):
        singular.solve([[0.3]], [[0.1]], 5)
    twice = CustomScheme(lambda L, a, b, h: 2 * h * L((a + b) / 2, (b - a) / h), name="twice")
    with pytest.raises(bea.InconsistentSchemeError, match="sum to 2.*wrong dynamics"):
        integrators.VariationalIntegrator(lambda q, v: 0.5 * (v**2 - q**2).sum(-1), 0.1, twice)
    with pytest.raises(BeaError, match="positive"):
        integrators.VariationalIntegrator(lambda q, v: 0.5 * (v**2 - q**2).sum(-1), -0.1)
    with pytest.raises(bea.BeaValueError):  # and a plain bad value from bea itself is typed
        bea.GeneralisedMidpoint(float("nan"))
    with pytest.raises(bea.SeriesError, match="truncated at h\\^2; h\\^4 is not known"):
        bea.modified_lagrangian("midpoint", 2, n=1).coefficient(4)


# ------------------------------------------------------------------ no message matching

_TEXT_OF = {"str", "repr", "format"}
_TEXT_ATTRS = {"args", "message", "msg", "strerror"}
_TEXT_METHODS = {"startswith", "endswith", "find", "rfind", "index", "count", "__contains__", "removeprefix"}


def _reads_text(node: ast.AST, name: str) -> bool:
    """Whether ``node`` contains the text of the exception bound to ``name`` (``str(e)``, ``e.args``, f"{e}")."""
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and isinstance(sub.func, ast.Name) and sub.func.id in _TEXT_OF and sub.args \
                and isinstance(sub.args[0], ast.Name) and sub.args[0].id == name:
            return True
        if isinstance(sub, ast.Attribute) and sub.attr in _TEXT_ATTRS and isinstance(sub.value, ast.Name) \
                and sub.value.id == name:
            return True
        if isinstance(sub, ast.FormattedValue) and isinstance(sub.value, ast.Name) and sub.value.id == name:
            return True
    return False


def message_matches(tree: ast.AST):
    """Lines where an ``except ... as e`` body decides something on the text of ``e``: a comparison
    (``"x" in str(e)``, ``e.args[0] == ...``), a string search on it, or a regular expression."""
    found = []
    for handler in ast.walk(tree):
        if not (isinstance(handler, ast.ExceptHandler) and handler.name):
            continue
        for node in (n for stmt in handler.body for n in ast.walk(stmt)):
            decides = []  # (the truth of str(e) alone, as in `str(e) or type(e).__name__`, is not matching)
            if isinstance(node, ast.Compare):
                decides.append(node)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and (
                    node.func.attr in _TEXT_METHODS and node.func.attr != "removeprefix"
                    or isinstance(node.func.value, ast.Name) and node.func.value.id == "re"):
                decides.append(node)
            if any(_reads_text(d, handler.name) for d in decides):
                found.append(node.lineno)
    return sorted(set(found))


def test_no_except_clause_matches_message_text():
    bad = []
    for mod in MODULES:
        bad += [f"{mod.__name__}:{line}" for line in message_matches(TREES[mod.__name__])]
    assert bad == [], "catch a typed class instead of reading the message:\n" + "\n".join(bad)


@pytest.mark.parametrize("body", [
    'if "inconsistent" not in str(err):\n        raise',
    'ok = err.args[0] == "malformed"',
    'if re.search("x", f"{err}"):\n        pass',
    'if str(err).startswith("bad"):\n        pass',
])
def test_the_message_scan_can_fail(body):
    src = f"try:\n    f()\nexcept ValueError as err:\n    {body}\n"
    assert message_matches(ast.parse(src)) != []
    # passing the message on (in a new message, or to a record) is not matching on it
    assert message_matches(ast.parse("try:\n    f()\nexcept ValueError as err:\n    raise KeyError(f'{err}; fix')\n")) == []


def test_regularity_error_from_modlanet_is_typed():
    """ModLaNet recognised the singular-mass error by its text; now by class. A transform with zero Jacobian
    makes the mass matrix M = m J^T J vanish."""
    flat = CallableTransform(lambda th: torch.cat([0 * th, 0 * th], -1), 1, 2)
    model = learners.ModLaNet([-1], flat, potential=None, pair=None, learn_masses=False, learn_weights=False)
    q = torch.tensor([[0.3]], dtype=torch.float64)
    with pytest.raises(bea.NotRegularError, match="singular mass matrix.*vanishing Jacobian"):
        model.acceleration(q, q)
