"""The runtime against the real Docker engine: sandboxes, servers driven by the client, the
command line's check and images, task formats (compose, multi-step), metrics and readiness.

Every test here is marked ``engine`` (``pytest -m engine``)."""

from _layers import mark_layer


def pytest_collection_modifyitems(items):
    mark_layer(items, __file__)
