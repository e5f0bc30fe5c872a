"""What every backend's model builder returns: a native model behind one small interface."""

from __future__ import annotations

import abc
from collections.abc import Callable
from typing import Any

import numpy as np

from opbench.models.spec import ModelSpec, Optimizer


class NativeModel(abc.ABC):
    """A model built by one framework from a ModelSpec and the canonical parameters.

    `inputs` converts a NumPy batch once; `infer` and `train_step` return zero-argument callables
    (tracing or compiling on their first call) that run one forward pass or one training step.
    """

    lstm_biases = 1  # bias vectors trained per LSTM gate set (PyTorch and MXNet: 2)

    def __init__(self, spec: ModelSpec, device: str, dtype: str, mode: str) -> None:
        self.spec, self.device, self.dtype, self.mode = spec, device, dtype, mode

    @abc.abstractmethod
    def inputs(self, x: np.ndarray, y: np.ndarray) -> tuple[Any, Any]:
        """The batch on the device, in the framework's layout."""

    @abc.abstractmethod
    def infer(self, x: Any) -> Callable[[], Any]:
        """A callable returning the logits of batch x (no gradient tape)."""

    @abc.abstractmethod
    def train_step(self, x: Any, y: Any, optimizer: Optimizer) -> Callable[[], Any]:
        """A callable running one step (forward, loss, backward, update) with a fresh optimizer;
        it returns the batch's loss before the update."""

    @abc.abstractmethod
    def get_params(self) -> dict[str, np.ndarray]:
        """The current parameters in the canonical layout."""

    @abc.abstractmethod
    def set_params(self, params: dict[str, np.ndarray]) -> None:
        """Load canonical parameters into the native model."""

    def peak_memory(self) -> int | None:
        """The framework allocator's peak bytes on the GPU, where it can tell; None elsewhere."""
        return None


def nhwc_dense_rows(w: np.ndarray, chw: tuple[int, int, int]) -> np.ndarray:
    """Reorder a dense layer's input rows from (C, H, W) flattening to (H, W, C) flattening: what
    a dense layer after Flatten needs when images are NHWC."""
    c, h, wd = chw
    return w.reshape(c, h, wd, -1).transpose(1, 2, 0, 3).reshape(c * h * wd, -1)


def nchw_dense_rows(w: np.ndarray, chw: tuple[int, int, int]) -> np.ndarray:
    """The inverse of nhwc_dense_rows."""
    c, h, wd = chw
    return w.reshape(h, wd, c, -1).transpose(2, 0, 1, 3).reshape(c * h * wd, -1)
