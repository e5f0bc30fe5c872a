"""Timing one distributed case through pytest-benchmark: join the other nodes (if any), start
this node's worker group once, pass the equivalence check and the check of the timed
optimizer's first step, exclude the first WARMUP_STEPS steps,
then time one synchronous training step of every worker per call; afterwards measure what the
coordinator and the communication cost, and the time to target.

Every node runs exactly the same steps: node 0 chooses the number of timed rounds (by
pytest-benchmark's own rule, from its warm-up steps) and the nodes' link hands it to the others;
the rounds run in pytest-benchmark's pedantic mode, which runs what it is told and nothing more
(its automatic mode calibrates and stops by each node's own clock: 233 rounds on one node against
213 on the other put the collectives out of step). Each node saves its own clock of those same
collective steps (they end together, within a pipe's latency); the correctness check, the rounds,
the losses and the time to target are global and the same on every node."""

from __future__ import annotations

import math
import os
import statistics

import pytest

from opbench.harness import timing
from opbench.suites import target
from opbench.suites.distributed import equivalence
from opbench.suites.distributed.engines import ENGINES, LOOPBACK, Topology, free_port, interface_for, nodes_from_env
from opbench.suites.distributed.group import SETUP_TIMEOUT_S, WorkerGroup
from opbench.suites.distributed.link import NodeLink
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


def measure_distributed(benchmark, bound) -> None:
    case, settings = bound.case, bound.state.settings
    engine = ENGINES[case.engine]
    topo = topology(case.workers, engine)
    # the setup imports the framework and meets the other workers: the user's --dist-timeout when
    # given, else at least SETUP_TIMEOUT_S
    asked = "dist_timeout" in dict(settings.asked)
    setup_s = settings.dist_timeout if asked else max(SETUP_TIMEOUT_S, settings.dist_timeout)
    with NodeLink(topo, case.id, setup_s, settings.dist_timeout) as link, \
            WorkerGroup(engine, topo, case.rule, settings.dist_timeout) as group:
        setup = group.ask("setup", timeout_s=setup_s, engine=engine.worker,
                          model=case.name, rule=case.rule, device=case.device, dtype=case.dtype,
                          global_batch=case.global_batch, data_dir=settings.data_dir, threads=1,
                          replicas=case.workers, engine_name=case.engine,
                          collective_timeout_s=settings.dist_timeout)
        group.numbered([r["rank"] for r in setup])
        # the check, then the timed optimizer's first step checked: the timed rounds go on from it
        err = equivalence.equivalence(case, group, link, settings.data_dir, setup[0]["lstm_biases"],
                                      setup[0]["adam_eps_corrected"])
        rounds = agreed_rounds(benchmark, group, link)
        overhead = statistics.median(timing.once(lambda: group.ask("ping"))[1] for _ in range(PINGS))
        extra = {**identity(case, bound.backend, threads=1, max_abs_err=err), "engine": case.engine,
                 "rule": case.rule, "workers": case.workers, "nodes": topo.nodes, "world_size": topo.world,
                 "node_rank": topo.node_rank, "ranks": group.ranks, "scaling": case.scaling,
                 "global_batch": case.global_batch, "worker_batch": case.global_batch // topo.world,
                 "warmup_steps": WARMUP_STEPS, "optimizer": catalogue.get(case.name).optimizer.name,
                 "engine_config": setup[0]["config"],
                 "coordinator_overhead_s": overhead}
        with recording(benchmark, case, extra):
            with loaded(benchmark, case.workers):  # one thread per worker process
                benchmark.pedantic(lambda: group.ask("step"), rounds=rounds, iterations=1)
            timed = timing_of(benchmark)
            if timed is not None:
                _after_timing(benchmark, case, group, link, timed.median_s, overhead, setup[0]["comm_off"])


def agreed_rounds(benchmark, group: WorkerGroup, link: NodeLink) -> int:
    """Run the WARMUP_STEPS warm-up steps, and return the number of timed rounds node 0 chose by
    pytest-benchmark's rule (ceil(max_time / a step's duration), at least min_rounds): the same
    on every node. A correctness pass (--benchmark-disable) makes one call only, and no warm-up."""
    if benchmark.disabled:
        return 1
    per_step = timing.once(lambda: group.ask("step", n=WARMUP_STEPS))[1] / WARMUP_STEPS
    # pytest-benchmark's own settings (--benchmark-max-time, --benchmark-min-rounds), as its
    # automatic mode reads them
    mine = max(int(benchmark._min_rounds), math.ceil(benchmark._max_time / max(per_step, 1e-9)))
    benchmark.extra_info["rounds_chosen_by"] = "node 0" if link.topo.nodes > 1 else "this node"
    return int(link.gather("rounds", mine)[0])


def _after_timing(benchmark, case, group: WorkerGroup, link: NodeLink, median_s: float, overhead: float,
                  comm_off: bool) -> None:
    samples = case.global_batch / median_s
    key = _scaling_key(case)
    if case.world == 1:
        _ONE_WORKER[key] = samples
    one = _ONE_WORKER.get(key)
    comm = 0.0 if case.world == 1 else communication_share(group) if comm_off else None
    benchmark.extra_info.update(
        samples_per_s=samples, worker_samples_per_s=samples / case.world,
        scaling_efficiency=samples / (case.world * one) if one else None,
        communication_share=comm, coordinator_share=overhead / median_s,
        peak_rss_bytes=[r["peak_rss_bytes"] for r in group.ask("stats")],
        **convergence(group, link, case),
    )


def communication_share(group: WorkerGroup) -> float:
    """1 - (a step without communication) / (a step with it), from steps alternated so that a
    load episode hits both alike."""
    sync, local = [], []
    for _ in range(COMM_PAIRS):
        sync.append(timing.once(lambda: group.ask("step"))[1])
        local.append(timing.once(lambda: group.ask("step", sync=False))[1])
    return max(0.0, 1.0 - statistics.median(local) / statistics.median(sync))


LOSS_AFTER_STEPS = 20


def convergence(group: WorkerGroup, link: NodeLink, case) -> dict:
    """Time to target (opbench.suites.target), the loss being the mean over every node's workers,
    as the single-process suite measures it; and the loss after LOSS_AFTER_STEPS steps. This is
    what an asynchronous rule is judged by: its steps are cheaper, but each one is worth less.
    Across nodes each step's loss is gathered over the nodes' link (its round trip counts, as a
    real job's global loss would) and every node reads node 0's clock, so all stop at one step."""
    group.ask("batch", clusters=True)
    group.ask("optimizer")
    now = [0.0]
    steps = iter(range(target.MAX_STEPS + 1))

    def step() -> float:
        loss, now[0] = link.mean(f"target step {next(steps)}", [r["loss"] for r in group.ask("step")])
        return loss

    return target.time_to_target(step, catalogue.get(case.name).classes, loss_after=LOSS_AFTER_STEPS,
                                 clock=lambda: now[0])
