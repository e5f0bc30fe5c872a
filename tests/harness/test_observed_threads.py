"""The thread observer: per-thread CPU time read from /proc (a fake one, then the real one), the
count it derives, and the measurement failing in one line when a framework says one count and
computes on another."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from opbench import frameworks
from opbench.harness.config import Settings
from opbench.harness.observed_threads import (
    MIN_SAMPLES,
    Observation,
    cpu_seconds,
    machine_ticks,
    observe,
    running_threads,
)
from opbench.pytest_plugin import State
from opbench.suites.binding import Bound
from opbench.suites.measure import ThreadMismatch, measure, observed_threads
from tests.suites.test_measure import FakeBenchmark, gemm_case

NumpyBackend = type(frameworks.load("numpy"))
CORES = len(os.sched_getaffinity(0))
TICK = os.sysconf("SC_CLK_TCK")


def stat_line(tid: int, comm: str, utime: int, stime: int) -> str:
    """A /proc/<pid>/task/<tid>/stat line as proc(5) lays it out (52 fields)."""
    rest = ["S", "1", "1", "1", "0", "-1", "4194368", "0", "0", "0", "0", str(utime), str(stime)] + ["0"] * 37
    return f"{tid} ({comm}) {' '.join(rest)}\n"


class FakeProc:
    """A /proc/self/task of three threads whose CPU ticks a workload advances."""

    def __init__(self, root: Path, names: dict[int, str]) -> None:
        self.root, self.ticks = root, dict.fromkeys(names, 0)
        self.names = names
        self.write()

    def write(self) -> None:
        for tid, name in self.names.items():
            (self.root / str(tid)).mkdir(exist_ok=True)
            (self.root / str(tid) / "stat").write_text(stat_line(tid, name, self.ticks[tid], 0))

    def spend(self, **ticks: int) -> None:
        for tid, t in ticks.items():
            self.ticks[int(tid.lstrip("t"))] += t
        self.write()


def test_the_command_name_may_hold_spaces_and_parentheses(tmp_path):
    proc = FakeProc(tmp_path, {7: "python (main) x", 8: "omp) worker"})
    proc.spend(t7=30, t8=5)
    assert cpu_seconds(tmp_path) == {7: 30 / TICK, 8: 5 / TICK}


@pytest.fixture
def unsampled(monkeypatch):
    """The CPU-time witness alone: the sampler takes no sample before it is stopped. A fake
    /proc's threads are never in state R, so samples would count 0 whenever the calls outlast
    MIN_SAMPLES readings (CI, beside the checks' lane: 3 calls took 95 ms, 28 samples)."""
    from opbench.harness import observed_threads as module

    monkeypatch.setattr(module, "SAMPLE_EVERY", 3600.0)


def test_a_team_of_two_and_an_idle_thread(tmp_path, unsampled):
    proc = FakeProc(tmp_path, {1: "python", 2: "omp", 3: "idle"})
    seen = observe(lambda: proc.spend(t1=10, t2=9, t3=0), min_seconds=60, max_calls=3, tasks=tmp_path)
    assert seen.calls == 3 and not seen.running and seen.count == 2
    assert seen.busy == (30 / TICK, 27 / TICK)


def test_a_helper_thread_below_the_share_is_not_in_the_team(tmp_path, unsampled):
    # MXNet's engine worker does the work, the caller waits (measured: 0.98 and 0.10 of the wall time)
    proc = FakeProc(tmp_path, {1: "worker", 2: "caller"})
    assert observe(lambda: proc.spend(t1=98, t2=10), min_seconds=0, max_calls=1, tasks=tmp_path).count == 1


def test_no_work_observed_is_no_thread():
    assert Observation((), 1.0, 1).count == 0
    assert "0 threads" in Observation((), 1.0, 1).describe()


def test_a_thread_that_ends_while_read_is_left_out(tmp_path):
    proc = FakeProc(tmp_path, {1: "a", 2: "b"})
    proc.spend(t1=4)
    (tmp_path / "2" / "stat").unlink()
    assert cpu_seconds(tmp_path) == {1: 4 / TICK}


def _observed_numpy(threads: int) -> int:
    """Threads NumPy's BLAS computes a CALIBRATION^3 (2048^3) GEMM on, the best of three looks (another process's
    load can hide a thread for one window, never add one)."""
    state = State(Settings(threads=(threads,), peak_gflops=100.0))
    counts = []
    for _ in range(3):
        state.observed.clear()
        try:
            counts.append(observed_threads(NumpyBackend(), "eager", threads, state)[0])
        except ThreadMismatch as exc:
            counts.append(int(str(exc).split("observed ")[1].split()[0]))
        if counts[-1] == threads:
            break
    return max(counts)


def test_real_numpy_gemm_on_one_thread():
    assert _observed_numpy(1) == 1


@pytest.mark.skipif(CORES < 2, reason="needs 2 cores")
def test_real_numpy_gemm_on_two_threads():
    assert _observed_numpy(2) == 2


class SaysTwoRunsOne(NumpyBackend):
    """A deliberately wrong thread setup: the framework reports the count asked for and computes
    on one thread (as MXNet 1.9.1 did on 2 cores)."""

    def set_threads(self, n: int) -> None:
        super().set_threads(1)
        self._asked = n

    def threads(self) -> int:
        return self._asked


@pytest.mark.skipif(CORES < 2, reason="needs 2 cores")
def test_a_framework_left_at_one_thread_fails_in_one_line():
    bench = FakeBenchmark()
    with pytest.raises(ThreadMismatch) as caught:
        measure(bench, Bound(gemm_case(), SaysTwoRunsOne(), State(Settings(threads=(2,), peak_gflops=100.0))))
    message = str(caught.value)
    assert "\n" not in message and bench.calls == 0
    assert message.startswith("numpy eager: asked for 2 threads, observed 1 (thread states and CPU time from /proc")


def test_saved_results_carry_the_observed_count_and_how():
    bench = FakeBenchmark()
    measure(bench, Bound(gemm_case(), NumpyBackend(), State(Settings(threads=(1,), peak_gflops=100.0))))
    assert bench.extra_info["threads"] == 1
    assert bench.extra_info["threads_observed"].startswith("thread states and CPU time from /proc/self/task/*/stat")


@pytest.mark.skipif(CORES < 2 or not frameworks.installed("mxnet"), reason="needs 2 cores and MXNet")
def test_mxnet_computes_on_the_threads_it_is_given():
    """MXNet's engine fixes its OpenMP teams when it starts: opbench gives it the count before."""
    code = ("from opbench import frameworks as backends; from opbench.harness.config import Settings;"
            "from opbench.pytest_plugin import State;"
            "from opbench.suites.measure import observed_threads; s = State(Settings(threads=(2,)));"
            "b = backends.load('mxnet'); print(max(observed_threads(b, m, 2, s)[0] for m in b.modes))")
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "MXNET_OMP_MAX_THREADS")}
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=300,
                         env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split()[-1] == "2"


