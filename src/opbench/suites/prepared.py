"""What every suite's preparation gives and checks with, whichever suite it is: the prepared
callable (`Prepared`), the check's error types, the element-wise comparison against NumPy,
synchronisation, and the admission of a case (its framework, device, mode and dtype here).

No suite imports another for these: operators (suites/ops), models (suites/models), whole
training runs, distributed steps and users' own functions (suites/functions.py) share them here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from opbench import frameworks
from opbench.core.case import Case
from opbench.frameworks.base import Backend, Unavailable
from opbench.workloads import ops
from opbench.workloads.models import precision


class CorrectnessError(AssertionError):
    """A result differs from the NumPy reference (or is NaN/Inf); the benchmark is not timed."""


class KnownDeviation(CorrectnessError):
    """A result that differs from NumPy's only as a known issue says (harness/known_issues.py):
    every element off lies in the issue's regime and within its bound. pytest marks the case xfail
    and does not time it; the paired gate times it on both sides with the issue noted."""

    def __init__(self, message: str, max_abs_err: float) -> None:
        super().__init__(message)
        self.max_abs_err = max_abs_err


@dataclass(frozen=True)
class Excuse:
    """The elements of one compared tensor a known issue covers (`inside`) and the error each may
    show there (`bound`)."""

    inside: np.ndarray
    bound: np.ndarray
    describe: str


class DeviceMemory(Protocol):
    """A framework allocator's GPU peak (a NativeModel): reset before the timed rounds, read after."""

    def reset_peak_memory(self) -> None: ...

    def peak_memory(self) -> tuple[int, str] | None: ...


@dataclass
class Prepared:
    """A case ready to time: call() runs it once, synchronised; verify(result) returns the
    largest error against the reference or raises CorrectnessError."""

    case: Case
    backend: Backend
    call: Callable[[], Any]
    verify: Callable[[Any], float]
    flops: float | None
    bytes: float
    layout: str
    extra: dict[str, Any] = field(default_factory=dict)  # more extra_info (models: batch, params)
    items: int = 0  # samples per call, for throughput (models)
    device_memory: DeviceMemory | None = None  # the framework allocator's peak over the timed rounds (GPU)
    after_timing: Callable[[], dict[str, Any]] | None = None  # more metrics, measured after timing
    algorithm_gain: float = 1.0  # the most FLOPs a known fast algorithm saves against `flops`
    # A model's call counts no FLOPs for its figures, but the least a correct call must do (workloads/models/
    # cost.py) holds its timing to the device's ceiling in the type its products run in
    least_flops: float = 0.0
    ceiling_dtype: str = ""  # the type of the ceiling, where the case's own label is not one (amp)
    # Every call gives the same result (an operator's on its fixed inputs, a model's inference; not a
    # training step, which moves the weights, nor a random draw): measure checks a call after the timed
    # rounds as it checked the first, so a call that goes wrong once warm is not reported
    repeatable: bool = False
    # Where calls move state (a training step): a check of one more call after the timed rounds (untimed),
    # from wherever they left it, which measure makes in place of the repeatable one
    after_rounds: Callable[[], Any] | None = None
    shares: list[float] = field(default_factory=list)  # each checked quantity's error / its allowance
    # A whole workload (a model): the process's freed memory goes back to the system before its timed
    # rounds, so that their peak_rss_bytes counts this case's memory, not what earlier cases freed; and
    # --breakdown profiles its call after them
    whole: bool = False

    @property
    def allowance_share(self) -> float:
        """The largest share of its allowance any quantity the check compared has used so far
        (at most 1 once the check passed; 0 before anything was compared): how close correct code
        came to failing, the number a test holds, never the raw error against one host's constant."""
        return max(self.shares, default=0.0)

    def per_second(self, seconds: float) -> dict[str, float]:
        """Throughput figures for extra_info: samples and batches per second (models only)."""
        if not self.items:
            return {}
        return {"samples_per_s": self.items / seconds, "batches_per_s": 1 / seconds}


def require_framework(framework: str, device: str) -> Backend:
    """The framework's backend, loaded; raises Unavailable when it or the device is not here."""
    backend = frameworks.load(framework)
    if device == "gpu":
        reason = backend.gpu_unavailable()
        if reason:
            raise Unavailable(reason)
    return backend


