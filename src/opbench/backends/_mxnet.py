"""MXNet itself, importable with the NumPy this project pins: the one place `import mxnet`
runs, shared by the backend (mxnet) and its model builder (mxnet_models) so that neither imports
the other at load time.

Threads: MXNet 1.9.1's engine sizes its OpenMP teams once, when libmxnet loads
(src/engine/openmp.cc): its cap is MXNET_OMP_MAX_THREADS, else OMP_NUM_THREADS, else half the
processors (1 on a 2-core machine), and each engine worker thread sets its own OpenMP count to
the lower of the cap and the OpenMP default when it starts; omp_set_num_threads or
MXSetNumOMPThreads afterwards only change the calling thread. So the process's thread count
(opbench.backends.start_threads) is the cap, MXNET_OMP_MAX_THREADS, for the import, and the
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

from opbench.backends import threads_at_start

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


with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    if not hasattr(np, "bool"):
        np.bool = np.bool_  # MXNet 1.9 still uses the alias NumPy 1.24 removed

with _environment(dict.fromkeys(_VARIABLES, str(STARTED_WITH))):
    import mxnet as mx
    from mxnet import autograd, gluon

__all__ = ["STARTED_WITH", "autograd", "gluon", "mx"]
