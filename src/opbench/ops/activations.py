"""Element-wise activations and softmax on a 2-D (batch, features) input."""

from __future__ import annotations

import math

import numpy as np

from opbench.cases import dims_label
from opbench.ops.base import Arg, OpSpec, normal, register, shape_strategy

SHAPES = {
    "quick": ({"n": 256, "d": 1024},),
    "full": ({"n": 256, "d": 1024}, {"n": 1024, "d": 4096}, {"n": 4096, "d": 4096}),
}

_erfc = np.frompyfunc(math.erfc, 1, 1)


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-x))


def _phi(x):
    """Standard normal CDF, as GELU defines it, through erfc: 1 + erf(x/sqrt(2)) cancels for
    negative x (at x = -8.4 it is 0 in float64, where the CDF is 2.6e-17)."""
    return 0.5 * _erfc(-x / math.sqrt(2.0)).astype(x.dtype)


def _softmax(x):
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


# Forward outputs are checked element by element to ULPS units of roundoff of |ref| + |x|
# (softmax: of |ref| alone, each probability to its own precision): an element-wise function
# rounds in proportion to its argument, so a slope, approximation or truncation error shows
# wherever the output is small. Measured with benchmarks/tolerance_margins.py (README).
ULPS = 64

# name: (forward(x), derivative(x, y) with y = forward(x), nominal FLOPs per element)
ELEMENTWISE = {
    "sigmoid": (_sigmoid, lambda x, y: y * (1 - y), 4),
    "relu": (lambda x: np.maximum(x, 0), lambda x, y: (x > 0).astype(x.dtype), 1),
    "tanh": (np.tanh, lambda x, y: 1 - y * y, 4),
    "softplus": (lambda x: np.logaddexp(x, 0).astype(x.dtype), lambda x, y: _sigmoid(x), 4),
    "softsign": (lambda x: x / (1 + np.abs(x)), lambda x, y: 1 / (1 + np.abs(x)) ** 2, 3),
    "gelu": (lambda x: x * _phi(x), lambda x, y: _phi(x) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi), 8),
}


def _make(r, p):
    return (normal(r, p["n"], p["d"]) * 3,)


def _small():
    return shape_strategy(n=(1, 8), d=(1, 33))


def _label(p):
    return dims_label(p["n"], p["d"])


def _elementwise_spec(name: str) -> OpSpec:
    forward, derivative, flops_per = ELEMENTWISE[name]
    return OpSpec(
        name=name,
        family="activation",
        args=(Arg("x"),),
        make=_make,
        reference=lambda p, x: forward(x),
        vjp=lambda p, arrays, ct: (ct * derivative(arrays[0], forward(arrays[0])),),
        flops=lambda p: flops_per * p["n"] * p["d"],
        shapes=SHAPES,
        label=_label,
        small=_small,
        fixed={"n": 3, "d": 17},
        ulps=ULPS,
        floor=lambda p, x: np.abs(x),
    )


for _name in ELEMENTWISE:
    register(_elementwise_spec(_name))


def _softmax_vjp(p, arrays, ct):
    y = _softmax(arrays[0])
    return (y * (ct - np.sum(ct * y, axis=-1, keepdims=True)),)


register(
    OpSpec(
        name="softmax",
        family="activation",
        args=(Arg("x"),),
        make=_make,
        reference=lambda p, x: _softmax(x),
        vjp=_softmax_vjp,
        flops=lambda p: 5 * p["n"] * p["d"],
        shapes=SHAPES,
        label=_label,
        small=_small,
        fixed={"n": 3, "d": 17},
        ulps=ULPS,
        floor=lambda p, x: 0.0,
        notes="softmax over the last axis",
    )
)
