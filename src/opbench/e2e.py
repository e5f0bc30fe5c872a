"""Turning a model Case into a synchronised training-step or inference callable, after proving
functional equivalence with the NumPy reference model.

The gate, before anything is timed: the framework's first forward pass gives the NumPy loss
(inference: the NumPy logits), and K plain-SGD steps from the same weights on the same batches
give the NumPy losses and parameters. Only then is the optimizer of the study swapped in, the
weights reset, and the step timed.
"""

from __future__ import annotations

import functools
import time

import numpy as np

from opbench.backends.base import Backend
from opbench.cases import Case
from opbench.execute import CorrectnessError, Prepared
from opbench.models import catalogue, datasets, reference
from opbench.models.spec import ModelSpec, Optimizer, count_params, init_params

SGD_STEPS = 2
LOSS_RTOL = 1e-4  # first loss and SGD losses, relative
LOGIT_TOL = 1e-3  # inference logits: max abs error / max(1, max|ref|)
PARAM_TOL = 1e-4  # parameters after SGD steps: max abs error / max(1, max|ref|)


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
def _reference_sgd(name: str, batch: int, data_dir: str, steps: int, lstm_biases: int) -> tuple[list, dict]:
    """NumPy's losses and parameters over `steps` plain-SGD steps from the initial weights."""
    model = catalogue.get(name)
    params, losses = _initial(model), []
    for i in range(steps):
        xi, yi = datasets.batch(model, batch, data_dir, i)
        loss, params = reference.sgd_step(model, params, xi.astype(np.float64), yi, model.optimizer.lr, lstm_biases)
        losses.append(loss)
    return losses, params


def _close(what: str, got: float, want: float) -> float:
    err = abs(got - want)
    if not np.isfinite(got) or err > LOSS_RTOL * max(1.0, abs(want)):
        raise CorrectnessError(f"{what}: {got:.6g} != NumPy {want:.6g}")
    return err


def check_params(case: Case, got: dict, want: dict) -> float:
    """Largest parameter difference; raises CorrectnessError past PARAM_TOL."""
    worst = 0.0
    for name, ref in want.items():
        err = float(np.max(np.abs(got[name] - ref)))
        if not err <= PARAM_TOL * max(1.0, float(np.max(np.abs(ref)))):
            raise CorrectnessError(f"{case.framework} {case.mode} {case.name}: parameter {name} after "
                                   f"{SGD_STEPS} SGD steps differs from NumPy by {err:.3g}")
        worst = max(worst, err)
    return worst


def _scalar(backend: Backend, loss) -> float:
    return float(backend.to_numpy(loss).reshape(-1)[0])


def sgd_equivalence(case: Case, backend: Backend, native, data_dir: str) -> float:
    """Run SGD_STEPS plain-SGD steps and compare losses and parameters with NumPy's."""
    model = catalogue.get(case.name)
    batch = case.p["batch"]
    want_losses, want_params = _reference_sgd(case.name, batch, data_dir, SGD_STEPS, native.lstm_biases)
    sgd = Optimizer("sgd", model.optimizer.lr)
    for i, want in enumerate(want_losses):
        x, y = native.inputs(*datasets.batch(model, batch, data_dir, i))
        got = _scalar(backend, native.train_step(x, y, sgd)())
        _close(f"{case.framework} {case.mode} {case.name}: SGD step {i} loss", got, want)
    return check_params(case, native.get_params(), want_params)


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
            return max(param_err, _close(f"{case.framework} {case.mode} {case.name}: first loss", got, want_loss))
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

    def call():
        result = run()
        backend.sync(case.device)
        return result

    extra = {"model": case.name, "batch": batch, "params": count_params(model), "optimizer": model.optimizer.name,
             "data": "real" if data_dir else "synthetic"}
    prepared = Prepared(case, backend, call, verify, None, 0.0, "-", extra=extra, items=batch,
                        peak_memory=native.peak_memory)
    if case.direction == "training":
        prepared.after_timing = lambda: time_to_target(case, backend, native, params)
    return prepared
