"""Do a case's figures depend on what ran before it? The same end-to-end benchmarks, three ways:

- alone: each case in a pytest process of its own (the reference: nothing ran before it);
- mixed: every case in one pytest process, frameworks after one another (opbench before --isolate);
- isolated: `--isolate framework`, each framework's cases in a worker of their own (`make bench`).

Each way runs `--runs` times, alternating the order of the ways (drift cancels). Per case it
prints the timed median and the peak resident set of each way against alone's, beside alone's
own spread between its runs (max/min of its medians): a ratio outside that spread depends on the
order. The memory column is the case's peak_rss_bytes (the process's high-water mark over the
case's timed rounds, reset before them where the kernel allows: opbench.harness.memory).

    .venv/bin/python studies/isolation_order.py [--runs 2] [--path benchmarks/e2e] [-m MARKERS]
        [--alone case|framework] [--out FILE] [pytest args]

With `--alone framework`, alone is each framework's cases in a pytest process of their own (the
issue's "each framework alone"), for selections too many to start a process per case: the quick
operators,

    .venv/bin/python studies/isolation_order.py --runs 3 --alone framework --path benchmarks/ops \
        -m "forward and (gemm or relu or conv2d or maxpool2d or batch_norm or flatten or zeros)"

With `--against SAVED.json` (a saved run: `make bench`'s autosave under .benchmarks/), the full
run is that one: each of its cases the selection holds runs alone `--runs` times, and the table
gives the saved median and peak resident set against alone's (the done-when of a full run whose
per-case memory does not depend on what ran before it).

How many cases lie outside alone's spread when the order does nothing is itself random: with 3
runs a way's geometric mean lands outside alone's 3 medians now and then by chance. So beside the
count the study gives what no order effect would give: for each case, every relabelling of its
runs between alone and the other way (within each run, where the two ran side by side; equally
likely when the order does nothing) gives the chance that the ratio lands outside the spread;
their sum is the count expected by chance, and the Poisson-binomial tail over the cases is the
chance of at least the count observed. A count well inside that distribution is no evidence of an
order effect; a small tail probability is.
`--from FILE` reads an earlier study's `--out` file and prints its tables again, runs nothing.

Defaults: 2 runs, benchmarks/e2e, -m "resnet20 and training and not amp" (each framework's
ResNet-20 training step in its plain and compiled modes; about 25 minutes on 2 cores). Every way's
figures are printed as it ends and appended to --out (JSON lines), so an interrupted study keeps
what it measured; the Markdown table follows the last run. The processes share one folder of kept
emulations (OPBENCH_REFERENCE_CACHE, as make sets): the check's references are made once, never
in a timed round.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WAYS = ("alone", "mixed", "isolated")


def pytest(path: str, args: list[str], out: Path) -> dict[str, tuple[float, float, float]]:
    """One pytest run of `path` (a folder, or one node id) saving `out`: each benchmark's (median
    s, peak RSS bytes, peak less the mapped files' pages)."""
    cmd = [sys.executable, "-m", "pytest", path, "-q", "-p", "no:cacheprovider",
           "--benchmark-max-time=0.5", f"--benchmark-json={out}", *args]
    subprocess.run(cmd, cwd=ROOT, check=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=3600)
    if not out.exists():
        sys.exit(f"isolation_order: {' '.join(cmd)} saved no results")
    return figures(out)


def figures(saved: Path) -> dict[str, tuple[float, float, float]]:
    """A saved run's benchmarks: each one's (median s, peak RSS bytes, peak less the mapped files'
    pages in bytes: NaN where the run did not save it)."""
    return {b["name"]: (b["stats"]["median"], b["extra_info"].get("peak_rss_bytes") or math.nan,
                        b["extra_info"].get("peak_anon_bytes") or math.nan)
            for b in json.loads(saved.read_text())["benchmarks"]}


def collect(path: str, markers: str, extra: list[str]) -> list[str]:
    """The node ids the selection holds, in pytest's order."""
    listed = subprocess.run([sys.executable, "-m", "pytest", path, "-q", "--co", "-p", "no:cacheprovider",
                             "-m", markers, *extra], cwd=ROOT, check=False, capture_output=True, text=True, timeout=600)
    ids = [line for line in listed.stdout.splitlines() if "::" in line]
    if not ids:
        sys.exit(f"isolation_order: -m {markers!r} selects nothing ({listed.stdout.strip()[-300:]})")
    return ids


def alone(ids: list[str], extra: list[str], folder: Path, run: int) -> dict:
    """Each node in a pytest process of its own (with its folder beside it, pytest would run the folder)."""
    found = {}
    for i, node in enumerate(ids):
        found |= pytest(node, extra, folder / f"{run}-alone-{i}.json")
    return found


