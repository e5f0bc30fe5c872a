"""The distributed engines opbench measures, described without importing any framework.

Each engine names the framework it belongs to, the update rules it offers, the class its worker
processes run ("module:Class", imported only inside a worker) and the environment its workers
(and, for a parameter server, its scheduler and servers) are started with: the variables the
framework's own launcher sets (torchrun's RANK/WORLD_SIZE/MASTER_ADDR..., MXNet's DMLC_*,
TensorFlow's TF_CONFIG), so that the same worker code runs under that launcher on several nodes.
"""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass

LOOPBACK = "127.0.0.1"


def free_port(host: str = LOOPBACK) -> int:
    """A TCP port nothing listens on now, on `host` (the loopback interface by default)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def nodes_from_env(environ=None) -> int:
    """OPBENCH_DIST_NODES: the nodes a data-parallel group spans (1 when unset)."""
    import os

    from opbench.harness.config import parse_count

    text = (os.environ if environ is None else environ).get("OPBENCH_DIST_NODES", "1")
    return parse_count(text, "OPBENCH_DIST_NODES", at_least=1)  # a ConfigError names the variable


def interface_for(addr: str) -> str | None:
    """The name of this machine's network interface that routes to `addr` (None if none can be
    found). Gloo and ps-lite otherwise pick the interface of the host name, which often resolves to
    the loopback address: gloo then advertised 127.0.0.1 to the other node."""
    import fcntl
    import struct

    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((addr, 9))  # no packet is sent: the kernel only chooses the route
            local = probe.getsockname()[0]
        for _, name in socket.if_nameindex():
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                try:
                    packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
                except OSError:
                    continue  # no IPv4 address on it
            if socket.inet_ntoa(packed[20:24]) == local:
                return name
    except OSError:
        pass
    return None


@dataclass(frozen=True)
class Topology:
    """Where a worker group runs: this node's workers, the nodes in all, this node's rank, and the
    rendezvous address (rank 0's node). One node on the loopback interface unless the user asks
    for several (OPBENCH_DIST_NODES / OPBENCH_DIST_NODE_RANK / OPBENCH_DIST_MASTER)."""

    workers: int
    nodes: int = 1
    node_rank: int = 0
    master_addr: str = LOOPBACK
    master_port: int = 0
    hosts: tuple[str, ...] = ()  # every worker's host:port, where an engine addresses each (TF_CONFIG)
    interface: str | None = None  # across nodes, the interface that reaches the master (Gloo, ps-lite)

    @property
    def world(self) -> int:
        return self.workers * self.nodes

    def rank(self, local: int) -> int:
        return self.node_rank * self.workers + local


@dataclass(frozen=True)
class Engine:
    name: str  # the marker and the id part: "ddp"
    framework: str
    rules: tuple[str, ...]  # "sync", "async"
    worker: str  # "module:Class" each worker process runs
    title: str
    helper: str | None = None  # the module the helper processes run (`python -m`), if any
    in_process: bool = False  # one process drives every replica (a device each): one node only

    def worker_env(self, topo: Topology, local: int, rule: str) -> dict[str, str]:
        """The launcher's variables for local worker `local`."""
        if self.in_process:
            return {"OPBENCH_DIST_REPLICAS": str(topo.workers)}
        if self.name == "ddp":  # what torch.distributed.run sets for each worker (env:// rendezvous)
            env = {"MASTER_ADDR": topo.master_addr, "MASTER_PORT": str(topo.master_port),
                   "RANK": str(topo.rank(local)), "WORLD_SIZE": str(topo.world), "LOCAL_RANK": str(local),
                   "LOCAL_WORLD_SIZE": str(topo.workers), "GROUP_RANK": str(topo.node_rank)}
            return {**env, "GLOO_SOCKET_IFNAME": topo.interface} if topo.interface else env
        if self.name == "kvstore":
            return {**_dmlc(topo), "DMLC_ROLE": "worker"}  # the scheduler numbers the workers
        if self.name == "mwms":
            hosts = list(topo.hosts) or [f"{topo.master_addr}:{topo.master_port + r}" for r in range(topo.world)]
            return {"TF_CONFIG": json.dumps({"cluster": {"worker": hosts},
                                             "task": {"type": "worker", "index": topo.rank(local)}})}
        raise KeyError(self.name)

    def helper_envs(self, topo: Topology) -> list[tuple[str, dict[str, str]]]:
        """The processes besides the workers this node starts (a parameter server's scheduler and
        server on node 0), as (name, environment)."""
        if self.name != "kvstore" or topo.node_rank != 0:
            return []
        return [("scheduler", {**_dmlc(topo), "DMLC_ROLE": "scheduler"}),
                ("server", {**_dmlc(topo), "DMLC_ROLE": "server"})]


def _dmlc(topo: Topology) -> dict[str, str]:
    """ps-lite's variables; on one node DMLC_LOCAL makes it talk over Unix sockets (nothing listens
    on TCP), across nodes every process binds a TCP port on its interface (DMLC_INTERFACE)."""
    env = {"DMLC_PS_ROOT_URI": topo.master_addr, "DMLC_PS_ROOT_PORT": str(topo.master_port),
           "DMLC_NUM_WORKER": str(topo.world), "DMLC_NUM_SERVER": "1", "DMLC_LOCAL": str(int(topo.nodes == 1))}
    return {**env, "DMLC_INTERFACE": topo.interface} if topo.interface else env


ENGINES: dict[str, Engine] = {e.name: e for e in (
    Engine("ddp", "torch", ("sync",), "opbench.frameworks.torch.ddp:TorchDDP",
           "torch.distributed DistributedDataParallel (gloo on the CPU, nccl on GPUs)"),
    Engine("kvstore", "mxnet", ("sync", "async"), "opbench.frameworks.mxnet.kvstore:MxnetKVStore",
           "MXNet KVStore dist_sync / dist_async (a scheduler and a parameter server)",
           helper="opbench.frameworks.mxnet.kvstore"),
    Engine("mwms", "tensorflow", ("sync",), "opbench.frameworks.tensorflow.mwms:TensorflowMWMS",
           "tf.distribute MultiWorkerMirroredStrategy (collective all-reduce: ring on the CPU, NCCL on GPUs)"),
    Engine("mirrored", "tensorflow", ("sync",), "opbench.frameworks.tensorflow.mirrored:TensorflowMirrored",
           "tf.distribute MirroredStrategy (one process, a replica per GPU or logical CPU device)", in_process=True),
    Engine("kvlocal", "mxnet", ("sync",), "opbench.frameworks.mxnet.kvlocal:MxnetLocal",
           "MXNet KVStore local (one process, a context per replica, gradients summed on the CPU)", in_process=True),
    Engine("kvdevice", "mxnet", ("sync",), "opbench.frameworks.mxnet.kvlocal:MxnetLocal",
           "MXNet KVStore device (one process, a context per replica, gradients summed on the devices)",
           in_process=True),
)}
