"""Turning a model Case into a synchronised training-step or inference callable, after proving
functional equivalence with the NumPy reference model.

The check, before anything is timed: the framework's first forward pass gives the NumPy loss
(inference: the NumPy logits), and K plain-SGD steps from the same weights on the same batches
give the NumPy losses and, for every parameter tensor and every step, the NumPy update
(after - before). The check's learning rate is its own, large enough that each update is far
above the float32 rounding of the weights; the study's optimizer is swapped in afterwards and the
weights reset. The step that is timed is checked too, on its first two calls: every tensor's update
by the study's own optimizer against the reference's (check_timed_step), and the types its
products, weights and loss computed in, read from the framework (check_precision_ran).
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from opbench.core.case import Case
from opbench.frameworks.base import Backend
from opbench.suites import target
from opbench.suites.models import reference_store
from opbench.suites.prepared import CorrectnessError, Prepared, synchronised
from opbench.workloads.models import catalogue, cost, datasets, precision, reference
from opbench.workloads.models.spec import (
    LSTM,
    BatchNorm,
    ModelSpec,
    Optimizer,
    count_params,
    init_params,
    is_state,
    walk,
)

SGD_STEPS = 2
CHECK_LR = 0.1  # plain SGD in the check, whatever the study's optimizer: updates of 1e-3..1e-1 of the weights
MAX_DROP = 0.3  # ... and less where its first-order loss decrease, lr * |grad|^2, passes this share of the loss
LOSS_RTOL = 1e-4  # first loss and SGD losses, relative
LOGIT_TOL = 1e-3  # inference logits: max abs error / max(1, max|ref|)
UPDATE_RTOL = 1e-3  # each tensor's update in each SGD step: ||got - ref|| / ||ref|| (float32 gives <= 8.4e-5)
SLACK = 10.0  # ... plus this many times NumPy's own float32 error on that tensor and step (its conditioning)
# ... and never more than this, whatever the conditioning: an update of the reference's length lies at most
# twice its norm away, whichever way it points; farther, it has the wrong size.
MAX_UPDATE_ERR = 2.0
# From this allowance on, a distance cannot tell an update from none (a frozen tensor is exactly 1 away), so
# the update must also point the reference's way (a positive inner product with it). Adam's first step is
# about lr * sign(g) per element, so an element whose gradient is within its precision's rounding of zero
# may flip: one of LeNet's six first-layer biases flipped is 2/sqrt(6) = 0.82 away, which TensorFlow's
# bfloat16 step reaches on an AVX2 CPU (Eigen's bfloat16 kernels; oneDNN's run on AVX-512 BF16 hosts) and
# the bfloat16 emulation allows up to 1.41 (docs/explanation/trustworthy.md). Other measured correct code:
# 0.52, bfloat16 VGG-10's first dense layer in TensorFlow XLA and JAX; ResNet-50 in bfloat16: 0.32.
DIRECTION_AT = 1.0
# The timed step's first calls checked against the reference's (each call trains on batch 0 again, from
# where the last left): the first shows the update rule, its rate and constants; the second what a first
# step cannot (Adam's first step is lr * m / sqrt(v) = lr * sign(g) whatever its betas; SGD's momentum
# starts from the first gradient), and the models' gradients change by 11% (the MLP) to 85% (the LSTM)
# and more between the two, so an optimizer state made anew, gradients never zeroed, swapped betas or
# momentum are 136 to 3,500 times the second step's float32 allowance (studies/second_step.py).
TIMED_CHECKED = 2
# NumPy's float32 error is one draw of rounding. Another correct order of the same sums is another
# draw, and where a step is not smooth (a ReLU input or a max-pool tie within rounding of its
# switch, as in ResNet-50 at batch 2) draws differ many-fold: ResNet-50's 16.2.W in the check's
# second SGD step is 2.0e-4 off in NumPy 1.26's OpenBLAS order and up to 7.4e-4 over 8 draws there,
# 5.2e-3 in NumPy 2.4's order, and JAX 0.7.1 on a Zen 5 was 5.2e-3 off. The float32 emulation
# therefore runs DRAWS times, every weight and input moved by a random relative error within
# float32's unit roundoff in all but the first (Monte Carlo arithmetic, Parker 1997), and a
# tensor's error is its largest over the draws. Smooth steps are unmoved by it: the largest
# allowance of the MLP, LeNet, VGG-10, ResNet-20 and the LSTM is the same with 1 draw and with 8
# (studies/float32_draws.py).
DRAWS = 8


def initial_weights(model: ModelSpec) -> dict[str, np.ndarray]:
    """The shared initial weights every framework starts from, in float64."""
    return {k: v.astype(np.float64) for k, v in init_params(model).items()}


@functools.lru_cache(maxsize=4)
def _reference_logits(name: str, batch: int, data_dir: str) -> np.ndarray:
    """NumPy's inference logits on batch 0 from the initial weights."""
    model = catalogue.get(name)
    x, _ = datasets.batch(model, batch, data_dir)
    return reference.forward(model, initial_weights(model), x.astype(np.float64))


