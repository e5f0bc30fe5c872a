"""What the check of the call after a training step's timed rounds sees, on correct code.

A benchmark's timed rounds call the training step many times on batch 0, from where the last call
left, and the reference does not follow them (Adam's moments would need every call's gradients).
The check of one more call (equivalence.check_after_rounds) holds what it can derive at the weights
the rounds left: the loss, the running statistics, SGD's whole update, and Adam's largest element
move against model_check.adam_bound. For each framework and model (quick batch, float32 and the
amp build where the framework has one), the script makes the checked calls, then ROUNDS more as a
benchmark's rounds would, then the check, and prints the largest share of its allowance each part
used (1 fails), the loss the rounds reached, and the seconds the check took (its reference passes).

    .venv/bin/python studies/after_rounds.py                      # every framework, 5 models, 200 rounds
    .venv/bin/python studies/after_rounds.py torch lenet mlp 50   # frameworks, models, rounds
    .venv/bin/python studies/after_rounds.py mxnet mlp 3000 every=50 batch=128 float32
                                                 # the check every 50 rounds up to 3,000, at batch 128

Under SGD the check's call starts from the weights of the check's first SGD step, whatever the
rounds left, so a scan shows the same share at every point; under Adam it starts where the
rounds left it.
"""

from __future__ import annotations

import sys
import time

from opbench import frameworks
from opbench.core.case import Case
from opbench.suites import model_check
from opbench.suites import prepared as shared
from opbench.suites.models import equivalence
from opbench.suites.prepared import CorrectnessError
from opbench.workloads.models import catalogue

FRAMEWORKS = ("torch", "tensorflow", "jax", "mxnet")
MODELS = ("mlp", "lenet", "lstm", "resnet20", "vgg10")


def study(framework: str, name: str, precision: str, rounds: int, every: int = 0, batch: int = 0) -> None:
    backend = frameworks.load(framework)
    model = catalogue.get(name)
    case = Case.model(name, "training", framework, batch or model.batch["quick"], precision=precision)
    shared.require(case)  # Unavailable where the benchmark would skip (MXNet has no amp)
    prepared = equivalence.prepare_model(case, backend)
    prepared.verify(prepared.call())
    done, every = 0, every or rounds
    while done < rounds:
        step = min(every, rounds - done)
        for _ in range(step):
            loss = prepared.call()
        done += step
        before = len(prepared.shares)
        start = time.perf_counter()
        try:
            prepared.after_rounds()
            verdict = "passes"
        except CorrectnessError as exc:
            verdict = f"FAILS: {exc}"
        seconds = time.perf_counter() - start
        shares = prepared.shares[before:]
        print(f"{framework:10s} {name:8s} {precision:7s} {model.optimizer.name:4s} loss after {done} rounds "
              f"{model_check.scalar(backend, loss):.3g}: largest share {max(shares, default=0.0):.3g} "
              f"(loss {shares[0] if shares else 0.0:.3g}), check {seconds:.1f} s, {verdict}", flush=True)


def main(argv: list[str]) -> None:
    fws = [a for a in argv if a in FRAMEWORKS] or list(FRAMEWORKS)
    names = [a for a in argv if a in MODELS] or list(MODELS)
    rounds = next((int(a) for a in argv if a.isdigit()), 200)
    options = dict(a.split("=", 1) for a in argv if "=" in a)
    precisions = [a for a in argv if a in ("float32", "amp")] or ["float32", "amp"]
    for framework in fws:
        try:
            frameworks.load(framework)
        except frameworks.Unavailable as exc:
            print(f"{framework}: {exc}")
            continue
        for name in names:
            for precision in precisions:
                try:
                    study(framework, name, precision, rounds, int(options.get("every", 0)),
                          int(options.get("batch", 0)))
                except frameworks.Unavailable as exc:
                    print(f"{framework:10s} {name:8s} {precision:7s} skipped: {exc}")


if __name__ == "__main__":
    main(sys.argv[1:])
