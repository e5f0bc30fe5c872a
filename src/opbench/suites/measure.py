"""Measurement: the correctness check, thread pinning, first-call latency, synchronised timing
through pytest-benchmark, and the plausibility checks on what was timed.

Nothing is timed before its result matched the NumPy reference, and nothing is reported for a
thread count other than the one asked for.
"""

from __future__ import annotations

import contextlib
import statistics
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from opbench.core import schema
from opbench.core.case import Case
from opbench.core.errors import one_line
from opbench.frameworks.base import Backend, Unavailable
from opbench.harness import timing
from opbench.harness.known_issues import KnownIssue, known_issue
from opbench.harness.memory import PeakOf
from opbench.harness.roofline import Implausible
from opbench.harness.session import Session
from opbench.suites import registry
from opbench.suites.prepared import CorrectnessError, KnownDeviation, require
from opbench.workloads import ops

__all__ = ["Implausible", "NoisyMeasurement", "ThreadMismatch", "describe", "identity", "measure",
           "observed_threads", "pin_threads", "setup", "threads_of"]

NOISY_IQR = 0.10  # IQR / median above this draws a warning
LATENCY_PERCENTILES = (50, 90, 99)  # as serving benchmarks report them (MLPerf SingleStream: p90)


class ThreadMismatch(AssertionError):
    """The framework would run with another thread count than requested."""


class NoisyMeasurement(UserWarning):
    """The rounds of a benchmark spread widely; its median is less trustworthy."""


def pin_threads(backend: Backend, wanted: int) -> int:
    """Set the framework's intra-op threads to `wanted` and check that it says it took."""
    backend.set_threads(wanted)
    got = backend.threads()
    if got != wanted:
        raise ThreadMismatch(
            f"{backend.name} would run with {got} threads, not the {wanted} requested "
            "(TensorFlow, MXNet and JAX fix their threads when they start: run one process per count)"
        )
    return got


CALIBRATION = 2048  # the GEMM size every framework parallelises over every core it is given (see observed_threads)
OBSERVE_TRIES = 3  # a team seen other than asked is looked at again (another process's load), longer


def calibration_case(framework: str, mode: str) -> Case:
    """The untimed workload the threads are observed on: a float32 CALIBRATION^3 GEMM on the CPU."""
    n = CALIBRATION
    return Case.operator(ops.get("gemm"), "forward", framework, mode=mode, params={"k": n, "m": n, "n": n})


def observed_threads(backend: Backend, mode: str, wanted: int, state: Session) -> tuple[int, str]:
    """Pin the framework's threads to `wanted`, then count the threads that really compute: run
    the calibration GEMM in `mode` (verified against NumPy) while sampling per-thread CPU time
    (opbench.harness.observed_threads), once per framework, mode and count in a process. Returns (count,
    how it was observed); raises ThreadMismatch, one line, when the framework says one count and
    computes on another. Where the kernel keeps no per-thread account the framework's word is
    all there is, and the second item says so."""
    from opbench.harness.observed_threads import METHOD, TASKS, observe
    said = pin_threads(backend, wanted)
    key = (backend.name, mode, wanted)
    if key not in state.observed:
        if not TASKS.is_dir():
            state.observed[key] = (said, f"not observed ({TASKS} does not exist): the framework's own count")
        else:
            prepared, _ = registry.verified(calibration_case(backend.name, mode), backend)
            tries = [observe(prepared.call)]
            for i in range(1, OBSERVE_TRIES):  # a team seen other than asked is looked at again, longer:
                if tries[-1].count == wanted:   # on a loaded machine a helper thread can pass the share
                    break                       # threshold, or a starved worker fall under it
                tries.append(observe(prepared.call, min_seconds=0.3 * 2**i))
            seen = next((o for o in tries if o.count == wanted), tries[-1])
            how = f"{METHOD}, {CALIBRATION}^3 float32 GEMMs in {mode} mode: {seen.describe()}"
            if seen.count == wanted:
                state.observed[key] = (seen.count, how)
            else:
                mismatch = f"{backend.name} {mode}: asked for {wanted} threads, observed {seen.count} ({how})"
                if all(o.crowded(wanted) for o in tries):  # no verdict: kept for no later benchmark
                    raise ThreadMismatch(f"{mismatch}; other work crowded the CPUs at every look, so the next "
                                         "benchmark looks again")
                state.observed[key] = ThreadMismatch(mismatch)
    result = state.observed[key]
    if isinstance(result, ThreadMismatch):
        raise result
    return result


