"""One Docker engine, the one Docker's own settings name (``DOCKER_HOST``, by default this host's
socket): the default backend."""

from __future__ import annotations

import threading
from collections.abc import Mapping

import docker
import docker.errors

from harbor_openenv.config import Settings
from harbor_openenv.images.pins import Pins
from harbor_openenv.images.resolver import ImageError, ImageResolver
from harbor_openenv.sandbox import Sandbox, SandboxError, engine
from harbor_openenv.sandbox.owner import remove_containers, remove_dead_scratch
from harbor_openenv.sandbox.spec import ComposeSpec, ContainerSpec
from harbor_openenv.sandbox.starter import DockerStarter
from harbor_openenv.tasks.config import StepConfig
from harbor_openenv.tasks.task import Task

from . import docker as shared
from .base import Backend, On


class LocalEngine(Backend):
    """The engine client, connected on first use (so /health never touches Docker), keeping
    connections for ``concurrency`` requests at once; its image cache and the images.lock
    ``pins``; every environment labelled with ``owner``."""

    def __init__(self, settings: Settings, pins: Pins, *, owner: str, concurrency: int) -> None:
        self.settings, self.pins, self.owner = settings, pins, owner
        self._concurrency = concurrency
        self._certificates = shared.Certificates(settings)
        self._client: docker.DockerClient | None = None
        self._images: ImageResolver | None = None
        self._lock = threading.Lock()
        self.starter = DockerStarter(
            lambda: self.client, owner=owner, extras=shared.codex_extras(settings)
        )

    @property
    def client(self) -> docker.DockerClient:
        """The engine client (each session's thread, the warm pool and the disk guard share it)."""
        with self._lock:
            if self._client is None:
                self._certificates.write()
                try:
                    client = engine.connect(concurrency=self._concurrency)
                except docker.errors.DockerException as exc:
                    raise SandboxError(f"cannot reach the Docker engine: {exc}") from None
                self._client = client
                self._images = ImageResolver(client, build_network=self.settings.build_network)
            return self._client

    @property
    def images(self) -> ImageResolver:
        """The engine's image cache."""
        self.client  # noqa: B018 - connects and creates the resolver
        assert self._images is not None
        return self._images

    def start(
        self,
        spec: ContainerSpec,
        *,
        task_id: str | None,
        labels: Mapping[str, str] | None = None,
        compose: ComposeSpec | None = None,
        on: On = None,
    ) -> Sandbox:
        return self.starter.start(spec, task_id=task_id, labels=labels, compose=compose)

    def task_image(self, task: Task, on: On = None) -> str:
        return self.pins.task_image(self.images, task)

    def verifier_image(self, task: Task, step: StepConfig | None, on: On = None) -> str:
        try:
            return self.pins.verifier_image(self.images, task, step)
        except ImageError as exc:
            raise SandboxError(f"the separate verifier's image: {exc}") from None

    def ping(self) -> None:
        self.client.ping()

    def running(self) -> int | None:
        with self._lock:
            client = self._client
        return 0 if client is None else shared.running(client, self.owner)

    def sweep(self) -> int:
        return remove_containers(self.client)

    def sweep_scratch(self) -> int:
        return remove_dead_scratch(self.client)

    def remove_image(self, image: str) -> None:
        shared.remove_image(self.client, image)

    def close(self) -> int:
        try:
            return 0 if self._client is None else remove_containers(self._client, owner=self.owner)
        finally:
            self._certificates.close()
