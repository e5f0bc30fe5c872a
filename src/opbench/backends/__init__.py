"""Finding and loading framework backends without importing any framework up front.

`installed(name)` asks importlib where the package would come from and imports nothing;
`load(name)` imports the backend module (and with it the framework) on first use and turns any
failure into an Unavailable carrying the reason.
"""

from __future__ import annotations

import importlib
import importlib.util
import threading

from opbench.backends.base import Backend, Unavailable

PACKAGES = {"numpy": "numpy", "torch": "torch", "tensorflow": "tensorflow", "mxnet": "mxnet"}
# Loaded first when installed: importing TensorFlow before torch can crash the process.
LOAD_BEFORE = {"tensorflow": ("torch",)}

_loaded: dict[str, Backend | Unavailable] = {}
_lock = threading.Lock()


def installed(name: str) -> bool:
    """Whether the framework's package can be found; imports nothing."""
    try:
        return importlib.util.find_spec(PACKAGES[name]) is not None
    except (ImportError, ValueError):
        return False


def load(name: str) -> Backend:
    """The backend for framework `name`; raises Unavailable with the reason it cannot be used."""
    with _lock:
        if name not in _loaded:
            for first in LOAD_BEFORE.get(name, ()):
                if first not in _loaded and installed(first):
                    _loaded[first] = _import(first)
            _loaded[name] = _import(name)
    result = _loaded[name]
    if isinstance(result, Unavailable):
        raise result
    return result


def _import(name: str) -> Backend | Unavailable:
    if not installed(name):
        return Unavailable(f"{name} is not installed (pip install 'opbench[{name}]')")
    try:
        module = importlib.import_module(f"opbench.backends.{name}")
        return module.BACKEND()
    except Exception as exc:
        first_line = (str(exc).strip().splitlines() or [""])[0]
        return Unavailable(f"{name} failed to import: {type(exc).__name__}: {first_line}")


def loaded() -> dict[str, Backend]:
    """The backends loaded so far in this process."""
    return {k: v for k, v in _loaded.items() if isinstance(v, Backend)}


__all__ = ["Backend", "Unavailable", "installed", "load", "loaded"]
