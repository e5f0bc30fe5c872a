"""The NumPy backend: the reference implementations, run in the benchmark's dtype.

NumPy is also the oracle: every other backend's results are checked against these functions
evaluated in float64. Its BLAS threads are pinned through OpenBLAS's own C API.
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from opbench.frameworks.base import Backend, Call, Framework
from opbench.workloads import ops

FRAMEWORK = Framework(name="numpy", title="NumPy", package="numpy", modes=("eager",), order=0, suites=("ops",))

_DTYPES = {"float32": np.float32, "float16": np.float16}


class _OpenBLAS:
    """OpenBLAS's thread count, through the library NumPy loaded (None when not OpenBLAS)."""

    NAMES = ("openblas_{}_num_threads64_", "scipy_openblas_{}_num_threads64_", "openblas_{}_num_threads")

    def __init__(self) -> None:
        self.get: Callable[[], int] | None = None
        self.set: Callable[[int], None] | None = None
        libs = os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs", "*openblas*")
        for path in glob.glob(libs):
            lib = ctypes.CDLL(path)
            for pattern in self.NAMES:
                getter = getattr(lib, pattern.format("get"), None)
                setter = getattr(lib, pattern.format("set"), None)
                if getter and setter:
                    self.get, self.set = getter, setter
                    return


class NumpyOp:
    """A reference operator as a benchmark implementation, with its gradient: the reference itself,
    or the NumPy implementation an operator declared outside opbench gives (opbench.api)."""

    def __init__(self, spec: ops.OpSpec) -> None:
        self.spec = spec
        own = spec.implementations.get(FRAMEWORK.name)
        self._compute = own() if own is not None else spec.reference

    def __call__(self, p, *args):
        return self._compute(p, *args)


class NumpyBackend(Backend):
    framework = FRAMEWORK

    def __init__(self) -> None:
        self._blas = _OpenBLAS()

    def version(self) -> str:
        return np.__version__

    def gpu_unavailable(self) -> str | None:
        return "NumPy runs on the CPU only"

    def dtypes(self, device: str) -> tuple[str, ...]:
        return tuple(_DTYPES)

    def from_numpy(self, array, device, dtype):
        return np.array(array, dtype=_DTYPES[dtype]) if array.dtype.kind == "f" else np.array(array)

    def to_numpy(self, tensor):
        return np.asarray(tensor)

    def sync(self, device: str) -> None:
        return None

    def set_threads(self, n: int) -> None:
        if self._blas.set:
            self._blas.set(n)

    def threads(self) -> int:
        return int(self._blas.get()) if self._blas.get else 1

    def op(self, name: str):
        spec = ops.REGISTRY.get(name)
        if spec is None:
            return None
        if spec.creation:
            return _CREATION[name]
        return NumpyOp(spec)

    def _ops_module(self):  # pragma: no cover - op() is overridden
        return None

    def implemented(self) -> frozenset[str]:
        return frozenset(ops.REGISTRY)  # the references themselves

    def compiled(self, fn, mode, device):
        if mode != "eager":
            raise self.no_mode(mode)
        return fn

    def forward(self, impl, p, args, mode, device) -> Call:
        if mode != "eager":
            raise self.no_mode(mode)
        return lambda: impl(p, *args)

    def backward(self, impl, p, args, argnums, cotangent, mode, device) -> Call:
        if mode != "eager":
            raise self.no_mode(mode)

        def call():
            out = impl(p, *args)
            grads = impl.spec.vjp(p, tuple(args), cotangent)
            return out, list(grads)

        return call

    def info(self) -> dict[str, Any]:
        config = np.show_config(mode="dicts") if np.lib.NumpyVersion(np.__version__) >= "1.25.0" else {}
        blas = config.get("Build Dependencies", {}).get("blas", {})
        return {"version": np.__version__, "blas": f"{blas.get('name', '?')} {blas.get('version', '')}".strip()}


def _dtype(dtype: str):
    return _DTYPES[dtype]


def _from_numpy(p, device, dtype, x):
    return np.array(x, dtype=_dtype(dtype))


def _from_list(p, device, dtype, x: Sequence):
    return np.array(x, dtype=_dtype(dtype))


def _zeros(p, device, dtype):
    return np.zeros(p["shape"], dtype=_dtype(dtype))


def _random_normal(p, device, dtype):
    return np.random.default_rng().standard_normal(p["shape"], dtype=np.float32).astype(_dtype(dtype), copy=False)


_CREATION = {"from_numpy": _from_numpy, "from_list": _from_list, "zeros": _zeros, "random_normal": _random_normal}

BACKEND = NumpyBackend
