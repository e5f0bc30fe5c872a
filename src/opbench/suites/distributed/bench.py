"""Timing one distributed case through pytest-benchmark: start the worker group once, pass the
equivalence gate, exclude the first WARMUP_STEPS steps, then time one synchronous training step
of every worker per call; afterwards measure what the coordinator and the communication cost."""

from __future__ import annotations

import os
import statistics
import time

import pytest

from opbench.suites import target
from opbench.suites.distributed import equivalence
from opbench.suites.distributed.engines import ENGINES, LOOPBACK, Topology, free_port, interface_for, nodes_from_env
from opbench.suites.distributed.group import SETUP_TIMEOUT_S, WorkerGroup
from opbench.suites.measure import identity, loaded, recording, timing_of
from opbench.workloads.models import catalogue

WARMUP_STEPS = 10  # excluded from timing, as the study did
PINGS = 20
COMM_PAIRS = 3  # steps with and without communication, alternated

_ONE_WORKER: dict[tuple, float] = {}  # samples/s of this session's 1-worker cases, for the efficiency


def topology(workers: int, engine=None) -> Topology:
    """This node's share of the group: one node on the loopback interface and a free port, unless
    OPBENCH_DIST_NODES (with OPBENCH_DIST_NODE_RANK and OPBENCH_DIST_MASTER=host:port) asks for
    several. Across nodes the interface that reaches the master is named for Gloo and ps-lite
    (unless GLOO_SOCKET_IFNAME / DMLC_INTERFACE say otherwise), and TensorFlow's engine, which
    addresses every worker, needs OPBENCH_DIST_HOSTS: without it every worker was put at the
    master's address and failed 40 s later with a bare 'Graph execution error'."""
    nodes = nodes_from_env()
    if nodes == 1:
        return Topology(workers, master_port=free_port(),
                        hosts=tuple(f"{LOOPBACK}:{free_port()}" for _ in range(workers)))
    missing = [v for v in ("OPBENCH_DIST_NODE_RANK", "OPBENCH_DIST_MASTER") if not os.environ.get(v)]
    if missing:
        pytest.fail(f"OPBENCH_DIST_NODES={nodes} needs {' and '.join(missing)} too", pytrace=False)
    host, _, port = os.environ["OPBENCH_DIST_MASTER"].rpartition(":")
    hosts = tuple(h for h in os.environ.get("OPBENCH_DIST_HOSTS", "").split(",") if h)
    if engine is not None and engine.name == "mwms" and len(hosts) != nodes * workers:
        pytest.fail(f"tensorflow mwms across {nodes} nodes needs OPBENCH_DIST_HOSTS: every worker's host:port in rank "
                    f"order, {nodes * workers} of them (got {len(hosts)})", pytrace=False)
    chosen = os.environ.get("GLOO_SOCKET_IFNAME") or os.environ.get("DMLC_INTERFACE")
    return Topology(workers, nodes, int(os.environ["OPBENCH_DIST_NODE_RANK"]), host, int(port), hosts,
                    None if chosen else interface_for(host))


def _scaling_key(case) -> tuple:
    return case.framework, case.engine, case.rule, case.device, case.name, case.scaling, case.batch


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure_distributed(benchmark, bound) -> None:
    case, settings = bound.case, bound.state.settings
    engine = ENGINES[case.engine]
    topo = topology(case.workers, engine)
    # the setup imports the framework and meets the other workers: the user's --dist-timeout when
    # given, else at least SETUP_TIMEOUT_S
    asked = "dist_timeout" in dict(settings.asked)
    setup_s = settings.dist_timeout if asked else max(SETUP_TIMEOUT_S, settings.dist_timeout)
    with WorkerGroup(engine, topo, case.rule, settings.dist_timeout) as group:
        setup = group.ask("setup", timeout_s=setup_s, engine=engine.worker,
                          model=case.name, rule=case.rule, device=case.device, dtype=case.dtype,
                          global_batch=case.global_batch, data_dir=settings.data_dir, threads=1,
                          replicas=case.workers, engine_name=case.engine,
                          collective_timeout_s=settings.dist_timeout)
        err = equivalence.equivalence(case, group, settings.data_dir, setup[0]["lstm_biases"])
        group.ask("optimizer")  # the model's own optimizer, from the shared initial weights
        if not benchmark.disabled:  # a correctness pass (--benchmark-disable) makes one call only
            group.ask("step", n=WARMUP_STEPS)
        overhead = statistics.median(_seconds(lambda: group.ask("ping")) for _ in range(PINGS))
        extra = {**identity(case, bound.backend, threads=1, max_abs_err=err), "engine": case.engine,
                 "rule": case.rule, "workers": case.workers, "nodes": topo.nodes, "world_size": topo.world,
                 "node_rank": topo.node_rank, "scaling": case.scaling,
                 "global_batch": case.global_batch, "worker_batch": case.global_batch // topo.world,
                 "warmup_steps": WARMUP_STEPS, "engine_config": setup[0]["config"],
                 "coordinator_overhead_s": overhead}
        with recording(benchmark, case, extra):
            with loaded(benchmark, case.workers):  # one thread per worker process
                benchmark(lambda: group.ask("step"))
            timing = timing_of(benchmark)
            if timing is not None:
                _after_timing(benchmark, case, group, timing.median_s, overhead, setup[0]["comm_off"])


def _after_timing(benchmark, case, group: WorkerGroup, median_s: float, overhead: float, comm_off: bool) -> None:
    samples = case.global_batch / median_s
    key = _scaling_key(case)
    if case.workers == 1:
        _ONE_WORKER[key] = samples
    one = _ONE_WORKER.get(key)
    comm = 0.0 if case.workers == 1 else communication_share(group) if comm_off else None
    benchmark.extra_info.update(
        samples_per_s=samples, worker_samples_per_s=samples / case.workers,
        scaling_efficiency=samples / (case.workers * one) if one else None,
        communication_share=comm, coordinator_share=overhead / median_s,
        peak_rss_bytes=[r["peak_rss_bytes"] for r in group.ask("stats")],
        **convergence(group, case),
    )


def communication_share(group: WorkerGroup) -> float:
    """1 - (a step without communication) / (a step with it), from steps alternated so that a
    load episode hits both alike."""
    sync, local = [], []
    for _ in range(COMM_PAIRS):
        sync.append(_seconds(lambda: group.ask("step")))
        local.append(_seconds(lambda: group.ask("step", sync=False)))
    return max(0.0, 1.0 - statistics.median(local) / statistics.median(sync))


LOSS_AFTER_STEPS = 20


def convergence(group: WorkerGroup, case) -> dict:
    """Time to target (opbench.suites.target), the loss being the mean over the workers, as the
    single-process suite measures it; and the loss after LOSS_AFTER_STEPS steps. This is what an
    asynchronous rule is judged by: its steps are cheaper, but each one is worth less."""
    group.ask("batch", clusters=True)
    group.ask("optimizer")
    return target.time_to_target(lambda: statistics.mean(r["loss"] for r in group.ask("step")),
                                 catalogue.get(case.name).classes, loss_after=LOSS_AFTER_STEPS)
