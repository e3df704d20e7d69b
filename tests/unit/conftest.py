"""The fast loop: no Docker engine, no server on one, a minute at most (``pytest -m unit``).

Every test here is marked ``unit``. A test that asks for an engine fixture (or is marked
``docker``) does not belong here: collection stops and names it."""

import pytest
from _layers import mark_layer

ENGINE_FIXTURES = {"docker_client", "bare_sandbox", "server", "dependency_wheels"}


def pytest_collection_modifyitems(items):
    for item in mark_layer(items, __file__):
        engine = ENGINE_FIXTURES.intersection(getattr(item, "fixturenames", ()))
        if engine or item.get_closest_marker("docker"):
            raise pytest.UsageError(
                f"{item.nodeid} needs the Docker engine ({', '.join(sorted(engine)) or 'docker'}):"
                " it belongs in tests/engine (or another layer), not tests/unit"
            )
