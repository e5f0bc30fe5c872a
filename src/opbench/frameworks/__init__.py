"""Finding and loading framework backends without importing any framework up front.

Every framework is one folder of this package, named after it, and its `backend.py` declares it
as `FRAMEWORK = Framework(...)` and defines `BACKEND`; the folder also holds the framework's model
builders, profiler reader and distributed engines, and no other module imports the framework.
`declared()` reads the declarations from source (nothing is imported), so that adding a framework
is adding its folder, here or in a folder named by OPBENCH_FRAMEWORKS_PATH (os.pathsep-separated
folders searched after this one: a framework kept outside opbench's tree);
`installed(name)` asks importlib where the package would come from; `load(name)` imports the
backend module (and with it the framework) on first use and turns any failure into an
Unavailable carrying the reason.
"""

from __future__ import annotations

import ast
import functools
import importlib
import importlib.util
import os
import pkgutil
import threading
from pathlib import Path
from typing import Any

from opbench.core.errors import one_line
from opbench.frameworks.base import Backend, Framework, Unavailable

EXTRA_PATH = "OPBENCH_FRAMEWORKS_PATH"
__path__ += [folder for folder in os.environ.get(EXTRA_PATH, "").split(os.pathsep) if folder]


@functools.cache
def declared() -> dict[str, Framework]:
    """Every backend's Framework, by name, in their declared order."""
    found = []
    seen = set()
    for module in pkgutil.iter_modules(__path__):
        path = Path(module.module_finder.path) / module.name / "backend.py"
        if not module.ispkg or not path.is_file() or module.name in seen:
            continue
        seen.add(module.name)
        framework = _declaration(ast.parse(path.read_text(encoding="utf-8")), path)
        if framework.name != module.name:
            raise ValueError(f"{path}: declares framework {framework.name!r}; its folder must be named after it")
        found.append(framework)
    return {f.name: f for f in sorted(found, key=lambda f: (f.order, f.name))}


def _declaration(tree: ast.Module, path: Path) -> Framework:
    """The literal arguments of the module's top-level `FRAMEWORK = Framework(...)`."""
    for node in tree.body:
        if (isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["FRAMEWORK"]
                and isinstance(node.value, ast.Call) and not node.value.args):
            try:
                return Framework(**{k.arg: ast.literal_eval(k.value) for k in node.value.keywords})
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{path}: FRAMEWORK = Framework(...) takes literal keyword arguments: {exc}") from None
    raise ValueError(f"{path}: a backend module declares FRAMEWORK = Framework(...) at its top level")


def taking_part(suite: str) -> tuple[str, ...]:
    """The frameworks that take part in `suite` ("ops" or "models")."""
    return tuple(name for name, f in declared().items() if suite in f.suites)


PACKAGES = {name: f.package for name, f in declared().items()}


def package(name: str) -> Any:
    """Framework `name`'s own package (torch, tensorflow, jax, mxnet, numpy), imported: what a
    user's implementation or `fw` test is handed (opbench.api)."""
    return importlib.import_module(PACKAGES[name])

_loaded: dict[str, Backend | Unavailable] = {}
_lock = threading.Lock()
_start: dict[str, Any] = {}  # what a measuring process said before loading a framework


def start_threads(n: int) -> None:
    """The thread count of this process, for frameworks that fix theirs when they start (MXNet's
    engine sizes its OpenMP teams from the environment once, at import). Every measuring process
    says it before it loads a backend; a framework already started keeps the count it started with,
    and the thread check then reports the mismatch."""
    _start["threads"] = n


def expect(names: tuple[str, ...]) -> None:
    """The frameworks this process may load (its session's --framework). A framework imported
    before another where both are used (load_before: TensorFlow before torch can crash the
    process) has it imported first only where the other is among these: a worker of TensorFlow
    alone never holds torch, whose import would be in every TensorFlow figure (memory included)."""
    _start["expected"] = tuple(names)


def _expected(name: str) -> bool:
    return name in _start.get("expected", (name,))


def threads_at_start() -> int:
    """What start_threads() said, or every core this process may run on."""
    return _start.get("threads") or len(os.sched_getaffinity(0))


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
            for first in declared()[name].load_before:
                if first not in _loaded and installed(first) and _expected(first):
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
        module = importlib.import_module(f"opbench.frameworks.{name}.backend")
        return module.BACKEND()
    except Exception as exc:
        return Unavailable(f"{name} failed to import: {one_line(exc, limit=10_000)}")


__all__ = ["Backend", "Framework", "Unavailable", "declared", "expect", "installed", "load", "start_threads",
           "taking_part", "threads_at_start"]
