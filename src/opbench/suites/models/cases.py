"""The model suite's cases: each model of the catalogue (or those a benchmark is bound to, or a
--workloads file declared) per batch, framework, mode, device and precision the settings select."""

from __future__ import annotations

from opbench.core.case import Case
from opbench.suites.registry import Listing, Request
from opbench.workloads.models import catalogue

DIRECTIONS = ("training", "inference")


def bound_models(marker) -> tuple[str, ...] | None:
    """The models a model benchmark is bound to by its opbench marker (model="name", or a tuple of
    names); None, the catalogue's own, without one. KeyError names an unknown model."""
    named = None if marker is None else marker.kwargs.get("model")
    if named is None:
        return None
    names = (named,) if isinstance(named, str) else tuple(named)
    for name in names:
        catalogue.get(name)  # KeyError lists the valid names
    return names


def model_batches(model, profile: str, direction: str) -> tuple[int, ...]:
    """The model's batch for the profile; inference also at batch 1, the latency a server answering
    one request at a time sees, beside the throughput of the larger batch."""
    batch = model.batch[profile]
    return tuple(sorted({1, batch})) if direction == "inference" else (batch,)


def model_cases(settings, direction: str, models: tuple[str, ...] | None = None) -> list[Case]:
    """Every model case the settings select for `direction` ("training" or "inference"), of the
    `models` named (opbench's own catalogue by default)."""
    from opbench import frameworks

    cases = []
    for name in catalogue.builtin() if models is None else models:
        model = catalogue.get(name)
        for batch in model_batches(model, settings.profile, direction):
            for framework in settings.frameworks:
                if framework not in frameworks.taking_part("models"):  # NumPy is the models' reference
                    continue
                for mode in settings.framework_modes(framework):
                    for device in settings.devices:
                        for precision in settings.precisions:
                            cases.append(Case.model(name, direction, framework, batch, device, mode, precision))
    return cases


def listing(request: Request) -> Listing:
    """The cases of a model benchmark (the suite's row in opbench.suites.registry): test_training or
    test_inference, or the direction and models its opbench marker binds; unbound, the catalogue's
    own models and those of --workloads."""
    marker = request.marker
    direction = (marker.kwargs.get("direction") if marker is not None else None) or \
        request.function.removeprefix("test_")
    if direction not in DIRECTIONS:
        raise KeyError("model tests are test_training or test_inference (or bound with "
                       "@pytest.mark.opbench(model=..., direction=...))")
    models = bound_models(marker)
    if models is None:
        models = (*catalogue.builtin(), *request.workload_models)
    return Listing(model_cases(request.settings, direction, models), ((models, "model"),))
