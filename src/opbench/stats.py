"""The statistics of the regression gate: the ratio of medians between two sets of runs and a
bootstrap confidence interval taken over runs (rounds inside one process share its noise)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BOOTSTRAP = 4000
CONFIDENCE = 0.95


@dataclass(frozen=True)
class Ratio:
    """candidate / baseline: the ratio of the medians of the per-run medians, and its interval."""

    ratio: float
    low: float
    high: float
    runs: tuple[int, int]  # (baseline, candidate)

    @property
    def width(self) -> float:
        return self.high / self.low if self.low > 0 else float("inf")


def ratio_of_medians(baseline: list[float], candidate: list[float], seed: int = 0) -> Ratio:
    """The ratio of medians with a percentile bootstrap interval, resampling whole runs on each side.
    With one run on a side the interval collapses to the point: it cannot show run-to-run noise."""
    base, cand = np.asarray(baseline, float), np.asarray(candidate, float)
    if base.size == 0 or cand.size == 0 or np.any(base <= 0) or np.any(cand <= 0):
        raise ValueError("each side needs at least one positive time")
    point = float(np.median(cand) / np.median(base))
    if base.size == 1 and cand.size == 1:
        return Ratio(point, point, point, (1, 1))
    r = np.random.default_rng(seed)
    b = np.median(r.choice(base, (BOOTSTRAP, base.size)), axis=1)
    c = np.median(r.choice(cand, (BOOTSTRAP, cand.size)), axis=1)
    tail = (1 - CONFIDENCE) / 2 * 100
    low, high = np.percentile(c / b, [tail, 100 - tail])
    return Ratio(point, float(low), float(high), (int(base.size), int(cand.size)))


@dataclass(frozen=True)
class Rule:
    """Verdict thresholds: a change must clear `margin` with its whole interval and `threshold`
    with its point estimate; "unchanged" needs the whole interval within +-threshold."""

    margin: float = 0.03
    threshold: float = 0.05


def verdict(r: Ratio, rule: Rule) -> str:
    """'regression', 'improvement', 'unchanged' (the interval lies within +-threshold), or 'noisy'
    (inconclusive: the interval is too wide to call either way). With one run per side there is
    no interval, so the ratio alone must clear margin + threshold."""
    if r.runs == (1, 1):
        bound = 1 + rule.margin + rule.threshold
        return "regression" if r.ratio > bound else "improvement" if r.ratio < 1 / bound else "unchanged"
    if r.low > 1 + rule.margin and r.ratio > 1 + rule.threshold:
        return "regression"
    if r.high < 1 / (1 + rule.margin) and r.ratio < 1 / (1 + rule.threshold):
        return "improvement"
    if r.high <= 1 + rule.threshold and r.low >= 1 / (1 + rule.threshold):
        return "unchanged"
    return "noisy"
