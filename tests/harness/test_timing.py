"""The one burst timer: how many rounds it runs and what it returns."""

from __future__ import annotations

from opbench.harness import timing


def counter():
    calls = []
    return calls, lambda: calls.append(1)


def test_a_fixed_number_of_rounds_of_loops_calls():
    calls, call = counter()
    times = timing.rounds(call, loops=3, min_rounds=4)
    assert len(times) == 4 and len(calls) == 12 and all(t >= 0 for t in times)


def test_more_rounds_while_the_seconds_last_never_more_than_the_most():
    _, call = counter()
    assert len(timing.rounds(call, 1, min_rounds=2, max_rounds=50, seconds=60.0)) == 50
    assert len(timing.rounds(call, 1, min_rounds=2, max_rounds=50, seconds=0.0)) == 2
