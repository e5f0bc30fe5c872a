"""The per-operator breakdown: attribution on hand-made traces and on recorded profiler outputs
of every framework (tests/data/profiles, written by tests/record_profiles.py), the taxonomy,
the operator suite's prediction, a deliberately slowed layer, and the report."""

from __future__ import annotations

import gzip
import importlib
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from opbench.frameworks.profiling import STEP, XLA_NOTE, Span, Trace, pair_markers, xla_kernels
from opbench.harness import config
from opbench.results import breakdown as report
from opbench.results.store import load_run
from opbench.suites.breakdown import attribution
from opbench.suites.breakdown.attribution import attribute
from opbench.suites.breakdown.prediction import layer_ops, op_case, predict
from opbench.suites.breakdown.taxonomy import classify
from opbench.workloads import ops
from opbench.workloads.models import catalogue
from tests.helpers import bench, load_or_skip, model_step, write

PROFILES = Path(__file__).parents[1] / "data" / "profiles"
RECORDED_STEPS = 2  # tests/record_profiles.py's STEPS


def _trace(*spans: Span, window=(0, 100)) -> Trace:
    return Trace("test", [window], list(spans))


# --- attribution on hand-made traces ---------------------------------------------------------

def test_overlapping_lanes_share_the_overlap():
    b = attribute(_trace(Span("aten::conv2d", "a", 0, 60), Span("aten::mm", "b", 20, 80)), training=False)
    assert b.ops == {("conv", "forward", "aten::conv2d"): 40e-9, ("dense", "forward", "aten::mm"): 40e-9}
    assert b.unattributed_s == pytest.approx(20e-9)


def test_an_operator_holds_the_calls_inside_it():
    b = attribute(_trace(Span("aten::conv2d", "a", 0, 50), Span("aten::empty", "a", 10, 20)), training=False)
    assert b.families() == {"conv": 50e-9}


def test_spans_are_cut_at_the_step_window():
    b = attribute(_trace(Span("Relu", "a", -10, 30), Span("Relu", "a", 95, 200)), training=False)
    assert b.families() == {"activation": pytest.approx(35e-9)}
    assert b.step_s == pytest.approx(100e-9)


def test_phases_from_the_order_where_the_profiler_gives_none():
    spans = [Span("Conv2D", "a", 0, 10), Span("SparseSoftmaxCrossEntropyWithLogits", "a", 10, 20),
             Span("Conv2DBackpropFilter", "a", 30, 40), Span("Mul", "a", 41, 44),
             Span("AssignSubVariableOp", "a", 50, 55), Span("Mul", "a", 56, 60)]
    b = attribute(_trace(*spans), training=True)
    assert b.ops[("conv", "forward", "Conv2D")] == pytest.approx(10e-9)
    assert b.ops[("other", "backward", "Mul")] == pytest.approx(3e-9)
    assert b.ops[("update", "update", "Mul")] == pytest.approx(4e-9)  # the optimizer's arithmetic is its update
    assert set(b.phases()) == {"forward", "backward", "update"}


def test_without_a_loss_to_cut_at_the_phases_stay_unsplit():
    b = attribute(_trace(Span("convolution.1", "a", 0, 10), Span("dot.2", "a", 10, 20)), training=True)
    assert set(b.phases()) == {"step"}
    assert set(attribute(_trace(Span("convolution.1", "a", 0, 10)), training=False).phases()) == {"forward"}


def test_a_trace_without_steps_is_refused():
    with pytest.raises(ValueError, match="no step"):
        attribute(Trace("torch", [], [Span("x", "a", 0, 1)]), training=True)


def test_stored_operators_are_capped_and_the_rest_summed(monkeypatch):
    monkeypatch.setattr(attribution, "MAX_OPS", 2)
    spans = [Span(f"Relu_{i}", "a", 10 * i, 10 * i + 1 + i) for i in range(4)]
    info = attribute(_trace(*spans), training=False).to_info()
    assert [op[2] for op in info["ops"]] == ["Relu_3", "Relu_2", "(2 smaller operators)"]
    assert sum(op[3] for op in info["ops"]) == pytest.approx(info["attributed_s"])


@given(st.lists(st.tuples(st.sampled_from("abc"), st.integers(-50, 150), st.integers(0, 120)), max_size=40),
       st.integers(0, 50), st.integers(1, 100))
