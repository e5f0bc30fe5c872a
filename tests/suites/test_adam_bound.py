"""Adam's largest move, which the check of the call after the timed rounds holds every element to
(model_check.adam_bound), is a bound of the update rule itself: no history of gradients moves an
element farther, in the reference's Adam with either epsilon convention, and a history whose
gradients keep one sign comes close enough that a step at ten times the rate passes it."""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from opbench.suites import model_check
from opbench.workloads.models import reference
from opbench.workloads.models.spec import Dense, ModelSpec, Optimizer

ADAM = Optimizer("adam", 0.01)
MODEL = ModelSpec("one", (3,), (Dense(4),), ADAM, {"quick": 1}, "mnist")


def _moves(history: list[np.ndarray], opt: Optimizer, eps_corrected: bool) -> float:
    """The largest element move, in units of the rate, over the steps of `history`."""
    params, moments, largest = {"0.W": np.zeros(history[0].shape)}, ({}, {}), 0.0
    for t, g in enumerate(history, 1):
        after, moments = reference.adam_update(MODEL, params, {"0.W": g}, {}, moments, t, opt,
                                               eps_corrected=eps_corrected)
        largest = max(largest, float(np.max(np.abs(after["0.W"] - params["0.W"]))) / opt.lr)
        params = after
    return largest


def test_the_bound_at_adams_defaults():
    assert abs(model_check.adam_bound(ADAM) - 7.2703) < 1e-3


@settings(max_examples=200, deadline=None)
@given(scales=st.lists(st.floats(-8, 8), min_size=1, max_size=60), signs=st.lists(st.booleans(), min_size=60,
       max_size=60), beta1=st.sampled_from([0.9, 0.5, 0.99]), beta2=st.sampled_from([0.999, 0.99, 0.9999]),
       eps_corrected=st.booleans())
def test_no_gradient_history_moves_an_element_past_the_bound(scales, signs, beta1, beta2, eps_corrected):
    """Gradients of any size (1e-8 to 1e8) and sign, step after step: a shrinking gradient after a
    large one is where Adam moves most, and it stays under the bound."""
    opt = dataclasses.replace(ADAM, beta1=beta1, beta2=beta2)
    history = [np.full((3, 4), (1 if s else -1) * 10.0**x) for x, s in zip(scales, signs, strict=False)]
    assert _moves(history, opt, eps_corrected) <= model_check.adam_bound(opt) * (1 + 1e-12)


def test_a_step_at_ten_times_the_rate_passes_the_bound_where_gradients_keep_their_sign():
    """Gradients of one sign move each element about the rate: ten times it is past the bound."""
    history = [np.full((3, 4), 0.5 ** t) for t in range(200)]
    assert 0.5 < _moves(history, ADAM, True) <= 1.0 + 1e-9
    assert 10 * _moves(history[:3], ADAM, True) > model_check.adam_bound(ADAM)
