"""A study aid: a known slowdown injected into timed calls, to measure the regression gates'
sensitivity (studies/gate_quality.py, studies/paired_quality.py).

It is a pytest plugin that only the studies load (`-p opbench.testing.inject`); the suite's
measuring path never imports it. With the plugin loaded and OPBENCH_INJECT_SLOWDOWN set to a
fraction f, every timed call is made about (1 + f) times as long, in one of two ways, chosen per
benchmark and recorded in its results:
- "scaled" (calls of about 10 us and more): after each call, a spin until f times that call's own
  duration has passed (less the wrapper's own cost). The slowdown follows the operation through
  its slow spells and cold caches, as a real regression that adds work of the operation's own
  kind does. A fixed amount of extra work does not: it was sized in a hot loop, so between the
  paired gate's alternating rounds (where the other side evicts the caches) it was a smaller share
  of the call than asked for, and it slowed down in other spells than the
  memory-bound operations did (the injected side's trials spread 3x the A/A's);
- "loop" (shorter calls, where three clock reads are already most of f): a counted empty loop
  after each call, sized from the plain call's time as the gates measure it (the fastest per-call
  mean over up to 100 rounds of at least 2 ms), less the wrapper's cost on a call that does
  nothing. When the wrapper alone costs more than f (a call of a microsecond or so), the
  slowdown is the wrapper's.
Either way, plain and slowed rounds are then alternated 20 times, and their fastest ones give the
slowdown measured. Results record the fraction asked for, the model and the slowdown measured."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from opbench.harness import timing

ENV = "OPBENCH_INJECT_SLOWDOWN"
PLUGIN = __name__  # load it with `pytest -p opbench.testing.inject`
ROUND_S = 0.002  # a round of calls holds at least this much work, as in the paired gate
ROUNDS = 25  # rounds per estimate: ~50 ms each for short calls
ESTIMATE_S = 0.25  # ... or fewer for long calls, at least MIN_ROUNDS
MIN_ROUNDS = 5
LONG_ROUNDS, LONG_S = 100, 1.0  # the plain call's time, which sizes the extra work
CHECK_ROUNDS = 20  # plain and slowed rounds alternated to measure the slowdown injected
WARM_UP = 10  # calls before sizing starts
SCALED_MIN = 3  # the scaled model once f times the call is this many times the wrapper's cost


@dataclass
class Injection:
    """What was injected into one prepared case."""

    fraction: float  # asked for
    measured: float  # wrapped against plain at the end of sizing
    model: str  # "scaled" or "loop"
    call: Callable[[], Any]  # the slowed call


def slowed(call: Callable[[], Any], iterations: int) -> Callable[[], Any]:
    """The call, then `iterations` turns of an empty loop (a closure over a ready range: a
    class's __call__ costs about three times as much, several percent of a 3 us call)."""
    turns = range(iterations)

    def call_then_work() -> Any:
        result = call()
        for _ in turns:
            pass
        return result

    return call_then_work


def scaled(call: Callable[[], Any], fraction: float, overhead: float,
           clock: Callable[[], float] = time.perf_counter) -> Callable[[], Any]:
    """The call, then a spin until `fraction` times its own duration, less `overhead`, has
    passed: each call is slowed in proportion to what it took this time."""

    def call_then_wait() -> Any:
        start = clock()
        result = call()
        end = clock()
        deadline = end + fraction * (end - start) - overhead
        while clock() < deadline:
            pass
        return result

    return call_then_wait


def per_call(call: Callable[[], Any], loops: int, rounds: int = ROUNDS, seconds: float = ESTIMATE_S) -> float:
    """The fastest round's time per call over `rounds` rounds of `loops` calls (fewer, down to
    MIN_ROUNDS, once `seconds` have passed)."""
    return min(timing.rounds(call, loops, min(MIN_ROUNDS, rounds), rounds, seconds))


def loops_for(call: Callable[[], Any]) -> int:
    """Calls per round so that a round holds at least ROUND_S of work."""
    for _ in range(WARM_UP):
        call()
    single = per_call(call, 1, MIN_ROUNDS)
    return max(1, int(ROUND_S / max(single, 1e-9)) + 1)


def size(call: Callable[[], Any], fraction: float) -> Injection:
    """The slowed call. The long estimate of the plain call's time (up to a second) is taken only
    for the loop model, which is sized from it: the scaled spin needs the call's time only to be
    chosen, and the paired gate's candidate pays for sizing in every benchmark's turn (most of a
    short benchmark's turn when every case took the long estimate)."""
    loops = loops_for(call)
    if fraction * per_call(call, loops) >= SCALED_MIN * _scaled_overhead_s():
        model, wrapped = "scaled", scaled(call, fraction, _scaled_overhead_s())
    else:
        plain = per_call(call, loops, LONG_ROUNDS, LONG_S)
        iterations = max(0, round((fraction * plain - _wrapper_s()) / _iteration_s()))
        model, wrapped = "loop", slowed(call, iterations)
    plain_min, wrapped_min = float("inf"), float("inf")
    for _ in range(CHECK_ROUNDS):  # interleaved, so that a slow spell hits both
        plain_min = min(plain_min, per_call(call, loops, 1))
        wrapped_min = min(wrapped_min, per_call(wrapped, loops, 1))
    return Injection(fraction, wrapped_min / plain_min - 1, model, wrapped)


def _noop() -> None:
    return None


def _added_s(wrapped: Callable[[], Any]) -> float:
    """What a wrapper costs a call that does nothing (on the operation itself the difference
    would drown in its own noise)."""
    loops = loops_for(_noop)
    return max(0.0, per_call(wrapped, loops) - per_call(_noop, loops))


@functools.cache
def _wrapper_s() -> float:
    return _added_s(slowed(_noop, 0))


@functools.cache
def _scaled_overhead_s() -> float:
    """Three clock reads and a call, measured on a call that does nothing."""
    return _added_s(scaled(_noop, 0.0, 0.0))


@functools.cache
def _iteration_s() -> float:
    """One turn of the empty loop `slowed` spins: the fastest of several calls that spin 1e5 turns,
    less what the wrapper costs a call that does nothing."""
    turns = 100_000
    return max(per_call(slowed(_noop, turns), 1) - _wrapper_s(), 1e-9) / turns


def fraction() -> float:
    """The slowdown OPBENCH_INJECT_SLOWDOWN asks for (0: none)."""
    return float(os.environ.get(ENV, "0") or 0)


def inject_slowdown(prepared) -> Injection | None:
    """Wrap prepared.call when OPBENCH_INJECT_SLOWDOWN asks for a slowdown; None otherwise."""
    asked = fraction()
    if asked <= 0:
        return None
    injection = size(prepared.call, asked)
    prepared.call = injection.call
    return injection


def recorded(injection: Injection | None) -> dict:
    """The extra_info entries of an injected slowdown (none without one)."""
    if injection is None:
        return {}
    return {"injected_slowdown": injection.fraction, "injected_model": injection.model,
            "injected_measured": round(injection.measured, 4)}


def wrap(prepared) -> dict:
    """The session's call wrapper (opbench.harness.session.CallWrapper): inject, and say what was injected."""
    return recorded(inject_slowdown(prepared))


@pytest.hookimpl(trylast=True)  # after opbench's own pytest_configure made the session
def pytest_configure(config: pytest.Config) -> None:
    from opbench.pytest_plugin import STATE

    session = config.stash.get(STATE, None)
    if session is not None and fraction() > 0:
        session.wrappers.append(wrap)