def frameworks_alone(ids: list[str], path: str, markers: str, extra: list[str], folder: Path, run: int) -> dict:
    """Each framework's cases of the selection in a pytest process of their own (its marker added
    to the selection), frameworks one after another."""
    from opbench.harness.config import FRAMEWORKS

    found = {}
    for framework in FRAMEWORKS:
        if any(f"[{framework}-" in node for node in ids):
            found |= pytest(path, ["-m", f"({markers}) and {framework}", *extra],
                            folder / f"{run}-alone-{framework}.json")
    return found


def one_way(way: str, ids: list[str], path: str, markers: str, extra: list[str], folder: Path, run: int,
            by: str = "case") -> dict:
    if way == "alone":
        return alone(ids, extra, folder, run) if by == "case" else frameworks_alone(ids, path, markers, extra,
                                                                                      folder, run)
    isolate = ["--isolate", "framework"] if way == "isolated" else []
    return pytest(path, ["-m", markers, *isolate, *extra], folder / f"{run}-{way}.json")


def geomean(xs: list[float]) -> float:
    return math.exp(statistics.mean(math.log(x) for x in xs))


def outside(alone: list[float], other: list[float]) -> bool:
    """Whether `other`'s geometric mean over alone's lies outside alone's spread (max/min)."""
    ratio = geomean(other) / geomean(alone)
    return max(ratio, 1 / ratio) > max(alone) / min(alone)


def outside_by_chance(alone: list[float], other: list[float]) -> float:
    """The chance that the case lies outside alone's spread if the order does nothing. The ways run
    side by side in each run (their order alternated), so what drifts between runs moves both; with
    no order effect the two medians of a run are exchangeable, and each of the 2^runs ways of
    swapping them is as likely as the one observed (exact, over all of them)."""
    relabellings = list(itertools.product((False, True), repeat=len(alone)))
    hits = 0
    for swapped in relabellings:
        runs = [(b, a) if swap else (a, b) for a, b, swap in zip(alone, other, swapped, strict=True)]
        hits += outside([a for a, _ in runs], [b for _, b in runs])
    return hits / len(relabellings)


def at_least(chances: list[float], count: int) -> float:
    """P(at least `count` of independent events with these chances happen): the Poisson-binomial tail."""
    dist = [1.0]  # dist[j]: P(j events among those seen so far)
    for p in chances:
        dist = [(dist[j] if j < len(dist) else 0.0) * (1 - p) + (dist[j - 1] * p if j else 0.0)
                for j in range(len(dist) + 1)]
    return sum(dist[count:])


