"""The operator suite's prediction of a model step: every layer's operators, at exactly the
layer's shapes, run alone in the same framework, mode and device, verified against NumPy like
any operator benchmark, then timed; their sum is what the operators cost without the model
around them. Set beside the measured step, the difference is the overhead operator
microbenchmarks cannot see: dispatch, copies, the optimizer, the framework's bookkeeping.

A training step is predicted by each operator's backward case (the suite's backward call runs
the forward pass and the vector-Jacobian product), inference by its forward case. What the
suite has no operator for is named, not guessed: bias additions, residual additions, the
optimizer update.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterator
from dataclasses import dataclass

from opbench.core.case import Case
from opbench.core.errors import one_line
from opbench.frameworks.base import Backend
from opbench.harness import timing
from opbench.suites.registry import verified
from opbench.workloads import ops
from opbench.workloads.models.spec import (
    LSTM,
    BatchNorm,
    Conv2D,
    Dense,
    Flatten,
    GlobalAvgPool,
    ModelSpec,
    Pool2D,
    Residual,
    output_shape,
    walk,
)

MIN_REPS, MAX_REPS, BUDGET_S = 5, 200, 0.2  # per operator: at least 5 timed calls, then up to 0.2 s
NOT_IN_SUITE = ("bias additions", "residual additions", "the optimizer update")


@dataclass(frozen=True)
class LayerOp:
    """One operator a layer runs: the op-suite operator, its problem, and how often per step."""

    layer: str  # the layer's path in the model
    op: str
    p: tuple[tuple[str, int], ...]
    count: int = 1


def _act(layer: str, name: str | None, n: int, d: int, count: int = 1) -> Iterator[LayerOp]:
    if name:
        yield LayerOp(layer, name, (("n", n), ("d", d)), count)


def _conv(path: str, layer: Conv2D, shape: tuple, n: int) -> Iterator[LayerOp]:
    c, h, w = shape
    p = {"n": n, "c": c, "h": h, "w": w, "o": layer.filters, "k": layer.kernel, "stride": layer.stride,
         "pad": layer.pad}
    yield LayerOp(path, "conv2d", tuple(p.items()))
    yield from _act(path, layer.activation, n, math.prod(output_shape(layer, shape)))


def _dense(path: str, layer: Dense, shape: tuple, n: int) -> Iterator[LayerOp]:
    yield LayerOp(path, "gemm", (("m", n), ("k", shape[0]), ("n", layer.units)))
    yield from _act(path, layer.activation, n, layer.units)


def _pool(path: str, shape: tuple, n: int, kind: str, k: int, stride: int) -> Iterator[LayerOp]:
    c, h, w = shape
    yield LayerOp(path, f"{kind}pool2d", (("n", n), ("c", c), ("h", h), ("w", w), ("k", k), ("stride", stride)))


def _batch_norm(path: str, layer: BatchNorm, shape: tuple, n: int) -> Iterator[LayerOp]:
    c, h, w = shape
    yield LayerOp(path, "batch_norm", (("n", n), ("c", c), ("h", h), ("w", w)))
    yield from _act(path, layer.activation, n, c * h * w)


def _flatten(path: str, layer: Flatten, shape: tuple, n: int) -> Iterator[LayerOp]:
    c, h, w = shape
    yield LayerOp(path, "flatten", (("n", n), ("c", c), ("h", h), ("w", w)))


def _lstm(path: str, layer: LSTM, shape: tuple, n: int) -> Iterator[LayerOp]:
    """Each time step: two products into the four gates, their activations."""
    steps, features, units = shape[0], shape[1], layer.units
    yield LayerOp(path, "gemm", (("m", n), ("k", features), ("n", 4 * units)), steps)
    yield LayerOp(path, "gemm", (("m", n), ("k", units), ("n", 4 * units)), steps)
    yield from _act(path, "sigmoid", n, 3 * units, steps)
    yield from _act(path, "tanh", n, units, 2 * steps)


# Each layer kind's operators of the suite: (path, layer, input shape, batch) -> LayerOps (a residual
# block's are its layers', which walk() visits; its addition is NOT_IN_SUITE)
LAYERS = {
    Conv2D: _conv,
    Dense: _dense,
    Pool2D: lambda path, layer, shape, n: _pool(path, shape, n, layer.kind, layer.size, layer.stride),
    GlobalAvgPool: lambda path, layer, shape, n: _pool(path, shape, n, "avg", shape[1], shape[1]),
    BatchNorm: _batch_norm,
    Flatten: _flatten,
    LSTM: _lstm,
    Residual: lambda path, layer, shape, n: iter(()),
}


def layer_ops(model: ModelSpec, batch: int) -> list[LayerOp]:
    """The operators each layer of `model` runs at batch size `batch`, and the loss's softmax."""
    out = [op for path, layer, shape in walk(model.layers, model.input_shape)
           for op in LAYERS[type(layer)](path, layer, shape, batch)]
    out.append(LayerOp("loss", "softmax", (("n", batch), ("d", model.classes))))
    return out


def op_case(item: LayerOp, framework: str, device: str, mode: str, training: bool) -> Case:
    spec, p = ops.get(item.op), dict(item.p)
    return Case.operator(spec, "backward" if training else "forward", framework, device, mode, params=p)


_TIMES: dict[Case, float | str] = {}  # per session: a shape's time (or why it has none), shared by models


def median_time(call) -> float:
    """The median of at least MIN_REPS synchronised calls, more while BUDGET_S lasts."""
    return statistics.median(timing.rounds(call, 1, MIN_REPS, MAX_REPS, BUDGET_S))


def time_op(case: Case, backend: Backend) -> float | str:
    """The case's median seconds, after its result matched NumPy; or why it has none (a wrong
    result, an operator the framework lacks or cannot run at this shape: the prediction lists it
    as failed and goes on)."""
    if case not in _TIMES:
        try:
            prepared, _ = verified(case, backend)  # correct before fast, here too
            _TIMES[case] = median_time(prepared.call)
        except Exception as exc:
            _TIMES[case] = f"{case.name} {case.label}: {one_line(exc, limit=200)}"
    return _TIMES[case]


def predict(model: ModelSpec, batch: int, backend: Backend, device: str, mode: str, training: bool) -> dict:
    """extra_info's prediction: the sum of the operators' times, each layer's operators with
    their times, and what could not be predicted."""
    rows, missing, total = [], [], 0.0
    for item in layer_ops(model, batch):
        case = op_case(item, backend.name, device, mode, training)
        seconds = time_op(case, backend)
        if isinstance(seconds, str):
            missing.append(seconds)
            continue
        total += seconds * item.count
        rows.append([item.layer, item.op, case.label, case.direction, seconds, item.count])
    return {"predicted_s": total, "layers": rows, "failed": missing, "not_in_suite": list(NOT_IN_SUITE)}
