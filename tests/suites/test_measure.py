"""The measurement layer's guards fire: a wrong result is not timed, a wrong thread count is not
reported, and a timing faster than the machine can compute fails as implausible."""

from __future__ import annotations

import dataclasses
import os

import numpy as np
import pytest

from opbench import frameworks
from opbench.core.case import Case
from opbench.harness.config import Settings
from opbench.harness.roofline import check
from opbench.pytest_plugin import State
from opbench.suites import prepared as shared
from opbench.suites.binding import Bound
from opbench.suites.measure import (
    CALIBRATION,
    Implausible,
    NoisyMeasurement,
    ThreadMismatch,
    Timing,
    latency,
    measure,
    pin_threads,
    warn_if_noisy,
)
from opbench.suites.ops import prepare
from opbench.suites.registry import verified
from opbench.testing import inject
from opbench.workloads import ops

NumpyBackend = type(frameworks.load("numpy"))


class FakeBenchmark:
    """Stands in for pytest-benchmark's fixture; its statistics say each call took `seconds`."""

    def __init__(self, seconds: float | None = 1e-3):
        self.extra_info: dict = {}
        self.group = None
        self.disabled = False
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
    return Case.operator(ops.get("gemm"), "forward", "numpy", params=p)


def bound(backend, **settings) -> Bound:
    return Bound(gemm_case(), backend, State(Settings(threads=(2,), peak_gflops=100.0, **settings)))


def test_thread_mismatch_fails_before_timing():
    bench = FakeBenchmark()
    with pytest.raises(ThreadMismatch, match="99 threads, not the 2"):
        measure(bench, bound(StuckThreads()))
    assert bench.calls == 0


class ResizedOnBuild(NumpyBackend):
    """Its build of the case resizes the team after the threads were observed (on the calibration
    GEMM, CALIBRATION^3): 2 asked and observed, 1 timed."""

    def forward(self, impl, p, native, mode, device):
        if p["m"] != CALIBRATION:
            self.set_threads(1)
        return super().forward(impl, p, native, mode, device)


class ResizedWhileTimed(NumpyBackend):
    """The case's second call on resizes the team: its build and first call are right, the timed
    rounds not."""

    def forward(self, impl, p, native, mode, device):
        run, calls = super().forward(impl, p, native, mode, device), []

        def call():
            calls.append(1)
            if len(calls) > 1 and p["m"] != CALIBRATION:
                self.set_threads(1)
            return run()

        return call


@pytest.mark.parametrize(("backend", "when", "timed"), [
    (ResizedOnBuild, "after its build and first call", 0),
    (ResizedWhileTimed, "after its timed rounds", 1),
])
def test_threads_resized_after_they_were_observed_fail_the_case(backend, when, timed):
    """The threads are read again after the build and after timing: a case timed on another count
    than it records fails, before timing where it can be seen there."""
    from opbench.suites.measure import threads_of

    wanted = 2
    if len(os.sched_getaffinity(0)) < wanted or threads_of(gemm_case(), NumpyBackend(), State(Settings(
            threads=(wanted,))))[0] != wanted:
        pytest.skip("NumPy's BLAS cannot be seen computing on 2 threads here")
    bench = FakeBenchmark()
    with pytest.raises(ThreadMismatch, match=f"{when} the framework runs 1 threads, not the 2"):
        measure(bench, bound(backend()))
    assert bench.calls == timed


def test_pin_threads_returns_effective_count():
    assert pin_threads(NumpyBackend(), 1) == 1


def test_wrong_result_fails_and_is_not_timed():
    bench = FakeBenchmark()
    with pytest.raises(shared.CorrectnessError, match="differs from NumPy"):
        measure(bench, bound(WrongGemm()))
    assert bench.calls == 0


def test_nan_fails_the_check():
    assert ops.max_error(np.array([np.nan]), np.array([0.0])) == float("inf")


def test_roofline_guard_fires_on_impossible_speed():
    # 2 * 64^3 FLOPs in a nanosecond is 524,288 GFLOP/s: far above 100 x 3.
    bench = FakeBenchmark(seconds=1e-9)
    with pytest.raises(Implausible, match="did not wait"):
        measure(bench, bound(NumpyBackend()))


def test_the_guard_derives_its_ceiling_from_the_hardware_not_from_numpy(monkeypatch):
    """Without --peak-gflops the ceiling is the derived one, whatever NumPy's GEMM reaches: NumPy
    is measured for the report (numpy_gemm_gflops), never to fail a result."""
    from opbench.harness import session

    monkeypatch.setattr(session, "numpy_gemm_gflops", lambda threads: 1.0)  # a NumPy far slower than the call
    bench = FakeBenchmark(seconds=1e-5)  # 52 GFLOP/s: below any derived ceiling
    state = State(Settings(threads=(2,)))
    measure(bench, Bound(gemm_case(), NumpyBackend(), state))
    info = bench.extra_info
    assert info["gflops"] > info["numpy_gemm_gflops"] == 1.0
    assert info["peak_gflops"] == state.roofline.ceiling("cpu", "float32").gflops
    assert "FMA units" in info["peak_derivation"]


