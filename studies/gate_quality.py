"""How good is the regression gate? Its false-positive rate (A/A) and its sensitivity to a real
slowdown, measured on this machine with real benchmark runs.

It runs the selected benchmarks POOL times as the baseline and SLOW times with an injected
slowdown (OPBENCH_INJECT_SLOWDOWN: every timed call does extra work worth that fraction of the operation's
own time), in a shuffled order so that drift hits both kinds, then, for every K in --runs and
every confidence in --confidence:
- A/A: SPLITS random splits of the baseline pool into two disjoint sides of K runs each, compared
  with `opbench compare`'s statistics; counts the comparisons in which no benchmark was flagged;
- sensitivity: SPLITS comparisons of K random baseline runs against K random slowed runs; the
  share of benchmarks flagged as regressions.
The splits reuse the same pool of runs, so they are not independent comparisons: the figures are
estimates, stated with K, the margins and the pool. With fewer than 2K baseline runs only the
sensitivity is evaluated (e.g. `--pool 7 --slow 7 --runs 7 --max-time 0`: the one comparison
that `upgrade-check --design process` makes, with its wall time). `--keep DIR` keeps the runs
and their wall times; `--from DIR ...` analyses kept runs again (any number of folders, e.g. from
several sessions) without running.

    .venv/bin/python studies/gate_quality.py --runs 7 --pool 14 --keep runs/ -- benchmarks/ops -m forward
    .venv/bin/python studies/gate_quality.py --from runs/ --runs 5,7,10 --confidence 95,99
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

from opbench.results.compare import STATISTICS, compare
from opbench.results.stats import Rule
from opbench.results.store import Run, load_run
from opbench.testing.inject import ENV as INJECT
from opbench.testing.inject import PLUGIN as INJECT_PLUGIN

FLAGGED = ("regression", "improvement")


def run_pytest(args: list[str], out: Path, slowdown: float) -> float:
    """One pytest run saved to `out`; returns its wall time in seconds."""
    env = {**os.environ, INJECT: str(slowdown)}
    cmd = [sys.executable, "-m", "pytest", "-p", INJECT_PLUGIN, *args, f"--benchmark-json={out}", "-q",
           "-p", "no:cacheprovider"]
    start = time.monotonic()
    subprocess.run(cmd, env=env, check=False, stdout=subprocess.DEVNULL)
    if not out.exists():
        sys.exit(f"gate_quality: the run {out.name} saved nothing")
    return time.monotonic() - start


def collect(a, folder: Path) -> None:
    """Run the pool and the slowed runs in a shuffled order, saving base-NN.json / slow-NN.json."""
    folder.mkdir(parents=True, exist_ok=True)
    order = ["base"] * a.pool + ["slow"] * a.slow
    np.random.default_rng(0).shuffle(order)
    walls = {}
    for i, kind in enumerate(order):
        name = f"{kind}-{i:02d}"
        walls[name] = run_pytest(a.pytest_args, folder / f"{name}.json", a.slowdown if kind == "slow" else 0.0)
        print(f"run {i + 1}/{len(order)}: {kind}, {walls[name]:.0f} s", flush=True)
        (folder / "walls.json").write_text(json.dumps(walls, indent=1))


def wall_minutes(folders: list[Path]) -> list[float]:
    """The kept runs' wall times in minutes (runs kept before walls.json existed have none)."""
    walls = [json.loads(f.joinpath("walls.json").read_text()) for f in folders if f.joinpath("walls.json").exists()]
    return [s / 60 for w in walls for s in w.values()]


def load(folders: list[Path]) -> tuple[list[Run], list[Run]]:
    base = [load_run(p) for f in folders for p in sorted(f.glob("base-*.json"))]
    slow = [load_run(p) for f in folders for p in sorted(f.glob("slow-*.json"))]
    return base, slow


