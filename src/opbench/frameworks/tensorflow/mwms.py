"""TensorFlow's MultiWorkerMirroredStrategy in one worker process. Imports only TensorFlow (and
Keras, its layer API).

The cluster comes from TF_CONFIG, as TensorFlow's own launchers set it; the strategy mirrors the
variables on every worker and all-reduces the gradients with its collective ops (ring on the
CPU, NCCL on GPUs). One step is `strategy.run` of a replica step whose loss is the per-sample
loss summed and divided by the global batch (tf.nn.compute_average_loss), so that the gradients
Keras' optimizer sums over the workers are the whole batch's mean gradient. With communication
off, each worker applies its own share's mean gradient without the all-reduce.
"""

from __future__ import annotations

import keras
import tensorflow as tf

from opbench.frameworks import load
from opbench.frameworks.engine import EngineBase


def keras_optimizer(optimizer):
    if optimizer.name == "sgd":
        return keras.optimizers.SGD(optimizer.lr)
    return keras.optimizers.Adam(optimizer.lr, beta_1=optimizer.beta1, beta_2=optimizer.beta2, epsilon=optimizer.eps)


def replica_step(net, variables, opt, global_batch: int):
    """One replica's training step: its per-sample losses summed and divided by the global batch,
    so that the gradients the optimizer sums over the replicas (in replica context) are the whole
    batch's mean gradient."""

    def step(x, y):
        with tf.GradientTape() as tape:
            per_sample = tf.nn.sparse_softmax_cross_entropy_with_logits(y, net(x, training=True))
            loss = tf.nn.compute_average_loss(per_sample, global_batch_size=global_batch)
        opt.apply_gradients(zip(tape.gradient(loss, variables), variables, strict=True))
        return loss

    return step


class TensorflowMWMS(EngineBase):
    def __init__(self, model, params, req: dict) -> None:
        backend = load("tensorflow")
        backend.set_threads(req["threads"])  # before the strategy starts the runtime
        gpu = req["device"] == "gpu"
        impl = tf.distribute.experimental.CommunicationImplementation
        options = tf.distribute.experimental.CommunicationOptions(
            implementation=impl.NCCL if gpu else impl.RING, timeout_seconds=req["collective_timeout_s"])
        self.strategy = tf.distribute.MultiWorkerMirroredStrategy(communication_options=options)
        self.rank = self.strategy.cluster_resolver.task_id
        self.world = self.strategy.num_replicas_in_sync
        self.global_batch = req["global_batch"]
        with self.strategy.scope():
            self.native = backend.build(model, params, req["device"], req["dtype"], "graph")
        self.variables = self.native.net.trainable_variables
        self.opt = None

    def config(self) -> dict:
        return {"strategy": "MultiWorkerMirroredStrategy", "collectives": "nccl" if self.native.device == "gpu"
                else "ring", "replicas": self.world, "tensorflow": tf.__version__}

    def use(self, optimizer) -> None:
        with self.strategy.scope():
            self.opt = keras_optimizer(optimizer)
            self.opt.build(self.variables)
        self._steps = {True: self._compile(True), False: self._compile(False)}

    def _compile(self, sync: bool):
        """The step: in replica context (strategy.run) Keras' optimizer all-reduces the gradients
        itself; outside it (communication off) it applies this worker's gradient alone, scaled to
        stand for the whole batch."""
        local_step = replica_step(self.native.net, self.variables, self.opt,
                                  self.global_batch if sync else self.global_batch // self.world)

        @tf.function(autograph=False)
        def step(x, y):
            if sync:
                return self.strategy.experimental_local_results(self.strategy.run(local_step, args=(x, y)))[0]
            return local_step(x, y)

        return step

    def step(self, sync: bool = True) -> float:
        loss = float(self._steps[sync](self.x, self.y))  # a host copy: the step is over
        return loss * self.world if sync else loss  # this worker's share's mean loss
