"""The frozen description of one distributed benchmark and the cases the settings select."""

from __future__ import annotations

from dataclasses import dataclass

from opbench import frameworks
from opbench.core import schema
from opbench.harness.config import Settings
from opbench.suites.distributed.engines import ENGINES, nodes_from_env
from opbench.suites.registry import Listing
from opbench.workloads.models import catalogue

MODELS = ("mlp", "lenet", "vgg10", "lstm")
SCALINGS = ("strong", "weak")  # strong: the global batch stays; weak: each worker's batch stays


@dataclass(frozen=True)
class DistCase:
    """W workers of one engine training one model with one update rule."""

    framework: str
    device: str
    engine: str
    rule: str
    workers: int
    dtype: str
    name: str  # the model
    batch: int  # the model's batch: the global batch (strong scaling) or each worker's (weak)
    scaling: str
    nodes: int = 1  # the nodes the group spans; `workers` is per node
    kind = "dist"
    is_model = True  # a model's training step, saved under "model" like the single-process one
    family = "distributed"
    direction = "training"

    @property
    def world(self) -> int:
        return self.workers * self.nodes

    @property
    def global_batch(self) -> int:
        return self.batch if self.scaling == "strong" else self.batch * self.world

    @property
    def width(self) -> str:
        """'w2' on one node, 'n2xw2' (nodes x workers per node) on several."""
        return schema.width_label(self.nodes, self.workers)

    @property
    def mode(self) -> str:
        return f"{self.engine}-{self.rule}"

    @property
    def id(self) -> str:
        return (f"{self.framework}-{self.device}-{self.engine}-{self.rule}-{self.width}-{self.dtype}-"
                f"{self.name}-b{self.global_batch}-{self.scaling}")

    @property
    def label(self) -> str:
        """The problem as text, as Case.label: scaling, batch and workers (and nodes)."""
        return f"{self.scaling}-b{self.batch}-{self.width}"

    @property
    def group(self) -> str:
        """One group per model, device, scaling, batch and worker count: the engines side by side."""
        return f"{self.name}-data-parallel[{self.device}-{self.dtype}-{self.label}]"

    @property
    def markers(self) -> tuple[str, ...]:
        return ("distributed", self.engine, self.rule, self.framework, self.device, self.name, "training",
                self.scaling)


def dist_cases(settings: Settings) -> list[DistCase]:
    """Every distributed case the settings select (float32 only: the equivalence check's tolerance)."""
    cases, nodes = [], nodes_from_env()
    for engine in ENGINES.values():
        if engine.framework not in settings.frameworks or engine.framework not in frameworks.taking_part("models"):
            continue
        for rule in engine.rules:
            for device in settings.devices:
                for name in MODELS:
                    batch = catalogue.get(name).batch[settings.profile]
                    for scaling in SCALINGS:
                        for w in settings.workers:
                            if batch % (w * nodes) and scaling == "strong":
                                continue  # a global batch is split evenly or not at all
                            if engine.in_process and nodes > 1:
                                continue  # one process drives every replica: one node only
                            cases.append(DistCase(engine.framework, device, engine.name, rule, w, "float32", name,
                                                  batch, scaling, nodes))
    return cases


def listing(request) -> Listing:
    """The distributed benchmark's cases (the suite's row in opbench.suites.registry); ConfigError
    where OPBENCH_DIST_NODES is malformed."""
    return Listing(dist_cases(request.settings))
