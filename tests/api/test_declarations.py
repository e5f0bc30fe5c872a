"""A declaration opbench cannot benchmark fails when the user's file is imported, in one line that
names the declaring line and what to fix; one it can is registered as opbench's own are."""

from __future__ import annotations

import numpy as np
import pytest

from opbench import api, frameworks
from opbench.core.case import Case
from opbench.workloads import ops
from opbench.workloads.models import catalogue

HERE = "test_declarations.py:"


@pytest.fixture
def declared():
    """Names declared by a test, taken out of the registries after it."""
    names: list[str] = []
    yield names
    for name in names:
        ops.REGISTRY.pop(name, None)
        catalogue.MODELS.pop(name, None)


def square(declared, name="square_t", **kw):
    given = dict(inputs=lambda rng, p: rng.standard_normal((p["n"],)), reference=lambda p, x: x * x,
                 vjp=lambda p, xs, ct: 2 * xs[0] * ct, sizes=[{"n": 8}])
    op = api.operator(name, **{**given, **kw})
    declared.append(name)  # only what was declared: a refused name may be one of opbench's own
    return op


def test_an_operator_is_registered_with_its_origin_and_benchmarks(declared):
    op = square(declared, torch=lambda torch, p, x: x * x)
    spec = ops.get("square_t")
    assert spec.origin.startswith(HERE) and spec.family == "custom" and spec.differentiable
    assert spec.label({"n": 8}) == "8" and [a.shape for a in spec.make(np.random.default_rng(0), {"n": 8})] == [(8,)]
    assert set(op.benchmarks()) == {"test_square_t", "test_square_t_backward"}
    declared.append("cube_t")
    api.operator("cube_t", family="activation", inputs=lambda rng, p: rng.standard_normal(3),
                 reference=lambda p, x: x ** 3, sizes=[{"n": 3}])
    # benchmarks/ops generates opbench's own operators only: a user's runs where it is declared
    own = {name for op in api.builtin_operators("activation") for name in op.benchmarks()}
    assert "test_cube_t" not in own and {"test_relu", "test_relu_backward"} <= own
    with pytest.raises(api.DeclarationError, match=r"unknown operator family 'activations'; valid: .*activation"):
        api.builtin_operators("activations")


def test_a_backend_finds_the_users_implementation_with_its_module_first(declared):
    square(declared, numpy=lambda np_, p, x: np_.multiply(x, x))
    impl = frameworks.load("numpy").op("square_t")
    seen = []
    assert np.array_equal(impl({}, np.arange(3.0)), [0.0, 1.0, 4.0]) and impl.spec.name == "square_t"
    declared.append("cube2_t")
    api.operator("cube2_t", inputs=lambda rng, p: rng.standard_normal(3), reference=lambda p, x: x ** 3,
                 sizes=[{"n": 3}], numpy=lambda np_, p, x: seen.append(np_.__name__) or x ** 3)
    frameworks.load("numpy").op("cube2_t")({}, np.ones(3))
    assert seen == ["numpy"]


@pytest.mark.parametrize(("kw", "message"), [
    ({"pytorch": lambda t, p, x: x}, "unknown framework pytorch; valid: numpy"),
    ({"reference": lambda p, x: x[p["missing"]]}, "reference(p, *inputs) fails on {'n': 8}: KeyError"),
    ({"reference": lambda p, x: np.full_like(x, np.nan)}, "reference gives float64 with non-finite values"),
    ({"vjp": lambda p, xs, ct: ct[:2]}, "vjp gives gradients of shapes [(2,)], its differentiable inputs have [(8,)]"),
    ({"sizes": []}, "sizes is a list of problems"),
])
def test_a_declaration_opbench_cannot_run_names_its_line(declared, kw, message):
    with pytest.raises(api.DeclarationError, match=r"^" + HERE) as err:
        square(declared, **kw)
    assert message in str(err.value) and "\n" not in str(err.value)
    assert "square_t" not in ops.REGISTRY


