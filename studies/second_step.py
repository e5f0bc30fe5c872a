"""Does the timed step's second call tell apart what its first cannot?

Adam's first step is lr * m / sqrt(v) = lr * sign(g) per element whatever its betas, and SGD's
momentum buffer starts as the first gradient, so a first call cannot show swapped betas, a momentum
the model does not have, an optimizer made anew at each call or gradients never zeroed between calls.
The timed callable trains on batch 0 again at each call, from where the last left. For each model
(quick batch, float32), the script prints how far its gradients move between the two calls, and, for
each wrong optimizer its kind admits, the largest ratio over the trained tensors of the wrong second
update's distance from the reference's to the check's allowance for that call
(model_reference.reference_timed_steps, update_limit, timed_rtol): above 1 the check fails it.

    .venv/bin/python studies/second_step.py                # mlp lenet lstm resnet20 vgg10
    .venv/bin/python studies/second_step.py lenet          # one model
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np

from opbench.suites import model_check, model_reference
from opbench.workloads.models import catalogue, datasets, reference


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / max(float(np.linalg.norm(b)), 1e-300))


def _wrong_second_steps(model, p0, p1, g1, g2, state) -> dict[str, dict]:
    """The second update (after - before) of each wrong optimizer, from the reference's p1."""
    opt = model.optimizer
    change = lambda after: {k: after[k] - p1[k] for k in g2}
    if opt.name == "sgd":
        return {"momentum 0.9": {k: -opt.lr * (g2[k] + 0.9 * g1[k]) for k in g2},
                "gradients never zeroed": {k: -opt.lr * (g2[k] + g1[k]) for k in g2}}
    swapped = dataclasses.replace(opt, beta1=opt.beta2, beta2=opt.beta1)
    _, moments = reference.adam_update(model, p0, g1, state, ({}, {}), 1, opt)
    _, swapped_moments = reference.adam_update(model, p0, g1, state, ({}, {}), 1, swapped)
    summed = {k: g1[k] + g2[k] for k in g2}
    return {
        "made anew each call": change(reference.adam_update(model, p1, g2, state, ({}, {}), 1, opt)[0]),
        "gradients never zeroed": change(reference.adam_update(model, p1, summed, state, moments, 2, opt)[0]),
        "betas swapped": change(reference.adam_update(model, p1, g2, state, swapped_moments, 2, swapped)[0]),
    }


def study(name: str) -> None:
    model = catalogue.get(name)
    batch = model.batch["quick"]
    x, y = datasets.batch(model, batch, "")
    steps = model_reference.reference_timed_steps(name, batch, "", 1, False, True, "float32")
    (p0, p1, _), (_, p2, allowed) = steps
    _, g1, _ = reference.loss_and_grads(model, p0, x.astype(np.float64), y)
    _, g2, state = reference.loss_and_grads(model, p1, x.astype(np.float64), y)
    want = {k: p2[k] - p1[k] for k in g2}
    moved = max(_relative(g2[k], g1[k]) for k in g2)
    print(f"{name} ({model.optimizer.name} {model.optimizer.lr:g}, batch {batch}): gradients move by up to "
          f"{moved:.3g} of their norm between the calls")
    for wrong, got in _wrong_second_steps(model, p0, p1, g1, g2, state).items():
        rtol = model_check.timed_rtol(model.optimizer, 2)
        ratios = {k: _relative(got[k], want[k]) / model_check.update_limit(k, allowed[k], rtol) for k in g2}
        worst = max(ratios, key=ratios.get)
        limit = model_check.update_limit(worst, allowed[worst], rtol)
        print(f"  {wrong:24} {ratios[worst]:8.3g} times the allowance (tensor {worst}, "
              f"{_relative(got[worst], want[worst]):.3g} off, allowed {limit:.3g})")


def main(argv: list[str]) -> None:
    for name in argv or ["mlp", "lenet", "lstm", "resnet20", "vgg10"]:
        study(name)


if __name__ == "__main__":
    main(sys.argv[1:])
