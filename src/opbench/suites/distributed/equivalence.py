"""The equivalence check of a distributed case, before anything is timed: SGD_STEPS synchronous
plain-SGD steps of W workers, each on its equal share of the global batch, must give what NumPy's
reference step gives on the whole batch from the same weights, as the single-process check
demands (opbench.suites.model_check): the mean of the workers' losses against NumPy's loss, and on every worker
each parameter tensor's update against NumPy's update. A wrong gradient averaging (a sum, a
missing or a stale all-reduce, one worker's gradient only) changes the update and fails here.

Asynchronous updates are not equivalent step by step, except the first: every worker computes
its gradient at the shared initial weights, and plain SGD adds the updates, so once every
worker's update has reached the server (the "refresh" request) the weights must be NumPy's after
one whole-batch step. The check covers that one step for asynchronous rules.

Then the step that is timed: the model's own optimizer (Adam, SGD at the study's rate) from the
initial weights, its first step checked on every worker against the reference's step with the
framework's epsilon convention, within the float32 emulation's error of each tensor, as the
single-process suite checks its timed step. The check's plain SGD proves the gradients and their
averaging; this proves the update rule that is timed, its rate and its constants. Under an
asynchronous rule the server applies each worker's push in turn: SGD's pushes add up to the
whole batch's step; Adam's depend on their order, and each tensor must match one of the orders.

Across nodes the check is global: each step's loss is the mean over every node's workers
(gathered over the nodes' link), every node checks its own workers' updates, and the verdicts
are gathered, so every node passes or fails together, with the same message.
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path

import numpy as np

from opbench.suites.distributed.group import WorkerGroup
from opbench.suites.distributed.link import NodeLink
from opbench.suites.model_check import check_loss, check_update
from opbench.suites.model_reference import (
    SGD_STEPS,
    check_lr,
    emulated_step,
    initial_weights,
    reference_sgd,
    reference_timed_step,
)
from opbench.suites.prepared import CorrectnessError
from opbench.workloads.models import catalogue, datasets, reference


def _params(group: WorkerGroup, tag: str) -> list[dict[str, np.ndarray]]:
    """Every worker's parameters now (canonical layout), through files in the group's folder."""
    paths = [Path(group.folder) / f"{tag}-{r}.npz" for r in range(len(group.workers))]
    for rank, reply in zip(group.ranks, group.ask("save", paths=[str(p) for p in paths]), strict=True):
        if reply.get("mismatch"):
            raise CorrectnessError(f"worker {rank}: {reply['mismatch']}")
    out = []
    for path in paths:
        with np.load(path) as data:
            out.append({k: data[k] for k in data.files})
        path.unlink()
    return out


def equivalence(case, group: WorkerGroup, link: NodeLink, data_dir: str, lstm_biases: int,
                eps_corrected: bool) -> float:
    """Run the check, then take and check the first step of the optimizer that is timed; returns
    the worst relative update error over every node; raises CorrectnessError on every node when
    any node's check fails. The workers are left with the timed optimizer and batch 0."""
    steps = SGD_STEPS if case.rule == "sync" else 1
    want_losses, trajectory = reference_sgd(case.name, case.global_batch, data_dir, steps, lstm_biases)
    group.ask("optimizer", name="sgd", lr=check_lr(case.name, case.global_batch, data_dir))
    start = before = _params(group, "start")
    worst = 0.0
    for i, want in enumerate(want_losses):
        group.ask("batch", index=i)
        err, before = _checked_step(case, group, link, f"SGD step {i}", want, before,
                                    [(trajectory[i], trajectory[i + 1], None)])
        worst = max(worst, err)
    # The timed step: the model's own optimizer from the shared initial weights, on batch 0
    group.ask("optimizer")
    group.ask("batch", index=0)
    opt = catalogue.get(case.name).optimizer
    wants = timed_references(case, data_dir, lstm_biases, eps_corrected)
    # measured from the check's starting weights: a reset that did not restore them shows in the update
    err, _ = _checked_step(case, group, link, f"the timed {opt.name} step (lr {opt.lr:g})", want_losses[0], start,
                           [(trajectory[0], w, allowed) for w, allowed in wants])
    return max(link.gather("worst update error", max(worst, err)))


def _checked_step(case, group: WorkerGroup, link: NodeLink, step: str, want_loss: float, before: list[dict],
                  wants: list[tuple[dict, dict, dict | None]]) -> tuple[float, list[dict]]:
    """One step of every worker (and, for an asynchronous rule, every update fetched back), held
    to the reference: the mean loss over every node's workers, and on each worker every tensor's
    update against one of `wants` ((weights before, weights after, each tensor's emulated error)):
    each tensor may match a different one, as a server applies each tensor's pushes in its own
    order. Every node gets every node's verdict. Returns the worst update error and the weights."""
    losses = [r["loss"] for r in group.ask("step")]
    if case.rule != "sync":
        group.ask("refresh")
    problem, after, worst = None, before, 0.0
    try:
        check_loss(f"{case.id}: {step} loss (mean over the workers)", link.mean(f"loss {step}", losses)[0], want_loss)
        after = _params(group, "".join(c if c.isalnum() else "-" for c in step))
        for rank, b, a in zip(group.ranks, before, after, strict=True):
            try:
                worst = max(worst, _any_order(case, step, b, a, wants))
            except CorrectnessError as exc:
                raise CorrectnessError(f"worker {rank}: {exc}") from None
    except CorrectnessError as exc:
        problem = str(exc)
    problem = link.verdict(f"verdict {step}", problem)
    if problem:
        raise CorrectnessError(problem)
    return worst, after


