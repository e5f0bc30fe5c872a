"""One side of the paired regression gate: a long-running process of one environment that
collects the selection with pytest, prepares one benchmark at a time exactly as the plugin does
(the same Case, inputs, thread pinning, NumPy check and first call) and times short bursts of it
on request.

Run as `python -m opbench.regression.worker`. Requests come as JSON lines on stdin and replies go as JSON
lines on the original stdout; everything else the frameworks print goes to stderr, so that it
cannot corrupt the protocol. Every reply has "ok"; a failed request has a one-line "error".
"""

from __future__ import annotations

import gc
import os
import resource
import sys
import time
from typing import Any

from opbench.core.errors import one_line
from opbench.core.processes import reply_stream, serve
from opbench.harness import timing
from opbench.suites import registry


def steal_ticks() -> int:
    """Time the hypervisor gave this machine's CPUs to other guests, in clock ticks (0 where unknown)."""
    from opbench.harness.observed_threads import machine_ticks

    return machine_ticks()[1]


class Collector:
    """A pytest plugin that keeps the collected opbench items (name, case, fixture and the item
    itself, by node id) and the session state."""

    def __init__(self) -> None:
        self.items: dict[str, Any] = {}
        self.state = None

    def pytest_collection_finish(self, session) -> None:
        from opbench.pytest_plugin import STATE

        self.state = session.config.stash.get(STATE, None)
        for item in session.items:
            params = getattr(getattr(item, "callspec", None), "params", {})
            fixture = next((f for f in registry.PAIRED if f in params), None)
            if fixture is not None:
                self.items[item.nodeid] = (item.name, params[fixture], fixture, item)


