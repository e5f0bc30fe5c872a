"""The worker group of one distributed case, seen from the pytest process: it starts the
engine's helper processes and W workers, sends every worker each request before reading any
reply (a collective step needs all of them), and stops everything on exit.

A worker that dies, hangs past its deadline or fails a request fails the case with one line
naming the worker and the engine; the group then stops every process it started (each in its own
process group, so whatever they spawned goes too), and the rendezvous port is free again.
"""

from __future__ import annotations

import os
import select
import sys
import tempfile
import time
from pathlib import Path

from opbench.core.processes import WorkerFailure, WorkerProcess
from opbench.suites.distributed.engines import Engine, Topology

SETUP_TIMEOUT_S = 180.0  # import the framework, rendezvous, build the model
CLOSE_GRACE_S = 10.0
DEATH_GRACE_S = 2.0  # how long a worker's failure waits to see whether another worker died first


class DistributedError(Exception):
    """A worker group failed; the message is one line naming the engine and the worker."""


class WorkerGroup:
    """W live workers of `engine` (plus its helpers), in a private temporary folder."""

    def __init__(self, engine: Engine, topo: Topology, rule: str, timeout_s: float,
                 command: list[str] | None = None) -> None:
        self.engine, self.topo, self.timeout_s = engine, topo, timeout_s
        self.tmp = tempfile.TemporaryDirectory(prefix="opbench-dist-")
        self.folder = Path(self.tmp.name)
        self.helpers: list[WorkerProcess] = []
        self.failed = False
        self.workers: list[WorkerProcess] = []
        self.ranks: list[int] = []  # each worker's rank in the whole group, as the engine numbered it
        command = command or [sys.executable, "-m", "opbench.suites.distributed.worker"]
        base = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        try:
            for name, env in engine.helper_envs(topo):
                self.helpers.append(self._start(name, [sys.executable, "-m", engine.helper], {**base, **env}))
            for local in range(1 if engine.in_process else topo.workers):
                env = {**base, **engine.worker_env(topo, local, rule), "OPBENCH_DIST_LOCAL": str(local)}
                self.workers.append(self._start(f"rank {topo.rank(local)}", command, env))
                self.ranks.append(topo.rank(local))
        except BaseException:
            self.close()
            raise

    @property
    def label(self) -> str:
        return f"{self.engine.framework} {self.engine.name}"

    def numbered(self, ranks: list[int]) -> None:
        """Name the workers by the ranks their engine gave them (MXNet's scheduler numbers the
        workers in the order they register: node 0's worker was rank 1 across two nodes)."""
        self.ranks = list(ranks)
        for worker, rank in zip(self.workers, ranks, strict=True):
            worker.side = f"rank {rank}"

    def _start(self, name: str, command: list[str], env: dict[str, str]) -> WorkerProcess:
        return WorkerProcess(name, command, env, self.folder / f"{name.replace(' ', '')}.log")

    def ask(self, cmd: str, timeout_s: float | None = None, **request) -> list[dict]:
        """Send `cmd` to every worker, then wait for every reply (in rank order). The first worker
        to die, fail or miss the deadline fails the whole request at once: the others may be
        blocked in a collective that will never complete."""
        try:
            return self._ask(cmd, self.timeout_s if timeout_s is None else timeout_s, request)
        except DistributedError:
            self.failed = True  # close() stops the rest at once: they may wait in a collective forever
            raise

    def _ask(self, cmd: str, timeout: float, request: dict) -> list[dict]:
        deadline = time.monotonic() + timeout
        replies: dict[int, dict] = {}
        try:
            for w in self.workers:
                w.send({"cmd": cmd, **request})
            while len(replies) < len(self.workers):
                pending = [i for i in range(len(self.workers)) if i not in replies]
                left = deadline - time.monotonic()
                if left <= 0:
                    names = ", ".join(self.workers[i].side for i in pending)
                    raise DistributedError(f"{self.label}: no answer to '{cmd}' within {timeout:.0f} s from the "
                                           f"{names} worker{'s' if len(pending) > 1 else ''}; the group was stopped")
                select.select([self.workers[i].fileno() for i in pending], [], [], left)
                for i in pending:
                    got = self.workers[i].read_ready()
                    if got is not None and not got.get("ok"):
                        dead = self._dead_other(i)
                        raise DistributedError(f"{self.label}: {dead}" if dead else
                                               f"{self.label}: the {self.workers[i].side} worker failed '{cmd}': "
                                               f"{got.get('error')}")
                    if got is not None:
                        replies[i] = got
        except WorkerFailure as exc:
            raise DistributedError(f"{self.label}: {exc}") from None
        return [replies[i] for i in range(len(self.workers))]

    def _dead_other(self, failed: int) -> str | None:
        """When a worker's request failed, the death of another worker is the cause to report: a
        crashed rank 1 makes rank 0's collective fail with gloo's 'Connection closed by peer',
        and which of the two the group reads first was a race (a busy machine lost it)."""
        deadline = time.monotonic() + DEATH_GRACE_S
        while True:
            for i, worker in enumerate(self.workers):
                gone = worker.exited() if i != failed else None
                if gone is not None:
                    return str(gone)
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)

    def close(self) -> None:
        """Stop every process this group started and remove its folder."""
        for w in self.workers:  # all at once: an engine's shutdown may wait for every worker
            w.request_exit()
        deadline = time.monotonic() + (0.0 if self.failed else CLOSE_GRACE_S)
        for w in self.workers:
            w.close(grace=max(0.0, deadline - time.monotonic()))
        for h in self.helpers:
            h.kill()
        self.tmp.cleanup()

    def __enter__(self) -> WorkerGroup:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
