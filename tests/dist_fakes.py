"""Workers for tests/test_distributed.py: PyTorch's real DDP engine with one thing wrong. Each runs
inside a distributed worker process (named as "tests.dist_fakes:Class")."""

from __future__ import annotations

import os
import time

import torch.distributed as dist

from opbench.distributed.torch_ddp import TorchDDP


def _rank() -> int:
    return int(os.environ["RANK"])


class SummedGradients(TorchDDP):
    """All-reduces the gradients without dividing by the workers: a sum, not an average."""

    def __init__(self, *args) -> None:
        super().__init__(*args)

        def summed(_, bucket):
            return dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(lambda f: f.value()[0])

        self.ddp.register_comm_hook(None, summed)


class LocalGradients(TorchDDP):
    """Never communicates: each worker steps on its own share's gradient."""

    def step(self, sync: bool = True) -> float:
        return super().step(sync=False)


class CrashOnStep(TorchDDP):
    def step(self, sync: bool = True) -> float:
        if _rank() == 1:
            os._exit(3)
        return super().step(sync)


class HangOnStep(TorchDDP):
    def step(self, sync: bool = True) -> float:
        if _rank() == 1:
            time.sleep(3600)
        return super().step(sync)


class CrashBeforeRendezvous(TorchDDP):
    def __init__(self, *args) -> None:
        if _rank() == 1:
            raise SystemExit(4)
        super().__init__(*args)
