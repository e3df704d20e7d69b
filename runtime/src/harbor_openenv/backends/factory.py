"""The backend a server's settings choose, made once at start-up."""

from __future__ import annotations

from harbor_openenv.config import Settings
from harbor_openenv.images.pins import Pins
from harbor_openenv.tasks.dataset import Dataset

from .base import Backend


def chosen(dataset: Dataset, settings: Settings, *, owner: str, sessions: int) -> Backend:
    """Harbor's environments (``HARBOR_OPENENV_BACKEND=harbor:TYPE``), several Docker engines
    (``HARBOR_OPENENV_DOCKER_HOSTS``) or this server's one; each engine client keeps connections
    for ``sessions`` sessions and a few more. A malformed images.lock stops start-up here."""
    if settings.harbor_type is not None:
        from .harbor import HarborEnvironments

        return HarborEnvironments.of(dataset, settings)
    concurrency = sessions + 8  # each session's thread, the warm pool and the disk guard
    if settings.docker_hosts:
        from .several import SeveralEngines

        return SeveralEngines.connecting(
            settings, Pins(dataset), owner=owner, concurrency=concurrency
        )
    from .local import LocalEngine

    return LocalEngine(settings, Pins(dataset), owner=owner, concurrency=concurrency)
