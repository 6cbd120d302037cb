r"""Sweep specifications: TOML (or a dict of the same shape), validated up front.

Layout (every table optional except ``kind`` and at least one task)::

    kind = "convergence"            # a task kind: convergence, shadow, modlanet (pipelines.sweep.tasks)
    name = "orders"                 # optional; default: the file's stem
    description = "..."             # optional

    [defaults]                      # parameters shared by every task
    experiment = "modified_flow"
    T = 1.0

    [grid]                          # the Cartesian product of these lists, one task per combination
    scheme = ["midpoint", "trapezoidal"]
    order = [0, 2]
    h = [0.25, 0.125, 0.0625]

    [[points]]                      # further tasks, one per entry (over [defaults]; not crossed with [grid])
    scheme = "generalised_midpoint:0.3"
    order = 1
    h = 0.05

    [execution]
    num_cpus = 1                    # CPUs per task (Ray's num_cpus; the task's torch threads match)
    max_retries = 3                 # re-runs of a task whose worker process died
    local_cpus = 2                  # CPUs of a local Ray instance started by the sweep (default: all)
    object_store_mb = 200           # object store of that instance (records are small)
    max_tasks = 100000              # refuse more tasks than this, counted before any is built (the default)

    [report]
    metrics = ["error"]             # metrics plotted (default: the kind's)
    x = "h"                         # parameter on the horizontal axis (default: the kind's)

Tasks are ``[defaults]`` merged with each combination of ``[grid]`` (a key may not be in both), then
``[defaults]`` merged with each ``[[points]]`` entry (which may override a default); the kind's own
defaults fill what is left. A parameter under the name a kind used before (its ``renamed``, e.g. the
convergence kind's ``N``, now ``order``) is accepted for one release, with a DeprecationWarning naming the new one. Every parameter is checked against the kind's schema (type) and checks
(value) before anything runs. Errors are :class:`SpecError` and read
``FILE: KEY: problem`` -- e.g. ``sweeps/x.toml: grid.order[1]: expected an integer, got '2' (a string)``.
"""

from __future__ import annotations

import collections.abc
import difflib
import itertools
import json
import math
import os
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from bea.errors import BeaTypeError, BeaValueError
from bea.reading import read_regular

from . import records
from .limits import MAX_TASKS, SpecError, check_name, check_task_count, renamed_params as _renamed
from .tasks import REQUIRED, Kind, ParamError, get_kind, kind_names

__all__ = ["Spec", "Task", "Execution", "SpecError", "load"]

TOP_KEYS = ("kind", "name", "description", "defaults", "grid", "points", "execution", "report")
EXECUTION_KEYS = ("num_cpus", "max_retries", "local_cpus", "object_store_mb", "max_tasks")
REPORT_KEYS = ("metrics", "x")


@dataclass(frozen=True)
class Task:
    """One grid point: ``params`` (JSON values, complete), ``task_id`` and derived ``seed``; ``origin``
    says where in the specification it came from (``grid`` or ``points[i]``)."""

    kind: str
    params: Dict[str, Any]
    task_id: str
    seed: int
    origin: str


@dataclass(frozen=True)
class Execution:
    num_cpus: int = 1
    max_retries: int = 3
    local_cpus: Optional[int] = None
    object_store_mb: int = 200
    max_tasks: int = MAX_TASKS


@dataclass(frozen=True)
class Spec:
    kind: str
    name: str
    tasks: Tuple[Task, ...]
    execution: Execution = Execution()
    report: Dict[str, Any] = field(default_factory=dict)
    description: str = ""
    source: str = "<dict>"
    text: str = ""  #: the specification as given (TOML text, or JSON of the dict) -- saved with the results

    @property
    def kind_obj(self) -> Kind:
        return get_kind(self.kind)


# ------------------------------------------------------------------------------------------- values
def _describe(v: Any) -> str:
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string", list: "a list", dict: "a table"}
    return f"{v!r} ({names.get(type(v), type(v).__name__)})"


