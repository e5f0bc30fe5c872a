"""The models' float32 and mixed-precision emulations, kept on disk between processes.

An emulation (equivalence.emulated_errors and its kin) runs the NumPy reference DRAWS times in
float32: a minute for the LSTM on a 2-core host, made again by every pytest process that gates the
same model (make test runs four). What it measures is NumPy's own rounding of a deterministic
computation, so a process on the same arithmetic gets the same numbers: the key of a kept result is
its arguments and everything that decides that rounding here (NumPy's version and BLAS, the BLAS
kernels chosen for this CPU, the CPU's flags, the reference's own source). Results are kept only
where OPBENCH_REFERENCE_CACHE names a folder (make sets one inside the project, which make clean
removes) and only for synthetic data (a --data-dir may change under the same name). A kept file
that cannot be read is computed again.
"""

from __future__ import annotations

import functools
import hashlib
import os
import pickle
import platform
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from opbench.core.files import replace_atomic
from opbench.harness.roofline import read_cpu

VARIABLE = "OPBENCH_REFERENCE_CACHE"
_ROOT = Path(__file__).resolve().parents[2]  # src/opbench
# The code whose arithmetic an emulation runs: the references, their data and inputs, the models' checks.
_SOURCES = ("workloads", "core/inputs.py", "core/layouts.py", "suites/models")


def _blas() -> str:
    """NumPy's BLAS and the kernels it picked for this CPU (OpenBLAS's core type)."""
    import numpy as np

    parts = [np.__version__]
    try:
        import threadpoolctl

        parts += [f"{i.get('internal_api')} {i.get('version')} {i.get('architecture')} {i.get('num_threads')}"
                  for i in threadpoolctl.threadpool_info() if i.get("user_api") == "blas"]
    except ImportError:
        parts.append(os.environ.get("OPENBLAS_CORETYPE", ""))
    return "; ".join(parts)


@functools.cache
def arithmetic() -> str:
    """A digest of everything besides the arguments that decides an emulation's rounding here."""
    digest = hashlib.sha256()
    for part in (sys.version, platform.machine(), _blas(), " ".join(sorted(read_cpu().flags))):
        digest.update(part.encode())
    for name in _SOURCES:
        path = _ROOT / name
        for source in sorted(path.rglob("*.py")) if path.is_dir() else [path]:
            digest.update(str(source.relative_to(_ROOT)).encode())
            digest.update(source.read_bytes())
    return digest.hexdigest()


def kept(context: Callable[[tuple], Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A function (hashable arguments, the data folder third, a small picklable result) remembered
    for the process and, where OPBENCH_REFERENCE_CACHE is set and the data are synthetic, on disk,
    keyed also by `context(args)`: what else it reads at run time (the model's spec, a setting)."""
    return functools.partial(_kept, context=context)


def _kept(fn: Callable[..., Any], context: Callable[[tuple], Any]) -> Callable[..., Any]:
    memo = functools.cache(fn)

    @functools.cache
    def stored(folder: str, *args):
        """`fn(*args)` read from `folder`, or made and written there; once per process."""
        what = (fn.__module__, fn.__qualname__, args, context(args), arithmetic())
        path = Path(folder) / f"{fn.__name__}-{hashlib.sha256(repr(what).encode()).hexdigest()[:40]}.pickle"
        try:
            return pickle.loads(path.read_bytes())
        except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, IndexError, TypeError):
            pass
        value = memo(*args)
        try:
            replace_atomic(path, lambda tmp: tmp.write_bytes(pickle.dumps(value)))
        except OSError:
            pass  # a folder that cannot be written costs the next process the computation, nothing more
        return value

    @functools.wraps(fn)
    def wrapper(*args):
        folder = os.environ.get(VARIABLE)
        return stored(folder, *args) if folder and not args[2] else memo(*args)

    def cache_clear() -> None:
        memo.cache_clear()
        stored.cache_clear()

    wrapper.cache_clear = cache_clear  # type: ignore[attr-defined]
    return wrapper
