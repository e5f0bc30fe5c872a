"""The measurement layer's guards fire: a wrong result is not timed, a wrong thread count is not
reported, and a timing faster than the machine can compute fails as implausible."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from opbench import backends, execute, ops
from opbench.cases import Case
from opbench.config import Settings
from opbench.measure import (
    Implausible,
    NoisyMeasurement,
    ThreadMismatch,
    Timing,
    check_roofline,
    measure,
    pin_threads,
    warn_if_noisy,
)
from opbench.plugin import Bound, State

NumpyBackend = type(backends.load("numpy"))


class FakeBenchmark:
    """Stands in for pytest-benchmark's fixture; its statistics say each call took `seconds`."""

    def __init__(self, seconds: float | None = 1e-3):
        self.extra_info: dict = {}
        self.group = None
        self.calls = 0
        self._seconds = seconds
        self.stats = None

    def __call__(self, fn):
        self.calls += 1
        fn()
        if self._seconds is not None:
            data = [self._seconds] * 5
            stats = type("Stats", (), {"data": data, "median": self._seconds, "min": self._seconds, "iqr": 0.0})
            self.stats = type("Metadata", (), {"stats": stats})


class StuckThreads(NumpyBackend):
    def threads(self) -> int:
        return 99


class WrongGemm(NumpyBackend):
    def op(self, name):
        right = super().op(name)
        return lambda p, *args: right(p, *args) + 1.0


def gemm_case(size: int = 64) -> Case:
    p = {"m": size, "k": size, "n": size}
    return Case("op", "gemm", "linalg", "forward", "numpy", "cpu", "eager", "float32", ops.get("gemm").label(p),
                tuple(sorted(p.items())))


def bound(backend, **settings) -> Bound:
    return Bound(gemm_case(), backend, State(Settings(threads=(2,), peak_gflops=100.0, **settings)))


def test_thread_mismatch_fails_before_timing():
    bench = FakeBenchmark()
    with pytest.raises(ThreadMismatch, match="99 threads, not the 2"):
        measure(bench, bound(StuckThreads()))
    assert bench.calls == 0


def test_pin_threads_returns_effective_count():
    assert pin_threads(NumpyBackend(), 1) == 1


def test_wrong_result_fails_and_is_not_timed():
    bench = FakeBenchmark()
    with pytest.raises(execute.CorrectnessError, match="differs from NumPy"):
        measure(bench, bound(WrongGemm()))
    assert bench.calls == 0


def test_nan_fails_the_check():
    assert ops.max_error(np.array([np.nan]), np.array([0.0])) == float("inf")


def test_roofline_guard_fires_on_impossible_speed():
    # 2 * 64^3 FLOPs in a nanosecond is 524,288 GFLOP/s: far above 100 x 3.
    bench = FakeBenchmark(seconds=1e-9)
    with pytest.raises(Implausible, match="did not wait"):
        measure(bench, bound(NumpyBackend()))


def test_a_peak_measured_under_load_is_measured_again_before_a_call_is_called_implausible(monkeypatch):
    """A peak measured while other tenants were busy (here 10 GFLOP/s) does not fail a call that
    beats it: the peak is measured again (here 100) and the higher one kept; a call still faster
    than the fresh peak allows is implausible."""
    from opbench import measure as m

    peaks = iter([10.0, 100.0, 50.0])
    monkeypatch.setattr(m, "measure_numpy_peak", lambda threads: next(peaks))
    state = State(Settings())
    assert state.peak("cpu", "float32") == 10.0
    assert state.check_roofline(200e9, 1.0, "cpu", "float32") == pytest.approx(200.0)
    assert state.peak("cpu", "float32") == 100.0
    with pytest.raises(Implausible):
        state.check_roofline(1000e9, 1.0, "cpu", "float32")
    assert state.peak("cpu", "float32") == 100.0  # the lower re-measurement does not replace it


def test_a_given_peak_is_never_measured_again(monkeypatch):
    from opbench import measure as m

    monkeypatch.setattr(m, "measure_numpy_peak", lambda threads: pytest.fail("measured"))
    with pytest.raises(Implausible):
        State(Settings(peak_gflops=10.0)).check_roofline(200e9, 1.0, "cpu", "float32")


def test_plausible_run_records_extra_info():
    bench = FakeBenchmark(seconds=1e-3)
    measure(bench, bound(NumpyBackend()))
    info = bench.extra_info
    assert info["framework"] == "numpy" and info["threads"] == 2 and info["shape"] == "64x64x64"
    assert info["gflops"] == pytest.approx(2 * 64**3 / 1e-3 / 1e9)
    assert info["max_abs_err"] < 1e-3 and info["first_call_s"] >= 0
    assert bench.group == "gemm-forward[cpu-float32-64x64x64]"


def test_check_roofline_edges():
    assert check_roofline(None, 1.0, 10.0, 3.0) is None
    assert check_roofline(2e9, 1.0, 1.0, 3.0) == pytest.approx(2.0)
    with pytest.raises(Implausible):
        check_roofline(4e9, 1.0, 1.0, 3.0)
    assert check_roofline(4e12, 1.0, None, 3.0) == pytest.approx(4000.0)  # no peak: no guard


def test_noisy_measurement_warns():
    with pytest.warns(NoisyMeasurement):
        warn_if_noisy("x", Timing(median_s=1.0, min_s=0.5, iqr_s=0.5))


@pytest.mark.skipif(not backends.installed("mxnet"), reason="mxnet is not installed")
def test_mxnet_gemm_without_sync_would_trip_the_guard():
    """MXNet returns before computing: timing its call without waitall measures only the
    enqueue. The guard catches that; the synchronised callable passes it."""
    import time

    backend = backends.load("mxnet")
    case = dataclasses.replace(gemm_case(1024), framework="mxnet")
    prepared = execute.prepare(case, backend)
    ones = backend.from_numpy(np.ones((1024, 1024), np.float32), "cpu", "float32")
    run = backend.forward(backend.op("gemm"), case.p, [ones, ones], "eager", "cpu")
    run()
    backend.sync("cpu")
    start = time.perf_counter()
    for _ in range(20):
        run()  # no sync: only enqueues
    enqueue = (time.perf_counter() - start) / 20
    backend.sync("cpu")
    with pytest.raises(Implausible):
        check_roofline(prepared.flops, enqueue, 300.0, 3.0)


def test_injected_slowdown_is_recorded(monkeypatch):
    monkeypatch.setenv("OPBENCH_INJECT_SLOWDOWN", "0.5")
    bench = FakeBenchmark(seconds=1e-3)
    measure(bench, bound(NumpyBackend()))
    assert bench.extra_info["injected_slowdown"] == 0.5
    assert "injected_measured" in bench.extra_info
