"""What the Docker backends (one engine, several engines) share: the engine's certificates given
as contents, codex in the helper's volume, and the engine calls for counts and fork images."""

from __future__ import annotations

import logging
import shutil
import threading
from collections.abc import Callable
from pathlib import Path

import docker
import docker.errors

from harbor_openenv.config import Settings
from harbor_openenv.harness.base import HarnessError
from harbor_openenv.sandbox import LABEL_OWNER, SandboxError, engine

log = logging.getLogger("harbor_openenv")


class Certificates:
    """``HARBOR_OPENENV_DOCKER_TLS_CA``, ``_CERT`` and ``_KEY``, if given, written where Docker's
    own settings point before the first connection, and removed at :meth:`close`."""

    def __init__(self, settings: Settings) -> None:
        self._tls = (settings.docker_tls_ca, settings.docker_tls_cert, settings.docker_tls_key)
        self._folder: Path | None = None
        self._lock = threading.Lock()  # engines connect in parallel: the files are written once

    def write(self) -> None:
        ca, cert, key = self._tls
        if ca is None or cert is None or key is None:  # Settings: all three or none
            return
        with self._lock:
            if self._folder is None:
                self._folder = engine.use_tls_contents(ca, cert, key)

    def close(self) -> None:
        """After the engine's last call: a new connection reads the files again."""
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)


def codex_extras(settings: Settings) -> Callable[[str], list[Path]] | None:
    """What goes into the helper's volume beside the helper (once per server, mounted
    read-only everywhere: a rollout of an inside harness uploads nothing): codex with
    ``HARBOR_OPENENV_CODEX_PACKAGE`` set, the harness cache's builds for the engine's
    architecture with ``HARBOR_OPENENV_HARNESS_CACHE``. What has no build for the engine
    is left out: a rollout of it then says why."""
    package, root = settings.codex_package, settings.harness_cache
    if package is None and root is None:
        return None
    from harbor_openenv.harness.cache import HarnessCache
    from harbor_openenv.harness.codex import Codex

    codex = Codex(package) if package is not None else None
    cache = HarnessCache(root) if root is not None else None

    def archives(machine: str) -> list[Path]:
        found = []
        try:
            if codex is not None:
                found.append(codex.volume_archive(machine))
        except HarnessError as exc:
            log.warning("codex is not in the helper's volume: %s", exc)
        try:
            made = cache.volume_archive(machine) if cache is not None else None
            found.extend([made] if made is not None else [])
        except HarnessError as exc:
            log.warning("the harness cache is not in the helper's volume: %s", exc)
        return found

    return archives


def running(client: docker.DockerClient, owner: str) -> int | None:
    """``owner``'s running containers on ``client``'s engine (None: it cannot answer)."""
    try:
        filters: dict[str, str | list[str] | bool] = {
            "label": f"{LABEL_OWNER}={owner}",
            "status": "running",
        }
        return len(client.containers.list(filters=filters, ignore_removed=True))
    except Exception as exc:  # the engine may be down: the gauge is left out
        log.debug("metrics: cannot list containers: %s", exc)
        return None


def remove_image(client: docker.DockerClient, image: str) -> None:
    """Remove a fork's committed image from ``client``'s engine (gone already: nothing to do)."""
    try:
        client.api.remove_image(image, force=False)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        raise SandboxError(f"removing the image {image[:19]} failed: {exc}") from None
