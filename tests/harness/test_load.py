"""How busy the machine was around a timed benchmark: other work from the kernel's accounts, the
benchmark's own processes left out, the busy rule, and the warning a session prints."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opbench.core import schema
from opbench.harness import load
from opbench.harness.load import Load, MachineLoad, family_cpu_seconds
from opbench.harness.observed_threads import LOAD_MARGIN
from opbench.results.store import Run, bench_of
from opbench.results.summary import busy_lines

from ..helpers import bench

CPUS = sorted(os.sched_getaffinity(0))
HZ = os.sysconf("SC_CLK_TCK")


def _proc_stat(path: Path, busy_each: int, steal_each: int, running: int) -> None:
    lines = ["cpu  0 0 0 0 0 0 0 0 0 0"]
    # user nice system idle iowait irq softirq steal: busy is user + steal here
    lines += [f"cpu{c} {busy_each - steal_each} 0 0 500 0 0 0 {steal_each} 0 0" for c in CPUS]
    path.write_text("\n".join([*lines, "intr 0", f"procs_running {running}", "procs_blocked 0", ""]))


def test_load_from_the_kernels_accounts(tmp_path, monkeypatch):
    """1.6 CPU-seconds of busy time over 1 s of wall, 0.1 of it the benchmark's own: 1.5 CPUs of
    other work; 0.2 s of steal; a run queue of 3 then 5."""
    stat = tmp_path / "stat"
    _proc_stat(stat, 1000, 0, 3)
    clock, own = iter([0.0, 1.0]), iter([0.0, 0.1])
    monkeypatch.setattr(load.time, "perf_counter", lambda: next(clock))
    monkeypatch.setattr(load, "family_cpu_seconds", lambda proc: next(own))
    with MachineLoad(2, stat=stat) as meter:
        per_cpu = round(1.6 * HZ / len(CPUS))
        _proc_stat(stat, 1000 + per_cpu, round(0.2 * HZ / len(CPUS)), 5)
    got = meter.load
    assert got.cpus == len(CPUS) and got.team == 2 and got.run_queue == 4
    assert got.others == pytest.approx(per_cpu * len(CPUS) / HZ - 0.1, abs=0.02)
    assert got.steal == pytest.approx(0.2 / len(CPUS), abs=0.02)
    assert got.busy is (got.others > max(0, len(CPUS) - 2) + LOAD_MARGIN)
    assert got.as_dict()["busy"] is got.busy and "steal" in got.describe()


@pytest.mark.parametrize(("others", "cpus", "team", "busy"), [
    (0.2, 2, 2, False), (0.3, 2, 2, True), (1.2, 4, 2, False), (2.3, 4, 2, True), (9.0, 0, 2, False),
])
def test_busy_means_more_other_work_than_free_cpus(others, cpus, team, busy):
    assert Load(1.0, cpus, others, 0.0, 1.0, team).busy is busy


def test_the_benchmarks_own_processes_are_not_other_work(tmp_path):
    """A distributed benchmark's workers are its children: their CPU time is the benchmark's own,
    and so is their children's; an unrelated process's is not."""
    me = 4242

    def proc(pid: int, ppid: int, utime: int, stime: int, name: str = "python3") -> None:
        (tmp_path / str(pid)).mkdir()
        fields = ["S", str(ppid), *["0"] * 9, str(utime), str(stime), *["0"] * 8]
        (tmp_path / str(pid) / "stat").write_text(f"{pid} ({name}) {' '.join(fields)}\n")

    proc(me, 1, 7, 7)
    proc(5000, me, 100, 50, name="worker (rank 0)")  # a space and parentheses in the name
    proc(5001, 5000, 30, 20)
    proc(6000, 1, 900, 900)  # another user's process
    reaped = os.times()
    base = time.process_time() + reaped.children_user + reaped.children_system
    assert family_cpu_seconds(tmp_path, pid=me) == pytest.approx(base + 200 / HZ, abs=0.05)


def _orphan_spinner(seconds: float) -> int:
    """A process that is not this one's descendant (its parent exits), spinning on a CPU."""
    spin = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
    code = ("import subprocess, sys\n"
            f"print(subprocess.Popen([sys.executable, '-c', {spin!r}], stdout=subprocess.DEVNULL, "
            "stderr=subprocess.DEVNULL).pid)")
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)


def test_other_processes_make_a_benchmark_busy():
    pids = [_orphan_spinner(30) for _ in CPUS]
    try:
        time.sleep(0.3)
        with MachineLoad(len(CPUS)) as meter:
            time.sleep(0.6)  # this process sleeps: the spinners have the CPUs unless others share them
    finally:
        for pid in pids:
            try:
                os.kill(pid, 9)
            except ProcessLookupError:
                pass
    # ticks are 10 ms and the window 0.6 s: the spinners' CPUs, less what other work took from them
    assert meter.load.others > 0.6 * len(CPUS) and meter.load.busy


def test_a_session_warns_about_results_timed_on_a_busy_machine(tmp_path):
    quiet = {schema.LOAD: Load(1.0, 2, 0.1, 0.0, 2.0, 2).as_dict()}
    loaded = {schema.LOAD: Load(1.0, 2, 1.9, 0.05, 5.0, 2).as_dict()}
    raws = [bench("test_a", 1e-3, **quiet), bench("test_b", 1e-3, **loaded), bench("test_c", 1e-3)]
    benches = {b.fullname: b for b in (bench_of(r, tmp_path) for r in raws)}
    lines = busy_lines(Run(tmp_path / "now", {}, "", benches))
    assert "1 of 3 benchmarks were timed on a busy machine" in lines[1]
    assert lines[2] == "  test_b: other work took 1.90 of 2 CPUs (0 free beside 2 threads), steal 5%, run queue 5"
    assert busy_lines(Run(tmp_path / "now", {}, "", {k: v for k, v in benches.items() if "test_b" not in k})) == []
