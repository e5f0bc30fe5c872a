"""How good is the paired gate (opbench ab / upgrade-check --design paired)? Real gate runs on
this machine: A/A runs (both workers in this environment) count the runs that flag nothing;
runs with an injected slowdown on the candidate only (OPBENCH_INJECT_SLOWDOWN) give the share
of benchmarks flagged as regressions. With --load, a bounded busy loop on one core competes for
part of every run (a tenant's load episode). Every run's paired.json is kept under --keep, and
--from re-analyses kept runs: the verdicts, the wall time of each gate run, and which per-trial
metric (fastest round, mean wall time, mean CPU time) spreads least between A/A trials, and
how the spread of the pair medians falls with the trials per pair (what more trials would buy);
for each slowdown run, the share of its confirmed benchmarks the gate's power statement predicts
from the screen's scatter of pair medians (and from the confirmation's own) beside the share Holm
confirmed, and the share predicted at the change each benchmark showed. With --both F, both sides
carry an injected slowdown F and the candidate its --slow on top, compounded (a control: what the
injection does beside its own duration then sits on both sides, and the relative change is the
--slow asked).

    .venv/bin/python studies/paired_quality.py --aa 2 --slow 0.10,0.07 --keep runs/ \
        -- benchmarks/ops -m "torch and forward"
    .venv/bin/python studies/paired_quality.py --from runs/
"""

from __future__ import annotations

import argparse
import itertools
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from opbench.regression import intervals as ps
from opbench.regression.coordinator import Record
from opbench.regression.intervals import spread
from opbench.results.stats import Rule
from opbench.testing.inject import ENV as INJECT
from opbench.testing.inject import PLUGIN as INJECT_PLUGIN

FLAGGED = ("regression", "improvement")
METRICS = {"fastest round": "log_ratio", "mean wall": "mean_log_ratio", "mean CPU": "cpu_log_ratio"}


def busy_loop(seconds: float) -> subprocess.Popen:
    """A competing tenant: one core spinning for `seconds`."""
    code = f"import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"
    return subprocess.Popen([sys.executable, "-c", code])


def compounded(slowdown: float, both: float) -> float:
    """What the candidate's calls carry: `both`, and `slowdown` on top of it."""
    return (1 + both) * (1 + slowdown) - 1


def injections(slowdown: float, both: float) -> list[str]:
    """opbench ab's options for a relative slowdown of the candidate by `slowdown`, over a
    slowdown `both` of both sides: the baseline gets `both`, the candidate both compounded."""
    candidate = compounded(slowdown, both)
    return [*(["--baseline-env", f"{INJECT}={both:.6g}"] if both else []),
            *(["--candidate-env", f"{INJECT}={candidate:.6g}"] if candidate else [])]


def gate_run(a, folder: Path, slowdown: float, seed: int) -> None:
    """One `opbench ab` run into `folder`, with the slowdown on the candidate (over --both's on both)."""
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "opbench", "ab", "--baseline-python", sys.executable, "--candidate-python",
           sys.executable, "--workdir", str(folder), "--seed", str(seed), *a.gate_args.split(),
           *injections(slowdown, a.both), "--", "-p", INJECT_PLUGIN, *a.pytest_args]
    load = None
    start = time.monotonic()
    if a.load:
        load = busy_loop(a.load)
    with open(folder / "gate.log", "w") as log:
        code = subprocess.run(cmd, stdout=log, stderr=subprocess.STDOUT, check=False).returncode
    if load is not None:
        load.kill()
    (folder / "run.json").write_text(json.dumps({"slowdown": slowdown, "both": a.both, "exit": code,
                                                 "load_s": a.load, "wall_s": time.monotonic() - start}))
    print(f"{folder.name}: slowdown {slowdown:g}{over(a.both)}, exit {code}, {time.monotonic() - start:.0f} s",
          flush=True)


def over(both: float) -> str:
    """How a run's label names the slowdown on both sides (nothing when there is none)."""
    return f" over {100 * both:g}% on both sides" if both else ""


def load_runs(folders: list[Path]) -> list[dict]:
    runs = []
    for folder in folders:
        for meta in sorted(folder.glob("*/run.json")):
            logs = sorted(meta.parent.glob("results-*/paired.json"))
            if logs:
                candidate = logs[-1].parent / "candidate.json"
                runs.append({**json.loads(meta.read_text()), "paired": json.loads(logs[-1].read_text()),
                             "candidate": json.loads(candidate.read_text()) if candidate.exists() else {},
                             "name": str(meta.parent)})
    return runs


def shown(benchmark: dict) -> float:
    """The change a benchmark showed the gate: its median trial ratio, less 1."""
    return float(np.expm1(np.median([t["log_ratio"] for t in benchmark["trials"]])))


