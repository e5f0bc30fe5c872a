"""Element-wise activations and softmax on a 2-D (batch, features) input."""

from __future__ import annotations

import math

import numpy as np

from opbench.core.case import dims_label
from opbench.workloads.ops.base import Arg, OpSpec, log_uniform, normal, register, shape_strategy

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


# Forward outputs are checked element by element to ULPS units of roundoff of |f(x)| + |x f'(x)|
# (softmax: of |ref|, each probability to its own precision, plus its conditioning below). That is the function's own
# conditioning: rounding x to the dtype moves f(x) by eps |x f'(x)|, so a correctly rounded
# implementation stays within a few units everywhere, in saturated tails too, where a floor of
# |x| would accept errors many orders larger than the value. Measured with
# studies/tolerance_margins.py and over [-40, 40] by the edge-regime tests (docs).
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


def _edge(r, p):
    """|x| from 1e-6 to 40 evenly over the decades, both signs: the linear region, the bends
    and the saturated tails, where a value is many orders below its argument."""
    return (log_uniform(r, 1e-6, 40.0, p["n"], p["d"]),)


def _softmax_edge(r, p):
    """Rows of logits spread over [-40, 40] (probabilities down to e^-80), a row with one
    dominant logit, a constant row and a row of logits within 1e-6 of each other."""
    x = r.uniform(-40, 40, (p["n"], p["d"])).astype(np.float32)
    x[0] = -40.0
    x[0, p["d"] // 2] = 40.0
    x[1] = 3.0
    x[2] = 1e-6 * normal(r, p["d"])
    return (x,)


EDGE = {"n": 8, "d": 128}


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
        floor=lambda p, x: np.abs(x * derivative(x, forward(x))),
        underflow=lambda p, x: 1 + np.abs(x),
        edge=_edge,
        edge_problem=EDGE,
    )


for _name in ELEMENTWISE:
    register(_elementwise_spec(_name))


def _softmax_conditioning(p, x):
    """y_i (|x_i - m| + sum_j y_j |x_j - m|), m the row's maximum: the shifted logits x - m round
    by a unit of roundoff of their size, and exp and the normalising sum turn that into an error
    of y_i (a probability of 1e-29 at x_i - m = -65 is off by 65 units)."""
    y, shifted = _softmax(x), np.abs(x - x.max(axis=-1, keepdims=True))
    return y * (shifted + np.sum(y * shifted, axis=-1, keepdims=True))


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
        conditioning=_softmax_conditioning,
        underflow=lambda p, x: 1 + np.abs(x),
        edge=_softmax_edge,
        edge_problem=EDGE,
        notes="softmax over the last axis",
    )
)
