"""The model check's float64 trajectories are whole copies of a model's weights: a process holds
them for the model last asked about only (suites/model_reference.py, _one_model), since a worker
checks one model's cases one after another."""

from __future__ import annotations

import numpy as np
import pytest

from opbench.suites import model_reference


def test_a_trajectory_is_held_for_the_model_last_asked_about_only():
    one_model = model_reference.OneModel()
    made: list[tuple] = []

    @one_model
    def weights(name, batch):
        made.append((name, batch))
        return [name] * batch

    @one_model
    def gradients(name, batch):
        made.append(("grads", name, batch))
        return batch

    assert weights("vgg16", 4) is weights("vgg16", 4)  # one model: made once, the same object
    gradients("vgg16", 4)
    weights("vgg16", 8)
    assert made == [("vgg16", 4), ("grads", "vgg16", 4), ("vgg16", 8)]
    weights("resnet50", 2)  # another model lets every cache of the first go
    weights("vgg16", 4)
    gradients("vgg16", 4)
    assert made[3:] == [("resnet50", 2), ("vgg16", 4), ("grads", "vgg16", 4)]


def test_the_weight_holding_references_are_the_one_model_caches():
    held = {cache.__wrapped__.__name__ for cache in model_reference._one_model.caches}
    assert held == {"_first_pass_both", "_reference_sgd_both", "_timed_trajectory_both", "reference_timed_steps"}


def test_a_model_case_lets_the_last_models_trajectories_go_before_it_is_built(monkeypatch):
    """An inference case asks for no trajectory, so without hold_only it would keep the last trained
    model's in memory and count them in its peak."""
    from opbench.core.case import Case
    from opbench.suites.models import equivalence

    one_model = model_reference.OneModel()
    monkeypatch.setattr(model_reference, "_one_model", one_model)
    made: list[str] = []

    @one_model
    def trajectory(name):
        made.append(name)
        return [name]

    trajectory("resnet50")
    built: list[str] = []

    def stop_at_build(*args, **kwargs):
        built.append(one_model.held)
        raise RuntimeError("built")

    monkeypatch.setattr(equivalence, "init_params", stop_at_build)
    case = Case(kind="model", name="mlp", family="e2e", direction="inference", framework="torch", device="cpu",
                mode="eager", dtype="float32", label="mlp-b1", params=(("batch", 1),))
    with pytest.raises(RuntimeError, match="built"):
        equivalence.prepare_model(case, backend=None)
    assert built == ["mlp"]  # the resnet50 cache was cleared before the build
    trajectory("resnet50")
    assert made == ["resnet50", "resnet50"]


def test_what_the_one_model_caches_hold_is_counted_each_array_once(monkeypatch):
    """A worker does not count what the references keep for the next case of the same model as
    left over (isolation: --worker-max-growth); an array two figures share counts once."""
    one_model = model_reference.OneModel()
    monkeypatch.setattr(model_reference, "_one_model", one_model)
    shared = np.zeros(1000)

    @one_model
    def trajectory(name, steps):
        return 0.5, {"w": shared, "b": np.zeros(10)}, [shared, (np.zeros(5),)]

    trajectory("lenet", 2)
    assert model_reference.held_bytes() == (1000 + 10 + 5) * 8
    trajectory("lenet", 3)  # another figure of the same model: its own arrays, the shared one once
    assert model_reference.held_bytes() == (1000 + 2 * 10 + 2 * 5) * 8
    one_model.hold("vgg10")
    assert model_reference.held_bytes() == 0
