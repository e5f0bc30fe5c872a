"""Workers for tests/suites/test_distributed.py: PyTorch's real DDP engine with one thing wrong. Each runs
inside a distributed worker process (named as "tests.dist_fakes:Class")."""

from __future__ import annotations

import dataclasses
import os
import time

import torch.distributed as dist

from opbench.frameworks.torch.ddp import TorchDDP
from opbench.workloads.models.spec import Optimizer


class PerWorkerMean:
    """MXNet's KVStore with each worker's gradient scaled to its own share's mean: the server then
    sums W means, W times the whole batch's gradient. (Built on first use: it imports MXNet.)"""

    def __new__(cls, *args):
        from opbench.frameworks.mxnet.kvstore import MxnetKVStore
        from opbench.frameworks.mxnet.models import mxnet_optimizer

        class _Wrong(MxnetKVStore):
            def use(self, optimizer) -> None:
                super().use(optimizer)
                self.kv.set_optimizer(mxnet_optimizer(optimizer, self.world / self.global_batch))

        return _Wrong(*args)


class AsyncAdamEps:
    """MXNet's asynchronous KVStore whose server runs Adam with epsilon 1e-3 instead of the
    model's: the gate's plain SGD is right, the timed step is not. (Built on first use: it
    imports MXNet.)"""

    def __new__(cls, *args):
        from opbench.frameworks.mxnet.kvstore import MxnetKVStore

        class _Wrong(MxnetKVStore):
            def use(self, optimizer) -> None:
                super().use(dataclasses.replace(optimizer, eps=1e-3) if optimizer.name == "adam" else optimizer)

        return _Wrong(*args)


class SgdForAdam(TorchDDP):
    """The timed step runs plain SGD at Adam's rate; the gate's SGD steps are right."""

    def use(self, optimizer) -> None:
        super().use(Optimizer("sgd", optimizer.lr) if optimizer.name == "adam" else optimizer)


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


class FailsFirstThenPeerDies(TorchDDP):
    """Rank 0's collective fails (as gloo's does when its peer goes) just before rank 1 dies."""

    def step(self, sync: bool = True) -> float:
        if _rank() == 1:
            time.sleep(0.5)
            os._exit(3)
        raise RuntimeError("Connection closed by peer")


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


class UnsharedReplicas:
    """MXNet's single-process store bypassed: each replica keeps its own share's update, so the
    replicas' weights drift apart. (Built on first use: it imports MXNet.)"""

    def __new__(cls, *args):
        from opbench.frameworks.mxnet.kvlocal import MxnetLocal

        class _Wrong(MxnetLocal):
            def step(self, sync: bool = True) -> float:
                return super().step(sync=False)

        return _Wrong(*args)


class PerReplicaMean:
    """TensorFlow's MirroredStrategy with each replica's loss its own share's mean: the all-reduce
    then sums W means, W times the whole batch's gradient. (Built on first use: it imports TensorFlow.)"""

    def __new__(cls, *args):
        from opbench.frameworks.tensorflow.mirrored import TensorflowMirrored

        class _Wrong(TensorflowMirrored):
            def use(self, optimizer) -> None:
                self.global_batch //= self.replicas
                super().use(optimizer)
                self.global_batch *= self.replicas

        return _Wrong(*args)