def threads_held(case, backend: Backend, threads: int, when: str) -> None:
    """The framework still says the threads it was pinned to and observed computing on: read again
    after the build and first call and after the timed rounds, where a model's build or a step that
    resizes the framework's team would otherwise be timed on one count and recorded on another.
    This reads the framework's own count (the observation's GEMMs take seconds, once per process);
    MXNet's operators keep the team MXNet started with, so its count cannot change."""
    got = backend.threads()
    if got != threads:
        raise ThreadMismatch(f"{case.framework} {case.mode} {case.name}: {when} the framework runs {got} threads, not "
                             f"the {threads} it was pinned to and observed on: what is timed would not be what is "
                             "recorded")


@dataclass
class Timing:
    """What came out of a timed run, for extra_info."""

    median_s: float
    min_s: float
    iqr_s: float


def timing_of(benchmark) -> Timing | None:
    """The statistics pytest-benchmark gathered, or None when timing was disabled."""
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    if stats is None or not getattr(stats, "data", None):
        return None
    return Timing(stats.median, stats.min, stats.iqr)


def latency(benchmark) -> dict[str, float | int]:
    """Percentiles of the time per call over the timed rounds (`latency_p50_s`, ...), with the
    calls a round held (`latency_calls_per_round`): where that is 1, as for every model's
    inference at the suite's sizes, each round is one call and these are the latencies a server
    would see; otherwise they are percentiles of round means. Empty with fewer than two rounds."""
    meta = getattr(benchmark, "stats", None)
    data = list(getattr(getattr(meta, "stats", None), "data", None) or ())
    if len(data) < 2:
        return {}
    cuts = statistics.quantiles(data, n=100, method="inclusive")
    return {**{f"latency_p{q}_s": cuts[q - 1] for q in LATENCY_PERCENTILES},
            "latency_calls_per_round": int(getattr(meta, "iterations", 1))}


def warn_if_noisy(name: str, timed: Timing) -> None:
    if timed.median_s > 0 and timed.iqr_s / timed.median_s > NOISY_IQR:
        warnings.warn(
            f"{name}: IQR is {timed.iqr_s / timed.median_s:.0%} of the median; the machine is busy "
            "or the operation too short for stable numbers",
            NoisyMeasurement,
            stacklevel=2,
        )


@dataclass
class Ready:
    """A case past its check: threads pinned, first call made (compiles), result verified."""

    prepared: Any
    threads: int  # observed (threads_of)
    threads_observed: str  # how
    first_call_s: float
    max_abs_err: float
    aids: dict[str, Any]  # extra_info of the study aids that wrapped the call (none in a normal run)
    openmp_shared: str | None = None  # another framework's team on the same OpenMP runtime (opbench.harness.openmp)
    known: str | None = None  # the known issue its result showed, where the caller times it anyway (the paired gate)


@dataclass(frozen=True)
class Admission:
    """Whether a case runs here: its backend, or why it cannot (`unavailable`); and the known
    framework bug it meets, if any (a strict xfail where pytest runs it)."""

    backend: Backend | None
    unavailable: str | None = None
    issue: KnownIssue | None = None


def admit(case) -> Admission:
    """The first step of every way a case is run (the plugin, the paired gate's worker, the
    property tests): its framework, mode, precision and device available here, then its known issue."""
    try:
        backend = require(case)
    except Unavailable as exc:
        return Admission(None, str(exc))
    return Admission(backend, None, known_issue(case, backend.version()))