# A framework's running-variance convention changes the running variances and nothing else (a training
# pass normalises by the batch's own statistics), so every reference and emulation below runs once in
# both conventions (reference.UNBIASED_VAR) and each framework reads its own from it: TensorFlow's and
# PyTorch's checks of one batch-normalised model share one float64 trajectory and one float32 emulation
# (ResNet-20 at batch 128: 90 s on a 2-core host), bit for bit what each convention's own would be.
@functools.lru_cache(maxsize=4)
def _first_pass_both(name: str, batch: int, data_dir: str) -> tuple[float, dict, dict]:
    model = catalogue.get(name)
    x, y = datasets.batch(model, batch, data_dir)
    return reference.loss_and_grads(model, initial_weights(model), x.astype(np.float64), y, None)


def _first_pass(name: str, batch: int, data_dir: str, unbiased_var: bool | None) -> tuple[float, dict, dict]:
    """NumPy's training pass on batch 0 from the initial weights: loss, gradients, running
    statistics (in one convention, or None: both). check_lr() and the first reference step share it."""
    loss, grads, state = _first_pass_both(name, batch, data_dir)
    return loss, grads, reference.by_convention(state, unbiased_var)


def check_lr(name: str, batch: int, data_dir: str) -> float:
    """The check's learning rate: CHECK_LR, or less where the first step's first-order loss decrease
    (lr * |gradient|^2) would pass MAX_DROP of the loss. Past that the step leaves the region
    where the loss is close to linear (ResNet-50 at 0.1 predicts 15 times its loss), the second
    step's gradient amplifies the first step's float32 rounding, and two float32 runs of correct
    code part: the step's conditioning, not the code, would decide the check. The study's models
    up to ResNet-20 stay at CHECK_LR. (The running-variance convention changes only the running
    statistics, never the rate.)"""
    loss, grads, _ = _first_pass_both(name, batch, data_dir)
    drop = CHECK_LR * sum(float(np.sum(g * g)) for g in grads.values()) / loss
    return CHECK_LR * min(1.0, MAX_DROP / drop)


def reference_sgd(
    name: str, batch: int, data_dir: str, steps: int, lstm_biases: int, unbiased_var: bool | None = False
) -> tuple[list, list]:
    """NumPy's losses over `steps` plain-SGD steps at check_lr() from the initial weights, and the
    parameters (with the running statistics) before the first step and after each. The
    framework's conventions come with it: `lstm_biases` and `unbiased_var` (NativeModel's)."""
    losses, trajectory = _reference_sgd_both(name, batch, data_dir, steps, lstm_biases)
    return losses, [reference.by_convention(params, unbiased_var) for params in trajectory]


@functools.lru_cache(maxsize=4)
def _reference_sgd_both(name: str, batch: int, data_dir: str, steps: int, lstm_biases: int) -> tuple[list, list]:
    model = catalogue.get(name)
    params, losses, trajectory = reference.with_conventions(initial_weights(model)), [], []
    trajectory.append(params)
    lr = check_lr(name, batch, data_dir)
    for i in range(steps):
        if i == 0:
            loss, grads, state = _first_pass_both(name, batch, data_dir)
        else:
            xi, yi = datasets.batch(model, batch, data_dir, i)
            loss, grads, state = reference.loss_and_grads(model, params, xi.astype(np.float64), yi, None)
        params = reference.sgd_update(model, params, grads, state, lr, lstm_biases)
        losses.append(loss)
        trajectory.append(params)
    return losses, trajectory


@dataclass(frozen=True)
class Emulation:
    """How far the reference itself lands from float64 when it computes as a framework does in a
    precision: float32 arrays throughout, or mixed precision emulated (precision.rounder). Per SGD
    step: each tensor's update error (as check_update measures it), the update error of all
    trained tensors together, and the loss's error; for inference, the logits' errors."""

    updates: tuple[dict[str, float], ...] = ()
    total: tuple[float, ...] = ()
    loss: tuple[float, ...] = ()
    logits_max: float = 0.0  # max |logits - float64's|
    logits_rel: float = 0.0  # ||logits - float64's|| / ||float64's||


def _run_in(dtype: str, model: ModelSpec, params: dict, x: np.ndarray, y: np.ndarray | None,
            unbiased_var: bool | None, draw: int = 0, head=None):
    """The reference's training pass (loss, grads, state), or with y None its inference logits,
    as computed in `dtype`: float32 arrays, or float64 rounded to a low precision. In float32, a
    `draw` past 0 first moves every weight and input by a random relative error within float32's
    unit roundoff (seeded by the draw): another rounding of the same computation (DRAWS). A running
    variance in both conventions moves by the same error under both names, as each convention's
    own pass moves it. `head`: the framework's own loss head in place of NumPy's
    (NativeModel.loss_head)."""
    lowp = precision.rounder(dtype)
    if lowp is None:
        if draw:
            rng, u = np.random.default_rng(draw), float(precision.UNIT_ROUNDOFF["float32"])
            moves = {k: rng.uniform(-1.0, 1.0, np.shape(v)) for k, v in params.items()
                     if reference.convention_of(k) == k}
            params = {k: v * (1 + u * moves[reference.convention_of(k)]) for k, v in params.items()}
            x = x * (1 + u * rng.uniform(-1.0, 1.0, np.shape(x)))
        params, x = {k: v.astype(np.float32) for k, v in params.items()}, x.astype(np.float32)
    if y is None:
        return reference.forward(model, params, x, lowp)
    return reference.loss_and_grads(model, params, x, y, unbiased_var, lowp, head)


def _spec(args: tuple) -> tuple:
    """What an emulation reads besides its arguments: the model's spec and the number of draws."""
    return repr(catalogue.get(args[0])), DRAWS


