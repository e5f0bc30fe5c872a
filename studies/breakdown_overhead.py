"""Does --breakdown move the timed figures? Whole pytest runs of the same end-to-end benchmarks
alternate without and with the option (without, with, with, without, ...: drift cancels), and
per benchmark the timed medians of the with-runs are set against the without-runs', beside the
spread among the without-runs themselves (the machine's own between-process noise).

    .venv/bin/python studies/breakdown_overhead.py [--runs 3] [--level predict] [-m MARKERS] [pytest args]

Defaults: 3 runs each, --breakdown predict, -m "training and (lenet or vgg10 or lstm)" (about 40
minutes on 2 cores). Prints a Markdown table and the summary line docs/usage/breakdown.md quotes.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(level: str, markers: str, extra: list[str], out: Path) -> dict[str, float]:
    """One whole pytest process; the timed median of each benchmark it saved."""
    cmd = [sys.executable, "-m", "pytest", "benchmarks/e2e", "-m", markers, "--breakdown", level, "-q",
           "-p", "no:cacheprovider", "--benchmark-max-time=0.5", f"--benchmark-json={out}", *extra]
    subprocess.run(cmd, cwd=ROOT, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if not out.exists():
        sys.exit(f"breakdown_overhead: {' '.join(cmd)} saved no results")
    return {b["name"]: b["stats"]["median"] for b in json.loads(out.read_text())["benchmarks"]}


def geomean(xs: list[float]) -> float:
    return math.exp(statistics.mean(math.log(x) for x in xs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--level", default="predict", choices=("profile", "predict"))
    parser.add_argument("-m", dest="markers", default="training and (lenet or vgg10 or lstm)")
    args, extra = parser.parse_known_args()
    order = [("off", "with", "with", "off")[i % 4] for i in range(2 * args.runs)]
    results: dict[str, list[dict[str, float]]] = {"off": [], "with": []}
    with tempfile.TemporaryDirectory() as folder:
        for i, side in enumerate(order):
            level = "off" if side == "off" else args.level
            results[side].append(run(level, args.markers, extra, Path(folder) / f"{i}-{side}.json"))
            print(f"run {i + 1}/{len(order)}: {side}", file=sys.stderr)
    names = sorted(set.intersection(*(set(r) for rs in results.values() for r in rs)))
    print("| benchmark | without | with | with/without | spread without (max/min) | spread with |")
    print("|---|---|---|---|---|---|")
    ratios, spreads = [], []
    for name in names:
        off, on = [r[name] for r in results["off"]], [r[name] for r in results["with"]]
        ratio, spread = geomean(on) / geomean(off), max(off) / min(off)
        ratios.append(ratio)
        spreads.append(spread)
        print(f"| {name} | {geomean(off) * 1e3:.3g} ms | {geomean(on) * 1e3:.3g} ms | {ratio:.3f} | {spread:.2f} | "
              f"{max(on) / min(on):.2f} |")
    pairs = [r[n] / q[n] for r, q in zip(results["off"][1:], results["off"], strict=False) for n in names]
    between = f"{statistics.median(abs(math.log(x)) for x in pairs):.1%}" if pairs else "n/a (one run)"
    print(f"\ngeometric mean with/without {geomean(ratios):.3f}; median deviation "
          f"{statistics.median(abs(math.log(x)) for x in ratios):.1%}; between runs without: "
          f"{between}; outside their own without-runs' range: "
          f"{sum(max(r, 1 / r) > s for r, s in zip(ratios, spreads, strict=True))} of {len(ratios)}")


if __name__ == "__main__":
    main()
