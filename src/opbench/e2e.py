"""Turning a model Case into a synchronised training-step or inference callable, after proving
functional equivalence with the NumPy reference model.

The gate, before anything is timed: the framework's first forward pass gives the NumPy loss
(inference: the NumPy logits), and K plain-SGD steps from the same weights on the same batches
give the NumPy losses and, for every parameter tensor and every step, the NumPy update
(after - before). The gate's learning rate is its own, large enough that each update is far
above the float32 rounding of the weights; the study's optimizer is swapped in afterwards, the
weights reset, and the step timed.
"""

from __future__ import annotations

import functools
import time

import numpy as np

from opbench.backends.base import Backend
from opbench.cases import Case
from opbench.execute import CorrectnessError, Prepared, synchronised
from opbench.models import catalogue, datasets, reference
from opbench.models.spec import ModelSpec, Optimizer, count_params, init_params

SGD_STEPS = 2
GATE_LR = 0.1  # plain SGD in the gate, whatever the study's optimizer: updates of 1e-3..1e-1 of the weights
MAX_DROP = 0.3  # ... and less where its first-order loss decrease, lr * |grad|^2, passes this share of the loss
LOSS_RTOL = 1e-4  # first loss and SGD losses, relative
LOGIT_TOL = 1e-3  # inference logits: max abs error / max(1, max|ref|)
UPDATE_RTOL = 1e-3  # each tensor's update in each SGD step: ||got - ref|| / ||ref|| (float32 gives <= 8.4e-5)
SLACK = 10.0  # ... plus this many times NumPy's own float32 error on that tensor and step (its conditioning)


def _initial(model: ModelSpec) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float64) for k, v in init_params(model).items()}


@functools.lru_cache(maxsize=4)
def _reference_logits(name: str, batch: int, data_dir: str) -> np.ndarray:
    """NumPy's inference logits on batch 0 from the initial weights."""
    model = catalogue.get(name)
    x, _ = datasets.batch(model, batch, data_dir)
    return reference.forward(model, _initial(model), x.astype(np.float64))


@functools.lru_cache(maxsize=4)
def _first_pass(name: str, batch: int, data_dir: str, unbiased_var: bool) -> tuple[float, dict, dict]:
    """NumPy's training pass on batch 0 from the initial weights: loss, gradients, running
    statistics. gate_lr() and the first reference step share it."""
    model = catalogue.get(name)
    x, y = datasets.batch(model, batch, data_dir)
    return reference.loss_and_grads(model, _initial(model), x.astype(np.float64), y, unbiased_var)


def gate_lr(name: str, batch: int, data_dir: str, unbiased_var: bool = False) -> float:
    """The gate's learning rate: GATE_LR, or less where the first step's first-order loss decrease
    (lr * |gradient|^2) would pass MAX_DROP of the loss. Past that the step leaves the region
    where the loss is close to linear (ResNet-50 at 0.1 predicts 15 times its loss), the second
    step's gradient amplifies the first step's float32 rounding, and two float32 runs of correct
    code part: the step's conditioning, not the code, would decide the gate. The study's models
    up to ResNet-20 stay at GATE_LR. (`unbiased_var` changes only the running statistics, not
    the rate: it selects the shared first pass.)"""
    loss, grads, _ = _first_pass(name, batch, data_dir, unbiased_var)
    drop = GATE_LR * sum(float(np.sum(g * g)) for g in grads.values()) / loss
    return GATE_LR * min(1.0, MAX_DROP / drop)


@functools.lru_cache(maxsize=4)
def reference_sgd(
    name: str, batch: int, data_dir: str, steps: int, lstm_biases: int, unbiased_var: bool = False
) -> tuple[list, list]:
    """NumPy's losses over `steps` plain-SGD steps at gate_lr() from the initial weights, and the
    parameters (with the running statistics) before the first step and after each. The
    framework's conventions come with it: `lstm_biases` and `unbiased_var` (NativeModel's)."""
    model = catalogue.get(name)
    params, losses, trajectory = _initial(model), [], []
    trajectory.append(params)
    lr = gate_lr(name, batch, data_dir, unbiased_var)
    for i in range(steps):
        if i == 0:
            loss, grads, state = _first_pass(name, batch, data_dir, unbiased_var)
        else:
            xi, yi = datasets.batch(model, batch, data_dir, i)
            loss, grads, state = reference.loss_and_grads(model, params, xi.astype(np.float64), yi, unbiased_var)
        params = reference.sgd_update(model, params, grads, state, lr, lstm_biases)
        losses.append(loss)
        trajectory.append(params)
    return losses, trajectory


