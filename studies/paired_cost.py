"""Where does the paired gate's time go? One A/A gate run over a selection with one screen pair
and no confirmation (both workers in this environment), timing every request by kind at the
coordinator: starting a pair (spawn and collect), describing the environments, preparing,
calibrating and warming up, the timed trials, releasing. A benchmark's turn in a pair is what
the confirmation pays per flagged benchmark and pair, so this says how many pairs a budget buys.

    .venv/bin/python studies/paired_cost.py -- benchmarks/ops -m "torch and forward"

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
    parser.add_argument("pytest_args", nargs="+", help="the selection, after --")
    a = parser.parse_args()
    timed(WorkerProcess, "reply")
    timed(coordinator.Pair, "__init__", "start a pair (spawn, collect)")
    timed(coordinator.PairedGate, "_calibrate", "calibrate and warm up")
    timed(coordinator.PairedGate, "_trial", "timed trials")
    side = functools.partial(coordinator.Side, python=sys.executable, env=dict(os.environ))
    plan = coordinator.Plan(trials=a.trials, min_pairs=1, max_pairs=1)
    args = ["-p", INJECT_PLUGIN, *a.pytest_args] if os.environ.get(INJECT) else a.pytest_args
    gate = coordinator.PairedGate((side("baseline"), side("candidate")), args, Path(tempfile.mkdtemp()), plan,
                            lambda name: Rule(), progress=lambda line: None)
    start = time.monotonic()
    gate.run()
    total = time.monotonic() - start
    turns = sum(1 for r in gate.records.values() if r.trials)
    print(f"{total:.1f} s for one screen pair over {turns} benchmarks ({a.trials} trials each); "
          f"{gate.pairs_started} pairs started")
    stages = ("start a pair (spawn, collect)", "calibrate and warm up", "timed trials")
    for title, keys in (("stages (each includes its requests)", stages),
                        ("requests, waited for at the coordinator", [k for k in SPENT if k not in stages])):
        print(f" {title}:")
        for what in sorted(keys, key=lambda k: -SPENT[k]):
            print(f"  {what:32s} {SPENT[what]:7.1f} s  {COUNT[what]:6d} calls  "
                  f"{SPENT[what] / max(turns, 1):6.3f} s per benchmark")
    described = SPENT.get("machine_info", 0.0) + SPENT.get("start a pair (spawn, collect)", 0.0) / gate.pairs_started
    print(f"a benchmark's turn in a pair: {(total - described) / max(turns, 1):.2f} s "
          "(the run less describing the environments, per benchmark)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
