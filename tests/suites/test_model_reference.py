"""The model check's float64 trajectories are whole copies of a model's weights: a process holds
them for the model last asked about only (suites/model_reference.py, _one_model), since a worker
checks one model's cases one after another."""

from __future__ import annotations

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