def test_attributed_time_never_exceeds_the_step(raw, start, length):
    spans = [Span("aten::conv2d", lane, a, a + d) for lane, a, d in raw]
    b = attribute(Trace("test", [(start, start + length)], spans), training=False)
    assert b.attributed_s <= b.step_s * (1 + 1e-9)


def test_xla_kernels_pair_their_markers_across_threads_and_skip_calls():
    events = [("t1", "call", 0, 0), ("t1", "convolution.1", 5, 0), ("t2", "end: convolution.1", 25, 0),
              ("t2", "loop_fusion.3", 10, 0), ("t2", "end: loop_fusion.3", 14, 0), ("t1", "end: call", 30, 0),
              ("t1", STEP, 0, 40)]
    spans = sorted(xla_kernels(events), key=lambda s: s.start)
    assert [(s.name, s.lane, s.start, s.end, s.fused) for s in spans] == [
        ("convolution.1", "t1", 5, 25, False), ("loop_fusion.3", "t2", 10, 14, True)]
    assert list(pair_markers([("x", "end: a", 1), ("x", "a", 2)])) == []  # an end before its start is no kernel


@pytest.mark.parametrize(("name", "family"), [
    ("aten::conv2d", "conv"), ("ConvolutionBackward0", "conv"), ("aten::addmm", "dense"), ("AddmmBackward0", "dense"),
    ("aten::avg_pool2d", "pooling"), ("ReluBackward0", "activation"), ("aten::cross_entropy_loss", "loss"),
    ("NllLossBackward0", "loss"), ("aten::flatten", "copy"), ("torch::autograd::AccumulateGrad", "copy"),
    ("Optimizer.step#Adam.step", "update"), ("aten::lstm", "recurrent"), ("NativeBatchNormBackward0", "normalization"),
    ("sequential_1/conv2d_1/BiasAdd:BiasAdd", "conv"), ("gradient_tape/sequential_1/conv2d_1/ReluGrad:ReluGrad",
                                                         "activation"),
    ("gradient_tape/sequential_1/dense_1/MatMul/MatMul:_MklMatMul", "dense"), ("convolution.1", "conv"),
    ("dot_general.192", "dense"), ("reduce_window_sum.170.clone", "pooling"), ("sqrt.2.clone", "other"),
    ("wrapped_reduce-window.3", "pooling"),
    ("add.406", "other"), ("_backward_Convolution", "conv"), ("FullyConnected", "dense"), ("Pooling", "pooling"),
    ("pick", "loss"), ("adam_update", "update"), ("DeleteVariable", "other"), ("AssignSubVariableOp", "update"),
    ("Mul", "other"), ("_backward_RNN", "recurrent"), ("BatchNorm", "normalization"),
])
def test_taxonomy(name, family):
    assert classify(name) == family


def test_fused_kernels_are_fused_unless_they_only_move_data():
    assert classify("broadcast_maximum_fusion.1", fused=True) == "fused"
    assert classify("transpose_copy_fusion.11", fused=True) == "copy"
    assert classify("bitcast_concatenate_fusion", fused=True) == "copy"
    assert classify("Convolution,Activation,Pooling", fused=True) == "fused"
    assert classify("aten::mul_", phase="update") == "update"


# --- recorded profiler outputs ---------------------------------------------------------------

ALL_PHASES = {"forward", "backward", "update"}
RECORDED = {  # what each framework's profile of a LeNet training step must show
    "torch-eager": ({"conv", "dense", "activation", "pooling", "loss", "update"}, ALL_PHASES),
    "torch-compile": ({"conv", "dense", "fused", "update"}, ALL_PHASES),
    "tensorflow-eager": ({"conv", "dense", "pooling", "loss", "update"}, ALL_PHASES),
    "tensorflow-graph": ({"conv", "dense", "pooling", "activation", "update"}, ALL_PHASES),
    "tensorflow-xla": ({"conv", "dense"}, {"step"}),
    "mxnet-eager": ({"conv", "dense", "pooling", "fused", "update"}, ALL_PHASES),
    "mxnet-hybridize": ({"fused", "update"}, ALL_PHASES),
    "jax-eager": ({"conv", "dense"}, {"step"}),
    "jax-jit": ({"conv", "dense", "fused"}, {"step"}),
}


