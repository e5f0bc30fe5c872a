"""Frameworks that share one OpenMP runtime in a process, and what that does to their timings.

PyTorch and MXNet both run their CPU kernels on GNU OpenMP (libgomp.so.1: torch ships its own
copy, libmxnet links the system's, and the dynamic loader keeps whichever came first, so the two
share one runtime). libgomp counts every thread of every team in the process; once that count
exceeds the cores it may use, its idle workers spin 100 times instead of 300,000 before they
sleep (`gomp_throttled_spin_count_var`, libgomp/env.c), and every parallel region wakes them
from the kernel. MXNet's engine starts its team on its own worker thread, PyTorch on the main
thread, so after both computed on 2 threads of a 2-core machine both are throttled for the rest
of the process: a 256^3 PyTorch GEMM went from 162 to 252 us, MXNet's from 206 to 232 us
(docs/explanation/trustworthy.md has the measurements). `OMP_WAIT_POLICY=active` lifts the
throttle only by letting idle workers spin for seconds against the next framework's threads.

So opbench does two things: the plugin runs the benchmarks of frameworks sharing a runtime one
framework after another, the one that hurts the others most (MXNet) last (`run_order`); and a
case timed after another framework's team started on the same runtime says so in
`extra_info["openmp_shared_with"]` (`shared_with`), which the report shows. Comparing such
frameworks without it means one process per framework (`-m torch`, then `-m mxnet`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

# The OpenMP runtime each framework's CPU kernels run on (only frameworks with one; TensorFlow
# and JAX run theirs on their own thread pools, NumPy's OpenBLAS on pthreads).
RUNTIMES = {"torch": "libgomp", "mxnet": "libgomp"}
# The order frameworks sharing a runtime run in: the engine that starts its team on another
# thread than the main one (MXNet) slows the others most, so it comes last.
ORDER = ("torch", "mxnet")
MAPS = Path("/proc/self/maps")
# The variables that set how an idle OpenMP worker waits, spinning or asleep (the GNU runtime's and
# the LLVM/Intel one's), which a run records where they are set
WAIT_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "KMP_BLOCKTIME")


def loaded(runtime: str, maps: Path = MAPS) -> list[str]:
    """The files of `runtime` (e.g. 'libgomp') mapped into this process, as /proc/self/maps lists
    them; empty where there is no /proc."""
    try:
        text = maps.read_text()
    except OSError:
        return []
    paths = (fields[5] for fields in (line.split(maxsplit=5) for line in text.splitlines()) if len(fields) == 6)
    return sorted({path for path in paths if Path(path).name.startswith(runtime)})


def wait_settings(environ: Mapping[str, str] = os.environ) -> dict[str, str]:
    """The wait settings in `environ`, by variable; empty where none is set. By default this
    process's, which its runtimes read as they load; the paired gate asks it of a worker's
    environment before the worker starts."""
    return {name: environ[name] for name in WAIT_VARIABLES if name in environ}


def run_order(framework: str | None) -> int:
    """Sort key: frameworks without a shared runtime first, then ORDER."""
    return ORDER.index(framework) + 1 if framework in ORDER else 0


def shared_with(teams: dict[str, int], framework: str, device: str, threads: int,
                cores: int | None = None) -> str | None:
    """Record that `framework` computes on `threads` CPU threads in this process (`teams`: the
    session's record, framework -> threads) and say which frameworks already run a team on the
    same OpenMP runtime when together they hold more threads than the cores, or None."""
    runtime = RUNTIMES.get(framework)
    if runtime is None or device != "cpu" or threads < 2:
        return None
    teams[framework] = max(threads, teams.get(framework, 0))
    others = {f: n for f, n in teams.items() if f != framework and RUNTIMES.get(f) == runtime}
    cores = cores or len(os.sched_getaffinity(0))
    if not others or sum(others.values()) + threads <= cores:
        return None
    held = ", ".join(f"{f} {n}" for f, n in sorted(others.items()))
    return (f"{runtime} shared with {', '.join(sorted(others))} ({held} + {framework} {threads} threads on "
            f"{cores} cores: libgomp throttles its idle workers' spinning)")
