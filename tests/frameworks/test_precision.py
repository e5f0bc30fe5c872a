"""Mixed precision (--precision amp): the setting, the cases and their skips, the reference's
emulation of it, the gate's low-precision check, and the gate on every layer kind in every
framework that runs it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from opbench import frameworks as backends
from opbench.core.case import Case
from opbench.harness.config import ConfigError, Settings, resolve
from opbench.suites import prepared as shared
from opbench.suites.model_check import check_low_precision
from opbench.suites.models.cases import model_cases
from opbench.suites.models.equivalence import prepare_model
from opbench.suites.prepared import CorrectnessError
from opbench.workloads.models import catalogue, datasets, precision, reference
from opbench.workloads.models.spec import init_params
from tests.frameworks.test_models import SMALL, model_case
from tests.helpers import load_or_skip

FRAMEWORKS = backends.taking_part("models")


def test_the_precision_setting_defaults_to_float32_and_refuses_unknown_names():
    assert resolve({}, environ={}).precisions == ("float32",)
    assert resolve({}, environ={"OPBENCH_PRECISION": "float32,amp"}).precisions == ("float32", "amp")
    with pytest.raises(ConfigError, match="unknown precision 'fp8'; valid: float32, amp"):
        resolve({"precision": "fp8"}, environ={})


def test_amp_cases_carry_the_precision_in_their_id_and_the_amp_marker():
    settings = Settings(frameworks=("torch",), modes=("eager",), precisions=("float32", "amp"))
    cases = [c for c in model_cases(settings, "training") if c.name == "mlp"]
    assert [c.id for c in cases] == ["torch-cpu-eager-float32-mlp-b128", "torch-cpu-eager-amp-mlp-b128"]
    assert ["amp" in c.markers for c in cases] == [False, True]


def test_amp_computes_in_bfloat16_on_a_cpu_and_float16_on_a_gpu():
    assert precision.compute_dtype("amp", "cpu") == "bfloat16"
    assert precision.compute_dtype("amp", "gpu") == "float16"
    assert precision.compute_dtype("float32", "gpu") == "float32"
    assert precision.low_dtype("amp", "cpu") == "bfloat16" and precision.low_dtype("float32", "cpu") is None
    with pytest.raises(ValueError, match="unknown precision"):
        precision.compute_dtype("float16", "cpu")


def test_rounders_round_to_the_nearest_low_precision_value():
    bf16, fp16 = precision.rounder("bfloat16"), precision.rounder("float16")
    x = np.array([1 + 2.0**-9, 1 + 3 * 2.0**-9, 1 + 2.0**-12, 1e-3])
    assert list(bf16(x)[:2]) == [1.0, 1 + 2.0**-7]  # ties to even; 8 bits of significand
    assert fp16(x)[2] == 1.0 and abs(fp16(x)[3] - 1e-3) <= 2.0**-11 * 1e-3
    assert precision.rounder("float32") is None


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_reference_emulates_mixed_precision_at_its_roundoff(dtype):
    """Rounded where a framework stores the low-precision type, the reference's logits and the
    last layer's gradient move by about the type's unit roundoff: far from float64, and far from
    zero. Deeper gradients collect the rounding of every layer above them, and a ReLU input whose
    product and bias cancel is off by the product's rounding, not its own (the product is stored
    before the bias is added), which flips masks: the first convolution's gradient is 116 roundoffs
    off in float16 here, 95 with one rounding per layer. It must stay well short of the gradient
    itself (half its norm), or the emulation would allow anything."""
    model = catalogue.get("lenet")
    params = {k: v.astype(np.float64) for k, v in init_params(model).items()}
    x, y = datasets.synthetic(model, 8)
    x = x.astype(np.float64)
    u = precision.UNIT_ROUNDOFF[dtype]
    exact, low = (reference.forward(model, params, x, lowp) for lowp in (None, precision.rounder(dtype)))
    rel = np.linalg.norm(low - exact) / np.linalg.norm(exact)
    assert u / 10 < rel < 10 * u
    _, g_exact, _ = reference.loss_and_grads(model, params, x, y)
    _, g_low, _ = reference.loss_and_grads(model, params, x, y, lowp=precision.rounder(dtype))
    rel = {k: np.linalg.norm(g_low[k] - g_exact[k]) / np.linalg.norm(g_exact[k]) for k in g_exact}
    assert u / 10 < rel["7.W"] < 10 * u
    assert all(u / 10 < r < 0.5 for r in rel.values()), rel


def test_the_low_precision_check_tells_bfloat16_from_float32():
    check_low_precision("x", got=3e-3, float32=2e-7, low=3e-3, dtype="bfloat16")
    with pytest.raises(CorrectnessError, match=r"as close as float32 computes .* does not run in bfloat16"):
        check_low_precision("x", got=5e-7, float32=2e-7, low=3e-3, dtype="bfloat16")


def test_mxnet_amp_is_a_skip_with_its_reason():
    load_or_skip("mxnet")
    case = Case.model("mlp", "training", "mxnet", 128, precision="amp")
    with pytest.raises(backends.Unavailable, match="does not compute in bfloat16"):
        shared.require(case)
    assert "patches every operator of the process" in backends.load("mxnet").amp_unavailable("gpu")


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("direction", ["training", "inference"])
def test_every_layer_kind_passes_the_amp_gate(framework, direction, monkeypatch):
    """Batch norms (frozen too), shortcuts of every kind and global pooling in bfloat16, gated
    against the emulated reference, and found to compute in bfloat16."""
    backend = load_or_skip(framework)
    monkeypatch.setitem(catalogue.MODELS, "bn-zoo", SMALL["bn-zoo"])
    case = dataclasses.replace(model_case(framework, "bn-zoo", direction, batch=4), dtype="amp")
    try:
        shared.require(case)
    except backends.Unavailable as exc:
        pytest.skip(str(exc))
    prepared = prepare_model(case, backend)
    assert np.isfinite(prepared.verify(prepared.call()))
    assert prepared.extra["compute_dtype"] == "bfloat16"


def test_jax_float16_gradients_land_where_the_emulation_puts_them(monkeypatch):
    """JAX stores a dense layer's product in float16 before adding its bias; the emulation does
    too, and JAX's float16 MLP gradients at the gate's batch land within twice its error of
    float64's, plus one rounding, on every tensor (on an H100 and on the CPU alike: 1.09% on the
    first layer, where one rounding per layer would have allowed a seventh of that).

    The CPU stands in for the GPU only where its float16 dot accumulates in float32, as a GPU's
    tensor cores do: JAX 0.10's XLA:CPU does, JAX 0.7.1's (the NumPy 1.26 line) sums in float16
    and lands 2.4 to 4.8 times the emulation's error from float64 (2026-11-28, Xeon model 167)."""
    load_or_skip("jax")
    import jax
    import jax.numpy as jnp

    if not _float16_dot_accumulates_in_float32(jax, jnp):
        pytest.skip(f"JAX {jax.__version__}'s CPU dot sums float16 in float16, which no GPU does")

    from opbench.frameworks.jax import models as jax_models
    from opbench.suites.model_reference import initial_weights

    model = catalogue.get("mlp")
    params = initial_weights(model)
    x, y = datasets.batch(model, model.batch["quick"], "", 0)
    _, exact, _ = reference.loss_and_grads(model, params, x.astype(np.float64), y)
    _, emulated, _ = reference.loss_and_grads(model, params, x.astype(np.float64), y,
                                              lowp=precision.rounder("float16"))
    loss = lambda p: jax_models.loss(model, p, jnp.asarray(x, jnp.float32), jnp.asarray(y, jnp.int32),
                                     jnp.float16)[0]
    got = jax.jit(jax.grad(loss))({k: jnp.asarray(v, jnp.float32) for k, v in params.items()})
    rel = lambda a, k: np.linalg.norm(np.asarray(a, np.float64) - exact[k]) / np.linalg.norm(exact[k])
    for k in exact:
        # plus one float16 rounding: JAX sums a bias's gradient in float16 as well (2.b: 1.4 roundings)
        assert rel(got[k], k) <= 2 * rel(emulated[k], k) + precision.UNIT_ROUNDOFF["float16"], k


