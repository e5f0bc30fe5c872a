"""The equivalence gate of a distributed case, before anything is timed: SGD_STEPS synchronous
plain-SGD steps of W workers, each on its equal share of the global batch, must give what NumPy's
reference step gives on the whole batch from the same weights, as the single-process gate
demands (opbench.suites.models.equivalence): the mean of the workers' losses against NumPy's loss, and on every worker
each parameter tensor's update against NumPy's update. A wrong gradient averaging (a sum, a
missing or a stale all-reduce, one worker's gradient only) changes the update and fails here.

Asynchronous updates are not equivalent step by step, except the first: every worker computes
its gradient at the shared initial weights, and plain SGD adds the updates, so once every
worker's update has reached the server (the "refresh" request) the weights must be NumPy's after
one whole-batch step. The gate checks that one step for asynchronous rules.

Across nodes the check is global: each step's loss is the mean over every node's workers
(gathered over the nodes' link), every node checks its own workers' updates, and the verdicts
are gathered, so every node passes or fails together, with the same message.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from opbench.suites.distributed.group import WorkerGroup
from opbench.suites.distributed.link import NodeLink
from opbench.suites.models.equivalence import SGD_STEPS, check_loss, check_update, gate_lr, reference_sgd
from opbench.suites.ops.prepare import CorrectnessError


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


def equivalence(case, group: WorkerGroup, link: NodeLink, data_dir: str, lstm_biases: int) -> float:
    """Run the gate; returns the worst relative update error over every node; raises
    CorrectnessError on every node when any node's check fails."""
    steps = SGD_STEPS if case.rule == "sync" else 1
    want_losses, trajectory = reference_sgd(case.name, case.global_batch, data_dir, steps, lstm_biases)
    group.ask("optimizer", name="sgd", lr=gate_lr(case.name, case.global_batch, data_dir))
    before, worst = _params(group, "start"), 0.0
    for i, want in enumerate(want_losses):
        group.ask("batch", index=i)
        losses = [r["loss"] for r in group.ask("step")]
        if case.rule != "sync":
            group.ask("refresh")
        problem = None
        try:
            check_loss(f"{case.id}: SGD step {i} loss (mean over the workers)", link.mean(f"loss {i}", losses)[0], want)
            after = _params(group, f"step{i}")
            for rank, b, a in zip(group.ranks, before, after, strict=True):
                try:
                    worst = max(worst, check_update(case, f"SGD step {i}", b, a, trajectory[i], trajectory[i + 1]))
                except CorrectnessError as exc:
                    raise CorrectnessError(f"worker {rank}: {exc}") from None
        except CorrectnessError as exc:
            problem = str(exc)
        problem = link.verdict(f"verdict {i}", problem)
        if problem:
            raise CorrectnessError(problem)
        before = after
    group.ask("batch", index=0)
    return max(link.gather("worst update error", worst))

