"""opbench: operator and end-to-end benchmarks of TensorFlow, MXNet, PyTorch and JAX, with NumPy
as the reference, on pytest-benchmark, and a gate for framework upgrades. Importing this package
imports no framework."""

__version__ = "0.1.0"
