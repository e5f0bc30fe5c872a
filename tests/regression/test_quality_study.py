"""studies/paired_quality.py's control: a slowdown on both sides, the candidate's on top."""

import pytest

from tests.helpers import study as study_module


def _env(options: list[str]) -> dict[str, float]:
    """{'--baseline-env': fraction, ...} from opbench ab's options."""
    return {flag: float(value.split("=", 1)[1]) for flag, value in zip(options[::2], options[1::2], strict=True)}


def test_a_slowdown_on_both_sides_leaves_the_candidate_its_relative_change():
    study = study_module("paired_quality")
    assert study.injections(0.0, 0.0) == []  # A/A: nothing injected
    assert _env(study.injections(0.07, 0.0)) == {"--candidate-env": 0.07}  # the candidate only
    both = _env(study.injections(0.07, 0.07))
    assert both["--baseline-env"] == 0.07
    assert (1 + both["--candidate-env"]) / (1 + both["--baseline-env"]) - 1 == pytest.approx(0.07, abs=1e-6)
    assert _env(study.injections(0.0, 0.07)) == {"--baseline-env": 0.07, "--candidate-env": 0.07}  # A/A, both slowed
    assert all(v.startswith(study.INJECT + "=") for v in study.injections(0.07, 0.07)[1::2])
    assert study.over(0.0) == "" and study.over(0.07) == " over 7% on both sides"
