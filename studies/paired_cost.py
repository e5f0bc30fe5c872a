"""Where does the paired gate's time go? One A/A gate run over a selection with `--pairs` screen
pairs (one by default) and no confirmation (both workers in this environment), timing every
request by kind at the coordinator: starting a pair (spawn and collect), describing the
environments, preparing, calibrating and warming up, the timed trials, releasing. A benchmark's
turn in a pair is what the confirmation pays per flagged benchmark and pair, so this says how
many pairs a budget buys. With `--pairs 2` or more, the first screen pair (cold compiler and
reference caches) is shown apart from the mean of the others (warm: what every later pair pays).

    .venv/bin/python studies/paired_cost.py -- benchmarks/ops -m "torch and forward"
    .venv/bin/python studies/paired_cost.py --pairs 2 -- benchmarks/ops benchmarks/e2e -m torch

With OPBENCH_INJECT_SLOWDOWN set, both workers load the study plugin opbench.testing.inject, so
the cost of sizing the injection shows in their prepare steps.
"""

from __future__ import annotations

import argparse
import collections
import functools
import os
import sys
import tempfile
import time
from pathlib import Path

from opbench.core.processes import WorkerProcess
from opbench.regression import coordinator
from opbench.regression.paired import side_env
from opbench.results.stats import Rule
from opbench.testing.inject import ENV as INJECT
from opbench.testing.inject import PLUGIN as INJECT_PLUGIN

SPENT: dict[str, float] = collections.defaultdict(float)
COUNT: collections.Counter = collections.Counter()


def timed(owner, name: str, label: str | None = None) -> None:
    """Wrap owner.name so that its calls add to SPENT[label] (label None: the request's cmd)."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        start = time.monotonic()
        try:
            return original(*args, **kwargs)
        finally:
            key = label or args[1]  # WorkerProcess.reply(self, what, timeout)
            SPENT[key] += time.monotonic() - start
            COUNT[key] += 1

    setattr(owner, name, wrapper)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trials", type=int, default=coordinator.Plan.trials, help="trials per benchmark and pair")
    parser.add_argument("--pairs", type=int, default=1, help="screen pairs (the first pays for cold caches)")
    parser.add_argument("pytest_args", nargs="+", help="the selection, after --")
    a = parser.parse_args()
    if a.pairs < 1:
        parser.error("--pairs takes a count of at least 1")
    timed(WorkerProcess, "reply")
    timed(coordinator.Pair, "__init__", "start a pair (spawn, collect)")
    timed(coordinator.PairedGate, "_calibrate", "calibrate and warm up")
    timed(coordinator.PairedGate, "_trial", "timed trials")
    folder = Path(tempfile.mkdtemp())

    def side(name: str) -> coordinator.Side:  # as the gate makes it: its caches under the work folder
        return coordinator.Side(name, sys.executable, side_env(name, {}, folder))

    plan = coordinator.Plan(trials=a.trials, min_pairs=a.pairs, max_pairs=a.pairs, budget_s=1e9)
    sweeps: list[tuple[float, dict[str, float], collections.Counter]] = []  # per screen pair: seconds, SPENT, COUNT
    sweep = coordinator.PairedGate._sweep

    def each_sweep(self, *args, **kwargs):
        spent, count, start = dict(SPENT), collections.Counter(COUNT), time.monotonic()
        try:
            return sweep(self, *args, **kwargs)
        finally:
            sweeps.append((time.monotonic() - start, {k: v - spent.get(k, 0.0) for k, v in SPENT.items()},
                           COUNT - count))

    coordinator.PairedGate._sweep = each_sweep
    args = ["-p", INJECT_PLUGIN, *a.pytest_args] if os.environ.get(INJECT) else a.pytest_args
    gate = coordinator.PairedGate((side("baseline"), side("candidate")), args, folder, plan,
                            lambda name: Rule(), progress=lambda line: None)
    gate._flagged = list  # a screen only: nothing goes on to a confirmation
    start = time.monotonic()
    gate.run()
    total = time.monotonic() - start
    timed_ids = sum(1 for r in gate.records.values() if r.trials)
    turns = sum(len({t["pair"] for t in r.trials}) for r in gate.records.values())  # a benchmark in a pair
    print(f"{total:.1f} s for {a.pairs} screen pair(s) over {timed_ids} benchmarks ({a.trials} trials each); "
          f"{gate.pairs_started} pairs started")
    stages = ("start a pair (spawn, collect)", "calibrate and warm up", "timed trials")
    for title, keys in (("stages (each includes its requests)", stages),
                        ("requests, waited for at the coordinator", [k for k in SPENT if k not in stages])):
        print(f" {title}:")
        for what in sorted(keys, key=lambda k: -SPENT[k]):
            print(f"  {what:32s} {SPENT[what]:7.1f} s  {COUNT[what]:6d} calls  "
                  f"{SPENT[what] / max(turns, 1):6.3f} s per benchmark and pair")
    described = SPENT.get("machine_info", 0.0) + SPENT.get("start a pair (spawn, collect)", 0.0) / gate.pairs_started
    print(f"a benchmark's turn in a pair: {(total - described) / max(turns, 1):.2f} s "
          "(the run less describing the environments, per benchmark and pair)")
    if len(sweeps) > 1:
        print_cold_and_warm(sweeps, timed_ids)
    return 0


def print_cold_and_warm(sweeps: list[tuple[float, dict[str, float], collections.Counter]], benchmarks: int) -> None:
    """The first screen pair against the mean of the later ones, per benchmark, by stage and request."""
    warm = sweeps[1:]
    keys = sorted({k for _, spent, _ in sweeps for k in spent if spent[k] > 0}, key=lambda k: -sweeps[0][1].get(k, 0))
    per = max(benchmarks, 1)
    print(f" the first screen pair (cold caches) against the mean of the {len(warm)} after it, s per benchmark:")
    print(f"  {'whole pair':32s} {sweeps[0][0] / per:7.3f}  {sum(w[0] for w in warm) / len(warm) / per:7.3f}")
    for k in keys:
        print(f"  {k:32s} {sweeps[0][1].get(k, 0.0) / per:7.3f}  "
              f"{sum(w[1].get(k, 0.0) for w in warm) / len(warm) / per:7.3f}")


if __name__ == "__main__":
    sys.exit(main())
