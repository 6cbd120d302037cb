r"""Saving and loading fitted models: ``model.save(path)``, ``Class.load(path)``.

A file holds one dict, written by :func:`torch.save` and read with ``torch.load(weights_only=True)``
(only tensors, numbers, strings, lists and dicts are unpickled -- nothing in a file is executed):

``format``, ``version``
    :data:`FORMAT` and a version of :data:`VERSIONS` (written: the oldest that holds the model, so older code loads
    what it can read and refuses the rest); a file of another format or version is refused.
``class``
    the model's class; loading it as another class is refused (:class:`ModelFileError`).
``config``
    the constructor's arguments as given (recorded by :func:`recorded`), nested components (transforms,
    energy cells) as ``{"__class__": name, "args": ...}`` of the classes in :data:`REGISTRY` only;
``state``
    the tensors: ``state_dict()`` of an ``nn.Module``, plus, for the GP models, the posterior
    (Cholesky factor, weights, the conditioning functionals) -- loaded as it was, not refitted, so a
    loaded model predicts the same numbers.

``sha256``
    a SHA-256 over the canonical form of all the above (:func:`digest`: type tags, lengths, sorted keys,
    floats as ``float.hex``, tensors as dtype, shape and raw bytes -- independent of how pickle lays the
    file out). It is checked at load: an edited or corrupted file (a doubled ``unit``, a flipped bit in a
    weight) is refused with :class:`ModelFileError`. This detects accidents, not forgery: anyone can
    recompute it, and nothing in a file is executed either way.

Before anything is built, the sizes a file declares are bounded (:func:`check_sizes`): every size
(``n``, ``dim``, ``width``, ``hidden``, ``layers``, ...) at most :data:`MAX_SIZE`, every list at most
:data:`MAX_SIZE` long, and each network's ``width² x (layers + 1)`` at most :data:`MAX_PARAMETERS`; so a
crafted ``"hidden": 10**9`` is a :class:`ModelFileError`, not a 16 GB allocation. A file whose keys or
tensors do not fit the class (a missing ``chol``, a wrong shape) is a :class:`ModelFileError` too, and
loading never touches the global random generator (constructors' initial draws happen in a forked state).

Files are written atomically (:func:`bea.files.atomic_save`).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import io
import pickle
from pathlib import Path
from typing import Any, Callable, Dict, Tuple, Type, Union

import torch

from bea.files import atomic_save
from bea.errors import BeaFileNotFoundError, BeaValueError
from bea.reading import NotRegularFileError, open_regular

__all__ = ["ModelFileError", "FORMAT", "VERSION", "VERSIONS", "MAX_SIZE", "MAX_PARAMETERS", "recorded", "register", "write", "read",
           "load", "encode", "decode", "digest", "check_sizes"]

FORMAT = "bea.learners.model"
#: the newest version. 2: the file carries a checksum (version 1 files are refused: save the model again); 3: a GP
#: model fitted in rotated coordinates (its ``rotation``, :mod:`learners.shadow.units`) -- written only for such a
#: model, since code that reads version 2 would load it without the rotation and predict wrongly; 4: a GP model whose
#: ``kernel="auto"`` fit chose an element structure (:mod:`learners.shadow.structure_choice`), likewise only for such a model;
#: 5: that structure is per-body bodies ``("bodies", k, d, "unequal")``, which code reading version 4 cannot build
VERSION = 5
#: the versions this code reads
VERSIONS = (2, 3, 4, 5)

#: the largest size a model file may declare (a width, a dimension, a number of layers, a list's length)
MAX_SIZE = 4096
#: the most parameters one declared network may have: width² x (layers + 1) (2**26: 512 MiB in float64)
MAX_PARAMETERS = 2 ** 26
#: the keys of a configuration or state that declare a size
SIZE_KEYS = frozenset({"n", "dim", "space_dim", "in_dim", "out_dim", "width", "hidden", "layers", "n_outputs"})

#: the classes a file may name (nested components); nothing else is ever constructed from a file
REGISTRY: Dict[str, type] = {}

PathLike = Union[str, Path]


class ModelFileError(BeaValueError):
    """A model file that cannot be loaded as asked: not a model file, another format version, another class, a
    checksum that does not match, sizes beyond the limits, contents that do not fit the class."""


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
        # the most derived __init__ finishes last, so its arguments are the ones kept; not device=, which says where
        # the weights were made, not what the model is (a saved model loads on the CPU, .to() moves it)
        args = {k: v for k, v in list(bound.arguments.items())[1:] if k != "device"}
        object.__setattr__(self, "_init_args", args)

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


def _digest_into(h, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}:".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif value is None or isinstance(value, bool):
        h.update(f"C{value};".encode())
    elif isinstance(value, int):
        h.update(f"I{value};".encode())
    elif isinstance(value, float):
        h.update(f"F{value.hex()};".encode())
    elif isinstance(value, str):
        b = value.encode("utf-8", "surrogatepass")
        h.update(f"S{len(b)}:".encode() + b)
    elif isinstance(value, (list, tuple)):
        h.update(f"L{len(value)}:".encode())
        for v in value:
            _digest_into(h, v)
    elif isinstance(value, dict):
        keys = sorted(value, key=lambda k: (type(k).__name__, str(k)))  # 1 and "1" are different keys
        h.update(f"D{len(keys)}:".encode())
        for k in keys:
            _digest_into(h, k)
            _digest_into(h, value[k])
    else:
        raise ModelFileError(f"a model file cannot hold a {type(value).__name__}")


def digest(payload: Dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical form of ``payload`` without its ``sha256`` entry (see the module docstring)."""
    h = hashlib.sha256()
    _digest_into(h, {k: v for k, v in payload.items() if k != "sha256"})
    return h.hexdigest()


