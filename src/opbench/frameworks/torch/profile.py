"""PyTorch's profiler read for the breakdown: torch.profiler around a few untimed steps,
exported as its Chrome trace and read back into a Trace. A module of the PyTorch backend."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from opbench.frameworks.profiling import STEP, Node, Span, Trace, forest, windows

_BACKWARD = "autograd::engine::evaluate_function: "
# Wrappers that are not operators: their own time is dispatch, guards and bookkeeping
# (unattributed); what runs inside them is attributed to what it is.
_WRAPPERS = ("Torch-Compiled Region", "TorchDynamo Cache Lookup", "Pregraph bytecode", "AOTDispatcher",
             "CompiledFunction")
_COMPILED_GRAPH = "## Call CompiledFxGraph"  # inductor's graph: its own time is its generated (fused) kernels


def record(call, steps: int, folder: str) -> Trace:
    """Profile `steps` calls (CPU activity: host time per operator) and read them back."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(steps):
            with torch.profiler.record_function(STEP):
                call()
    path = Path(folder) / "torch_trace.json"
    prof.export_chrome_trace(str(path))
    return parse(json.loads(path.read_text(encoding="utf-8")))


def _phase(name: str) -> str | None:
    if name.startswith("Optimizer."):
        return "update"
    if name.startswith(_BACKWARD):
        return "backward"
    return None


def parse(doc: dict) -> Trace:
    """A Trace from torch.profiler's Chrome trace: the outermost operator of each call stack is
    the operator (aten::conv2d holds its aten::empty), autograd's evaluate_function names the
    backward node, Optimizer.* is the update; inductor's generated kernels are the compiled
    graph's own time, reported fused."""
    events = [e for e in doc.get("traceEvents", ())
              if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation")]

    def ns(t: float) -> int:
        return round(float(t) * 1000)

    steps = windows((ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])) for e in events if e["name"] == STEP)
    raw = [Span(e["name"], str(e.get("tid")), ns(e["ts"]), ns(e["ts"]) + ns(e["dur"]))
           for e in events if e["name"] != STEP]
    out: list[Span] = []

    def visit(node: Node, phase: str) -> None:
        s = node.span
        phase = _phase(s.name) or phase
        if s.name.startswith(_COMPILED_GRAPH):
            out.extend(Span("inductor kernels", s.lane, a, b, phase, fused=True) for a, b in node.self_segments())
        else:
            name = s.name.removeprefix(_BACKWARD)
            if not name.startswith(_WRAPPERS):
                out.append(Span(name, s.lane, s.start, s.end, phase))
                return
        for child in node.children:
            visit(child, phase)

    for roots in forest(raw).values():
        for root in roots:
            visit(root, "forward")
    return Trace("torch", steps, out)
