"""Statistics of the paired gate: one log-ratio per trial (candidate burst against the baseline
burst taken a fraction of a second apart), trials nested in worker pairs.

Each worker pair is summarised by the median of its trials' log-ratios (robust to the odd trial
hit by another tenant). The pairs are the independent units: a pair carries between-process
effects (memory layout, allocator state, thread placement) that its trials cannot see, and on
small shared machines those effects dominate and are heavy-tailed: most pair medians agree
within a few percent, but a pair that a load episode hit can come out 2-3x slower on one side
(docs: the paired gate), and a mean over pairs with its bootstrap turned one such pair into an
interval of [0.98, 1.98] between identical environments.

The estimate is therefore the Hodges-Lehmann estimator over pairs (the median of the Walsh
averages (x_i + x_j) / 2, i <= j, of the M pair medians) with its exact confidence interval from
Wilcoxon's signed-rank distribution (Hollander, Wolfe & Chicken, "Nonparametric Statistical
Methods", 3rd ed., 3.2): distribution-free, 95% as efficient as the mean for normal data, and
one wild pair moves it by one rank only. The interval needs pair medians symmetric about the
true shift; between identical environments that holds exactly (swapping the sides of a pair
flips the sign of its log-ratio), so the A/A false-alarm rate is exact at any M. The price is
a minimum number of pairs: a two-sided level 1 - alpha is reachable only when 2 / 2^M <= alpha
(M >= 7 for 97%, 12 for the confirmation of 168 benchmarks, one-sided at 0.05 / 168); below that the
interval is unbounded and the verdict `noisy`.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from opbench.results.stats import Ratio, Rule, verdict

FAMILY_ALPHA = 0.05  # the suite-wide false-alarm budget of the two-stage rule


@functools.cache
def signed_rank_cdf(m: int) -> np.ndarray:
    """P(T+ <= t) for t = 0 .. m(m+1)/2, where T+ is Wilcoxon's signed-rank statistic of m
    observations symmetric about 0 (each of the 2^m sign patterns equally likely)."""
    counts = [1] + [0] * (m * (m + 1) // 2)
    for rank in range(1, m + 1):
        for total in range(len(counts) - 1, rank - 1, -1):
            counts[total] += counts[total - rank]
    return np.cumsum(np.array(counts, dtype=float)) / 2.0**m


def min_pairs(confidence: float) -> int:
    """The fewest pairs whose signed-rank interval reaches `confidence` (two-sided)."""
    return max(1, math.ceil(math.log2(2 / (1 - confidence))))


@dataclass(frozen=True)
class Estimate:
    """The log-ratio of one benchmark from its worker pairs' median trial log-ratios."""

    medians: np.ndarray  # one per worker pair
    trials: int

    @property
    def pairs(self) -> int:
        return int(self.medians.size)

    @functools.cached_property
    def walsh(self) -> np.ndarray:
        i, j = np.triu_indices(self.pairs)
        return np.sort((self.medians[i] + self.medians[j]) / 2)

    @property
    def log_ratio(self) -> float:
        return float(np.median(self.walsh))

    def log_interval(self, confidence: float) -> tuple[float, float]:
        """The exact signed-rank interval: [W(c), W(N + 1 - c)] of the N sorted Walsh averages,
        c the largest count with P(T+ < c) <= (1 - confidence) / 2; unbounded when even c = 1 is
        too few (too few pairs for this level)."""
        c = int(np.searchsorted(signed_rank_cdf(self.pairs), (1 - confidence) / 2, side="right"))
        if c == 0:
            return -math.inf, math.inf
        return float(self.walsh[c - 1]), float(self.walsh[self.walsh.size - c])

    def ratio(self, confidence: float) -> Ratio:
        """candidate / baseline with its two-sided interval at `confidence`."""
        low, high = self.log_interval(confidence)
        return Ratio(math.exp(self.log_ratio), math.exp(low), math.exp(high), (self.pairs, self.trials))


