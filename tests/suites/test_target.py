"""Time to target, one definition for the model suite and the distributed suite: the first step
counts as a step but not in the time."""

from __future__ import annotations

import math

from opbench.suites import target


def steps(*losses: float):
    it = iter(losses)
    return lambda: next(it)


def test_the_first_step_counts_but_is_not_timed():
    chance = math.log(10)
    out = target.time_to_target(steps(chance, chance, 0.1 * chance), 10)
    assert out["steps_to_target"] == 3 and out["time_to_target_s"] > 0
    assert out["target_loss"] == target.FRACTION * chance


def test_a_loss_under_the_target_at_the_first_step_is_reached_in_no_time():
    out = target.time_to_target(steps(0.01), 10)
    assert out == {"time_to_target_s": 0.0, "steps_to_target": 1, "target_loss": target.FRACTION * math.log(10)}


def test_the_loss_after_n_steps_is_recorded_even_once_the_target_is_reached():
    out = target.time_to_target(steps(0.01, 0.02, 0.03, 0.04), 10, loss_after=3)
    assert out["steps_to_target"] == 1 and out["loss_after_3_steps"] == 0.03


def test_a_target_never_reached_is_none_within_the_step_bound():
    calls = []

    def step():
        calls.append(1)
        return 5.0

    out = target.time_to_target(step, 10)
    assert out["time_to_target_s"] is None and out["steps_to_target"] is None
    assert len(calls) <= target.MAX_STEPS
