"""Statistics of the paired gate: one log-ratio per trial (candidate burst against the baseline
burst taken a fraction of a second apart), trials nested in worker pairs.

The estimate is the mean over worker pairs of each pair's median trial log-ratio: the median
makes a pair robust to the odd trial hit by another tenant, the mean over pairs carries the
between-process effects (memory layout, thread placement, allocator state) that trials inside
one pair cannot see. Its interval comes from a bootstrap over worker pairs, seeded per benchmark
so that a report can be reproduced. Each pair's median already carries its trials' noise, so
resampling the pairs alone gives the right variance (Davison & Hinkley 1997, 3.8, strategy 1);
resampling trials inside the drawn pairs too counts that noise twice, and on this machine (A/A,
6 pairs x 4 trials, 42 benchmarks) left 35 of 42 benchmarks `noisy` against 17 with pairs alone.
Below TOP_LEVEL_PAIRS pairs a bootstrap over pairs has too few distinct draws, and trials are
resampled inside the pairs as well (wider, erring towards `noisy`).

A percentile bootstrap over a handful of pairs is too narrow (at 6 pairs its 97% interval
covered the truth 91% of the time in simulation). The interval over pairs is therefore the
expanded percentile interval (Hesterberg 2015, "What teachers should know about the bootstrap"):
the tail is taken at the normal quantile that equals sqrt(M / (M - 1)) times Student's t
quantile with M - 1 degrees of freedom, which restores the coverage of the t interval.

Percentile intervals are used where the bootstrap has at least MIN_TAIL draws beyond each end;
at the confirmation stage's family-wise level (e.g. 1 - 0.05/168) no feasible number of draws
reaches that far, and the interval is the estimate plus or minus the normal quantile times the
bootstrap standard error.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from statistics import NormalDist

import numpy as np

from opbench.results.stats import Ratio, Rule, verdict

RESAMPLES = 4000
MIN_TAIL = 20  # bootstrap draws needed beyond each end of a percentile interval
TOP_LEVEL_PAIRS = 5  # from this many worker pairs on, only pairs are resampled
FAMILY_ALPHA = 0.05  # the suite-wide false-alarm budget of the two-stage rule


def seed_for(name: str, seed: int = 0) -> int:
    """A reproducible seed per benchmark (Python's hash() is salted per process)."""
    return int.from_bytes(hashlib.sha256(f"{seed}:{name}".encode()).digest()[:8], "little")


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile by the Cornish-Fisher expansion in the normal quantile (four terms;
    for df >= 4 within 0.3% of the exact value at 97% and within 3%, below it, at 99.97%)."""
    z = NormalDist().inv_cdf(p)
    terms = ((z**3 + z) / 4, (5 * z**5 + 16 * z**3 + 3 * z) / 96, (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384)
    return z + sum(term / df ** (k + 1) for k, term in enumerate(terms))


def point(pairs: list[np.ndarray]) -> float:
    """Mean over worker pairs of the median trial log-ratio of each pair."""
    return float(np.mean([np.median(p) for p in pairs]))


def bootstrap(pairs: list[np.ndarray], resamples: int = RESAMPLES, seed: int = 0) -> np.ndarray:
    """Bootstrap distribution of `point`: pairs drawn with replacement; with fewer than
    TOP_LEVEL_PAIRS pairs, each drawn pair's trials drawn with replacement too. Memory is
    O(resamples x pairs x trials of one pair)."""
    rng = np.random.default_rng(seed)
    m = len(pairs)
    if m >= TOP_LEVEL_PAIRS:
        medians = np.array([np.median(p) for p in pairs])
        return medians[rng.integers(0, m, size=(resamples, m))].mean(axis=1)
    # medians[i, b, j]: pair i's median over a fresh resample of its trials, for slot j of draw b
    medians = np.empty((m, resamples, m))
    for i, trials in enumerate(pairs):
        draws = rng.integers(0, trials.size, size=(resamples * m, trials.size))
        medians[i] = np.median(trials[draws], axis=1).reshape(resamples, m)
    which = rng.integers(0, m, size=(resamples, m))
    return medians[which, np.arange(resamples)[:, None], np.arange(m)[None, :]].mean(axis=1)


@dataclass(frozen=True)
class Estimate:
    """The log-ratio estimate of one benchmark with its bootstrap distribution."""

    log_ratio: float
    draws: np.ndarray
    pairs: int
    trials: int

    def ratio(self, confidence: float) -> Ratio:
        """candidate / baseline with its two-sided interval at `confidence`."""
        tail = (1 - confidence) / 2
        z = NormalDist().inv_cdf(1 - tail)
        if self.pairs >= TOP_LEVEL_PAIRS:  # the expanded percentile interval
            z = (self.pairs / (self.pairs - 1)) ** 0.5 * t_quantile(1 - tail, self.pairs - 1)
            tail = NormalDist().cdf(-z)
        if tail * self.draws.size >= MIN_TAIL:
            low, high = np.quantile(self.draws, [tail, 1 - tail])
        else:
            spread = z * float(np.std(self.draws, ddof=1))
            low, high = self.log_ratio - spread, self.log_ratio + spread
        return Ratio(float(np.exp(self.log_ratio)), float(np.exp(low)), float(np.exp(high)),
                     (self.pairs, self.trials))


def estimate(pairs: list[np.ndarray], seed: int = 0, resamples: int = RESAMPLES) -> Estimate:
    pairs = [np.asarray(p, dtype=float) for p in pairs if len(p)]
    if not pairs:
        raise ValueError("no trials to estimate from")
    if not all(np.isfinite(p).all() for p in pairs):
        raise ValueError("a trial log-ratio is not finite")
    draws = bootstrap(pairs, resamples, seed) if len(pairs) > 1 or pairs[0].size > 1 else np.repeat(pairs[0], 2)
    return Estimate(point(pairs), draws, len(pairs), sum(p.size for p in pairs))


def confirm_confidence(flagged: int, family_alpha: float = FAMILY_ALPHA) -> float:
    """The confirmation stage's level: Bonferroni over the benchmarks the screen flagged. The
    confirmation measures them again on fresh worker pairs, independent of the screen's data, so
    given the flagged set the chance that any unchanged one is confirmed is at most
    `family_alpha`, and therefore at most `family_alpha` over the whole suite, whatever the
    screen did. A suite of 168 benchmarks in which the screen flags 2 confirms them at 97.5%."""
    return 1 - family_alpha / max(1, flagged)


def screen(est: Estimate, rule: Rule, confidence: float) -> str:
    """The first stage's verdict; 'regression' and 'improvement' are only candidates for confirmation."""
    return verdict(est.ratio(confidence), rule)


def confirm(est: Estimate, rule: Rule, confidence: float, strict: float) -> str:
    """The verdict of fresh worker pairs on a benchmark the screen flagged: a change stands only
    if it clears the margin at the strict level; 'unchanged' needs the usual interval within
    +-threshold; anything else is 'noisy' (flagged but not confirmed)."""
    strict_verdict = verdict(est.ratio(strict), rule)
    if strict_verdict in ("regression", "improvement"):
        return strict_verdict
    usual = verdict(est.ratio(confidence), rule)
    return "unchanged" if usual == "unchanged" else "noisy"


def spread(values: np.ndarray) -> float:
    """A robust spread of log-ratios: 1.4826 x the median absolute deviation (sigma for normal data)."""
    values = np.asarray(values, dtype=float)
    return float(1.4826 * np.median(np.abs(values - np.median(values)))) if values.size else float("nan")
