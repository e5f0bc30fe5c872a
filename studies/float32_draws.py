"""How much does the float32 gate's allowance depend on the one rounding NumPy happens to make?

For each model, the gate's SGD steps are emulated in float32 with 1 draw (NumPy's own order) and
with DRAWS draws (e2e.DRAWS: every weight and input moved by a random relative error within
float32's unit roundoff, Monte Carlo arithmetic), and the script prints, per model, the largest
ratio of a tensor's error over the draws to its error in NumPy's order, the largest allowance
(e2e.update_limit) either way, and the time each took. Smooth steps keep their allowance; a step
that is not smooth (ResNet-50 at batch 2) shows the tail a single draw hides.

    .venv/bin/python studies/float32_draws.py                 # the quick models
    .venv/bin/python studies/float32_draws.py resnet50 16.2.W  # one model, one tensor's errors per step
"""

from __future__ import annotations

import sys
import time

from opbench.suites import model_check, model_reference
from opbench.workloads.models import catalogue


def emulate(name: str, draws: int) -> tuple[model_reference.Emulation, float]:
    model_reference.DRAWS = draws
    model_reference._emulated_errors_both.cache_clear()
    start = time.perf_counter()
    batch = catalogue.get(name).batch["quick"]
    errors = model_reference.emulated_errors(name, batch, "", model_reference.SGD_STEPS, 1, False, "float32")
    return errors, time.perf_counter() - start


def main(argv: list[str]) -> None:
    draws = model_reference.DRAWS
    names = argv[:1] or ["mlp", "lenet", "vgg10", "vgg16", "resnet20", "lstm"]
    tensor = argv[1] if len(argv) > 1 else None
    for name in names:
        (one, t1), (many, tn) = emulate(name, 1), emulate(name, draws)
        pairs = [(i, k) for i, step in enumerate(one.updates) for k in step]
        ratio = max(many.updates[i][k] / max(one.updates[i][k], 1e-30) for i, k in pairs)
        limits = [max(model_check.update_limit(k, em.updates[i][k]) for i, k in pairs) for em in (one, many)]
        print(f"{name}: largest ratio {draws} draws / 1: {ratio:.1f}; largest allowance {limits[0]:.4f} -> "
              f"{limits[1]:.4f}; {t1:.1f} s -> {tn:.1f} s")
        if tensor:
            for i in range(len(one.updates)):
                print(f"  {tensor} step {i}: {one.updates[i][tensor]:.3g} in NumPy's order, "
                      f"{many.updates[i][tensor]:.3g} over {draws} draws")


if __name__ == "__main__":
    main(sys.argv[1:])