def require(case: Case) -> Backend:
    """The backend that runs `case` (an operator, a model, or a user's function through the `fw`
    fixture); raises Unavailable with the reason when it cannot run here."""
    backend = require_framework(case.framework, case.device)
    if case.mode not in backend.modes:
        raise Unavailable(f"{case.framework} has no mode {case.mode!r} (modes: {', '.join(backend.modes)})")
    dtype = precision.compute_dtype(case.dtype, case.device) if case.is_model else case.dtype
    if dtype not in backend.dtypes(case.device):
        raise Unavailable(f"{case.framework} does not compute in {dtype} on the {case.device}")
    if case.is_model and case.dtype == "amp":
        reason = backend.amp_unavailable(case.device)
        if reason:
            raise Unavailable(reason)
    if not case.is_model and not case.is_function:  # a registered operator's own conditions
        spec = ops.get(case.name)
        if spec.creation and case.mode != "eager":
            raise Unavailable("creation operators are measured in eager mode only: a compiled graph hoists them")
        if case.direction not in backend.framework.directions:
            raise Unavailable(f"{case.framework} computes {' and '.join(backend.framework.directions)} passes only")
        if case.name in backend.framework.lacks or backend.op(case.name) is None:
            raise Unavailable(f"{case.framework} has no implementation of {case.name}")
    return backend


def compare(what: str, got: np.ndarray, want: np.ndarray, case: Case, tol: float,
             floor: np.ndarray | float | None = None, absolute: np.ndarray | float | None = None,
             used: list[float] | None = None, excuse: Excuse | None = None, known: list[str] | None = None) -> float:
    """max|got - want|, after checking every element against tol * (|want| + floor) (floor: the
    RMS of `want` unless the operator says what its rounding error scales with); the largest
    element's share of its allowance goes to `used`. With an `excuse` (a known issue's regime),
    elements inside it may reach its bound: when only those are off, what they show goes to `known`
    instead of failing; one off outside it, or past its bound, fails as any other."""
    diff, err = ops.abs_error(got, want)  # the one float64 difference the element checks read too
    where = ""
    if np.isfinite(err):
        limit = ops.allowed_error(want, case.dtype, tol, ops.rms(want) if floor is None else floor, absolute)
        inside = excuse.inside if excuse is not None else None
        over = np.subtract(diff, np.where(inside, np.maximum(limit, excuse.bound), limit) if excuse is not None
                           else limit, out=np.empty(want.shape))
        worst = np.unravel_index(np.argmax(over), want.shape) if want.size else ()
        if not want.size or over[worst] <= 0:
            if (used is None or not want.size) and excuse is None:
                return err
            if np.all(limit > 0):  # the usual case: every element has an allowance, the share is the ratio
                share = np.divide(diff, limit, out=over)
            else:
                share = np.divide(diff, limit, out=np.where(diff > 0, np.inf, 0.0), where=limit > 0)
            if used is not None and want.size:
                used.append(float(np.max(share, initial=0.0) if inside is None
                                  else np.max(share, initial=0.0, where=~inside)))
            if excuse is not None and known is not None and np.any(share[inside] > 1):
                at = np.unravel_index(np.argmax(np.where(inside, share, 0)), want.shape)
                known.append(f"{what}: {int(np.sum(share[inside] > 1))} elements in the regime off by up to "
                             f"{diff[at]:.3g} ({share[at]:.3g} times the check's allowance; the issue allows "
                             f"{excuse.bound[at]:.3g} there)")
            return err
        if excuse is not None:
            where = (f", beyond the known issue's bound there ({excuse.bound[worst]:.3g}: {excuse.describe})"
                     if inside[worst] else f", outside the known issue's regime ({excuse.describe})")
    if np.size(got) != want.size:
        detail = f"shape {np.shape(got)} != {want.shape}"
    elif not np.isfinite(err):
        detail = "NaN or infinity in the result"
    else:
        detail = (f"element {tuple(int(i) for i in worst)} is {float(np.asarray(got).reshape(want.shape)[worst]):.6g}, "
                  f"NumPy {float(want[worst]):.6g}: off by {diff[worst]:.3g} > {limit[worst]:.3g} allowed "
                  f"(rtol {tol:.3g}; max abs error {err:.3g}){where}")
    raise CorrectnessError(f"{case.framework} {case.mode} {case.name} {what} differs from NumPy: {detail}")


def synchronised(run: Callable[[], Any], backend: Backend, device: str) -> Callable[[], Any]:
    """`run`, then wait for the device: what every timed call is."""

    def call():
        result = run()
        backend.sync(device)
        return result

    return call
