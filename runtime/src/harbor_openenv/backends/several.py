"""Several Docker engines (``HARBOR_OPENENV_DOCKER_HOSTS``): each episode placed on one of them
(:mod:`.fleet`), and everything of it (image, environment, verifier) on that engine."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import docker
import docker.errors

from harbor_openenv.config import Settings
from harbor_openenv.images.pins import Pins
from harbor_openenv.images.resolver import ImageError, ImageResolver
from harbor_openenv.sandbox import Sandbox, SandboxError, engine
from harbor_openenv.sandbox.owner import remove_containers, remove_dead_scratch
from harbor_openenv.sandbox.spec import ComposeSpec, ContainerSpec, Starter
from harbor_openenv.sandbox.starter import DockerStarter
from harbor_openenv.tasks.config import StepConfig
from harbor_openenv.tasks.task import Task

from . import docker as shared
from .base import Backend, On
from .fleet import Engine, EngineSet, EngineStatus, Lease, engine_environ

R = TypeVar("R")


@dataclass(frozen=True)
class OnEngine:
    """What one of several engines holds for this server: its image cache and its starter."""

    images: ImageResolver
    starter: Starter


class SeveralEngines(Backend):
    """The ``engines`` one server spreads its episodes over; ``pins``: images.lock's images,
    pulled on the engine an episode is on; ``owner``: whose environments the sweeps keep."""

    def __init__(
        self,
        engines: EngineSet[OnEngine],
        pins: Pins,
        *,
        owner: str,
        certificates: shared.Certificates | None = None,
    ) -> None:
        self.engines, self.pins, self.owner = engines, pins, owner
        self._certificates = certificates

    @classmethod
    def connecting(
        cls, settings: Settings, pins: Pins, *, owner: str, concurrency: int
    ) -> SeveralEngines:
        """The engines ``settings`` name (connected on first use), each client keeping
        connections for ``concurrency`` requests at once."""
        certificates = shared.Certificates(settings)
        extras = shared.codex_extras(settings)  # one, so codex's archive is made once

        def connect(url: str) -> docker.DockerClient:
            certificates.write()
            try:
                return engine.connect(
                    concurrency=concurrency, environ=engine_environ(url, os.environ)
                )
            except docker.errors.DockerException as exc:
                raise SandboxError(f"cannot reach the Docker engine {url}: {exc}") from None

        def make(one: Engine[OnEngine]) -> OnEngine:
            client = one.client
            if one.generation:  # it came back: the episodes it held have ended
                remove_containers(client, owner=owner)
            environ = engine_environ(one.url, os.environ)
            return OnEngine(
                ImageResolver(client, build_network=settings.build_network),
                DockerStarter(lambda: client, owner=owner, environ=environ, extras=extras),
            )

        engines = EngineSet(
            settings.docker_hosts,
            connect=connect,
            ping=engine.ping,
            make=make,
            probe_s=settings.engine_probe_s,
        )
        return cls(engines, pins, owner=owner, certificates=certificates)

    def start(
        self,
        spec: ContainerSpec,
        *,
        task_id: str | None,
        labels: Mapping[str, str] | None = None,
        compose: ComposeSpec | None = None,
        on: On = None,
    ) -> Sandbox:
        if on is None:  # the warm pool's: there is none with several engines
            raise SandboxError("with several engines an environment starts on its episode's engine")
        starter = _parts(on).starter
        return starter.start(spec, task_id=task_id, labels=labels, compose=compose)

    def task_image(self, task: Task, on: On = None) -> str:
        return self.pins.task_image(self._images(on), task)

    def verifier_image(self, task: Task, step: StepConfig | None, on: On = None) -> str:
        try:
            return self.pins.verifier_image(self._images(on), task, step)
        except ImageError as exc:
            raise SandboxError(f"the separate verifier's image: {exc}") from None

    def _images(self, on: On) -> ImageResolver:
        if on is None:
            raise SandboxError("with several engines an image is made on its episode's engine")
        return _parts(on).images

    def place(self, work: Callable[[On], R]) -> tuple[Lease[Any] | None, R]:
        self.engines.start()
        return self.engines.run(work)

    def lease(self, on: On) -> Lease[Any] | None:
        self.engines.start()
        return self.engines.lease(on)

    def running(self) -> int | None:
        clients = [one.client for one in self.engines.connected()]
        known = [n for n in (shared.running(c, self.owner) for c in clients) if n is not None]
        return sum(known) if known or not clients else None

    def statuses(self) -> tuple[EngineStatus, ...]:
        return tuple(self.engines.statuses())

    def sweep(self) -> int:
        self.engines.start()
        return self.engines.each(lambda one: remove_containers(one.client), "the sweep")

    def sweep_scratch(self) -> int:
        clients = [one.client for one in self.engines.connected()]
        return remove_dead_scratch(clients[0]) if clients else 0

    def remove_image(self, image: str) -> None:
        for one in self.engines.connected():  # only the fork's engine has it
            shared.remove_image(one.client, image)

    def close(self) -> int:
        self.engines.close()
        own = functools.partial(remove_containers, owner=self.owner)
        try:
            return self.engines.each(lambda one: own(one.client), "the sweep")
        finally:
            if self._certificates is not None:
                self._certificates.close()


def _parts(on: Engine[OnEngine]) -> OnEngine:
    """What engine ``on`` holds for this server (it is connected once an episode is on it)."""
    assert on.parts is not None, f"{on.name} is not connected"
    return on.parts
