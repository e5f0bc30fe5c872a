"""One reference pass in both running-variance conventions gives each convention exactly what its
own pass gives (equivalence: every reference and emulation runs once for TensorFlow's biased and
PyTorch's unbiased running variance): the same losses, gradients and statistics, bit for bit, in
float64 and in every float32 draw, step after step."""

from __future__ import annotations

import numpy as np
import pytest

from opbench.suites import model_reference
from opbench.workloads.models import catalogue, datasets, reference
from opbench.workloads.models.spec import is_state

MODEL, BATCH, STEPS = "resnet20", 4, 2


def _same(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for k, value in want.items():
        assert np.array_equal(np.asarray(got[k]), np.asarray(value)), k


def _pass(model, params, x, y, unbiased, dtype, draw):
    if dtype == "float32":
        return model_reference.run_in(dtype, model, params, x.astype(np.float64), y, unbiased, draw)
    return reference.loss_and_grads(model, params, x.astype(np.float64), y, unbiased)


@pytest.mark.parametrize("unbiased", [False, True])
@pytest.mark.parametrize(("dtype", "draw"), [("float64", 0), ("float32", 0), ("float32", 3)])
def test_a_pass_in_both_conventions_is_each_conventions_own_pass(unbiased, dtype, draw):
    model = catalogue.get(MODEL)
    alone = model_reference.initial_weights(model)
    both = reference.with_conventions(alone)
    assert any(k.endswith(reference.UNBIASED_VAR) and is_state(k) for k in both)
    lr = model_reference.check_lr(MODEL, BATCH, "")
    for step in range(STEPS):
        x, y = datasets.batch(model, BATCH, "", step)
        loss, grads, state = _pass(model, alone, x, y, unbiased, dtype, draw)
        loss_both, grads_both, state_both = _pass(model, both, x, y, None, dtype, draw)
        assert loss_both == loss
        _same(grads_both, grads)
        _same(reference.by_convention(state_both, unbiased), state)
        alone = reference.sgd_update(model, alone, grads, state, lr)
        both = reference.sgd_update(model, both, grads_both, state_both, lr)
        _same(reference.by_convention(both, unbiased), alone)


@pytest.mark.parametrize("unbiased", [False, True])
def test_the_gates_trajectory_is_each_conventions_own(unbiased):
    """reference_sgd() of one convention, read from the shared run, against that convention's
    own SGD steps."""
    model = catalogue.get(MODEL)
    losses, trajectory = model_reference.reference_sgd(MODEL, BATCH, "", STEPS, 1, unbiased)
    params, lr = model_reference.initial_weights(model), model_reference.check_lr(MODEL, BATCH, "")
    _same(trajectory[0], params)
    for step in range(STEPS):
        x, y = datasets.batch(model, BATCH, "", step)
        loss, params = reference.sgd_step(model, params, x.astype(np.float64), y, lr, 1, unbiased)
        assert losses[step] == loss
        _same(trajectory[step + 1], params)
    moved = [k for k in params if k.endswith(".var")]
    biased = model_reference.reference_sgd(MODEL, BATCH, "", STEPS, 1, not unbiased)[1][-1]
    assert moved and all(not np.array_equal(biased[k], params[k]) for k in moved)


def test_every_emulated_error_is_read_in_the_frameworks_convention():
    """The kept emulation holds both conventions' running variances; each framework reads its own
    under the names its model has."""
    args = (MODEL, BATCH, "", STEPS, 1)
    both = model_reference._emulated_errors_both(*args, "float32")
    for unbiased in (False, True):
        one = model_reference.emulated_errors(*args, unbiased, "float32")
        for step, errors in enumerate(one.updates):
            assert set(errors) == set(model_reference.reference_sgd(*args, unbiased)[1][step + 1])
            for k, err in errors.items():
                name = k[: -len(".var")] + reference.UNBIASED_VAR if unbiased and k.endswith(".var") else k
                assert err == both.updates[step][name]
        assert (one.total, one.loss) == (both.total, both.loss)
