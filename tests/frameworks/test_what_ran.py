"""What a mode label promises is what ran, read from the framework's own counters: a step timed
in JAX eager compiles nothing after its first call (each call compiled the LSTM's scan twice)."""

from __future__ import annotations

import pytest

from tests.helpers import load_or_skip, model_step

# jax.monitoring: one event per program made, compiled by XLA or read back from the persistent compilation
# cache (make's test targets keep one, and there a program made before is read, never compiled)
MADE = ("/jax/core/compile/backend_compile_duration", "/jax/compilation_cache/cache_retrieval_time_sec")


@pytest.mark.parametrize("model", ["lstm", "mlp"])
def test_jax_eager_training_compiles_only_on_its_first_calls(model):
    backend = load_or_skip("jax")
    import jax

    backend.forget()  # programs an earlier test compiled in this process (the same model's equivalence) are not read
    compiles: list[float] = []
    listening = [True]  # JAX has no public way to remove a listener: this one goes quiet instead

    def listener(event: str, seconds: float, **_) -> None:
        if listening[0] and event in MADE:
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


HLO = """
  %dot_general.3 = f32[64,64]{1,0} dot(%convert, %convert.1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %convolution = bf16[2,8,8,8]{3,2,1,0} convolution(%a, %b), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  %add = bf16[64]{0} add(%x, %y)
"""


def test_the_product_types_of_an_hlo_module():
    from opbench.frameworks.base import hlo_product_types

    assert hlo_product_types(HLO) == "bfloat16,float32"
    assert hlo_product_types("%add = bf16[64]{0} add(%x, %y)") is None


@pytest.mark.parametrize("framework,mode", [("jax", "eager"), ("jax", "jit"), ("tensorflow", "xla")])
def test_a_16_bit_gemm_records_the_type_its_product_ran_in(framework, mode):
    """XLA on a CPU converts bfloat16 operands to float32 around its dot (measured on Zen 4 and
    in TensorFlow XLA alike): the saved result says what the compiled program computes in."""
    from opbench.core.case import Case
    from opbench.suites.ops import prepare
    from opbench.workloads import ops

    backend = load_or_skip(framework)
    for dtype in ("bfloat16", "float32"):
        case = Case.operator(ops.get("gemm"), "forward", framework, mode=mode, dtype=dtype,
                             params={"k": 64, "m": 64, "n": 64})
        extra = prepare.prepare(case, backend).extra
        if dtype == "float32":
            assert "computed_in" not in extra  # only 16-bit labels are in question
        else:
            assert extra["computed_in"] in ("bfloat16", "float32")


def test_torch_eager_operators_leave_the_compiler_unimported_and_compile_still_refuses_a_fallback():
    """An eager process does not carry torch.compile's front end (3.8 s to import, 80 MB resident,
    counted in an eager case's peak memory); the first compiled case imports it and makes a hit of
    the recompile limit an error, not a silent eager fallback. In a fresh interpreter: this one may
    have imported the compiler already."""
    load_or_skip("torch")
    import subprocess
    import sys

    code = """
import sys
import numpy as np
from opbench import frameworks
b = frameworks.load("torch")
x = b.from_numpy(np.ones((4, 4), np.float32), "cpu", "float32")
b.forward(lambda p, a: a.relu(), {}, (x,), "eager", "cpu")()
b.forget()
print("eager", "torch._dynamo" in sys.modules)
b.forward(lambda p, a: a.relu(), {}, (x,), "compile", "cpu")
import torch._dynamo
print("compile", torch._dynamo.config.fail_on_recompile_limit_hit)
"""
    out = subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=600)
    assert out.stdout.split() == ["eager", "False", "compile", "True"], out.stderr[-2000:]
