"""How busy the machine was while a benchmark was timed, read from the kernel's own accounts.

A benchmark timed beside other work is slower by however much of its CPUs the other work took,
and nothing in its rounds says so: a thread sweep on a loaded 2-core VM gave 1.18 ms at one
thread and 67.5 ms at two, flagged only as a wide IQR. Nothing runs during the timed rounds:
the accounts are read once before them and once after.

- **Other work**: the busy time of the CPUs the process may run on (/proc/stat, proc(5); steal
  included, the time the hypervisor gave to other guests), less the CPU time of the benchmark's
  own processes (this one, its live descendants, and the children it reaped meanwhile), in CPUs
  averaged over the window.
- **Steal**: the share of those CPUs' time the hypervisor took.
- **Run queue**: runnable tasks machine-wide (`procs_running`, the benchmark's own included),
  the mean of the two readings.

A result is **busy** when other work took more than the CPUs its team leaves free, by more than
a quarter of a CPU (observed_threads.LOAD_MARGIN): the thread observer's rule for a crowded
observation, observed_threads.crowded.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from opbench.core.schema import load_line
from opbench.harness.observed_threads import STAT, cpu_ticks, crowded, machine_ticks, stat_fields

PROC = Path("/proc")


def procs_running(stat: Path = STAT) -> int:
    """Runnable tasks on the whole machine now (-1 where /proc/stat cannot be read)."""
    try:
        for line in stat.read_text(encoding="ascii").splitlines():
            if line.startswith("procs_running "):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return -1


def family_cpu_seconds(proc: Path = PROC, pid: int | None = None) -> float:
    """CPU seconds of this process, its live descendants (utime + stime from their stat files)
    and the children it has reaped (os.times)."""
    pid = os.getpid() if pid is None else pid
    parents: dict[int, int] = {}
    ticks: dict[int, int] = {}
    for entry in proc.glob("[0-9]*/stat"):
        try:
            fields = stat_fields(entry.read_text(encoding="ascii", errors="replace"))
            child = int(entry.parent.name)
            parents[child], ticks[child] = int(fields[1]), cpu_ticks(fields)
        except (OSError, ValueError, IndexError):
            continue  # a process that ended while the folder was read
    family, frontier = set(), [pid]
    while frontier:
        parent = frontier.pop()
        for child, ppid in parents.items():
            if ppid == parent and child not in family:
                family.add(child)
                frontier.append(child)
    reaped = os.times()
    live = sum(ticks[p] for p in family) / os.sysconf("SC_CLK_TCK")
    return time.process_time() + live + reaped.children_user + reaped.children_system


@dataclass(frozen=True)
class Load:
    """The machine around one timed benchmark."""

    wall_s: float
    cpus: int  # CPUs the process may run on (0: the kernel's accounts could not be read)
    others: float  # CPUs' worth of other work on them, averaged over the window, steal included
    steal: float  # share of those CPUs' time given to other guests
    run_queue: float  # runnable tasks machine-wide, the benchmark's own included
    team: int  # threads the benchmark computes with, over all its processes

    @property
    def free(self) -> float:
        return max(0.0, self.cpus - self.team)

    @property
    def busy(self) -> bool:
        return crowded(self.others, self.cpus, self.team)

    def as_dict(self) -> dict:
        return {"other_cpus": round(self.others, 3), "steal": round(self.steal, 4),
                "run_queue": round(self.run_queue, 1), "cpus": self.cpus, "team": self.team,
                "wall_s": round(self.wall_s, 3), "busy": self.busy}

    def describe(self) -> str:
        return load_line(self.as_dict())


class MachineLoad:
    """`with MachineLoad(team) as meter:` around the timed rounds; `meter.load` after the block."""

    def __init__(self, team: int, stat: Path = STAT, proc: Path = PROC) -> None:
        self.team, self.stat, self.proc = max(1, int(team)), stat, proc
        self.load: Load | None = None

    def _read(self) -> tuple[float, int, int, float, int]:
        busy, steal = machine_ticks(self.cpus, self.stat)
        return time.perf_counter(), busy, steal, family_cpu_seconds(self.proc), procs_running(self.stat)

    def __enter__(self) -> MachineLoad:
        self.cpus = frozenset(os.sched_getaffinity(0))
        self._start = self._read()
        return self

    def __exit__(self, *exc) -> None:
        (t0, busy0, steal0, own0, queue0), (t1, busy1, steal1, own1, queue1) = self._start, self._read()
        wall, tick = t1 - t0, os.sysconf("SC_CLK_TCK")
        known = busy1 > 0 and wall > 0
        others = max(0.0, (busy1 - busy0) / tick - (own1 - own0)) / wall if known else 0.0
        steal = (steal1 - steal0) / tick / (wall * len(self.cpus)) if known else 0.0
        queue = (queue0 + queue1) / 2 if min(queue0, queue1) >= 0 else -1.0
        self.load = Load(wall, len(self.cpus) if known else 0, others, min(1.0, steal), queue, self.team)
