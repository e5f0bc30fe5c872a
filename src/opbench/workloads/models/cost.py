"""The least work a model's call must do, counted from its spec: the products of its dense,
convolution and LSTM layers in one inference or one training step. The physical roofline holds
a model's timed call to it as it holds an operator's to its FLOPs: a call faster than the device
can do this much did not wait for its work, or did not do it (an inference that returns its
first result again was timed at 0.35 us where the model takes 1.48 ms).

Every figure is a floor, never an estimate, so that no correct call can pass the ceiling:
- a convolution counts its output elements x input channels multiply-adds, its k x k window
  divided out: Winograd and FFT divide the products by less than k^2 (ops.conv's algorithm_gain),
  for the weight gradient (a correlation with a k x k output) as for the forward pass;
- an LSTM's first step multiplies a zero state, which an implementation may skip;
- a training step counts the forward products and each weight's gradient (the same count); the
  input gradients, the elementwise layers and the optimizer are left out.
"""

from __future__ import annotations

import math

from opbench.workloads.models import spec
from opbench.workloads.models.spec import Layer, ModelSpec, output_shape, walk

FLOPS_PER_MAC = 2


def _lstm(layer: spec.LSTM, shape: tuple) -> int:
    steps, features = shape
    return 4 * layer.units * (steps * features + (steps - 1) * layer.units)


def _none(layer: Layer, shape: tuple) -> int:
    return 0


# Each layer kind's least multiply-adds per example in one forward pass, from its input shape (a
# residual block's are its layers', which walk() visits)
LEAST_MACS = {
    spec.Dense: lambda layer, shape: math.prod(shape) * layer.units,
    spec.Conv2D: lambda layer, shape: math.prod(output_shape(layer, shape)) * shape[0],
    spec.LSTM: _lstm,
    spec.BatchNorm: _none,
    spec.Pool2D: _none,
    spec.GlobalAvgPool: _none,
    spec.Flatten: _none,
    spec.Residual: _none,
}


def least_flops(model: ModelSpec, batch: int, direction: str) -> float:
    """The FLOPs no correct `direction` ("inference" or "training") call of `model` at `batch`
    can do without."""
    forward = sum(LEAST_MACS[type(layer)](layer, shape) for _, layer, shape in walk(model.layers, model.input_shape))
    macs = batch * forward
    return float(FLOPS_PER_MAC * macs * (1 if direction == "inference" else 2))