def test_plausible_run_records_extra_info():
    bench = FakeBenchmark(seconds=1e-3)
    measure(bench, bound(NumpyBackend()))
    info = bench.extra_info
    assert info["framework"] == "numpy" and info["threads"] == 2 and info["shape"] == "64x64x64"
    assert info["gflops"] == pytest.approx(2 * 64**3 / 1e-3 / 1e9)
    assert info["max_abs_err"] == verified(gemm_case(), NumpyBackend())[1] and info["first_call_s"] >= 0
    assert bench.group == "gemm-forward[cpu-float32-64x64x64]"
    load = info["load"]  # how busy the machine was around the timed rounds
    assert load["cpus"] >= 1 and load["team"] == 2 and load["other_cpus"] >= 0 and isinstance(load["busy"], bool)


def test_noisy_measurement_warns():
    with pytest.warns(NoisyMeasurement):
        warn_if_noisy("x", Timing(median_s=1.0, min_s=0.5, iqr_s=0.5))


@pytest.mark.skipif(not frameworks.installed("mxnet"), reason="mxnet is not installed")
def test_mxnet_gemm_without_sync_would_trip_the_guard():
    """MXNet returns before computing: timing its call without waitall measures only the
    enqueue. The guard catches that; the synchronised callable passes it."""
    import time

    backend = frameworks.load("mxnet")
    case = dataclasses.replace(gemm_case(1024), framework="mxnet")
    prepared = prepare.prepare(case, backend)
    ones = backend.from_numpy(np.ones((1024, 1024), np.float32), "cpu", "float32")
    run = backend.forward(backend.op("gemm"), case.p, [ones, ones], "eager", "cpu")
    run()
    backend.sync("cpu")
    start = time.perf_counter()
    for _ in range(20):
        run()  # no sync: only enqueues
    enqueue = (time.perf_counter() - start) / 20
    backend.sync("cpu")
    ceiling = State(Settings()).roofline.ceiling("cpu", "float32")  # this host's, derived
    with pytest.raises(Implausible, match="did not wait"):
        check(prepared.flops, enqueue, ceiling, 1.5)
    assert check(prepared.flops, _synchronised_seconds(prepared), ceiling, 1.5) > 0


def _synchronised_seconds(prepared) -> float:
    import time

    start = time.perf_counter()
    prepared.call()
    return time.perf_counter() - start


def test_a_study_aid_of_the_session_wraps_the_call_and_is_recorded(monkeypatch):
    monkeypatch.setenv(inject.ENV, "0.5")
    case = bound(NumpyBackend())
    case.state.wrappers.append(inject.wrap)
    bench = FakeBenchmark(seconds=1e-3)
    measure(bench, case)
    assert bench.extra_info["injected_slowdown"] == 0.5
    assert "injected_measured" in bench.extra_info


def test_the_measuring_path_injects_nothing_by_itself(monkeypatch):
    monkeypatch.setenv(inject.ENV, "0.5")  # without the study plugin the variable means nothing
    bench = FakeBenchmark(seconds=1e-3)
    measure(bench, bound(NumpyBackend()))
    assert not any(key.startswith("injected") for key in bench.extra_info)


def test_inference_records_latency_percentiles_of_the_timed_rounds():
    bench = FakeBenchmark()
    bench.stats = type("Metadata", (), {"iterations": 1, "stats": type("Stats", (), {"data": [
        0.001 * (i + 1) for i in range(100)]})})
    got = latency(bench)
    assert got["latency_p50_s"] == pytest.approx(0.0505)
    assert got["latency_p90_s"] == pytest.approx(0.0901)
    assert got["latency_p99_s"] == pytest.approx(0.09901)
    assert got["latency_calls_per_round"] == 1
    assert latency(FakeBenchmark(seconds=None)) == {}  # nothing timed (--benchmark-disable)


def test_what_measure_writes_is_what_the_results_read():
    """One schema (core.schema) for the identity keys: a result's extra_info, as measure writes it,
    reads back as the same subject, direction, device, dtype and size."""
    from opbench.core import schema
    from opbench.results.store import Bench
    from opbench.suites.distributed.cases import DistCase
    from opbench.suites.measure import identity

    dist = DistCase("torch", "cpu", "ddp", "sync", 2, "float32", "mlp", 128, "strong")
    for case in (gemm_case(), Case.model("lenet", "training", "torch", 8, precision="amp"), dist):
        extra = identity(case, frameworks.load("numpy"), 2, 1e-6)
        got = Bench("f", "n", case.group, 1.0, 0.0, 1.0, 1, extra).identity
        kind = "model" if case.is_model else "op"
        assert (got.subject, got.kind, got.direction, got.device, got.dtype, got.size) == (
            case.name, kind, case.direction, case.device, case.dtype, case.label)
    with pytest.raises(ValueError, match="identity"):
        schema.identity("op", "gemm", direction="forward")  # a key left out is an error, not a gap


