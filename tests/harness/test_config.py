"""Settings: option > environment > default, and every bad name rejected with the valid ones."""

from __future__ import annotations

import re

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


@pytest.mark.parametrize("option, bad", [(o.name, "nonsense") for o in config.OPTIONS
                                         if o.name not in ("data_dir",)])
def test_a_bad_value_is_reported_under_the_variable_it_came_from(option, bad):
    """OPBENCH_FRAMEWORK=pytorch and OPBENCH_THREADS=abc alike name the variable, and the same bad
    value given as the flag names the flag."""
    opt = next(o for o in config.OPTIONS if o.name == option)
    with pytest.raises(ConfigError, match=f"^{re.escape(opt.flag)} \\(from {opt.env}\\)"):
        resolve({}, environ={opt.env: bad})
    with pytest.raises(ConfigError) as given:
        resolve({option: bad}, environ={})
    assert str(given.value).startswith(opt.flag) and opt.env not in str(given.value)