def _float16_dot_accumulates_in_float32(jax, jnp) -> bool:
    """Whether the installed XLA:CPU rounds a float16 product once, from a float32 sum, at the
    MLP's first layer (128 x 784 by 784 x 128): nearly every element then equals NumPy's float32
    product rounded to float16 (99.8% on JAX 0.10), where a float16 sum leaves a tenth of them
    equal (9% on JAX 0.7.1, whose small dots, 64 x 784 by 784 x 64 and below, still sum in
    float32: the kernel depends on the shape, so the probe takes the test's own)."""
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(shape).astype(np.float16) for shape in ((128, 784), (784, 128)))
    once = (a.astype(np.float32) @ b.astype(np.float32)).astype(np.float16)
    got = np.asarray(jax.jit(jnp.matmul)(a, b))
    return float(np.mean(got == once)) > 0.5


def test_no_low_precision_allowance_is_below_one_rounding_of_the_update():
    """Every gradient of a low-precision step is stored in its type: the emulated error of each
    tensor's update is at least one rounding, however the one emulated draw happened to fall
    (LeNet's ten output biases land at 0.26 of a bfloat16 rounding without the floor)."""
    from opbench.suites.model_reference import SGD_STEPS, emulated_errors

    emulation = emulated_errors("lenet", 32, "", SGD_STEPS, 1, False, "bfloat16")
    u = precision.UNIT_ROUNDOFF["bfloat16"]
    assert all(err >= u for step in emulation.updates for err in step.values())
    assert any(err > u for step in emulation.updates for err in step.values())
    # running statistics are no gradients and keep their own emulated error (ResNet-20's moved ones)
    stats = emulated_errors("resnet20", 8, "", SGD_STEPS, 1, False, "bfloat16").updates[0]
    assert any(err < u for k, err in stats.items() if k.endswith((".mean", ".var")))