def injected(group: list[dict], both: float = 0.0) -> None:
    """The slowdown the gate saw (each benchmark's median trial ratio) beside the one the
    injection measured when it sized its extra work (the candidate's: over `both`, compounded)."""
    seen = [shown(b) for r in group for b in r["paired"]["benchmarks"] if b["trials"]]
    sized = [b["extra_info"]["injected_measured"] for r in group for b in r.get("candidate", {}).get("benchmarks", [])
             if "injected_measured" in b.get("extra_info", {})]
    at_sizing = f"measured at sizing (the candidate's {100 * compounded(group[0]['slowdown'], both):.4g}%)" \
        if both else "measured at sizing"
    for label, values in (("seen by the gate", seen), (at_sizing, sized)):
        if values:
            q = np.percentile(100 * np.array(values), [0, 10, 50, 90, 100])
            print(f"  slowdown {label}: median {q[2]:.1f}% (10-90%: {q[1]:.1f} to {q[3]:.1f}; "
                  f"range {q[0]:.1f} to {q[4]:.1f}) over {len(values)} benchmarks")


def power(run: dict, slowdown: float) -> None:
    """The share of the confirmed benchmarks the gate's power statement predicts (intervals.holm_share
    at the injected slowdown, on the confirmation's pairs, at this run's false-alarm budget), from the
    scatter of the screen's pair medians (what the gate knows before its confirmation) and from the
    confirmation's own (what it met), beside the share Holm confirmed; and, from the confirmation's
    scatter, at the change each benchmark showed over all its trials (the injection delivers about,
    not exactly, its slowdown), which is the share the run should have confirmed if the statement's
    model holds."""
    plan = run["paired"].get("plan", {})
    alpha = plan.get("family_alpha", ps.FAMILY_ALPHA) / (plan.get("shard") or (1, 1))[1]
    confirmed = [b for b in run["paired"]["benchmarks"] if any(t["stage"] == "confirm" for t in b["trials"])]
    if not confirmed:
        return
    recs = [Record(b["id"], trials=b["trials"]) for b in confirmed]
    pairs = len({t["pair"] for r in recs for t in r.trials if t["stage"] == "confirm"})
    caught = sum(b["verdict"] == "regression" for b in confirmed)
    rules = [Rule()] * len(recs)
    estimates = {stage: [r.estimate(stage) for r in recs] for stage in ("screen", "confirm")}
    scatter = {stage: ps.residuals(each) for stage, each in estimates.items()}
    said = [f"from the {label}'s scatter ({100 * spread(scatter[stage]):.2f}%) "
            f"{100 * ps.holm_share(scatter[stage], slowdown, rules, pairs, alpha):.0f}%"
            for stage, label in (("screen", "screen"), ("confirm", "confirmation"))]
    seen = np.array([shown(b) for b in confirmed])
    share = ps.holm_share(scatter["confirm"], seen, rules, pairs, alpha)
    print(f"  {Path(run['name']).name}: Holm confirmed {caught} of {len(recs)} ({100 * caught / len(recs):.0f}%) on "
          f"{pairs} pairs; predicted at {100 * slowdown:g}%: {', '.join(said)}; at the change each showed "
          f"(median {100 * np.median(seen):.1f}%), from the confirmation's scatter: {100 * share:.0f}%")
    # the same model with each benchmark scattering as its own pair medians did, not as the pool of all
    own = {stage: ps.each_residuals(each) for stage, each in estimates.items()}
    said = [f"{label} {100 * ps.holm_share(own[stage], slowdown, rules, pairs, alpha):.0f}% at {100 * slowdown:g}%, "
            f"{100 * ps.holm_share(own[stage], seen, rules, pairs, alpha):.0f}% at the change each showed"
            for stage, label in (("screen", "from the screen's"), ("confirm", "from the confirmation's"))]
    print(f"    each benchmark with its own scatter: {'; '.join(said)}")


