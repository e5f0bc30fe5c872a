"""The model layer: the NumPy reference model against finite differences, the catalogue's
shapes, each framework's weight mapping, functional equivalence, and that the gate catches a
deliberately wrong mapping."""

from __future__ import annotations

import math

import numpy as np
import pytest

from opbench import backends
from opbench.cases import Case
from opbench.e2e import prepare_model
from opbench.execute import CorrectnessError
from opbench.known_issues import KNOWN_ISSUES
from opbench.models import catalogue, datasets, reference
from opbench.models.native import nchw_dense_rows, nhwc_dense_rows
from opbench.models.spec import count_params, init_params, param_shapes
from tests.helpers import load_or_skip

FRAMEWORKS = backends.taking_part("models")


@pytest.mark.parametrize("name", list(catalogue.MODELS))
def test_reference_gradients_match_finite_differences(name):
    model = catalogue.get(name)
    params = {k: v.astype(np.float64) for k, v in init_params(model).items()}
    x, y = datasets.synthetic(model, 2)
    x = x.astype(np.float64)
    _, grads = reference.loss_and_grads(model, params, x, y)
    r = np.random.default_rng(0)
    v = {k: r.standard_normal(p.shape) for k, p in params.items()}
    eps = 1e-8  # small: with ~10^5 ReLUs, a larger step crosses kinks

    def loss_at(t):
        moved = {k: params[k] + t * v[k] for k in params}
        return reference.cross_entropy(reference.forward(model, moved, x), y)[0]

    numeric = (loss_at(eps) - loss_at(-eps)) / (2 * eps)
    analytic = sum(float(np.sum(grads[k] * v[k])) for k in params)
    assert math.isclose(analytic, numeric, rel_tol=1e-4, abs_tol=1e-6)
    assert set(grads) == set(params)


def test_catalogue_matches_the_studies():
    assert count_params(catalogue.get("mlp")) == 784 * 128 + 128 + 128 * 64 + 64 + 64 * 10 + 10
    vgg10 = catalogue.get("vgg10")
    assert sum(1 for k in param_shapes(vgg10) if k.endswith(".W")) == 10 + 3
    vgg16 = catalogue.get("vgg16")
    assert sum(1 for k, s in param_shapes(vgg16).items() if len(s) == 4) == 13
    assert param_shapes(catalogue.get("lenet"))["5.W"] == (16 * 5 * 5, 120)
    assert param_shapes(catalogue.get("lstm"))["0.Wx"] == (50, 4 * 128)
    for model in catalogue.MODELS.values():
        assert model.batch["full"] in (128, 200)


def test_flatten_row_reordering_round_trips():
    w = np.arange(2 * 3 * 4 * 5, dtype=float).reshape(2 * 3 * 4, 5)
    np.testing.assert_array_equal(nchw_dense_rows(nhwc_dense_rows(w, (2, 3, 4)), (2, 3, 4)), w)
    x = np.random.default_rng(0).standard_normal((1, 2, 3, 4))
    # NCHW flatten with canonical rows == NHWC flatten with reordered rows
    nhwc = x.transpose(0, 2, 3, 1).reshape(1, -1)
    np.testing.assert_allclose(x.reshape(1, -1) @ w, nhwc @ nhwc_dense_rows(w, (2, 3, 4)))


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("name", ["mlp", "lenet", "lstm"])
def test_weight_mapping_round_trips(framework, name):
    backend = load_or_skip(framework)
    model = catalogue.get(name)
    params = init_params(model)
    native = backend.build(model, params, "cpu", "float32", "eager")
    got = native.get_params()
    assert set(got) == set(params)
    for key in params:
        np.testing.assert_allclose(got[key], params[key], rtol=0, atol=1e-7, err_msg=key)


def model_case(framework: str, name: str, direction: str, mode: str = "eager", batch: int = 4) -> Case:
    return Case("model", name, "e2e", direction, framework, "cpu", mode, "float32", f"{name}-b{batch}",
                (("batch", batch),))


@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("name", list(catalogue.MODELS))
def test_equivalence_with_numpy(framework, name):
    """First loss equals NumPy's; two SGD steps give NumPy's losses and parameters."""
    backend = load_or_skip(framework)
    prepared = prepare_model(model_case(framework, name, "training", batch=2), backend)
    assert prepared.verify(prepared.call()) < 1e-3


def test_wrong_flatten_mapping_is_caught(monkeypatch):
    backend = load_or_skip("tensorflow")
    from opbench.backends import tensorflow_models

    monkeypatch.setattr(tensorflow_models, "nhwc_dense_rows", lambda w, chw: w)
    monkeypatch.setattr(tensorflow_models, "nchw_dense_rows", lambda w, chw: w)
    prepared = prepare_model(model_case("tensorflow", "lenet", "inference"), backend)
    with pytest.raises(CorrectnessError, match="logits differ"):
        prepared.verify(prepared.call())


def test_wrong_lstm_gate_order_is_caught(monkeypatch):
    backend = load_or_skip("torch")
    from opbench.backends import torch_models

    real = torch_models.TorchModel.set_params

    def swapped_gates(self, params):
        """Load the input and forget gates in each other's place."""
        swapped = dict(params)
        for key in ("0.Wx", "0.Wh", "0.b"):
            i, f, g, o = np.split(params[key], 4, axis=-1)
            swapped[key] = np.concatenate([f, i, g, o], axis=-1)
        real(self, swapped)

    monkeypatch.setattr(torch_models.TorchModel, "set_params", swapped_gates)
    with pytest.raises(CorrectnessError):
        prepare_model(model_case("torch", "lstm", "training", batch=2), backend)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_training_converges(framework):
    """On a learnable generated problem, 40 steps of the model's own optimizer cut the loss."""
    backend = load_or_skip(framework)
    model = catalogue.get("mlp")
    native = backend.build(model, init_params(model), "cpu", "float32", "eager")
    x, y = native.inputs(*datasets.clusters(model, 64))
    step = native.train_step(x, y, model.optimizer)
    losses = [float(backend.to_numpy(step()).reshape(-1)[0]) for _ in range(40)]
    assert losses[-1] < 0.5 * losses[0], losses


def test_known_issues_match_the_catalogue():
    for issue in KNOWN_ISSUES:
        names = set(catalogue.MODELS) | set(__import__("opbench.ops", fromlist=["REGISTRY"]).REGISTRY)
        assert set(issue.names) <= names, issue
