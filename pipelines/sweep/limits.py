"""Limits of a sweep specification checked before anything is built: a plain ``name`` (it becomes a folder) and the
number of tasks (counted from the list lengths, so a 27-million-task grid is refused in microseconds instead of
exhausting memory while it is expanded); parameters under a kind's deprecated names, moved to the new ones."""

from __future__ import annotations

import math
import re
import warnings
from typing import Any, Callable, Dict, Mapping

from bea.errors import BeaValueError


class SpecError(BeaValueError):
    """An invalid sweep specification; ``source`` is the file (or ``<dict>``), ``key`` the offending key."""

    def __init__(self, source: str, key: str, problem: str):
        super().__init__(f"{source}: {key}: {problem}")
        self.source, self.key, self.problem = source, key, problem


#: tasks a specification may expand to unless ``[execution] max_tasks`` raises the limit: each task is a Python
#: object and a record file, so 27 million of them exhaust memory and disk before the first one finishes
MAX_TASKS = 100_000


def check_task_count(grid_raw: Mapping[str, Any], points_raw: list, execution: Mapping[str, Any], source: str,
                     check_value: Callable) -> int:
    """The number of tasks, counted from the list lengths before any is built; :class:`SpecError` beyond the limit
    (``[execution] max_tasks``, default :data:`MAX_TASKS`). ``check_value`` validates the limit (the spec's own)."""
    limit = check_value(execution.get("max_tasks", MAX_TASKS), int, "execution.max_tasks", source)
    if limit < 1:
        raise SpecError(source, "execution.max_tasks", f"must be >= 1, got {limit}")
    lengths = [len(v) for v in grid_raw.values() if isinstance(v, list)]
    count = (math.prod(lengths) if lengths else 0) + len(points_raw)
    if count > limit:
        shape = " x ".join(f"{len(v)} {k}" for k, v in grid_raw.items() if isinstance(v, list))
        raise SpecError(source, "grid", f"{count:,} tasks ({shape or 'points'}{' + ' + str(len(points_raw)) + ' points' if shape and points_raw else ''}) "
                                        f"exceed the limit of {limit:,}: shorten the lists or split the sweep, or raise the "
                                        f"limit with [execution] max_tasks = {count} if the machine can hold them")
    return count


#: a sweep's name becomes a folder name (``sweep-results/<name>``): letters, digits, ``_ . -``, starting with a
#: letter or digit -- so no separator, no ``..``, no absolute path, nothing a shell or a file system treats specially
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,99}$")


def check_name(name: str, source: str, given: bool = True) -> str:
    """``name`` if it is a plain folder name, else :class:`SpecError` on the key ``name`` of ``source``."""
    if _PLAIN_NAME.match(name) and ".." not in name:
        return name
    fix = ("use letters, digits, '_', '.' and '-' only (at most 100, starting with a letter or digit, no '..'); "
           "the output folder is sweep-results/<name>, and --out chooses another place")
    if not given:
        raise SpecError(source, "name", f"the file's stem {name!r} is not a plain name, and the spec gives no name = "
                                        f"\"...\" to use instead: {fix}")
    raise SpecError(source, "name", f"{name!r} is not a plain name (it would place the results outside "
                                    f"sweep-results/ or in an odd folder): {fix}")


def renamed_params(table: Dict[str, Any], kind, where: str, source: str) -> Dict[str, Any]:
    """``table`` with each parameter given under a deprecated name of ``kind`` (its ``renamed`` pairs) moved to the
    new name, in place, with a DeprecationWarning; both names at once is a :class:`SpecError`."""
    old_to_new = dict(kind.renamed)
    out: Dict[str, Any] = {}
    for key, value in table.items():
        new = old_to_new.get(key)
        if new is None:
            out[key] = value
            continue
        if new in table:
            raise SpecError(source, f"{where}.{key}", f"{key!r} is the deprecated name of {new!r}; give {new!r} only")
        warnings.warn(f"{source}: {where}.{key}: the parameter {key!r} of kind {kind.name!r} is deprecated and will be "
                      f"removed in the next release; use {new!r}", DeprecationWarning, stacklevel=4)
        out[new] = value
    return out
