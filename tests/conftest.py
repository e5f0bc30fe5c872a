pytest_plugins = ["pytester"]


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "full: a slow test's second variant, whose first variant make test runs, or a slow test of a "
        "path make test reaches otherwise (a failure mode beside its working case, the walk-through of an extension): "
        "make test leaves it out (-m 'not full'), make test-rest (run by CI after it) and make test-full run it")