# The emulations keep a few floats per tensor, so every one made is kept (reference_store: for the
# process, and between processes where make asks): each costs DRAWS passes of the reference (a minute
# for the LSTM on a 2-core host), and a run that visits the models framework by framework, or the next
# pytest process of make test, would otherwise make them again.
def emulated_errors(
    name: str, batch: int, data_dir: str, steps: int, lstm_biases: int, unbiased_var: bool, dtype: str
) -> Emulation:
    """The reference's SGD steps run in `dtype` along their own trajectory (as a framework's run
    goes), each step's update against the float64 step's. That is the step's conditioning at that
    precision, measured rather than assumed: ~1e-6 for the MLP in float32, but in a deep
    batch-normalised net a tensor whose step barely moves it (a batch-norm scale moved by 1e-6 of
    its norm) or whose gradient passes a channel of near-zero batch variance is a few percent off
    in any float32 code; in bfloat16 a gradient that sums thousands of products with cancellation
    loses most of its 8 bits, and updates are 0.2% to 50% off."""
    both = _emulated_errors_both(name, batch, data_dir, steps, lstm_biases, dtype)
    return dataclasses.replace(both, updates=tuple(reference.by_convention(u, unbiased_var) for u in both.updates))


@reference_store.kept(_spec)
def _emulated_errors_both(name: str, batch: int, data_dir: str, steps: int, lstm_biases: int, dtype: str) -> Emulation:
    model = catalogue.get(name)
    want_losses, trajectory = _reference_sgd_both(name, batch, data_dir, steps, lstm_biases)
    lr = check_lr(name, batch, data_dir)
    low = precision.rounder(dtype) is not None
    master = np.float64 if low else np.float32  # the weights' own type (emulated amp's: exact)
    # A low-precision step stores every gradient in its type, so one rounding of a trained tensor's
    # update is the least error a correct step has; the one emulated rounding of a small tensor can
    # land far below it by chance (LeNet's ten output biases, bfloat16: 0.26 of a rounding in the
    # emulation, 3.0 in TensorFlow's step on an AVX2 host). Running statistics are no gradients: kept
    # in float32, they have no such floor. Low precision is emulated once, float32 DRAWS times.
    floor = float(precision.UNIT_ROUNDOFF[dtype]) if low else 0.0
    updates, totals, losses = [{} for _ in range(steps)], [0.0] * steps, [0.0] * steps
    batches = [datasets.batch(model, batch, data_dir, i) for i in range(steps)]
    for draw in range(1 if low else DRAWS):
        params = trajectory[0]
        for i, (xi, yi) in enumerate(batches):
            loss, grads, state = _run_in(dtype, model, params, xi.astype(np.float64), yi, None, draw)
            wide = lambda d: {k: np.asarray(v, np.float64) for k, v in d.items()}
            got = reference.sgd_update(model, params, wide(grads), wide(state), lr, lstm_biases)
            got = {k: v.astype(master).astype(np.float64) for k, v in got.items()}
            before, after = trajectory[i], trajectory[i + 1]
            for k in after:
                err = _relative(got[k] - params[k], after[k] - before[k], after[k])
                updates[i][k] = max(updates[i].get(k, 0.0), err, 0.0 if is_state(k) else floor)
            totals[i] = max(totals[i], total_error(params, got, before, after))
            losses[i] = max(losses[i], abs(float(loss) - want_losses[i]) / max(1.0, abs(want_losses[i])))
            params = got
    return Emulation(tuple(updates), tuple(totals), tuple(losses))


@reference_store.kept(_spec)
def emulated_logits(name: str, batch: int, data_dir: str, dtype: str) -> Emulation:
    """The reference's inference logits computed in `dtype`, against float64's."""
    model = catalogue.get(name)
    x, _ = datasets.batch(model, batch, data_dir)
    want = _reference_logits(name, batch, data_dir)
    got = _run_in(dtype, model, initial_weights(model), x.astype(np.float64), None, False)
    return Emulation(logits_max=float(np.max(np.abs(got - want))), logits_rel=_relative(got, want, want))


def total_error(got_before: dict, got_after: dict, before: dict, after: dict) -> float:
    """The update of every trained tensor together against the reference's, ||(got_after -
    got_before) - (after - before)|| / ||after - before||: one norm over thousands of values, which
    no chance cancellation makes small."""
    trained = [k for k in after if not is_state(k)]
    wide = lambda d, k: np.asarray(d[k], np.float64)
    diff = sum(float(np.sum((wide(got_after, k) - wide(got_before, k) - (after[k] - before[k])) ** 2)) for k in trained)
    norm = sum(float(np.sum((after[k] - before[k]) ** 2)) for k in trained)
    return float(np.sqrt(diff / max(norm, 1e-300)))


def check_low_precision(what: str, got: float, float32: float, low: float, dtype: str) -> None:
    """A result labelled mixed precision must be as far from float64 as a low-precision
    computation lands, not as close as float32's: its error must pass the geometric mean of the
    two emulated errors (they lie ~2^16 apart for bfloat16, 2^13 for float16, so a real
    low-precision result clears the line by a factor of ~100 and a float32 one misses it by as
    much). A step labelled amp that computes in float32 is not timed as amp."""
    line = float(np.sqrt(max(float32, 1e-300) * low))
    if not got > line:
        raise CorrectnessError(f"{what}: the result is {got:.3g} from float64's, as close as float32 computes "
                               f"({float32:.3g}), not {dtype} ({low:.3g}): the step does not run in {dtype}")


