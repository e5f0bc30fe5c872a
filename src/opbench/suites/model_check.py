"""The model check's comparisons: a framework's loss, logits and each tensor's update against
the reference's (model_reference), each within what its precision allows, and each raising
CorrectnessError with one line that names the tensor and the step. Shared by every suite that
trains a model: the model suite, whole training runs and data-parallel steps.
"""

from __future__ import annotations

import numpy as np

from opbench.core.case import Case
from opbench.frameworks.base import Backend
from opbench.suites.model_reference import Emulation, relative
from opbench.suites.prepared import CorrectnessError
from opbench.workloads.models import precision
from opbench.workloads.models.spec import Optimizer, is_state

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


def note(used: list[float] | None, err: float, limit: float) -> None:
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
    note(used, err, limit)
    return err


def check_logits(what: str, got: np.ndarray, want: np.ndarray, allowance: float = 0.0,
                 used: list[float] | None = None) -> float:
    """The largest |got - want| of logits against NumPy's; raises CorrectnessError past LOGIT_TOL x
    max(1, max|want|) plus `allowance` (the precision's), or on a shape that differs."""
    err = float(np.max(np.abs(got - want))) if got.shape == want.shape else np.inf
    limit = LOGIT_TOL * max(1.0, float(np.max(np.abs(want)))) + allowance
    if not err <= limit:
        raise CorrectnessError(f"{what}: logits differ from NumPy by {err:.3g}")
    note(used, err, limit)
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
        err = relative(got, want, ref_after)
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
        note(used, err, limit)
        worst = max(worst, err)
    return worst


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


def loss_allowance(emulation: Emulation, step: int, loss: float, dtype: str) -> float:
    """SLACK times the precision's own loss error in this step, and in low precision at least
    SLACK times one rounding of the loss (a single scalar's error can cancel by chance)."""
    floor = precision.UNIT_ROUNDOFF[dtype] * abs(loss) / max(1.0, abs(loss)) if dtype != "float32" else 0.0
    return SLACK * max(emulation.loss[step], floor)


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


def scalar(backend: Backend, loss) -> float:
    """A framework's loss (any shape of one element) as a Python float; waits for it."""
    return float(backend.to_numpy(loss).reshape(-1)[0])
