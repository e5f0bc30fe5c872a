"""Every mutant of the catalogue (tests/mutants.py: models in float32 and mixed precision,
operators, whole convergence runs) is caught by the gate that claims to cover it, in every
framework installed; a surviving mutant fails its test."""

from __future__ import annotations

import pytest

from opbench import frameworks
from tests import mutants

ids = {"ids": lambda m: m.name.replace(" ", "-")}


def _assert_caught(survives, mutant, framework: str, gate: str) -> None:
    try:
        frameworks.load(framework)
        survived = survives(mutant, framework)
    except frameworks.Unavailable as exc:
        pytest.skip(str(exc))
    assert survived is None, f"{gate} gate: {mutant.name} ({mutant.why}) {survived}"


# make test runs every model mutant at the quick profile's batch, in every framework but eager JAX's mixed
# precision and eager JAX's ResNet-20 training (eager JAX compiles every primitive: ResNet-20's training was the
# unit lane's 7 s on the Xeon, 2026-12-04; make test gates JAX's amp in jit, and eager JAX trains batch norm and
# every shortcut in the batch-norm zoo of tests/frameworks/test_models.py): a mutant at the full
# profile's batch is the second variant of its quick twin (the float64 reference of a batch-128 ResNet-20
# is a minute on 2 cores), and make test-rest and make test-full run the rest.
# The timed step's second call, its Adam floor and the call after its timed rounds are framework-neutral
# checks of what each framework's own trainer does, and the types read where they act are one reading per
# framework of the same rule: make test runs their mutants in the first framework (the second call's: 85 s
# in all four on 2 cores), make test-rest in every one.
FIRST_FRAMEWORK = ("Adam betas swapped", "Adam made anew each call", "SGD with momentum", "gradients never zeroed",
                   "AdamW for Adam", "update skipped once warm (Adam)", "update skipped once warm (SGD)",
                   "stale loss once warm", "Adam at 10x the rate once warm",
                   "low-precision loss cast back", "last layer in float32 in training only")
# One mutant of that kind runs only in make test-rest, in every framework: SGD's update applied twice once warm
# trains ResNet-20 (18 s of make test's unit lane cold on the Xeon, 2026-12-04), where the call after the timed
# rounds of an SGD step is the MLP's in make test (update skipped once warm (SGD)), the same check of the same update
REST_ONLY = ("SGD update applied twice once warm",)
# The frameworks make test runs a mutant in, where not every one (make test-rest runs it in every one):
# - A framework's running-variance convention is one of two (PyTorch's unbiased, the biased one of TensorFlow, MXNet
#   and opbench's JAX model): the biased-variance mutant in PyTorch and MXNet, one of each (TensorFlow's and JAX's
#   ResNet-20 training were 15 s of make test's unit lane cold on the Xeon, 2026-12-04).
# - The LSTM's swapped bias gates are swapped in the framework-neutral weights before each framework maps them: the
#   inference variant catches the mapped weights in every framework, the training variant shows that the training
#   gate catches them too, in TensorFlow (PyTorch's and MXNet's two biases per gate need a float32 emulation of
#   their own: PyTorch's training variant was 31 s of make test's unit lane on 2 Zen 3 cores, 2026-12-04).
MAKE_TEST_IN = {"biased running variance": ("torch", "mxnet"), "lstm bias gates swapped (training)": ("tensorflow",)}


def _model_params():
    for m in mutants.MODEL_MUTANTS:
        for i, fw in enumerate(mutants.FRAMEWORKS):
            eager_jax = fw == "jax" and (m.precision == "amp" or (m.model == "resnet20" and m.gate == "model training"))
            later = (m.profile != "quick" or eager_jax or (m.name in FIRST_FRAMEWORK and i > 0) or m.name in REST_ONLY
                     or fw not in MAKE_TEST_IN.get(m.name, (fw,)))
            yield pytest.param(m, fw, id=f"{ids['ids'](m)}-{fw}", marks=pytest.mark.full if later else ())


@pytest.mark.parametrize(("mutant", "framework"), list(_model_params()))
def test_model_mutant_is_caught(mutant, framework):
    _assert_caught(mutants.model_survives, mutant, framework, mutant.gate)


@pytest.mark.parametrize("framework", mutants.FRAMEWORKS)
@pytest.mark.parametrize("mutant", mutants.OP_MUTANTS, **ids)
def test_operator_mutant_is_caught(mutant, framework):
    _assert_caught(mutants.op_survives, mutant, framework, mutant.gate)


# The plan and its digests are the suite's, the same for every framework (each framework's own run is
# gated by benchmarks/convergence): one framework shows that the gate catches a wrong feed. Evaluating in
# training mode is each framework's own switch, so those mutants run in every framework: make test runs
# them in the first framework (a short convergence run each, 10 s on 2 cores), make test-rest and
# make test-full in every one. When the switch acts (always, after the first epoch, in the timed runs)
# is the gate's own, framework-neutral timing.
def _convergence_params():
    for m in mutants.CONVERGENCE_MUTANTS:
        for i, fw in enumerate(mutants.FRAMEWORKS if m.train_mode_eval else mutants.FRAMEWORKS[:1]):
            later = i > 0
            yield pytest.param(m, fw, id=f"{m.name.replace(' ', '-')}-{fw}", marks=pytest.mark.full if later else ())


@pytest.mark.parametrize(("mutant", "framework"), list(_convergence_params()))
def test_convergence_mutant_is_caught(mutant, framework):
    _assert_caught(mutants.convergence_survives, mutant, framework, "convergence")
