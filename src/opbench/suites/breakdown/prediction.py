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
from opbench.suites.ops.prepare import verified
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


def layer_ops(model: ModelSpec, batch: int) -> list[LayerOp]:
    """The operators each layer of `model` runs at batch size `batch`, and the loss's softmax."""
    out: list[LayerOp] = []
    for path, layer, shape in walk(model.layers, model.input_shape):
        n = batch
        if isinstance(layer, Conv2D):
            c, h, w = shape
            p = {"n": n, "c": c, "h": h, "w": w, "o": layer.filters, "k": layer.kernel, "stride": layer.stride,
                 "pad": layer.pad}
            out.append(LayerOp(path, "conv2d", tuple(p.items())))
            out += _act(path, layer.activation, n, math.prod(output_shape(layer, shape)))
        elif isinstance(layer, Dense):
            out.append(LayerOp(path, "gemm", (("m", n), ("k", shape[0]), ("n", layer.units))))
            out += _act(path, layer.activation, n, layer.units)
        elif isinstance(layer, (Pool2D, GlobalAvgPool)):
            c, h, w = shape
            kind, k, stride = ("avg", h, h) if isinstance(layer, GlobalAvgPool) else (layer.kind, layer.size,
                                                                                        layer.stride)
            out.append(LayerOp(path, f"{kind}pool2d", (("n", n), ("c", c), ("h", h), ("w", w), ("k", k),
                                                         ("stride", stride))))
        elif isinstance(layer, BatchNorm):
            c, h, w = shape
            out.append(LayerOp(path, "batch_norm", (("n", n), ("c", c), ("h", h), ("w", w))))
            out += _act(path, layer.activation, n, c * h * w)
        elif isinstance(layer, Flatten):
            c, h, w = shape
            out.append(LayerOp(path, "flatten", (("n", n), ("c", c), ("h", h), ("w", w))))
        elif isinstance(layer, LSTM):  # each time step: two products into the four gates, their activations
            steps, features, units = shape[0], shape[1], layer.units
            out.append(LayerOp(path, "gemm", (("m", n), ("k", features), ("n", 4 * units)), steps))
            out.append(LayerOp(path, "gemm", (("m", n), ("k", units), ("n", 4 * units)), steps))
            out += _act(path, "sigmoid", n, 3 * units, steps)
            out += _act(path, "tanh", n, units, 2 * steps)
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