@pytest.mark.parametrize(("first", "again", "expected"), [
    ((0.32, 0.29, 0.11), (0.9, 0.85), 2),  # a helper thread passed the share on a loaded machine
    ((0.9, 0.1), (0.9, 0.85), 2),          # a starved worker fell under it
    ((0.98, 0.02), (0.98, 0.03), 1),       # one thread every time: a real mismatch stands
])
def test_a_team_seen_other_than_asked_is_looked_at_again(monkeypatch, first, again, expected):
    from opbench.harness import observed_threads as module

    seen = iter([Observation(first, 1.0, 5), Observation(again, 1.0, 5), Observation(again, 1.0, 5)])
    monkeypatch.setattr(module, "observe", lambda work, min_seconds=0.3, **kw: next(seen))
    state = State(Settings(threads=(2,), peak_gflops=100.0))
    result = None
    try:
        result = observed_threads(frameworks.load("numpy"), "eager", 2, state)
    except ThreadMismatch as exc:
        result = exc
    assert (result[0] if isinstance(result, tuple) else 1) == expected


def test_a_helper_thread_of_a_starved_team_is_not_in_it():
    # measured with two other test runs on the 2 cores: JAX's team at 0.36 and 0.31, its helper 0.12
    assert Observation((0.36, 0.31, 0.12, 0.02), 1.0, 100).count == 2
    assert Observation((0.80, 0.45), 1.0, 100).count == 2  # PyTorch's team on a throttled runtime


def proc_stat(*cpus: tuple[int, ...]) -> str:
    """A /proc/stat: the machine line (the sum) and one line per CPU of (user, nice, system, idle,
    iowait, irq, softirq, steal) ticks."""
    total = [sum(col) for col in zip(*cpus, strict=True)]
    lines = [f"cpu  {' '.join(map(str, total))} 0 0"]
    lines += [f"cpu{i} {' '.join(map(str, c))} 0 0" for i, c in enumerate(cpus)]
    return "\n".join([*lines, "intr 1 2 3", "ctxt 99"]) + "\n"


def test_machine_ticks_count_busy_and_steal_on_the_cpus_asked(tmp_path):
    stat = tmp_path / "stat"
    stat.write_text(proc_stat((10, 1, 2, 500, 7, 3, 4, 5), (100, 0, 20, 50, 0, 0, 0, 30)))
    assert machine_ticks(stat=stat) == (10 + 1 + 2 + 3 + 4 + 5 + 100 + 20 + 30, 35)  # idle, iowait left out
    assert machine_ticks(frozenset({1}), stat) == (150, 30)
    assert machine_ticks(frozenset({0}), tmp_path / "missing") == (0, 0)


@pytest.mark.parametrize(("others", "cpus", "team", "crowded"), [
    (0.2, 2, 2, False),   # a quarter CPU of other work beside a team that fills the machine is tolerated
    (0.3, 2, 2, True),    # ... more is not
    (1.2, 4, 2, False),   # other work on the spare CPUs leaves the team alone
    (2.3, 4, 2, True),
    (5.0, 0, 2, False),   # the CPUs are not known: never called crowded
])
def test_a_team_is_crowded_when_other_work_exceeds_the_spare_cpus(others, cpus, team, crowded):
    assert Observation((1.0, 1.0), 1.0, 10, others, cpus).crowded(team) is crowded