def against(saved_path: Path, ids: list[str], runs: int, extra: list[str]) -> None:
    """Each case of the saved run that `ids` holds, alone `runs` times: the saved figures over alone's."""
    try:
        saved = figures(saved_path)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        sys.exit(f"isolation_order: {saved_path} is not a saved run ({type(exc).__name__}: {exc})")
    ids = [node for node in ids if node.split("::")[-1] in saved]
    if not ids:
        sys.exit(f"isolation_order: the selection holds none of {saved_path}'s {len(saved)} benchmarks")
    print(f"isolation_order: {len(ids)} cases of {saved_path.name}, each alone {runs} times",
          file=sys.stderr, flush=True)
    found: dict[str, list[tuple[float, float, float]]] = {}
    os.environ.setdefault("OPBENCH_REFERENCE_CACHE", str(ROOT / ".cache" / "references"))  # make's, kept
    with tempfile.TemporaryDirectory() as folder:
        for run in range(runs):
            for name, figured in alone(ids, extra, Path(folder), run).items():
                found.setdefault(name, []).append(figured)
    print("| benchmark | alone median | alone spread | saved/alone | peak RSS alone | saved | saved/alone "
          "| less files, alone | saved | saved/alone |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    within = {"peak": 0, "less files": 0}
    has = {"peak": 0, "less files": 0}  # cases with the figure on both sides (older runs lack the second)
    for name in sorted(found):
        medians = [figured[0] for figured in found[name]]
        spread = max(medians) / min(medians)
        cells = []
        for kind, at in (("peak", 1), ("less files", 2)):
            peak = max(figured[at] for figured in found[name])
            ratio = saved[name][at] / peak
            within[kind] += abs(ratio - 1) <= 0.10
            has[kind] += not math.isnan(ratio)
            cells.append(f"{peak / 2**20:,.0f} MiB | {saved[name][at] / 2**20:,.0f} MiB | {ratio:.2f}"
                         if not math.isnan(ratio) else "- | - | -")
        print(f"| {name} | {geomean(medians) * 1e3:.3g} ms | {spread:.2f} | {saved[name][0] / geomean(medians):.3f} | "
              f"{' | '.join(cells)} |")
    print(f"\npeak within 10% of alone's: {within['peak']} of {has['peak']}; the peak less the mapped files' "
          f"pages: {within['less files']} of {has['less files']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--path", default="benchmarks/e2e")
    parser.add_argument("-m", dest="markers", default="resnet20 and training and not amp")
    parser.add_argument("--alone", choices=("case", "framework"), default="case",
                        help="alone: each case in a process of its own, or each framework's cases")
    parser.add_argument("--out", type=Path, help="append every way's figures here as they land (JSON lines)")
    parser.add_argument("--against", type=Path, help="a saved run: its cases against each alone, not the three ways")
    parser.add_argument("--from", dest="source", type=Path, help="an earlier --out file: its tables, nothing run")
    args, extra = parser.parse_known_args()
    if args.source:
        return table(kept(args.source))
    ids = collect(args.path, args.markers, extra)
    if args.against:
        return against(args.against, ids, args.runs, extra)
    print(f"isolation_order: {len(ids)} cases, {args.runs} runs of {', '.join(WAYS)}", file=sys.stderr, flush=True)
    results: dict[str, list[dict]] = {way: [] for way in WAYS}
    start = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        os.environ.setdefault("OPBENCH_REFERENCE_CACHE", str(Path(folder) / "references"))
        for run in range(args.runs):
            for way in (WAYS if run % 2 == 0 else WAYS[::-1]):
                found = one_way(way, ids, args.path, args.markers, extra, Path(folder), run, args.alone)
                results[way].append(found)
                if args.out:
                    with args.out.open("a", encoding="utf-8") as out:
                        out.write(json.dumps({"run": run, "way": way, "results": found}) + "\n")
                print(f"run {run + 1}/{args.runs}, {way} ({time.monotonic() - start:.0f} s): "
                      + ", ".join(f"{name} {median * 1e3:.3g} ms" for name, (median, _) in sorted(found.items())),
                      file=sys.stderr, flush=True)
    table(results)


def kept(source: Path) -> dict[str, list[dict]]:
    """An --out file's runs, by way."""
    results: dict[str, list[dict]] = {way: [] for way in WAYS}
    try:
        for line in source.read_text(encoding="utf-8").splitlines():
            record = json.loads(line)
            results[record["way"]].append({name: tuple(fig) for name, fig in record["results"].items()})
    except (OSError, ValueError, KeyError, TypeError) as exc:
        sys.exit(f"isolation_order: {source} is not a study's --out file ({type(exc).__name__}: {exc})")
    if not all(results.values()):
        sys.exit(f"isolation_order: {source} lacks a way ({', '.join(w for w, r in results.items() if not r)})")
    return results


def table(results: dict[str, list[dict]]) -> None:
    """The Markdown table of the three ways, and how many cases lie outside alone's spread against
    how many would by chance. Runs that not every way finished (an interrupted study) are left out."""
    complete = min(len(runs) for runs in results.values())
    results = {way: runs[:complete] for way, runs in results.items()}
    names = sorted(set.intersection(*(set(r) for rs in results.values() for r in rs)))
    print("| benchmark | alone median | alone spread | mixed/alone | isolated/alone | peak RSS alone | mixed "
          "| isolated |")
    print("|---|---|---|---|---|---|---|---|")
    found = {"mixed": 0, "isolated": 0}
    chances: dict[str, list[float]] = {"mixed": [], "isolated": []}
    for name in names:
        medians = {way: [r[name][0] for r in results[way]] for way in WAYS}
        rss = {way: max(r[name][1] for r in results[way]) for way in WAYS}
        spread = max(medians["alone"]) / min(medians["alone"])
        ratio = {way: geomean(medians[way]) / geomean(medians["alone"]) for way in ("mixed", "isolated")}
        for way in ratio:
            found[way] += outside(medians["alone"], medians[way])
            chances[way].append(outside_by_chance(medians["alone"], medians[way]))
        print(f"| {name} | {geomean(medians['alone']) * 1e3:.3g} ms | {spread:.2f} | {ratio['mixed']:.3f} | "
              f"{ratio['isolated']:.3f} | {rss['alone'] / 2**20:,.0f} MiB | {rss['mixed'] / 2**20:,.0f} MiB | "
              f"{rss['isolated'] / 2**20:,.0f} MiB |")
    print()
    for way in ("mixed", "isolated"):
        print(f"{way}: {found[way]} of {len(names)} outside alone's own spread; by chance (no order effect) "
              f"{sum(chances[way]):.1f} expected, at least {found[way]} with probability "
              f"{at_least(chances[way], found[way]):.2f}")


if __name__ == "__main__":
    main()
