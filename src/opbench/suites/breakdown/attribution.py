"""Attribution: a profiled Trace becomes seconds per family, phase and operator per step, plus
the step time no operator covers.

Within one step's window, each lane (thread) counts its outermost spans only (an operator's
own helpers are its time); where lanes overlap, each running operator gets an equal share of
the overlapping time, so attributed time can never exceed the step's wall time, however many
threads the framework runs operators on. What is left is "unattributed": Python, dispatch,
waits and the framework's own bookkeeping between operators.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from itertools import pairwise

from opbench.frameworks.profiling import PHASES, Span, Trace, forest
from opbench.suites.breakdown.taxonomy import classify

MAX_OPS = 60  # operators kept by name per breakdown; the rest are summed per family and phase
Key = tuple[str, str, str]  # (family, phase, operator name)


@dataclass
class Breakdown:
    """Seconds per step: per (family, phase, operator), the step's wall time in the profiled
    pass, and how much of it no operator covered."""

    ops: dict[Key, float]
    step_s: float
    steps: int
    notes: list[str]

    @property
    def attributed_s(self) -> float:
        return sum(self.ops.values())

    @property
    def unattributed_s(self) -> float:
        return max(0.0, self.step_s - self.attributed_s)

    def families(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for (family, _, _), s in self.ops.items():
            out[family] += s
        return dict(out)

    def phases(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for (_, phase, _), s in self.ops.items():
            out[phase] += s
        return dict(out)

    def to_info(self) -> dict:
        """The breakdown as extra_info stores it (JSON)."""
        ranked = sorted(self.ops.items(), key=lambda kv: -kv[1])
        kept, rest = ranked[:MAX_OPS], defaultdict(lambda: [0, 0.0])
        for (family, phase, _), s in ranked[MAX_OPS:]:
            rest[(family, phase)][0] += 1
            rest[(family, phase)][1] += s
        ops = [[f, p, n, s] for (f, p, n), s in kept]
        ops += [[f, p, f"({count} smaller operators)", s] for (f, p), (count, s) in rest.items()]
        return {"steps": self.steps, "profiled_step_s": self.step_s, "attributed_s": self.attributed_s,
                "unattributed_s": self.unattributed_s, "families": self.families(), "phases": self.phases(),
                "ops": ops, "notes": list(self.notes)}


def _clip(spans: list[Span], start: int, end: int) -> list[Span]:
    return [Span(s.name, s.lane, max(s.start, start), min(s.end, end), s.phase, s.fused)
            for s in spans if s.end > start and s.start < end]


def _phased(spans: list[Span], families: list[str], training: bool) -> list[str]:
    """Each span's phase: the profiler's where it gave one; otherwise, in a training step, from
    the order (what starts before the loss ends is forward, from the first update operator on is
    update, between is backward), or "step" where the step shows no loss and update to cut at."""
    if not training:
        return ["forward"] * len(spans)
    marked = list(zip(spans, families, strict=True))  # a span the profiler placed elsewhere sets no boundary
    loss_end = max((s.end for s, f in marked if f == "loss" and s.phase in (None, "forward")), default=None)
    update_start = min((s.start for s, f in marked if f == "update" and s.phase in (None, "update")), default=None)
    out = []
    for s in spans:
        if s.phase is not None:
            out.append(s.phase)
        elif loss_end is None or update_start is None:
            out.append("step")
        else:
            out.append("forward" if s.start < loss_end else "update" if s.start >= update_start else "backward")
    return out


def _shares(roots: list[Span]) -> list[float]:
    """Each span's share of wall time: the time it ran, split equally with whatever ran at once
    on other lanes (a sweep over the spans' ends)."""
    points = sorted({p for s in roots for p in (s.start, s.end)})
    share = [0.0] * len(roots)
    order = sorted(range(len(roots)), key=lambda i: roots[i].start)
    active: list[int] = []
    nxt = 0
    for a, b in pairwise(points):
        active = [i for i in active if roots[i].end > a]
        while nxt < len(order) and roots[order[nxt]].start <= a:
            if roots[order[nxt]].end > a:
                active.append(order[nxt])
            nxt += 1
        for i in active:
            share[i] += (b - a) / len(active)
    return share


def attribute(trace: Trace, training: bool) -> Breakdown:
    """Seconds per step per (family, phase, operator), averaged over the trace's steps."""
    if not trace.steps:
        raise ValueError(f"{trace.framework}: the profile holds no step (no {trace.framework} step annotation)")
    ops: dict[Key, float] = defaultdict(float)
    wall = 0
    for start, end in trace.steps:
        wall += end - start
        roots = [node.span for nodes in forest(_clip(trace.spans, start, end)).values() for node in nodes]
        families = [classify(s.name, s.phase, s.fused) for s in roots]
        phases = _phased(roots, families, training)
        for s, family, phase, share in zip(roots, families, phases, _shares(roots), strict=True):
            ops[("update" if phase == "update" else family, phase, s.name)] += share / 1e9
    n = len(trace.steps)
    return Breakdown({k: v / n for k, v in ops.items()}, wall / n / 1e9, n, list(trace.notes))


__all__ = ["PHASES", "Breakdown", "attribute"]
