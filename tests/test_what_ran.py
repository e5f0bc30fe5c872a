"""What a mode label promises is what ran, read from the framework's own counters: a step timed
in JAX eager compiles nothing after its first call (each call compiled the LSTM's scan twice)."""

from __future__ import annotations

import pytest

from tests.helpers import load_or_skip, model_step

COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"  # jax.monitoring: one event per XLA compilation


@pytest.mark.parametrize("model", ["lstm", "mlp"])
def test_jax_eager_training_compiles_only_on_its_first_calls(model):
    load_or_skip("jax")
    import jax

    compiles: list[float] = []
    listening = [True]  # JAX has no public way to remove a listener: this one goes quiet instead

    def listener(event: str, seconds: float, **_) -> None:
        if listening[0] and event == COMPILE_EVENT:
            compiles.append(seconds)

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        _, _, call = model_step("jax", "eager", model)  # built and run three times: every program compiled
        assert compiles, "the listener saw no compilation at all: it would prove nothing below"
        compiles.clear()
        for _ in range(3):
            call()
    finally:
        listening[0] = False
    assert compiles == [], f"{len(compiles)} XLA compilations in 3 warm eager {model} steps"
