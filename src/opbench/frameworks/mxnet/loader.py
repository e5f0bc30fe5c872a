"""MXNet itself, importable with NumPy 1.26 and NumPy 2: the one place `import mxnet` runs,
shared by the backend (backend.py), its model builder (models.py) and its profiler reader
(profile.py), so that none imports another at load time.

NumPy: MXNet 1.9.1 (retired upstream) drives libmxnet through ctypes and is not compiled against
NumPy's C API, but while it imports it reads names that NumPy removed: `np.bool` (gone in 1.24,
back in 2.0), and in 2.0 (NEP 52) the constants `PZERO`, `NINF` and their kin, `alltrue`,
`sometrue`, `product`, `round_`, `in1d`, `msort`, `trapz`, and the financial functions NumPy 1.20
had already replaced with stubs. `numpy_names()` puts the missing ones on the numpy module for
the import only and takes them away afterwards, so nothing else in the process sees them: each is
the function NumPy names as its replacement, and a financial name is a stub that raises, as it was
in NumPy 1.26. MXNet keeps what it read at import (mxnet.numpy's constants and fallbacks). Two
of its paths read a removed name when called, and fail under NumPy 2: `mx.np.pad` with a string
mode (`np.compat`) and the Gluon estimator's early stopping (`np.Inf`); under NumPy 1.26 so do
`mx.np`'s boolean indexing and `dtype=bool` defaults (`np.bool`). opbench uses none of them
(it runs MXNet's NDArray and Gluon APIs).

Threads: MXNet 1.9.1's engine sizes its OpenMP teams once, when libmxnet loads
(src/engine/openmp.cc): its cap is MXNET_OMP_MAX_THREADS, else OMP_NUM_THREADS, else half the
processors (1 on a 2-core machine), and each engine worker thread sets its own OpenMP count to
the lower of the cap and the OpenMP default when it starts; omp_set_num_threads or
MXSetNumOMPThreads afterwards only change the calling thread. So the process's thread count
(opbench.frameworks.start_threads) is the cap, MXNET_OMP_MAX_THREADS, for the import, and the
variable is restored afterwards: nothing else in the process or its children sees it.
OMP_NUM_THREADS is left alone on purpose: with it set, the workers skip setting their own count
and inherit the OpenMP runtime's default, which the first library to load the system's libgomp
fixed (a torch.compile kernel, loaded before MXNet, left it at every core: MXNet asked for 1
thread computed its GEMMs on 2, which the thread observation caught).
"""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager

import numpy as np

from opbench.frameworks import threads_at_start

STARTED_WITH = threads_at_start()  # the OpenMP threads MXNet's operators use in this process
_VARIABLES = ("MXNET_OMP_MAX_THREADS",)


@contextmanager
def _environment(values: dict[str, str]):
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _removed_financial(name: str):
    def removed(*args, **kwargs):
        raise RuntimeError(f"numpy.{name} was removed from NumPy in version 1.20 (NEP 32); use numpy_financial")

    removed.__name__ = name
    return removed


# What MXNet 1.9.1 reads while it imports, by the name NumPy 2 (or 1.24, for `bool`) removed.
NUMPY_NAMES = {
    "bool": np.bool_, "PZERO": 0.0, "NZERO": -0.0, "PINF": np.inf, "NINF": -np.inf, "Inf": np.inf,
    "NAN": np.nan, "NaN": np.nan, "alltrue": np.all, "sometrue": np.any, "product": np.prod,
    "round_": np.round, "in1d": lambda a, b, **kw: np.isin(a, b, **kw).ravel(),
    "msort": lambda a: np.sort(a, axis=0), "trapz": getattr(np, "trapezoid", None),
    **{name: _removed_financial(name) for name in ("fv", "ipmt", "irr", "mirr", "nper", "npv", "pmt", "ppmt",
                                                   "pv", "rate")},
}


def _missing(name: str) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # NumPy 1.x warns on its financial stubs
        try:
            getattr(np, name)
        except AttributeError:
            return True
    return False


@contextmanager
def numpy_names():
    """The NUMPY_NAMES this NumPy lacks, on the numpy module inside the block only."""
    added = [name for name, value in NUMPY_NAMES.items() if value is not None and _missing(name)]
    for name in added:
        setattr(np, name, NUMPY_NAMES[name])
    try:
        yield added
    finally:
        for name in added:
            delattr(np, name)


with numpy_names(), _environment(dict.fromkeys(_VARIABLES, str(STARTED_WITH))):
    import mxnet as mx
    from mxnet import autograd, gluon

__all__ = ["NUMPY_NAMES", "STARTED_WITH", "autograd", "gluon", "mx", "numpy_names"]
