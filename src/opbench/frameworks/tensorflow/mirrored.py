"""TensorFlow's MirroredStrategy: one process drives one replica per device. Imports only
TensorFlow.

The devices are the process's GPUs (one per replica) or, on the CPU, logical CPU devices carved
out of the one physical CPU device before the runtime starts, so that the same strategy, with the
same cross-device reduction code, runs without a GPU. The global batch is split evenly over the
replicas; each replica's loss is its per-sample losses summed and divided by the global batch
(tf.nn.compute_average_loss), and Keras' optimizer, called in replica context, all-reduces the
gradients (NCCL on GPUs, a reduction to one device on the CPU) before every replica applies the
same update to its copy of the variables.

Communication cannot be switched off here: a mirrored variable takes only aggregated updates, so
this engine reports no communication share.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from opbench.frameworks import load
from opbench.frameworks.engine import EngineBase
from opbench.frameworks.tensorflow.mwms import keras_optimizer, replica_step


def replica_devices(device: str, replicas: int) -> list[str]:
    """One device name per replica; on the CPU the logical devices are made here (before any
    TensorFlow operation runs, or TensorFlow refuses)."""
    if device == "gpu":
        gpus = tf.config.list_logical_devices("GPU")
        if len(gpus) < replicas:
            raise RuntimeError(f"MirroredStrategy with {replicas} replicas needs {replicas} GPUs; "
                               f"this process sees {len(gpus)}")
        return [g.name for g in gpus[:replicas]]
    (cpu,) = tf.config.list_physical_devices("CPU")
    tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * replicas)
    return [d.name for d in tf.config.list_logical_devices("CPU")][:replicas]


class TensorflowMirrored(EngineBase):
    comm_off = False

    def __init__(self, model, params, req: dict) -> None:
        self.replicas = req["replicas"]
        backend = load("tensorflow")
        backend.set_threads(req["threads"])
        # one op of each replica at a time: as many inter-op threads as replicas
        tf.config.threading.set_inter_op_parallelism_threads(self.replicas)
        devices = replica_devices(req["device"], self.replicas)
        reduce = tf.distribute.NcclAllReduce() if req["device"] == "gpu" else tf.distribute.ReductionToOneDevice()
        self.strategy = tf.distribute.MirroredStrategy(devices, cross_device_ops=reduce)
        self.rank, self.world = 0, 1  # one process: it loads the whole global batch
        self.global_batch = req["global_batch"]
        with self.strategy.scope():
            self.native = backend.build(model, params, req["device"], req["dtype"], "graph")
        self.variables = self.native.net.trainable_variables
        self._config = {"strategy": "MirroredStrategy", "devices": devices, "cross_device_ops": type(reduce).__name__,
                        "tensorflow": tf.__version__}

    def config(self) -> dict:
        return self._config

    def load(self, x, y) -> None:
        """Each replica's share of the global batch, on its own device."""
        shares = [self.native.inputs(xs, ys) for xs, ys in zip(np.split(x, self.replicas), np.split(y, self.replicas),
                                                                 strict=True)]
        self.x, self.y = (self.strategy.experimental_distribute_values_from_function(
            lambda ctx, k=k: tf.identity(shares[ctx.replica_id_in_sync_group][k])) for k in (0, 1))

    def use(self, optimizer) -> None:
        with self.strategy.scope():
            self.opt = keras_optimizer(optimizer)
            self.opt.build(self.variables)
        one_replica = replica_step(self.native.net, self.variables, self.opt, self.global_batch)

        @tf.function(autograph=False)
        def step(x, y):
            return self.strategy.reduce(tf.distribute.ReduceOp.SUM, self.strategy.run(one_replica, args=(x, y)),
                                        axis=None)

        self._step = step

    def step(self, sync: bool = True) -> float:
        if not sync:
            raise RuntimeError("MirroredStrategy cannot update its replicas without communication")
        return float(self._step(self.x, self.y))  # the whole batch's mean loss; a host copy: the step is over

    def replica_copies(self):
        return ((v.name, [np.asarray(c) for c in self.strategy.experimental_local_results(v)]) for v in self.variables)
