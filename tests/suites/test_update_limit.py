"""How far a step's update may be from the reference's (suites/models/model_check.update_limit):
a trained tensor's allowance stops at MAX_UPDATE_ERR and then asks for the reference's direction;
a running statistic's is its emulated error alone, uncapped, since after the timed rounds (all on
one batch) its update can be smaller than its precision's error in the statistic."""

from __future__ import annotations

import numpy as np
import pytest

from opbench.core.case import Case
from opbench.suites import model_check
from opbench.suites.prepared import CorrectnessError

CASE = Case.model("resnet20", "training", "numpy", 8, precision="amp")


def off_by(want: np.ndarray, share: float) -> np.ndarray:
    """An update `share` of want's norm away from it, at right angles to it: no direction to speak of."""
    away = np.roll(want, 1) - want * (np.dot(np.roll(want, 1), want) / np.dot(want, want))
    return want + share * np.linalg.norm(want) * away / np.linalg.norm(away)


def test_a_trained_tensors_allowance_stops_at_the_cap_a_running_statistics_does_not():
    assert model_check.update_limit("1.W", 0.5) == model_check.MAX_UPDATE_ERR
    assert model_check.update_limit("1.var", 0.5) == pytest.approx(model_check.SLACK * 0.5)
    assert model_check.update_limit("1.var", None) == pytest.approx(model_check.UPDATE_RTOL)  # no emulation


def test_a_running_statistic_off_within_its_emulated_error_passes_a_weight_does_not():
    before = {"1.var": np.ones(8), "1.W": np.ones(8)}
    want = {k: v + np.linspace(-1, 1, 8) * 1e-4 + 1e-5 for k, v in before.items()}
    got = {k: before[k] + off_by(want[k] - before[k], 2.14) for k in want}
    emulated = {"1.var": 0.3, "1.W": 0.3}
    assert model_check.check_update(CASE, "the call after the timed rounds", before, {"1.var": got["1.var"]}, before,
                                    {"1.var": want["1.var"]}, emulated) == pytest.approx(2.14)
    with pytest.raises(CorrectnessError, match=r"1\.W in the call after the timed rounds differs .* by 2\.14"):
        model_check.check_update(CASE, "the call after the timed rounds", before, {"1.W": got["1.W"]}, before,
                                 {"1.W": want["1.W"]}, emulated)
    frozen = {"1.var": before["1.var"]}  # not moved at all: 1 of its norm, caught where the precision can tell
    with pytest.raises(CorrectnessError, match=r"1\.var .* differs from NumPy.s by 1 of its norm"):
        model_check.check_update(CASE, "the timed step", before, frozen, before, {"1.var": want["1.var"]},
                                 {"1.var": 0.01})
