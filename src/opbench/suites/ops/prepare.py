"""Turning an operator Case into a synchronised callable and the check of its result.

Inputs are made and converted here, outside anything timed; the callable returned runs the
operation once and waits for the device, so timing it measures the work and nothing less.
"""

from __future__ import annotations

import functools

import numpy as np

from opbench.core import inputs
from opbench.core.case import Case
from opbench.core.layouts import from_native, to_native
from opbench.frameworks.base import Backend
from opbench.harness.known_issues import known_issue
from opbench.suites.prepared import (
    CorrectnessError,
    Excuse,
    KnownDeviation,
    Prepared,
    compare,
    synchronised,
)
from opbench.workloads import ops
from opbench.workloads.ops.base import CheckFailed


@functools.lru_cache(maxsize=8)
def host_inputs(name: str, label: str, params: tuple, dtype: str) -> tuple[np.ndarray, ...]:
    """The operator's inputs for this problem and dtype, the same for every framework."""
    spec = ops.get(name)
    made = spec.inputs(inputs.rng(name, label), dict(params))
    return tuple(inputs.host_array(a, dtype) for a in made)


def _cotangent(case: Case, shape: tuple[int, ...]) -> np.ndarray:
    r = inputs.rng(case.name, case.label, "cotangent")
    return inputs.host_array(r.standard_normal(shape).astype(np.float32), case.dtype)


def _known(case: Case, known: list[str], max_err: float) -> float:
    """`max_err` where nothing was off, else KnownDeviation with what each tensor showed."""
    if known:
        raise KnownDeviation(f"{case.framework} {case.mode} {case.name} shows its known issue: {'; '.join(known)}",
                             max_err)
    return max_err