def _spin(seconds: float) -> subprocess.Popen:
    """Another process that keeps one of this process's CPUs busy for `seconds`."""
    code = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass"
    return subprocess.Popen([sys.executable, "-c", code])


def test_other_processes_on_the_same_cpus_are_seen():
    spinner = _spin(30)
    try:
        time.sleep(0.2)  # the spinner is running
        seen = observe(lambda: time.sleep(0.005), min_seconds=0.5)
    finally:
        spinner.kill()
        spinner.wait()
    # this process sleeps, so the spinner has a CPU to itself unless other work shares it, which
    # only adds to what is seen; ticks are 10 ms, the window 0.5 s
    assert seen.cpus == CORES and seen.others > 0.6
    assert f"other work on {seen.others:.2f} of {CORES} CPUs" in seen.describe()


def _looks(monkeypatch, *looks: Observation) -> None:
    from opbench.harness import observed_threads as module

    seen = iter(looks)
    monkeypatch.setattr(module, "observe", lambda work, min_seconds=0.3, **kw: next(seen))


def test_a_mismatch_seen_only_on_crowded_cpus_is_no_verdict_for_later_benchmarks(monkeypatch):
    """Beside an upgrade check's other worker, JAX's team of two looked like three threads; a
    verdict made then would fail every later benchmark of the framework in the process."""
    state = State(Settings(threads=(2,), peak_gflops=100.0))
    crowded = Observation((0.48, 0.25, 0.22), 1.0, 5, 1.0, 2)
    _looks(monkeypatch, crowded, crowded, crowded)
    with pytest.raises(ThreadMismatch, match="other work crowded the CPUs at every look, so the next benchmark"):
        observed_threads(NumpyBackend(), "eager", 2, state)
    assert not state.observed
    _looks(monkeypatch, Observation((0.98, 0.96, 0.01), 1.0, 5, 0.0, 2))
    count, how = observed_threads(NumpyBackend(), "eager", 2, state)
    assert count == 2 and "other work on 0.00 of 2 CPUs" in how
    assert state.observed


def test_a_mismatch_seen_once_on_quiet_cpus_stands(monkeypatch):
    state = State(Settings(threads=(2,), peak_gflops=100.0))
    one = Observation((0.98, 0.02), 1.0, 5, 0.0, 2)
    _looks(monkeypatch, Observation((0.5, 0.1), 1.0, 5, 1.0, 2), one, Observation((0.5, 0.1), 1.0, 5, 1.0, 2))
    for _ in range(2):  # the verdict is kept: the second benchmark does not look again
        with pytest.raises(ThreadMismatch, match=r"observed 1 \(") as caught:
            observed_threads(NumpyBackend(), "eager", 2, state)
        assert "crowded" not in str(caught.value)


def test_running_threads_are_those_in_state_r_but_the_one_left_out(tmp_path):
    for tid, state in ((1, "R"), (2, "S"), (3, "R"), (4, "D")):
        (tmp_path / str(tid)).mkdir()
        (tmp_path / str(tid) / "stat").write_text(stat_line(tid, "a) (b", 1, 1).replace(") S ", f") {state} ", 1))
    assert running_threads(tmp_path) == 2
    assert running_threads(tmp_path, leave_out=3) == 1
    (tmp_path / "5").mkdir()
    (tmp_path / "5" / "stat").write_text("")  # a thread that ended as it was read: its stat reads empty
    assert running_threads(tmp_path) == 2  # the sampler thread died on it ('substring not found')


def test_the_count_is_the_width_of_the_team_when_sampled_whoever_takes_its_turns():
    # JAX 0.10.2 jit, idle 2-core machine: a team of two on three pool threads
    rotating = Observation((0.98, 0.50, 0.49), 1.0, 16, 0.0, 2, (2,) * 170 + (1,) * 9 + (3,) * 2)
    assert rotating.count == 2
    assert rotating.describe().startswith("2 threads running at once in 94% of 181 samples (CPU/wall of the busiest")
    assert Observation((0.98, 0.50, 0.49), 1.0, 16).count == 3  # CPU time alone counts three
    few = Observation((0.98, 0.02), 1.0, 2, 0.0, 2, (2,) * (MIN_SAMPLES - 1))
    assert not few.sampled and few.count == 1  # too few samples: CPU time decides


@pytest.mark.skipif(CORES < 2, reason="needs 2 cores")
def test_a_team_starved_by_other_processes_is_still_seen_whole():
    spinners = [_spin(60) for _ in range(CORES)]
    try:
        time.sleep(0.2)
        counts = [_observed_numpy(2) for _ in range(2)]
    finally:
        for s in spinners:
            s.kill()
            s.wait()
    assert 2 in counts