def setup(case, backend, state: Session, known_ok: bool = False) -> Ready:
    """Everything before timing, shared by the pytest plugin and the paired gate's workers: pin
    threads, build, run once (first-call latency), verify against NumPy, then let the session's
    study aids (only ever registered by opbench.testing) wrap the verified call. Raises
    CorrectnessError on a wrong result, in every precision; pytest outcomes for data errors and for
    16-bit cases a framework cannot run (an error that is not a check's). A result off only as a known
    issue says raises KnownDeviation, or, with `known_ok` (the paired gate, which times the same call
    on both sides and reports the issue), is ready with what it showed."""
    import pytest

    from opbench.harness import openmp
    from opbench.workloads.models.datasets import DataError

    threads, observation = threads_of(case, backend, state)
    shared = openmp.shared_with(state.openmp_teams, case.framework, case.device, threads)
    try:
        prepared = registry.prepare(case, backend, state.settings)
        result, first_s = timing.once(prepared.call)
    except DataError as exc:
        pytest.fail(f"--data-dir: {exc}", pytrace=False)
    except AssertionError:
        raise  # a check that failed (CorrectnessError, Implausible, ...) fails in every precision, never skips
    except Exception as exc:
        if case.dtype == "float32":
            raise
        pytest.skip(f"{case.framework} cannot run {case.name} in {case.dtype} on the {case.device}: "
                    f"{one_line(exc, limit=200)}")
    known = None
    try:
        max_err = prepared.verify(result)
    except KnownDeviation as exc:
        if not known_ok:
            raise
        max_err, known = exc.max_abs_err, str(exc)
    threads_held(case, backend, threads, "after its build and first call")
    aids: dict[str, Any] = {}
    for wrap in state.wrappers:
        aids.update(wrap(prepared))
    return Ready(prepared, threads, observation, first_s, max_err, aids, shared, known)


def threads_of(case, backend: Backend, state: Session) -> tuple[int, str]:
    """The threads `case` computes on and how that is known: observed on the CPU, where a
    framework may say one count and use another; the framework's count on a GPU, where the
    device does the work."""
    if case.device == "cpu":
        return observed_threads(backend, case.mode, state.threads, state)
    return pin_threads(backend, state.threads), "the framework's own count (the work runs on the GPU)"


def identity(case, backend, threads: int, max_abs_err: float) -> dict[str, Any]:
    """The extra_info keys every saved result carries, whoever measured it (the plugin, the paired
    gate's workers, the distributed benchmarks): what ran, in which framework and version, where,
    how, and how far its result was from NumPy's."""
    return schema.identity("model" if case.is_model else "op", case.name, direction=case.direction,
                           family=case.family, framework=case.framework, framework_version=backend.version(),
                           device=case.device, mode=case.mode, dtype=case.dtype, shape=case.label, threads=threads,
                           max_abs_err=max_abs_err)


def describe(case, backend, ready: Ready, session: Session) -> dict[str, Any]:
    """The extra_info every saved result of `case` carries before it is timed: what ran, where,
    its cost, its verification and the device's ceiling (with NumPy's GEMM beside it on a CPU)."""
    p = ready.prepared
    info = {**identity(case, backend, ready.threads, ready.max_abs_err), "layout": p.layout, "flops": p.flops,
            "bytes": p.bytes, "first_call_s": ready.first_call_s, "threads_observed": ready.threads_observed, **p.extra}
    if ready.openmp_shared:
        info["openmp_shared_with"] = ready.openmp_shared
    if p.flops:  # only what has a FLOP count meets the roofline
        ceiling = session.roofline.ceiling(case.device, case.dtype, backend)
        info.update(peak_gflops=ceiling.gflops, peak_derivation=ceiling.derivation,
                    numpy_gemm_gflops=session.numpy_gemm() if case.device == "cpu" else None)
    info.update(ready.aids)
    return info


@contextlib.contextmanager
def recording(benchmark, case, extra: dict[str, Any]) -> Iterator[None]:
    """What every suite's measurement shares (operators and models here, whole training runs,
    distributed steps): the benchmark's group and the extra_info it carries before anything is
    timed, then the timed part, the with-block. A failed check, an error or an interrupt in it
    marks the benchmark failed, so that nothing partial or implausible is saved."""
    benchmark.group = case.group
    benchmark.extra_info.update(extra)
    try:
        yield
    except BaseException:
        benchmark.has_error = True
        raise


@contextlib.contextmanager
def loaded(benchmark, team: int) -> Iterator[None]:
    """Around exactly the timed rounds: how busy the machine was meanwhile (opbench.harness.load),
    saved under extra_info's schema.LOAD. Read before and after, never during."""
    from opbench.harness.load import MachineLoad

    if benchmark.disabled:
        yield
        return
    with MachineLoad(team) as meter:
        yield
    benchmark.extra_info[schema.LOAD] = meter.load.as_dict()