def recorded(name: str) -> Trace:
    framework = name.split("-", maxsplit=1)[0]
    load_or_skip(framework)  # in the order frameworks must be imported
    module = importlib.import_module(f"opbench.frameworks.{framework}.profile")
    raw = gzip.decompress(next(PROFILES.glob(f"{name}.*.gz")).read_bytes())
    if framework == "torch":
        return module.parse(json.loads(raw))
    if framework == "mxnet":
        doc = json.loads(raw)
        return module.parse(module.repaired(doc["trace"]), doc["marks"])
    return module.parse(raw)


@pytest.mark.parametrize("name", sorted(RECORDED))
def test_recorded_profile(name):
    families, phases = RECORDED[name]
    trace = recorded(name)
    assert len(trace.steps) == RECORDED_STEPS
    for window in trace.steps:
        one = attribute(Trace(trace.framework, [window], trace.spans), training=True)
        assert 0 < one.attributed_s <= one.step_s
    b = attribute(trace, training=True)
    found = {f for f, s in b.families().items() if s > 0}
    assert families <= found, f"{name}: families {sorted(found)}"
    assert set(b.phases()) == phases
    assert not found & {"recurrent", "normalization"}, "LeNet has no LSTM and no batch norm"
    assert (XLA_NOTE in trace.notes) == (name in ("tensorflow-xla", "jax-eager", "jax-jit"))


# --- the operator suite's prediction ---------------------------------------------------------

def test_layer_ops_of_lenet():
    items = [(i.layer, i.op, dict(i.p), i.count) for i in layer_ops(catalogue.get("lenet"), 32)]
    assert items[:3] == [
        ("0", "conv2d", {"n": 32, "c": 1, "h": 28, "w": 28, "o": 6, "k": 5, "stride": 1, "pad": 0}, 1),
        ("0", "relu", {"n": 32, "d": 6 * 24 * 24}, 1),
        ("1", "avgpool2d", {"n": 32, "c": 6, "h": 24, "w": 24, "k": 2, "stride": 2}, 1)]
    assert ("4", "flatten", {"n": 32, "c": 16, "h": 5, "w": 5}, 1) in items
    assert ("5", "gemm", {"m": 32, "k": 400, "n": 120}, 1) in items
    assert items[-1] == ("loss", "softmax", {"n": 32, "d": 10}, 1)


def test_layer_ops_of_an_lstm_and_a_resnet():
    lstm = layer_ops(catalogue.get("lstm"), 8)
    cell = {(i.op, i.count) for i in lstm if i.layer == "0"}
    assert cell == {("gemm", 250), ("sigmoid", 250), ("tanh", 500)}
    resnet = {i.op for i in layer_ops(catalogue.get("resnet20"), 8)}
    assert {"conv2d", "batch_norm", "relu", "avgpool2d", "gemm", "softmax"} <= resnet


def test_every_layer_op_is_a_valid_operator_case():
    for name in catalogue.MODELS:
        for item in layer_ops(catalogue.get(name), 2):
            case = op_case(item, "torch", "cpu", "eager", training=True)
            assert case.direction == "backward" and ops.get(case.name).differentiable


def test_prediction_verifies_and_times_each_operator():
    pred = predict(catalogue.get("lenet"), 2, load_or_skip("numpy"), "cpu", "eager", training=True)
    assert pred["failed"] == []
    assert len(pred["layers"]) == len(layer_ops(catalogue.get("lenet"), 2))
    assert pred["predicted_s"] == pytest.approx(sum(row[4] * row[5] for row in pred["layers"]))


def test_an_operator_that_fails_is_listed_and_the_rest_predicted(monkeypatch):
    from opbench.suites.breakdown import prediction
    from opbench.suites.prepared import CorrectnessError

    real = prediction.verified

    def verified(case, backend):
        if case.name == "avgpool2d":
            raise CorrectnessError("avgpool2d is off\nby a lot")
        return real(case, backend)

    monkeypatch.setattr(prediction, "verified", verified)
    monkeypatch.setattr(prediction, "_TIMES", {})
    pred = predict(catalogue.get("lenet"), 3, load_or_skip("numpy"), "cpu", "eager", training=False)
    assert pred["failed"] == ["avgpool2d 3x6x24x24-k2-s2: CorrectnessError: avgpool2d is off",
                              "avgpool2d 3x16x10x10-k2-s2: CorrectnessError: avgpool2d is off"]
    assert pred["predicted_s"] > 0 and "avgpool2d" not in {row[1] for row in pred["layers"]}