def _relative(got: np.ndarray, want: np.ndarray, value: np.ndarray) -> float:
    """||got - want|| relative to ||want|| (or to a millionth of the value's norm, if the want is 0)."""
    got = np.asarray(got, dtype=np.float64)
    scale = max(float(np.linalg.norm(want)), 1e-6 * float(np.linalg.norm(value)), 1e-30)
    return float(np.linalg.norm(got - want)) / scale if got.shape == want.shape else np.inf


def _change(a: np.ndarray, b: np.ndarray, step: np.ndarray) -> float:
    """||a - b|| relative to the norm of the reference's `step`."""
    return float(np.linalg.norm(a - b)) / max(float(np.linalg.norm(step)), 1e-30)


def _note(used: list[float] | None, err: float, limit: float) -> None:
    """Keep `err` as a share of its allowance `limit` in `used` (the check's margin, which a test
    or a reader compares with 1, never with a constant of one host)."""
    if used is not None:
        used.append(err / limit if limit > 0 else (0.0 if err == 0 else np.inf))


def check_loss(what: str, got: float, want: float, allowance: float = 0.0, used: list[float] | None = None) -> float:
    """The loss against NumPy's: within LOSS_RTOL, plus `allowance` (relative, the precision's)."""
    err = abs(got - want)
    limit = (LOSS_RTOL + allowance) * max(1.0, abs(want))
    if not np.isfinite(got) or err > limit:
        raise CorrectnessError(f"{what}: {got:.6g} != NumPy {want:.6g}")
    _note(used, err, limit)
    return err


def check_logits(what: str, got: np.ndarray, want: np.ndarray, allowance: float = 0.0,
                 used: list[float] | None = None) -> float:
    """The largest |got - want| of logits against NumPy's; raises CorrectnessError past LOGIT_TOL x
    max(1, max|want|) plus `allowance` (the precision's), or on a shape that differs."""
    err = float(np.max(np.abs(got - want))) if got.shape == want.shape else np.inf
    limit = LOGIT_TOL * max(1.0, float(np.max(np.abs(want)))) + allowance
    if not err <= limit:
        raise CorrectnessError(f"{what}: logits differ from NumPy by {err:.3g}")
    _note(used, err, limit)
    return err


def update_limit(name: str, emulated: float | None, rtol: float = UPDATE_RTOL) -> float:
    """How far a tensor's update may be from the reference's, relative to its norm: `rtol`
    (UPDATE_RTOL, or timed_rtol()) plus SLACK times its emulated error in the precision, never past
    MAX_UPDATE_ERR (from
    DIRECTION_AT on, check_update also asks for the reference's direction). A running
    mean or variance is held to its own error alone, SLACK times the emulated one (at least one
    float32 rounding): its update is a batch statistic the framework computes as the reference
    does, measured within 1.33 of the emulated error in every framework and mode (ResNet-20), and
    a floor of 1e-3 let a biased running variance through at batch 128 (8.4e-5 off). That one is
    not capped at MAX_UPDATE_ERR: where the timed rounds, all on one batch, have brought the running
    statistics close to the batch's, their update is smaller than the low precision's error in the
    statistic, and the emulation says so (a bfloat16 ResNet-20's first running variance, 2.14 of
    its update's norm off after the rounds of `make bench` on a Xeon with AMX, where the emulation's
    own error capped the allowance at 2). Without an emulation (the distributed check) the plain
    rule applies."""
    if emulated is not None and is_state(name):
        return SLACK * max(emulated, float(precision.UNIT_ROUNDOFF["float32"]))
    return min(rtol + SLACK * (emulated or 0.0), MAX_UPDATE_ERR)


def timed_rtol(opt: Optimizer, step: int) -> float:
    """The floor of the timed step's allowance in its call `step`: UPDATE_RTOL for SGD; for Adam,
    SLACK times how far the step moves, relative to itself, where a framework holds the rate and
    the betas in float32 and makes the bias corrections 1 - beta^t from them in float32 (Keras,
    MXNet and JAX do; PyTorch makes them in float64): float32's beta2 = 0.999 is 1.3e-8 off, which
    is 1.3e-5 of 1 - beta2 and 6.4e-6 of the step (the LSTM's first Adam step measured 6.8e-6 off in
    MXNet and TensorFlow, 8 times its emulated error), and each power past the first is rounded
    once more. UPDATE_RTOL (1e-3) in its place hid AdamW's decay at Keras' default (4e-3 of the
    rate, 6.8e-4 of LeNet's step)."""
    if opt.name != "adam":
        return UPDATE_RTOL
    u = float(precision.UNIT_ROUNDOFF["float32"])

    def correction(beta: float) -> float:  # relative error of 1 - beta^step made in float32
        held = float(np.float32(beta))
        return (step * beta ** (step - 1) * abs(held - beta) + (u * beta**step if step > 1 else 0.0)) / (
            1 - beta**step)

    rate = abs(float(np.float32(opt.lr)) - opt.lr) / opt.lr
    return SLACK * (rate + correction(opt.beta1) + 0.5 * correction(opt.beta2))