def estimate(pairs: list[np.ndarray]) -> Estimate:
    """From each worker pair's trial log-ratios."""
    pairs = [np.asarray(p, dtype=float) for p in pairs if len(p)]
    if not pairs:
        raise ValueError("no trials to estimate from")
    if not all(np.isfinite(p).all() for p in pairs):
        raise ValueError("a trial log-ratio is not finite")
    return Estimate(np.array([np.median(p) for p in pairs]), sum(p.size for p in pairs))


def confirm_confidence(flagged: int, family_alpha: float = FAMILY_ALPHA) -> float:
    """The two-sided level of the confirmation's strictest interval (the first step of `holm`):
    its lower end is the one-sided bound at family_alpha / flagged, so 1 - 0.1/168 for 168
    flagged, 95% for 2 and 90% for one."""
    return 1 - 2 * family_alpha / max(1, flagged)


def screen(est: Estimate, rule: Rule, confidence: float) -> str:
    """The first stage's verdict; 'regression' and 'improvement' are only candidates for confirmation."""
    return verdict(est.ratio(confidence), rule)


def p_value(est: Estimate, rule: Rule, direction: str) -> float:
    """The one-sided p-value of "a change in `direction` (the screen's verdict) by more than the
    margin": P(T+ <= b), b the Walsh averages on the wrong side of the margin, so that
    `est` is that change by `rule` at a two-sided level 1 - 2p; 1 when the point estimate does
    not clear the threshold in that direction."""
    sign = {"regression": 1.0, "improvement": -1.0}[direction]
    if sign * est.log_ratio <= math.log1p(rule.threshold):
        return 1.0
    wrong_side = int(np.sum(sign * est.walsh <= math.log1p(rule.margin)))
    return float(signed_rank_cdf(est.pairs)[wrong_side])


def holm(estimates: list[Estimate | None], rules: list[Rule], directions: list[str], confidence: float,
         family_alpha: float = FAMILY_ALPHA) -> list[tuple[str, float]]:
    """The confirmation's verdicts on the F benchmarks the screen flagged, from fresh worker
    pairs, with Holm's step-down: in order of `p_value`, the k-th (from 0) stands as a change in
    the screen's direction if it clears the margin one-sided at alpha / (F - k), i.e. with the
    two-sided interval at 1 - 2 alpha / (F - k); the first that does not stops the procedure. A
    benchmark not confirmed is 'unchanged' if its interval at the usual level lies within
    +-threshold, else 'noisy'. Returns (verdict, level of the interval to report).

    Why this keeps the suite-wide budget: each hypothesis is directional, fixed by the screen
    before the confirmation's data exist ("the change is at most the margin in the screened
    direction"), and the confirmation's data are independent of the screen's; so given the
    flagged set, the first unchanged benchmark the step-down reaches is tested at a level of at
    most alpha / F0 (F0 unchanged among the F), and any false alarm needs it to pass, which
    happens with probability at most F0 x alpha / F0. Holm confirms everything Bonferroni (alpha
    / F for all) does, and more when many changed; testing one side only halves every p-value
    against a two-sided test at no cost to the budget, since the other side was never a claim."""
    order = sorted(range(len(estimates)), key=lambda k: p_value(estimates[k], rules[k], directions[k])
                   if estimates[k] is not None else 2.0)
    out = [("noisy", confidence)] * len(estimates)
    going = True
    for step, k in enumerate(order):
        est, rule = estimates[k], rules[k]
        if est is None:
            continue
        level = 1 - 2 * family_alpha / (len(estimates) - step)
        if going and verdict(est.ratio(level), rule) == directions[k]:
            out[k] = (directions[k], level)
            continue
        going = False
        out[k] = ("unchanged" if verdict(est.ratio(confidence), rule) == "unchanged" else "noisy", confidence)
    return out


def spread(values: np.ndarray) -> float:
    """A robust spread of log-ratios: 1.4826 x the median absolute deviation (sigma for normal data)."""
    values = np.asarray(values, dtype=float)
    return float(1.4826 * np.median(np.abs(values - np.median(values)))) if values.size else float("nan")


