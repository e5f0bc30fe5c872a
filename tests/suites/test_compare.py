"""prepared.compare, the element check every benchmark's result passes before it is timed, against its
definition element by element: it passes exactly when every |got - want| (in float64) is within
tol * (|want| + floor) plus the absolute allowance (a known issue's bound where its regime excuses the
element), returns max |got - want|, and records the largest share of an allowance outside the regime."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from opbench.core.case import Case
from opbench.suites.prepared import CorrectnessError, Excuse, compare
from opbench.workloads import ops

CASE = Case.function("output_check", "numpy")
FINITE = st.floats(-1e6, 1e6, allow_nan=False, width=64)


@st.composite
def checks(draw):
    shape = draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=4))
    want = draw(hnp.arrays(np.float64, shape, elements=FINITE))
    # got: want moved by up to a few allowances, some elements exactly right, in the result's float32
    moved = draw(hnp.arrays(np.float64, shape, elements=st.floats(-3e-4, 3e-4)))
    got = (want * (1 + moved) + draw(st.sampled_from([0.0, 1e-30, 1e-3])) * moved).astype(np.float32)
    tol = draw(st.sampled_from([1e-6, 5e-5, 1e-4]))
    floor = draw(st.sampled_from([None, 0.0, 1e-2]))
    absolute = draw(st.sampled_from([None, 0.0]))
    excuse = None
    if shape and draw(st.booleans()):
        bound = draw(hnp.arrays(np.float64, shape, elements=st.floats(0, 1e-2)))
        excuse = Excuse(draw(hnp.arrays(np.bool_, shape)), bound, "a known issue")
    return got, want, tol, floor, absolute, excuse


@settings(max_examples=300, deadline=None)
@given(checks())
def test_compare_is_its_definition_element_by_element(check):
    got, want, tol, floor, absolute, excuse = check
    diff = np.abs(got.astype(np.float64) - want)
    limit = ops.allowed_error(want, "float32", tol, ops.rms(want) if floor is None else floor, absolute)
    inside = excuse.inside if excuse is not None else np.zeros(want.shape, dtype=bool)
    bound = np.where(inside, np.maximum(limit, excuse.bound), limit) if excuse is not None else limit
    used, known = [], []
    if np.all(diff <= bound):
        err = compare("output", got, want, CASE, tol, floor, absolute, used, excuse, known)
        assert err == np.max(diff, initial=0.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(limit > 0, diff / limit, np.where(diff > 0, np.inf, 0.0))
        assert used == ([float(np.max(share, initial=0.0, where=~inside))] if want.size else [])
        assert bool(known) == bool(excuse is not None and np.any(share[inside] > 1))
    else:
        with pytest.raises(CorrectnessError, match="output differs from NumPy: element"):
            compare("output", got, want, CASE, tol, floor, absolute, used, excuse, known)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_a_nan_or_infinity_in_the_result_fails_however_the_reference_looks(bad):
    want = np.array([1.0, np.inf, 3.0])
    for got in (np.array([bad, 2.0, 3.0]), np.array([1.0, bad, 3.0])):
        with pytest.raises(CorrectnessError, match="NaN or infinity in the result"):
            compare("output", got.astype(np.float32), want, CASE, 5e-5)
    assert ops.abs_error(np.array([1.0, bad]), np.array([1.0, 2.0])) == (None, float("inf"))
    assert ops.abs_error(np.array([1.0, 2.0]), np.array([bad, 2.0])) == (None, float("inf"))


def test_a_result_of_another_size_fails_with_both_shapes_and_a_scalar_in_any_shape_passes():
    with pytest.raises(CorrectnessError, match=r"shape \(4,\) != \(3,\)"):
        compare("output", np.zeros(4, np.float32), np.zeros(3), CASE, 5e-5)
    assert compare("output", np.array([2.0], np.float32), np.array(2.0), CASE, 5e-5) == 0.0
