"""How many threads a framework really computes on, observed rather than asked.

A framework's own getter answers for the thread that asks it: MXNet 1.9.1's engine, for one,
sizes its OpenMP teams once when it starts and runs operators on its own worker threads, so
`omp_get_max_threads()` in the caller said 2 while every operator ran on 1. The only witness
that does not depend on the framework's word is the kernel's account of CPU time per thread:
`/proc/self/task/<tid>/stat` (utime + stime, proc(5)). Sampled before and after an untimed
workload that every framework parallelises (a 2048^3 GEMM), the threads that did the work are
those whose CPU time is a fair share of the busiest thread's.

The rule is relative on purpose: another process on the machine slows every thread of the team
alike, so the shares of a team's threads stay close to each other (measured: 0.89/0.89 for
TensorFlow, 1.0/1.0 for PyTorch) while a thread left idle stays near 0 (MXNet's second core:
0.02). A thread counts when it did at least BUSY_SHARE of the busiest thread's work.

The GEMM is large so that each call's fixed work outside the team stays small beside the team's:
a framework's dispatching or waiting thread does the same work per call whatever its size. At
1024^3 on a Zen 5 core pair (4.6 ms a call) JAX's helper did 0.26 of the wall time beside a team
at 0.79 and 0.76, and MXNet hybridize's 0.27 beside 0.83: a third of the busiest, counted as a
third thread. At 2048^3 (8 times the work a call) the helpers of JAX, TensorFlow and PyTorch fell
to 0.03 or less. The share is 0.4, since a team splits the GEMM's blocks evenly.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["BUSY_SHARE", "MIN_SECONDS", "Observation", "cpu_seconds", "observe"]

BUSY_SHARE = 0.4  # a thread with this share of the busiest thread's CPU time is part of the team
MIN_SECONDS = 0.3  # the shortest window sampled: 30 clock ticks at the usual 100 Hz
MAX_CALLS = 1000  # ... and never more calls than this, however fast one is
TASKS = Path("/proc/self/task")
METHOD = "per-thread CPU time from /proc/self/task/*/stat"


def _ticks(stat: str) -> int:
    """utime + stime of one /proc/<pid>/task/<tid>/stat line, in clock ticks. The command name
    (field 2) may hold spaces and parentheses, so fields are counted after its closing one."""
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5), counted from state (3)


def cpu_seconds(tasks: Path = TASKS) -> dict[int, float]:
    """CPU seconds (user + system) of every live thread of the process, by thread id. A thread
    that ends while it is read is left out."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for entry in tasks.iterdir():
        try:
            out[int(entry.name)] = _ticks((entry / "stat").read_text(encoding="ascii", errors="replace")) / tick
        except (OSError, ValueError, IndexError):
            continue
    return out


@dataclass(frozen=True)
class Observation:
    """CPU seconds each thread spent while a workload ran `calls` times over `wall_s` seconds."""

    busy: tuple[float, ...]  # per thread, largest first; threads that spent nothing are left out
    wall_s: float
    calls: int

    @property
    def count(self) -> int:
        """The threads that did at least BUSY_SHARE of the busiest one's work (0 if none did any)."""
        if not self.busy or self.busy[0] <= 0:
            return 0
        return sum(1 for b in self.busy if b >= BUSY_SHARE * self.busy[0])

    @property
    def shares(self) -> tuple[float, ...]:
        """Each thread's CPU time as a share of the wall time, largest first."""
        return tuple(b / self.wall_s for b in self.busy) if self.wall_s > 0 else ()

    def describe(self, most: int = 4) -> str:
        """'2 threads (CPU/wall 0.98, 0.95, 0.02) over 0.31 s of 5 calls'."""
        shares = ", ".join(f"{s:.2f}" for s in self.shares[:most])
        return (f"{self.count} thread{'s' if self.count != 1 else ''} (CPU/wall of the busiest: {shares}) "
                f"over {self.wall_s:.2f} s of {self.calls} calls")


def observe(work: Callable[[], object], min_seconds: float = MIN_SECONDS, max_calls: int = MAX_CALLS,
            tasks: Path = TASKS) -> Observation:
    """Run `work` (synchronised: it returns when its result exists) until `min_seconds` have
    passed or `max_calls` calls were made, and say which threads spent the CPU time."""
    before, start, calls = cpu_seconds(tasks), time.perf_counter(), 0
    while calls < max_calls and (calls == 0 or time.perf_counter() - start < min_seconds):
        work()
        calls += 1
    wall = time.perf_counter() - start
    after = cpu_seconds(tasks)
    spent = sorted((after[t] - before.get(t, 0.0) for t in after), reverse=True)
    return Observation(tuple(s for s in spent if s > 0), wall, calls)
