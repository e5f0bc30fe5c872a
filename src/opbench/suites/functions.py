"""A user's own function, timed under the guarantees of opbench's own benchmarks: the `fw` fixture.

A test that asks for `fw` runs once per selected framework, mode, device and dtype (ids and
markers as the suite's: `torch-cpu-compile-float32`). `fw` hands it what opbench itself uses on
that framework: arrays on the device, a function compiled in the mode as opbench compiles its
operators, the synchronisation, NumPy's check with opbench's tolerance rules, and `measure`,
which checks the result before anything is timed, times on the observed threads with the load
of the machine recorded, and checks one more call after the timed rounds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from opbench.core.case import Case
from opbench.frameworks.base import Backend, Unavailable
from opbench.harness import timing
from opbench.harness.session import Session
from opbench.suites import measure as measuring
from opbench.suites.prepared import CorrectnessError, Prepared, compare
from opbench.suites.registry import Listing
from opbench.workloads import ops


def function_cases(settings, name: str) -> list[Case]:
    """One case of the function test `name` per selected framework (NumPy included, where the test
    can run on it), mode, device and dtype."""
    from opbench import frameworks

    return [Case.function(name, framework, device, mode, dtype)
            for framework in settings.frameworks if framework in frameworks.taking_part("ops")
            for mode in settings.framework_modes(framework)
            for device in settings.devices
            for dtype in settings.dtypes]


def listing(request) -> Listing:
    """The cases of a test that asks for `fw` (the row of opbench.suites.registry): its name's."""
    name = request.function.removeprefix("test_")
    return Listing(function_cases(request.settings, name), (((name,), "your own function"),))


Results = Any  # a framework tensor, or a tuple or list of them
References = np.ndarray | Sequence[np.ndarray]


