"""FLOP counts: exact where the suite says so (equal to torch.utils.flop_counter's for products
and convolution, forward and backward), nominal elsewhere and then kept out of %-of-peak."""

from __future__ import annotations

import numpy as np
import pytest

from opbench.results.report import grid
from opbench.results.store import load_run
from opbench.workloads import ops
from tests.helpers import bench, write

PROBLEMS = {
    "gemm": {"m": 8, "k": 16, "n": 4},
    "bmm": {"b": 2, "m": 8, "k": 16, "n": 4},
    "conv2d": {"n": 2, "c": 3, "h": 9, "w": 7, "o": 4, "k": 3, "stride": 2, "pad": 1},
}


@pytest.mark.parametrize("name", list(PROBLEMS))
def test_exact_counts_equal_torchs_flop_counter(name):
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    spec, p = ops.get(name), PROBLEMS[name]
    xs = [torch.tensor(a, requires_grad=True) for a in spec.make(np.random.default_rng(0), p)]

    def run():
        if name == "conv2d":
            return torch.nn.functional.conv2d(xs[0], xs[1], stride=p["stride"], padding=p["pad"])
        return xs[0] @ xs[1]

    with FlopCounterMode(display=False) as forward:
        run()
    with FlopCounterMode(display=False) as both:
        y = run()
        y.backward(torch.ones_like(y))
    inputs = spec.make(np.random.default_rng(0), p)
    assert spec.cost(p, "forward", inputs, 1, 4)[::2] == (forward.get_total_flops(), True)
    assert spec.cost(p, "backward", inputs, 1, 4)[::2] == (both.get_total_flops(), True)


def test_dot_backward_counts_the_work_done():
    spec, p = ops.get("dot"), {"n": 100}
    inputs = spec.make(np.random.default_rng(0), p)
    assert spec.cost(p, "forward", inputs, 1, 4)[::2] == (200, True)
    assert spec.cost(p, "backward", inputs, 1, 4)[::2] == (400, True)  # 2n forward, then ct*b and ct*a


def test_pooling_counts_both_output_dimensions():
    p = {"n": 1, "c": 1, "h": 8, "w": 4, "k": 2, "stride": 2}
    assert ops.get("maxpool2d").flops(p) == 4 * 2 * 4


@pytest.mark.parametrize("name", ["relu", "batch_norm", "layer_norm", "avgpool2d"])
def test_nominal_counts_say_so(name):
    spec = ops.get(name)
    p = spec.shapes["quick"][0]
    inputs = spec.make(np.random.default_rng(0), p)
    assert spec.cost(p, "backward", inputs, 1, 4)[2] is False


def test_report_leaves_nominal_counts_out_of_percent_of_peak(tmp_path):
    path = write(tmp_path / "run.json", [bench("test_gemm[torch-cpu-eager-float32-64x64x64]", 1e-3),
                                         bench("test_gemm[numpy-cpu-eager-float32-64x64x64]", 1e-3,
                                               framework="numpy", flops_exact=False)])
    cells = grid([load_run(path)]).cells
    peaks = {col.split("/")[0]: c.peak for (_, col), c in cells.items()}
    assert peaks == {"torch": 300.0, "numpy": None}


def test_a_models_least_flops_are_its_products_by_hand():
    from opbench.workloads.models import catalogue
    from opbench.workloads.models.cost import least_flops

    mlp = 2 * (784 * 128 + 128 * 64 + 64 * 10)
    assert least_flops(catalogue.get("mlp"), 8, "inference") == 8 * mlp
    assert least_flops(catalogue.get("mlp"), 8, "training") == 2 * 8 * mlp
    # LeNet: two convolutions (their k x k windows divided out: Winograd's most) and three dense layers
    lenet = 2 * (6 * 24 * 24 * 1 + 16 * 10 * 10 * 6 + 16 * 5 * 5 * 120 + 120 * 84 + 84 * 10)
    assert least_flops(catalogue.get("lenet"), 1, "inference") == lenet
    # the LSTM: 4 gates of 128 units over 250 steps of 50 features, the first step's zero state
    # left out (torch's FlopCounterMode counts no fused aten::lstm, so this one is by hand)
    lstm = 2 * (4 * 128 * (250 * 50 + 249 * 128) + 128 * 2)
    assert least_flops(catalogue.get("lstm"), 1, "inference") == lstm


@pytest.mark.parametrize("name", ["mlp", "lenet", "vgg10", "resnet20"])
def test_no_correct_call_does_less_than_a_models_least_flops(name):
    """torch's own count of what its model runs (FlopCounterMode: every product, convolutions at
    their full window) is at least the floor, for inference and for a training step."""
    torch = pytest.importorskip("torch")
    from torch.utils.flop_counter import FlopCounterMode

    from opbench import frameworks
    from opbench.workloads.models import catalogue, datasets
    from opbench.workloads.models.cost import least_flops
    from opbench.workloads.models.spec import init_params

    model, batch = catalogue.get(name), 2
    native = frameworks.load("torch").build(model, init_params(model), "cpu", "float32", "eager")
    x, y = native.inputs(*datasets.synthetic(model, batch))
    for direction, call in (("inference", native.infer(x)), ("training", native.train_step(x, y, model.optimizer))):
        with FlopCounterMode(display=False) as counted:
            call()
        assert 0 < least_flops(model, batch, direction) <= counted.get_total_flops(), direction
    del torch