@pytest.mark.parametrize("raised, outcome", [
    (shared.CorrectnessError("numpy eager mlp: the result is as close as float32 computes"),
     shared.CorrectnessError),
    (RuntimeError("no bfloat16 kernel registered"), pytest.skip.Exception),
])
def test_a_failed_check_in_mixed_precision_fails_and_only_an_unrunnable_case_skips(monkeypatch, raised, outcome):
    """An amp case whose check fails (a float32 step labelled amp) is a failure, as in float32; an
    error that says the framework cannot run the precision here stays a skip with its reason."""
    import opbench.suites.measure as measure_module

    prepare = measure_module.registry.prepare

    def failing(case, backend, settings=None):
        if case.kind != "model":  # the thread calibration's GEMM
            return prepare(case, backend, settings)
        raise raised

    monkeypatch.setattr(measure_module.registry, "prepare", failing)
    case = Case.model("mlp", "training", "numpy", 8, precision="amp")
    try:
        measure_module.setup(case, NumpyBackend(), State(Settings(threads=(2,))))
    except BaseException as exc:  # a skip is an outcome here, caught so that it cannot pass the test by skipping it
        assert isinstance(exc, outcome), f"{type(exc).__name__}: {exc}"
    else:
        pytest.fail("setup returned without its check")


@pytest.mark.parametrize(("seconds", "passes"), [(3.5e-7, False), (1.48e-3, True)])
def test_a_model_call_faster_than_its_least_work_allows_fails(seconds, passes):
    """A model's timed call meets the roofline with the products no correct call can skip
    (workloads/models/cost.py): an inference that returns its first result again (timed at 0.35 us
    in the audit of #54, against 1.48 ms for the correct model) fails; a real model's time passes."""
    from opbench.suites import measure as measure_module
    from opbench.workloads.models import catalogue
    from opbench.workloads.models.cost import least_flops

    case = Case.model("mlp", "inference", "numpy", 128)
    least = least_flops(catalogue.get("mlp"), 128, "inference")
    prepared = shared.Prepared(case, NumpyBackend(), lambda: None, lambda result: 0.0, None, 0.0, "-",
                                least_flops=least, ceiling_dtype="float32")
    state, bench = State(Settings(threads=(2,))), FakeBenchmark(seconds=seconds)
    if passes:
        measure_module.time_and_check(bench, case, prepared, state)
        assert bench.extra_info["gflops"] is None  # the floor judges; it is no figure to report
    else:
        with pytest.raises(Implausible, match="did not do it"):
            measure_module.time_and_check(bench, case, prepared, state)


class WrongOnceWarm(NumpyBackend):
    """Right on its first call, one off from the second on: a warm path (a cache, a recompiled
    variant) that the first call's check cannot see."""

    def forward(self, impl, p, native, mode, device):
        run, calls = super().forward(impl, p, native, mode, device), []

        def call():
            calls.append(1)
            out = run()
            return out if len(calls) == 1 or p["m"] == CALIBRATION else out + 1.0

        return call


def test_a_call_after_the_timed_rounds_is_checked_as_the_first_was():
    bench = FakeBenchmark()
    with pytest.raises(shared.CorrectnessError, match=r"after its timed rounds, .*differs from NumPy"):
        measure(bench, bound(WrongOnceWarm()))
    assert bench.calls == 1


def test_a_call_after_the_timed_rounds_of_a_step_that_moves_state_gets_its_own_check():
    """A training step moves the weights, so a later call is no repeat of the first: measure makes
    the case's own check of one more call from where the rounds left it (after_rounds), untimed,
    after the timed call and before anything else reads the case; its failure names the rounds."""
    case = Case.model("mlp", "training", "numpy", 128)
    order: list[str] = []

    def after_rounds():
        order.append("after rounds")
        raise shared.CorrectnessError("numpy eager mlp: the loss of the call after the timed rounds: 1 != NumPy 2")

    prepared = shared.Prepared(case, NumpyBackend(), lambda: order.append("timed"), lambda result: 0.0, None, 0.0,
                                "-", after_rounds=after_rounds, after_timing=lambda: order.append("after timing"))
    from opbench.suites import measure as measure_module

    with pytest.raises(shared.CorrectnessError, match=r"^after its timed rounds, numpy eager mlp: the loss of the"):
        measure_module.time_and_check(FakeBenchmark(), case, prepared, State(Settings(threads=(2,))))
    assert order == ["timed", "after rounds"]


