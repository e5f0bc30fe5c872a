"""One worker of a distributed benchmark: a long-running process of the worker group that builds
the model on its framework's distributed engine and runs training steps on request.

Run as `python -m opbench.suites.distributed.worker` with the engine's launcher variables in its
environment (RANK, WORLD_SIZE, ... or DMLC_* or TF_CONFIG). Requests come as JSON lines on stdin,
replies go as JSON lines on the original stdout (everything the frameworks print goes to stderr),
every reply has "ok" and a failed request a one-line "error", as the paired gate's workers do.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import numpy as np

from opbench.core.processes import reply_stream, serve
from opbench.frameworks import start_threads
from opbench.harness import timing
from opbench.harness.memory import peak_rss
from opbench.workloads.models import catalogue, datasets
from opbench.workloads.models.spec import Optimizer, init_params


def pin(local_rank: int, replicas: int = 1) -> None:
    """One core per worker, round robin over the cores this process may use; a process that drives
    several replicas gets one core per replica."""
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[(local_rank + r) % len(cores)] for r in range(replicas)})


class Worker:
    def __init__(self) -> None:
        self.engine: Any = None
        self.model = None
        self.params: dict[str, np.ndarray] = {}
        self.shard = (0, 1)  # (rank, world)
        self.local = int(os.environ.get("OPBENCH_DIST_LOCAL", "0"))

    def setup(self, req: dict) -> dict:
        module, _, cls = req["engine"].partition(":")
        start_threads(req["threads"])  # before the engine's module imports its framework
        self.model = catalogue.get(req["model"])
        self.params = init_params(self.model)
        self.global_batch, self.data_dir = req["global_batch"], req.get("data_dir", "")
        self.engine = getattr(importlib.import_module(module), cls)(self.model, self.params, req)
        self.shard = (self.engine.rank, self.engine.world)
        self.batch({"index": 0})
        return {"rank": self.engine.rank, "world": self.engine.world, "lstm_biases": self.engine.lstm_biases,
                "config": self.engine.config(), "comm_off": self.engine.comm_off,
                "adam_eps_corrected": self.engine.native.adam_eps_corrected}

    def batch(self, req: dict) -> dict:
        """Load this worker's equal share of global batch `index` (the same data at any world size),
        or of the generated cluster problem the time to target is measured on."""
        if req.get("clusters"):
            x, y = datasets.clusters(self.model, self.global_batch)
        else:
            x, y = datasets.batch(self.model, self.global_batch, self.data_dir, req["index"])
        rank, world = self.shard
        per = self.global_batch // world
        self.engine.load(x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per])
        return {}

    def optimizer(self, req: dict) -> dict:
        """Reset the weights to the shared initial ones and take a fresh optimizer."""
        opt = self.model.optimizer if req.get("name") is None else Optimizer(req["name"], req["lr"])
        self.engine.set_params(self.params)
        self.engine.use(opt)
        return {}

    def step(self, req: dict) -> dict:
        def steps():
            for _ in range(req.get("n", 1)):
                loss = self.engine.step(req.get("sync", True))
            return loss

        loss, seconds = timing.once(steps)
        return {"loss": loss, "seconds": seconds}

    def refresh(self, req: dict) -> dict:
        self.engine.refresh()
        return {}

    def save(self, req: dict) -> dict:
        np.savez(req["paths"][self.local], **self.engine.get_params())
        return {"mismatch": self.engine.replica_mismatch()}

    def stats(self, req: dict) -> dict:
        return {"peak_rss_bytes": peak_rss()}

    def ping(self, req: dict) -> dict:
        return {}


COMMANDS = ("setup", "batch", "optimizer", "step", "refresh", "save", "stats", "ping")


def answer(worker: Worker, request: dict) -> dict:
    """One request of the protocol: a method of the worker named in COMMANDS."""
    cmd = request.get("cmd")
    handler = getattr(worker, str(cmd), None) if cmd in COMMANDS else None
    return {"ok": True, **handler(request)} if handler else {"ok": False, "error": f"unknown request {cmd!r}"}


def main() -> None:
    replies = reply_stream()
    worker = Worker()
    pin(worker.local, int(os.environ.get("OPBENCH_DIST_REPLICAS", "1")))
    try:
        serve(lambda request: answer(worker, request), sys.stdin, replies)
    finally:
        if worker.engine is not None:
            worker.engine.close()


if __name__ == "__main__":
    main()
