"""Registries of named plug-ins: a name maps to an object, registered in code or by a package's entry point.

One :class:`Registry` per kind of plug-in: the schemes of :mod:`bea` (group ``bea.schemes``, filled by
:func:`bea.register_scheme`) and the task kinds of :mod:`pipelines.sweep` (group ``bea.sweep_kinds``). A
third-party package declares its plug-ins in its own metadata, e.g. in its ``pyproject.toml``::

    [project.entry-points."bea.schemes"]
    my_scheme = "my_package.schemes:MY_SCHEME"

Entry points are looked up lazily, only for a name that is not registered yet, and only the one asked for is
imported (through :mod:`importlib.metadata`: an import of the named module, never evaluation of text). Names
registered in code, and the built-in ones, win over an entry point of the same name, which is then never
loaded. The registry is state of the process that imports it (like :mod:`logging`'s handlers), changed only
by an explicit :meth:`Registry.register`.
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Callable, Dict, List, Optional

from .errors import BeaTypeError, DuplicateNameError, PluginLoadError

__all__ = ["Registry"]


class Registry:
    """Names of one kind of plug-in (``what``, for messages) mapped to objects.

    ``entries``: the registered objects (a plain dict, read by callers that only look up); ``group``: the
    entry-point group searched for names that are not registered; ``check(obj, name)``: validates an object
    before it is registered (raises a :class:`~bea.errors.BeaTypeError`); ``normalise(name)``: the spelling
    under which names are stored and looked up."""

    def __init__(self, what: str, group: str, check: Callable[[Any, str], Any],
                 normalise: Callable[[str], str] = lambda s: s, entries: Optional[Dict[str, Any]] = None):
        self.what, self.group, self.check, self.normalise = what, group, check, normalise
        self.entries: Dict[str, Any] = {} if entries is None else entries

    def _key(self, name) -> str:
        if not isinstance(name, str) or not name.strip():
            raise BeaTypeError(f"a {self.what} is registered under a non-empty name (a str), got {name!r}")
        return self.normalise(name.strip())

    def register(self, name: str, obj: Any, *, replace: bool = False) -> Any:
        """Register ``obj`` under ``name``; returns ``obj``. A name that is taken by another object raises
        :class:`~bea.errors.DuplicateNameError` unless ``replace=True`` (registering the same object again
        is a no-op, so that re-importing a module that registers is harmless)."""
        key = self._key(name)
        self.check(obj, key)
        old = self.entries.get(key)
        if old is not None and old is not obj and not replace:
            raise DuplicateNameError(f"a {self.what} named {key!r} is already registered ({old!r}); choose another name, "
                                     f"or pass replace=True to replace it")
        self.entries[key] = obj
        return obj

    def _entry_points(self) -> List[metadata.EntryPoint]:
        return list(metadata.entry_points(group=self.group))

    def names(self) -> List[str]:
        """Registered names and those of the installed entry points (not loaded), sorted."""
        found = {self.normalise(ep.name) for ep in self._entry_points()}
        return sorted(set(self.entries) | found)

    def get(self, name: str) -> Optional[Any]:
        """The object registered under ``name``, loading it from an entry point the first time; ``None`` if
        there is none (the caller raises its own error, naming :meth:`names`)."""
        key = self._key(name)
        if key in self.entries:
            return self.entries[key]
        matches = [ep for ep in self._entry_points() if self.normalise(ep.name) == key]
        if not matches:
            return None
        if len({(ep.value, getattr(ep.dist, "name", None)) for ep in matches}) > 1:
            raise DuplicateNameError(f"{len(matches)} installed packages declare a {self.what} named {key!r} (entry points "
                                     f"{', '.join(ep.value for ep in matches)} in group {self.group!r}); uninstall one, or "
                                     f"register the one you want in code")
        ep = matches[0]
        try:
            obj = ep.load()
        except Exception as err:  # the plug-in's own import failed: name it, with the cause chained
            raise PluginLoadError(f"the {self.what} {key!r} declared by the entry point {ep.value!r} (group {self.group!r}) "
                                  f"could not be loaded: {type(err).__name__}: {err}") from err
        return self.register(key, obj)