@functools.lru_cache(maxsize=4)
def float32_errors(
    name: str, batch: int, data_dir: str, steps: int, lstm_biases: int, unbiased_var: bool = False
) -> list[dict[str, float]]:
    """The same reference steps run in float32: per step, each tensor's update error against the
    float64 update (as check_update measures it). That is the step's conditioning at float32,
    measured rather than assumed: ~1e-6 for the MLP, but in a deep batch-normalised net a tensor
    whose step barely moves it (a batch-norm scale moved by 1e-6 of its norm) or whose gradient
    passes a channel of near-zero batch variance is a few percent off in any float32 code."""
    model = catalogue.get(name)
    _, trajectory = reference_sgd(name, batch, data_dir, steps, lstm_biases, unbiased_var)
    lr = np.float32(gate_lr(name, batch, data_dir, unbiased_var))
    params, errors = {k: v.astype(np.float32) for k, v in trajectory[0].items()}, []
    for i in range(steps):
        xi, yi = datasets.batch(model, batch, data_dir, i)
        _, after = reference.sgd_step(model, params, xi.astype(np.float32), yi, lr, lstm_biases, unbiased_var)
        after = {k: v.astype(np.float32) for k, v in after.items()}
        errors.append({k: _relative(after[k] - params[k], trajectory[i + 1][k] - trajectory[i][k], trajectory[i + 1][k])
                       for k in after})
        params = after
    return errors


def _relative(got: np.ndarray, want: np.ndarray, value: np.ndarray) -> float:
    """||got - want|| relative to ||want|| (or to a millionth of the value's norm, if the want is 0)."""
    got = np.asarray(got, dtype=np.float64)
    scale = max(float(np.linalg.norm(want)), 1e-6 * float(np.linalg.norm(value)), 1e-30)
    return float(np.linalg.norm(got - want)) / scale if got.shape == want.shape else np.inf


def check_loss(what: str, got: float, want: float) -> float:
    err = abs(got - want)
    if not np.isfinite(got) or err > LOSS_RTOL * max(1.0, abs(want)):
        raise CorrectnessError(f"{what}: {got:.6g} != NumPy {want:.6g}")
    return err


def check_update(
    case: Case, step: int, before: dict, after: dict, want_before: dict, want_after: dict,
    float32_error: dict | None = None,
) -> float:
    """The worst relative error of one SGD step's update over the parameter tensors: each
    tensor's change (after - before) against NumPy's change, relative to the norm of NumPy's
    change. Raises CorrectnessError past UPDATE_RTOL plus SLACK times `float32_error` of the
    tensor (float32_errors(): the same step's own float32 error), naming the tensor. A tensor left unchanged,
    trained at the wrong rate or on a stale or partial gradient fails here even where its
    weights are still close to NumPy's; so does a running mean or variance moved with the wrong
    momentum, from the wrong statistics, or not at all."""
    worst = 0.0
    for name, ref_after in want_after.items():
        if name not in after:
            raise CorrectnessError(f"{case.framework} {case.mode} {case.name}: the model has no parameter {name}")
        got = np.asarray(after[name], dtype=np.float64) - np.asarray(before[name], dtype=np.float64)
        err = _relative(got, ref_after - want_before[name], ref_after)
        if not err <= UPDATE_RTOL + SLACK * (float32_error or {}).get(name, 0.0):
            raise CorrectnessError(f"{case.framework} {case.mode} {case.name}: the update of parameter {name} "
                                   f"in SGD step {step} differs from NumPy's by {err:.3g} of its norm")
        worst = max(worst, err)
    return worst


def _scalar(backend: Backend, loss) -> float:
    return float(backend.to_numpy(loss).reshape(-1)[0])


