"""The test-only slowdown injection: extra work sized from the call's own time."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest

from opbench.testing import inject

BENCH = """
import pytest
from opbench.suites.measure import measure

@pytest.mark.opbench(op="relu")
def test_relu(op_case, benchmark):
    measure(benchmark, op_case)
"""


def work(turns: int = 20_000):
    def call():
        for _ in range(turns):
            pass
        return "result"

    return call


def test_slowed_returns_the_calls_result_and_calls_it_once():
    calls = []
    wrapped = inject.slowed(lambda: calls.append(1) or 42, 1000)
    assert wrapped() == 42
    assert calls == [1]


def long_estimates(monkeypatch) -> list[int]:
    """Records the rounds of every per_call estimate that asks for LONG_ROUNDS."""
    seen, per_call = [], inject.per_call

    def counted(call, loops, rounds=inject.ROUNDS, seconds=inject.ESTIMATE_S):
        if rounds == inject.LONG_ROUNDS:
            seen.append(rounds)
        return per_call(call, loops, rounds, seconds)

    monkeypatch.setattr(inject, "per_call", counted)
    return seen


def test_a_call_of_a_millisecond_gets_the_scaled_spin(monkeypatch):
    # The spin's proportion is checked on a fake clock below; the slowdown measured at sizing is
    # recorded, never asserted: on this shared machine 50% asked came out as 8% in one run.
    long = long_estimates(monkeypatch)
    injection = inject.size(work(), 0.5)
    assert injection.model == "scaled" and injection.fraction == 0.5
    assert long == []  # the spin is not sized from the call's time: no long estimate
    assert injection.call() == "result"
    assert math.isfinite(injection.measured)


class Clock:
    """A clock that a call moves on by its duration and each read by a microsecond."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1e-6
        return self.now


def test_the_scaled_spin_follows_each_calls_duration():
    clock, durations = Clock(), []

    def call():
        clock.now += durations[-1]
        return "result"

    wrapped = inject.scaled(call, 0.07, 2e-6, clock)
    for duration in (0.001, 0.004, 0.0005):
        durations.append(duration)
        start = clock.now
        assert wrapped() == "result"
        # the call and its first read, 7% of that, less the 2 us overhead; one read of overshoot
        spun = clock.now - start
        assert 1.07 * (duration + 1e-6) - 2e-6 <= spun <= 1.07 * (duration + 1e-6) + 1e-6


def test_a_call_of_a_microsecond_gets_the_counted_loop(monkeypatch):
    # 10% of ~0.5 us is less than the scaled wrapper's three clock reads
    long = long_estimates(monkeypatch)
    injection = inject.size(work(20), 0.10)
    assert injection.model == "loop" and long == [inject.LONG_ROUNDS]  # sized from the long estimate
    assert injection.call() == "result"


def test_no_slowdown_without_the_variable(monkeypatch):
    monkeypatch.delenv(inject.ENV, raising=False)
    prepared = SimpleNamespace(call=work(10))
    assert inject.inject_slowdown(prepared) is None
    assert inject.recorded(None) == {}


def test_the_slowdown_wraps_the_call_and_is_recorded(monkeypatch):
    monkeypatch.setenv(inject.ENV, "0.5")
    plain = work(2_000)
    prepared = SimpleNamespace(call=plain)
    injection = inject.inject_slowdown(prepared)
    assert prepared.call is not plain and prepared.call() == "result"
    extra = inject.recorded(injection)
    assert extra["injected_slowdown"] == 0.5 and extra["injected_model"] in ("scaled", "loop")
    assert isinstance(extra["injected_measured"], float)


@pytest.mark.parametrize("loaded", [True, False])
def test_only_the_study_plugin_injects(pytester: pytest.Pytester, monkeypatch, loaded):
    monkeypatch.setenv(inject.ENV, "0.2")
    pytester.makepyfile(test_bench=BENCH)
    out = pytester.path / "run.json"
    plugin = ["-p", inject.PLUGIN] if loaded else []
    result = pytester.runpytest_subprocess(*plugin, "--framework", "numpy", "--benchmark-max-time=0.01",
                                           f"--benchmark-json={out}", "-p", "no:cacheprovider")
    assert result.ret == 0
    (bench,) = json.loads(out.read_text())["benchmarks"]
    assert ("injected_slowdown" in bench["extra_info"]) is loaded
