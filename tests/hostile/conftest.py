"""Hostile agents and verifiers against the real engine: escapes, planted rewards, process
tricks, and property tests of the confined file actions.

Every test here is marked ``hostile`` (``pytest -m hostile``)."""

from _layers import mark_layer


def pytest_collection_modifyitems(items):
    mark_layer(items, __file__)
