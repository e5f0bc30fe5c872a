"""JAX's profiler read for the breakdown: jax.profiler around a few untimed steps, its XSpace
read with jax.profiler.ProfileData. A module of the JAX backend."""

from __future__ import annotations

import sys

import jax

from opbench.frameworks.profiling import STEP, XLA_NOTE, Trace, XEvent, step_windows, written_xspace, xla_kernels


def record(call, steps: int, folder: str) -> Trace:
    """Profile `steps` calls at host tracer level 3, where XLA's CPU runtime marks each kernel."""
    options = jax.profiler.ProfileOptions()
    options.host_tracer_level, options.python_tracer_level = 3, 0
    jax.profiler.start_trace(folder, profiler_options=options)
    try:
        for _ in range(steps):
            with jax.profiler.TraceAnnotation(STEP):
                call()
    finally:
        jax.profiler.stop_trace()
        _restore_tensorflow_traceme()
    return parse(written_xspace(folder, "jax.profiler"))


def _restore_tensorflow_traceme() -> None:
    """JAX's profiler imports TensorFlow's Python TraceMe module where TensorFlow is installed and
    sets its switch, tensorflow.python.profiler.trace.enabled, to True; TensorFlow 2.21 calls it
    (enabled()), so every later tf.cast in the process would fail. The switch is put back."""
    trace = sys.modules.get("tensorflow.python.profiler.trace")
    native = sys.modules.get("tensorflow.python.profiler.internal._pywrap_traceme")
    if trace is not None and native is not None and not callable(trace.enabled):
        trace.enabled = native.traceme_enabled


def host_events(data: bytes) -> list[XEvent]:
    """Every event of the XSpace's host plane as (lane, name, start ns, duration ns)."""
    profile = jax.profiler.ProfileData.from_serialized_xspace(data)
    return [(line.name, e.name, int(e.start_ns), int(e.duration_ns))
            for plane in profile.planes if plane.name == "/host:CPU"
            for line in plane.lines for e in line.events]


def parse(data: bytes) -> Trace:
    """A Trace from a jax.profiler XSpace: XLA's kernels, jit or op by op (eager JAX runs each
    primitive as its own small program)."""
    events = host_events(data)
    trace = Trace("jax", step_windows(events), xla_kernels(events))
    trace.notes.append(XLA_NOTE)
    return trace