# --- a deliberately slowed layer, through a real profiler ------------------------------------

def test_a_slowed_layer_shows_up_in_its_family(tmp_path):
    """LeNet's first convolution made to run 20 times per call (about 5 ms more per step, against a
    step of about 2.5 ms): the profiled breakdown puts most of the added time in the convolutions'
    forward time. The effect is sized to stand far above a busy machine's noise."""
    torch = pytest.importorskip("torch")
    backend, native, call = model_step("torch", "eager")

    def profiled():
        out = {}
        for (family, phase, _), s in attribute(backend.profile(call, 5, str(tmp_path)), training=True).ops.items():
            out[family, phase] = out.get((family, phase), 0.0) + s
        return out

    def least(runs: list[dict]) -> dict:  # each family's least time over the runs: a busy moment only adds
        return {k: min(r.get(k, 0.0) for r in runs) for k in set().union(*runs)}

    profiled()  # the process's first profile starts the profiler up
    conv = next(m for m in native.net.modules() if isinstance(m, torch.nn.Conv2d))
    once = conv.forward
    slow = lambda x: [once(x) for _ in range(20)][-1]
    plain, slowed = [], []
    for _ in range(3):  # alternated, so that another process's load falls on both alike
        conv.forward = once
        plain.append(profiled())
        conv.forward = slow
        slowed.append(profiled())
    plain, slowed = least(plain), least(slowed)
    growth = {k: slowed.get(k, 0.0) - plain.get(k, 0.0) for k in slowed.keys() | plain.keys()}
    assert max(growth, key=growth.get) == ("conv", "forward"), growth
    assert growth["conv", "forward"] > 0.5 * sum(g for g in growth.values() if g > 0), growth


# --- configuration and report ----------------------------------------------------------------

def test_the_breakdown_is_off_unless_asked_for():
    assert config.resolve({}, environ={}).breakdown == "off"
    assert config.resolve({"breakdown": "predict"}, environ={}).breakdown == "predict"
    with pytest.raises(config.ConfigError, match="breakdown"):
        config.resolve({"breakdown": "everything"}, environ={})


def _info(conv: float, other: float, step: float, predicted: float | None = None) -> dict:
    info = {"profiler": "torch.profiler", "steps": 5, "profiled_step_s": step, "attributed_s": conv + other,
            "unattributed_s": step - conv - other, "families": {"conv": conv, "other": other},
            "phases": {"forward": conv, "backward": other}, "ops": [["conv", "forward", "aten::conv2d", conv],
                                                                    ["other", "backward", "SetValueOp", other]],
            "notes": ["a note"]}
    if predicted is not None:
        info["prediction"] = {"predicted_s": predicted, "layers": [], "failed": [], "not_in_suite": []}
    return info


def test_report_shows_shares_prediction_and_others(tmp_path):
    group = "lenet-training[cpu-float32-lenet-b32]"
    path = write(tmp_path / "run.json", [
        bench("test_training[torch-cpu-eager-float32-lenet-b32]", 2e-3, group=group, flops=None,
              breakdown=_info(1e-3, 0.5e-3, 2.5e-3, predicted=1.5e-3)),
        bench("test_training[torch-cpu-compile-float32-lenet-b32]", 3e-3, group=group, flops=None, mode="compile",
              breakdown=_info(1e-3, 0, 2e-3)),
        bench("test_training[jax-cpu-jit-float32-lenet-b32]", 3e-3, group=group, flops=None, framework="jax",
              mode="jit", breakdown={"error": "RuntimeError: no trace"}),
    ])
    text = "\n".join(report.format_lines([load_run(path)]))
    assert f"where the step's time goes, {group}" in text
    eager = next(line for line in text.splitlines() if line.startswith("torch/eager "))
    assert "40%" in eager and "20%" in eager and "1.5 ms" in eager and "1.33x" in eager and "500 us" in eager
    assert "SetValueOp 20%" in text and "note: a note" in text
    assert f"breakdown failed for {group} jax/jit: RuntimeError: no trace" in text
    assert not any(line.startswith("jax/jit ") for line in text.splitlines())  # no row without a breakdown
    assert "busy machine" not in text


