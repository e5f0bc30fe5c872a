"""The test-only slowdown injection: extra work sized from the call's own time."""

from __future__ import annotations

from types import SimpleNamespace

from opbench import inject


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


def test_the_extra_work_is_the_fraction_of_the_calls_own_loop():
    # the call is 20000 turns of the very loop the injection adds: 10% is about 2000 turns
    # (a ratio measured in one process; wide bounds for a busy machine)
    injection = inject.size(work(), 0.10)
    assert 1_000 <= injection.iterations <= 3_000
    assert injection.fraction == 0.10


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
    assert injection.iterations > 0
    extra = inject.recorded(injection)
    assert extra["injected_slowdown"] == 0.5 and isinstance(extra["injected_measured"], float)
