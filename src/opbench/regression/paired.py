"""The paired design of the upgrade gate, end to end: two interpreters, the selection, a Plan and
the rules in; the saved comparison out (`opbench ab`, and `opbench upgrade-check`'s default)."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from opbench.harness import isa, openmp
from opbench.regression import decisions
from opbench.regression import intervals as ps
from opbench.regression.coordinator import SIDES, OverBudget, PairedGate, Plan, Side
from opbench.regression.envs import CACHES_FOLDER, fresh_folder
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
    folder = fresh_folder(workdir)
    sides = tuple(Side(name, python, side_env(name, env, workdir, run=folder.name))
                  for name, python, env in zip(SIDES, pythons, envs, strict=True))
    gate = PairedGate(sides, pytest_args, folder, plan, rule_for)
    try:
        gate.run()
    except OverBudget as exc:
        decisions.save(gate, folder, complete=False)
        raise ResultsError(f"{exc} (the pairs run so far are in {folder})") from None
    except KeyboardInterrupt:
        decisions.save(gate, folder, complete=False)
        raise Interrupted(decisions.comparison(gate), folder) from None
    finally:  # TensorFlow's XLA executables serve this run only (TF_XLA_CACHE): a reused --workdir keeps none
        shutil.rmtree(run_caches(workdir, folder.name), ignore_errors=True)
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

# TensorFlow's XLA executables (the xla mode's tf.function(jit_compile=True)), which it keeps in no
# file by default: without them every fresh worker pair compiles each XLA benchmark again. Its
# persistent cache keys an executable by the function's graph and arguments, and XLA_FLAGS are not
# part of the key (TF 2.21 on an AVX-512 Xeon: a process with XLA_FLAGS=--xla_cpu_max_isa=AVX2 loaded
# the executable an uncapped one had compiled, its only warnings about two tuning features), so each
# side keeps its own for one run of the gate only, which a --workdir reused with other flags or
# another TensorFlow cannot serve.
TF_XLA_CACHE = "--tf_xla_persistent_cache_directory"

# How long an idle GNU OpenMP worker (PyTorch's and MXNet's kernels) spins before it sleeps, in
# libgomp's turns of its wait loop (GOMP_SPINCOUNT). Its default, 300,000, kept a torch worker's
# idle thread busy for about 10 ms of CPU after a parallel GEMM on a 2-core Zen 5, so in a worker pair
# each side's idle team spun through the other side's next rounds on the cores it computed on:
# calls of a millisecond and more took 3-20% longer than with 10,000 (an eager 1024^3 GEMM 13.1
# against 11.5 ms), and an injected 7% slowdown was seen as 8.3-8.5%, since the candidate's own team
# fell idle during its extra work and so spun less into the baseline's rounds than the baseline's
# into its (docs: the paired gate). 10,000 turns stopped within about 0.35 ms there, a sixth of a
# timed round, still far longer than the gaps between parallel regions inside one call; telling
# libgomp to sleep at once (OMP_WAIT_POLICY=passive) made calls up to three times as slow instead.
# Where the user or a side's entry sets how idle OpenMP workers wait (any of openmp.WAIT_VARIABLES),
# that setting stands alone.
IDLE_SPIN = {"GOMP_SPINCOUNT": "10000"}


def side_env(side: str, env: Mapping[str, str], workdir: Path, run: str = "") -> dict[str, str]:
    """The environment of one side's workers: this process's, its own entries (--baseline-env,
    --candidate-env), and the caches above (TensorFlow's XLA executables for the gate's `run`) and
    the bounded OpenMP spin where neither sets them. A side whose ATEN_CPU_CAPABILITY caps torch keeps
    torch.compile's kernels in its cap's folder (opbench.harness.isa), unless its own entries name one:
    with one folder for both, a gate of the AVX2 path against the uncapped one would be served the
    other side's kernels, wrong or crashing."""
    caches = run_caches(workdir)
    out = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", **env}
    if not openmp.wait_settings(out):
        out.update(IDLE_SPIN)
    for name, folder in CACHES.items():
        out.setdefault(name, str(caches / folder))
    for name, folder in SIDE_CACHES.items():
        out.setdefault(name, str(caches / side / folder))
    if isa.INDUCTOR_CACHE not in env and (kernels := isa.kernel_cache(out)):
        out[isa.INDUCTOR_CACHE] = kernels  # torch.compile's kernel keys leave out the vector ISA
    flags = out.get("TF_XLA_FLAGS", "")
    if run and TF_XLA_CACHE not in flags:
        out["TF_XLA_FLAGS"] = f"{flags} {TF_XLA_CACHE}={run_caches(workdir, run) / side / 'tf-xla'}".strip()
    return out


def run_caches(workdir: Path, run: str = "") -> Path:
    """The gate's caches under `workdir`, or the folder of those that serve one `run` alone."""
    return Path(workdir).resolve() / CACHES_FOLDER / run


class Interrupted(KeyboardInterrupt):
    """The gate was interrupted: what it had decided is saved (marked incomplete) and comes with it."""

    def __init__(self, result: Comparison, folder: Path) -> None:
        super().__init__(f"interrupted; the results so far are in {folder}")
        self.result, self.folder = result, folder
