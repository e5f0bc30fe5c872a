"""opbench: operator and end-to-end benchmarks of TensorFlow, MXNet and PyTorch, with NumPy as
the reference, on pytest-benchmark. Importing this package imports no framework."""

__version__ = "0.1.0"
