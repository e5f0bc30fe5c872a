"""The models' float32 and mixed-precision emulations, kept on disk between processes.

An emulation (model_reference.emulated_errors and its kin) runs the NumPy reference DRAWS times in
float32: a minute for the LSTM on a 2-core host, made again by every pytest process that checks the
same model (make test runs four). What it measures is NumPy's own rounding of a deterministic
computation, so a process on the same arithmetic gets the same numbers: the key of a kept result is
its arguments and everything that decides that rounding here (NumPy's version and BLAS, the BLAS
kernels chosen for this CPU, the CPU's flags, the reference's own source). Results are kept only
where OPBENCH_REFERENCE_CACHE names a folder (make sets one inside the project, which make clean
removes) and only for synthetic data (a --data-dir may change under the same name). A kept file
that cannot be read is computed again.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import pickle
import platform
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from opbench.core.files import replace_atomic
from opbench.harness.roofline import read_cpu

VARIABLE = "OPBENCH_REFERENCE_CACHE"
_ROOT = Path(__file__).resolve().parents[1]  # src/opbench
# The code whose arithmetic an emulation runs: the references, their data and inputs, the emulations.
_SOURCES = ("workloads", "core/inputs.py", "core/layouts.py", "suites/model_reference.py")


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


_ABSENT = object()
# How long a process waits for another that is making the same result before making it itself: a
# bound on a hang (the LSTM's emulation takes about a minute on a 2-core host).
WAIT_S = 900.0


def _read(path: Path) -> Any:
    try:
        return pickle.loads(path.read_bytes())
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError, IndexError, TypeError):
        return _ABSENT


@contextlib.contextmanager
def _computing(path: Path) -> Iterator[None]:
    """Hold `path`'s lock file while the block makes its result, so that processes that need the
    same result at the same time (make test's two lanes, the workers of a run) make it once: the
    others wait here, then read it. The kernel drops the lock of a process that dies. Where there
    is no flock, or the lock file cannot be made, or the wait passes WAIT_S, the block runs anyway."""
    try:
        import fcntl

        lock = open(path.with_suffix(".lock"), "a")  # closed below, after the block
    except (ImportError, OSError):
        yield
        return
    try:
        deadline = time.monotonic() + WAIT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:  # another process holds it
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            except OSError:  # a file system without locks
                break
        yield
    finally:
        lock.close()  # releases the lock


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
        if (value := _read(path)) is not _ABSENT:
            return value
        with _computing(path):  # a process making the same result meanwhile: wait for it, then read it
            if (value := _read(path)) is not _ABSENT:
                return value
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