def check_sizes(value: Any, where: str = "the file") -> None:
    """:class:`ModelFileError` unless every size ``value`` declares is within :data:`MAX_SIZE` and each network
    within :data:`MAX_PARAMETERS` (see the module docstring); tensors are not looked at (they are already read)."""
    if isinstance(value, (list, tuple)):
        if len(value) > MAX_SIZE:
            raise ModelFileError(f"{where} declares a list of {len(value)} entries; at most {MAX_SIZE} are allowed")
        for i, v in enumerate(value):
            check_sizes(v, f"{where}[{i}]")
    elif isinstance(value, dict):
        for k, v in value.items():
            declared = k in SIZE_KEYS and isinstance(v, int) and not isinstance(v, bool)
            if declared and not 0 <= v <= MAX_SIZE:
                raise ModelFileError(f"{where} declares {k} = {v}; model files allow 0 <= {k} <= {MAX_SIZE} "
                                     f"(learners.saving.MAX_SIZE): the file is corrupt or not from a saved model")
            if not isinstance(v, torch.Tensor):
                check_sizes(v, f"{where}[{k!r}]")
        width = value.get("width", value.get("hidden"))
        layers = value.get("layers", 2)
        if isinstance(width, int) and isinstance(layers, int) and width * width * (layers + 1) > MAX_PARAMETERS:
            raise ModelFileError(f"{where} declares a network of width {width} with {layers} layers, about "
                                 f"{width * width * (layers + 1):.2e} parameters; at most {MAX_PARAMETERS:.2e} "
                                 f"(learners.saving.MAX_PARAMETERS)")


def write(model: Any, path: PathLike, config: Dict[str, Any], state: Dict[str, Any], version: int = 2) -> Path:
    """Write a model file for ``model`` atomically, with its checksum, as format ``version`` (one of :data:`VERSIONS`:
    the oldest that holds what ``state`` carries); returns the path."""
    if version not in VERSIONS:
        raise BeaValueError(f"model file version {version!r}: this code writes versions {VERSIONS}")
    payload = {"format": FORMAT, "version": version, "class": type(model).__name__,
               "config": encode(config, f"the configuration of {type(model).__name__}"), "state": state}
    payload["sha256"] = digest(payload)
    buf = io.BytesIO()
    torch.save(payload, buf)
    data = buf.getvalue()
    return atomic_save(path, lambda f: f.write(data))


def _is(value: Any, expected: Any) -> bool:
    """``value == expected`` for a value read from a file, which may be of any type (a tensor's ``==`` is a tensor)."""
    return type(value) is type(expected) and value == expected