def _capped(bound: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """A linear operator's per-element error magnitude (the operation on absolute values), capped
    at max(1, max|ref|): the worst-case bound grows with the reduction length (a 65536-long dot
    product would accept an error of 8), real rounding errors only with its square root."""
    return np.minimum(bound, max(1.0, float(np.max(np.abs(ref)))) if ref.size else 1.0)


class _Reference:
    """The NumPy side of one operator case, made once before anything runs: the inputs in float64,
    the expected output, the allowances each compared tensor is held to, the known issue's regime
    (if any) and every check's share of its allowance (`shares`, read by the report)."""

    def __init__(self, case: Case, spec, p: dict, host: tuple[np.ndarray, ...], version: str) -> None:
        self.case, self.spec, self.p = case, spec, p
        self.exact = tuple(a.astype(np.float64) for a in host)
        self.out_tol, self.grad_tol = ops.rtol(spec, case.dtype, True), ops.rtol(spec, case.dtype, False)
        self.magnitude = tuple(np.abs(a) for a in self.exact)
        self.want = spec.reference(p, *self.exact)
        floor = spec.floor(p, *self.exact) if spec.floor else None
        self.floor = _capped(spec.reference(p, *self.magnitude), self.want) if spec.linear else floor
        self.absolute = ops.absolute_allowance(spec, p, self.exact, case.dtype)
        self.shares: list[float] = []  # each compared tensor's largest error as a share of its allowance
        issue = known_issue(case, version)
        self.regime = issue.regime if issue is not None else None
        self.signature = issue.signature if issue is not None else None

    def excuse(self, what: str, shape: tuple[int, ...], ct: np.ndarray | None = None) -> Excuse | None:
        """The known issue's regime over one compared tensor of an element-wise operator (x's shape)."""
        x = self.exact[0] if self.exact else None
        regime = self.regime
        bound = regime.bound(what, x, ct) if regime is not None and x is not None and x.shape == shape else None
        return None if bound is None else Excuse(regime.where(x), bound, regime.describe)

    def output(self, got: np.ndarray, excuse: Excuse | None = None, known: list[str] | None = None) -> float:
        """The output's largest error, held to the output's allowance."""
        return compare("output", got, self.want, self.case, self.out_tol, self.floor, self.absolute, self.shares,
                       excuse, known)


def prepare(case: Case, backend: Backend, settings=None) -> Prepared:
    """Build the callable and its verification for an operator case (the suite's preparer in
    suites/registry.py; an operator reads none of the run's `settings`)."""
    spec = ops.get(case.name)
    impl = backend.op(case.name)
    image = backend.image_layout(case.device)
    p = {**case.p, **spec.extra, "layout": image}
    host = host_inputs(case.name, case.label, case.params, case.dtype)
    ref = _Reference(case, spec, p, host, backend.version())
    native = None
    if spec.creation:
        run, verify = _creation(backend, impl, host, ref)
    else:
        native = [backend.from_numpy(to_native(a, arg.kind, image, backend.kernel_layout), case.device, case.dtype)
                  for a, arg in zip(host, spec.args, strict=True)]
        build = _forward if case.direction == "forward" else _backward
        run, verify = build(backend, impl, native, ref)
    return _prepared(backend, impl, native, ref, synchronised(run, backend, case.device), verify)


def _creation(backend: Backend, impl, host: tuple[np.ndarray, ...], ref: _Reference):
    """A creation operator's run (from host data to a device array) and its verification."""
    case, spec, p = ref.case, ref.spec, ref.p
    args = [a.tolist() if spec.extra.get("as_list") else a for a in host]
    run = backend.creation(impl, p, args, case.device, case.dtype)

    def verify(result):
        got = backend.to_numpy(result)
        if spec.check:
            try:
                return spec.check(p, ref.exact, got)
            except AssertionError as exc:  # the check's own failure is a correctness failure like any,
                # unless it shows the known issue's signature
                if isinstance(exc, CheckFailed) and ref.signature is not None and ref.signature.shows(got):
                    raise KnownDeviation(f"{case.framework} {case.mode} {case.name} shows its known issue "
                                         f"({ref.signature.describe}): {exc}", exc.error) from None
                raise CorrectnessError(f"{case.framework} {case.mode} {case.name}: {exc}") from None
        return ref.output(got)

    return run, verify


def _to_host(backend: Backend, case: Case, tensor, kind: str) -> np.ndarray:
    return from_native(backend.to_numpy(tensor), kind, backend.image_layout(case.device), backend.kernel_layout)


def _forward(backend: Backend, impl, native: list, ref: _Reference):
    """A forward pass's run and its verification (the output against NumPy's)."""
    case, spec = ref.case, ref.spec
    run = backend.forward(impl, ref.p, native, case.mode, case.device)
    out_excuse = ref.excuse("output", ref.want.shape)

    def verify(result):
        _kept_precision(case, result)
        known: list[str] = []
        return _known(case, known, ref.output(_to_host(backend, case, result, spec.output_kind), out_excuse, known))

    return run, verify


def _backward(backend: Backend, impl, native: list, ref: _Reference):
    """A backward pass's run (the output and the gradients of spec.grad_argnums for a fixed
    cotangent) and its verification: the output, then each gradient against NumPy's vjp."""
    case, spec, p, want = ref.case, ref.spec, ref.p, ref.want
    image = backend.image_layout(case.device)
    ct = _cotangent(case, want.shape)
    ct_native = backend.from_numpy(to_native(ct, spec.output_kind, image, backend.kernel_layout), case.device,
                                   case.dtype)
    want_grads = spec.vjp(p, ref.exact, ct.astype(np.float64))
    # gradients: per element for linear operators; otherwise, as one bound scaled by the
    # largest gradient (their rounding error scales with terms that cancel: a layer-norm
    # gradient over two features is exactly zero)
    if spec.linear:
        bounds = spec.vjp(p, ref.magnitude, np.abs(ct).astype(np.float64))
        grad_floors = [_capped(b, w) for b, w in zip(bounds, want_grads, strict=True)]
    else:
        grad_floors = [max(1.0, float(np.max(np.abs(w)))) - np.abs(w) for w in want_grads]
    grad_abs = ops.gradient_allowance(spec, p, ref.exact, case.dtype, want_grads)
    argnums = spec.grad_argnums
    run = backend.backward(impl, p, native, argnums, ct_native, case.mode, case.device)
    out_excuse = ref.excuse("output", want.shape)
    grad_excuses = [ref.excuse("gradient", w.shape, ct.astype(np.float64)) for w in want_grads]

    def verify(result):
        out, grads = result
        _kept_precision(case, out)
        if len(grads) != len(argnums):
            raise CorrectnessError(f"{case.framework} returned {len(grads)} gradients, expected {len(argnums)}")
        known: list[str] = []
        errs = [ref.output(_to_host(backend, case, out, spec.output_kind), out_excuse, known)]
        for i, g, w, f, a, e in zip(argnums, grads, want_grads, grad_floors, grad_abs, grad_excuses, strict=True):
            arg = spec.args[i]
            errs.append(compare(f"gradient of {arg.name}", _to_host(backend, case, g, arg.kind), w, case,
                                ref.grad_tol, f, a, ref.shares, e, known))
        return _known(case, known, max(errs))

    return run, verify


def _prepared(backend: Backend, impl, native: list | None, ref: _Reference, call, verify) -> Prepared:
    """The Prepared of a built operator case: its cost (FLOPs, bytes, the algorithm's gain), its
    layout, and for a 16-bit case what the framework's program says its products ran in."""
    case, spec, p = ref.case, ref.spec, ref.p
    low = case.dtype in ("float16", "bfloat16")
    computed = backend.products_computed_in(impl, p, native, case.mode, case.device) if low and native is not None \
        else None
    flops, nbytes, flops_exact = spec.cost(p, case.direction, ref.exact, int(np.size(ref.want)), 2 if low else 4)
    layout = p["layout"] if any(a.kind == "image" for a in spec.args) else "-"
    gain = spec.algorithm_gain(p) if spec.algorithm_gain else 1.0
    extra = {"flops_exact": flops_exact}
    if computed:  # what the framework's compiled program says its products ran in (a 16-bit label may be float32)
        extra["computed_in"] = computed
    return Prepared(case, backend, call, verify, flops, nbytes, layout, extra=extra, algorithm_gain=gain,
                    shares=ref.shares, repeatable=spec.check is None)


def _kept_precision(case: Case, result) -> None:
    """A float64 result where the case computes in a narrower type is an implementation that
    widened its inputs (a user's operator that calls NumPy, or `.double()`): what would be timed
    is not the case's arithmetic, whatever its error. CorrectnessError, one line."""
    kind = str(getattr(result, "dtype", ""))
    if "float64" in kind and case.dtype != "float64":
        raise CorrectnessError(f"{case.framework} {case.mode} {case.name} returns {kind} where the case computes in "
                               f"{case.dtype}: the implementation widens its inputs, so its time is not {case.dtype}'s")
