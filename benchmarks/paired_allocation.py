"""Would the paired gate's confirmation do better with its pairs shared out per benchmark?

Today every flagged benchmark gets the same number of fresh pairs. The alternative studied here
fixes each benchmark's count before the confirmation from the screen's own estimate and spread
(so Holm's levels would still hold): a floor for all, the rest handed out one pair at a time to
the benchmark whose predicted power (normal approximation of the signed-rank test at Holm's
strictest level) rises most, at the same total of turns. Two checks on kept gate runs
(benchmarks/paired_quality.py --keep):

- how well the screen predicts the confirmation: rank correlation of each flagged benchmark's
  pair-median spread, and of its shift, between the two stages;
- a bootstrap of each run's confirmation: every benchmark's pair medians resampled at the count
  a design gives it, Holm over all of them, the mean number confirmed under each design.

    .venv/bin/python benchmarks/paired_allocation.py runs/
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from statistics import NormalDist

import numpy as np

from opbench.results import paired_stats as ps
from opbench.results.pairs import Plan, Record
from opbench.results.stats import Rule
from paired_quality import load_runs

EFFICIENCY = 0.955  # the signed-rank test's against the t-test for normal data
FLOOR_S = 0.005  # below this a screen's spread (few pairs) is not believed


def pair_medians(benchmark: dict, stage: str) -> np.ndarray:
    """One stage's pair medians, from the trials the gate itself used (Record.stage_pairs)."""
    return np.array([np.median(p) for p in Record(benchmark["id"], trials=benchmark["trials"]).stage_pairs(stage)])


def allocate(shift: np.ndarray, spread: np.ndarray, total: int, floor: int, rule: Rule,
             family_alpha: float = ps.FAMILY_ALPHA) -> np.ndarray:
    """Pairs per benchmark: `floor` each, then one at a time where the predicted power gains most."""
    z = NormalDist().inv_cdf(1 - family_alpha / len(shift))
    excess = np.maximum(np.abs(shift) - math.log1p(rule.margin), 0.0)
    scale = excess * math.sqrt(EFFICIENCY) / np.maximum(spread, FLOOR_S)

    def power(k: int, m: int) -> float:
        return NormalDist().cdf(scale[k] * math.sqrt(m) - z)

    counts = np.full(len(shift), floor)
    for _ in range(max(0, total - int(counts.sum()))):
        gains = [power(k, counts[k] + 1) - power(k, counts[k]) if counts[k] < Plan.max_pairs else -1.0
                 for k in range(len(shift))]
        k = int(np.argmax(gains))
        if gains[k] < 0:
            break
        counts[k] += 1
    return counts


def rank_correlation(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rho (no ties expected in timings)."""
    return float(np.corrcoef(np.argsort(np.argsort(a)), np.argsort(np.argsort(b)))[0, 1])


def study(run: dict, floors: list[int], resamples: int, rng: np.random.Generator) -> None:
    rule = Rule()
    flagged = [b for b in run["paired"]["benchmarks"] if any(t["stage"] == "confirm" for t in b["trials"])]
    if len(flagged) < 5:
        return
    screen = [pair_medians(b, "screen") for b in flagged]
    confirm = [pair_medians(b, "confirm") for b in flagged]
    count = min(c.size for c in confirm)
    shift = np.array([ps.Estimate(m, m.size).log_ratio for m in screen])
    spread = np.array([ps.spread(m) for m in screen])
    directions = ["regression" if s > 0 else "improvement" for s in shift]
    rho_spread = rank_correlation(spread, np.array([ps.spread(c) for c in confirm]))
    rho_shift = rank_correlation(shift, np.array([np.median(c) for c in confirm]))
    designs = {f"same {count}": np.full(len(flagged), count)}
    for floor in floors:
        counts = allocate(shift, spread, count * len(flagged), min(floor, count), rule)
        designs[f"floor {min(floor, count)}, {counts.min()}-{counts.max()}"] = counts
    confirmed = {}
    for name, counts in designs.items():
        got = []
        for _ in range(resamples):
            ests = [ps.Estimate(rng.choice(c, n), n) for c, n in zip(confirm, counts, strict=True)]
            verdicts = ps.holm(ests, [rule] * len(ests), directions, run["paired"]["plan"]["confidence"])
            got.append(sum(v == d for (v, _), d in zip(verdicts, directions, strict=True)))
        confirmed[name] = float(np.mean(got))
    print(f"{Path(run['name']).parent.name}/{Path(run['name']).name} ({100 * run['slowdown']:g}%): "
          f"{len(flagged)} flagged; screen->confirmation rank correlation: spread {rho_spread:.2f}, "
          f"shift {rho_shift:.2f}; mean confirmed: "
          + ", ".join(f"{name}: {n:.1f}" for name, n in confirmed.items()), flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folders", nargs="+", type=Path, help="folders of kept gate runs (paired_quality.py --keep)")
    p.add_argument("--floor", default="14,21", help="pairs every flagged benchmark keeps, one design each")
    p.add_argument("--resamples", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    rng = np.random.default_rng(a.seed)
    for run in load_runs(a.folders):
        study(run, [int(f) for f in a.floor.split(",") if f], a.resamples, rng)


if __name__ == "__main__":
    main()
