"""What every framework's distributed engine shares: the worker-side base class that its engine
classes (frameworks/<name>/: DDP, KVStore, MirroredStrategy, MultiWorkerMirroredStrategy) derive
from. The worker process that drives them is the distributed suite's (suites/distributed/worker)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np


class EngineBase:
    """What every engine's worker class shares: a NativeModel (`self.native`) that holds the
    weights and converts the batch. Subclasses build it and define use() and step()."""

    native: Any
    lstm_biases = 1
    comm_off = True  # step(sync=False) updates without communication (for the communication share)

    def load(self, x, y) -> None:
        self.x, self.y = self.native.inputs(x, y)

    def set_params(self, params) -> None:
        self.native.set_params(params)

    def get_params(self) -> dict:
        return self.native.get_params()

    def refresh(self) -> None:
        """Wait for every worker's updates and fetch the weights they made (asynchronous engines)."""

    def replica_copies(self) -> Iterable[tuple[str, list[np.ndarray]]]:
        """(name, one array per replica) for each parameter, where this process keeps a copy of the
        weights per replica; nothing otherwise."""
        return ()

    def replica_mismatch(self) -> str | None:
        """Which replica's copy of which parameter differs from replica 0's, if any (the check fails on it)."""
        for name, copies in self.replica_copies():
            for r, c in enumerate(copies[1:], 1):
                if not np.array_equal(c, copies[0]):
                    return f"replica {r}'s copy of {name} differs from replica 0's"
        return None

    def close(self) -> None:
        pass
