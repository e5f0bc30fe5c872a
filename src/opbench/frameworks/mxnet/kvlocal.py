"""MXNet's single-process KVStores, `local` and `device`: one process holds a copy of the weights
on each of its devices and a Gluon Trainer aggregates the gradients through the store. Imports
only MXNet (through the MXNet backend, which patches NumPy for it first).

`local` sums the gradients on the CPU and, by default, runs the optimizer in the store (one update,
copied back to every device); `device` sums them on the devices themselves (with GPUs, over
peer-to-peer copies). On the CPU the replicas are the contexts mx.cpu(0), mx.cpu(1), ...: MXNet's
engine runs each CPU context's operators on its own worker thread, so the replicas compute in
parallel, as a GPU per replica would. With one replica there is nothing to aggregate and Gluon
uses no store: that is the 1-worker case the scaling efficiency is measured against.

With communication off, each replica applies its own share's gradient with its own updater (the
same optimizer), scaled to stand for the whole batch, and nothing passes through the store.
"""

from __future__ import annotations

import numpy as np

from opbench.frameworks import load
from opbench.frameworks.engine import EngineBase
from opbench.frameworks.mxnet.backend import mx
from opbench.frameworks.mxnet.models import MxnetModel, mxnet_optimizer, optimizer_args

autograd = mx.autograd


class MxnetLocal(EngineBase):
    lstm_biases = 2
    comm_off = True

    def __init__(self, model, params, req: dict) -> None:
        self.kind, self.replicas = req["engine_name"], req["replicas"]
        self.rank, self.world = 0, 1  # one process: it loads the whole global batch
        self.global_batch = req["global_batch"]
        load("mxnet").set_threads(req["threads"])
        gpu = req["device"] == "gpu"
        if gpu and mx.context.num_gpus() < self.replicas:
            raise RuntimeError(f"{self.replicas} replicas need {self.replicas} GPUs; MXNet sees "
                               f"{mx.context.num_gpus()}")
        self.contexts = [mx.gpu(i) if gpu else mx.cpu(i) for i in range(self.replicas)]
        self.native = MxnetModel(model, params, req["device"], req["dtype"], "eager", self.contexts)
        self.params = list(self.native.net.collect_params().values())
        self.loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()

    def config(self) -> dict:
        return {"kvstore": self.kind if self.replicas > 1 else None,  # Gluon takes no store for one context
                "contexts": [str(c) for c in self.contexts], "mxnet": mx.__version__}

    def load(self, x, y) -> None:
        self.x = [mx.nd.array(part, ctx=c) for part, c in zip(np.split(x, self.replicas), self.contexts, strict=True)]
        self.y = [mx.nd.array(part, ctx=c) for part, c in zip(np.split(y, self.replicas), self.contexts, strict=True)]

    def use(self, optimizer) -> None:
        self.trainer = mx.gluon.Trainer(self.native.net.collect_params(), optimizer.name, optimizer_args(optimizer),
                                        kvstore=self.kind)
        self.local_update = mx.optimizer.get_updater(mxnet_optimizer(optimizer, self.replicas / self.global_batch))

    def step(self, sync: bool = True) -> float:
        with autograd.record():
            losses = [self.loss(self.native.net(x), y) for x, y in zip(self.x, self.y, strict=True)]
        autograd.backward(losses)  # each replica's per-sample gradients summed on its device
        if sync:
            self.trainer.step(self.global_batch)  # aggregated through the store, divided by the global batch
        else:  # communication off: each replica's own update (its own updater keys)
            for i, p in enumerate(self.params):
                for r, c in enumerate(self.contexts):
                    self.local_update(i * self.replicas + r, p.grad(c), p.data(c))
        mx.nd.waitall()
        return float(sum(loss.sum().asscalar() for loss in losses)) / self.global_batch

    def replica_copies(self):
        return ((p.name, [d.asnumpy() for d in p.list_data()]) for p in self.params)

    def close(self) -> None:
        mx.nd.waitall()