def check_update(
    case: Case, step: str, before: dict, after: dict, want_before: dict, want_after: dict,
    emulated_error: dict | None = None, used: list[float] | None = None, rtol: float = UPDATE_RTOL,
) -> float:
    """The worst relative error of one SGD step's update over the parameter tensors: each
    tensor's change (after - before) against NumPy's change, relative to the norm of NumPy's
    change. Raises CorrectnessError past UPDATE_RTOL plus SLACK times `emulated_error` of the
    tensor (emulated_errors(): the same step's own error in the precision), or past
    MAX_UPDATE_ERR (a trained tensor's), or, where that allowance reaches DIRECTION_AT, on a trained
    tensor's update that does not point the reference's way; naming the tensor (each tensor's share
    of its allowance goes to `used`). A tensor left unchanged, trained at the wrong rate or on a
    stale or partial gradient fails here even where its weights are still close to NumPy's; so does
    a running mean or variance moved with the wrong momentum, from the wrong statistics, or not at
    all (where its precision can tell)."""
    worst = 0.0
    for name, ref_after in want_after.items():
        if name not in after:
            raise CorrectnessError(f"{case.framework} {case.mode} {case.name}: the model has no parameter {name}")
        got = np.asarray(after[name], dtype=np.float64) - np.asarray(before[name], dtype=np.float64)
        want = ref_after - want_before[name]
        err = _relative(got, want, ref_after)
        limit = update_limit(name, (emulated_error or {}).get(name), rtol)
        if not err <= limit:
            raise CorrectnessError(f"{case.framework} {case.mode} {case.name}: the update of parameter {name} "
                                   f"in {step} differs from NumPy's by {err:.3g} of its norm, where {case.dtype} "
                                   f"allows {limit:.3g}")
        # a running statistic's update below its precision's error has no direction to hold it to
        if limit >= DIRECTION_AT and not is_state(name) and not float(np.sum(got * want)) > 0:
            raise CorrectnessError(f"{case.framework} {case.mode} {case.name}: the update of parameter {name} "
                                   f"in {step} does not point NumPy's way ({err:.3g} of its norm off, where "
                                   f"{case.dtype} allows {limit:.3g}: a distance that cannot tell it from none)")
        _note(used, err, limit)
        worst = max(worst, err)
    return worst


def optimizer_update(model: ModelSpec, params: dict, grads: dict, state: dict, opt: Optimizer, lstm_biases: int,
                     eps_corrected: bool, moments: tuple = ({}, {}), step: int = 1) -> tuple[dict, tuple]:
    """The reference's step number `step` of `opt` (the study's optimizer, as the timed step runs
    it) from `params`, and the optimizer's moments after it: SGD at its rate, or Adam with the
    framework's epsilon convention (`moments` empty before its first step). An optimizer the
    reference does not have is an error: a step that cannot be checked is not timed."""
    if opt.name == "sgd":
        return reference.sgd_update(model, params, grads, state, opt.lr, lstm_biases), moments
    if opt.name == "adam":
        return reference.adam_update(model, params, grads, state, moments, step, opt, lstm_biases, eps_corrected)
    raise CorrectnessError(f"{model.name}: the reference has no optimizer {opt.name!r}; its timed step cannot be "
                           "checked, so it is not timed")


def _step_from(model: ModelSpec, params: dict, history: list[dict], state: dict, lstm_biases: int,
               eps_corrected: bool) -> dict:
    """The model's own optimizer's step number len(history) from `params`: its moments made from
    the gradients of every step in `history`, the last of them this step's."""
    moments: tuple = ({}, {})
    for t, grads in enumerate(history, 1):
        after, moments = optimizer_update(model, params, grads, state, model.optimizer, lstm_biases, eps_corrected,
                                          moments, t)
    return after


@functools.lru_cache(maxsize=4)
def _timed_trajectory_both(name: str, batch: int, data_dir: str, lstm_biases: int, eps_corrected: bool,
                           calls: int = TIMED_CHECKED) -> tuple:
    """The first `calls` calls of the timed step in float64, both running-variance conventions
    (reference.UNBIASED_VAR): the parameters before the first and after each, and each step's
    gradients and running statistics. Every call trains on batch 0, as the timed callable does."""
    model = catalogue.get(name)
    x, y = datasets.batch(model, batch, data_dir)
    params, history = [reference.with_conventions(initial_weights(model))], []
    for t in range(calls):
        _, grads, state = (_first_pass_both(name, batch, data_dir) if t == 0 else
                           reference.loss_and_grads(model, params[-1], x.astype(np.float64), y, None))
        history.append(grads)
        params.append(_step_from(model, params[-1], history, state, lstm_biases, eps_corrected))
    return params, history


def timed_steps_errors(
    name: str, batch: int, data_dir: str, lstm_biases: int, unbiased_var: bool, eps_corrected: bool, dtype: str,
    calls: int = TIMED_CHECKED,
) -> tuple[dict, ...]:
    """Each tensor's update error in each of the first `calls` timed steps when its passes run
    in `dtype` and the weights are stored as the framework stores them, along the emulation's own
    trajectory (its conditioning, measured as emulated_errors() measures the check's steps)."""
    both = _timed_steps_errors_both(name, batch, data_dir, lstm_biases, eps_corrected, dtype, calls)
    return tuple(reference.by_convention(errors, unbiased_var) for errors in both)


