"""The nodes of a multi-node distributed case, joined: each node's pytest process drives its own
workers, and the nodes' pytest processes agree through one TCP connection each to node 0 (the
master's address, its port + 1) on everything that must be the same on every node: the global
loss of the correctness check and its verdict, the number of timed steps, and the loss curve the
time to target is read from. The engines' own collectives keep the workers' steps in lockstep;
this link keeps the pytest processes that ask for the steps in agreement.

Its one operation is an all-gather of small JSON values, in node order, tagged with what is being
gathered: node 0 collects every node's value and sends the list back to all. A node that runs
another case, or is at another point of the same case, fails every node with one line naming
both; a node that leaves (its own case failed) or misses the deadline fails the others. On one
node there is nothing to join: every gather returns this node's value alone, and no socket opens.
"""

from __future__ import annotations

import json
import select
import socket
import time
from typing import Any

from opbench.suites.distributed.engines import Topology

RETRY_S = 0.2  # between attempts to reach node 0 while it is not listening yet
LINK_PORT_OFFSET = 1  # the link listens on the master's port + 1 (the engines' rendezvous has the port)


class LinkError(Exception):
    """The nodes disagree or one of them is gone; the message is one line."""


class _Peer:
    """One end of a link connection: JSON lines with deadlines."""

    def __init__(self, sock: socket.socket, name: str) -> None:
        self.sock, self.name, self._buffer = sock, name, b""

    def send(self, message: dict) -> None:
        try:
            self.sock.sendall((json.dumps(message) + "\n").encode())
        except OSError as exc:
            raise LinkError(f"{self.name} is gone ({exc.strerror or exc})") from None

    def receive(self, what: str, deadline: float) -> dict:
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.sock], [], [], left)[0]:
                raise LinkError(f"{self.name} sent no '{what}' in time (--dist-timeout)")
            try:
                chunk = self.sock.recv(1 << 16)
            except OSError:  # reset by a node that died
                chunk = b""
            if not chunk:
                raise LinkError(f"{self.name} left the case (its own output says why)")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return json.loads(line)
        except json.JSONDecodeError:
            raise LinkError(f"{self.name} sent garbage instead of '{what}': {line[:80]!r}") from None

    def close(self) -> None:
        self.sock.close()


