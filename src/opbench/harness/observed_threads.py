"""How many threads a framework really computes on, observed rather than asked.

A framework's own getter answers for the thread that asks it: MXNet 1.9.1's engine, for one,
sizes its OpenMP teams once when it starts and runs operators on its own worker threads, so
`omp_get_max_threads()` in the caller said 2 while every operator ran on 1. The witness that
does not depend on the framework's word is the kernel's account of each thread
(`/proc/self/task/<tid>/stat`, proc(5)), read while an untimed workload that every framework
parallelises (a 2048^3 GEMM) runs.

**Threads running at once.** A sampler thread reads every other thread's scheduling state every
SAMPLE_EVERY seconds; the count is the median number in state R (running, or runnable and waiting
for a CPU). That is the width of the team whichever threads take its turns and however busy the
machine is: a thread starved by another process stays runnable. Measured on 2 Zen 5 cores, 2
threads asked: every framework and mode 2 in most samples (TensorFlow eager {1: 27, 2: 179, 3:
16}), the same beside a process spinning on one of the cores, and MXNet held to one thread
{1: 271}. It needs the GIL to be free while the work runs (every framework here releases it in a
kernel); with fewer than MIN_SAMPLES samples the count falls back to CPU time.

**CPU time per thread** (utime + stime, read before and after) is kept as the second witness and
the fallback: the threads that did at least BUSY_SHARE of the busiest thread's work. It cannot
tell a team that takes turns from a larger one: JAX 0.10.2's jit runs a team of two on three pool
threads (CPU/wall 0.98, 0.50, 0.49; 0.97, 0.87, 0.13 a moment later), and beside the baseline
worker of an upgrade check its team showed 0.48 and 0.25 and its helper 0.22. Helpers that
dispatch do the same work per call whatever its size, hence the 2048^3 GEMM: at 1024^3 JAX's
helper did 0.26 of the wall beside a team at 0.79 and 0.76.

**Other work.** Each observation also reads what the rest of the machine did on the process's
CPUs over the same window, from the kernel's per-CPU account (/proc/stat): their busy time less
the process's own, steal included (time the hypervisor gave to other guests). A team of `n`
threads is crowded when that exceeds the CPUs it leaves spare by more than LOAD_MARGIN of one
CPU; a mismatch seen only then is no verdict on the framework.
"""

from __future__ import annotations

import os
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from opbench.harness import timing

__all__ = ["BUSY_SHARE", "LOAD_MARGIN", "MIN_SAMPLES", "MIN_SECONDS", "Observation", "cpu_seconds", "cpu_ticks",
           "crowded", "machine_ticks", "observe", "running_threads", "stat_fields"]

BUSY_SHARE = 0.4  # a thread with this share of the busiest thread's CPU time is part of the team
MIN_SECONDS = 0.3  # the shortest window sampled: 30 clock ticks at the usual 100 Hz
MAX_CALLS = 1000  # ... and never more calls than this, however fast one is
SAMPLE_EVERY = 0.002  # seconds between two readings of the threads' states
MIN_SAMPLES = 20  # fewer (the GIL held through the work, or a very short window): CPU time decides
TASKS = Path("/proc/self/task")
STAT = Path("/proc/stat")
LOAD_MARGIN = 0.25  # other work beyond the spare CPUs, in CPUs, that makes an observation crowded
BUSY_FIELDS = (0, 1, 2, 5, 6, 7)  # of a /proc/stat cpu line: user nice system (idle iowait) irq softirq steal
STEAL_FIELD = 7
METHOD = "thread states and CPU time from /proc/self/task/*/stat"


def stat_fields(stat: str) -> list[str]:
    """The fields of a /proc/<pid>[/task/<tid>]/stat line from the state (field 3 of proc(5)) on.
    The command name (field 2) may hold spaces and parentheses, so they start after its closing one."""
    return stat[stat.rindex(")") + 2:].split()


def cpu_ticks(fields: list[str]) -> int:
    """utime + stime, in clock ticks, from stat_fields (fields 14 and 15 of proc(5))."""
    return int(fields[11]) + int(fields[12])


def crowded(others: float, cpus: int, team: int) -> bool:
    """Whether other work (`others` CPUs' worth) took more than the CPUs a team of `team` threads
    leaves spare of `cpus`, and LOAD_MARGIN of one more; never when the CPUs are not known (0)."""
    return cpus > 0 and others > max(0, cpus - team) + LOAD_MARGIN


def _state(stat: str) -> str:
    """The scheduling state (field 3: R, S, D, ...) of a /proc/<pid>/task/<tid>/stat line; '' for
    a thread that ended while it was read (its stat file reads empty)."""
    end = stat.rfind(")")
    return stat[end + 2] if 0 <= end < len(stat) - 2 else ""


def running_threads(tasks: Path = TASKS, leave_out: int | None = None) -> int:
    """The threads of the process in state R (running or runnable), but `leave_out`."""
    n = 0
    for entry in tasks.iterdir():
        if entry.name == str(leave_out):
            continue
        try:
            n += _state((entry / "stat").read_text(encoding="ascii", errors="replace")) == "R"
        except (OSError, IndexError):
            continue
    return n


