"""Root conftest: makes the opbench plugin active for benchmarks/ and tests/, and sets the
Hypothesis profiles (OPBENCH_HYPOTHESIS=ci|thorough; ci by default)."""

import os
import sys
from importlib.metadata import entry_points

from hypothesis import HealthCheck, settings

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "src"))

# Installed, the package registers the plugin through its pytest11 entry point; otherwise (or
# with plugin autoloading off) this conftest loads it.
_registered = any(ep.value == "opbench.pytest_plugin" for ep in entry_points(group="pytest11"))
if not _registered or os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
    pytest_plugins = ["opbench.pytest_plugin"]

_common = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.data_too_large]}
settings.register_profile("ci", max_examples=8, **_common)
settings.register_profile("thorough", max_examples=200, **_common)
settings.load_profile(os.environ.get("OPBENCH_HYPOTHESIS", "ci"))
