"""MXNet's parameter-server KVStore in one worker process. Imports only MXNet (through the MXNet
backend, which patches NumPy for it first).

The store comes from the DMLC_* environment that MXNet's own launcher sets: `dist_sync` (the
server sums every worker's gradient, then updates once) or `dist_async` (the server applies each
worker's gradient as it arrives). The optimizer runs on the server (update_on_kvstore): a worker
pushes its gradients and pulls the new weights. Each phase (the check, then the timed steps)
initialises its own keys, so that the server starts it from the weights the phase sets.

Run as a module (`python -m opbench.frameworks.mxnet.kvstore` with DMLC_ROLE=scheduler or
server), importing MXNet runs that role and exits: the helper processes of the worker group.
"""

from __future__ import annotations

import os

from opbench.frameworks import load
from opbench.frameworks.engine import EngineBase
from opbench.frameworks.mxnet.backend import mx
from opbench.frameworks.mxnet.models import MxnetModel, mxnet_optimizer

autograd = mx.autograd


class MxnetKVStore(EngineBase):
    lstm_biases = 2

    def __init__(self, model, params, req: dict) -> None:
        self.kind = {"sync": "dist_sync", "async": "dist_async"}[req["rule"]]
        self.kv = mx.kv.create(self.kind)
        self.rank, self.world = self.kv.rank, self.kv.num_workers
        self.global_batch = req["global_batch"]
        load("mxnet").set_threads(req["threads"])
        local = int(os.environ.get("OPBENCH_DIST_LOCAL", "0"))
        ctx = mx.gpu(local) if req["device"] == "gpu" else mx.cpu()
        self.native = MxnetModel(model, params, req["device"], req["dtype"], "eager", ctx)
        self.params = list(self.native.net.collect_params().values())
        self.loss = mx.gluon.loss.SoftmaxCrossEntropyLoss()
        self.phase = 0
        self.local_update = None

    def config(self) -> dict:
        return {"kvstore": self.kind, "servers": int(os.environ.get("DMLC_NUM_SERVER", "1")),
                "update_on_kvstore": True, "mxnet": mx.__version__}

    def use(self, optimizer) -> None:
        """The optimizer on the server, for the summed per-sample gradients of the global batch; fresh
        keys initialised from this worker's weights (rank 0's are kept: all start the same)."""
        self.phase += 1
        for i, p in enumerate(self.params):
            self.kv.init(self._key(i), p.data())
        self.kv.set_optimizer(mxnet_optimizer(optimizer, 1.0 / self.global_batch))
        self.kv._barrier()  # MXNet 1.9 has no public barrier; Module and Trainer call this one
        self.local_update = mx.optimizer.get_updater(mxnet_optimizer(optimizer, 1.0 / self.global_batch))

    def _key(self, i: int) -> int:
        return self.phase * len(self.params) + i

    def step(self, sync: bool = True) -> float:
        with autograd.record():
            losses = self.loss(self.native.net(self.x), self.y)
        losses.backward()  # summed over this worker's samples: the server's rescale makes it the batch mean
        for i, p in enumerate(self.params):
            if sync:
                self.kv.push(self._key(i), p.grad(), priority=-i)
                self.kv.pull(self._key(i), out=p.data(), priority=-i)
            else:  # communication off: the same update, on this worker only
                self.local_update(i, p.grad(), p.data())
        mx.nd.waitall()
        return float(losses.mean().asscalar())

    def refresh(self) -> None:
        self.kv._barrier()  # every worker's pushes have reached the server
        for i, p in enumerate(self.params):
            self.kv.pull(self._key(i), out=p.data(), priority=-i)
        mx.nd.waitall()

    def close(self) -> None:
        mx.nd.waitall()


if __name__ == "__main__":
    pass  # importing MXNet above ran the DMLC_ROLE given (scheduler or server)
