"""MXNet 1.9.1 on NumPy 1.26 and NumPy 2 (opbench.frameworks.mxnet.loader): the names NumPy removed are
lent to the numpy module for MXNet's import only, and each stands for what NumPy names as its
replacement."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from opbench import frameworks

try:
    frameworks.load("mxnet")
    from opbench.frameworks.mxnet import loader
except frameworks.Unavailable as exc:  # pragma: no cover - MXNet is part of the tested stack
    pytest.skip(str(exc), allow_module_level=True)

PROBE = """
import warnings, numpy as np
def missing():
    out = []
    for name in {names!r}:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                getattr(np, name)
            except AttributeError:
                out.append(name)
    return out
before = missing()
from opbench.frameworks.mxnet import loader
print(before == missing(), before, loader.mx.__version__)
"""


def test_the_names_are_lent_for_the_import_only():
    code = PROBE.format(names=sorted(loader.NUMPY_NAMES))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    same, *_ = out.stdout.strip().splitlines()[-1].split(" ", 1)
    assert same == "True", out.stdout + out.stderr


def test_numpy_names_adds_what_is_missing_and_takes_it_back():
    with loader.numpy_names() as added:
        for name in added:
            assert getattr(np, name) is loader.NUMPY_NAMES[name]
    for name in added:
        assert loader._missing(name), name
    if np.__version__.startswith("2."):
        assert {"PZERO", "NINF", "alltrue", "sometrue", "product", "mirr"} <= set(added)


def test_each_lent_name_computes_what_numpy_named_as_its_replacement():
    names, a = loader.NUMPY_NAMES, np.array([[3.0, -1.0], [0.5, 2.0]])
    assert names["PZERO"] == 0.0 and np.signbit(names["NZERO"]) and names["NINF"] == -np.inf
    assert names["alltrue"](a > -2) and names["sometrue"](a > 2.5) and names["product"](a) == np.prod(a)
    assert np.array_equal(names["msort"](a), np.sort(a, axis=0))
    assert np.array_equal(names["in1d"](a, [0.5, 3.0]), np.array([True, False, True, False]))
    assert np.array_equal(names["round_"](a * 1.26, 1), np.round(a * 1.26, 1))
    if names["trapz"] is not None:
        assert names["trapz"]([0.0, 1.0, 2.0]) == 2.0
    with pytest.raises(RuntimeError, match="numpy_financial"):
        names["npv"](0.1, [1.0, 2.0])


def test_mxnet_computes_against_numpy_on_this_numpy():
    mx = loader.mx
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((64, 32), np.float32), rng.standard_normal((32, 16), np.float32)
    got = mx.nd.dot(mx.nd.array(a), mx.nd.array(b)).asnumpy()
    # two float32 products of length 32, any summation order: within 2 x 32 units of |a| @ |b| (Higham)
    assert np.all(np.abs(got - a @ b) <= 2 * 32 * 2.0**-24 * (np.abs(a) @ np.abs(b)))
    assert got.dtype == np.float32
