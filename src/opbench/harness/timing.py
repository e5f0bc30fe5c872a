"""The one timing loop outside pytest-benchmark, and its stopwatch: rounds of back-to-back
synchronised calls, each round's time per call (the paired gate's bursts, the breakdown's operator
prediction, the thread observer, NumPy's reference GEMM, the injection study's calibration), and
one call timed alone with its result (a case's first call, a training step, a distributed step)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def rounds(call: Callable[[], Any], loops: int = 1, min_rounds: int = 1, max_rounds: int | None = None,
           seconds: float = 0.0) -> list[float]:
    """Seconds per call of each round of `loops` calls: at least `min_rounds` rounds, then more
    while `seconds` have not passed since the first, never more than `max_rounds` (`min_rounds`
    when None). `call` returns once its result exists."""
    most = min_rounds if max_rounds is None else max(min_rounds, max_rounds)
    times: list[float] = []
    start = time.perf_counter()
    while len(times) < most and (len(times) < min_rounds or time.perf_counter() - start < seconds):
        t0 = time.perf_counter()
        for _ in range(loops):
            call()
        times.append((time.perf_counter() - t0) / loops)
    return times


def once(call: Callable[[], Any]) -> tuple[Any, float]:
    """Run `call` once and return (its result, seconds): the first call of a case (which traces or
    compiles compiled modes), or one step whose result is read back (`call` returns once it exists)."""
    start = time.perf_counter()
    result = call()
    return result, time.perf_counter() - start
