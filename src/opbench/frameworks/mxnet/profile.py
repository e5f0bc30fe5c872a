"""MXNet's profiler read for the breakdown: mx.profiler around a few untimed steps, its Chrome
trace (operator executions on the engine's threads) read back. A module of the MXNet backend."""

from __future__ import annotations

import json
import time
from pathlib import Path

from opbench.frameworks.mxnet.loader import mx
from opbench.frameworks.profiling import Span, Trace, windows

_BULK = "ImperativeBulk"  # the engine ran several operators as one job and timed them together


def record(call, steps: int, folder: str) -> Trace:
    """Profile `steps` calls. MXNet's trace clock is the system clock in microseconds, so each
    step's window is taken from time.time_ns() around it (MXNet has no annotation that lands
    on the operators' clock as a span)."""
    path = Path(folder) / "mxnet_trace.json"
    mx.profiler.set_config(profile_symbolic=True, profile_imperative=True, profile_memory=False, profile_api=False,
                           aggregate_stats=False, filename=str(path))
    marks = []
    mx.profiler.set_state("run")
    try:
        for _ in range(steps):
            start = time.time_ns()
            call()
            marks.append((start, time.time_ns()))
    finally:
        mx.profiler.set_state("stop")
        mx.profiler.dump(finished=False)  # finished=True would end the profiler for the whole process
    return parse(repaired(path.read_text(encoding="utf-8")), marks)


def repaired(text: str) -> dict:
    """The trace as dump() left it, read. A dump that does not finish the profiler (finishing it
    ends profiling for the whole process) writes every event so far but not the closing
    brackets, and no opening ones after the process's first dump: both are restored here."""
    try:
        return json.loads(text)
    except ValueError:
        text = text.strip().strip(",")
        return json.loads(("" if text.startswith("{") else '{"traceEvents": [') + text + "]}")


def parse(doc: dict, marks: list[tuple[int, int]]) -> Trace:
    """A Trace from mx.profiler's Chrome trace: each operator's B/E pair on its engine thread.
    A hybridized block's bulk segment is named by its operators joined with commas; it and
    ImperativeBulk are one engine job that the profiler times as a whole, reported fused
    (_backward_ names and the order give its phase)."""
    spans, open_at = [], {}
    for e in sorted((e for e in doc.get("traceEvents", ()) if e.get("cat") == "operator"),
                    key=lambda e: (e["ts"], e["ph"] != "E")):
        key = (e.get("tid"), e["name"])
        if e["ph"] == "B":
            open_at[key] = e["ts"]
        elif e["ph"] == "E" and key in open_at:
            name, start = e["name"], open_at.pop(key) * 1000
            bulk = "," in name or name == _BULK
            phase = "backward" if bulk and name.startswith("_backward") else None
            spans.append(Span(name, str(e.get("tid")), start, e["ts"] * 1000, phase, fused=bulk))
    trace = Trace("mxnet", windows(marks), spans)
    if any(s.fused for s in spans):
        trace.notes.append("MXNet's engine runs consecutive operators as one bulk job; the profiler times the "
                           "job, not its operators (reported as fused kernels)")
    return trace
