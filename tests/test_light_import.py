"""Importing opbench (and its plugin) loads no framework: detection uses importlib only."""

import subprocess
import sys

CODE = """
import sys
import opbench, opbench.plugin, opbench.config, opbench.cases, opbench.ops, opbench.backends
from opbench import backends
assert backends.installed("numpy")
heavy = [m for m in set(backends.PACKAGES.values()) - {"numpy"} if m in sys.modules]
print(",".join(heavy))
"""


def test_import_loads_no_framework():
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
