"""What starts an episode's environment: a :class:`ContainerSpec` (and, for a compose task, a
:class:`ComposeSpec`), given to a :class:`Starter`, the one factory every start goes through (the
Docker engine's in :mod:`.starter`, Harbor's in :mod:`.harbor`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from .base import Sandbox


@dataclass(frozen=True)
class ContainerSpec:
    """How a task's container starts; equal specs start interchangeable containers (the warm
    pool keys on it)."""

    image: str
    workdir: str | None = None
    cpus: float | None = None
    memory_mb: int | None = None
    network: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    pids_limit: int | None = None
    storage_mb: int | None = None


@dataclass(frozen=True)
class ComposeSpec:
    """What a compose task's project adds to main's :class:`ContainerSpec`."""

    compose_file: Path
    no_network: bool = False
    compose_env: Mapping[str, str] = field(default_factory=dict)
    timeout_s: float = 600
    build_network: str | None = None  # where the sidecars the task builds build
    prebuilt: str | None = None  # a docker_image task's image (Harbor's PREBUILT_IMAGE_NAME)


class Starter(Protocol):
    """Starts environments: a container for ``spec``, or the compose project around it."""

    def start(
        self,
        spec: ContainerSpec,
        *,
        task_id: str | None,
        labels: Mapping[str, str] | None = None,
        compose: ComposeSpec | None = None,
    ) -> Sandbox:
        """A running, prepared environment; ``task_id`` None: a warm-pool container for
        whichever task asks first. Raises :class:`.errors.SandboxError`."""
        ...
