"""The gate's statistics on known inputs."""

import itertools

import numpy as np
import pytest

from opbench.results.stats import (
    NO_INTERVAL,
    Ratio,
    Rule,
    median_distribution,
    ratio_of_medians,
    single_run_verdict,
    verdict,
)


@pytest.mark.parametrize("values", [[3.0], [2.0, 1.0], [1.0, 5.0, 2.0], [4.0, 1.0, 3.0, 2.0], [5, 1, 4, 2, 3],
                                    [1.0, 1.0, 2.0, 2.0, 3.0, 9.0]])
def test_median_distribution_matches_every_resample(values):
    k = len(values)
    brute: dict[float, float] = {}
    for draw in itertools.product(values, repeat=k):
        m = float(np.median(draw))
        brute[m] = brute.get(m, 0.0) + 1 / k**k
    medians, probs = median_distribution(values)
    exact: dict[float, float] = {}
    for m, p in zip(medians, probs, strict=True):
        exact[float(m)] = exact.get(float(m), 0.0) + float(p)
    assert sum(probs) == pytest.approx(1.0, abs=1e-12)
    assert {m: pytest.approx(p, abs=1e-12) for m, p in brute.items()} == {m: p for m, p in exact.items() if p > 1e-15}


def test_far_tails_are_the_extreme_run_ratios():
    base, cand = [1.0, 1.1, 0.9], [2.0, 2.4, 1.8]
    r = ratio_of_medians(base, cand, confidence=1 - 1e-9)
    assert (r.low, r.high) == (pytest.approx(1.8 / 1.1), pytest.approx(2.4 / 0.9))


def test_higher_confidence_widens_the_interval():
    base, cand = [1.0, 1.03, 0.98, 1.01, 0.97], [1.1, 1.12, 1.07, 1.15, 1.09]
    narrow, wide = ratio_of_medians(base, cand, 0.9), ratio_of_medians(base, cand, 0.999)
    assert wide.low <= narrow.low <= narrow.ratio <= narrow.high <= wide.high
    with pytest.raises(ValueError):
        ratio_of_medians(base, cand, confidence=1.0)


def test_identical_sides_give_one_with_a_tight_interval():
    r = ratio_of_medians([1.0, 1.01, 0.99], [1.0, 1.01, 0.99])
    assert r.ratio == pytest.approx(1.0) and 0.97 < r.low <= 1.0 <= r.high < 1.03 and r.runs == (3, 3)


def test_interval_is_reproducible_and_brackets_the_ratio():
    base, cand = [1, 1.02, 0.98, 1.01], [1.2, 1.22, 1.19, 1.21]
    a, b = ratio_of_medians(base, cand), ratio_of_medians(base, cand)
    assert a == b and a.low <= a.ratio <= a.high
    assert a.ratio == pytest.approx(1.205 / 1.005, rel=1e-9)


def test_single_runs_collapse_the_interval():
    r = ratio_of_medians([2.0], [3.0])
    assert (r.ratio, r.low, r.high, r.runs) == (1.5, 1.5, 1.5, (1, 1))


def test_bad_times_are_rejected():
    with pytest.raises(ValueError):
        ratio_of_medians([], [1.0])
    with pytest.raises(ValueError):
        ratio_of_medians([0.0], [1.0])


@pytest.mark.parametrize(
    "ratio, verdict_",
    [
        (Ratio(1.10, 1.06, 1.14, (3, 3)), "regression"),
        (Ratio(1.10, 1.02, 1.14, (3, 3)), "noisy"),  # the interval does not clear the 3% margin
        (Ratio(1.04, 1.035, 1.045, (3, 3)), "unchanged"),  # clears the margin, not the 5% threshold
        (Ratio(0.90, 0.88, 0.93, (3, 3)), "improvement"),
        (Ratio(1.00, 0.90, 1.12, (3, 3)), "noisy"),
        (Ratio(1.00, 0.99, 1.01, (3, 3)), "unchanged"),
    ],
)
def test_verdicts(ratio, verdict_):
    assert verdict(ratio, Rule()) == verdict_


def test_one_run_per_side_gets_a_verdict_only_from_an_asked_threshold():
    """A point interval cannot tell a change from run-to-run noise: no verdict, unless the user
    asked for a threshold gate on the ratio alone."""
    big, small = Ratio(1.30, 1.30, 1.30, (1, 1)), Ratio(1.07, 1.07, 1.07, (1, 1))
    assert single_run_verdict(big, None) == single_run_verdict(small, None) == NO_INTERVAL
    assert single_run_verdict(big, 0.10) == "regression"
    assert single_run_verdict(small, 0.10) == "unchanged"
    assert single_run_verdict(Ratio(0.8, 0.8, 0.8, (1, 1)), 0.10) == "improvement"


def test_rule_thresholds_change_the_verdict():
    r = Ratio(1.10, 1.06, 1.14, (3, 3))
    assert verdict(r, Rule(margin=0.10, threshold=0.15)) == "unchanged"
    assert verdict(r, Rule(margin=0.02, threshold=0.05)) == "regression"
