"""The statistics of the regression gate: the ratio of medians between two sets of runs and a
bootstrap confidence interval taken over runs (rounds inside one process share its noise).

The bootstrap is exact, not sampled: the distribution of the median of K values drawn with
replacement from K runs has at most K*(K+1)/2 atoms whose probabilities follow from binomial
counts, so the interval needs no random seed and stays exact in the far tails, where a
family-wise gate over hundreds of benchmarks looks.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import comb

import numpy as np

CONFIDENCE = 0.97  # chosen with studies/gate_quality.py: docs/explanation/process-gate.md gives the trade-off


@dataclass(frozen=True)
class Ratio:
    """candidate / baseline: the ratio of the medians of the per-run times, and its interval."""

    ratio: float
    low: float
    high: float
    runs: tuple[int, int]  # (baseline, candidate)

    @property
    def width(self) -> float:
        return self.high / self.low if self.low > 0 else float("inf")


def _at_least(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) >= k)."""
    return sum(comb(n, j) * p**j * (1 - p) ** (n - j) for j in range(k, n + 1))


def median_distribution(values: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """The exact bootstrap distribution of the median of `values`: (medians, probabilities).

    With x_1 <= ... <= x_K and a resample of K draws, the median is the order statistic X_(L),
    L = ceil(K/2), for odd K, and (X_(L) + X_(L+1)) / 2 for even K. P(X_(L) <= x_a) is the chance
    that at least L draws fall among the a smallest values; for even K, X_(L) <= x_a together with
    X_(L+1) >= x_b (a < b) needs exactly L draws among the a smallest, none between, and the rest
    among the K - b + 1 largest, and the joint probabilities follow by differencing."""
    x = np.sort(np.asarray(values, float))
    k = x.size
    lower = (k + 1) // 2
    cdf = [_at_least(lower, k, a / k) for a in range(k + 1)]
    p_lower = np.diff(cdf)  # P(X_(L) = x_a), a = 1..K
    if k % 2:
        return x, p_lower

    def joint(a: int, b: int) -> float:  # P(X_(L) <= x_a, X_(L+1) >= x_b), a < b
        if a <= 0 or b > k:
            return 0.0
        return comb(k, lower) * (a / k) ** lower * ((k - b + 1) / k) ** (k - lower)

    medians, probs = [], []
    for a in range(1, k + 1):
        same = p_lower[a - 1]
        for b in range(a + 1, k + 1):
            p = joint(a, b) - joint(a - 1, b) - joint(a, b + 1) + joint(a - 1, b + 1)
            medians.append((x[a - 1] + x[b - 1]) / 2)
            probs.append(p)
            same -= p
        medians.append(x[a - 1])
        probs.append(max(same, 0.0))
    return np.array(medians), np.array(probs)


def _quantile_of_ratio(cm: np.ndarray, cp: np.ndarray, bm: np.ndarray, bp: np.ndarray, q: float) -> float:
    """The q-quantile of C / B for independent discrete C (atoms cm, probabilities cp) and B,
    without forming all len(cm) * len(bm) ratios: P(C/B <= t) = sum_i cp_i P(B >= cm_i / t) takes one
    sorted search, and t is found by bisection in log space (memory O(atoms), not O(atoms^2))."""
    order = np.argsort(bm, kind="stable")
    b_sorted = bm[order]
    survival = np.concatenate([np.cumsum(bp[order][::-1])[::-1], [0.0]])  # P(B >= b_sorted[i])

    def cdf(t: float) -> float:
        return float(np.dot(cp, survival[np.searchsorted(b_sorted, cm / t, side="left")]))

    lo, hi = float(cm.min() / bm.max()), float(cm.max() / bm.min())
    if cdf(lo) >= q:
        return lo
    for _ in range(200):  # F(lo) < q <= F(hi); the answer is the atom at which F first reaches q
        mid = float(np.sqrt(lo * hi))
        if not lo < mid < hi:
            break
        lo, hi = (lo, mid) if cdf(mid) >= q else (mid, hi)
    return hi


def ratio_of_medians(baseline: list[float], candidate: list[float], confidence: float = CONFIDENCE) -> Ratio:
    """The ratio of medians with the exact percentile-bootstrap interval, resampling whole runs on
    each side independently. With one run on a side the interval collapses to the point: it
    cannot show run-to-run noise. Memory grows as K^2 (the atoms of each side), at any K."""
    base, cand = np.asarray(baseline, float), np.asarray(candidate, float)
    if base.size == 0 or cand.size == 0 or not (np.all(np.isfinite(base)) and np.all(np.isfinite(cand))) \
            or np.any(base <= 0) or np.any(cand <= 0):
        raise ValueError("each side needs at least one time, and every time must be finite and positive")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must lie between 0 and 1, got {confidence}")
    point = float(np.median(cand) / np.median(base))
    if base.size == 1 and cand.size == 1:
        return Ratio(point, point, point, (1, 1))
    (bm, bp), (cm, cp) = median_distribution(base), median_distribution(cand)
    tail = (1 - confidence) / 2
    # the percentile interval: the tail and 1 - tail quantiles (with slack for rounding in the sums)
    low = _quantile_of_ratio(cm, cp, bm, bp, tail - 1e-12)
    high = _quantile_of_ratio(cm, cp, bm, bp, 1 - tail - 1e-12)
    return Ratio(point, float(low), float(high), (int(base.size), int(cand.size)))


@dataclass(frozen=True)
class Rule:
    """Verdict thresholds: a change must clear `margin` with its whole interval and `threshold`
    with its point estimate; "unchanged" needs the whole interval within +-threshold."""

    margin: float = 0.03
    threshold: float = 0.05


def verdict(r: Ratio, rule: Rule) -> str:
    """'regression', 'improvement', 'unchanged' (the interval lies within +-threshold), or 'noisy'
    (inconclusive: the interval is too wide to call either way). One run per side has no interval:
    see single_run_verdict."""
    if r.low > 1 + rule.margin and r.ratio > 1 + rule.threshold:
        return "regression"
    if r.high < 1 / (1 + rule.margin) and r.ratio < 1 / (1 + rule.threshold):
        return "improvement"
    if r.high <= 1 + rule.threshold and r.low >= 1 / (1 + rule.threshold):
        return "unchanged"
    return "noisy"


NO_INTERVAL = "no interval"  # one run per side: the data cannot decide, and no verdict is given


def single_run_verdict(r: Ratio, threshold: float | None) -> str:
    """One run per side: its interval is a point, blind to run-to-run noise (two runs of one
    environment differ by 5-25% on a busy machine), so there is no verdict unless the user asked
    for a threshold gate on the ratio alone: then beyond +-threshold is a regression or improvement."""
    if threshold is None:
        return NO_INTERVAL
    bound = 1 + threshold
    return "regression" if r.ratio > bound else "improvement" if r.ratio < 1 / bound else "unchanged"
