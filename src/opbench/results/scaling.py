"""Data-parallel scaling from saved runs: samples per second against workers, per model, scaling
rule and engine, and the scaling efficiency (samples/s at W workers over W x the samples/s at
one). Reads stored JSON only; a benchmark in several runs counts with the median of its medians."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from opbench.results.store import Run
from opbench.results.tables import table


@dataclass
class Curve:
    """One engine's samples/s by worker count, for one model, device, scaling rule and batch."""

    model: str
    where: str  # "cpu-strong-b128": device, scaling and the batch that stays
    column: str  # framework/engine-rule
    samples: dict[int, float] = field(default_factory=dict)
    communication: dict[int, float] = field(default_factory=dict)

    def efficiency(self, workers: int) -> float | None:
        one = self.samples.get(1)
        return self.samples[workers] / (workers * one) if one and workers in self.samples else None


def curves(runs: list[Run]) -> list[Curve]:
    seen: dict[tuple, dict[int, list]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        for b in run.benchmarks.values():
            e = b.extra
            if "workers" not in e or "global_batch" not in e or not b.median > 0:
                continue
            world = int(e.get("world_size") or e["workers"])  # every worker on every node
            batch = e["global_batch"] if e.get("scaling") == "strong" else e["global_batch"] // world
            key = (e.get("model", b.group), f"{e.get('device', '')}-{e.get('scaling', '')}-b{batch}", b.column)
            seen[key][world].append((e["global_batch"] / b.median, e.get("communication_share")))
    out = []
    for (model, where, column), by_w in sorted(seen.items()):
        curve = Curve(model, where, column)
        for w, points in sorted(by_w.items()):
            curve.samples[w] = float(np.median([s for s, _ in points]))
            comm = [c for _, c in points if c is not None]
            if comm:
                curve.communication[w] = float(np.median(comm))
        out.append(curve)
    return out


def format_lines(runs: list[Run], markdown: bool = False) -> list[str]:
    """The scaling table, or nothing when the runs hold no distributed benchmark."""
    found = curves(runs)
    if not found:
        return []
    workers = sorted({w for c in found for w in c.samples})
    header = ("model", "scaling", "engine", *(f"samples/s w{w}" for w in workers),
              *(f"efficiency w{w}" for w in workers if w > 1), *(f"comm. share w{w}" for w in workers if w > 1))
    rows = []
    for c in found:
        eff = [c.efficiency(w) for w in workers if w > 1]
        rows.append((c.model, c.where, c.column, *(f"{c.samples[w]:,.0f}" if w in c.samples else "-" for w in workers),
                     *(f"{e:.0%}" if e is not None else "-" for e in eff),
                     *(f"{c.communication[w]:.0%}" if w in c.communication else "-" for w in workers if w > 1)))
    title = "data-parallel scaling: samples/s (global), efficiency = samples/s at W / (W x at 1 worker)"
    return ["", f"## {title}" if markdown else f"{title}:", *table(header, rows, markdown)]
