"""A framework-neutral model description: a sequence of layer specs, an input shape, a loss and
an optimizer. Backends build native models from it; no framework code lives here.

Canonical parameter layouts (what `init_params` makes and every builder maps from):
- Dense: W (in, out), b (out,)
- Conv2D: W (out, in, k, k) "OIHW", b (out,); images are NCHW
- LSTM: Wx (features, 4H), Wh (H, 4H), b (4H,), gates in the order input, forget, cell, output;
  one bias per gate (frameworks with two biases get b and zeros)
- Flatten flattens (C, H, W) in that order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from opbench.ops.conv import out_size


@dataclass(frozen=True)
class Dense:
    units: int
    activation: str | None = None


@dataclass(frozen=True)
class Conv2D:
    filters: int
    kernel: int
    stride: int = 1
    pad: int = 0
    activation: str | None = None


@dataclass(frozen=True)
class Pool2D:
    kind: str  # "max" or "avg"
    size: int
    stride: int


@dataclass(frozen=True)
class Flatten:
    pass


@dataclass(frozen=True)
class LSTM:
    """One LSTM layer over (N, T, F) input; passes on the last hidden state (N, units)."""

    units: int


Layer = Dense | Conv2D | Pool2D | Flatten | LSTM


@dataclass(frozen=True)
class Optimizer:
    name: str  # "sgd" or "adam"
    lr: float
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8  # set explicitly: the frameworks' defaults differ (1e-7 in Keras)


@dataclass(frozen=True)
class ModelSpec:
    """A whole workload: layers, input (without the batch axis), classes, optimizer, batch sizes.
    The loss is softmax cross-entropy over integer labels, averaged over the batch."""

    name: str
    input_shape: tuple[int, ...]
    layers: tuple[Layer, ...]
    optimizer: Optimizer
    batch: dict[str, int]  # per profile
    dataset: str  # "mnist", "cifar10", "imdb": what --data-dir data it reads
    notes: str = ""

    @property
    def classes(self) -> int:
        return self.layers[-1].units

    @property
    def input_kind(self) -> str:
        return {3: "image", 2: "sequence", 1: "vector"}[len(self.input_shape)]


def output_shape(layer: Layer, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape (without batch) that `layer` produces from `shape`."""
    if isinstance(layer, Dense):
        return (layer.units,)
    if isinstance(layer, Conv2D):
        c, h, w = shape
        return (layer.filters, *(out_size(s, layer.kernel, layer.stride, layer.pad) for s in (h, w)))
    if isinstance(layer, Pool2D):
        c, h, w = shape
        return (c, *(out_size(s, layer.size, layer.stride, 0) for s in (h, w)))
    if isinstance(layer, Flatten):
        return (int(np.prod(shape)),)
    if isinstance(layer, LSTM):
        return (layer.units,)
    raise TypeError(f"unknown layer {layer!r}")


def layer_inputs(model: ModelSpec) -> list[tuple[int, ...]]:
    """The input shape of every layer, in order."""
    shapes, shape = [], model.input_shape
    for layer in model.layers:
        shapes.append(shape)
        shape = output_shape(layer, shape)
    return shapes


def param_shapes(model: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Canonical parameter names and shapes, e.g. {"0.W": (784, 128), "0.b": (128,), ...}."""
    shapes: dict[str, tuple[int, ...]] = {}
    for i, (layer, shape) in enumerate(zip(model.layers, layer_inputs(model), strict=True)):
        if isinstance(layer, Dense):
            shapes[f"{i}.W"], shapes[f"{i}.b"] = (int(np.prod(shape)), layer.units), (layer.units,)
        elif isinstance(layer, Conv2D):
            shapes[f"{i}.W"] = (layer.filters, shape[0], layer.kernel, layer.kernel)
            shapes[f"{i}.b"] = (layer.filters,)
        elif isinstance(layer, LSTM):
            h = layer.units
            shapes[f"{i}.Wx"], shapes[f"{i}.Wh"], shapes[f"{i}.b"] = (shape[-1], 4 * h), (h, 4 * h), (4 * h,)
    return shapes


def init_params(model: ModelSpec, seed: int = 0) -> dict[str, np.ndarray]:
    """One parameter set for every framework: Glorot-uniform weights and N(0, 0.1^2) biases (not
    zeros, and not so small that a wrong bias mapping or a swapped LSTM gate bias hides inside
    the gate's tolerance), from a seeded generator."""
    r = np.random.default_rng([seed, len(model.name), sum(map(ord, model.name))])
    params = {}
    for name, shape in param_shapes(model).items():
        if name.endswith(".b"):
            params[name] = (0.1 * r.standard_normal(shape)).astype(np.float32)
            continue
        if len(shape) == 4:  # OIHW
            fan_in, fan_out = shape[1] * shape[2] * shape[3], shape[0] * shape[2] * shape[3]
        else:
            fan_in, fan_out = shape[0], shape[1]
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        params[name] = r.uniform(-limit, limit, shape).astype(np.float32)
    return params


def count_params(model: ModelSpec) -> int:
    return int(sum(np.prod(s) for s in param_shapes(model).values()))