def evaluate(base: list[Run], slow: list[Run], k: int, rule: Rule, statistic: str, confidence: float,
             splits: int) -> dict:
    r = np.random.default_rng(1)
    clean, fp_rates, sensitivity = 0, [], []
    false_alarms: Counter[str] = Counter()
    misses: Counter[str] = Counter()
    aa_possible = 2 * k <= len(base)
    for _ in range(splits):
        idx = r.permutation(len(base))
        if aa_possible:
            aa = compare([base[i] for i in idx[:k]], [base[i] for i in idx[k : 2 * k]], rule,
                         statistic=statistic, confidence=confidence)
            flagged = [row.name for row in aa.rows if row.verdict in FLAGGED]
            false_alarms.update(flagged)
            clean += not flagged
            fp_rates.append(len(flagged) / len(aa.rows))
        ab = compare([base[i] for i in r.choice(len(base), k, replace=False)],
                     [slow[i] for i in r.choice(len(slow), k, replace=False)], rule,
                     statistic=statistic, confidence=confidence)
        sensitivity.append(ab.count("regression") / len(ab.rows))
        misses.update(row.name for row in ab.rows if row.verdict != "regression")
    return {
        "k": k, "statistic": statistic, "confidence": confidence, "benchmarks": len(ab.rows),
        "aa_comparisons_with_no_flag": clean if aa_possible else None,
        "aa_mean_flagged_share": float(np.mean(fp_rates)) if aa_possible else None,
        "sensitivity_mean_flagged_share": float(np.mean(sensitivity)),
        "sensitivity_min_flagged_share": float(np.min(sensitivity)),
        "most_false_alarms": false_alarms.most_common(10), "most_missed": misses.most_common(10),
    }


def numbers(text: str, kind=float) -> list:
    return [kind(v) for v in text.split(",") if v.strip()]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", default="7", help="K, runs per side in each comparison (comma list)")
    p.add_argument("--pool", type=int, default=14, help="baseline runs to draw A/A splits from (>= 2K)")
    p.add_argument("--slow", type=int, help="slowed runs (default: the largest K)")
    p.add_argument("--splits", type=int, default=20)
    p.add_argument("--slowdown", type=float, default=0.10)
    p.add_argument("--margin", type=float, default=3.0)
    p.add_argument("--threshold", type=float, default=5.0)
    p.add_argument("--statistic", default=",".join(STATISTICS), help="per-run statistics to evaluate (comma list)")
    p.add_argument("--confidence", default="95", help="interval confidences in percent (comma list)")
    p.add_argument("--max-time", type=float, default=0.1,
                   help="--benchmark-max-time of each run (0: pytest-benchmark's own, as upgrade-check runs)")
    p.add_argument("--out", default="gate_quality.json")
    p.add_argument("--keep", help="keep the runs' JSON files in this folder (default: a temporary one)")
    p.add_argument("--from", dest="source", nargs="+", type=Path, help="analyse runs kept earlier; run nothing")
    p.add_argument("pytest_args", nargs="*", default=["benchmarks/ops", "-m", "forward"])
    a = p.parse_args()
    ks = numbers(a.runs, int)
    a.slow = a.slow or max(ks)
    if a.max_time:
        a.pytest_args = [*a.pytest_args, f"--benchmark-max-time={a.max_time:g}"]
    rule = Rule(margin=a.margin / 100, threshold=a.threshold / 100)
    with tempfile.TemporaryDirectory(prefix="opbench-gate-") as scratch:
        folders = a.source or [Path(a.keep or scratch)]
        if not a.source:
            collect(a, folders[0])
        base, slow = load(folders)
        walls = wall_minutes(folders)
    results = []
    for k in ks:
        if k > len(base) or k > len(slow):
            print(f"K={k}: needs {k} baseline and {k} slowed runs, have {len(base)} and {len(slow)}; skipped")
            continue
        for statistic in a.statistic.split(","):
            for confidence in numbers(a.confidence):
                res = evaluate(base, slow, k, rule, statistic, confidence / 100, a.splits)
                results.append(res)
                clean = res["aa_comparisons_with_no_flag"]
                aa_text = (f"A/A no flag in {clean:2d} of {a.splits} (target 19)" if clean is not None
                           else "no A/A (pool < 2K)")
                print(f"K={k:2d} {statistic:6s} {confidence:g}%: {aa_text}, sensitivity "
                      f"{res['sensitivity_mean_flagged_share']:.1%} of {res['benchmarks']} for a "
                      f"{a.slowdown:.0%} slowdown (target 90%)", flush=True)
    if walls:
        print(f"wall: {len(walls)} pytest runs, {np.min(walls):.1f}-{np.max(walls):.1f} min each, "
              f"{sum(walls):.1f} min in all")
    summary = {"pool": len(base), "slowed": len(slow), "splits": a.splits, "slowdown": a.slowdown,
               "margin_pct": a.margin, "threshold_pct": a.threshold, "results": results}
    Path(a.out).write_text(json.dumps(summary, indent=2))
    print(f"details in {a.out}")


if __name__ == "__main__":
    main()
