"""Thread sweeps: `--threads 1,2,4` runs the selected benchmarks once per count, each in its own
process (TensorFlow fixes its thread pools when its runtime starts), and merges the results into
one pytest-benchmark JSON whose benchmarks carry their thread count.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile

from opbench.core.processes import terminate_as_interrupt
from opbench.harness import children

CHILD = "OPBENCH_SWEEP_CHILD"
INTERRUPTED = children.INTERRUPTED


def child_args(args: list[str], threads: int, json_path: str) -> list[str]:
    """The parent's pytest arguments with saving and --threads replaced for one child."""
    return [*children.without(args, (*children.SAVE_FLAGS, "--threads")), f"--threads={threads}",
            f"--benchmark-json={json_path}"]


def merge(runs: dict[int, dict]) -> dict:
    """One pytest-benchmark document from one run per thread count; names get an @tN suffix."""
    counts = sorted(runs)
    merged = dict(runs[counts[0]])
    merged["benchmarks"] = []
    for n in counts:
        for bench in runs[n].get("benchmarks", []):
            renamed = {**bench, "name": f"{bench['name']}@t{n}", "fullname": f"{bench['fullname']}@t{n}",
                       "extra_info": {**(bench.get("extra_info") or {}), "thread_sweep": n}}
            merged["benchmarks"].append(renamed)
    opbench = merged.setdefault("machine_info", {}).setdefault("opbench", {})
    opbench["thread_sweep"] = counts
    statuses = [(runs[n].get("machine_info", {}).get("opbench") or {}).get("run") or {} for n in counts]
    if any(statuses):  # the sweep ended as its worst child did
        failed = [f"{t}@t{n}" for n, st in zip(counts, statuses, strict=True) for t in st.get("failed", [])]
        worst = next((w for w in ("interrupted", "failed") if any(st.get("status") == w for st in statuses)),
                     "complete")
        opbench["run"] = {"status": worst, "failed": failed}
    return merged


def run(args: list[str], counts: tuple[int, ...], option) -> int:
    """Run one child pytest per thread count, merge, save as the parent was asked to. Ctrl-C stops
    the sweep after forwarding it to the running child: the counts that finished are saved, the
    run is marked interrupted, and the exit code is pytest's for an interruption."""
    env = {**os.environ, CHILD: "1"}
    results, code, interrupted = {}, 0, False
    with terminate_as_interrupt(), tempfile.TemporaryDirectory(prefix="opbench-sweep-") as tmp:
        for n in counts:
            path = os.path.join(tmp, f"t{n}.json")
            print(f"opbench: thread sweep: running with --threads={n}", flush=True)
            cmd = [sys.executable, "-m", "pytest", *child_args(args, n, path)]
            child_code, interrupted = children.run_child(cmd, env)
            code = max(code, child_code)
            if os.path.exists(path):
                with open(path, encoding="utf-8") as f:
                    results[n] = json.load(f)
            if interrupted or child_code == INTERRUPTED:
                interrupted = True
                print(f"opbench: thread sweep interrupted during --threads={n}; saving the counts that ran",
                      file=sys.stderr, flush=True)
                break
    if not results:
        return code or 1
    merged = merge(results)
    if interrupted:
        merged["machine_info"]["opbench"].setdefault("run", {})["status"] = "interrupted"
    name = "sweep-t" + "-".join(map(str, sorted(results)))
    children.save(merged, option, name, "thread sweep")
    return INTERRUPTED if interrupted else code