def _expected(hint: Any) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return "any value"
    if origin is Union:
        inner = [a for a in args if a is not type(None)]
        return " or ".join(_expected(a) for a in inner)
    if origin in (list, tuple, collections.abc.Sequence):
        if origin is tuple and args and args[-1] is not Ellipsis:
            return f"a list of {len(args)} values"
        return f"a list of {_expected(args[0]).replace('an ', '').replace('a ', '')}s" if args else "a list"
    if origin in (dict, collections.abc.Mapping):
        return "a table"
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string"}.get(hint, str(hint))


def check_value(value: Any, hint: Any, where: str, source: str) -> Any:
    """``value`` checked against the type ``hint``; returns it normalised to JSON values (ints where a
    number is expected become floats, tuples lists). Raises :class:`SpecError` at ``where``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)

    def bad() -> SpecError:
        return SpecError(source, where, f"expected {_expected(hint)}, got {_describe(value)}")

    if hint is Any:
        return _plain(value, where, source)
    if origin is Union:
        inner = [a for a in args if a is not type(None)]
        for a in inner:
            try:
                return check_value(value, a, where, source)
            except SpecError as err:
                last = err
        if len(inner) == 1:
            raise last
        raise bad()
    if hint is bool:
        if not isinstance(value, bool):
            raise bad()
        return value
    if hint is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise bad()
        return value
    if hint is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise bad()
        if not math.isfinite(value):
            raise SpecError(source, where, f"expected a finite number, got {value!r}")
        return float(value)
    if hint is str:
        if not isinstance(value, str):
            raise bad()
        return value
    if origin in (list, tuple, collections.abc.Sequence):
        if not isinstance(value, (list, tuple)):
            raise bad()
        if origin is tuple and args and args[-1] is not Ellipsis:
            if len(value) != len(args):
                raise bad()
            return [check_value(v, a, f"{where}[{i}]", source) for i, (v, a) in enumerate(zip(value, args))]
        elem = args[0] if args else Any
        return [check_value(v, elem, f"{where}[{i}]", source) for i, v in enumerate(value)]
    if origin in (dict, collections.abc.Mapping):
        if not isinstance(value, dict):
            raise bad()
        vt = args[1] if len(args) == 2 else Any
        return {str(k): check_value(v, vt, f"{where}.{k}", source) for k, v in value.items()}
    raise BeaTypeError(f"unsupported parameter type {hint!r} at {where}")  # a kind's schema, not user input


def _plain(value: Any, where: str, source: str) -> Any:
    """A JSON value (TOML dates and times are not parameters)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise SpecError(source, where, f"expected a finite number, got {value!r}")
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]", source) for i, v in enumerate(value)]
    if isinstance(value, dict):
        return {str(k): _plain(v, f"{where}.{k}", source) for k, v in value.items()}
    raise SpecError(source, where, f"expected a number, string, boolean, list or table, got {_describe(value)}")


def _unknown(source: str, where: str, key: str, known, kind: Optional[str] = None) -> SpecError:
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    what = f"parameter {key!r} of kind {kind!r}" if kind else f"key {key!r}"
    return SpecError(source, where, f"unknown {what}{hint} (allowed: {', '.join(known)})")


def _table(data: Mapping, key: str, source: str) -> Dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise SpecError(source, key, f"expected a table, got {_describe(value)}")
    return dict(value)


# ------------------------------------------------------------------------------------------- parse
def load(spec: Union["Spec", str, os.PathLike, Mapping[str, Any]]) -> Spec:
    """A validated :class:`Spec` from a TOML file path, a dict of the same shape, or a :class:`Spec`. Every
    problem with its content is a :class:`SpecError` (values nested too deeply for Python's parser included)."""
    try:
        return _load(spec)
    except RecursionError:  # tomllib, json and the checks recurse once per level of nesting
        source = str(spec) if isinstance(spec, (str, os.PathLike)) else "<dict>"
        raise SpecError(source, "file", "values are nested too deeply (lists or tables inside each other hundreds of "
                                        "levels deep); a sweep parameter is a number, a string or a short list") from None