def measure(benchmark, bound) -> None:
    """Benchmark one bound case: pin threads, run once (first-call latency), verify against
    NumPy, then time with pytest-benchmark and check the result is physically plausible."""
    case, backend, state = bound.case, bound.backend, bound.state
    ready = setup(case, backend, state)
    with recording(benchmark, case, describe(case, backend, ready, state)):
        time_and_check(benchmark, case, ready.prepared, state)
    if ready.prepared.whole and state.settings.breakdown != "off":  # after timing, never inside it
        benchmark.extra_info["breakdown"] = breakdown(case, backend, ready.prepared.call, state.settings.breakdown,
                                                      state.threads)


class BreakdownFailed(UserWarning):
    """The profiled pass after a model's timed rounds failed; the timed result stands."""


def breakdown(case, backend, call, level: str, team: int = 1) -> dict[str, Any]:
    """The --breakdown pass (opbench.suites.breakdown), run after timing, with how busy the machine
    was meanwhile (its prediction times operators). Its failure costs the breakdown, never the
    timed result: it is recorded in place of the breakdown and warned about."""
    from opbench.harness.load import MachineLoad
    from opbench.suites.breakdown import profiled_pass

    try:
        with MachineLoad(team) as meter:
            result = profiled_pass(case, backend, call, level)
        return {**result, schema.LOAD: meter.load.as_dict()}
    except Exception as exc:
        message = one_line(exc, limit=300)
        warnings.warn(f"{case.id}: --breakdown {level} failed, the timed result is kept: {message}",
                      BreakdownFailed, stacklevel=2)
        return {"error": message}


def check_after_rounds(prepared, after: str = "its timed rounds", known_ok: bool = False) -> str | None:
    """One more call after the timed rounds (or the paired gate's bursts), untimed: checked as the
    first was where every call gives the same result, or by the case's own check from where the
    rounds left a step that moves state (Prepared.after_rounds). Raises CorrectnessError, saying
    it came after them. With `known_ok` (the paired gate, whose setup times a result off only as a
    known issue says), such a result passes here too: what it showed is returned, None where
    nothing was off."""
    check = prepared.after_rounds or ((lambda: prepared.verify(prepared.call())) if prepared.repeatable else None)
    if check is None:
        return None
    try:
        check()
    except CorrectnessError as exc:
        if known_ok and isinstance(exc, KnownDeviation):
            return str(exc)
        raise CorrectnessError(f"after {after}, {exc}") from None
    return None


def time_and_check(benchmark, case, prepared, state) -> None:
    """The timed rounds of a checked case and what follows them, for operators, models and users'
    functions (suites/functions.py) alike: load and peak memory over the rounds, the threads read
    again, the call after the rounds checked, the roofline, throughput, latency, the noise warning."""
    # peak_rss_bytes: count this model's memory, not what earlier ones left. Only a timed run records it:
    # with timing disabled (make test's checks) the full collection it takes, 0.35 s a model with four
    # frameworks loaded, buys nothing (22 s of the quick checks' 164 on the Xeon, 2026-12-04)
    if prepared.whole and not benchmark.disabled:
        from opbench.harness.allocator import release

        release()
    # the device's peak over the rounds alone: torch's max_memory_allocated is the process's since it began
    if prepared.device_memory is not None:
        prepared.device_memory.reset_peak_memory()
    with PeakOf() as rss, loaded(benchmark, state.threads):
        benchmark(prepared.call)
    threads_held(case, prepared.backend, state.threads, "after its timed rounds")
    check_after_rounds(prepared)
    timed = timing_of(benchmark)
    if timed is None:
        return
    state.roofline.check(prepared.flops or prepared.least_flops, timed.min_s, case.device,
                         prepared.ceiling_dtype or case.dtype, prepared.backend, gain=prepared.algorithm_gain)
    benchmark.extra_info.update(
        gflops=prepared.flops / timed.median_s / 1e9 if prepared.flops else None,
        gbps=prepared.bytes / timed.median_s / 1e9 if prepared.bytes else None,
        **prepared.per_second(timed.median_s),
    )
    benchmark.extra_info.update(rss.as_extra())
    device_peak = prepared.device_memory.peak_memory() if prepared.device_memory is not None else None
    if device_peak is not None:
        benchmark.extra_info.update(peak_device_bytes=device_peak[0], peak_device_scope=device_peak[1])
    if case.direction == "inference":
        benchmark.extra_info.update(latency(benchmark))
    if prepared.after_timing:
        benchmark.extra_info.update(prepared.after_timing())
    warn_if_noisy(case.id, timed)
