"""What every backend's model builder returns: a native model behind one small interface."""

from __future__ import annotations

import abc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from opbench.workloads.models.precision import PRODUCT_PARAMS
from opbench.workloads.models.spec import LSTM, BatchNorm, Conv2D, Dense, ModelSpec, Optimizer, walk


@dataclass(frozen=True)
class Slot:
    """Where one canonical parameter lives in a native model: the handle(s) of the native arrays
    (two for a bias split in two, whose sum is the canonical value) and the layout maps."""

    name: str
    handles: tuple[Any, ...]
    to_native: Callable[[np.ndarray], np.ndarray] | None = None
    to_canonical: Callable[[np.ndarray], np.ndarray] | None = None


class NativeModel(abc.ABC):
    """A model built by one framework from a ModelSpec and the canonical parameters.

    `inputs` converts a NumPy batch once; `infer` and `train_step` return zero-argument callables
    (tracing or compiling on their first call) that run one forward pass or one training step;
    `trainer` a step function over any batch, its optimizer kept between calls (whole runs).
    """

    lstm_biases = 1  # bias vectors trained per LSTM gate set (PyTorch and MXNet: 2)
    unbiased_var = False  # batch norm moves its running variance with the unbiased batch variance (PyTorch)
    # Adam adds eps to the bias-corrected root, sqrt(v / (1 - beta2^t)) (PyTorch, opbench's JAX), or to
    # sqrt(v) before the correction is folded into the rate (Keras, MXNet): eps / sqrt(1 - beta2^t) the other way
    adam_eps_corrected = True

    def __init__(self, spec: ModelSpec, device: str, dtype: str, mode: str) -> None:
        self.spec, self.device, self.dtype, self.mode = spec, device, dtype, mode

    @abc.abstractmethod
    def inputs(self, x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
        """The batch on the device, in the framework's layout."""

    @abc.abstractmethod
    def infer(self, x: Any) -> Callable[[], Any]:
        """A callable returning the logits of batch x (no gradient tape)."""

    @abc.abstractmethod
    def trainer(self, optimizer: Optimizer) -> Callable[[Any, Any], Any]:
        """A step function with one fresh optimizer that persists across its calls: step(x, y)
        runs one training step (forward, loss, backward, update) on a batch made by inputs()
        and returns the batch's loss before the update."""

    @abc.abstractmethod
    def loss_head(self, logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
        """The model's own loss as the framework runs it, eagerly on the model's device, on float32
        `logits` and integer labels `y`: the batch's mean loss and its gradient with respect to the
        logits (a float32 NumPy array). The check's emulation runs the layers in NumPy and its loss
        head beside this one, so that a framework whose softmax cross-entropy is less exact than
        one rounding per operation is held to the head it has (MXNet 1.9.1's oneDNN log_softmax:
        10 times float32's error in the log-sum-exp)."""

    def train_step(self, x: Any, y: Any, optimizer: Optimizer) -> Callable[[], Any]:
        """A callable running one step on (x, y) with a fresh optimizer (the timed step)."""
        step = self.trainer(optimizer)
        return lambda: step(x, y)

    def product_dtypes(self, x: Any, y: Any) -> dict[str, str] | None:
        """What ran, read from the framework, not from the label: the type each product of the
        model (a dense, convolution or LSTM layer, by its path, "PATH in training" where a training
        pass is watched as well; or the traced program's products in order) computed in, "weights":
        the type of the trained variables, and "cross-entropy": every type computed in from the last
        product to the loss (comma-separated), where the framework can show it. Nothing it does
        may change the model's state. None where the framework cannot say."""
        return None

    def compute_layers(self) -> dict[str, str]:
        """The paths and kinds of the layers whose products mixed precision lowers."""
        return {path: type(layer).__name__ for path, layer, shape in walk(self.spec.layers, self.spec.input_shape)
                if any(f".{name}" in PRODUCT_PARAMS for name in layer.parameters(shape))}

    @abc.abstractmethod
    def _slots(self) -> Iterator[Slot]:
        """Every canonical parameter's place in the native model."""

    @abc.abstractmethod
    def _read(self, handle: Any) -> np.ndarray:
        """A float32 NumPy copy of a native parameter."""

    @abc.abstractmethod
    def _write(self, handle: Any, value: np.ndarray) -> None:
        """Overwrite a native parameter with `value` (already in the native layout)."""

    def set_params(self, params: dict[str, np.ndarray]) -> None:
        """Load canonical parameters; a split bias gets the value in its first part, zeros in the rest."""
        for slot in self._slots():
            value = params[slot.name]
            value = np.ascontiguousarray(slot.to_native(value) if slot.to_native else value)
            self._write(slot.handles[0], value)
            for rest in slot.handles[1:]:
                self._write(rest, np.zeros_like(value))

    def get_params(self) -> dict[str, np.ndarray]:
        """The current parameters in the canonical layout."""
        out = {}
        for slot in self._slots():
            value = sum(self._read(h) for h in slot.handles)
            out[slot.name] = slot.to_canonical(value) if slot.to_canonical else value
        return out

    def reset_peak_memory(self) -> None:
        """Start the allocator's GPU peak again from what it holds now, before a case's timed rounds
        (where the framework cannot, note where its peak stands). Nothing to do on the CPU."""
        return None

    def peak_memory(self) -> tuple[int, str] | None:
        """The framework allocator's GPU peak since reset_peak_memory, in bytes, and its scope:
        'block' where it is the rounds' own, 'process' where the framework keeps only its process's
        peak and the rounds did not raise it (the rounds' own is at most that). None where the
        framework cannot tell, and on the CPU."""
        return None


def first_holds_parameters(build: Callable[..., list]) -> Callable[..., list]:
    """A builder's entry in a framework's layer table (LAYERS) for a kind built as a list of native
    layers, the first of which holds its parameters: `build(layer, where, *rest)` makes the list,
    and the entry `(layer, where, path, leaves, *rest)` records that first layer in `leaves` under the
    layer's path (`where`: the input shape or data format the framework builds from)."""
    def entry(layer, where, path: str, leaves: dict, *rest) -> list:
        built = build(layer, where, *rest)
        leaves[path] = built[0]
        return built
    return entry


def batch_norm_slots(path: str, handles: tuple) -> Iterator[Slot]:
    """A batch norm's four arrays, (gamma, beta, running mean, running variance), as every
    framework stores them: per channel, no layout to map."""
    for name, handle in zip(("gamma", "beta", "mean", "var"), handles, strict=True):
        yield Slot(f"{path}.{name}", (handle,))


def slots_from(table: dict, where: str, spec: ModelSpec, handles: Callable[[str], Any]) -> Iterator[Slot]:
    """Every parameter's slot, by its layer kind's entry in a framework's `table`: `(path, layer,
    handles(path))` -> its Slots. A kind with parameters and no entry is an error naming the table
    (`where`)."""
    for path, layer, shape in walk(spec.layers, spec.input_shape):
        if not layer.parameters(shape):
            continue
        try:
            rule = table[type(layer)]
        except KeyError:
            raise TypeError(f"no slots for {type(layer).__name__} ({where})") from None
        yield from rule(path, layer, handles(path))


def _out_in_dense(path: str, layer: Dense, handles: tuple) -> Iterator[Slot]:
    weight, bias = handles
    yield Slot(f"{path}.W", (weight,), np.transpose, np.transpose)
    yield Slot(f"{path}.b", (bias,))


def _out_in_conv(path: str, layer: Conv2D, handles: tuple) -> Iterator[Slot]:
    weight, bias = handles
    yield Slot(f"{path}.W", (weight,))
    if layer.bias:
        yield Slot(f"{path}.b", (bias,))


def _out_in_lstm(path: str, layer: LSTM, handles: tuple) -> Iterator[Slot]:
    wx, wh, b_in, b_hidden = handles
    yield Slot(f"{path}.Wx", (wx,), np.transpose, np.transpose)
    yield Slot(f"{path}.Wh", (wh,), np.transpose, np.transpose)
    yield Slot(f"{path}.b", (b_in, b_hidden))


# Where PyTorch and MXNet keep each parameterised layer kind's parameters: dense weights (out, in),
# kernels OIHW, LSTM weights (4H, in) with two biases. Handles: (weight, bias); for an LSTM (input
# weight, hidden weight, input bias, hidden bias); for a batch norm (gamma, beta, running mean, running
# variance)
OUT_IN_SLOTS = {
    Dense: _out_in_dense,
    Conv2D: _out_in_conv,
    BatchNorm: lambda path, layer, handles: batch_norm_slots(path, handles),
    LSTM: _out_in_lstm,
}


def out_in_slots(spec: ModelSpec, handles: Callable[[str], tuple]) -> Iterator[Slot]:
    """Slots for frameworks that store parameters as OUT_IN_SLOTS says (PyTorch, MXNet);
    `handles(path)` gives a layer's native arrays."""
    return slots_from(OUT_IN_SLOTS, "workloads/models/native.OUT_IN_SLOTS", spec, handles)


def nhwc_dense_rows(w: np.ndarray, chw: tuple[int, int, int]) -> np.ndarray:
    """Reorder a dense layer's input rows from (C, H, W) flattening to (H, W, C) flattening: what
    a dense layer after Flatten needs when images are NHWC."""
    c, h, wd = chw
    return w.reshape(c, h, wd, -1).transpose(1, 2, 0, 3).reshape(c * h * wd, -1)


def nchw_dense_rows(w: np.ndarray, chw: tuple[int, int, int]) -> np.ndarray:
    """The inverse of nhwc_dense_rows."""
    c, h, wd = chw
    return w.reshape(h, wd, c, -1).transpose(2, 0, 1, 3).reshape(c * h * wd, -1)
