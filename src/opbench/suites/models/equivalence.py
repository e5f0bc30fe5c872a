"""Turning a model Case into a synchronised training-step or inference callable, after proving
functional equivalence with the NumPy reference model.

The check, before anything is timed: the framework's first forward pass gives the NumPy loss
(inference: the NumPy logits), and K plain-SGD steps from the same weights on the same batches
give the NumPy losses and, for every parameter tensor and every step, the NumPy update
(after - before). The check's learning rate is its own, large enough that each update is far
above the float32 rounding of the weights; the study's optimizer is swapped in afterwards and the
weights reset. The step that is timed is checked too, on its first two calls: every tensor's update
by the study's own optimizer against the reference's (check_timed_step), and the types its
products, weights and loss computed in, read from the framework (check_precision_ran). The
references and their emulations are in suites/model_reference.py, the comparisons in
suites/model_check.py: whole training runs and data-parallel steps check with them too.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from opbench.core.case import Case
from opbench.frameworks.base import Backend
from opbench.suites import target
from opbench.suites.model_check import (
    SLACK,
    adam_bound,
    check_logits,
    check_loss,
    check_low_precision,
    check_update,
    loss_allowance,
    note,
    scalar,
    timed_rtol,
)
from opbench.suites.model_reference import (
    DRAWS,
    SGD_STEPS,
    TIMED_CHECKED,
    Emulation,
    check_lr,
    conventions,
    emulated_errors,
    emulated_logits,
    hold_only,
    reference_logits,
    reference_sgd,
    reference_timed_steps,
    relative,
    run_in,
    total_error,
    wide,
)
from opbench.suites.prepared import CorrectnessError, Prepared, synchronised
from opbench.workloads.models import catalogue, cost, datasets, precision, reference
from opbench.workloads.models.spec import ModelSpec, Optimizer, count_params, init_params, is_state


def check_timed_step(case: Case, native, before: dict, lowp: str, data_dir: str,
                     used: list[float] | None = None, call: int = 1) -> float:
    """The step that is timed, checked after its first call (`before`: the initial weights) or its
    second (`call` 2, `before`: the weights after the first): every tensor's update by the study's
    own optimizer (Adam, SGD at the study's rate) against the reference's, within what the
    precision allows. The check's SGD steps prove the gradients; the first call proves the update
    rule, its rate and its constants, which the check's SGD never runs; the second what only a later
    step shows (Adam's betas, SGD's momentum, an optimizer state made anew or gradients never
    zeroed between calls)."""
    opt = catalogue.get(case.name).optimizer
    want_before, want, allowed = reference_timed_steps(case.name, case.p["batch"], data_dir,
                                                       *conventions(case.name, native), native.adam_eps_corrected,
                                                       lowp)[call - 1]
    step = f"the timed {opt.name} step (lr {opt.lr:g})" + ("" if call == 1 else f", call {call}")
    return check_update(case, step, before, native.get_params(), want_before, want, allowed, used,
                        timed_rtol(opt, call))


def check_timed_calls(case: Case, native, step, lowp: str, data_dir: str, used: list[float] | None = None) -> float:
    """The timed step's calls after its first (made and checked by the caller), up to
    TIMED_CHECKED: each made by `step`, the timed callable itself, and checked against the
    reference's. Returns the worst update error."""
    worst = 0.0
    for call in range(2, TIMED_CHECKED + 1):
        before = native.get_params()
        step()
        worst = max(worst, check_timed_step(case, native, before, lowp, data_dir, used, call))
    return worst


def _after_rounds_reference(model: ModelSpec, before: dict, x: np.ndarray, y: np.ndarray, lstm_biases: int,
                            unbiased_var: bool, lowp: str, head=None) -> tuple[float, dict, dict, Emulation]:
    """At the weights the timed rounds left (`before`, the framework's own): the reference's loss
    of batch (x, y) in training mode, its SGD step at the model's rate (the running statistics'
    update under any optimizer), the gradients, and the same pass emulated in the case's precision
    (each tensor's update error and the loss's; float32 over DRAWS roundings where the step is
    SGD's, whose whole update is checked, once otherwise), and once more with the framework's own
    loss head (`head`, NativeModel.loss_head) in place of NumPy's.

    The head matters here, not in the first calls: the rounds train on one batch, and where they
    have memorised it (a saturated softmax, the loss near 0) the gradient at the logits, p - onehot,
    is what is left of a cancellation, and a head's error in the log-probabilities comes through
    divided by 1 - p. MXNet 1.9.1's oneDNN log_softmax makes its log-sum-exp 10 times less exactly
    than one rounding per operation (median 2.0e-6 against NumPy's and PyTorch's 2.0e-7 in float32
    on 20,000 rows of 10 logits; 2.0e-7 with MXNET_ONEDNN_ENABLED=0): ResNet-50 at batch 2, its
    loss 5.5e-4 after the rounds, moved its last dense layer 0.0026 off NumPy's step where NumPy's
    own float32 head allowed 0.0024. The first calls check the framework's head to NumPy's
    standard, where p is far from the labels and the head's share of the update is negligible."""
    opt, low = model.optimizer, precision.rounder(lowp) is not None
    start = wide(before)
    x = x.astype(np.float64)
    loss, grads, state = reference.loss_and_grads(model, start, x, y, unbiased_var)
    want = reference.sgd_update(model, start, grads, state, opt.lr, lstm_biases)
    master, floor = (np.float64, float(precision.UNIT_ROUNDOFF[lowp])) if low else (np.float32, 0.0)
    updates: dict[str, float] = {}
    loss_err = 0.0
    passes = [(draw, None) for draw in range(1 if low or opt.name != "sgd" else DRAWS)]
    for draw, own in passes + ([(0, head)] if head else []):
        low_loss, low_grads, low_state = run_in(lowp, model, start, x, y, unbiased_var, draw, own)
        got = reference.sgd_update(model, start, wide(low_grads), wide(low_state), opt.lr, lstm_biases)
        for k in want:
            err = relative(got[k].astype(master) - start[k], want[k] - start[k], want[k])
            updates[k] = max(updates.get(k, 0.0), err, 0.0 if is_state(k) else floor)
        loss_err = max(loss_err, abs(float(low_loss) - loss) / max(1.0, abs(loss)))
    return loss, want, grads, Emulation(updates=(updates,), loss=(loss_err,))


def _finite(what: str, params: dict, when: str) -> None:
    for name, value in params.items():
        if not np.all(np.isfinite(value)):
            raise CorrectnessError(f"{what}: parameter {name} is not finite {when}")


def check_after_rounds(case: Case, backend: Backend, native, call, lowp: str, data_dir: str,
                       used: list[float] | None = None) -> float:
    """The timed step's next call after its timed rounds, untimed, made by the timed callable `call`
    on its batch (batch 0 of `data_dir`), as far as the reference can follow it without the rounds'
    history. The weights the rounds left must be finite. Under SGD, which keeps no state, the call
    starts from the weights of the check's first SGD step (reference_sgd's), loaded into the model,
    which no timed call started from. The rounds memorise their one batch, and there an update is
    what is left of the cancellation p - onehot, whose float32 error has a tail (a ReLU at its kink,
    a saturated softmax) that a few emulated roundings do not bound; what the check is for, the
    callable's warmth (its call count, compiled code), is kept. Under Adam the call starts where the rounds
    left it, since its moments belong to those weights, and what is checked is a bound that holds
    whatever the conditioning. Its loss is the reference's loss of the weights it started from,
    within what the case's precision allows there; every running statistic moves as the
    reference's does; every weight stays finite; under SGD every trained tensor's update is the
    reference's step; under Adam no element moves more than adam_bound() times the rate, and the
    step moves some tensor the reference's gradient moves. A step that goes wrong once warm (a stale
    loss, an update skipped, applied twice or at a wrong rate) fails here. Returns the worst update
    error."""
    model = catalogue.get(case.name)
    opt = model.optimizer
    what = f"{case.framework} {case.mode} {case.name}"
    lstm_biases, unbiased_var = conventions(case.name, native)
    batch = case.p["batch"]
    x, y = datasets.batch(model, batch, data_dir)
    before = native.get_params()
    _finite(what, before, "after the timed rounds")
    if opt.name == "sgd":
        start = reference_sgd(case.name, batch, data_dir, SGD_STEPS, lstm_biases, unbiased_var)[1][1]
        native.set_params({k: np.asarray(v, np.float32) for k, v in start.items()})
        before = native.get_params()  # as the model holds them
    got_loss = scalar(backend, call())
    after = native.get_params()
    _finite(what, after, "after the call that follows the timed rounds")
    loss, want, grads, emulated = _after_rounds_reference(model, before, x, y, lstm_biases, unbiased_var, lowp,
                                                          native.loss_head)
    check_loss(f"{what}: the loss of the call after the timed rounds", got_loss, loss,
               loss_allowance(emulated, 0, loss, lowp), used)
    step = f"the call after the timed rounds ({opt.name}, lr {opt.lr:g})"
    if opt.name == "sgd":
        return check_update(case, step, before, after, before, want, emulated.updates[0], used)
    check_update(case, step, before, after, before, {k: v for k, v in want.items() if is_state(k)},
                 emulated.updates[0], used)
    scale = reference.update_scale(model, lstm_biases)
    u = float(precision.UNIT_ROUNDOFF["float32"])
    limit = adam_bound(opt) * (1 + SLACK * u)  # the rate and the step held in float32
    worst, moved_any = 0.0, False
    for name in grads:
        new, old = np.asarray(after[name], np.float64), np.asarray(before[name], np.float64)
        # less one rounding of the float32 weight it lands on
        moved = np.maximum(np.abs(new - old) - u * np.abs(new), 0.0) / (opt.lr * scale.get(name, 1))
        largest = float(np.max(moved, initial=0.0))
        if not largest <= limit:
            raise CorrectnessError(f"{what}: {step} moved an element of parameter {name} by {largest:.3g} times "
                                   f"the rate, where Adam moves it at most {limit:.3g} times, whatever its history")
        moved_any = moved_any or not np.array_equal(new, old)
        note(used, largest, limit)
        worst = max(worst, largest / limit)
    # Adam divides by moments the rounds grew, so one tensor whose gradient is not zero can rightly stay
    # where it is (VGG-10 after 200 rounds); a step that moves none of them has skipped its update
    frozen = [name for name, g in grads.items() if np.any(g)]
    if frozen and not moved_any:
        raise CorrectnessError(f"{what}: {step} left every parameter unchanged ({', '.join(frozen[:3])}"
                               f"{', ...' if len(frozen) > 3 else ''}), where the reference's gradient is not zero")
    return worst


def sgd_equivalence(case: Case, backend: Backend, native, data_dir: str, used: list[float] | None = None) -> float:
    """Run SGD_STEPS plain-SGD steps at the check's rate; compare each loss and each step's update
    of every parameter tensor with NumPy's, within what the case's precision allows (for amp, and
    the check that it computes in low precision at all). Returns the worst relative update error."""
    model = catalogue.get(case.name)
    batch = case.p["batch"]
    key = (case.name, batch, data_dir, SGD_STEPS, *conventions(case.name, native))
    want_losses, trajectory = reference_sgd(*key)
    lowp = precision.compute_dtype(case.dtype, case.device)
    allowed = emulated_errors(*key, lowp)
    sgd = Optimizer("sgd", check_lr(case.name, batch, data_dir))
    before, worst = native.get_params(), 0.0
    what = f"{case.framework} {case.mode} {case.name}"
    for i, want in enumerate(want_losses):
        x, y = native.inputs(*datasets.batch(model, batch, data_dir, i))
        got = scalar(backend, native.train_step(x, y, sgd)())
        check_loss(f"{what}: SGD step {i} loss", got, want, loss_allowance(allowed, i, want, lowp), used)
        after = native.get_params()
        worst = max(worst, check_update(case, f"SGD step {i}", before, after, trajectory[i], trajectory[i + 1],
                                        allowed.updates[i], used))
        if i == 0 and lowp != "float32":
            f32 = emulated_errors(*key, "float32")
            check_low_precision(f"{what}: SGD step 0's update", total_error(before, after, *trajectory[:2]),
                                f32.total[0], allowed.total[0], lowp)
        before = after
    return worst


def time_to_target(case: Case, backend: Backend, native, params: dict) -> dict:
    """Time to target (opbench.suites.target) for the model's own optimizer on the generated
    cluster problem, from the shared initial weights; the weights are reset afterwards."""
    model = catalogue.get(case.name)
    native.set_params(params)
    x, y = native.inputs(*datasets.clusters(model, case.p["batch"]))
    step = native.train_step(x, y, model.optimizer)
    result = target.time_to_target(lambda: scalar(backend, step()), model.classes)
    native.set_params(params)
    return result


def check_precision_ran(case: Case, native, x, y, lowp: str, loss=None) -> dict:
    """What ran against what the precision promises, read from the framework
    (NativeModel.product_dtypes: hooks, dtype policies, the traced program), not from the label:
    every product (dense, convolution, LSTM layer) in `lowp`, in inference and where the framework
    shows it in training, the trained weights float32 masters, the cross-entropy of the logits
    computed in float32 (every type from the last product to the loss, where the framework shows
    it; a loss cast back to float32 after a bfloat16 cross-entropy shows bfloat16 there), and the
    loss float32. Raises CorrectnessError naming the layer and the type; returns the
    extra_info entries: compute_dtype (as observed) and compute_types (everything seen)."""
    what = f"{case.framework} {case.mode} {case.name} ({case.dtype})"
    seen = native.product_dtypes(x, y)
    if seen is None:
        return {"compute_dtype": lowp, "compute_types": f"not observed: the label ({case.framework} cannot say)"}
    weights, kinds = seen.pop("weights", "float32"), native.compute_layers()
    entropy = seen.pop("cross-entropy", None)
    for where, dtype in seen.items():
        if dtype != lowp:
            path, _, when = where.partition(" ")
            layer = f"layer {path} ({kinds[path]}){' ' + when if when else ''}" if path in kinds else where
            raise CorrectnessError(f"{what}: {layer} computed in {dtype}, not {lowp}")
    if weights != "float32":
        raise CorrectnessError(f"{what}: the trained weights are {weights}, not float32 masters")
    if entropy is not None and entropy != "float32":
        raise CorrectnessError(f"{what}: the cross-entropy of the logits computes in {entropy}, not float32")
    seen["weights"] = weights
    if entropy is not None:
        seen["cross-entropy"] = entropy
    if loss is not None:
        seen["loss"] = precision.dtype_name(loss.dtype)
        if seen["loss"] != "float32":
            raise CorrectnessError(f"{what}: the loss is computed in {seen['loss']}, not float32")
    return {"compute_dtype": lowp if seen else "unknown", "compute_types": seen}


def float32_twin(case: Case, backend: Backend, data_dir: str, used: list[float] | None = None) -> None:
    """A mixed-precision case's own build in float32 must pass the float32 check first, its timed
    step's update rule included: a mistake that amp's wider tolerance would hide (a batch-norm
    epsilon, a momentum convention, an optimizer constant) is seen where it can be. Built and checked
    before the amp model (a compiled mode's caches start anew
    with each build)."""
    twin = dataclasses.replace(case, dtype="float32")
    model = catalogue.get(case.name)
    native = backend.build(model, init_params(model), case.device, "float32", case.mode)
    if case.direction == "training":
        sgd_equivalence(twin, backend, native, data_dir, used)
        params = init_params(model)
        native.set_params(params)
        x, y = native.inputs(*datasets.batch(model, case.p["batch"], data_dir))
        step = native.train_step(x, y, model.optimizer)
        step()
        check_timed_step(twin, native, params, "float32", data_dir, used)
        check_timed_calls(twin, native, step, "float32", data_dir, used)
    else:
        x, _ = native.inputs(*datasets.batch(model, case.p["batch"], data_dir))
        logits = backend.to_numpy(native.infer(x)()).astype(np.float64)
        check_logits(f"{case.framework} {case.mode} {case.name} (float32 build of the amp case)", logits,
                     reference_logits(case.name, case.p["batch"], data_dir), used=used)


def prepare_model(case: Case, backend: Backend, settings=None) -> Prepared:
    """Build the model, prove equivalence, and return the callable to time (the suite's preparer
    in suites/registry.py: the run's `settings` give the --data-dir)."""
    data_dir = settings.data_dir if settings is not None else ""
    model = catalogue.get(case.name)
    hold_only(case.name)  # the case's memory is its own model's, never the last one's references
    lowp = precision.compute_dtype(case.dtype, case.device)
    used: list[float] = []  # every checked quantity's error as a share of its allowance
    if lowp != "float32":
        float32_twin(case, backend, data_dir, used)
    params = init_params(model)
    built = _Built(case, backend, backend.build(model, params, case.device, case.dtype, case.mode), params, lowp,
                   data_dir, used)
    if case.direction == "training":
        return built.training()
    return built.inference()


class _Built:
    """One model case built in its framework, on the batch it is timed on, with what its check
    reads: the reference's figures, the shares of their allowances each check used (`used`), and
    the entries of extra_info, to which the check adds the types it read (`extra`)."""

    def __init__(self, case: Case, backend: Backend, native, params: dict, lowp: str, data_dir: str,
                 used: list[float]) -> None:
        self.case, self.backend, self.native, self.params = case, backend, native, params  # params: the initial weights
        self.lowp, self.data_dir, self.used = lowp, data_dir, used
        self.model = catalogue.get(case.name)
        self.batch = case.p["batch"]
        self.x, self.y = native.inputs(*datasets.batch(self.model, self.batch, data_dir))
        self.what = f"{case.framework} {case.mode} {case.name}"
        self.extra = {"batch": self.batch, "params": count_params(self.model), "optimizer": self.model.optimizer.name,
                      "data": "real" if data_dir else "synthetic", "precision": case.dtype,
                      "least_flops": cost.least_flops(self.model, self.batch, case.direction)}

    def _prepared(self, run, verify) -> Prepared:
        case = self.case
        return Prepared(case, self.backend, synchronised(run, self.backend, case.device), verify, None, 0.0, "-",
                        extra=self.extra, items=self.batch, device_memory=self.native, shares=self.used,
                        least_flops=self.extra["least_flops"], ceiling_dtype=self.lowp,
                        repeatable=case.direction == "inference", whole=True)

    def training(self) -> Prepared:
        """The training step at the study's optimizer, after SGD_STEPS checked steps at the check's
        rate; its first call checked against the reference's loss and update, its next calls up to
        TIMED_CHECKED and the call after the timed rounds too."""
        case, backend, native, lowp, data_dir, used = (self.case, self.backend, self.native, self.lowp, self.data_dir,
                                                       self.used)
        param_err = sgd_equivalence(case, backend, native, data_dir, used)
        key = (case.name, self.batch, data_dir, SGD_STEPS, *conventions(case.name, native))
        want_loss = reference_sgd(*key)[0][0]
        allowance = loss_allowance(emulated_errors(*key, lowp), 0, want_loss, lowp)
        native.set_params(self.params)

        def verify(result) -> float:
            got = scalar(backend, result)
            loss_err = check_loss(f"{self.what}: first loss", got, want_loss, allowance, used)
            step_err = check_timed_step(case, native, self.params, lowp, data_dir, used)
            step_err = max(step_err, check_timed_calls(case, native, prepared.call, lowp, data_dir, used))
            self.extra.update(check_precision_ran(case, native, self.x, self.y, lowp, result))
            return max(param_err, loss_err, step_err)

        prepared = self._prepared(native.train_step(self.x, self.y, self.model.optimizer), verify)
        prepared.after_rounds = lambda: check_after_rounds(case, backend, native, prepared.call, lowp, data_dir, used)
        prepared.after_timing = lambda: time_to_target(case, backend, native, self.params)
        return prepared

    def inference(self) -> Prepared:
        """The forward pass in inference mode, its logits checked against the reference's (and in
        mixed precision, their error against what float32 and the low precision give)."""
        case, backend, lowp, batch, data_dir = self.case, self.backend, self.lowp, self.batch, self.data_dir
        want_logits = reference_logits(case.name, batch, data_dir)
        allowed = emulated_logits(case.name, batch, data_dir, lowp).logits_max if lowp != "float32" else 0.0

        def verify(result) -> float:
            logits = backend.to_numpy(result).astype(np.float64)
            err = check_logits(self.what, logits, want_logits, SLACK * allowed, self.used)
            self.extra.update(check_precision_ran(case, self.native, self.x, self.y, lowp))
            if lowp != "float32":
                f32, low = (emulated_logits(case.name, batch, data_dir, t).logits_rel for t in ("float32", lowp))
                check_low_precision(f"{self.what}: logits", relative(logits, want_logits, want_logits), f32, low, lowp)
            return err

        return self._prepared(self.native.infer(self.x), verify)
