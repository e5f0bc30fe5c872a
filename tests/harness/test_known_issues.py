"""A known issue is a behaviour: an entry with a regime is met by a result that deviates inside the
regime, within its bound, in any version; a deviation elsewhere or larger fails as any other, and a
result with none passes. Shown on NumPy's own GELU, given the entry torch's carries and the
deviations a real implementation would show."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from opbench import frameworks
from opbench.core.case import Case
from opbench.harness import known_issues
from opbench.harness.known_issues import KNOWN_ISSUES, KnownIssue, known_issue
from opbench.suites import prepared
from opbench.suites.ops import prepare
from opbench.workloads import ops
from tests.mutants import OpMutant, op_applied

_erf = np.frompyfunc(math.erf, 1, 1)


def _cancelling_gelu(out, inputs, p):
    """GELU as torch computes it, 0.5 x (1 + erf(x/sqrt 2)) in float32: the deviation of the entry."""
    x = inputs[0].astype(np.float32)
    erf = _erf(x.astype(np.float64) / math.sqrt(2)).astype(np.float32)
    return (np.float32(0.5) * x * (np.float32(1) + erf)).astype(np.float64)


def _cancelling_gelu_gradient(grads, inputs, p):
    """Its gradient, ct (0.5 (1 + erf) + x phi(x)), with the same cancelling sum in float32."""
    x, ct = inputs[0].astype(np.float32), inputs[-1].astype(np.float32)
    cdf = np.float32(0.5) * (np.float32(1) + _erf(x.astype(np.float64) / math.sqrt(2)).astype(np.float32))
    pdf = np.exp(-x * x / np.float32(2)) / np.float32(math.sqrt(2 * math.pi))
    return [(ct * (cdf + x * pdf)).astype(np.float64)]


def _off(where, by):
    def wrong(out, inputs, p):
        x = inputs[0]
        return np.where(where(x), out * (1 + by), out)

    return wrong


def _grown(out, inputs, p):
    """The cancellation, and 1% more below x = -3: inside the regime, past its bound."""
    return _off(lambda x: x < -3, 1e-2)(_cancelling_gelu(out, inputs, p), inputs, p)


# the deviations of a forward GELU, each with what the check must say of it
FORWARD = {
    "the entry's cancellation": (_cancelling_gelu, prepared.KnownDeviation),
    "larger than the entry's bound, inside its regime": (_grown, "beyond the known issue's bound"),
    "off outside the regime": (_off(lambda x: (x > -1) & (x < 0), 1e-4), "outside the known issue's regime"),
    "no deviation (a version that fixed it)": (lambda out, inputs, p: out, None),
}


@pytest.fixture
def numpy_gelu_issue(monkeypatch):
    """torch's GELU entry, given to NumPy's GELU, seen in no version NumPy has."""
    torch_gelu = next(i for i in KNOWN_ISSUES if i.framework == "torch" and i.names == ("gelu",))
    entry = dataclasses.replace(torch_gelu, framework="numpy", seen_in=("0.0.",))
    monkeypatch.setattr(known_issues, "KNOWN_ISSUES", (entry,))
    return entry


def _case(direction: str) -> Case:
    spec = ops.get("gelu")
    return Case.operator(spec, direction, "numpy", mode="eager", dtype="float32", params=spec.shapes["quick"][0],
                         label=spec.label(spec.shapes["quick"][0]))


def _verify(direction: str, wrong) -> float:
    backend = frameworks.load("numpy")
    case = _case(direction)
    with op_applied(OpMutant("deviation", "operator " + direction, "gelu", "", wrong), backend, case):
        prepared = prepare.prepare(case, backend)
        return prepared.verify(prepared.call())


@pytest.mark.parametrize("name", list(FORWARD))
def test_a_regime_entry_is_met_only_by_its_own_deviation(numpy_gelu_issue, name):
    wrong, expected = FORWARD[name]
    if expected is None:
        assert _verify("forward", wrong) >= 0
    elif isinstance(expected, str):
        with pytest.raises(prepared.CorrectnessError, match=expected) as raised:
            _verify("forward", wrong)
        assert not isinstance(raised.value, prepared.KnownDeviation)
    else:
        with pytest.raises(expected, match=r"shows its known issue: output: \d+ elements in the regime") as raised:
            _verify("forward", wrong)
        assert 0 < raised.value.max_abs_err < 1e-5


def test_the_gradient_is_held_to_the_regime_too(numpy_gelu_issue):
    """The gradient's cancellation is within its ordinary allowance (a bound scaled by the largest
    gradient, not by each element), so it passes; past the entry's bound inside the regime, or off
    outside it, it fails."""
    assert _verify("backward", _cancelling_gelu_gradient) >= 0
    for where, said in ((lambda x: x < -3, "beyond the known issue's bound"),
                        (lambda x: (x > 0) & (x < 1), "outside the known issue's regime")):
        with pytest.raises(prepared.CorrectnessError, match=said):
            _verify("backward", lambda grads, inputs, p, where=where: [_off(where, 1e-2)(grads[0], inputs, p)])


def test_the_same_deviation_without_the_entry_fails(monkeypatch):
    monkeypatch.setattr(known_issues, "KNOWN_ISSUES", ())
    with pytest.raises(prepared.CorrectnessError) as raised:
        _verify("forward", _cancelling_gelu)
    assert not isinstance(raised.value, prepared.KnownDeviation)


def test_a_regime_entry_applies_in_every_version_and_is_strict_where_seen(numpy_gelu_issue):
    case = _case("forward")
    assert known_issue(case, "2.4.6") is numpy_gelu_issue and not numpy_gelu_issue.seen("2.4.6")
    assert "numpy 2.4.6 is held to its behaviour" in known_issues.held_to(numpy_gelu_issue, "numpy", "2.4.6")
    assert numpy_gelu_issue.seen("0.0.1") and known_issues.held_to(numpy_gelu_issue, "numpy", "0.0.1") == \
        numpy_gelu_issue.reason


def test_an_entry_without_a_regime_applies_only_where_it_was_seen():
    entry = KnownIssue(framework="numpy", seen_in=("1.",), names=("gelu",), reason="a whole-result error")
    case = _case("forward")
    assert entry.applies(case, "1.26.4") and not entry.applies(case, "2.4.6")


def test_torch_2_14_gelu_is_judged_by_the_entry_2_13_carries():
    """The README's upgrade: torch 2.14.1 computes GELU as 2.13 does, bit for bit, and the entry
    (seen in 2.11 and 2.13) now reaches it, as an entry that its result must still show."""
    torch_gelu = next(i for i in KNOWN_ISSUES if i.framework == "torch" and i.names == ("gelu",))
    spec = ops.get("gelu")
    case = Case.operator(spec, "forward", "torch", mode="eager", dtype="float32", params=spec.shapes["quick"][0],
                         label=spec.label(spec.shapes["quick"][0]))
    assert known_issue(case, "2.14.1+cpu") is torch_gelu and not torch_gelu.seen("2.14.1+cpu")
    assert known_issue(case, "2.13.0+cpu") is torch_gelu and torch_gelu.seen("2.13.0+cpu")


GELU_BENCH = """
import pytest
from opbench.suites.measure import measure

