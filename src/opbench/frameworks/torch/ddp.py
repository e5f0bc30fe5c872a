"""PyTorch's DistributedDataParallel in one worker process. Imports only torch (and opbench).

The process group comes from the environment torchrun would set (env:// rendezvous): gloo on the
CPU, nccl on GPUs with one GPU per local rank. DDP averages the gradients over the workers in
all-reduce buckets overlapped with the backward pass; `no_sync()` switches that communication off,
which is how the benchmark measures the share of a step spent communicating.
"""

from __future__ import annotations

import contextlib
import datetime
import os

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

from opbench.frameworks import load
from opbench.frameworks.engine import EngineBase
from opbench.frameworks.torch.models import torch_optimizer


class TorchDDP(EngineBase):
    lstm_biases = 2

    def __init__(self, model, params, req: dict) -> None:
        self.device = req["device"]
        local = int(os.environ["LOCAL_RANK"])
        if self.device == "gpu":
            torch.cuda.set_device(local)
        dist.init_process_group("nccl" if self.device == "gpu" else "gloo", init_method="env://",
                                timeout=datetime.timedelta(seconds=req["collective_timeout_s"]))
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        backend = load("torch")
        backend.set_threads(req["threads"])
        self.native = backend.build(model, params, self.device, req["dtype"], "eager")
        self.ddp = DistributedDataParallel(self.native.net, device_ids=[local] if self.device == "gpu" else None)
        self.opt = None

    def config(self) -> dict:
        return {"backend": dist.get_backend(), "bucket_cap_mb": 25, "torch": torch.__version__,
                "threads": torch.get_num_threads()}

    def use(self, optimizer) -> None:
        self.opt = torch_optimizer(self.ddp.parameters(), optimizer)

    def step(self, sync: bool = True) -> float:
        self.opt.zero_grad(set_to_none=True)
        with contextlib.nullcontext() if sync else self.ddp.no_sync():
            loss = F.cross_entropy(self.ddp(self.x), self.y)
            loss.backward()
        self.opt.step()
        return float(loss.detach())  # .item() waits for the device: the step is over when it returns

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