@reference_store.kept(_spec)
def _timed_steps_errors_both(name: str, batch: int, data_dir: str, lstm_biases: int, eps_corrected: bool,
                             dtype: str, calls: int) -> tuple[dict, ...]:
    model = catalogue.get(name)
    x, y = datasets.batch(model, batch, data_dir)
    want, history = _timed_trajectory_both(name, batch, data_dir, lstm_biases, eps_corrected, calls)
    store, low = _stored(dtype), precision.rounder(dtype) is not None
    errors = [dict.fromkeys(want[1], 0.0) for _ in history]
    for draw in range(1 if low else DRAWS):
        # Each path is where a correct framework may stand before the step, with the gradients its
        # moments hold: the emulation's own, and (once, in the first draw) each end of the first
        # step's spread: where another order puts the first step (an Adam element whose gradient is
        # within rounding of zero moved the other way, a whole rate), the second step starts from
        # there (MXNet's VGG-10 second step was 0.8% off on a conv bias from the own path alone).
        paths: list[tuple[dict, list]] = [(want[0], [])]
        for t in range(len(history)):
            ahead = []
            for params, before in paths:
                _, grads, state = _run_in(dtype, model, params, x.astype(np.float64), y, None, draw)
                low_history = [*before, _wide(grads)]
                update = lambda hist, st, start=params: _step_from(model, start, hist, st, lstm_biases,
                                                                   eps_corrected)
                got, step, others = _step_errors(model.optimizer, update, history[:t + 1], low_history,
                                                 _wide(state), params, want[t], want[t + 1], store, draw_all=low)
                errors[t] = {k: max(errors[t][k], v) for k, v in step.items()}
                ahead.append((got, low_history))
                if draw == 0 and t == 0:
                    ahead += others
            paths = ahead
    return tuple(errors)


@functools.lru_cache(maxsize=8)
def reference_timed_steps(
    name: str, batch: int, data_dir: str, lstm_biases: int, unbiased_var: bool, eps_corrected: bool, dtype: str,
    calls: int = TIMED_CHECKED,
) -> tuple[tuple[dict, dict, dict], ...]:
    """For each of the first `calls` timed steps (the model's own optimizer on batch 0 from
    the initial weights, in float64): the parameters (with running statistics) before it and after
    it, and each tensor's update error in `dtype` (timed_steps_errors)."""
    params, _ = _timed_trajectory_both(name, batch, data_dir, lstm_biases, eps_corrected, calls)
    params = [reference.by_convention(p, unbiased_var) for p in params]
    errors = timed_steps_errors(name, batch, data_dir, lstm_biases, unbiased_var, eps_corrected, dtype, calls)
    return tuple((params[t], params[t + 1], errors[t]) for t in range(calls))


def reference_timed_step(
    name: str, batch: int, data_dir: str, lstm_biases: int, unbiased_var: bool, eps_corrected: bool, dtype: str
) -> tuple[dict, dict]:
    """The parameters after the first timed step, in float64, and each tensor's update error in
    `dtype` (reference_timed_steps' first, made alone: the data-parallel suite checks one call)."""
    _, after, errors = reference_timed_steps(name, batch, data_dir, lstm_biases, unbiased_var, eps_corrected,
                                             dtype, 1)[0]
    return after, errors


def _wide(tensors: dict) -> dict:
    return {k: np.asarray(v, np.float64) for k, v in tensors.items()}


def _stored(dtype: str):
    """The weights as a framework stores them in `dtype`: float32, or (mixed precision, emulated)
    float64 masters, exact."""
    master = np.float64 if precision.rounder(dtype) is not None else np.float32
    return lambda params: {k: v.astype(master).astype(np.float64) for k, v in params.items()}


def _step_errors(opt: Optimizer, update, grads: list[dict], low_grads: list[dict], low_state: dict, start: dict,
                 before: dict, after: dict, stored, draw_all: bool) -> tuple[dict, dict, list]:
    """The emulated step from `start` that `update(low_grads, low_state)` makes, and each tensor's
    update error against the float64 step from `before` to `after` (made from `grads`): its own,
    and where the optimizer divides by the gradient (or `draw_all`, low precision) the other
    orders' too; and those other orders' steps, each with the gradients it was made from."""
    want = {k: after[k] - before[k] for k in after}
    got = stored(update(low_grads, low_state))
    errors = {k: _relative(got[k] - start[k], want[k], after[k]) for k in after}
    others: list[tuple[dict, list]] = []
    if opt.name == "sgd" and not draw_all:
        return got, errors, others
    # Another correct framework rounds elsewhere: each gradient element may lie up to twice
    # the emulation's error on either side of the emulated one, and the step's allowance is the
    # largest change of the update over that interval (its derivative is monotonic, the ends
    # bound it). Under SGD the update is the gradient, its elements' errors add in quadrature
    # over the tensor and the emulation's own are a fair draw. Adam divides each element by
    # its own size, so an element near zero moves its whole step under an error that another
    # order puts on it and NumPy's did not: there every element may be as far off as the
    # tensor's worst (cuDNN's LSTM put a 0.Wx gradient element of 1.6e-9 at -8.3e-9, 30 times
    # NumPy's float32 error on that element and within its 1.4e-8 on the tensor's worst; in
    # bfloat16, TensorFlow XLA's LSTM step is 24% off on the last dense layer, 8 times what
    # NumPy's own elements allowed), except where both make an exact 0 (a dead unit). A later
    # step's moments hold every earlier step's gradients, each moved the same way.
    for sign in (1.0, -1.0):
        moved = []
        for g, lg in zip(grads, low_grads, strict=True):
            spread = {k: 2 * np.abs(lg[k] - g[k]) for k in g}
            if opt.name != "sgd":
                spread = {k: np.where((g[k] == 0) & (lg[k] == 0), 0.0, d.max()) for k, d in spread.items()}
            moved.append({k: v + sign * spread[k] for k, v in lg.items()})
        other = stored(update(moved, low_state))
        errors = {k: max(errors[k], _change(other[k], got[k], want[k])) for k in after}
        others.append((other, moved))
    return got, errors, others