def analyse(runs: list[dict]) -> None:
    def injected_as(r: dict) -> tuple[float, float]:
        return r["slowdown"], r.get("both", 0.0)  # runs kept before --both carry none

    for slowdown, both in sorted({injected_as(r) for r in runs}):
        group = [r for r in runs if injected_as(r) == (slowdown, both)]
        verdicts = [[b["verdict"] for b in r["paired"]["benchmarks"]] for r in group]
        n = sum(len(v) for v in verdicts)
        walls = [r["wall_s"] / 60 for r in group]
        decided = sum(v in (*FLAGGED, "unchanged") for vs in verdicts for v in vs)
        if slowdown == 0:
            clean = sum(not any(v in FLAGGED for v in vs) for vs in verdicts)
            print(f"A/A{over(both)}: {clean}/{len(group)} gate runs flag nothing; {decided}/{n} verdicts decided; "
                  f"wall {np.mean(walls):.1f} min per gate run")
        else:
            caught = sum(v == "regression" for vs in verdicts for v in vs)
            print(f"slowdown {100 * slowdown:g}%{over(both)}: {caught}/{n} flagged as regressions "
                  f"({100 * caught / max(n, 1):.0f}%) in {len(group)} gate runs; "
                  f"wall {np.mean(walls):.1f} min per gate run")
            injected(group, both)
            for r in group:
                power(r, slowdown)
    aa = [b for r in runs if r["slowdown"] == 0 for b in r["paired"]["benchmarks"] if b["trials"]]
    if aa:
        print("A/A spread of trial log-ratios inside a worker pair (median over benchmarks of 1.4826 MAD):")
        for label, key in METRICS.items():
            per_bench = []
            for b in aa:
                per_bench.append(np.median([spread(np.array(v)) for v in by_pair(b, key)]))
            print(f"  {label:14s} {100 * np.median(per_bench):.2f}%")
        share = np.mean([t["interfered"] for b in aa for t in b["trials"]])
        print(f"  trials repeated for steal time: {100 * share:.1f}%")
        between = [spread(np.array([np.median(v) for v in by_pair(b, "log_ratio", "screen")])) for b in aa]
        print(f"A/A spread of the pair medians (screen): median {100 * np.median(between):.2f}%, "
              f"90th percentile {100 * np.percentile(between, 90):.2f}%")
    trials_per_pair(runs)
    for r in runs:
        left = [f"{b['name']} ({len(by_pair(b, 'log_ratio', 'screen'))} pairs)" for b in r["paired"]["benchmarks"]
                if b["verdict"] == "noisy"]
        if left:
            print(f"{Path(r['name']).name} noisy: {', '.join(left)}")


def trials_per_pair(runs: list[dict], least: int = 10) -> None:
    """What more trials per pair would buy: each benchmark's pairs that took the plan's trials
    (none repeated for steal time), cut down to every subset of T of their trials; the spread of
    the pair medians at each T, median over benchmarks with at least `least` such pairs. A model
    var(T) = between + within / T, fitted at T = 1 and 3 (odd counts: the median is one trial),
    splits it into what only more pairs reduce and what more trials reduce."""
    by_t: dict[int, list[float]] = {}
    for r in runs:
        full = r["paired"].get("plan", {}).get("trials", 0)
        for b in r["paired"]["benchmarks"]:
            pairs = [np.array(v) for v in by_pair(b, "log_ratio") if len(v) == full]
            if len(pairs) < least:
                continue
            for t in range(1, full + 1):
                subsets = [list(c) for c in itertools.combinations(range(full), t)]
                by_t.setdefault(t, []).append(np.mean([spread(np.array([np.median(p[c]) for p in pairs]))
                                                       for c in subsets]))
    if not by_t:
        return
    med = {t: float(np.median(v)) for t, v in by_t.items()}
    print(f"spread of the pair medians by trials per pair ({len(by_t[1])} benchmarks): "
          + ", ".join(f"{t}: {100 * s:.2f}%" for t, s in med.items()))
    if 3 in med:
        within = 1.5 * (med[1] ** 2 - med[3] ** 2)
        between = max(med[1] ** 2 - within, 0.0)
        most = max(med)
        print(f"  model: between pairs {100 * between ** 0.5:.2f}%, "
              f"within a pair {100 * within ** 0.5:.2f}% per trial; "
              f"predicted at {2 * most} trials {100 * (between + within / (2 * most)) ** 0.5:.2f}%, "
              f"at {4 * most} {100 * (between + within / (4 * most)) ** 0.5:.2f}%")


def by_pair(benchmark: dict, key: str, stage: str | None = None) -> list[list[float]]:
    """One field of a benchmark's trials (of one stage, or all), grouped by worker pair."""
    groups: dict[int, list[float]] = {}
    for t in benchmark["trials"]:
        if stage is None or t["stage"] == stage:
            groups.setdefault(t["pair"], []).append(t[key])
    return list(groups.values())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--aa", type=int, default=2, help="A/A gate runs")
    p.add_argument("--slow", default="0.10,0.07", help="injected slowdowns, one gate run each")
    p.add_argument("--both", type=float, default=0.0,
                   help="a slowdown injected on both sides, under the candidate's --slow (a control)")
    p.add_argument("--load", type=float, default=0.0, help="seconds of a one-core busy loop at each run's start")
    p.add_argument("--gate-args", default="", help="extra options for opbench ab, e.g. '--pairs 3 --budget 20'")
    p.add_argument("--keep", type=Path, help="folder for the gate runs")
    p.add_argument("--from", dest="folders", nargs="+", type=Path, help="analyse kept runs only")
    p.add_argument("pytest_args", nargs="*")
    a = p.parse_args()
    if not a.folders:
        if not a.keep or not a.pytest_args:
            p.error("give --keep DIR and the pytest selection after '--' (or --from DIR)")
        slow = [float(x) for x in a.slow.split(",") if x]
        a.keep.mkdir(parents=True, exist_ok=True)
        first = len(list(a.keep.glob("run-*")))
        for n, slowdown in enumerate([0.0] * a.aa + slow, start=first):
            gate_run(a, a.keep / f"run-{n:02d}", slowdown, seed=n)
        a.folders = [a.keep]
    analyse(load_runs(a.folders))


if __name__ == "__main__":
    main()