def _payload(path: Path, cls: Type, map_location) -> Dict[str, Any]:
    """The file's dict, its format, version, class, checksum and sizes checked."""
    if not path.exists():
        raise BeaFileNotFoundError(f"{path}: no such model file")
    try:  # a regular file only: a FIFO or a device would block the read
        fh = open_regular(path, "a model file")
    except NotRegularFileError as err:
        raise ModelFileError(str(err)) from None
    try:
        with fh:
            payload = torch.load(fh, map_location=map_location or "cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, ValueError, AttributeError, TypeError, KeyError,
            IndexError, RecursionError, MemoryError, OverflowError) as err:
        raise ModelFileError(f"{path}: not a model file of bea's learners (torch.load with weights_only=True failed: "
                             f"{str(err).splitlines()[0] if str(err) else type(err).__name__})") from None
    if not isinstance(payload, dict) or not _is(payload.get("format"), FORMAT):
        raise ModelFileError(f"{path}: not a model file of bea's learners (no format {FORMAT!r})")
    if not any(_is(payload.get("version"), v) for v in VERSIONS):
        raise ModelFileError(f"{path}: model file format version {payload.get('version')!r}; this version of the "
                             f"learners reads versions {VERSIONS} -- save the model again with the version that loads it")
    if not _is(payload.get("class"), cls.__name__):
        raise ModelFileError(f"{path}: the file holds a {payload.get('class')}, not a {cls.__name__}; load it with "
                             f"{payload.get('class')}.load")
    missing = [k for k in ("config", "state", "sha256") if k not in payload]
    if missing:
        raise ModelFileError(f"{path}: the model file lacks {', '.join(missing)}; it is truncated or was not written by "
                             f"{cls.__name__}.save -- save the model again")
    try:
        sound = _is(payload["sha256"], digest(payload))
    except RecursionError:
        sound = False
    if not sound:
        raise ModelFileError(f"{path}: checksum mismatch -- the model file was modified or corrupted after it was "
                             f"saved; save the model again")
    check_sizes(payload["config"], f"{path}: the configuration")
    check_sizes(payload["state"], f"{path}: the state")
    return payload


def read(path: PathLike, cls: Type, map_location: Union[str, torch.device, None] = None) -> Tuple[Dict, Dict]:
    """``(config, state)`` of a model file written for ``cls``; :class:`ModelFileError` otherwise. Components
    named in the configuration are constructed (in a forked random state)."""
    path = Path(path)
    payload = _payload(path, cls, map_location)
    return _converted(path, cls, lambda: (decode(payload["config"]), payload["state"]))


def _converted(path: Path, cls: Type, build: Callable[[], Any]) -> Any:
    """``build()`` in a forked random state (constructors draw initial weights that the file then replaces), an
    internal error of a file that does not fit ``cls`` (found by its type) turned into :class:`ModelFileError`."""
    with torch.random.fork_rng(devices=[]):
        try:
            return build()
        except ModelFileError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError, RuntimeError, ArithmeticError) as err:
            raise ModelFileError(f"{path}: the model file does not fit {cls.__name__} ({type(err).__name__}: "
                                 f"{' '.join(str(err).split())[:200]}); it was not written by {cls.__name__}.save "
                                 f"of this version, or was edited") from None


def load(path: PathLike, cls: Type, map_location, restore: Callable[[Dict, Dict], Any]) -> Any:
    """The model ``restore(config, state)`` builds from the file ``path`` written for ``cls``; every problem with
    the file is a :class:`ModelFileError` and the global random generator is left as it was."""
    path = Path(path)
    payload = _payload(path, cls, map_location)
    return _converted(path, cls, lambda: restore(decode(payload["config"]), payload["state"]))


class SavableModule:
    """``save``/``load`` for an ``nn.Module`` whose ``__init__`` is :func:`recorded`: config + ``state_dict``."""

    def save(self, path: PathLike) -> Path:
        """Write the model (constructor arguments and ``state_dict``) to ``path`` atomically."""
        return write(self, path, self._init_args, {"state_dict": self.state_dict()})

    @classmethod
    def load(cls, path: PathLike, map_location: Union[str, torch.device, None] = None):
        """The model saved in ``path`` by :meth:`save` (:class:`ModelFileError` for another class or version)."""
        def restore(config, state):
            model = cls(**config)
            model.load_state_dict(state["state_dict"])
            return model.eval()

        return load(path, cls, map_location, restore)