def _any_order(case, step: str, before: dict, after: dict, wants: list[tuple[dict, dict, dict | None]]) -> float:
    """The worst over the tensors of each tensor's smallest update error among the `wants` that
    have it (the first has every tensor); a tensor that matches none fails with the first's message."""
    worst = 0.0
    for name in wants[0][1]:
        errors, first = [], None
        for want_before, want_after, allowed in (w for w in wants if name in w[1]):
            try:
                errors.append(check_update(case, step, before, after, want_before, {name: want_after[name]}, allowed))
            except CorrectnessError as exc:
                first = first or exc
        if not errors:
            raise first
        worst = max(worst, min(errors))
    return worst


MAX_ORDERED_WORKERS = 4  # an asynchronous Adam step is checked in each of the W! orders its pushes may take


def timed_references(case, data_dir: str, lstm_biases: int, eps_corrected: bool) -> list[tuple[dict, dict]]:
    """The weights after the first timed step, with each tensor's float32 emulated error, as many
    as the rule allows. A synchronous rule makes one step of the whole global batch. An
    asynchronous one makes one push per worker, each its shard's gradient (the store rescales the
    summed per-sample gradients by the global batch: the shard's mean over W), applied by the
    server one after another as they arrive: plain SGD adds them up to the whole batch's step,
    Adam's result depends on the order (each is one of W! references). A configuration the
    reference cannot follow is not timed."""
    model = catalogue.get(case.name)
    if case.rule == "sync":
        return [reference_timed_step(case.name, case.global_batch, data_dir, lstm_biases, False, eps_corrected,
                                     "float32")]
    world = case.world
    if model.optimizer.name != "sgd" and world > MAX_ORDERED_WORKERS:
        raise CorrectnessError(f"{case.id}: the first asynchronous {model.optimizer.name} step of {world} workers "
                               f"has {world}! orders; opbench checks up to {MAX_ORDERED_WORKERS} workers, so it is "
                               "not timed")
    orders = itertools.permutations(range(world)) if model.optimizer.name != "sgd" else [tuple(range(world))]
    wants = [async_reference(case.name, case.global_batch, world, order, data_dir, lstm_biases, eps_corrected)
             for order in orders]
    if lstm_biases == 1 or len(wants) == 1:
        return wants
    # A framework that trains an LSTM's bias twice (input and recurrent, lstm_biases) keeps them
    # under two keys, whose pushes the server may take in different orders: their sum moves by
    # one order's half step plus another's (seen: MXNet's 0.b 0.34 off the nearest single order)
    initial = initial_weights(model)
    biases = list(reference.update_scale(model, lstm_biases))  # the LSTMs' canonical biases
    mixed = [({k: initial[k] + sum(w[k] - initial[k] for w, _ in pick) / lstm_biases for k in biases},
              {k: max(allowed[k] for _, allowed in pick) for k in biases})
             for pick in itertools.combinations_with_replacement(wants, lstm_biases)]
    return wants + mixed


@functools.lru_cache(maxsize=32)
def async_reference(name: str, batch: int, world: int, order: tuple[int, ...], data_dir: str, lstm_biases: int,
                    eps_corrected: bool) -> tuple[dict, dict]:
    """The weights after `world` asynchronous pushes of the first step applied in `order` (worker
    ranks), and each tensor's float32 emulated error (see timed_references)."""
    model = catalogue.get(name)
    x, y = datasets.batch(model, batch, data_dir)
    per = batch // world
    shards = [(x[r * per:(r + 1) * per], y[r * per:(r + 1) * per]) for r in range(world)]
    initial = initial_weights(model)
    passes = [reference.loss_and_grads(model, initial, xs.astype(np.float64), ys) for xs, ys in shards]
    if any(state for _, _, state in passes):
        raise CorrectnessError(f"{name}: asynchronous updates of running statistics are not in the reference; "
                               "the timed step cannot be checked, so it is not timed")

    def update(grads: list[dict], state: dict) -> dict:
        params, moments = initial, ({}, {})
        for t, rank in enumerate(order, 1):
            pushed = {k: g / world for k, g in grads[rank].items()}
            params, moments = reference.optimizer_update(model, params, pushed, state, model.optimizer, lstm_biases,
                                               eps_corrected, moments, t)
        return params

    return emulated_step(model, update, shards, [g for _, g, _ in passes], {}, False, "float32")
