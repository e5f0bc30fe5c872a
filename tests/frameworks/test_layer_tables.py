"""Each layer kind carries its rules in one table per place that builds it (#58): the reference's
forward and vjp (tests/workloads/test_references.py) and each framework's model builder. A kind
missing from a table is an error naming the table; what each builds is held by the models'
equivalence tests (tests/frameworks/test_models.py)."""

from __future__ import annotations

import dataclasses
import importlib

import pytest

from opbench.workloads.models.spec import Layer
from tests.helpers import load_or_skip


def test_jax_builds_every_layer_kind_from_its_table():
    load_or_skip("jax")
    from opbench.frameworks.jax import models

    assert set(models.LAYERS) == set(Layer.__args__)

    @dataclasses.dataclass(frozen=True)
    class Unknown:
        units: int = 3

    with pytest.raises(TypeError, match=r"JAX builds no Unknown \(frameworks/jax/models\.LAYERS\)"):
        models._layer(Unknown(), {}, "0", None, False, {})


@pytest.mark.parametrize(("framework", "name", "build"), [
    ("torch", "PyTorch", lambda models, layer: models._module(layer, (3,), "0", {})),
    ("tensorflow", "TensorFlow", lambda models, layer: models._group(layer, "channels_first", "0", {}, {})),
    ("mxnet", "MXNet", lambda models, layer: models._group(layer, (3,), "0", {})),
])
def test_each_framework_builds_every_layer_kind_from_its_table(framework, name, build):
    load_or_skip(framework)
    models = importlib.import_module(f"opbench.frameworks.{framework}.models")
    assert set(models.LAYERS) == set(Layer.__args__)

    @dataclasses.dataclass(frozen=True)
    class Unknown:
        units: int = 3

    with pytest.raises(TypeError, match=rf"{name} builds no Unknown \(frameworks/{framework}/models\.LAYERS\)"):
        build(models, Unknown())


def test_the_cost_and_the_breakdown_count_every_layer_kind():
    from opbench.suites.breakdown import prediction
    from opbench.workloads.models import cost

    kinds = set(Layer.__args__)
    assert set(cost.LEAST_MACS) == kinds
    assert set(prediction.LAYERS) == kinds