def test_a_users_function_is_timed_and_checked_after_its_rounds_as_an_operator_is():
    """fw.measure (suites/functions.py) goes the operators' way: checked before timing, the
    rounds timed, the call after them checked as the first was; a function that goes wrong once
    warm fails there, naming the rounds."""
    from opbench.suites.functions import Runner

    calls = []

    def warm_goes_wrong():
        calls.append(1)
        return np.ones(4, np.float32) * (1 if len(calls) <= 2 else 2)

    runner = Runner(Case.function("ones", "numpy"), NumpyBackend(), State(Settings(threads=(2,))))
    bench = FakeBenchmark()
    with pytest.raises(shared.CorrectnessError, match=r"^after its timed rounds, numpy eager ones result differs"):
        runner.measure(bench, warm_goes_wrong, np.ones(4))
    assert bench.calls == 1 and len(calls) == 3 and bench.extra_info["max_abs_err"] == 0.0


class FakeAllocator:
    """A GPU allocator's statistics: each call holds `per_call` bytes on top of `held` while it runs,
    and an earlier case of the process left a peak of 1 GiB, which `resets` says can be let go."""

    def __init__(self, resets: bool, per_call: int = 4096, held: int = 2**20):
        self.resets, self.per_call, self.held = resets, per_call, held
        self.peak, self.events = 2**30, []

    def wrap(self, call):
        def run():
            self.events.append("call")
            self.peak = max(self.peak, self.held + self.per_call)
            return call()
        return run

    def reset_peak_memory(self) -> None:
        self.events.append("reset")
        if self.resets:
            self.peak = self.held

    def peak_memory(self) -> tuple[int, str]:
        self.events.append("read")
        return self.peak, "block" if self.resets else "process"


@pytest.mark.parametrize("resets", [True, False])
def test_a_device_peak_is_reset_before_the_timed_rounds_and_says_where_it_cannot_be(monkeypatch, resets):
    """torch.cuda.max_memory_allocated is the process's since it began until it is reset: an isolated
    GPU worker's ResNet-20 b1 inference reported the peak of the LSTM b8 case before it, to the byte
    (73,393,152; H200, 2026-11-29). Where the framework keeps no resettable peak (JAX's PJRT) and the
    rounds did not raise it, the saved peak says it is the process's, an upper bound on the case's."""
    from opbench.suites import measure as measuring

    allocator, original = FakeAllocator(resets), measuring.setup

    def with_allocator(*args, **kwargs):
        ready = original(*args, **kwargs)
        wrapped = dataclasses.replace(ready.prepared, call=allocator.wrap(ready.prepared.call), device_memory=allocator)
        return dataclasses.replace(ready, prepared=wrapped)

    monkeypatch.setattr(measuring, "setup", with_allocator)
    bench = FakeBenchmark()
    measure(bench, bound(NumpyBackend()))
    assert allocator.events[0] == "reset" and allocator.events[1] == "call" and allocator.events[-1] == "read"
    info = bench.extra_info
    assert info["peak_device_bytes"] == (2**20 + 4096 if resets else 2**30)
    assert info["peak_device_scope"] == ("block" if resets else "process")


@pytest.mark.parametrize("timed", [True, False])
def test_a_whole_models_memory_is_released_before_timed_rounds_only(monkeypatch, timed):
    """The full collection before a model's rounds serves its peak resident set, which only a timed run
    records: a run with timing disabled (make test's checks) skips it, 0.35 s a model with the four
    frameworks loaded."""
    from opbench.harness import allocator
    from opbench.suites import measure as measuring

    events, original = [], measuring.setup

    def whole(*args, **kwargs):
        ready = original(*args, **kwargs)
        call = ready.prepared.call
        return dataclasses.replace(ready, prepared=dataclasses.replace(
            ready.prepared, whole=True, call=lambda: events.append("call") or call()))

    monkeypatch.setattr(measuring, "setup", whole)
    monkeypatch.setattr(allocator, "release", lambda: events.append("release") or True)
    bench = FakeBenchmark(1e-3 if timed else None)
    bench.disabled = not timed
    measure(bench, bound(NumpyBackend()))
    # the timed round (one, faked) and the checked call after it; the check's first call came before the wrapping
    assert events == (["release", "call", "call"] if timed else ["call", "call"])
    assert ("peak_rss_bytes" in bench.extra_info) == timed


def test_a_case_without_a_device_peak_saves_none():
    bench = FakeBenchmark()
    measure(bench, bound(NumpyBackend()))
    assert "peak_device_bytes" not in bench.extra_info and "peak_device_scope" not in bench.extra_info