def emulated_step(model: ModelSpec, update, batches: list, grads: list[dict], state: dict,
                  unbiased_var: bool | None, dtype: str) -> tuple[dict, dict]:
    """One optimizer step made from the gradients of one or more `batches` (each's float64 pass
    from the initial weights in `grads`, the running statistics in `state`, in `unbiased_var`'s
    convention or both): `update(gradients, state)` makes it. Returns the float64 step and each
    tensor's update error when the passes run in `dtype` and the weights are stored as the
    framework stores them."""
    initial = initial_weights(model)
    if unbiased_var is None:
        initial = reference.with_conventions(initial)
    want = update(grads, state)
    low = precision.rounder(dtype) is not None
    errors = dict.fromkeys(want, 0.0)
    for draw in range(1 if low else DRAWS):
        passes = [_run_in(dtype, model, initial, x.astype(np.float64), y, unbiased_var, draw) for x, y in batches]
        _, step, _ = _step_errors(model.optimizer, update, grads, [_wide(p[1]) for p in passes], _wide(passes[0][2]),
                               initial, initial, want, _stored(dtype), draw_all=low)
        errors = {k: max(errors[k], v) for k, v in step.items()}
    return want, errors


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


def adam_bound(opt: Optimizer) -> float:
    """The most one Adam step can move an element, in units of its rate, whatever the gradients
    before it: |m_t| <= (1 - b1) sum b1^(t-i) |g_i|, and by Cauchy-Schwarz that sum is at most
    sqrt(sum b2^(t-i) g_i^2 / (1 - b1^2 / b2)), so |m_t| / sqrt(v_t) <= (1 - b1) / sqrt((1 - b2)
    (1 - b1^2 / b2)); the bias corrections multiply it by sqrt(1 - b2^t) / (1 - b1^t), below 1 from
    the first step on at Adam's defaults (0.32 there, 1 in the limit; the largest over the steps is
    taken for any betas), and epsilon only lowers it. 7.3 at Adam's defaults, where a step whose
    gradients keep one sign moves about 1."""
    t = np.arange(1.0, 1e5)
    correction = max(1.0, float(np.max(np.sqrt(1 - opt.beta2**t) / (1 - opt.beta1**t))))
    return correction * (1 - opt.beta1) / np.sqrt((1 - opt.beta2) * (1 - opt.beta1**2 / opt.beta2))


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
    wide = _wide(before)
    x = x.astype(np.float64)
    loss, grads, state = reference.loss_and_grads(model, wide, x, y, unbiased_var)
    want = reference.sgd_update(model, wide, grads, state, opt.lr, lstm_biases)
    master, floor = (np.float64, float(precision.UNIT_ROUNDOFF[lowp])) if low else (np.float32, 0.0)
    updates: dict[str, float] = {}
    loss_err = 0.0
    passes = [(draw, None) for draw in range(1 if low or opt.name != "sgd" else DRAWS)]
    for draw, own in passes + ([(0, head)] if head else []):
        low_loss, low_grads, low_state = _run_in(lowp, model, wide, x, y, unbiased_var, draw, own)
        got = reference.sgd_update(model, wide, _wide(low_grads), _wide(low_state), opt.lr, lstm_biases)
        for k in want:
            err = _relative(got[k].astype(master) - wide[k], want[k] - wide[k], want[k])
            updates[k] = max(updates.get(k, 0.0), err, 0.0 if is_state(k) else floor)
        loss_err = max(loss_err, abs(float(low_loss) - loss) / max(1.0, abs(loss)))
    return loss, want, grads, Emulation(updates=(updates,), loss=(loss_err,))


def check_after_rounds(case: Case, backend: Backend, native, call, x: np.ndarray, y: np.ndarray, lowp: str,
                       used: list[float] | None = None) -> float:
    """The timed step's next call after its timed rounds (untimed, made by the timed callable `call`
    on batch (x, y), from wherever the rounds left the weights), as far as the reference can follow
    it without their history: its loss is the reference's loss of the weights it started from,
    within what the case's precision allows at those weights; every running statistic moves as the
    reference's does; every weight stays finite; under SGD (no state) every trained tensor's update
    is the reference's step from those weights; under Adam (whose moments come from every timed
    call's gradients) no element moves more than adam_bound() times the rate, and a tensor the
    reference's gradient moves does move. A step that goes wrong once warm (a stale loss, an update
    skipped, applied twice or at a wrong rate) fails here. Returns the worst update error."""
    model = catalogue.get(case.name)
    opt = model.optimizer
    what = f"{case.framework} {case.mode} {case.name}"
    lstm_biases, unbiased_var = conventions(case.name, native)
    before = native.get_params()
    got_loss = scalar(backend, call())
    after = native.get_params()
    for name, value in after.items():
        if not np.all(np.isfinite(value)):
            raise CorrectnessError(f"{what}: parameter {name} is not finite after the timed rounds")
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
    worst = 0.0
    for name, g in grads.items():
        new, old = np.asarray(after[name], np.float64), np.asarray(before[name], np.float64)
        # less one rounding of the float32 weight it lands on
        moved = np.maximum(np.abs(new - old) - u * np.abs(new), 0.0) / (opt.lr * scale.get(name, 1))
        largest = float(np.max(moved, initial=0.0))
        if not largest <= limit:
            raise CorrectnessError(f"{what}: {step} moved an element of parameter {name} by {largest:.3g} times "
                                   f"the rate, where Adam moves it at most {limit:.3g} times, whatever its history")
        if np.any(g) and np.array_equal(new, old):
            raise CorrectnessError(f"{what}: {step} left parameter {name} unchanged, where its gradient is not zero")
        _note(used, largest, limit)
        worst = max(worst, largest / limit)
    return worst


