r"""Saving and loading fitted models: ``model.save(path)``, ``Class.load(path)``.

A file holds one dict, written by :func:`torch.save` and read with ``torch.load(weights_only=True)``
(only tensors, numbers, strings, lists and dicts are unpickled -- nothing in a file is executed):

``format``, ``version``
    :data:`FORMAT` and :data:`VERSION`; a file of another format or version is refused.
``class``
    the model's class; loading it as another class is refused (:class:`ModelFileError`).
``config``
    the constructor's arguments as given (recorded by :func:`recorded`), nested components (transforms,
    energy cells) as ``{"__class__": name, "args": ...}`` of the classes in :data:`REGISTRY` only;
``state``
    the tensors: ``state_dict()`` of an ``nn.Module``, plus, for the GP models, the posterior
    (Cholesky factor, weights, the conditioning functionals) -- loaded as it was, not refitted, so a
    loaded model predicts the same numbers.

Files are written atomically (:func:`bea.files.atomic_save`).
"""

from __future__ import annotations

import functools
import inspect
import io
import pickle
from pathlib import Path
from typing import Any, Callable, Dict, Tuple, Type, Union

import torch

from bea.files import atomic_save
from bea.errors import BeaFileNotFoundError, BeaValueError
from bea.reading import NotRegularFileError, open_regular

__all__ = ["ModelFileError", "FORMAT", "VERSION", "recorded", "register", "write", "read", "encode", "decode"]

FORMAT = "bea.learners.model"
VERSION = 1

#: the classes a file may name (nested components); nothing else is ever constructed from a file
REGISTRY: Dict[str, type] = {}

PathLike = Union[str, Path]


class ModelFileError(BeaValueError):
    """A model file that cannot be loaded as asked: not a model file, another format version, another class."""


def register(cls: type) -> type:
    """Allow ``cls`` (a class whose ``__init__`` is :func:`recorded`) as a component of saved models."""
    REGISTRY[cls.__name__] = cls
    return cls


def recorded(init: Callable) -> Callable:
    """Decorate ``__init__`` so that the instance keeps its constructor arguments in ``_init_args``."""
    sig = inspect.signature(init)

    @functools.wraps(init)
    def wrapper(self, *args, **kwargs):
        bound = sig.bind(self, *args, **kwargs)
        bound.apply_defaults()
        init(self, *args, **kwargs)
        # the most derived __init__ finishes last, so its arguments are the ones kept
        object.__setattr__(self, "_init_args", dict(list(bound.arguments.items())[1:]))

    return wrapper


def encode(value: Any, what: str) -> Any:
    """``value`` as plain data (see the module docstring); ``what`` names it in errors."""
    if value is None or isinstance(value, (bool, int, float, str, torch.Tensor)):
        return value
    if isinstance(value, torch.Generator):
        return None  # initial weights only; the saved state replaces them
    if isinstance(value, (list, tuple)):
        return [encode(v, f"{what}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: encode(v, f"{what}[{k!r}]") for k, v in value.items()}
    name = type(value).__name__
    if REGISTRY.get(name) is type(value) and hasattr(value, "_init_args"):
        return {"__class__": name, "args": encode(value._init_args, f"{what} ({name})")}
    raise ModelFileError(f"cannot save {what}: it is a {name}, which a model file cannot describe (only numbers, "
                         f"strings, tensors and the components {sorted(REGISTRY)}); build the model from those to save it")


def decode(value: Any) -> Any:
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if "__class__" in value:
            cls = REGISTRY.get(value["__class__"])
            if cls is None:
                raise ModelFileError(f"the file names a component {value['__class__']!r} that this version does not know")
            return cls(**decode(value["args"]))
        return {k: decode(v) for k, v in value.items()}
    return value


def write(model: Any, path: PathLike, config: Dict[str, Any], state: Dict[str, Any]) -> Path:
    """Write a model file for ``model`` atomically; returns the path."""
    payload = {"format": FORMAT, "version": VERSION, "class": type(model).__name__,
               "config": encode(config, f"the configuration of {type(model).__name__}"), "state": state}
    buf = io.BytesIO()
    torch.save(payload, buf)
    data = buf.getvalue()
    return atomic_save(path, lambda f: f.write(data))


def read(path: PathLike, cls: Type, map_location: Union[str, torch.device, None] = None) -> Tuple[Dict, Dict]:
    """``(config, state)`` of a model file written for ``cls``; :class:`ModelFileError` otherwise."""
    path = Path(path)
    if not path.exists():
        raise BeaFileNotFoundError(f"{path}: no such model file")
    try:  # a regular file only: a FIFO or a device would block the read
        fh = open_regular(path, "a model file")
    except NotRegularFileError as err:
        raise ModelFileError(str(err)) from None
    try:
        with fh:
            payload = torch.load(fh, map_location=map_location or "cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, AttributeError) as err:
        raise ModelFileError(f"{path}: not a model file of bea's learners (torch.load with weights_only=True failed: "
                             f"{str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
    if not isinstance(payload, dict) or payload.get("format") != FORMAT:
        raise ModelFileError(f"{path}: not a model file of bea's learners (no format {FORMAT!r})")
    if payload.get("version") != VERSION:
        raise ModelFileError(f"{path}: model file format version {payload.get('version')!r}; this version of the "
                             f"learners reads version {VERSION} -- save the model again with the version that loads it")
    if payload.get("class") != cls.__name__:
        raise ModelFileError(f"{path}: the file holds a {payload.get('class')}, not a {cls.__name__}; load it with "
                             f"{payload.get('class')}.load")
    return decode(payload["config"]), payload["state"]


class SavableModule:
    """``save``/``load`` for an ``nn.Module`` whose ``__init__`` is :func:`recorded`: config + ``state_dict``."""

    def save(self, path: PathLike) -> Path:
        """Write the model (constructor arguments and ``state_dict``) to ``path`` atomically."""
        return write(self, path, self._init_args, {"state_dict": self.state_dict()})

    @classmethod
    def load(cls, path: PathLike, map_location: Union[str, torch.device, None] = None):
        """The model saved in ``path`` by :meth:`save` (:class:`ModelFileError` for another class or version)."""
        config, state = read(path, cls, map_location)
        model = cls(**config)
        model.load_state_dict(state["state_dict"])
        model.eval()
        return model
