"""Blueprint files (--workloads, opbench.api.models_from): TOML tables that become ModelSpecs every
builder can build, and one line naming the file, the model and the layer for one it cannot."""

from __future__ import annotations

import pytest

from opbench.core.errors import DeclarationError
from opbench.harness.config import ConfigError, resolve
from opbench.workloads.models import blueprint, catalogue
from opbench.workloads.models.spec import Conv2D, Dense, Flatten, Optimizer, Pool2D, Residual, init_params

GOOD = """
[model.tinyconv]
input_shape = [1, 12, 12]
batch = { quick = 8, full = 32 }
optimizer = { name = "adam", lr = 0.001 }
layers = [
  { layer = "conv2d", filters = 4, kernel = 3, pad = 1, activation = "relu" },
  { layer = "residual", body = [{ layer = "conv2d", filters = 4, kernel = 3, pad = 1 }] },
  { layer = "pool2d", kind = "max", size = 2, stride = 2 },
  { layer = "flatten" },
  { layer = "dense", units = 10 },
]

[model.tinymlp]
input_shape = [20]
layers = [{ layer = "dense", units = 16, activation = "relu" }, { layer = "dense", units = 3 }]
"""


def write(tmp_path, text: str):
    path = tmp_path / "models.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_blueprint_becomes_the_specs_the_builders_build(tmp_path):
    conv, mlp = blueprint.load(write(tmp_path, GOOD))
    assert conv.name == "tinyconv" and conv.input_shape == (1, 12, 12) and conv.batch == {"quick": 8, "full": 32}
    assert conv.optimizer == Optimizer("adam", 0.001)
    assert conv.layers == (Conv2D(4, 3, pad=1, activation="relu"), Residual((Conv2D(4, 3, pad=1),)),
                           Pool2D("max", 2, 2), Flatten(), Dense(10))
    assert conv.origin == "models.toml [model.tinyconv]" and conv.classes == 10
    assert mlp.optimizer == Optimizer("sgd", 0.01) and mlp.batch == {"quick": 32, "full": 32}
    assert set(init_params(conv)) >= {"0.W", "0.b", "1.0.W", "4.W", "4.b"}
    assert "tinyconv" not in catalogue.MODELS  # loading registers nothing


@pytest.mark.parametrize(("text", "message"), [
    ("[model.a]\ninput_shape = [4]\nlayers = [{ layer = 'dens', units = 2 }]",
     "models.toml [model.a] layer 0: unknown layer 'dens'; valid: dense, conv2d"),
    ("[model.a]\ninput_shape = [4]\nlayers = [{ layer = 'dense', unit = 2 }]",
     "models.toml [model.a] layer 0: dense has no unit; its keys: layer, activation, units"),
    ("[model.a]\ninput_shape = [4]\nlayers = [{ layer = 'conv2d', filters = 2, kernel = 3 },\n"
     "{ layer = 'dense', units = 2 }]",
     "models.toml [model.a]: model 'a': its layers do not fit (4,): layer 0 (Conv2D) takes 3-D inputs"),
    ("[model.a]\ninput_shape = [4]\nlayers = [{ layer = 'flatten' }]",
     "model 'a': the last layer is a Dense"),
    ("[model.a]\ninput_shape = [4]\noptimizer = { name = 'rmsprop', lr = 0.1 }\n"
     "layers = [{ layer = 'dense', units = 2 }]",
     "unknown optimizer 'rmsprop'; valid: sgd, adam"),
    ("[model.a]\nlayers = []\nepochs = 3", "models.toml [model.a]: needs input_shape; has no epochs"),
    ("[model.mlp]\ninput_shape = [4]\nlayers = [{ layer = 'dense', units = 2 }]",
     "model 'mlp' is declared already (one of opbench own)"),
    ("[models.a]\ninput_shape = [4]", "a blueprint file holds [model.NAME] tables and nothing else"),
    ("[model.a\n", "models.toml: not TOML"),
])
def test_a_blueprint_opbench_cannot_build_is_one_line_naming_where(tmp_path, text, message):
    with pytest.raises(DeclarationError) as err:
        blueprint.load(write(tmp_path, text))
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_the_workloads_option_must_name_a_file(tmp_path):
    assert resolve({"workloads": str(write(tmp_path, GOOD))}, environ={}).workloads.endswith("models.toml")
    with pytest.raises(ConfigError, match=r"--workloads 'nowhere\.toml' is not a file"):
        resolve({"workloads": "nowhere.toml"}, environ={})


def test_the_models_of_workloads_join_the_catalogues_in_unbound_model_benchmarks(pytester: pytest.Pytester):
    """`pytest benchmarks/e2e --workloads models.toml`: the unbound test_training runs the blueprint's
    models beside the catalogue's, with their markers; a file opbench cannot build is a usage error."""
    pytester.makepyfile(test_e2e="""
def test_training(model_case, benchmark):
    pass
""")
    write(pytester.path, GOOD)
    result = pytester.runpytest_subprocess("--workloads", "models.toml", "--framework", "jax", "--mode", "jit",
                                           "--co", "-q", "-m", "tinyconv or tinymlp or mlp",
                                           "-W", "error::pytest.PytestUnknownMarkWarning")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["*test_training[[]jax-cpu-jit-float32-mlp-b128[]]",
                                 "*test_training[[]jax-cpu-jit-float32-tinyconv-b8[]]",
                                 "*test_training[[]jax-cpu-jit-float32-tinymlp-b32[]]"])
    write(pytester.path, "[model.a]\ninput_shape = [4]\nlayers = [{ layer = 'flatten' }]")
    bad = pytester.runpytest_subprocess("--workloads", "models.toml", "--co", "-q")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR
    bad.stderr.fnmatch_lines(["ERROR: --workloads: models.toml [[]model.a[]]: model 'a': the last layer is a Dense*"])
    assert "Traceback" not in bad.stderr.str()
