"""What a framework's profiler gives the per-operator breakdown, in one framework-neutral form.

Each backend's `*_profile` module runs its framework's own profiler around a few extra steps
(never the timed ones), reads what the profiler wrote with the tools the framework ships, and
returns a Trace: the steps' windows and the operator spans inside them, on the clock the
profiler used. Attribution (opbench.suites.breakdown) then works on Traces alone, which is what the
unit tests feed it from recorded profiler outputs.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

STEP = "opbench.step"  # the annotation each backend puts around one profiled step (outside timed rounds)
XLA_NOTE = "XLA's kernels carry no forward/backward scope: phases are not separated"
PHASES = ("forward", "backward", "update")


@dataclass(frozen=True)
class Span:
    """One operator's execution: its framework name, the thread (lane) it ran on, its start and
    end in nanoseconds, and its phase where the profiler tells it (None: read from the order)."""

    name: str
    lane: str
    start: int
    end: int
    phase: str | None = None
    fused: bool = False  # compiler- or engine-fused kernels: several operators the profiler reports as one

    @property
    def duration(self) -> int:
        return self.end - self.start


@dataclass
class Trace:
    """A profiled pass: the window of each step and the operator spans the profiler recorded."""

    framework: str
    steps: list[tuple[int, int]]
    spans: list[Span] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # what the profiler could not tell, for the report


@dataclass
class Node:
    """A span with the spans it contains on the same lane."""

    span: Span
    children: list[Node] = field(default_factory=list)

    def self_segments(self) -> Iterator[tuple[int, int]]:
        """The parts of the span that none of its children cover."""
        at = self.span.start
        for child in self.children:
            if child.span.start > at:
                yield at, child.span.start
            at = max(at, child.span.end)
        if self.span.end > at:
            yield at, self.span.end


def forest(spans: Iterable[Span]) -> dict[str, list[Node]]:
    """Per lane, the spans nested by containment (how every profiler here records a call inside
    a call on one thread); a span that overlaps without containing is cut at its parent's end."""
    by_lane: dict[str, list[Span]] = defaultdict(list)
    for s in spans:
        if s.end > s.start:
            by_lane[s.lane].append(s)
    trees: dict[str, list[Node]] = {}
    for lane, items in by_lane.items():
        roots: list[Node] = []
        stack: list[Node] = []
        for item in sorted(items, key=lambda s: (s.start, -s.end)):
            while stack and item.start >= stack[-1].span.end:
                stack.pop()
            parent_end = stack[-1].span.end if stack else item.end
            node = Node(Span(item.name, item.lane, item.start, min(item.end, parent_end), item.phase, item.fused))
            (stack[-1].children if stack else roots).append(node)
            stack.append(node)
        trees[lane] = roots
    return trees


def pair_markers(events: Iterable[tuple[str, str, int]],
                 end_prefix: str = "end: ") -> Iterator[tuple[str, str, int, int]]:
    """(lane, name, start, end) from begin/end marker events given as (lane, name, time): XLA's
    CPU runtime marks each kernel with an event `name` on the thread that starts it and a later
    `end: name`, on the thread that finishes it (another one, for kernels that run
    asynchronously on the intra-op pool). An end closes the latest open start of its name."""
    open_at: dict[str, list[tuple[str, int]]] = defaultdict(list)
    for lane, name, t in sorted(events, key=lambda e: e[2]):
        if name.startswith(end_prefix):
            starts = open_at.get(name[len(end_prefix):])
            if starts:
                start_lane, start = starts.pop()
                yield start_lane, name[len(end_prefix):], start, t
        else:
            open_at[name].append((lane, t))


def windows(marks: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """The steps' windows in time order."""
    return sorted((int(a), int(b)) for a, b in marks)


XEvent = tuple[str, str, int, int]  # (lane, name, start ns, duration ns): one event of an XSpace's host plane
_XLA_WRAPPERS = re.compile(r"^(call|while|conditional)(\.\d+)*(\.clone)?$")  # thunks that run other thunks


def xla_kernels(events: list[XEvent]) -> list[Span]:
    """XLA's CPU kernels from an XSpace's host events (TensorFlow XLA and JAX), from the markers
    the runtime writes at host tracer level 3 (pair_markers), on the lane that started each.
    Fusions are flagged fused; calls and loops, which only run other kernels, are left out."""
    marks = [(lane, name, start) for lane, name, start, _ in events]
    return [Span(name, lane, start, end, fused="fusion" in name)
            for lane, name, start, end in pair_markers(marks) if not _XLA_WRAPPERS.match(name)]


def written_xspace(folder: str, profiler: str) -> bytes:
    """The XSpace (xplane.pb) a TensorFlow or JAX profiler session wrote under `folder`."""
    found = sorted(Path(folder).rglob("*.xplane.pb"))
    if not found:
        raise RuntimeError(f"{profiler} wrote no .xplane.pb under {folder}")
    return found[-1].read_bytes()


def step_windows(events: list[XEvent]) -> list[tuple[int, int]]:
    """The windows of the STEP annotations among an XSpace's host events."""
    return windows((start, start + dur) for _, name, start, dur in events if name == STEP)
