"""TensorFlow's profiler read for the breakdown: tf.profiler around a few untimed steps, its
XSpace (xplane.pb) parsed with the protobuf TensorFlow ships. A module of the TensorFlow backend."""

from __future__ import annotations

import re

import tensorflow as tf
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from opbench.frameworks.profiling import STEP, XLA_NOTE, Span, Trace, XEvent, step_windows, written_xspace, xla_kernels

_EAGER = "EagerLocalExecute: "
_FUNCTION = re.compile(r"^__(inference|forward|backward)_")  # a tf.function's call: its kernels run on tf_Compute
_KERNEL = re.compile(r"^[^\s:]+:[A-Za-z_]\w*$")  # graph kernels are named scope/name:OpType
_XLA_LAUNCH = ("XlaLaunch", "_XlaRun", "_XlaCompile", "XlaLaunchV2")
_UPDATE_SCOPES = re.compile(r"^(adam|sgd|Adam|SGD|loss_scale_optimizer)(_\d+)?/")


def record(call, steps: int, folder: str) -> Trace:
    """Profile `steps` calls at host tracer level 3 (XLA's per-kernel markers) and read them back."""
    options = tf.profiler.experimental.ProfilerOptions(host_tracer_level=3, python_tracer_level=0,
                                                       device_tracer_level=1)
    tf.profiler.experimental.start(folder, options=options)
    try:
        for _ in range(steps):
            with tf.profiler.experimental.Trace(STEP):
                call()
    finally:
        tf.profiler.experimental.stop()
    return parse(written_xspace(folder, "tf.profiler"))


def host_events(data: bytes) -> list[XEvent]:
    """Every event of the XSpace's host plane as (lane, name, start ns, duration ns)."""
    space = xplane_pb2.XSpace()
    space.ParseFromString(data)
    out = []
    for plane in space.planes:
        if plane.name != "/host:CPU":
            continue
        names = {k: v.name for k, v in plane.event_metadata.items()}
        for line in plane.lines:
            for e in line.events:
                start = line.timestamp_ns + e.offset_ps // 1000
                out.append((line.name, names.get(e.metadata_id, ""), start, e.duration_ps // 1000))
    return out


def _phase(name: str) -> str | None:
    if name.startswith("gradient_tape/"):
        return "backward"
    if _UPDATE_SCOPES.match(name):
        return "update"
    return "forward" if "/" in name else None  # a scoped graph kernel; eager ops carry no scope


def parse(data: bytes) -> Trace:
    """A Trace from a tf.profiler XSpace: eager operators (EagerLocalExecute on the Python
    thread), graph kernels on the executor's threads (their scope gives the phase), XLA kernels
    from their markers (XLA mode); the XLA cluster's launch, which holds them, is left out."""
    events = host_events(data)
    xla = xla_kernels(events)
    spans = list(xla)
    for lane, name, start, dur in events:
        if name.startswith(_EAGER):
            op = name[len(_EAGER):]
            if not _FUNCTION.match(op):
                spans.append(Span(op, lane, start, start + dur))
        elif _KERNEL.match(name) and not _FUNCTION.match(name.rsplit(":", 1)[1]) and not name.endswith(_XLA_LAUNCH):
            spans.append(Span(name, lane, start, start + dur, _phase(name)))
    trace = Trace("tensorflow", step_windows(events), spans)
    if xla:
        trace.notes.append(XLA_NOTE)
    return trace
