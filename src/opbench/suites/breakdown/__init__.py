"""Where a model step's time goes (--breakdown): after a model's timed rounds, a separate pass
runs a few more steps under the framework's own profiler and attributes them to operator
families, phases and operators (opbench.suites.breakdown.attribution, .taxonomy); with
--breakdown predict, the operator suite also times every layer's operators at the model's own
shapes (opbench.suites.breakdown.prediction). The profiler never runs in a timed round: everything here
happens after pytest-benchmark has finished timing, and lands in extra_info["breakdown"].
"""

from __future__ import annotations

import tempfile
from typing import Any

from opbench.core.case import Case
from opbench.frameworks.base import Backend
from opbench.suites.breakdown.attribution import attribute
from opbench.suites.breakdown.prediction import predict
from opbench.workloads.models import catalogue

PROFILED_STEPS = 5
GPU_NOTE = ("on a GPU the profiled operators are host time (their launch and dispatch): the device kernels they "
            "start are not attributed")


def profiled_pass(case: Case, backend: Backend, call, level: str, steps: int = PROFILED_STEPS) -> dict[str, Any]:
    """extra_info["breakdown"] for a model case whose `call` (one synchronised step) was timed:
    the profiled breakdown, and with level "predict" the operator suite's prediction."""
    training = case.direction == "training"
    with tempfile.TemporaryDirectory(prefix="opbench-profile-") as folder:
        trace = backend.profile(call, steps, folder)
    info = {"profiler": backend.profiler_name, **attribute(trace, training).to_info()}
    if case.device == "gpu":
        info["notes"].append(GPU_NOTE)
    if level == "predict":
        info["prediction"] = predict(catalogue.get(case.name), case.p["batch"], backend, case.device, case.mode,
                                     training)
    return info