def _load(spec: Union["Spec", str, os.PathLike, Mapping[str, Any]]) -> Spec:
    if isinstance(spec, Spec):
        return spec
    if isinstance(spec, Mapping):
        try:
            text = json.dumps(spec, sort_keys=True, indent=1, default=str)
        except (TypeError, ValueError):
            text = repr(spec)
        return parse(spec, "<dict>", text)
    if isinstance(spec, (str, os.PathLike)):
        path = Path(spec)
        try:
            text = read_regular(path, "a sweep specification").decode("utf-8")  # no FIFO: it would block
        except (OSError, UnicodeDecodeError) as err:
            raise SpecError(str(path), "file", f"cannot read the specification: {err}") from None
        try:
            import tomllib
        except ModuleNotFoundError:  # pragma: no cover - Python 3.10
            import tomli as tomllib
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as err:
            raise SpecError(str(path), "file", f"not valid TOML: {err}") from None
        return parse(data, str(path), text, default_name=path.stem)
    raise BeaTypeError(f"a sweep specification is a TOML file path, a dict or a Spec, got {type(spec).__name__}")


def parse(data: Mapping[str, Any], source: str = "<dict>", text: str = "", default_name: str = "sweep") -> Spec:
    """Validate ``data`` (the parsed TOML) and expand its tasks."""
    for key in data:
        if key not in TOP_KEYS:
            raise _unknown(source, key, key, TOP_KEYS)
    if "kind" not in data:
        raise SpecError(source, "kind", f"missing: say which experiment runs (one of {', '.join(kind_names())})")
    kind_name = data["kind"]
    if not isinstance(kind_name, str):
        raise SpecError(source, "kind", f"expected a string, got {_describe(kind_name)}")
    try:
        kind = get_kind(kind_name)  # registered, or an installed package's entry point (bea.sweep_kinds)
    except BeaValueError as err:
        raise SpecError(source, "kind", str(err)) from None
    name = data.get("name", default_name)
    description = data.get("description", "")
    for key, val in (("name", name), ("description", description)):
        if not isinstance(val, str):
            raise SpecError(source, key, f"expected a string, got {_describe(val)}")
    check_name(name, source, given="name" in data)

    schema = kind.params()
    defaults = _params(_renamed(_table(data, "defaults", source), kind, "defaults", source), schema, "defaults", source,
                       kind_name)
    grid_raw = _renamed(_table(data, "grid", source), kind, "grid", source)
    grid: Dict[str, List[Any]] = {}
    for key, values in grid_raw.items():
        where = f"grid.{key}"
        if key not in schema:
            raise _unknown(source, where, key, list(schema), kind_name)
        if key in defaults:
            raise SpecError(source, where, f"{key!r} is in both [defaults] and [grid]; keep it in one")
        if not isinstance(values, list):
            raise SpecError(source, where, f"expected a list of values (single values go in [defaults]), got "
                                           f"{_describe(values)}")
        if not values:
            raise SpecError(source, where, "empty list: every grid key needs at least one value")
        grid[key] = [check_value(v, schema[key].hint, f"{where}[{i}]", source) for i, v in enumerate(values)]
        seen_values: Dict[str, int] = {}  # a dict, not a list scan: long lists stay linear
        for i, t in enumerate(records.canonical(v) for v in grid[key]):
            if t in seen_values:
                raise SpecError(source, f"{where}[{i}]", f"the value {t} appears twice in the list (the same tasks twice)")
            seen_values[t] = i
    points_raw = data.get("points", [])
    if not isinstance(points_raw, list) or not all(isinstance(p, Mapping) for p in points_raw):
        raise SpecError(source, "points", "expected an array of tables ([[points]] entries)")
    check_task_count(grid_raw, points_raw, _table(data, "execution", source), source, check_value)
    points = [_params(_renamed(dict(p), kind, f"points[{i}]", source), schema, f"points[{i}]", source, kind_name)
              for i, p in enumerate(points_raw)]
    if not grid and not points:
        raise SpecError(source, "grid", "no tasks: give at least one parameter list in [grid] or one [[points]] entry")

    combos: List[Tuple[Dict[str, Any], Dict[str, str], str]] = []
    if grid:
        keys = list(grid)
        for values in itertools.product(*(grid[k] for k in keys)):
            origins = {k: "defaults." + k for k in defaults}
            origins.update({k: "grid." + k for k in keys})
            combos.append(({**defaults, **dict(zip(keys, values))}, origins, "grid"))
    for i, p in enumerate(points):
        origins = {k: "defaults." + k for k in defaults}
        origins.update({k: f"points[{i}].{k}" for k in p})
        combos.append(({**defaults, **p}, origins, f"points[{i}]"))

    tasks: List[Task] = []
    seen: Dict[str, str] = {}
    for params, origins, origin in combos:
        for key, par in schema.items():
            if key not in params:
                if par.default is REQUIRED:
                    raise SpecError(source, key, f"missing parameter of kind {kind_name!r} ({par.doc}); give it in "
                                                 f"[defaults], [grid] or every [[points]] entry ({origin})")
                if par.default is not None:
                    params[key] = par.default
        params = {k: params[k] for k in schema if k in params}  # schema order: stable records and tables
        try:
            kind.check(params)
        except ParamError as err:
            raise SpecError(source, origins.get(err.key, err.key), f"{err} ({origin}: {_short(params)})") from None
        except ArithmeticError as err:  # a kind's check computing with extreme values (T = 1e308, h = 1e-10)
            raise SpecError(source, origin, f"the values are out of range ({type(err).__name__}: {err}; "
                                            f"{_short(params)}); use moderate magnitudes") from None
        tid = records.task_id(kind_name, params)
        if tid in seen:
            raise SpecError(source, origin, f"the same task as {seen[tid]} ({_short(params)}); remove the duplicate")
        seen[tid] = origin
        tasks.append(Task(kind_name, params, tid, records.derived_seed(kind_name, params), origin))

    execution = _execution(_table(data, "execution", source), source)
    report = _report(_table(data, "report", source), schema, source, dict(kind.renamed))
    return Spec(kind_name, name, tuple(tasks), execution, report, description, source, text)