@pytest.mark.opbench(op="gelu")
def test_gelu(op_case, benchmark):
    measure(benchmark, op_case)
"""

@pytest.mark.parametrize(("seen", "wrong", "outcome"), [
    pytest.param(True, _cancelling_gelu, "xfailed", id="its-deviation-where-seen"),
    pytest.param(False, _cancelling_gelu, "xfailed", id="its-deviation-in-another-version"),
    pytest.param(True, None, "failed", id="fixed-where-seen-fails-so-the-entry-is-narrowed"),
    pytest.param(False, None, "xpassed", id="fixed-in-another-version-is-said"),
    pytest.param(False, _grown, "failed", id="grown-fails"),
])
def test_the_plugin_marks_by_what_the_result_shows(pytester, numpy_gelu_issue, monkeypatch, seen, wrong, outcome):
    """As a user runs it: the entry's deviation is an xfail in any version; no deviation is a strict
    failure where the entry was seen and an XPASS elsewhere; a larger one fails."""
    version = frameworks.load("numpy").version()
    entry = dataclasses.replace(numpy_gelu_issue, seen_in=(version,) if seen else ("0.0.",))
    monkeypatch.setattr(known_issues, "KNOWN_ISSUES", (entry,))
    pytester.makepyfile(test_bench=GELU_BENCH)
    args = ("--framework", "numpy", "--benchmark-disable", "-p", "no:cacheprovider")
    if wrong is None:
        result = pytester.runpytest(*args)
    else:
        def on_gelu(out, inputs, p):  # the session's other calls (its thread observation's GEMMs) as they are
            return wrong(out, inputs, p) if np.shape(out) == inputs[0].shape else out

        with op_applied(OpMutant("deviation", "operator forward", "gelu", "", on_gelu), frameworks.load("numpy"),
                        _case("forward")):
            result = pytester.runpytest(*args)
    result.assert_outcomes(**{outcome: 1})


def _on_a_grid(levels: int, shift: float = 0.0):
    """Standard normal samples (the ones NumPy drew) moved to `levels` equally likely values by their
    quantile, as a sampler with uniform variates on a grid of `levels` gives, then shifted."""
    def wrong(out, inputs, p):
        ranks = np.argsort(np.argsort(out.reshape(-1))).reshape(out.shape)
        quantiles = np.sort(out.reshape(-1))[((np.floor(ranks * levels / out.size) + 0.5) * out.size / levels)
                                             .astype(int)]
        return quantiles + shift

    return wrong


# the deviations of a random normal in bfloat16, each with what the check must say of it: a mean 0.03 off is
# 15 standard errors of the quick case's 262,144 samples, so each verdict holds whatever NumPy drew (JAX's
# own bias, -0.0138 at its seed, is 7 and fails the same way, 6 being the check's bound)
SAMPLERS = {
    "uniform variates on bfloat16's grid, biased": (_on_a_grid(128, -0.03), prepared.KnownDeviation),
    "the same bias with every value distinct": (lambda out, inputs, p: out - 0.03, "not standard normal"),
    "a sampler on a grid four times finer, biased": (_on_a_grid(512, -0.03), "not standard normal"),
    "no deviation (a version that draws in float32)": (lambda out, inputs, p: out, None),
}


@pytest.fixture
def numpy_sampler_issue(monkeypatch):
    """JAX's bfloat16 random-normal entry, given to NumPy's sampler, seen in no version NumPy has."""
    jax_normal = next(i for i in KNOWN_ISSUES if i.framework == "jax" and i.names == ("random_normal",))
    entry = dataclasses.replace(jax_normal, framework="numpy", dtypes=(), seen_in=("0.0.",))
    monkeypatch.setattr(known_issues, "KNOWN_ISSUES", (entry,))
    return entry


@pytest.mark.parametrize("name", list(SAMPLERS))
def test_a_signature_entry_is_met_only_by_a_result_that_shows_it(numpy_sampler_issue, name):
    """A whole result: the check's failure is the known issue only where the samples show the entry's
    signature (a bfloat16 grid of uniform variates), in any version; the same bias without it fails."""
    wrong, expected = SAMPLERS[name]
    backend = frameworks.load("numpy")
    spec = ops.get("random_normal")
    case = Case.operator(spec, "forward", "numpy", mode="eager", dtype="float32", params=spec.shapes["quick"][0],
                         label=spec.label(spec.shapes["quick"][0]))
    assert known_issue(case, backend.version()) is numpy_sampler_issue
    with op_applied(OpMutant("deviation", "creation", "random_normal", "", wrong), backend, case):
        ready = prepare.prepare(case, backend)
        if expected is None:
            assert ready.verify(ready.call()) >= 0
        elif isinstance(expected, str):
            with pytest.raises(prepared.CorrectnessError, match=expected) as raised:
                ready.verify(ready.call())
            assert not isinstance(raised.value, prepared.KnownDeviation)
        else:
            with pytest.raises(expected, match=r"shows its known issue \(at most 256 distinct values") as raised:
                ready.verify(ready.call())
            assert 0.02 < raised.value.max_abs_err < 0.04  # the check's own measure: here the mean's error
    assert "numpy " in known_issues.held_to(numpy_sampler_issue, "numpy", backend.version())
