"""What the NumPy reference says a catalogue model's training does, and how far a correct
computation in a precision lands from it: the check's float64 trajectories (its SGD steps at the
check's rate, the timed step's first calls under the model's own optimizer, the inference logits)
and their emulations (the same passes in float32 over DRAWS roundings, or in mixed precision
emulated), every one made once per process and kept between processes (reference_store).

Every suite that trains a model checks against these: the model suite (suites/models), whole
training runs (suites/convergence) and data-parallel steps (suites/distributed). The comparisons
themselves, and their allowances, are in model_check.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

import numpy as np

from opbench.suites import reference_store
from opbench.workloads.models import catalogue, datasets, precision, reference
from opbench.workloads.models.spec import LSTM, BatchNorm, ModelSpec, Optimizer, init_params, is_state, walk

SGD_STEPS = 2
CHECK_LR = 0.1  # plain SGD in the check, whatever the study's optimizer: updates of 1e-3..1e-1 of the weights
MAX_DROP = 0.3  # ... and less where its first-order loss decrease, lr * |grad|^2, passes this share of the loss
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


# The float64 trajectories below hold whole copies of a model's weights and gradients (ResNet-50's
# timed steps at batch 2: 1.7 GiB, measured), and a process checks one model's cases one after
# another (each suite lists its cases model by model). They are kept for the model last asked
# about only: a worker holds one model's references, not the last four models' (which took a
# torch worker of `make bench` past 7 GiB at ResNet-50, where the case alone peaks at 3.3 GiB).
class OneModel:
    """Caches that hold one model's figures at a time: use it as a decorator of `fn(name, ...)`;
    a call about a model other than the one held clears every cache it made first."""

    def __init__(self) -> None:
        self.caches: list = []  # the decorated functions
        self.memos: list[dict] = []  # their figures, by arguments
        self.held = ""  # the model they hold

    def __call__(self, fn):
        memo: dict = {}
        self.memos.append(memo)

        @functools.wraps(fn)
        def wrapper(name: str, *args):
            self.hold(name)
            if (name, *args) not in memo:
                memo[(name, *args)] = fn(name, *args)
            return memo[(name, *args)]

        wrapper.cache_clear = memo.clear  # type: ignore[attr-defined]
        self.caches.append(wrapper)
        return wrapper

    def hold(self, name: str) -> None:
        """Keep `name`'s figures only: every cache made for another model is cleared."""
        if self.held != name:
            for memo in self.memos:
                memo.clear()
            self.held = name

    def nbytes(self) -> int:
        """The bytes of the arrays the caches hold now, each array counted once."""
        seen: dict[int, int] = {}

        def walk(value) -> None:
            if isinstance(value, np.ndarray):
                seen[id(value)] = value.nbytes
            elif isinstance(value, dict):
                for v in value.values():
                    walk(v)
            elif isinstance(value, tuple | list):
                for v in value:
                    walk(v)

        for memo in self.memos:
            walk(list(memo.values()))
        return sum(seen.values())


_one_model = OneModel()


def hold_only(name: str) -> None:
    """Let every other model's float64 trajectories go before a case of `name` is built. A case
    that never asks for them (inference) would otherwise leave the last trained model's in
    memory, and its peak resident set would count them: a torch worker held 1,838 MiB after
    ResNet-50's training, 400 MiB once they went (garbage collected and trimmed both times)."""
    _one_model.hold(name)


def held_bytes() -> int:
    """What the references of the model last checked hold: kept on purpose for the next case of
    that model, which would compute them if it ran alone, and let go before a case of another."""
    return _one_model.nbytes()


def initial_weights(model: ModelSpec) -> dict[str, np.ndarray]:
    """The shared initial weights every framework starts from, in float64."""
    return {k: v.astype(np.float64) for k, v in init_params(model).items()}