def _short(params: Dict[str, Any], width: int = 160) -> str:
    s = ", ".join(f"{k}={json.dumps(v)}" for k, v in params.items())
    return s if len(s) <= width else s[: width - 3] + "..."


def _params(table: Dict[str, Any], schema, where: str, source: str, kind: str) -> Dict[str, Any]:
    out = {}
    for key, value in table.items():
        if key not in schema:
            raise _unknown(source, f"{where}.{key}", key, list(schema), kind)
        out[key] = check_value(value, schema[key].hint, f"{where}.{key}", source)
    return out


def _execution(table: Dict[str, Any], source: str) -> Execution:
    for key in table:
        if key not in EXECUTION_KEYS:
            raise _unknown(source, f"execution.{key}", key, EXECUTION_KEYS)
    vals = {k: check_value(v, int, f"execution.{k}", source) for k, v in table.items()}
    minimum = {"num_cpus": 1, "max_retries": 0, "local_cpus": 1, "object_store_mb": 75, "max_tasks": 1}
    for k, v in vals.items():
        if v < minimum[k]:
            raise SpecError(source, f"execution.{k}", f"must be >= {minimum[k]}, got {v}")
    ex = Execution(**vals)
    if ex.local_cpus is not None and ex.num_cpus > ex.local_cpus:
        raise SpecError(source, "execution.num_cpus", f"a task needs {ex.num_cpus} CPUs but the local instance has "
                                                     f"local_cpus = {ex.local_cpus}: no task could ever start")
    return ex


def _report(table: Dict[str, Any], schema, source: str, renamed: Dict[str, str]) -> Dict[str, Any]:
    for key in table:
        if key not in REPORT_KEYS:
            raise _unknown(source, f"report.{key}", key, REPORT_KEYS)
    out = {}
    if "metrics" in table:
        out["metrics"] = check_value(table["metrics"], List[str], "report.metrics", source)
    if "x" in table:
        out["x"] = check_value(table["x"], str, "report.x", source)
        if out["x"] in renamed:
            warnings.warn(f"{source}: report.x: {out['x']!r} is deprecated and will be removed in the next release; use "
                          f"{renamed[out['x']]!r}", DeprecationWarning, stacklevel=4)
            out["x"] = renamed[out["x"]]
        if out["x"] not in schema:
            raise SpecError(source, "report.x", f"{out['x']!r} is not a parameter of this kind (one of {', '.join(schema)})")
    return out
