"""Importing opbench (and its plugin) loads no framework: detection uses importlib only."""

import subprocess
import sys

CODE = """
import sys
import opbench, opbench.pytest_plugin, opbench.harness.config, opbench.core.case
import opbench.workloads.ops, opbench.frameworks
from opbench import frameworks
assert frameworks.installed("numpy")
heavy = [m for m in set(frameworks.PACKAGES.values()) - {"numpy"} if m in sys.modules]
print(",".join(heavy))
"""


def test_import_loads_no_framework():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