class _Sampler(threading.Thread):
    """Counts the running threads every SAMPLE_EVERY seconds until stopped (itself left out)."""

    def __init__(self, tasks: Path) -> None:
        super().__init__(name="opbench-thread-sampler", daemon=True)
        self.tasks, self.counts, self.tid = tasks, [], None
        self.done = threading.Event()

    def run(self) -> None:
        self.tid = threading.get_native_id()
        while not self.done.wait(SAMPLE_EVERY):
            self.counts.append(running_threads(self.tasks, self.tid))

    def stop(self) -> tuple[int, ...]:
        self.done.set()
        self.join()
        return tuple(self.counts)


def _ticks(stat: str) -> int:
    """utime + stime of one /proc/<pid>/task/<tid>/stat line, in clock ticks."""
    return cpu_ticks(stat_fields(stat))


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


def machine_ticks(cpus: frozenset[int] | None = None, stat: Path = STAT) -> tuple[int, int]:
    """(busy, steal) clock ticks of the CPUs `cpus` (all the machine's when None) since boot:
    busy counts user, nice, system, irq, softirq and steal time, and leaves out idle and iowait.
    (0, 0) where /proc/stat cannot be read."""
    busy = steal = 0
    try:
        lines = stat.read_text(encoding="ascii").splitlines()
    except OSError:
        return 0, 0
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or (name == "cpu") != (cpus is None):
            continue
        if cpus is not None and (not name[3:].isdigit() or int(name[3:]) not in cpus):
            continue
        try:
            ticks = [int(f) for f in fields]
            busy += sum(ticks[i] for i in BUSY_FIELDS if i < len(ticks))
            steal += ticks[STEAL_FIELD] if len(ticks) > STEAL_FIELD else 0
        except ValueError:
            continue
    return busy, steal


@dataclass(frozen=True)
class Observation:
    """CPU seconds each thread spent while a workload ran `calls` times over `wall_s` seconds, and
    the CPUs the rest of the machine took from the process's own over that time."""

    busy: tuple[float, ...]  # per thread, largest first; threads that spent nothing are left out
    wall_s: float
    calls: int
    others: float = 0.0  # CPUs (CPU seconds per second) other processes and other guests used
    cpus: int = 0  # the CPUs the process may run on (0: not known)
    running: tuple[int, ...] = ()  # the threads in state R at each sample

    def crowded(self, team: int) -> bool:
        """Whether other work took more than the CPUs a team of `team` threads leaves spare (and
        LOAD_MARGIN of one more): then a starved worker or a busy helper can pass for the other."""
        return crowded(self.others, self.cpus, team)

    @property
    def sampled(self) -> bool:
        """Whether the threads' states were read often enough to decide the count."""
        return len(self.running) >= MIN_SAMPLES

    @property
    def count(self) -> int:
        """The median number of threads running at once; without enough samples, the threads that
        did at least BUSY_SHARE of the busiest one's work (0 if none did any)."""
        if self.sampled:
            return int(statistics.median_low(self.running))
        if not self.busy or self.busy[0] <= 0:
            return 0
        return sum(1 for b in self.busy if b >= BUSY_SHARE * self.busy[0])

    @property
    def shares(self) -> tuple[float, ...]:
        """Each thread's CPU time as a share of the wall time, largest first."""
        return tuple(b / self.wall_s for b in self.busy) if self.wall_s > 0 else ()

    def describe(self, most: int = 4) -> str:
        """'2 threads running at once in 96% of 150 samples (CPU/wall of the busiest: 0.98, 0.95,
        0.02) over 0.31 s of 5 calls, other work on 0.01 of 2 CPUs'."""
        shares = ", ".join(f"{s:.2f}" for s in self.shares[:most])
        load = f", other work on {self.others:.2f} of {self.cpus} CPUs" if self.cpus else ""
        width = f"{self.count} thread{'s' if self.count != 1 else ''}"
        if self.sampled:
            often = self.running.count(self.count) / len(self.running)
            width += f" running at once in {often:.0%} of {len(self.running)} samples"
        return f"{width} (CPU/wall of the busiest: {shares}) over {self.wall_s:.2f} s of {self.calls} calls{load}"


def observe(work: Callable[[], object], min_seconds: float = MIN_SECONDS, max_calls: int = MAX_CALLS,
            tasks: Path = TASKS, stat: Path = STAT) -> Observation:
    """Run `work` (synchronised: it returns when its result exists) until `min_seconds` have
    passed or `max_calls` calls were made, and say how many threads ran at once, which spent the
    CPU time and how much other work ran on the process's CPUs meanwhile."""
    cpus = frozenset(os.sched_getaffinity(0))
    tick = os.sysconf("SC_CLK_TCK")
    sampler = _Sampler(tasks)
    before, (machine, _), own = cpu_seconds(tasks), machine_ticks(cpus, stat), time.process_time()
    start = time.perf_counter()
    sampler.start()
    try:
        calls = len(timing.rounds(work, 1, 1, max_calls, min_seconds))
    finally:
        running = sampler.stop()
    wall = time.perf_counter() - start
    after, (machine2, _), own = cpu_seconds(tasks), machine_ticks(cpus, stat), time.process_time() - own
    after.pop(sampler.tid, None)  # the sampler's own reading is not the framework's work
    spent = sorted((after[t] - before.get(t, 0.0) for t in after), reverse=True)
    known = machine2 > 0
    others = max(0.0, (machine2 - machine) / tick - own) / wall if known and wall > 0 else 0.0
    return Observation(tuple(s for s in spent if s > 0), wall, calls, others, len(cpus) if known else 0, running)
