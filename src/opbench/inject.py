"""Test-only slowdown injection for measuring the regression gates' sensitivity.

With OPBENCH_INJECT_SLOWDOWN set to a fraction f, every timed call does a fixed amount of extra
CPU work sized so that the call takes (1 + f) times as long, as the gates measure it: the fastest
per-call mean over rounds of at least 2 ms (the paired gate's timed round). The work is a counted
loop, not a spin until a deadline, so that it costs the same from call to call (a deadline spin
adds two clock reads and overshoots by one; on a 2 us operation that alone was a 15% slowdown).

Sizing, in the process that runs the benchmark:
1. the plain call's time: the fastest of up to 100 rounds of at least 2 ms (1 s at most) after a
   warm-up. On this shared machine a round's time can be 30% above the fastest even when it is
   quiet; the fastest of many is steady to ~2% from one process to the next. A single call's
   minimum is not what the gates measure (it misses the per-call costs a round pays);
2. the wrapper's own cost, on a call that does nothing, and one loop turn's cost (once a process);
3. the turns that make up the rest of f times the plain time; then plain and slowed rounds
   alternated 20 times, whose fastest ones give the slowdown measured.
When the wrapper alone costs more than f (a call of a microsecond or so), the slowdown is the
wrapper's. Results record the fraction asked for and the one measured."""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

ENV = "OPBENCH_INJECT_SLOWDOWN"
ROUND_S = 0.002  # a round of calls holds at least this much work, as in the paired gate
ROUNDS = 25  # rounds per estimate: ~50 ms each for short calls
ESTIMATE_S = 0.25  # ... or fewer for long calls, at least MIN_ROUNDS
MIN_ROUNDS = 5
LONG_ROUNDS, LONG_S = 100, 1.0  # the plain call's time, which sizes the extra work
CHECK_ROUNDS = 20  # plain and slowed rounds alternated to measure the slowdown injected
WARM_UP = 10  # calls before sizing starts


@dataclass
class Injection:
    """What was injected into one prepared case."""

    fraction: float  # asked for
    measured: float  # wrapped against plain at the end of sizing
    iterations: int  # counted-loop iterations per call


def slowed(call: Callable[[], Any], iterations: int) -> Callable[[], Any]:
    """The call, then `iterations` turns of an empty loop (a closure over a ready range: a
    class's __call__ costs three times as much, ~300 ns here, more than 7% of a 3 us call)."""
    turns = range(iterations)

    def call_then_work() -> Any:
        result = call()
        for _ in turns:
            pass
        return result

    return call_then_work


def per_call(call: Callable[[], Any], loops: int, rounds: int = ROUNDS, seconds: float = ESTIMATE_S) -> float:
    """The fastest round's time per call over `rounds` rounds of `loops` calls (fewer, down to
    MIN_ROUNDS, once `seconds` have passed)."""
    best, end = float("inf"), time.perf_counter() + seconds
    for done in range(rounds):
        if done >= MIN_ROUNDS and time.perf_counter() > end:
            break
        start = time.perf_counter()
        for _ in range(loops):
            call()
        best = min(best, (time.perf_counter() - start) / loops)
    return best


def loops_for(call: Callable[[], Any]) -> int:
    """Calls per round so that a round holds at least ROUND_S of work."""
    for _ in range(WARM_UP):
        call()
    single = per_call(call, 1, MIN_ROUNDS)
    return max(1, int(ROUND_S / max(single, 1e-9)) + 1)


def size(call: Callable[[], Any], fraction: float) -> Injection:
    loops = loops_for(call)
    plain = per_call(call, loops, LONG_ROUNDS, LONG_S)
    extra = fraction * plain - _wrapper_s()
    iterations = max(0, round(extra / _iteration_s()))
    wrapped = slowed(call, iterations)
    plain_min, wrapped_min = float("inf"), float("inf")
    for _ in range(CHECK_ROUNDS):  # interleaved, so that a slow spell hits both
        plain_min = min(plain_min, per_call(call, loops, 1))
        wrapped_min = min(wrapped_min, per_call(wrapped, loops, 1))
    return Injection(fraction, wrapped_min / plain_min - 1, iterations)


def _noop() -> None:
    return None


@functools.cache
def _wrapper_s() -> float:
    """What wrapping costs a call with no extra work, measured on a call that does nothing (on
    the operation itself the difference would drown in its own noise)."""
    loops = loops_for(_noop)
    return max(0.0, per_call(slowed(_noop, 0), loops) - per_call(_noop, loops))


@functools.cache
def _iteration_s() -> float:
    """One turn of the empty loop, from the fastest of several 1e5-turn loops."""
    best = float("inf")
    for _ in range(7):
        start = time.perf_counter()
        for _ in range(100_000):
            pass
        best = min(best, (time.perf_counter() - start) / 100_000)
    return best


def inject_slowdown(prepared) -> Injection | None:
    """Wrap prepared.call when OPBENCH_INJECT_SLOWDOWN asks for a slowdown; None otherwise."""
    fraction = float(os.environ.get(ENV, "0") or 0)
    if fraction <= 0:
        return None
    injection = size(prepared.call, fraction)
    prepared.call = slowed(prepared.call, injection.iterations)
    return injection


def recorded(injection: Injection | None) -> dict:
    """The extra_info entries of an injected slowdown (none without one)."""
    if injection is None:
        return {}
    return {"injected_slowdown": injection.fraction, "injected_measured": round(injection.measured, 4)}
