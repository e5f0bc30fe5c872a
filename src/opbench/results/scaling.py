"""Data-parallel scaling from saved runs: samples per second by nodes x workers per node, per
model, scaling rule and engine, and the scaling efficiency (samples/s on N nodes of W workers
over N x W x the samples/s of one worker on one node, the same engine's). A multi-node run and a
single-node run of the same engine, read together, fill one row. Reads stored JSON only; a
benchmark in several runs (or saved by several nodes) counts with the median of its medians."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from opbench.core import schema
from opbench.results.store import Run
from opbench.results.tables import table

Width = tuple[int, int]  # (nodes, workers per node)


@dataclass
class Curve:
    """One engine's samples/s by (nodes, workers per node), for one model, device, scaling rule
    and batch."""

    model: str
    where: str  # "cpu-strong-b128": device, scaling and the batch that stays
    column: str  # framework/engine-rule
    samples: dict[Width, float] = field(default_factory=dict)
    communication: dict[Width, float] = field(default_factory=dict)
    busy: set[Width] = field(default_factory=set)  # widths with a result timed on a busy machine

    def efficiency(self, width: Width) -> float | None:
        one = self.samples.get((1, 1))
        return self.samples[width] / (width[0] * width[1] * one) if one and width in self.samples else None

    def by_world(self, nodes: int) -> dict[int, float]:
        """Samples/s by the world size (every worker of every node), on `nodes` nodes."""
        return {n * w: s for (n, w), s in sorted(self.samples.items()) if n == nodes}


def curves(runs: list[Run]) -> list[Curve]:
    seen: dict[tuple, dict[Width, list]] = defaultdict(lambda: defaultdict(list))
    for run in runs:
        for b in run.benchmarks.values():
            e = b.extra
            if "workers" not in e or "global_batch" not in e or not b.median > 0:
                continue
            width = int(e.get("nodes") or 1), int(e["workers"])
            batch = e["global_batch"] if e.get("scaling") == "strong" else e["global_batch"] // (width[0] * width[1])
            key = (e.get("model", b.group), f"{e.get('device', '')}-{e.get('scaling', '')}-b{batch}", b.column)
            seen[key][width].append((e["global_batch"] / b.median, e.get("communication_share"), schema.busy(e)))
    out = []
    for (model, where, column), by_w in sorted(seen.items()):
        curve = Curve(model, where, column)
        for w, points in sorted(by_w.items()):
            curve.samples[w] = float(np.median([s for s, _, _ in points]))
            if any(busy for _, _, busy in points):
                curve.busy.add(w)
            comm = [c for _, c, _ in points if c is not None]
            if comm:
                curve.communication[w] = float(np.median(comm))
        out.append(curve)
    return out


def _mark(curve: Curve, *widths: Width) -> str:
    """The busy mark after a figure that rests on any of these widths' samples."""
    return schema.BUSY_MARK if curve.busy.intersection(widths) else ""


def format_lines(runs: list[Run], markdown: bool = False) -> list[str]:
    """The scaling table, or nothing when the runs hold no distributed benchmark."""
    found = curves(runs)
    if not found:
        return []
    widths = sorted({w for c in found for w in c.samples})
    many = [w for w in widths if w != (1, 1)]
    label = schema.width_label
    header = ("model", "scaling", "engine", *(f"samples/s {label(*w)}" for w in widths),
              *(f"efficiency {label(*w)}" for w in many), *(f"comm. share {label(*w)}" for w in many))
    rows = []
    for c in found:
        eff = [c.efficiency(w) for w in many]
        rows.append((c.model, c.where, c.column,
                     *(f"{c.samples[w]:,.0f}{_mark(c, w)}" if w in c.samples else "-" for w in widths),
                     *(f"{e:.0%}{_mark(c, w, (1, 1))}" if e is not None else "-"
                       for w, e in zip(many, eff, strict=True)),
                     *(f"{c.communication[w]:.0%}" if w in c.communication else "-" for w in many)))
    title = ("data-parallel scaling by nodes x workers per node (nNxwW; wW on one node): samples/s (global), "
             "efficiency = samples/s / (every worker x one worker's on one node); "
             f"{schema.BUSY_MARK.strip()} rests on a result timed on a busy machine")
    return ["", f"## {title}" if markdown else f"{title}:", *table(header, rows, markdown)]
