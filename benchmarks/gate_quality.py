"""How good is the regression gate? Its false-positive rate (A/A) and its sensitivity to a real
slowdown, measured on this machine with real benchmark runs.

It runs the selected benchmarks POOL times as the baseline and K times with an injected slowdown
(OPBENCH_INJECT_SLOWDOWN: every timed call spins for that fraction of the operation's own time),
alternating, then:
- A/A: SPLITS random splits of the baseline pool into two sides of K runs each, compared with
  `opbench compare`'s statistics; counts the comparisons in which no benchmark was flagged;
- sensitivity: SPLITS random K-run baselines against the slowed runs; the share of benchmarks
  flagged as regressions.
The splits reuse the same pool of runs, so they are not independent comparisons: the figures are
estimates, stated with K, the margins and the pool.

    .venv/bin/python benchmarks/gate_quality.py --runs 3 --pool 6 -- benchmarks/ops -m forward
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

import numpy as np

from opbench.compare import compare
from opbench.measure import INJECT
from opbench.results import load_run
from opbench.stats import Rule


def run_pytest(args: list[str], out: Path, slowdown: float) -> Path:
    env = {**os.environ, INJECT: str(slowdown)}
    cmd = [sys.executable, "-m", "pytest", *args, f"--benchmark-json={out}", "-q", "-p", "no:cacheprovider"]
    subprocess.run(cmd, env=env, check=False, stdout=subprocess.DEVNULL)
    if not out.exists():
        sys.exit(f"gate_quality: the run {out.name} saved nothing")
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=3, help="K: runs per side in each comparison")
    p.add_argument("--pool", type=int, default=6, help="baseline runs to draw A/A splits from (>= 2K)")
    p.add_argument("--splits", type=int, default=20)
    p.add_argument("--slowdown", type=float, default=0.10)
    p.add_argument("--margin", type=float, default=3.0)
    p.add_argument("--threshold", type=float, default=5.0)
    p.add_argument("--out", default="gate_quality.json")
    p.add_argument("--keep", help="keep the runs' JSON files in this folder (default: a temporary one)")
    p.add_argument("pytest_args", nargs="*", default=["benchmarks/ops", "-m", "forward"])
    a = p.parse_args()
    args = [*a.pytest_args, "--benchmark-max-time=0.1"]
    rule = Rule(margin=a.margin / 100, threshold=a.threshold / 100)
    with tempfile.TemporaryDirectory(prefix="opbench-gate-") as scratch:
        tmp = a.keep or scratch
        Path(tmp).mkdir(parents=True, exist_ok=True)
        base, slow = [], []
        order = ["base"] * a.pool + ["slow"] * a.runs
        np.random.default_rng(0).shuffle(order)  # interleave, so that drift hits both kinds
        for i, kind in enumerate(order):
            print(f"run {i + 1}/{len(order)}: {kind}", flush=True)
            target = base if kind == "base" else slow
            target.append(load_run(run_pytest(args, Path(tmp) / f"{kind}-{i:02d}.json",
                                              a.slowdown if kind == "slow" else 0.0)))
    r = np.random.default_rng(1)
    clean, fp_rates, sensitivity = 0, [], []
    false_alarms: Counter[str] = Counter()
    misses: Counter[str] = Counter()
    for _ in range(a.splits):
        idx = r.permutation(len(base))
        aa = compare([base[i] for i in idx[: a.runs]], [base[i] for i in idx[a.runs : 2 * a.runs]], rule)
        flagged = aa.count("regression") + aa.count("improvement")
        false_alarms.update(row.name for row in aa.rows if row.verdict in ("regression", "improvement"))
        clean += flagged == 0
        fp_rates.append(flagged / len(aa.rows))
        ab = compare([base[i] for i in r.choice(len(base), a.runs, replace=False)], slow, rule)
        sensitivity.append(ab.count("regression") / len(ab.rows))
        misses.update(row.name for row in ab.rows if row.verdict != "regression")
    summary = {
        "k": a.runs, "pool": a.pool, "splits": a.splits, "slowdown": a.slowdown, "margin_pct": a.margin,
        "threshold_pct": a.threshold, "benchmarks": len(aa.rows), "pytest_args": args,
        "aa_comparisons_with_no_flag": clean, "aa_mean_flagged_share": float(np.mean(fp_rates)),
        "sensitivity_mean_flagged_share": float(np.mean(sensitivity)),
        "sensitivity_min_flagged_share": float(np.min(sensitivity)),
        "most_false_alarms": false_alarms.most_common(10),
        "most_missed": misses.most_common(10),
    }
    Path(a.out).write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    print(f"\nA/A: no benchmark flagged in {clean} of {a.splits} comparisons (target: 19 of 20)")
    print(f"sensitivity: {np.mean(sensitivity):.0%} of {len(ab.rows)} benchmarks flagged for a "
          f"{a.slowdown:.0%} slowdown (target: 90%)")


if __name__ == "__main__":
    main()
