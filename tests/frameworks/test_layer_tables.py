"""Each layer kind carries its rules in one table per place that builds it (#58): the reference's
forward and vjp (tests/workloads/test_references.py) and each framework's builder that has been
moved to a table. A kind missing from a table is an error naming the table."""

from __future__ import annotations

import dataclasses

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
