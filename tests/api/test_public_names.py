"""opbench.api is the one supported import for users' own benchmarks (docs/usage/own.md): a name
that disappears from it breaks their files, so this test fails first."""

from opbench import api

PUBLIC = {"LSTM", "Arg", "BatchNorm", "Conv2D", "CorrectnessError", "DeclarationError", "Dense", "Flatten",
          "GlobalAvgPool", "Model", "Operator", "Optimizer", "Pool2D", "Residual", "Runner", "builtin_operators",
          "model", "model_benchmarks", "operator"}
RUNNER = {"framework", "mode", "device", "dtype", "version", "module", "array", "numpy", "compile", "sync",
          "check", "measure"}


def test_every_public_name_is_still_there():
    assert PUBLIC <= set(api.__all__)
    for name in api.__all__:
        assert getattr(api, name) is not None, name


def test_the_fw_fixture_still_offers_what_the_page_documents():
    assert RUNNER <= set(dir(api.Runner))
