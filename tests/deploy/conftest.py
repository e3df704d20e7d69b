"""Deployment: the rendered image end to end, the registry (images push and pinned pulls),
HAProxy in front of replicas, scale-out over several engines, Kubernetes manifests, interop with
Harbor and OpenEnv's tools, and the .ci set-up scripts.

Every test here is marked ``deploy`` (``pytest -m deploy``)."""

from _layers import mark_layer


def pytest_collection_modifyitems(items):
    mark_layer(items, __file__)