def residuals(estimates: list[Estimate]) -> np.ndarray:
    """How pair medians scatter about their benchmark's own shift, pooled over `estimates`: each
    one's pair medians less its Hodges-Lehmann estimate, scaled by sqrt(M / (M - 1)) for the
    estimate's own fit to them."""
    out = [(e.medians - e.log_ratio) * math.sqrt(e.pairs / (e.pairs - 1)) for e in estimates if e.pairs > 1]
    return np.concatenate(out) if out else np.zeros(1)


def each_residuals(estimates: list[Estimate | None]) -> list[np.ndarray]:
    """Each benchmark's own `residuals`, for `holm_share`'s per-benchmark scatter; a benchmark
    without an estimate (or with a single pair) scatters as nothing, so only its shift counts."""
    return [residuals([e] if e is not None else []) for e in estimates]


def holm_share(scatter: np.ndarray | list[np.ndarray], change: float | np.ndarray, rules: list[Rule], pairs: int,
               family_alpha: float = FAMILY_ALPHA, draws: int = 200, seed: int = 0) -> float:
    """The expected share of the F = len(rules) flagged benchmarks that `holm` confirms on
    `pairs` fresh pairs when each truly changed by `change` (0.07: 7%; or one change per
    benchmark) in the screened direction and its pair medians scatter about that shift as
    `scatter` does (`residuals`: one pool for all, or a list of F, one per benchmark), drawn
    with random signs (symmetric, as between identical sides): simulated over `draws`
    confirmations, in chunks that bound the memory."""
    rng = np.random.default_rng(seed)
    f = len(rules)
    if f == 0 or pairs < 1:
        return 0.0
    shift = np.log1p(np.broadcast_to(np.asarray(change, dtype=float), (f,)))[:, None]
    chunk = max(1, 4_000_000 // (f * pairs * (pairs + 1) // 2))
    confirmed = 0
    for start in range(0, draws, chunk):
        d = min(chunk, draws - start)
        signs = rng.choice((-1.0, 1.0), (d, f, pairs))
        confirmed += int(holm_counts(shift + _scatter_draws(rng, scatter, d, f, pairs) * signs, rules,
                                     family_alpha).sum())
    return confirmed / (draws * f)


def _scatter_draws(rng: np.random.Generator, scatter: np.ndarray | list[np.ndarray], d: int, f: int,
                   pairs: int) -> np.ndarray:
    """(d, f, pairs) residuals drawn with replacement: from one pool, or benchmark b from scatter[b]."""
    if isinstance(scatter, np.ndarray):
        return rng.choice(scatter, (d, f, pairs))
    if len(scatter) != f:
        raise ValueError(f"holm_share: {len(scatter)} scatters for {f} benchmarks")
    return np.stack([rng.choice(s, (d, pairs)) for s in scatter], axis=1)


def holm_counts(medians: np.ndarray, rules: list[Rule], family_alpha: float = FAMILY_ALPHA) -> np.ndarray:
    """How many of F benchmarks `holm` confirms as regressions, for each of D confirmations at
    once: `medians` (D, F, M) holds each benchmark's M pair medians. The same one-sided
    p-values (`p_value`) and step-down, vectorized."""
    f, pairs = medians.shape[1:]
    i, j = np.triu_indices(pairs)
    walsh = (medians[..., i] + medians[..., j]) / 2
    margin = np.log1p([r.margin for r in rules])[:, None]
    threshold = np.log1p([r.threshold for r in rules])
    p = np.where(np.median(walsh, axis=-1) > threshold,
                 signed_rank_cdf(pairs)[np.sum(walsh <= margin, axis=-1)], 1.0)
    return np.cumprod(np.sort(p, axis=1) <= family_alpha / (f - np.arange(f)), axis=1).sum(axis=1)


def pairs_for_share(scatter: np.ndarray, change: float, rules: list[Rule], least: int, most: int, share: float = 0.9,
                    family_alpha: float = FAMILY_ALPHA) -> int | None:
    """The fewest confirmation pairs in [least, most] whose `holm_share` reaches `share`; None
    when even `most` do not (bisection: the share grows with the pairs)."""
    if holm_share(scatter, change, rules, most, family_alpha) < share:
        return None
    while least < most:
        mid = (least + most) // 2
        if holm_share(scatter, change, rules, mid, family_alpha) >= share:
            most = mid
        else:
            least = mid + 1
    return most
