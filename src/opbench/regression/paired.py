"""The paired design of the upgrade gate, end to end: two interpreters, the selection, a Plan and
the rules in; the saved comparison out (`opbench ab`, and `opbench upgrade-check`'s default)."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from opbench.regression import decisions
from opbench.regression import intervals as ps
from opbench.regression.coordinator import SIDES, OverBudget, PairedGate, Plan, Side
from opbench.regression.envs import fresh_folder
from opbench.results.compare import Comparison
from opbench.results.stats import Rule
from opbench.results.store import ResultsError


def check_plan(plan: Plan) -> None:
    """Refuse, before any worker starts, a plan whose intervals cannot reach its confidence."""
    needed = ps.min_pairs(plan.confidence)
    if plan.max_pairs < needed:
        raise ResultsError(f"--pairs {plan.min_pairs} --max-pairs {plan.max_pairs}: a {100 * plan.confidence:g}% "
                           f"interval over worker pairs needs at least {needed} pairs")


def run(pythons: Sequence[str], envs: Sequence[Mapping[str, str]], pytest_args: list[str], plan: Plan,
        rule_for: Callable[[str], Rule], workdir: Path) -> tuple[Comparison, Path]:
    """Run the paired gate between the baseline's and the candidate's interpreters (each worker
    gets this process's environment plus its own `envs` entry), save it in a fresh folder under
    `workdir` and return the comparison with that folder."""
    if not pytest_args:
        raise ResultsError("give the benchmarks to compare after '--', e.g. -- benchmarks/ops -m 'torch and gemm'")
    check_plan(plan)
    sides = tuple(Side(name, python, side_env(name, env, workdir)) for name, python, env in zip(SIDES, pythons, envs,
                                                                                                strict=True))
    folder = fresh_folder(workdir)
    gate = PairedGate(sides, pytest_args, folder, plan, rule_for)
    try:
        gate.run()
    except OverBudget as exc:
        decisions.save(gate, folder, complete=False)
        raise ResultsError(f"{exc} (the pairs run so far are in {folder})") from None
    except KeyboardInterrupt:
        decisions.save(gate, folder, complete=False)
        raise Interrupted(decisions.comparison(gate), folder) from None
    decisions.save(gate, folder)
    return decisions.comparison(gate), folder


# What a fresh worker pair would otherwise make again, kept on disk under the gate's --workdir (and
# so across runs that reuse it): the model check's float64 emulations, shared by both sides (their
# store is keyed by NumPy, its BLAS, the CPU and opbench's sources: a side with another NumPy makes
# its own), and each side's XLA executables from JAX (which keeps none by default). torch.compile's
# kernels already persist in its own per-user folder, keyed by torch's version, and stay there:
# moving them under a temporary --workdir would make every gate compile them cold. A variable the
# user set wins.
CACHES = {"OPBENCH_REFERENCE_CACHE": "references"}
SIDE_CACHES = {"JAX_COMPILATION_CACHE_DIR": "jax"}


def side_env(side: str, env: Mapping[str, str], workdir: Path) -> dict[str, str]:
    """The environment of one side's workers: this process's, its own entries (--baseline-env,
    --candidate-env), and the caches above where neither names them."""
    caches = Path(workdir).resolve() / "caches"
    out = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env}
    for name, folder in CACHES.items():
        out.setdefault(name, str(caches / folder))
    for name, folder in SIDE_CACHES.items():
        out.setdefault(name, str(caches / side / folder))
    return out


class Interrupted(KeyboardInterrupt):
    """The gate was interrupted: what it had decided is saved (marked incomplete) and comes with it."""

    def __init__(self, result: Comparison, folder: Path) -> None:
        super().__init__(f"interrupted; the results so far are in {folder}")
        self.result, self.folder = result, folder