class NodeLink:
    """The nodes of one case, joined. Use as a context manager around the case's worker group."""

    def __init__(self, topo: Topology, case_id: str, join_s: float, timeout_s: float) -> None:
        self.topo, self.case_id, self.timeout_s, self.join_s = topo, case_id, timeout_s, join_s
        self.peers: list[_Peer] = []
        if topo.nodes > 1:
            deadline = time.monotonic() + join_s
            try:
                self._meet(deadline) if topo.node_rank == 0 else self._join(deadline)
            except BaseException:
                self.close()
                raise

    @property
    def address(self) -> tuple[str, int]:
        return self.topo.master_addr, self.topo.master_port + LINK_PORT_OFFSET

    def _meet(self, deadline: float) -> None:
        """Node 0: wait for every other node to join this case."""
        host, port = self.address
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            try:
                listener.bind((host, port))
            except OSError as exc:
                raise LinkError(f"node 0 cannot listen on {host}:{port} ({exc.strerror or exc}): OPBENCH_DIST_MASTER "
                                "must be node 0's own address, and its port + 1 free for the nodes' link") from None
            listener.listen(self.topo.nodes)
            joined: dict[int, _Peer] = {}
            while len(joined) < self.topo.nodes - 1:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([listener], [], [], left)[0]:
                    missing = sorted(set(range(1, self.topo.nodes)) - set(joined))
                    raise LinkError(f"node{'s' if len(missing) > 1 else ''} {', '.join(map(str, missing))} did not "
                                    f"join {self.case_id} at {host}:{port} within {self.join_s:.0f} s")
                sock, addr = listener.accept()
                peer = _Peer(sock, f"the node at {addr[0]}")
                self.peers.append(peer)  # closed with the link, whatever it said
                hello = peer.receive("hello", deadline)
                rank = hello.get("node")
                problem = self._problem(hello, joined)
                if problem:
                    peer.send({"error": problem})
                    raise LinkError(problem)
                peer.name = f"node {rank}"
                joined[rank] = peer
            self.peers = [joined[r] for r in sorted(joined)]
            for peer in self.peers:
                peer.send({"ok": True})
        finally:
            listener.close()

    def _problem(self, hello: dict, joined: dict[int, _Peer]) -> str | None:
        rank, case = hello.get("node"), hello.get("case")
        if not isinstance(rank, int) or not 0 < rank < self.topo.nodes or rank in joined:
            return f"a node joined as node {rank!r}: each of nodes 1..{self.topo.nodes - 1} must join once " \
                   "(OPBENCH_DIST_NODE_RANK)"
        if hello.get("nodes") != self.topo.nodes:
            return f"node {rank} says OPBENCH_DIST_NODES={hello.get('nodes')}, node 0 says {self.topo.nodes}"
        if case != self.case_id:
            return f"node {rank} runs {case} while node 0 runs {self.case_id}: every node must run the same selection"
        return None

    def _join(self, deadline: float) -> None:
        """Every other node: reach node 0 (it may not be listening yet) and say which case this is."""
        host, port = self.address
        while True:
            try:
                sock = socket.create_connection((host, port), timeout=max(0.1, deadline - time.monotonic()))
                break
            except OSError as exc:
                if time.monotonic() + RETRY_S >= deadline:
                    raise LinkError(f"node {self.topo.node_rank} could not reach node 0 at {host}:{port} for "
                                    f"{self.case_id} ({exc.strerror or exc})") from None
                time.sleep(RETRY_S)
        sock.settimeout(None)
        peer = _Peer(sock, "node 0")
        self.peers = [peer]
        peer.send({"node": self.topo.node_rank, "nodes": self.topo.nodes, "case": self.case_id})
        answer = peer.receive("welcome", deadline)
        if "error" in answer:
            raise LinkError(answer["error"])

    def gather(self, tag: str, value: Any) -> list[Any]:
        """Every node's `value` for `tag`, in node order, on every node."""
        if self.topo.nodes == 1:
            return [value]
        deadline = time.monotonic() + self.timeout_s
        if self.topo.node_rank:
            self.peers[0].send({"tag": tag, "value": value})
            answer = self.peers[0].receive(tag, deadline)
            if "error" in answer:
                raise LinkError(answer["error"])
            return answer["values"]
        values = [value]
        for rank, peer in enumerate(self.peers, start=1):
            got = peer.receive(tag, deadline)
            if got.get("tag") != tag:
                problem = f"node {rank} is at '{got.get('tag')}' of {self.case_id} while node 0 is at '{tag}'"
                for other in self.peers:
                    other.send({"error": problem})
                raise LinkError(problem)
            values.append(got["value"])
        for peer in self.peers:
            peer.send({"values": values})
        return values

    def mean(self, tag: str, values: list[float]) -> tuple[float, float]:
        """The mean of every node's `values` (its workers' losses, each over an equal share of the
        global batch), and node 0's clock (time.perf_counter) when it gathered them: a clock every
        node reads alike, so that a decision taken on elapsed time is the same on every node."""
        gathered = self.gather(tag, [float(sum(values)), len(values), time.perf_counter()])
        return sum(s for s, _, _ in gathered) / sum(n for _, n, _ in gathered), gathered[0][2]

    def verdict(self, tag: str, problem: str | None) -> str | None:
        """Every node's verdict on a check, as one: the first node's problem (named by its node
        when there are several), or None when every node passed."""
        for rank, said in enumerate(self.gather(tag, problem)):
            if said:
                return f"node {rank}: {said}" if self.topo.nodes > 1 else said
        return None

    def close(self) -> None:
        for peer in self.peers:
            peer.close()
        self.peers = []

    def __enter__(self) -> NodeLink:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