def test_a_prediction_taken_on_a_busy_machine_is_marked(tmp_path):
    """timed/pred 0.03x with no warning: the operator suite was timed while the machine was busy."""
    busy = {"other_cpus": 1.9, "steal": 0.0, "run_queue": 6, "cpus": 2, "team": 2, "wall_s": 3.0, "busy": True}
    info = {**_info(1e-3, 0.5e-3, 2.5e-3, predicted=99e-3), "load": busy}
    path = write(tmp_path / "run.json", [bench("test_training[torch-cpu-eager-float32-lenet-b32]", 3.4e-3,
                                               group="lenet-training[cpu-float32-lenet-b32]", flops=None,
                                               breakdown=info)])
    text = "\n".join(report.format_lines([load_run(path)]))
    eager = next(line for line in text.splitlines() if line.startswith("torch/eager "))
    assert "0.03x !" in eager
    assert "note: ! the step was timed, or the profile and prediction taken, on a busy machine" in text


MODELS = (Path(__file__).parents[2] / "benchmarks" / "e2e" / "test_models.py").read_text(encoding="utf-8")


def test_the_plugin_profiles_after_timing_when_asked(pytester: pytest.Pytester):
    """One real run through the plugin (the default, off, adds nothing: test_the_breakdown_is_off...)."""
    pytest.importorskip("torch")  # torch.profiler's reader; the legacy line has no PyTorch
    pytester.makepyfile(test_models=MODELS)
    out = pytester.path / "run.json"
    result = pytester.runpytest_subprocess("--framework", "torch", "--mode", "eager", "-m", "lenet and training",
                                           "--breakdown", "profile", "--benchmark-max-time=0.01",
                                           "--benchmark-min-rounds=2", f"--benchmark-json={out}",
                                           "-p", "no:cacheprovider")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*breakdown=profile*"])
    (bench,) = json.loads(out.read_text())["benchmarks"]
    info = bench["extra_info"]["breakdown"]
    assert info["profiler"] == "torch.profiler" and info["steps"] > 0 and "prediction" not in info
    assert 0 < info["attributed_s"] <= info["profiled_step_s"]
    assert {"conv", "update"} <= set(info["families"]) and set(info["phases"]) == ALL_PHASES


def _case(device: str = "cpu"):
    from opbench.core.case import Case

    return Case.model("lenet", "training", "torch", 2, device=device)


def test_a_gpu_breakdown_says_it_is_host_time():
    from types import SimpleNamespace

    from opbench.suites.breakdown import GPU_NOTE, profiled_pass

    def profile(call, steps, folder):
        return _trace(Span("aten::mm", "a", 0, 9))

    fake = SimpleNamespace(profiler_name="fake", profile=profile)
    assert GPU_NOTE in profiled_pass(_case("gpu"), fake, None, "profile")["notes"]
    assert GPU_NOTE not in profiled_pass(_case("cpu"), fake, None, "profile")["notes"]


def test_a_failed_profiled_pass_keeps_the_timed_result():
    from types import SimpleNamespace

    from opbench.suites.measure import BreakdownFailed, breakdown

    def broken(call, steps, folder):
        raise RuntimeError("the profiler\nbroke")

    with pytest.warns(BreakdownFailed, match="timed result is kept"):
        info = breakdown(_case(), SimpleNamespace(profiler_name="fake", profile=broken), None, "profile")
    assert info == {"error": "RuntimeError: the profiler"}


def test_every_family_the_taxonomy_gives_is_one_the_report_shows():
    """One list of families (core.schema) for the classifier and the report: whatever a profiled
    operator is classified as, the report has a column for it."""
    from opbench.core.schema import FAMILY_NAMES
    from opbench.suites.breakdown.taxonomy import _PATTERNS

    given_out = {family for family, _ in _PATTERNS} | {"update", "fused", "copy", "other"}
    assert given_out <= set(FAMILY_NAMES) and report.FAMILIES == FAMILY_NAMES
    assert {classify(n) for n in ("aten::conv2d", "aten::mm", "Relu", "MaxPool", "weird_thing")} <= set(FAMILY_NAMES)
