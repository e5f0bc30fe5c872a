"""MXNet itself, importable with the NumPy this project pins: the one place `import mxnet` runs,
shared by the backend (mxnet) and its model builder (mxnet_models) so that neither imports the
other at load time."""

from __future__ import annotations

import warnings

import numpy as np

with warnings.catch_warnings():
    warnings.simplefilter("ignore", FutureWarning)
    if not hasattr(np, "bool"):
        np.bool = np.bool_  # MXNet 1.9 still uses the alias NumPy 1.24 removed

import mxnet as mx
from mxnet import autograd, gluon

__all__ = ["autograd", "gluon", "mx"]
