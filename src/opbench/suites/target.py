"""Time to target, defined once for every suite that reports it (a model's training step, a
distributed engine's step): how long the model's own optimizer, from the shared initial weights,
takes to bring the loss on the generated cluster problem below a fifth of chance's, ln(classes) / 5.

The first step counts as a step but not in the time: it may trace, compile or build the
optimizer's state (first_call_s reports compilation), so the clock starts after it, and a loss
already under the target then is reached in 0 s at step 1. The run stops at MAX_STEPS steps or
MAX_SECONDS seconds; a target not reached is None.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

FRACTION = 0.2  # the target loss: a fifth of chance's, ln(classes) / 5
MAX_STEPS = 200
MAX_SECONDS = 20.0


def time_to_target(step: Callable[[], float], classes: int, loss_after: int | None = None,
                   clock: Callable[[], float] = time.perf_counter) -> dict:
    """Run `step` (one synchronised optimizer step, returning its loss) until the loss is under
    the target; with `loss_after`, also until that many steps have run, and record the loss then.
    Returns the extra_info keys time_to_target_s, steps_to_target and target_loss (and
    loss_after_<n>_steps). `clock` is read after each step (the nodes of a distributed run read
    node 0's, so that each stops at the same step)."""
    target = FRACTION * math.log(classes)
    loss, steps = step(), 1
    start = clock()
    seconds, reached = (0.0, 1) if loss < target else (None, None)
    after = loss if loss_after == 1 else None
    while steps < MAX_STEPS and clock() - start < MAX_SECONDS:
        if seconds is not None and (loss_after is None or after is not None):
            break
        loss, steps = step(), steps + 1
        if seconds is None and loss < target:
            seconds, reached = clock() - start, steps
        if steps == loss_after:
            after = loss
    out = {"time_to_target_s": seconds, "steps_to_target": reached, "target_loss": target}
    if loss_after:
        out[f"loss_after_{loss_after}_steps"] = after
    return out
