"""One environment request, built in one place: which task, on which image, with what table,
env and network, on which engine; and how it becomes a container spec and a compose project."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from harbor_openenv.config import Settings
from harbor_openenv.sandbox.spec import ComposeSpec, ContainerSpec
from harbor_openenv.tasks.config import EnvironmentConfig, StepConfig, verifier_environment
from harbor_openenv.tasks.task import Task

from .fleet import Engine


@dataclass(frozen=True)
class EnvRequest:
    """An environment to start: ``task``'s, from ``image``, as ``table`` sizes it; ``compose``:
    the task's compose project around ``main``; ``on``: of several engines, which;
    ``verifying``: a separate verifier's."""

    task: Task
    image: str
    table: EnvironmentConfig
    env: Mapping[str, str]
    network_mode: str
    compose: bool = False
    on: Engine[Any] | None = None
    verifying: bool = False

    @classmethod
    def of_task(
        cls,
        task: Task,
        image: str,
        env: Mapping[str, str],
        *,
        on: Engine[Any] | None = None,
        alone: bool = False,
    ) -> EnvRequest:
        """The task's own environment (``alone``: its container without a compose project: a
        fork's branch, a pristine verifier's)."""
        table = task.config.environment
        compose = task.compose_file is not None and not alone
        return cls(task, image, table, env, table.network_mode, compose, on)

    @classmethod
    def verifier(
        cls,
        task: Task,
        step: StepConfig | None,
        image: str,
        env: Mapping[str, str],
        *,
        on: Engine[Any] | None = None,
    ) -> EnvRequest:
        """A separate verifier's environment: its ``[verifier.environment]`` and network; the
        compose project around it unless the verifier has an image of its own."""
        config = task.config
        table = verifier_environment(config, step)
        phase = (step.verifier.network_mode if step else None) or config.verifier.network_mode
        own = task.verifier_image_ref(step) or task.verifier_image_dir(step)
        compose = not own and task.compose_file is not None
        return cls(task, image, table, env, phase or table.network_mode, compose, on, True)

    def container(self, settings: Settings) -> ContainerSpec:
        """How its container starts: everything but the task's label."""
        return ContainerSpec(
            self.image,
            workdir=self.table.workdir,
            cpus=self.table.cpus or settings.default_cpus,
            memory_mb=self.table.memory_mb or settings.default_memory_mb,
            network=self.network(settings),
            env=tuple(sorted(self.env.items())),
            pids_limit=settings.pids_limit or None,
            storage_mb=disk_limit(self.table, settings),
        )

    def network(self, settings: Settings) -> str | None:
        """The engine network its container joins: ``none`` for a no-network task; for a public
        one, ``HARBOR_OPENENV_VERIFIER_NETWORK`` (a separate verifier's) or
        ``HARBOR_OPENENV_PUBLIC_NETWORK``, else None (the engine's default)."""
        if self.network_mode == "no-network":
            return "none"
        if self.verifying and settings.verifier_network:
            return settings.verifier_network
        return settings.public_network

    def project(self, settings: Settings) -> ComposeSpec | None:
        """What its compose project adds (None: a container alone)."""
        if not self.compose:
            return None
        task = self.task
        assert task.compose_file is not None
        return ComposeSpec(
            task.compose_file,
            no_network=self.network_mode == "no-network",
            compose_env=self.env,
            timeout_s=self.table.build_timeout_sec,
            build_network=settings.build_network,
            prebuilt=self.image
            if task.image is not None and task.image.kind != "dockerfile"
            else None,
        )


def disk_limit(table: EnvironmentConfig, settings: Settings) -> int | None:
    """An environment's disk limit in MB: its storage_mb, else the server's (None: none)."""
    return table.storage_mb or settings.disk_mb or None
