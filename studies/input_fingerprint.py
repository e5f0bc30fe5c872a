"""Every array opbench computes in NumPy, hashed, to compare two NumPy versions.

The operator inputs (quick, full and edge shapes) and their float64 references, every catalogue
model's initial parameters and a synthetic batch of each: one line per array, with its dtype,
shape and SHA-1. Run it in two environments and diff the outputs. Every input should be
identical. A reference may differ by a few float64 units in the last place where the two NumPy
versions compute a function differently (exp: sigmoid and softmax).

    .venv-numpy1/bin/python studies/input_fingerprint.py > np1.txt
    .venv/bin/python studies/input_fingerprint.py > np2.txt
    diff np1.txt np2.txt
"""

from __future__ import annotations

import hashlib
import warnings

import numpy as np

from opbench.workloads import ops
from opbench.workloads.models import catalogue, datasets
from opbench.workloads.models.spec import init_params


def digest(a) -> str:
    a = np.ascontiguousarray(np.asarray(a))
    return f"{a.dtype} {a.shape} {hashlib.sha1(a.tobytes()).hexdigest()[:12]}"


def problems(spec):
    for profile in ("quick", "full"):
        for p in spec.shapes.get(profile, ()):
            yield profile, p, spec.make
    if spec.edge:
        yield "edge", {**spec.edge_problem, "inputs": "edge"}, spec.edge


def lines():
    for spec in ops.REGISTRY.values():
        for profile, p, make in problems(spec):
            xs = make(np.random.default_rng(0), p)
            for i, x in enumerate(xs):
                yield f"{spec.name} {profile} {sorted(p.items())} input {i}: {digest(x)}"
            if spec.reference is not None:
                reference = spec.reference(p, *[np.asarray(x, np.float64) for x in xs])
                yield f"{spec.name} {profile} {sorted(p.items())} reference: {digest(reference)}"
    for name in catalogue.MODELS:
        model = catalogue.get(name)
        for key, value in sorted(init_params(model).items()):
            yield f"model {name} {key}: {digest(value)}"
        x, y = datasets.batch(model, 8, "")
        yield f"model {name} batch: {digest(x)} {digest(y)}"


def main() -> None:
    warnings.simplefilter("ignore")
    print(f"# numpy {np.__version__}")
    for line in lines():
        print(line, flush=True)


if __name__ == "__main__":
    main()