@functools.lru_cache(maxsize=4)
def reference_logits(name: str, batch: int, data_dir: str) -> np.ndarray:
    """NumPy's inference logits on batch 0 from the initial weights."""
    model = catalogue.get(name)
    x, _ = datasets.batch(model, batch, data_dir)
    return reference.forward(model, initial_weights(model), x.astype(np.float64))


# A framework's running-variance convention changes the running variances and nothing else (a training
# pass normalises by the batch's own statistics), so every reference and emulation below runs once in
# both conventions (reference.UNBIASED_VAR) and each framework reads its own from it: TensorFlow's and
# PyTorch's checks of one batch-normalised model share one float64 trajectory and one float32 emulation
# (ResNet-20 at batch 128: 90 s on a 2-core host), bit for bit what each convention's own would be.
@_one_model
def _first_pass_both(name: str, batch: int, data_dir: str) -> tuple[float, dict, dict]:
    model = catalogue.get(name)
    x, y = datasets.batch(model, batch, data_dir)
    return reference.loss_and_grads(model, initial_weights(model), x.astype(np.float64), y, None)


def first_pass(name: str, batch: int, data_dir: str, unbiased_var: bool | None) -> tuple[float, dict, dict]:
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


@_one_model
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


def run_in(dtype: str, model: ModelSpec, params: dict, x: np.ndarray, y: np.ndarray | None,
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
            loss, grads, state = run_in(dtype, model, params, xi.astype(np.float64), yi, None, draw)
            got = reference.sgd_update(model, params, wide(grads), wide(state), lr, lstm_biases)
            got = {k: v.astype(master).astype(np.float64) for k, v in got.items()}
            before, after = trajectory[i], trajectory[i + 1]
            for k in after:
                err = relative(got[k] - params[k], after[k] - before[k], after[k])
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
    want = reference_logits(name, batch, data_dir)
    got = run_in(dtype, model, initial_weights(model), x.astype(np.float64), None, False)
    return Emulation(logits_max=float(np.max(np.abs(got - want))), logits_rel=relative(got, want, want))


def total_error(got_before: dict, got_after: dict, before: dict, after: dict) -> float:
    """The update of every trained tensor together against the reference's, ||(got_after -
    got_before) - (after - before)|| / ||after - before||: one norm over thousands of values, which
    no chance cancellation makes small."""
    trained = [k for k in after if not is_state(k)]
    wide = lambda d, k: np.asarray(d[k], np.float64)
    diff = sum(float(np.sum((wide(got_after, k) - wide(got_before, k) - (after[k] - before[k])) ** 2)) for k in trained)
    norm = sum(float(np.sum((after[k] - before[k]) ** 2)) for k in trained)
    return float(np.sqrt(diff / max(norm, 1e-300)))


def relative(got: np.ndarray, want: np.ndarray, value: np.ndarray) -> float:
    """||got - want|| relative to ||want|| (or to a millionth of the value's norm, if the want is 0)."""
    got = np.asarray(got, dtype=np.float64)
    scale = max(float(np.linalg.norm(want)), 1e-6 * float(np.linalg.norm(value)), 1e-30)
    return float(np.linalg.norm(got - want)) / scale if got.shape == want.shape else np.inf


def _change(a: np.ndarray, b: np.ndarray, step: np.ndarray) -> float:
    """||a - b|| relative to the norm of the reference's `step`."""
    return float(np.linalg.norm(a - b)) / max(float(np.linalg.norm(step)), 1e-30)


def _step_from(model: ModelSpec, params: dict, history: list[dict], state: dict, lstm_biases: int,
               eps_corrected: bool) -> dict:
    """The model's own optimizer's step number len(history) from `params`: its moments made from
    the gradients of every step in `history`, the last of them this step's."""
    moments: tuple = ({}, {})
    for t, grads in enumerate(history, 1):
        after, moments = reference.optimizer_update(model, params, grads, state, model.optimizer, lstm_biases,
                                                    eps_corrected, moments, t)
    return after


@_one_model
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
        # Each path's weights and gradients are whole copies of the model's (VGG-16: 120 MB each): a
        # path is let go once its step is made, and the last step's paths lead nowhere, so none is
        # kept (VGG-16's emulation peaked at 5.2 GiB before, 3.3 GiB so; the errors are the same).
        paths: list[tuple[dict, list]] = [(want[0], [])]
        for t in range(len(history)):
            ahead: list[tuple[dict, list]] = []
            more = t < len(history) - 1
            while paths:
                params, before = paths.pop()
                _, grads, state = run_in(dtype, model, params, x.astype(np.float64), y, None, draw)
                low_history = [*before, wide(grads)]
                update = lambda hist, st, start=params: _step_from(model, start, hist, st, lstm_biases,
                                                                   eps_corrected)
                got, step, others = _step_errors(model.optimizer, update, history[:t + 1], low_history,
                                                 wide(state), params, want[t], want[t + 1], store, draw_all=low,
                                                 keep=more and draw == 0 and t == 0)
                errors[t] = {k: max(errors[t][k], v) for k, v in step.items()}
                if more:
                    ahead += [(got, low_history), *others]
                del params, before, grads, state, low_history, update, got, others
            paths = ahead
    return tuple(errors)


@_one_model
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


def wide(tensors: dict) -> dict:
    return {k: np.asarray(v, np.float64) for k, v in tensors.items()}


def _stored(dtype: str):
    """The weights as a framework stores them in `dtype`: float32, or (mixed precision, emulated)
    float64 masters, exact."""
    master = np.float64 if precision.rounder(dtype) is not None else np.float32
    return lambda params: {k: v.astype(master).astype(np.float64) for k, v in params.items()}


def _step_errors(opt: Optimizer, update, grads: list[dict], low_grads: list[dict], low_state: dict, start: dict,
                 before: dict, after: dict, stored, draw_all: bool, keep: bool = False) -> tuple[dict, dict, list]:
    """The emulated step from `start` that `update(low_grads, low_state)` makes, and each tensor's
    update error against the float64 step from `before` to `after` (made from `grads`): its own,
    and where the optimizer divides by the gradient (or `draw_all`, low precision) the other
    orders' too; and (with `keep`) those other orders' steps, each with the gradients it was made
    from."""
    want = {k: after[k] - before[k] for k in after}
    got = stored(update(low_grads, low_state))
    errors = {k: relative(got[k] - start[k], want[k], after[k]) for k in after}
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
    spreads = []
    for g, lg in zip(grads, low_grads, strict=True):
        spread = {k: 2 * np.abs(lg[k] - g[k]) for k in g}
        if opt.name != "sgd":
            spread = {k: np.where((g[k] == 0) & (lg[k] == 0), 0.0, d.max()) for k, d in spread.items()}
        spreads.append(spread)
    for sign in (1.0, -1.0):
        moved = [{k: v + sign * spread[k] for k, v in lg.items()} for spread, lg in zip(spreads, low_grads,
                                                                                        strict=True)]
        other = stored(update(moved, low_state))
        errors = {k: max(errors[k], _change(other[k], got[k], want[k])) for k in after}
        if keep:
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
        passes = [run_in(dtype, model, initial, x.astype(np.float64), y, unbiased_var, draw) for x, y in batches]
        _, step, _ = _step_errors(model.optimizer, update, grads, [wide(p[1]) for p in passes], wide(passes[0][2]),
                               initial, initial, want, _stored(dtype), draw_all=low)
        errors = {k: max(errors[k], v) for k, v in step.items()}
    return want, errors


def conventions(name: str, native) -> tuple[int, bool]:
    """The framework's conventions that change the reference of this model: its LSTM bias count
    where the model has an LSTM, its running-variance estimator where it has batch norm. Frameworks
    that differ only in what the model lacks share one reference and one emulation."""
    model = catalogue.get(name)
    kinds = {type(layer) for _, layer, _ in walk(model.layers, model.input_shape)}
    return (native.lstm_biases if LSTM in kinds else 1, native.unbiased_var if BatchNorm in kinds else False)
