"""Every combination of the selection options over the real benchmarks collects cleanly: no
internal error, no item without a case and its markers, and an empty selection says why."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from opbench import pytest_plugin
from opbench.harness import config

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
MARKERS = ("", "gemm", "not creation", "creation", "backward", "gpu", "amp", "jit", "torch and conv2d", "e2e and lenet")


def _names(values: tuple[str, ...]):
    return st.lists(st.sampled_from(values), min_size=1, max_size=3, unique=True).map(",".join)


@given(frameworks=_names(config.FRAMEWORKS), modes=st.one_of(st.just("all"), _names(config.MODES)),
       device_choice=st.sampled_from(("cpu", "gpu", "cpu,gpu")), precision=st.sampled_from(("float32", "amp")),
       markexpr=st.sampled_from(MARKERS))
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # pytester's folder is only read here
def test_every_option_combination_collects_cleanly(pytester, monkeypatch, frameworks, modes, device_choice,
                                                   precision, markexpr):
    # Whether a case can run here is another test's (test_plugin.py); asking it would import frameworks
    # inside pytester's in-process runs, each of which puts sys.modules back as it found them, and a
    # native extension imported a second time aborts the process.
    monkeypatch.setattr(pytest_plugin, "unavailable", lambda case: "no GPU" if case.device == "gpu" else None)
    # the root conftest is left out: it would register Hypothesis' profiles again inside this example
    args = [str(BENCHMARKS / "ops"), str(BENCHMARKS / "e2e"), "-q", "-p", "no:cacheprovider", "--noconftest",
            "--collect-only", "--framework", frameworks, "--mode", modes, "--device", device_choice,
            "--precision", precision, *(["-m", markexpr] if markexpr else [])]
    result = pytester.runpytest_inprocess(*args)
    text = result.stdout.str() + result.stderr.str()
    assert "INTERNALERROR" not in text and "Traceback" not in text, text
    if result.ret == pytest.ExitCode.USAGE_ERROR:  # nothing here can run it (--device gpu without one): one line
        errors = [line for line in result.stderr.lines if line.startswith("ERROR:")]
        assert len(errors) == 1 and "none of the" in errors[0], text
        return
    assert result.ret in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED), text
    for nodeid in (line for line in result.stdout.lines if "::" in line):  # after selection, as they would run
        framework, device, mode = nodeid[nodeid.index("[") + 1:].split("-")[:3]
        assert framework in frameworks.split(",") and device in device_choice.split(","), nodeid
        assert mode in (config.FRAMEWORK_MODES[framework] if modes == "all" else modes.split(",")), nodeid