class Worker:
    """The worker's state between requests: the collected selection and the prepared benchmark."""

    def __init__(self, freeze: bool = False) -> None:
        self.collector = Collector()
        self.current: Any = None  # (case, backend, Ready)
        self.freeze = freeze  # see settle()

    def settle(self) -> None:
        """Collect the garbage; with `freeze`, then move every survivor to the collector's
        permanent generation (gc.freeze), so that the next collection scans only what later
        benchmarks create (a full collection over torch's, pytest's and the compilers' objects
        costs a sizeable share of a benchmark's turn in a worker pair; after a freeze, almost
        nothing). Objects alive at a freeze are never freed: nothing a benchmark's inputs hold
        once it is released (those are freed before the freeze)."""
        gc.collect()
        if self.freeze:
            gc.freeze()

    def collect(self, args: list[str]) -> dict:
        import pytest

        from opbench.harness import sweep

        os.environ[sweep.CHILD] = "1"  # one thread count per worker: no sweep children
        code = pytest.main([*args, "--collect-only", "-q", "--benchmark-disable", "-p", "no:cacheprovider"],
                           plugins=[self.collector])
        state = self.collector.state
        if state is None or code not in (0, 5):
            return {"ok": False, "error": f"pytest could not collect {' '.join(args)} (exit {int(code)})"}
        if len(state.settings.threads) > 1:
            return {"ok": False, "error": "the paired gate measures one thread count: give --threads a single value"}
        self.settle()
        return {"ok": True, "ids": list(self.collector.items)}

    def machine_info(self) -> dict:
        from pytest_benchmark.plugin import pytest_benchmark_generate_machine_info
        from pytest_benchmark.utils import get_commit_info

        from opbench.harness.fingerprint import update_machine_info

        state = self.collector.state
        info = pytest_benchmark_generate_machine_info()
        update_machine_info(info, state.settings, state.threads, state.malloc, state.roofline)
        info["opbench"]["run"] = {"status": "complete", "failed": [], "design": "paired"}
        return {"ok": True, "machine_info": info, "commit_info": get_commit_info()}

    def prepare(self, node_id: str) -> dict:
        """Build and verify one benchmark: outcome ready (with the known issue its result showed, if
        any: it is timed anyway, as the other side is), skipped, xfail (a known framework bug whose
        entry states no regime), wrong (its check failed) or failed (a crash; with the reason). The
        coordinator calibrates from its own bursts."""
        import pytest

        from opbench.suites.measure import admit, describe, setup
        from opbench.suites.prepared import CorrectnessError

        self.release()
        name, case, fixture, item = self.collector.items[node_id]
        state = self.collector.state
        admission = admit(case)
        if admission.unavailable:
            return {"ok": True, "outcome": "skipped", "message": admission.unavailable}
        if admission.issue and not admission.issue.regime:  # it cannot tell its deviation from another
            return {"ok": True, "outcome": "xfail", "message": admission.issue.reason}
        backend = admission.backend
        try:
            ready = registry.ready_from_test(fixture, item, case, backend, state) or setup(case, backend, state,
                                                                                          known_ok=True)
        except pytest.skip.Exception as exc:
            return {"ok": True, "outcome": "skipped", "message": one_line(exc)}
        except CorrectnessError as exc:  # its check failed: what the framework computes, not a crash
            return {"ok": True, "outcome": "wrong", "message": one_line(exc)}
        except (Exception, pytest.fail.Exception) as exc:
            return {"ok": True, "outcome": "failed", "message": one_line(exc)}
        self.current = (case, backend, ready)
        return {"ok": True, "outcome": "ready", "name": name, "group": case.group,
                "extra_info": describe(case, backend, ready, state), "known": ready.known}

    def threads(self, node_id: str) -> dict:
        """Observe the threads benchmark `node_id` will compute on (once per framework and mode in
        a worker; measure.threads_of), while the other side of the pair waits: looked at side by
        side, each worker's calibration GEMMs crowd the other's CPUs. A failure here is left for
        prepare to report."""
        from opbench.suites.measure import threads_of
        from opbench.suites.prepared import require

        case = self.collector.items[node_id][1]
        try:
            threads_of(case, require(case), self.collector.state)
        except Exception as exc:
            return {"ok": True, "observed": False, "message": one_line(exc)}
        return {"ok": True, "observed": True}

    def burst(self, loops: int, rounds: int) -> dict:
        """`rounds` timed rounds of `loops` calls each: the time per call of every round, and the
        process CPU time, steal ticks, involuntary context switches and minor page faults over the
        whole burst (read before and after it, outside the timed rounds)."""
        if self.current is None:
            return {"ok": False, "error": "burst before a successful prepare"}
        case, _, ready = self.current
        call, state = ready.prepared.call, self.collector.state
        steal, (switches, faults), cpu = steal_ticks(), _usage(), time.process_time()
        start = time.perf_counter()
        times = timing.rounds(call, loops, rounds)
        wall = time.perf_counter() - start
        cpu, steal, usage = time.process_time() - cpu, steal_ticks() - steal, _usage()
        switches, faults = usage[0] - switches, usage[1] - faults
        try:
            state.roofline.check(ready.prepared.flops, min(times), case.device, case.dtype, ready.prepared.backend,
                                 gain=ready.prepared.algorithm_gain)
        except AssertionError as exc:
            return {"ok": False, "error": one_line(exc)}
        return {"ok": True, "times": times, "wall": wall, "cpu_per_call": cpu / (loops * rounds),
                "wall_per_call": wall / (loops * rounds), "steal": steal, "switches": switches,
                "faults_per_call": faults / (loops * rounds)}

    def check(self) -> dict:
        """The call after the current benchmark's bursts, checked as a run checks the call after its
        timed rounds (measure.check_after_rounds): outcome wrong, with the check's line, where it
        fails; ready where it passes, with what it showed where that is a known issue (as prepare
        says it)."""
        if self.current is None:
            return {"ok": False, "error": "check before a successful prepare"}
        from opbench.suites.measure import check_after_rounds
        from opbench.suites.prepared import CorrectnessError

        try:  # a result off only as a known issue says is timed, as at prepare (setup's known_ok)
            known = check_after_rounds(self.current[2].prepared, "its bursts", known_ok=True)
        except CorrectnessError as exc:
            return {"ok": True, "outcome": "wrong", "message": one_line(exc)}
        return {"ok": True, "outcome": "ready", **({"known": known} if known else {})}

    def release(self) -> dict:
        if self.current is not None:
            from opbench.harness.allocator import release

            self.current = None
            self.settle()
            release()
        return {"ok": True}

    def handle(self, request: dict) -> dict:
        """One request of the protocol (its "cmd" and arguments) answered."""
        answers = {
            "collect": lambda: self.collect(list(request["args"])),
            "machine_info": self.machine_info,
            "threads": lambda: self.threads(request["id"]),
            "prepare": lambda: self.prepare(request["id"]),
            "burst": lambda: self.burst(int(request["loops"]), int(request["rounds"])),
            "check": self.check,
            "release": self.release,
        }
        cmd = request.get("cmd")
        if cmd not in answers:
            return {"ok": False, "error": f"unknown request {cmd!r}"}
        return answers[cmd]()


def _usage() -> tuple[int, int]:
    """This process's involuntary context switches and minor page faults so far, from one
    getrusage (a minor fault is memory the kernel handed it afresh: a call whose output glibc gave
    back to the kernel after the last call faults its pages in again)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nivcsw, usage.ru_minflt


def main() -> int:
    replies = reply_stream()
    worker = Worker(freeze=True)
    serve(worker.handle, sys.stdin, replies)
    return 0


if __name__ == "__main__":
    sys.exit(main())
