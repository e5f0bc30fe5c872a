"""Settings: option > environment > default, and every bad name rejected with the valid ones."""

from __future__ import annotations

import pytest

from opbench.harness import config
from opbench.harness.config import ConfigError, resolve


def test_defaults():
    s = resolve({}, environ={})
    assert s.frameworks == config.FRAMEWORKS and s.devices == ("cpu",) and s.dtypes == ("float32",)
    assert s.profile == "quick" and s.peak_gflops is None and s.threads == (config.default_threads(),)


def test_option_beats_environment_beats_default():
    env = {"OPBENCH_FRAMEWORK": "torch", "OPBENCH_PROFILE": "full"}
    s = resolve({"framework": "numpy,mxnet"}, environ=env)
    assert s.frameworks == ("numpy", "mxnet") and s.profile == "full"


def test_framework_modes_filters_by_selected_modes():
    s = resolve({"mode": "eager,xla"}, environ={})
    assert s.framework_modes("tensorflow") == ("eager", "xla")
    assert s.framework_modes("mxnet") == ("eager",)


@pytest.mark.parametrize(
    "raw",
    [{"framework": "caffe"}, {"device": "tpu"}, {"mode": "lazy"}, {"dtype": "int8"}, {"profile": "quick,full"},
     {"threads": "0"}, {"threads": "x"}, {"peak_gflops": "-1"}, {"roofline_slack": "abc"}, {"framework": ","},
     {"data_dir": "/no/such/folder"}],
)
def test_bad_values_raise_config_error(raw):
    with pytest.raises(ConfigError):
        resolve(raw, environ={})


def test_thread_list_and_all():
    s = resolve({"threads": "1,2", "framework": "all"}, environ={})
    assert s.threads == (1, 2) and s.frameworks == config.FRAMEWORKS