def sgd_equivalence(case: Case, backend: Backend, native, data_dir: str) -> float:
    """Run SGD_STEPS plain-SGD steps at GATE_LR; compare each loss and each step's update of every
    parameter tensor with NumPy's. Returns the worst relative update error."""
    model = catalogue.get(case.name)
    batch = case.p["batch"]
    want_losses, trajectory = reference_sgd(case.name, batch, data_dir, SGD_STEPS, native.lstm_biases,
                                            native.unbiased_var)
    allowed = float32_errors(case.name, batch, data_dir, SGD_STEPS, native.lstm_biases, native.unbiased_var)
    sgd = Optimizer("sgd", gate_lr(case.name, batch, data_dir, native.unbiased_var))
    before, worst = native.get_params(), 0.0
    for i, want in enumerate(want_losses):
        x, y = native.inputs(*datasets.batch(model, batch, data_dir, i))
        got = _scalar(backend, native.train_step(x, y, sgd)())
        check_loss(f"{case.framework} {case.mode} {case.name}: SGD step {i} loss", got, want)
        after = native.get_params()
        worst = max(worst, check_update(case, i, before, after, trajectory[i], trajectory[i + 1], allowed[i]))
        before = after
    return worst


TARGET_FRACTION = 0.2  # time to target: until the loss is a fifth of chance's, ln(classes) / 5
TARGET_MAX_STEPS = 200
TARGET_MAX_SECONDS = 20.0


def time_to_target(case: Case, backend: Backend, native, params: dict) -> dict:
    """Wall time (synchronised) for the model's own optimizer, from the shared initial weights, to
    bring the loss on the generated cluster problem below ln(classes) / 5; None if it does not
    within TARGET_MAX_STEPS steps or TARGET_MAX_SECONDS. The first step, which traces or
    compiles, counts as a step but not in the time (first_call_s reports compilation). The
    weights are reset afterwards."""
    model = catalogue.get(case.name)
    target = TARGET_FRACTION * float(np.log(model.classes))
    native.set_params(params)
    x, y = native.inputs(*datasets.clusters(model, case.p["batch"]))
    step = native.train_step(x, y, model.optimizer)
    loss = _scalar(backend, step())
    start, seconds, steps, reached = time.perf_counter(), 0.0, 1, loss < target
    while steps < TARGET_MAX_STEPS and seconds < TARGET_MAX_SECONDS and not reached:
        loss = _scalar(backend, step())
        steps, seconds = steps + 1, time.perf_counter() - start
        reached = loss < target
    native.set_params(params)
    return {"time_to_target_s": seconds if reached else None, "steps_to_target": steps if reached else None,
            "target_loss": target}


def prepare_model(case: Case, backend: Backend, data_dir: str = "") -> Prepared:
    """Build the model, prove equivalence, and return the callable to time."""
    model = catalogue.get(case.name)
    batch = case.p["batch"]
    params = init_params(model)
    native = backend.build(model, params, case.device, case.dtype, case.mode)
    x, y = native.inputs(*datasets.batch(model, batch, data_dir))

    if case.direction == "training":
        param_err = sgd_equivalence(case, backend, native, data_dir)
        want_loss = reference_sgd(case.name, batch, data_dir, SGD_STEPS, native.lstm_biases, native.unbiased_var)[0][0]
        native.set_params(params)
        run = native.train_step(x, y, model.optimizer)

        def verify(result) -> float:
            got = _scalar(backend, result)
            return max(param_err, check_loss(f"{case.framework} {case.mode} {case.name}: first loss", got, want_loss))
    else:
        want_logits = _reference_logits(case.name, batch, data_dir)
        run = native.infer(x)

        def verify(result) -> float:
            logits = backend.to_numpy(result)
            err = float(np.max(np.abs(logits - want_logits))) if logits.shape == want_logits.shape else np.inf
            if not err <= LOGIT_TOL * max(1.0, float(np.max(np.abs(want_logits)))):
                raise CorrectnessError(
                    f"{case.framework} {case.mode} {case.name}: logits differ from NumPy by {err:.3g}"
                )
            return err

    call = synchronised(run, backend, case.device)
    extra = {"batch": batch, "params": count_params(model), "optimizer": model.optimizer.name,
             "data": "real" if data_dir else "synthetic"}
    prepared = Prepared(case, backend, call, verify, None, 0.0, "-", extra=extra, items=batch,
                        peak_memory=native.peak_memory)
    if case.direction == "training":
        prepared.after_timing = lambda: time_to_target(case, backend, native, params)
    return prepared