def test_a_name_opbench_has_is_refused(declared):
    with pytest.raises(api.DeclarationError, match=r"operator 'gemm' is declared already \(one of opbench own"):
        square(declared, name="gemm")
    with pytest.raises(api.DeclarationError, match="model 'mlp' is declared already"):
        api.model("mlp", input_shape=(4,), layers=(api.Dense(2),))


def test_a_model_is_registered_apart_from_the_catalogues_own(declared):
    declared.append("tiny_t")
    m = api.model("tiny_t", input_shape=(6,), layers=(api.Dense(4, "relu"), api.Dense(3)), batch=5)
    assert m.spec.classes == 3 and m.spec.batch == {"quick": 5, "full": 5} and m.spec.origin.startswith(HERE)
    assert "tiny_t" not in catalogue.builtin() and "mlp" in catalogue.builtin()
    tests = m.benchmarks()
    assert set(tests) == {"test_tiny_t_training", "test_tiny_t_inference"}
    mark = tests["test_tiny_t_training"].pytestmark[0]
    assert mark.kwargs == {"model": "tiny_t", "direction": "training"}


def test_several_models_share_one_training_and_one_inference_benchmark(declared):
    declared.extend(["one_t", "two_t"])
    one = api.model("one_t", input_shape=(6,), layers=(api.Dense(3),), batch=5)
    two = api.model("two_t", input_shape=(6,), layers=(api.Dense(4, "relu"), api.Dense(3)), batch=5)
    tests = api.model_benchmarks(one, two)
    assert set(tests) == {"test_training", "test_inference"}
    assert tests["test_inference"].pytestmark[0].kwargs == {"model": ("one_t", "two_t"), "direction": "inference"}
    own = api.model_benchmarks()  # benchmarks/e2e: unbound, the listing runs the catalogue and --workloads
    assert set(own) == {"test_training", "test_inference"} and not hasattr(own["test_training"], "pytestmark")


@pytest.mark.parametrize(("layers", "message"), [
    ((api.Dense(4), "relu"), "'relu' is not one of opbench's layers"),
    ((api.Dense(4), api.Flatten()), "the last layer is a Dense"),
    ((api.Conv2D(4, 3), api.Dense(2)), "its layers do not fit (6,): layer 0 (Conv2D) takes 3-D inputs"),
])
def test_a_model_opbench_cannot_build_names_its_line(declared, layers, message):
    declared.append("bad_t")
    with pytest.raises(api.DeclarationError, match=r"^" + HERE) as err:
        api.model("bad_t", input_shape=(6,), layers=layers)
    assert message in str(err.value)


def test_a_function_case_has_the_suites_id_and_markers_without_a_size():
    case = Case.function("softsign_sum", "jax", "cpu", "jit", "float32")
    assert case.id == "jax-cpu-jit-float32"
    assert case.group == "softsign_sum-forward[cpu-float32]"
    assert {"jax", "cpu", "jit", "softsign_sum", "function"} <= set(case.markers) and case.is_function


def test_an_implementation_that_widens_to_float64_fails_its_check(declared):
    """What is timed must be the case's arithmetic: a result in float64 where the case computes in
    float32 is refused, however close it is (the NumPy entry here calls x.astype(float64))."""
    from opbench.suites.ops import prepare
    from opbench.suites.prepared import CorrectnessError

    square(declared, numpy=lambda np_, p, x: x.astype(np_.float64) * x)
    case = Case.operator(ops.get("square_t"), "forward", "numpy", params={"n": 8})
    prepared = prepare.prepare(case, frameworks.load("numpy"))
    with pytest.raises(CorrectnessError, match="returns float64 where the case computes in float32: the impl"):
        prepared.verify(prepared.call())


def test_a_framework_that_cannot_compile_in_the_mode_skips_the_fw_test_saying_why():
    runner = api.Runner(Case.function("f", "numpy", "cpu", "jit"), frameworks.load("numpy"), state=None)
    with pytest.raises(pytest.skip.Exception, match="numpy has no mode 'jit'"):
        runner.compile(lambda x: x)
    assert api.Runner(Case.function("f", "numpy"), frameworks.load("numpy"), state=None).compile(abs)(-2) == 2
