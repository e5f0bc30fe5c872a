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
LOSS_RTOL = 1e-4  # first loss and SGD losses, relative
LOGIT_TOL = 1e-3  # inference logits: max abs error / max(1, max|ref|)
UPDATE_RTOL = 1e-3  # each tensor's update in each SGD step: ||got - ref|| / ||ref|| (float32 gives <= 8.4e-5)


def _initial(model: ModelSpec) -> dict[str, np.ndarray]:
    return {k: v.astype(np.float64) for k, v in init_params(model).items()}


@functools.lru_cache(maxsize=4)
def _reference_forward(name: str, batch: int, data_dir: str) -> tuple[np.ndarray, float]:
    """NumPy's logits and loss on batch 0 from the initial weights."""
    model = catalogue.get(name)
    x, y = datasets.batch(model, batch, data_dir)
    logits = reference.forward(model, _initial(model), x.astype(np.float64))
    return logits, reference.cross_entropy(logits, y)[0]


@functools.lru_cache(maxsize=4)
def reference_sgd(name: str, batch: int, data_dir: str, steps: int, lstm_biases: int) -> tuple[list, list]:
    """NumPy's losses over `steps` plain-SGD steps at GATE_LR from the initial weights, and the
    parameters before the first step and after each."""
    model = catalogue.get(name)
    params, losses, trajectory = _initial(model), [], []
    trajectory.append(params)
    for i in range(steps):
        xi, yi = datasets.batch(model, batch, data_dir, i)
        loss, params = reference.sgd_step(model, params, xi.astype(np.float64), yi, GATE_LR, lstm_biases)
        losses.append(loss)
        trajectory.append(params)
    return losses, trajectory


def check_loss(what: str, got: float, want: float) -> float:
    err = abs(got - want)
    if not np.isfinite(got) or err > LOSS_RTOL * max(1.0, abs(want)):
        raise CorrectnessError(f"{what}: {got:.6g} != NumPy {want:.6g}")
    return err


def check_update(case: Case, step: int, before: dict, after: dict, want_before: dict, want_after: dict) -> float:
    """The worst relative error of one SGD step's update over the parameter tensors: each
    tensor's change (after - before) against NumPy's change, relative to the norm of NumPy's
    change. Raises CorrectnessError past UPDATE_RTOL, naming the tensor. A tensor left unchanged,
    trained at the wrong rate or on a stale or partial gradient fails here even where its
    weights are still close to NumPy's."""
    worst = 0.0
    for name, ref_after in want_after.items():
        want = ref_after - want_before[name]
        got = np.asarray(after[name], dtype=np.float64) - np.asarray(before[name], dtype=np.float64)
        scale = max(float(np.linalg.norm(want)), 1e-6 * float(np.linalg.norm(ref_after)), 1e-30)
        err = float(np.linalg.norm(got - want)) / scale if got.shape == want.shape else np.inf
        if not err <= UPDATE_RTOL:
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
    want_losses, trajectory = reference_sgd(case.name, batch, data_dir, SGD_STEPS, native.lstm_biases)
    sgd = Optimizer("sgd", GATE_LR)
    before, worst = native.get_params(), 0.0
    for i, want in enumerate(want_losses):
        x, y = native.inputs(*datasets.batch(model, batch, data_dir, i))
        got = _scalar(backend, native.train_step(x, y, sgd)())
        check_loss(f"{case.framework} {case.mode} {case.name}: SGD step {i} loss", got, want)
        after = native.get_params()
        worst = max(worst, check_update(case, i, before, after, trajectory[i], trajectory[i + 1]))
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
    want_logits, want_loss = _reference_forward(case.name, batch, data_dir)
    x, y = native.inputs(*datasets.batch(model, batch, data_dir))

    if case.direction == "training":
        param_err = sgd_equivalence(case, backend, native, data_dir)
        native.set_params(params)
        run = native.train_step(x, y, model.optimizer)

        def verify(result) -> float:
            got = _scalar(backend, result)
            return max(param_err, check_loss(f"{case.framework} {case.mode} {case.name}: first loss", got, want_loss))
    else:
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
