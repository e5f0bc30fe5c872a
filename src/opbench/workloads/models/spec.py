"""A framework-neutral model description: a sequence of layer specs, an input shape, a loss and
an optimizer. Backends build native models from it; no framework code lives here.

Canonical parameter layouts (what `init_params` makes and every builder maps from):
- Dense: W (in, out), b (out,)
- Conv2D: W (out, in, k, k) "OIHW", b (out,); images are NCHW
- LSTM: Wx (features, 4H), Wh (H, 4H), b (4H,), gates in the order input, forget, cell, output;
  one bias per gate (frameworks with two biases get b and zeros)
- BatchNorm over the channel axis 1: gamma, beta (C,) trained; mean, var (C,) the running
  statistics, state that the optimizer never touches
- Flatten flattens (C, H, W) in that order.

Parameter names are the layer's path: "3.W" for top-level layer 3, "3.0.W" for layer 0 of
residual block 3's body, "3.s0.W" for layer 0 of its shortcut.

Each layer kind carries its own shape rules: `output(shape)`, the shape (without the batch) it makes
from its input's, and `parameters(shape)`, its parameters' names and shapes in the layouts above.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from opbench.workloads.ops.conv import out_size


@dataclass(frozen=True)
class Dense:
    units: int
    activation: str | None = None

    def output(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (self.units,)

    def parameters(self, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        return {"W": (int(np.prod(shape)), self.units), "b": (self.units,)}


@dataclass(frozen=True)
class Conv2D:
    filters: int
    kernel: int
    stride: int = 1
    pad: int = 0
    activation: str | None = None
    bias: bool = True  # False before a batch norm, whose beta makes a bias redundant (its gradient is 0)

    def output(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (self.filters, *(out_size(s, self.kernel, self.stride, self.pad) for s in shape[1:]))

    def parameters(self, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        weights = {"W": (self.filters, shape[0], self.kernel, self.kernel)}
        return {**weights, "b": (self.filters,)} if self.bias else weights


@dataclass(frozen=True)
class Pool2D:
    kind: str  # "max" or "avg"
    size: int
    stride: int

    def output(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (shape[0], *(out_size(s, self.size, self.stride, 0) for s in shape[1:]))

    def parameters(self, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        return {}


@dataclass(frozen=True)
class Flatten:
    def output(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (int(np.prod(shape)),)

    def parameters(self, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        return {}


@dataclass(frozen=True)
class LSTM:
    """One LSTM layer over (N, T, F) input; passes on the last hidden state (N, units)."""

    units: int

    def output(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return (self.units,)

    def parameters(self, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        h = self.units
        return {"Wx": (shape[-1], 4 * h), "Wh": (h, 4 * h), "b": (4 * h,)}


@dataclass(frozen=True)
class BatchNorm:
    """Batch normalisation over axis 1 (channels). Training normalises with the batch's mean and
    biased variance and moves the running statistics: running = momentum * running + (1 - momentum)
    * batch, momentum being the fraction kept (Keras' and Gluon's convention; PyTorch's momentum
    is 1 - this). Inference normalises with the running statistics. `frozen`: inference behaviour
    in training too, gamma and beta not trained (fine-tuning with frozen statistics; Keras'
    BatchNormalization with trainable=False)."""

    momentum: float = 0.9
    eps: float = 1e-5
    activation: str | None = None
    frozen: bool = False

    def output(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape

    def parameters(self, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        return dict.fromkeys(("gamma", "beta", "mean", "var"), shape[:1])


@dataclass(frozen=True)
class GlobalAvgPool:
    """(C, H, W) -> (C,): the mean over space."""

    def output(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        return shape[:1]

    def parameters(self, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        return {}


@dataclass(frozen=True)
class Residual:
    """activation(body(x) + shortcut(x)). `shortcut`: () is the identity, a tuple of layers a
    projection (e.g. a strided 1x1 convolution and its batch norm), None no shortcut at all
    (He et al.'s "plain" block)."""

    body: tuple
    shortcut: tuple | None = ()
    activation: str | None = "relu"

    def output(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        for inner in self.body:
            shape = output_shape(inner, shape)
        return shape

    def parameters(self, shape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
        return {}  # its body's and shortcut's, under their own paths (walk)


Layer = Dense | Conv2D | Pool2D | Flatten | LSTM | BatchNorm | GlobalAvgPool | Residual
STATE = (".mean", ".var")  # parameter-name suffixes of state (running statistics), not trained


def is_state(name: str) -> bool:
    return name.endswith(STATE)


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
    origin: str = ""  # the file that declared it outside opbench (opbench.api.model); "" for the catalogue's own

    @property
    def classes(self) -> int:
        return self.layers[-1].units

    @property
    def input_kind(self) -> str:
        return {3: "image", 2: "sequence", 1: "vector"}[len(self.input_shape)]


def output_shape(layer: Layer, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The shape (without batch) that `layer` produces from `shape`."""
    if type(layer) not in Layer.__args__:
        raise TypeError(f"unknown layer {layer!r}")
    return tuple(layer.output(tuple(shape)))


def layer_inputs(model: ModelSpec) -> list[tuple[int, ...]]:  # top-level layers only
    """The input shape of every layer, in order."""
    shapes, shape = [], model.input_shape
    for layer in model.layers:
        shapes.append(shape)
        shape = output_shape(layer, shape)
    return shapes


def walk(layers: tuple, shape: tuple[int, ...], prefix: str = "") -> Iterator[tuple[str, Layer, tuple[int, ...]]]:
    """Every layer with its path (the parameter-name prefix) and input shape, depth first; a
    Residual comes before its body and shortcut layers."""
    for i, layer in enumerate(layers):
        path = f"{prefix}{i}"
        yield path, layer, shape
        if isinstance(layer, Residual):
            yield from walk(layer.body, shape, f"{path}.")
            yield from walk(layer.shortcut or (), shape, f"{path}.s")
        shape = output_shape(layer, shape)


_RANK = {Conv2D: 3, Pool2D: 3, GlobalAvgPool: 3, LSTM: 2}  # the input rank (no batch axis) these layers take


def misfit(model: ModelSpec) -> str:
    """What does not fit in a model's layers (a layer given an input of the wrong rank, a shape that
    shrinks to nothing), for a declaration made outside the catalogue; "" where every layer fits."""
    for path, layer, shape in walk(model.layers, model.input_shape):
        rank = _RANK.get(type(layer))
        if rank is not None and len(shape) != rank:
            return f"layer {path} ({type(layer).__name__}) takes {rank}-D inputs (no batch axis), not {shape}"
        if any(d < 1 for d in shape):
            return f"layer {path} ({type(layer).__name__}) gets the empty shape {shape}"
    return ""


def param_shapes(model: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Canonical parameter names and shapes, e.g. {"0.W": (784, 128), "0.b": (128,), ...}."""
    shapes: dict[str, tuple[int, ...]] = {}
    for path, layer, shape in walk(model.layers, model.input_shape):
        shapes.update({f"{path}.{name}": rule for name, rule in layer.parameters(shape).items()})
    return shapes


VAR_LOW, VAR_HIGH = 0.25, 2.0  # initial running variances: away from 1, not so small that inference explodes


def _residual_ends(model: ModelSpec) -> set[str]:
    """The paths of the batch norms that end a residual body."""
    ends = set()
    for path, layer, _ in walk(model.layers, model.input_shape):
        last = len(layer.body) - 1 if isinstance(layer, Residual) else -1
        if last >= 0 and isinstance(layer.body[last], BatchNorm):
            ends.add(f"{path}.{last}")
    return ends


def init_params(model: ModelSpec, seed: int = 0) -> dict[str, np.ndarray]:
    """One parameter set for every framework: Glorot-uniform weights and N(0, 0.1^2) biases (not
    zeros, and not so small that a wrong bias mapping or a swapped LSTM gate bias hides inside
    the check's tolerance), from a seeded generator. Batch norms start away from the identity for
    the same reason: gamma U(0.5, 1.5), beta and running mean N(0, 0.1^2), running variance
    log-uniform over [VAR_LOW, VAR_HIGH]. The last batch norm of a residual body starts with
    gamma a tenth of that (as torchvision's zero_init_residual, but not zero, so that the body
    trains from the first step): every block starts close to its shortcut, and the variance does
    not double block after block (ResNet-50 at full gamma starts with a loss of twice chance's
    and a first-step gradient 280 times its stem's weights)."""
    r = np.random.default_rng([seed, len(model.name), sum(map(ord, model.name))])
    params = {}
    damped = _residual_ends(model)
    for name, shape in param_shapes(model).items():
        if name.endswith((".b", ".beta", ".mean")):
            params[name] = (0.1 * r.standard_normal(shape)).astype(np.float32)
            continue
        if name.endswith(".gamma"):
            scale = 0.1 if name.rsplit(".", 1)[0] in damped else 1.0
            params[name] = (scale * r.uniform(0.5, 1.5, shape)).astype(np.float32)
            continue
        if name.endswith(".var"):
            params[name] = np.exp(r.uniform(np.log(VAR_LOW), np.log(VAR_HIGH), shape)).astype(np.float32)
            continue
        if len(shape) == 4:  # OIHW
            fan_in, fan_out = shape[1] * shape[2] * shape[3], shape[0] * shape[2] * shape[3]
        else:
            fan_in, fan_out = shape[0], shape[1]
        limit = np.sqrt(6.0 / (fan_in + fan_out))
        params[name] = r.uniform(-limit, limit, shape).astype(np.float32)
    return params


def count_params(model: ModelSpec) -> int:
    """Trained parameters (running statistics are state, not parameters)."""
    return int(sum(np.prod(s) for name, s in param_shapes(model).items() if not is_state(name)))
