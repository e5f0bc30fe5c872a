"""The nodes' link of a multi-node distributed case, on the loopback interface: every node gets
the same gathered values, verdicts and clock, and a node that runs another case, is at another
point of the case, leaves, or never comes fails the others with one line. Nodes are threads here;
tests/suites/test_multinode.py runs real nodes in network namespaces."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pytest

from opbench.suites.distributed.engines import Topology, free_port
from opbench.suites.distributed.link import LINK_PORT_OFFSET, LinkError, NodeLink

HANG_S = 60.0  # bounds a hang; every exchange here takes milliseconds


def _topo(rank: int, nodes: int, port: int) -> Topology:
    return Topology(1, nodes=nodes, node_rank=rank, master_addr="127.0.0.1", master_port=port)


def _port() -> int:
    while True:  # the link takes the master's port + 1
        port = free_port()
        try:
            free_port_at(port + LINK_PORT_OFFSET)
            return port
        except OSError:
            continue


def free_port_at(port: int) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def _nodes(bodies: list[Callable[[int, int], object]], join_s: float = HANG_S, timeout_s: float = HANG_S) -> list:
    """Run body(rank, port) on one thread per node; each result or exception, in node order."""
    port, out = _port(), [None] * len(bodies)

    def run(rank: int) -> None:
        try:
            out[rank] = bodies[rank](rank, port)
        except Exception as exc:  # what the node saw, for the test to read
            out[rank] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(bodies))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(HANG_S * 2)
        assert not t.is_alive(), "a node hung"
    return out


def _linked(case: str, work: Callable[[NodeLink], object], nodes: int = 2, **kw) -> Callable[[int, int], object]:
    def body(rank: int, port: int):
        with NodeLink(_topo(rank, nodes, port), case, kw.get("join_s", HANG_S), kw.get("timeout_s", HANG_S)) as link:
            return work(link)
    return body


def test_one_node_opens_nothing_and_gathers_its_own_value():
    link = NodeLink(Topology(2), "case", 0, 0)
    assert link.gather("x", 3) == [3] and not link.peers
    assert link.mean("loss", [1.0, 2.0])[0] == 1.5
    assert link.verdict("v", None) is None and link.verdict("v", "bad") == "bad"


def test_three_nodes_gather_in_node_order_and_agree_on_the_mean_and_node_0s_clock():
    def work(link: NodeLink):
        got = link.gather("rounds", 10 + link.topo.node_rank)
        mean, clock = link.mean("loss 0", [float(link.topo.node_rank)] * (link.topo.node_rank + 1))
        return got, mean, clock

    results = _nodes([_linked("c", work, nodes=3)] * 3)
    assert all(not isinstance(r, Exception) for r in results), results
    assert {repr(r) for r in results} == {repr(results[0])}  # the same on every node
    assert results[0][0] == [10, 11, 12]
    assert results[0][1] == pytest.approx((0 + 1 * 2 + 2 * 3) / 6)  # every worker of every node counts once


def test_a_problem_on_one_node_is_every_nodes_verdict():
    def work(link: NodeLink):
        return link.verdict("verdict 0", "worker 3: w1 update off" if link.topo.node_rank == 1 else None)

    assert _nodes([_linked("c", work)] * 2) == ["node 1: worker 3: w1 update off"] * 2


def test_nodes_running_different_cases_fail_both_with_one_line():
    results = _nodes([_linked("case-a", lambda link: None), _linked("case-b", lambda link: None)])
    for r in results:
        assert isinstance(r, LinkError) and "node 1 runs case-b while node 0 runs case-a" in str(r)


def test_nodes_at_different_points_of_a_case_fail_with_one_line():
    results = _nodes([_linked("c", lambda link: link.gather("rounds", 5)),
                      _linked("c", lambda link: link.gather("loss 0", 1.0))])
    for r in results:
        assert isinstance(r, LinkError) and "node 1 is at 'loss 0' of c while node 0 is at 'rounds'" in str(r)


def test_a_node_that_leaves_fails_the_others_at_once():
    def leaves(link: NodeLink):
        raise RuntimeError("its own case failed")

    results = _nodes([_linked("c", lambda link: link.gather("rounds", 5)), _linked("c", leaves)])
    assert isinstance(results[0], LinkError) and "node 1 left the case" in str(results[0])


def test_a_node_that_never_comes_fails_node_0_by_the_join_deadline():
    results = _nodes([_linked("c", lambda link: None, join_s=1.0)])  # node 1 of 2 never starts
    assert isinstance(results[0], LinkError) and "node 1 did not join c" in str(results[0])


def test_a_node_whose_node_0_never_comes_fails_by_the_join_deadline():
    results = _nodes([lambda rank, port: None, _linked("c", lambda link: None, join_s=1.0)])
    assert isinstance(results[1], LinkError) and "node 1 could not reach node 0" in str(results[1])


def test_a_node_silent_past_the_deadline_fails_the_gather():
    release = threading.Event()

    def silent(link: NodeLink):
        release.wait(HANG_S)

    def asks(link: NodeLink):
        try:
            return link.gather("rounds", 5)
        finally:
            release.set()

    results = _nodes([_linked("c", asks, timeout_s=0.5), _linked("c", silent)])
    assert isinstance(results[0], LinkError) and "node 1 sent no 'rounds' in time" in str(results[0])


def test_node_0_that_cannot_listen_on_the_master_address_says_so():
    with pytest.raises(LinkError, match="OPBENCH_DIST_MASTER must be node 0's own address"):
        NodeLink(Topology(1, nodes=2, master_addr="192.0.2.1", master_port=29500), "c", 1.0, 1.0)