@dataclass
class Runner:
    """One framework in one mode, on one device and dtype: what the `fw` fixture gives a test."""

    case: Case
    backend: Backend
    state: Session

    @property
    def framework(self) -> str:
        return self.case.framework

    @property
    def mode(self) -> str:
        return self.case.mode

    @property
    def device(self) -> str:
        return self.case.device

    @property
    def dtype(self) -> str:
        return self.case.dtype

    @property
    def version(self) -> str:
        return self.backend.version()

    @property
    def module(self) -> Any:
        """The framework's package, as `import` names it: torch, tensorflow, jax, mxnet, numpy."""
        from opbench import frameworks

        return frameworks.package(self.framework)

    def array(self, values: Any) -> Any:
        """`values` (anything NumPy takes) as this framework's array on the device, floating point in the dtype."""
        return self.backend.from_numpy(np.asarray(values), self.device, self.dtype)

    def numpy(self, result: Results) -> np.ndarray | tuple[np.ndarray, ...]:
        """A result as NumPy (float32 for floating point), a tuple for a tuple or list of results."""
        if isinstance(result, tuple | list):
            return tuple(self.backend.to_numpy(r) for r in result)
        return self.backend.to_numpy(result)

    def compile(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` in this mode, as opbench compiles its own operators: as it is in eager mode;
        tf.function (graph) or with jit_compile (xla); torch.compile(fullgraph=True); jax.jit; a
        hybridized Gluon block, for which MXNet calls fn(F, *arrays) with F its nd or sym module
        (MXNet's eager mode calls fn(mx.nd, *arrays) too). Compilation happens on the first call. A
        framework that cannot compile a function in this mode skips the test, saying why."""
        import pytest

        try:
            return self.backend.compiled(fn, self.mode, self.device)
        except Unavailable as exc:
            pytest.skip(str(exc))

    def sync(self, result: Results = None) -> None:
        """Wait until the device has computed everything queued (and `result`, where the framework
        waits on results rather than on devices)."""
        self.backend.wait(result, self.device) if result is not None else self.backend.sync(self.device)

    def check(self, result: Results, reference: References, rtol: float | None = None) -> float:
        """The largest error of `result` against NumPy's `reference` (an array, or one per result),
        after every element was held to rtol * (|ref| + RMS(ref)) plus the dtype's smallest normal,
        rtol being opbench's for the dtype (float32 5e-5) unless given; CorrectnessError, one
        line naming the element, the values and the allowance, where one is off, NaN or misshapen."""
        got = self.numpy(result)
        gots = got if isinstance(got, tuple) else (got,)
        wants = tuple(reference) if isinstance(reference, tuple | list) else (reference,)
        if len(gots) != len(wants):
            raise CorrectnessError(f"{self.case.id} {self.case.name}: {len(gots)} results against "
                                   f"{len(wants)} references")
        tol = ops.TOLERANCE[self.dtype] if rtol is None else rtol
        errors = [compare("result" if len(gots) == 1 else f"result {i}", np.asarray(g),
                          np.asarray(w, dtype=np.float64), self.case, tol)
                  for i, (g, w) in enumerate(zip(gots, wants, strict=True))]
        return max(errors, default=0.0)

    def measure(self, benchmark, call: Callable[[], Results], reference: References, *,
                rtol: float | None = None, flops: float | None = None, bytes_moved: float | None = None) -> Results:
        """Time `call` (no arguments; it returns the result) with pytest-benchmark, as opbench
        times its own operators: threads pinned and observed, one call first (compiles), its
        result checked against `reference` before anything is timed, every timed call
        synchronised, the machine's load over the rounds and the peak memory recorded, one more
        call checked after them. `flops` holds the timing to the machine's ceiling and adds
        GFLOP/s to the report. Returns the checked result."""
        from opbench.harness import openmp

        case, backend, state = self.case, self.backend, self.state
        threads, how = measuring.threads_of(case, backend, state)

        def timed():
            result = call()
            backend.wait(result, case.device)
            return result

        # the operators' own path from here: a Prepared whose every call gives the same result, so
        # the call after the timed rounds is checked as the first was (measure.check_after_rounds)
        prepared = Prepared(case, backend, timed, lambda result: self.check(result, reference, rtol), flops,
                            bytes_moved, "-", repeatable=True)
        result, first_s = timing.once(timed)
        err = prepared.verify(result)
        measuring.threads_held(case, backend, threads, "after its first call")
        ready = measuring.Ready(prepared, threads, how, first_s, err, aids={},
                                openmp_shared=openmp.shared_with(state.openmp_teams, case.framework, case.device,
                                                                 threads))
        if isinstance(benchmark, Capture):  # the paired gate's worker times it in its own bursts
            benchmark.take(ready)
            return result
        with measuring.recording(benchmark, case, measuring.describe(case, backend, ready, state)):
            measuring.time_and_check(benchmark, case, prepared, state)
        return result


class Capture:
    """What the paired gate's worker passes a `fw` test as its `benchmark`: Runner.measure hands it
    the checked call (a measure.Ready) instead of timing it, and the worker times that call in
    its bursts, beside the other side's."""

    def __init__(self) -> None:
        self.ready: measuring.Ready | None = None

    def take(self, ready: measuring.Ready) -> None:
        if self.ready is not None:
            raise RuntimeError("the test called fw.measure twice: a benchmark times one call (pytest-benchmark's "
                               "fixture, too, can be used once per test)")
        self.ready = ready


def ready_from_test(item, case: Case, backend: Backend, state: Session) -> measuring.Ready:
    """A `fw` test's checked call for the paired gate's worker: the test function itself run (its
    arguments: a Runner as `fw`, a Capture as `benchmark`, its own parameters), up to the call it
    hands fw.measure, checked there as in any run. A test that asks for other fixtures, or times
    nothing through fw.measure, is skipped with the reason."""
    import pytest

    params = dict(getattr(getattr(item, "callspec", None), "params", {}))
    given = {"fw": Runner(case, backend, state), "benchmark": Capture()}
    names = tuple(item._fixtureinfo.argnames)
    others = [n for n in names if n not in given and n not in params]
    if others:
        pytest.skip(f"the paired gate gives a fw test its fw, its benchmark and its parameters; {item.name} also asks "
                    f"for {', '.join(others)}")
    item.obj(**{n: given[n] if n in given else params[n] for n in names})
    if given["benchmark"].ready is None:
        pytest.skip(f"{item.name} timed nothing through fw.measure(benchmark, ...)")
    return given["benchmark"].ready


def bind(case: Case, request, state) -> Runner:
    """The `fw` fixture's value (the suite's row in opbench.suites.registry): a Runner of the case's
    framework, mode, device and dtype, or the test skipped with the reason it cannot run here."""
    import pytest

    from opbench.suites.prepared import require

    try:
        backend = require(case)
    except Unavailable as exc:
        pytest.skip(str(exc))
    return Runner(case, backend, state)