def conventions(name: str, native) -> tuple[int, bool]:
    """The framework's conventions that change the reference of this model: its LSTM bias count
    where the model has an LSTM, its running-variance estimator where it has batch norm. Frameworks
    that differ only in what the model lacks share one reference and one emulation."""
    model = catalogue.get(name)
    kinds = {type(layer) for _, layer, _ in walk(model.layers, model.input_shape)}
    return (native.lstm_biases if LSTM in kinds else 1, native.unbiased_var if BatchNorm in kinds else False)


def scalar(backend: Backend, loss) -> float:
    """A framework's loss (any shape of one element) as a Python float; waits for it."""
    return float(backend.to_numpy(loss).reshape(-1)[0])


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


def loss_allowance(emulation: Emulation, step: int, loss: float, dtype: str) -> float:
    """SLACK times the precision's own loss error in this step, and in low precision at least
    SLACK times one rounding of the loss (a single scalar's error can cancel by chance)."""
    floor = precision.UNIT_ROUNDOFF[dtype] * abs(loss) / max(1.0, abs(loss)) if dtype != "float32" else 0.0
    return SLACK * max(emulation.loss[step], floor)


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
                     _reference_logits(case.name, case.p["batch"], data_dir), used=used)


def prepare_model(case: Case, backend: Backend, data_dir: str = "") -> Prepared:
    """Build the model, prove equivalence, and return the callable to time."""
    model = catalogue.get(case.name)
    batch = case.p["batch"]
    lowp = precision.compute_dtype(case.dtype, case.device)
    used: list[float] = []  # every checked quantity's error as a share of its allowance
    if lowp != "float32":
        float32_twin(case, backend, data_dir, used)
    params = init_params(model)
    native = backend.build(model, params, case.device, case.dtype, case.mode)
    x, y = native.inputs(*datasets.batch(model, batch, data_dir))
    extra = {"batch": batch, "params": count_params(model), "optimizer": model.optimizer.name,
             "data": "real" if data_dir else "synthetic", "precision": case.dtype}

    if case.direction == "training":
        param_err = sgd_equivalence(case, backend, native, data_dir, used)
        key = (case.name, batch, data_dir, SGD_STEPS, *conventions(case.name, native))
        want_loss = reference_sgd(*key)[0][0]
        allowance = loss_allowance(emulated_errors(*key, lowp), 0, want_loss, lowp)
        native.set_params(params)
        run = native.train_step(x, y, model.optimizer)

        def verify(result) -> float:
            got = scalar(backend, result)
            loss_err = check_loss(f"{case.framework} {case.mode} {case.name}: first loss", got, want_loss, allowance,
                                  used)
            step_err = check_timed_step(case, native, params, lowp, data_dir, used)
            step_err = max(step_err, check_timed_calls(case, native, call, lowp, data_dir, used))
            extra.update(check_precision_ran(case, native, x, y, lowp, result))
            return max(param_err, loss_err, step_err)
    else:
        want_logits = _reference_logits(case.name, batch, data_dir)
        allowed = emulated_logits(case.name, batch, data_dir, lowp).logits_max if lowp != "float32" else 0.0
        run = native.infer(x)

        def verify(result) -> float:
            logits = backend.to_numpy(result).astype(np.float64)
            err = check_logits(f"{case.framework} {case.mode} {case.name}", logits, want_logits, SLACK * allowed,
                               used)
            extra.update(check_precision_ran(case, native, x, y, lowp))
            if lowp != "float32":
                f32, low = (emulated_logits(case.name, batch, data_dir, t).logits_rel for t in ("float32", lowp))
                check_low_precision(f"{case.framework} {case.mode} {case.name}: logits",
                                    _relative(logits, want_logits, want_logits), f32, low, lowp)
            return err

    call = synchronised(run, backend, case.device)
    extra["least_flops"] = cost.least_flops(model, batch, case.direction)
    prepared = Prepared(case, backend, call, verify, None, 0.0, "-", extra=extra, items=batch,
                        peak_memory=native.peak_memory, shares=used, least_flops=extra["least_flops"],
                        ceiling_dtype=lowp, repeatable=case.direction == "inference")
    if case.direction == "training":
        prepared.after_rounds = lambda: check_after_rounds(case, backend, native, call, *datasets.batch(
            model, batch, data_dir), lowp, used)
        prepared.after_timing = lambda: time_to_target(case, backend, native, params)
    return prepared
