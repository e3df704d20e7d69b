"""The Copier template: rendering, answers, updates across releases, syncing and dataset references, the harbor-openenv wheels command, and the newcomer's road (README commands, docker build and run).

Every test here is marked ``template`` (``pytest -m template``)."""

from _layers import mark_layer


def pytest_collection_modifyitems(items):
    mark_layer(items, __file__)
